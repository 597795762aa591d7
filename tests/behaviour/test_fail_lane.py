"""Failing a lane, on every store."""

from __future__ import annotations

import pytest

from tests.support import job
from tests.support.engine import Engine
from tickwork import FailLaneResult, InvalidArgument, TickResult


async def test_fails_queued_and_running_jobs_of_the_lane_only(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("done", queue="q0", lane="bad"))
    await runtime.tick()  # settled history in the lane
    await runtime.ingest(job("running", queue="q1", lane="bad", payload={"do": "block"}))
    await runtime.ingest(job("queued", queue="q2", lane="bad"))
    await runtime.ingest(job("other", queue="q3", lane="good"))
    tick = await engine.start(runtime, "running")
    assert await runtime.fail_lane("bad", "tenant_suspended") == FailLaneResult(2, False)
    for job_id in ("running", "queued"):
        record = await runtime.read(job_id)
        assert record is not None
        assert (record.outcome, record.failure_reason) == ("failed", "tenant_suspended")
    done = await runtime.read("done")
    assert done is not None and (done.outcome, done.failure_reason) == ("completed", None)
    other = await runtime.read("other")
    assert other is not None and other.state == "queued"
    # The local execution was told to stop once the failure committed; its
    # tick reports the committed failure, and nothing overwrites it.
    assert engine.executor.signals["running"].reason == "lane_failed"
    assert await tick == TickResult("settled", job_id="running", outcome="failed",
                                    failure_reason="tenant_suspended")
    record = await runtime.read("running")
    assert record is not None and record.failure_reason == "tenant_suspended"
    assert (await runtime.tick()).job_id == "other"


async def test_batches_of_256_running_first_then_oldest(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest_many([job(f"j{index:03}", queue=f"q{index}", lane="bad")
                               for index in range(100)])
    await runtime.ingest_many([job(f"j{index:03}", queue=f"q{index}", lane="bad")
                               for index in range(100, 200)])
    await runtime.ingest_many([job(f"j{index:03}", queue=f"q{index}", lane="bad")
                               for index in range(200, 300)])
    await runtime.ingest(job("safe", lane="fine"))
    await runtime.ingest(job("blocker", queue="r", lane="bad", priority=10,
                             payload={"do": "block"}))
    tick = await engine.start(runtime, "blocker")
    assert await runtime.fail_lane("bad", "r1") == FailLaneResult(256, True)
    rows = await engine.rows("SELECT job_id FROM tickwork_jobs WHERE state = 'settled'"
                             " ORDER BY sequence")
    failed = {row[0] for row in rows}
    assert "blocker" in failed  # running first...
    assert failed - {"blocker"} == {f"j{i:03}" for i in range(255)}  # ...then oldest queued
    assert await runtime.fail_lane("bad", "r1") == FailLaneResult(45, False)
    assert (await tick).failure_reason == "r1"
    wakes = engine.wake.calls
    assert await runtime.fail_lane("bad", "r1") == FailLaneResult(0, False)
    assert engine.wake.calls == wakes  # exhausted: nothing changed
    states = await engine.job_states()
    assert states.pop("safe") == ("queued", None)
    assert set(states.values()) == {("settled", "failed")}
    # A later ingest into the lane is new work, not a permanent refusal.
    assert await runtime.ingest(job("fresh", lane="bad")) == "queued"
    assert (await runtime.drain())[-1].outcome == "completed"


@pytest.mark.parametrize(
    ("lane", "reason", "field"),
    [("", "r", "lane"), ("l" * 513, "r", "lane"), ("l", "", "reason"), ("l", "r" * 257, "reason")],
)
async def test_bad_arguments_change_nothing(engine: Engine, lane: str, reason: str,
                                            field: str) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("a", lane="l"))
    with pytest.raises(InvalidArgument) as caught:
        await runtime.fail_lane(lane, reason)
    assert caught.value.field == field
    record = await runtime.read("a")
    assert record is not None and record.state == "queued"
