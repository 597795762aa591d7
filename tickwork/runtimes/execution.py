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
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable, Generator
from types import CoroutineType
from typing import Any, TypeVar

from tickwork import lifecycle
from tickwork.model.jobs import JobRecord
from tickwork.model.signals import AbortSignal

SignalT = TypeVar("SignalT", bound=AbortSignal)

logger = logging.getLogger("tickwork.execution")


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
