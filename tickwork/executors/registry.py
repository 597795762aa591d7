"""ExecutorRegistry: maps a job to the async function that executes it."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, overload

from tickwork.model.jobs import JobRecord
from tickwork.model.outcomes import ExecutionResult, Failed
from tickwork.model.signals import AbortSignal
from tickwork.runtimes.execution import nonblocking

#: Failure reason of a job no executor is registered for.
NO_EXECUTOR = "no_executor"

Executor = Callable[[JobRecord, Any], Awaitable[ExecutionResult]]


class ExecutorRegistry:
    """Chooses an executor per job, and is itself an executor.

    A payload field match (``field``, when set and the payload is an object
    holding it) wins over a queue match; a job matching neither runs
    ``fallback`` if one is set, and otherwise fails with ``no_executor``
    (recorded, so the job is not retried forever by accident).
    """

    def __init__(self, *, field: str | None = None, fallback: Executor | None = None) -> None:
        self.field = field
        self.fallback = fallback
        # Each executor with what runs it: itself when async; a plain one as
        # nonblocking() makes it (in a worker thread on CPython), made once.
        self._by_queue: dict[str, tuple[Executor, Executor]] = {}
        self._by_field: dict[str, tuple[Executor, Executor]] = {}
        self._fallback: tuple[Executor, Executor] | None = None

    @overload
    def on_queue(self, queue: str, executor: Executor) -> Executor: ...

    @overload
    def on_queue(self, queue: str) -> Callable[[Executor], Executor]: ...

    def on_queue(self, queue: str, executor: Executor | None = None
                 ) -> Executor | Callable[[Executor], Executor]:
        """Run jobs of ``queue`` with ``executor``; returns it. Without
        ``executor``, a decorator doing the same: ``@registry.on_queue("emails")``."""
        name = _name("queue", queue)

        def register(chosen: Executor) -> Executor:
            self._by_queue[name] = (chosen, nonblocking(chosen))
            return chosen

        return register if executor is None else register(executor)

    @overload
    def on_field(self, value: str, executor: Executor) -> Executor: ...

    @overload
    def on_field(self, value: str) -> Callable[[Executor], Executor]: ...

    def on_field(self, value: str, executor: Executor | None = None
                 ) -> Executor | Callable[[Executor], Executor]:
        """Run jobs whose ``payload[field] == value`` with ``executor`` (or, without
        it, a decorator doing the same)."""
        if self.field is None:
            raise ValueError("on_field needs a registry built with field=...")
        name = _name("value", value)

        def register(chosen: Executor) -> Executor:
            self._by_field[name] = (chosen, nonblocking(chosen))
            return chosen

        return register if executor is None else register(executor)

    def executor_for(self, job: JobRecord) -> Executor | None:
        """The executor registered for ``job`` (or the fallback), or None."""
        chosen = self._entry_for(job)
        return None if chosen is None else chosen[0]

    def _entry_for(self, job: JobRecord) -> tuple[Executor, Executor] | None:
        if self.field is not None and isinstance(job.payload, Mapping):
            kind = job.payload.get(self.field)
            if isinstance(kind, str) and kind in self._by_field:
                return self._by_field[kind]
        entry = self._by_queue.get(job.queue)
        if entry is not None:
            return entry
        fallback = self.fallback
        if fallback is None:
            return None
        if self._fallback is None or self._fallback[0] is not fallback:
            self._fallback = (fallback, nonblocking(fallback))
        return self._fallback

    async def __call__(self, job: JobRecord, signal: AbortSignal) -> ExecutionResult:
        entry = self._entry_for(job)
        if entry is None:
            return Failed(NO_EXECUTOR)
        # A plain (not async) executor works too: in a worker thread on
        # CPython, called directly on Workers (see runtimes/execution.py).
        result: Any = entry[1](job, signal)
        if inspect.isawaitable(result):
            result = await result
        return result  # type: ignore[no-any-return]


def _name(what: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    return value
