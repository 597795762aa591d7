"""Deterministic executors for ``tickwork serve``
(``--executors tests.support.serve_executors:registry``).

Chosen by ``payload["kind"]``:

* ``complete``: Completed.
* ``fail``: Failed(payload.get("reason", "boom")).
* ``raise``: raises (the engine settles failed / execution_failed).
* ``unknown``: OutcomeUnknown.
* ``slow``: waits until aborted (Cancelled), or ``payload["ms"]`` ms (Completed).
* ``block_once``: the first run creates ``payload["marker"]`` and waits until
  aborted; any later run (after a crash and recovery) completes at once.
* ``sleep_plain``: a plain (not async) function that blocks in
  ``time.sleep(payload["ms"] / 1000)``, then Completed.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from tickwork import Cancelled, Completed, Failed, JobRecord, OutcomeUnknown
from tickwork.executors import ExecutorRegistry
from tickwork.model.outcomes import ExecutionResult

registry = ExecutorRegistry(field="kind")


async def _wait_for_abort(signal: Any, ms: float | None) -> bool:
    """True when the signal aborted, False when ``ms`` passed first."""
    waiter = asyncio.ensure_future(signal.wait())
    try:
        done, _ = await asyncio.wait({waiter}, timeout=None if ms is None else ms / 1000)
    finally:
        waiter.cancel()
    return bool(done) or signal.aborted


async def complete(job: JobRecord, signal: Any) -> ExecutionResult:
    return Completed()


async def fail(job: JobRecord, signal: Any) -> ExecutionResult:
    return Failed(job.payload.get("reason", "boom"))


async def explode(job: JobRecord, signal: Any) -> ExecutionResult:
    raise RuntimeError("the test executor raised")


async def unknown(job: JobRecord, signal: Any) -> ExecutionResult:
    return OutcomeUnknown()


async def slow(job: JobRecord, signal: Any) -> ExecutionResult:
    if await _wait_for_abort(signal, job.payload.get("ms")):
        return Cancelled()
    return Completed()


async def block_once(job: JobRecord, signal: Any) -> ExecutionResult:
    marker = Path(job.payload["marker"])
    if marker.exists():
        return Completed()
    marker.write_text(job.job_id)
    await _wait_for_abort(signal, None)
    return Cancelled()


def sleep_plain(job: JobRecord, signal: Any) -> ExecutionResult:
    time.sleep(job.payload["ms"] / 1000)
    return Completed()


for _kind, _executor in {"complete": complete, "fail": fail, "raise": explode,
                         "unknown": unknown, "slow": slow, "block_once": block_once,
                         "sleep_plain": sleep_plain}.items():
    registry.on_field(_kind, _executor)


def make_registry() -> ExecutorRegistry:
    """A factory taking no arguments
    (``--executors tests.support.serve_executors:make_registry``)."""
    return registry
