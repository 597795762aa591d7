"""ExecutorRegistry: maps a job to the async function that executes it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, overload

from tickwork.model.jobs import JobRecord
from tickwork.model.outcomes import ExecutionResult, Failed
from tickwork.model.signals import AbortSignal

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
        self._by_queue: dict[str, Executor] = {}
        self._by_field: dict[str, Executor] = {}

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
            self._by_queue[name] = chosen
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
            self._by_field[name] = chosen
            return chosen

        return register if executor is None else register(executor)

    def executor_for(self, job: JobRecord) -> Executor | None:
        if self.field is not None and isinstance(job.payload, Mapping):
            kind = job.payload.get(self.field)
            if isinstance(kind, str) and kind in self._by_field:
                return self._by_field[kind]
        return self._by_queue.get(job.queue, self.fallback)

    async def __call__(self, job: JobRecord, signal: AbortSignal) -> ExecutionResult:
        executor = self.executor_for(job)
        if executor is None:
            return Failed(NO_EXECUTOR)
        return await executor(job, signal)


def _name(what: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty string, got {value!r}")
    return value
