"""Behaviour 3-4: selection order, one job at a time, honest outcomes."""

from __future__ import annotations

import asyncio

import pytest

from tests.support import Harness, job
from tickwork import Completed, Recovery, TickResult


async def drain(runtime, limit: int = 100) -> list[TickResult]:  # type: ignore[no-untyped-def]
    results = []
    for _ in range(limit):
        result = await runtime.tick()
        if result.status == "idle":
            return results
        results.append(result)
    raise AssertionError("runtime never went idle")


async def test_idle_when_nothing_is_queued(harness: Harness) -> None:
    assert await harness.runtime().tick() == TickResult("idle")


async def test_highest_priority_oldest_first_across_queues(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("low-old", queue="a", priority=1))
    runtime.ingest(job("high-old", queue="b", priority=5))
    runtime.ingest(job("low-new", queue="c", priority=1))
    runtime.ingest(job("high-new", queue="d", priority=5))
    runtime.ingest(job("negative", queue="e", priority=-3))
    await drain(runtime)
    assert harness.executor.started == ["high-old", "high-new", "low-old", "low-new", "negative"]


async def test_a_queue_runs_its_head_priority_then_enqueue_order(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("first", queue="q", priority=0))
    runtime.ingest(job("urgent", queue="q", priority=9))
    runtime.ingest(job("second", queue="q", priority=0))
    head = runtime.read_queue_head("q")
    assert head is not None and head.job_id == "urgent"
    await drain(runtime)
    assert harness.executor.started == ["urgent", "first", "second"]
    assert runtime.read_queue_head("q") is None


async def test_running_job_is_its_queue_head_and_blocks_the_queue(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("blocker", queue="q", payload={"do": "block"}))
    tick = asyncio.create_task(runtime.tick())
    await asyncio.sleep(0.01)
    runtime.ingest(job("better", queue="q", priority=100))
    head = runtime.read_queue_head("q")
    assert head is not None and (head.job_id, head.state) == ("blocker", "running")
    harness.executor.release("blocker")
    assert (await tick).job_id == "blocker"
    head = runtime.read_queue_head("q")
    assert head is not None and head.job_id == "better"


async def test_second_tick_while_one_runs_is_busy(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("slow", queue="a", payload={"do": "block"}))
    runtime.ingest(job("other", queue="b"))
    first = asyncio.create_task(runtime.tick())
    await asyncio.sleep(0.01)
    assert await runtime.tick() == TickResult("busy")
    assert harness.executor.started == ["slow"]
    harness.executor.release("slow")
    assert (await first).job_id == "slow"
    assert (await runtime.tick()).job_id == "other"
    assert harness.executor.max_running == 1


async def test_many_concurrent_ticks_never_execute_in_parallel(harness: Harness) -> None:
    runtime = harness.runtime()
    for index in range(20):
        runtime.ingest(job(f"j{index}", queue=f"q{index % 4}"))
    settled: list[str] = []
    while len(settled) < 20:
        results = await asyncio.gather(*(runtime.tick() for _ in range(5)))
        settled += [r.job_id for r in results if r.status == "settled" and r.job_id]
        assert sum(r.status == "settled" for r in results) <= 1
    assert sorted(settled) == sorted(f"j{i}" for i in range(20))
    assert harness.executor.max_running == 1


@pytest.mark.parametrize(
    ("payload", "outcome", "reason"),
    [
        ({"do": "complete"}, "completed", None),
        ({"do": "fail", "reason": "bad_address"}, "failed", "bad_address"),
        ({"do": "fail"}, "failed", None),
        ({"do": "unknown"}, "outcome_unknown", None),
        ({"do": "cancel"}, "cancelled", None),
        ({"do": "raise"}, "failed", "execution_failed"),
        ({"do": "invalid"}, "failed", "invalid_outcome"),
    ],
)
async def test_executor_result_becomes_the_outcome(
    harness: Harness, payload: dict[str, str], outcome: str, reason: str | None
) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("a", payload=payload))
    result = await runtime.tick()
    assert result == TickResult("settled", job_id="a", outcome=outcome,  # type: ignore[arg-type]
                                failure_reason=reason)
    record = runtime.read("a")
    assert record is not None
    assert (record.state, record.outcome, record.failure_reason) == ("settled", outcome, reason)
    assert record.started_at is not None and record.settled_at is not None
    assert record.settled_at >= record.started_at >= record.enqueued_at
    assert await runtime.tick() == TickResult("idle")
    assert harness.executor.started == ["a"]


async def test_interrupted_tick_settles_failed_interrupted_and_reraises(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("a", payload={"do": "block"}))
    tick = asyncio.create_task(runtime.tick())
    await asyncio.sleep(0.01)
    tick.cancel()
    with pytest.raises(asyncio.CancelledError):
        await tick
    record = runtime.read("a")
    assert record is not None
    assert (record.outcome, record.failure_reason) == ("failed", "execution_interrupted")
    assert harness.executor.signals["a"].reason == "interrupted"
    assert await runtime.tick() == TickResult("idle")


async def test_a_stale_claim_can_never_settle(harness: Harness) -> None:
    """The settle write matches the exact claim token: a replaced claim writes
    nothing, and its tick does not report the other runtime's settlement as
    its own (claim_replaced, as the shared runtimes say)."""
    first = harness.runtime()
    first.ingest(job("a", payload={"do": "block"}, recovery=None))
    tick = asyncio.create_task(first.tick())
    await asyncio.sleep(0.01)
    # A second runtime over the same database decides the claim is gone.
    harness.open()
    second = harness.runtime()
    assert (await second.tick()).outcome == "interrupted"
    # The first runtime's executor now finishes: its settle must not land.
    harness.executor.release("a", Completed())
    result = await tick
    record = second.read("a")
    assert record is not None and record.outcome == "interrupted"
    assert result == TickResult("idle", job_id="a", reason="claim_replaced")


async def test_sync_executor_result_is_accepted(harness: Harness) -> None:
    runtime = harness.runtime(execute=lambda job, signal: Completed())
    runtime.ingest(job("a"))
    assert (await runtime.tick()).outcome == "completed"


async def test_a_claim_requeued_elsewhere_reports_claim_replaced(harness: Harness) -> None:
    """The executor of a claim that was recovered meanwhile finishes: nothing is
    written, the tick says so, and the job runs again under its new claim."""
    first = harness.runtime()
    first.ingest(job("a", payload={"do": "block"}, recovery=Recovery(1)))
    tick = asyncio.create_task(first.tick())
    await asyncio.sleep(0.01)
    harness.open()
    second = harness.runtime()
    assert await second.tick() == TickResult("requeued", job_id="a")
    harness.executor.release("a", Completed())
    assert await tick == TickResult("idle", job_id="a", reason="claim_replaced")
    record = second.read("a")
    assert record is not None and (record.state, record.recoveries) == ("queued", 1)
    assert (await second.tick()).outcome == "completed"

