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
from collections.abc import Callable
from types import CoroutineType
from typing import Any, TypeVar

from tickwork import lifecycle
from tickwork.model.jobs import JobRecord
from tickwork.model.signals import AbortSignal

SignalT = TypeVar("SignalT", bound=AbortSignal)

logger = logging.getLogger("tickwork.execution")


async def run_executor(
    execute: Callable[[JobRecord, SignalT], Any], job: JobRecord, signal: SignalT
) -> tuple[lifecycle.Settlement, asyncio.CancelledError | None]:
    """Run ``execute(job, signal)``; the settlement it earns, and the
    interruption to re-raise once that settlement is written (or None)."""
    try:
        result: Any = execute(job, signal)
        # A coroutine (the common executor) without isawaitable's call.
        if type(result) is CoroutineType or inspect.isawaitable(result):
            result = await result
        return lifecycle.settlement_for_result(result), None
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
