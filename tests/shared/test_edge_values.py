"""Every integer the shared runtimes accept reaches the store and comes back
exactly, at the bounds validation allows: +-(2**53 - 1).

On D1 each of these is bound through Pyodide's FFI, where the bounds
themselves cross as BigInt unless tickwork binds them as Numbers; the
real-Pyodide tier runs this module against Miniflare's D1 from inside
Pyodide.
"""

from __future__ import annotations

import asyncio

from tests.support import job
from tests.support.shared import SharedHarness, until
from tickwork import Recovery
from tickwork.model.jobs import MAX_SAFE_INTEGER as EDGE


async def test_priorities_and_budgets_at_the_bounds_are_stored_ordered_and_run(
    shared: SharedHarness,
) -> None:
    runtime = shared.runtime()
    assert await runtime.ingest_many([
        job("low", queue="q1", priority=-EDGE),
        job("high", queue="q2", priority=EDGE, recovery=Recovery(EDGE)),
        job("mid", queue="q3"),
    ]) == ["queued"] * 3
    # A replay of the same cargo compares equal at the bounds.
    assert await runtime.ingest(job("high", queue="q2", priority=EDGE,
                                    recovery=Recovery(EDGE))) == "duplicate"
    high = await runtime.read("high")
    assert high is not None and (high.priority, high.recovery) == (EDGE, Recovery(EDGE))
    head = await runtime.read_queue_head("q1")
    assert head is not None and head.priority == -EDGE
    order = [(await runtime.tick()).job_id for _ in range(3)]
    assert order == ["high", "mid", "low"]
    assert (await runtime.tick()).status == "idle"


async def test_the_longest_lease_and_renewal_period_claim_settle_and_renew(
    shared: SharedHarness,
) -> None:
    runtime = shared.runtime(lease_ms=EDGE, renew_every_ms=EDGE - 1)
    await runtime.ingest(job("a"))
    result = await runtime.tick()
    assert (result.status, result.outcome) == ("settled", "completed")
    # Another worker sees no expired lease to recover meanwhile.
    await runtime.ingest(job("b", payload={"do": "block"}))
    other = shared.runtime(lease_ms=EDGE, renew_every_ms=EDGE - 1)
    task = asyncio.create_task(runtime.tick())
    await until(lambda: "b" in shared.executor.started)
    heartbeat = shared.executor.signals["b"].heartbeat  # type: ignore[attr-defined]
    assert await heartbeat.beat(EDGE) is True
    assert (await other.tick()).status == "idle"
    shared.executor.release("b")
    assert (await task).outcome == "completed"


async def test_clock_readings_at_the_bounds_are_bound_exactly(shared: SharedHarness) -> None:
    # The test clock stands in for database time: its readings are bound too.
    shared.now.ms = EDGE
    runtime = shared.runtime()
    await runtime.ingest(job("late"))
    record = await runtime.read("late")
    assert record is not None and record.enqueued_at == EDGE
    shared.now.ms = -EDGE
    await runtime.ingest(job("early", queue="other"))
    early = await runtime.read("early")
    assert early is not None and early.enqueued_at == -EDGE
