"""A long job that stops when told to and heartbeats its lease while it works.

    from tickwork.executors.long_job import long_job

    registry.on_field("long", long_job)

Payload (other keys, such as a registry's ``kind``, are ignored)::

    {"steps": 10,        # integer, 1 to 10,000
     "step_ms": 1000}    # integer, 0 to 3,600,000: how long one step takes

A step here is a sleep standing in for real work (a page of an export, a
batch of rows). Between steps, and during a step's sleep, the executor
watches its abort signal; after each step it extends its lease when it has
one. This module is pure Python and runs unchanged on CPython and Pyodide.

Outcomes (exact):

=========================================================  ======================
What happened                                              Outcome
=========================================================  ======================
payload invalid (no step run)                              ``Failed("bad_payload")``
every step done                                            ``Completed()``
signal aborted (cancellation, failing a lane, interrupted)   ``Cancelled()``
lease lost: ``heartbeat.beat()`` returned False or         ``OutcomeUnknown()``
raised, ``heartbeat.stale`` is set, or the signal
aborted with a ``lease_*`` reason
=========================================================  ======================

Why ``OutcomeUnknown`` for a lost lease: the steps done so far have had their
effects, the job is not finished, and another worker may already be running
it again, so neither "done" nor "nothing happened" is true. In the usual case
the settlement is refused anyway (the claim expired or was replaced) and the
job is recovered by the next claim; it lands only when the lease was in fact
still live (a renewal that failed locally), and then it tells the operator to
look. A cancellation or failing a lane is a request to stop, so the executor
reports ``Cancelled`` (the engine settles a failed lane as its reason says).

Heartbeats: the shared runtimes (D1, PostgreSQL) hand executors a
``LeasedSignal`` whose ``heartbeat`` extends the claim's lease; owner-local
runtimes (a Durable Object, sqlite3) have no lease and no heartbeat, and
then none is sent. Each beat is one write to the store (one D1 query), so on
D1 keep ``steps`` well under the 1,000 queries a Worker invocation may make,
and ``step_ms`` in seconds rather than milliseconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from tickwork.model.jobs import JobRecord
from tickwork.model.outcomes import Cancelled, Completed, ExecutionResult, Failed, OutcomeUnknown
from tickwork.model.signals import AbortSignal

__all__ = ["BAD_PAYLOAD", "MAX_STEPS", "MAX_STEP_MS", "long_job"]

#: Failure reason of a job whose payload is not a valid long job.
BAD_PAYLOAD = "bad_payload"
MAX_STEPS = 10_000
MAX_STEP_MS = 3_600_000

#: Abort reasons of a lost lease start with this (see tickwork.leases.StaleReason).
_LEASE_REASON_PREFIX = "lease_"


async def long_job(job: JobRecord, signal: Any) -> ExecutionResult:
    """Run ``payload["steps"]`` steps of ``payload["step_ms"]`` each (see the module doc)."""
    plan = _plan(job.payload)
    if plan is None:
        return Failed(BAD_PAYLOAD)
    steps, step_ms = plan
    heartbeat = getattr(signal, "heartbeat", None)
    for _ in range(steps):
        if signal.aborted:
            return _stopped(signal)
        await _sleep_unless_aborted(step_ms, signal)
        if signal.aborted:
            return _stopped(signal)
        if heartbeat is not None:
            try:
                renewed = await heartbeat.beat()
            except Exception:
                return OutcomeUnknown()  # the renewal's outcome is unknown: stale
            if not renewed or heartbeat.stale is not None:
                return OutcomeUnknown()
    return Completed()


def _plan(payload: object) -> tuple[int, int] | None:
    if not isinstance(payload, Mapping):
        return None
    steps, step_ms = payload.get("steps"), payload.get("step_ms")
    for value, low, high in ((steps, 1, MAX_STEPS), (step_ms, 0, MAX_STEP_MS)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            return None
    assert isinstance(steps, int) and isinstance(step_ms, int)
    return steps, step_ms


def _stopped(signal: AbortSignal) -> ExecutionResult:
    reason = signal.reason or ""
    if reason.startswith(_LEASE_REASON_PREFIX):
        return OutcomeUnknown()
    return Cancelled()


async def _sleep_unless_aborted(step_ms: int, signal: AbortSignal) -> None:
    if step_ms == 0:
        await asyncio.sleep(0)
        return
    aborted = asyncio.ensure_future(signal.wait())
    try:
        await asyncio.wait({aborted}, timeout=step_ms / 1000)
    finally:
        aborted.cancel()
