"""Behaviour 7: lane refusal."""

from __future__ import annotations

import asyncio

import pytest

from tests.support import Harness, job
from tickwork import FailLaneResult, InvalidArgument, TickResult


async def test_refuses_queued_and_running_jobs_of_the_lane_only(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("done", queue="q0", lane="bad"))
    await runtime.tick()  # settled history in the lane
    runtime.ingest(job("running", queue="q1", lane="bad", payload={"do": "block"}))
    runtime.ingest(job("queued", queue="q2", lane="bad"))
    runtime.ingest(job("other", queue="q3", lane="good"))
    tick = asyncio.create_task(runtime.tick())
    await asyncio.sleep(0.01)
    assert harness.executor.started[-1] == "running"
    assert runtime.fail_lane("bad", "tenant_suspended") == FailLaneResult(2, False)
    for job_id in ("running", "queued"):
        record = runtime.read(job_id)
        assert record is not None
        assert (record.outcome, record.failure_reason) == ("failed", "tenant_suspended")
    done = runtime.read("done")
    assert done is not None and (done.outcome, done.failure_reason) == ("completed", None)
    other = runtime.read("other")
    assert other is not None and other.state == "queued"
    # The local executor was interrupted after the refusal committed; its
    # tick reports the committed failure.
    assert harness.executor.signals["running"].reason == "lane_failed"
    assert await tick == TickResult("settled", job_id="running", outcome="failed",
                                    failure_reason="tenant_suspended")
    record = runtime.read("running")
    assert record is not None and record.failure_reason == "tenant_suspended"
    assert (await runtime.tick()).job_id == "other"


async def test_the_replaced_claim_cannot_overwrite_the_refusal(harness: Harness) -> None:
    async def ignores_signal(job, signal):  # type: ignore[no-untyped-def]
        await signal.wait()
        await asyncio.sleep(0)
        from tickwork import Completed

        return Completed()

    projector = harness.recording_projector()
    runtime = harness.runtime(execute=ignores_signal, project=projector)
    runtime.ingest(job("a", lane="bad"))
    tick = asyncio.create_task(runtime.tick())
    await asyncio.sleep(0.01)
    runtime.fail_lane("bad", "refused")
    refusal_projections = len(harness.projections)
    result = await tick
    assert (result.outcome, result.failure_reason) == ("failed", "refused")
    record = runtime.read("a")
    assert record is not None and (record.outcome, record.failure_reason) == ("failed", "refused")
    # Reported without projecting the failure a second time.
    assert len(harness.projections) == refusal_projections


async def test_batches_of_256_running_first(harness: Harness) -> None:
    runtime = harness.runtime(project=harness.recording_projector())
    for index in range(300):
        runtime.ingest(job(f"j{index:03}", queue=f"q{index}", lane="bad"))
    runtime.ingest(job("blocker", queue="r", lane="bad", priority=10, payload={"do": "block"}))
    tick = asyncio.create_task(runtime.tick())
    await asyncio.sleep(0.01)
    harness.projections.clear()
    assert runtime.fail_lane("bad", "r1") == FailLaneResult(256, True)
    settled_ids = [t.settled.job_id for t in harness.projections if t.settled]
    assert len(harness.projections) == 256  # once per changed job
    assert settled_ids[0] == "blocker"  # running first, then oldest queued
    assert settled_ids[1:] == [f"j{i:03}" for i in range(255)]
    assert runtime.fail_lane("bad", "r1") == FailLaneResult(45, False)
    harness.projections.clear()
    assert runtime.fail_lane("bad", "r1") == FailLaneResult(0, False)
    assert harness.projections == []  # exhausted: no projector call
    await tick
    # A later enqueue is new work, not a permanent refusal.
    assert runtime.ingest(job("fresh", lane="bad")) == "queued"
    assert (await runtime.tick()).outcome == "completed"


@pytest.mark.parametrize(
    ("lane", "reason", "field"),
    [("", "r", "lane"), ("l" * 513, "r", "lane"), ("l", "", "reason"), ("l", "r" * 257, "reason")],
)
def test_bad_arguments(harness: Harness, lane: str, reason: str, field: str) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("a", lane="l"))
    with pytest.raises(InvalidArgument) as caught:
        runtime.fail_lane(lane, reason)
    assert caught.value.field == field
    record = runtime.read("a")
    assert record is not None and record.state == "queued"
