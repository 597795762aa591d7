"""Running an executor: the one step both runtimes share between claim and settle.

The executor's result (or its exception) becomes the settlement to record,
by the rules of ``lifecycle``. If the tick itself is cancelled while the
executor runs (host shutdown), the executor is told to stop through its
signal, the interruption is recorded, and the caller re-raises it after
settling.

An executor that raises is logged here, once per raise, on the
``tickwork.execution`` logger (level ERROR, with the traceback), naming the
job; writing its settlement (however often a store retries that) logs
nothing more.

A plain (not ``async``) executor is welcome: ``nonblocking(execute)`` is how
the runtimes and ``ExecutorRegistry`` take it. On CPython it runs in a worker
thread (``asyncio.to_thread``), so a blocking call (``time.sleep``, a sync
HTTP client, a heavy computation) never holds the event loop and the host's
other owners, requests and timers; where threads do not run (Pyodide, so
Workers and Durable Objects), it is called directly and holds its event
until it returns.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
from collections.abc import Awaitable, Callable, Generator
from types import CoroutineType
from typing import Any, TypeVar

from tickwork import lifecycle
from tickwork.model.jobs import JobRecord
from tickwork.model.signals import AbortSignal

SignalT = TypeVar("SignalT", bound=AbortSignal)

logger = logging.getLogger("tickwork.execution")

#: Whether a plain executor runs in a worker thread (not on Pyodide: no threads).
THREADED_PLAIN_EXECUTORS = sys.platform != "emscripten"

F = TypeVar("F", bound=Callable[..., Any])


def is_async_executor(execute: object) -> bool:
    """True for an ``async def`` function (or a partial of one), and for an
    object whose ``__call__`` is one (an ``ExecutorRegistry``)."""
    # The method itself is inspected here, not whether execute is callable.
    method = getattr(type(execute), "__call__", None)  # noqa: B004
    return inspect.iscoroutinefunction(execute) or inspect.iscoroutinefunction(method)


def nonblocking(execute: F) -> F:
    """``execute`` as the runtimes call it: an async executor unchanged; a
    plain one, on CPython, run in a worker thread (its result awaited too if
    it is awaitable); elsewhere unchanged (``run_executor`` takes a plain
    result). A plain executor in a thread cannot be interrupted: it should
    look at ``signal.aborted`` between steps of long work."""
    if not THREADED_PLAIN_EXECUTORS or is_async_executor(execute):
        return execute

    async def in_a_thread(job: JobRecord, signal: AbortSignal) -> Any:
        result = await asyncio.to_thread(execute, job, signal)
        if inspect.isawaitable(result):
            result = await result
        return result

    in_a_thread.__qualname__ = f"nonblocking({getattr(execute, '__qualname__', execute)!s})"
    return in_a_thread  # type: ignore[return-value]


async def call_executor(execute: Callable[..., Any], job: JobRecord, signal: AbortSignal,
                        ) -> Any:
    """``execute(job, signal)``'s result, whether ``execute`` is async or plain
    (plain: in a worker thread on CPython, see ``nonblocking``)."""
    result: Any = nonblocking(execute)(job, signal)
    if inspect.isawaitable(result):
        awaited: Awaitable[Any] = result
        result = await awaited
    return result


async def run_executor(
    execute: Callable[[JobRecord, SignalT], Any], job: JobRecord, signal: SignalT,
    *, on_suspend: Callable[[], None] | None = None,
) -> tuple[lifecycle.Settlement, asyncio.CancelledError | None]:
    """Run ``execute(job, signal)``; the settlement it earns, and the
    interruption to re-raise once that settlement is written (or None).

    ``on_suspend`` is called once, just before the executor first waits (its
    awaitable first yields to the event loop), and never if it finishes
    without waiting: until then no timer or other task can run, so what
    only matters while the loop runs (lease timers) can be set up then."""
    try:
        result: Any = execute(job, signal)
        # A coroutine (the common executor) without isawaitable's call.
        if type(result) is CoroutineType or inspect.isawaitable(result):
            result = await (result if on_suspend is None
                            else _SuspendHook(result.__await__(), on_suspend))
        return lifecycle.settlement_for_result(result), None
    except _HookFailed as failed:
        raise failed.error from None  # the runtime's failure, not the executor's
    except asyncio.CancelledError as error:
        signal._abort(lifecycle.ABORT_INTERRUPTED)
        return lifecycle.settlement_for_exception(error), error
    except Exception as error:
        settlement = lifecycle.settlement_for_exception(error)
        summary = settlement.error
        assert summary is not None  # every raise that is no interruption has one
        logger.error("job %s (queue %s) attempt %d raised %s: %s", job.job_id, job.queue,
                     job.attempt, summary.type, summary.message, exc_info=error)
        return settlement, None


class _SuspendHook:
    """Awaits an awaitable's iterator, calling ``on_suspend`` once just
    before the first time it yields; then passes every value, result and
    exception through, as ``await`` itself would."""

    __slots__ = ("_inner", "_on_suspend")

    def __init__(self, inner: Generator[Any, Any, Any], on_suspend: Callable[[], None]) -> None:
        self._inner = inner
        self._on_suspend = on_suspend

    def __await__(self) -> Generator[Any, Any, Any]:
        inner = self._inner
        try:
            yielded = inner.send(None)
        except StopIteration as stop:
            return stop.value  # finished without waiting: no hook
        try:
            self._on_suspend()
        except BaseException as error:
            inner.close()  # the executor never resumes: let it clean up
            raise _HookFailed(error) from error
        try:
            while True:
                try:
                    sent = yield yielded
                except GeneratorExit:
                    inner.close()
                    raise
                except BaseException as error:  # thrown in (a cancellation): the executor's
                    yielded = inner.throw(error)
                else:
                    yielded = inner.send(sent)
        except StopIteration as stop:
            return stop.value


class _HookFailed(Exception):
    """``on_suspend`` raised ``error`` (run_executor raises it as it is)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)
        self.error = error
