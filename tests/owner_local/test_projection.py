"""Behaviour 8, 10, 11: transactional projection, purge, wake."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.support import Harness, job
from tickwork import FailLaneResult, IngestConflict, QueueTransition, TickResult


class ProjectorError(Exception):
    pass


def table_rows(harness: Harness) -> list[tuple[Any, ...]]:
    return harness.host_query("SELECT * FROM tickwork_jobs ORDER BY sequence")


def status_table(harness: Harness) -> None:
    harness.host_execute(
        "CREATE TABLE IF NOT EXISTS queue_status (queue TEXT PRIMARY KEY, head TEXT, last TEXT)"
    )


def writing_projector(harness: Harness, fail_when: Any = None) -> Any:
    """Keeps a per-queue status row in step; raises after writing when told to."""

    def project(transition: QueueTransition) -> None:
        harness.host_execute(
            "INSERT INTO queue_status (queue, head, last) VALUES (?, ?, ?) "
            "ON CONFLICT (queue) DO UPDATE SET head = excluded.head, "
            "last = coalesce(excluded.last, queue_status.last)",
            (transition.queue, transition.head.job_id if transition.head else None,
             transition.settled.job_id if transition.settled else None),
        )
        if fail_when is not None and fail_when(transition):
            raise ProjectorError("projection refused")

    return project


async def test_every_transition_projects_the_queue_head(harness: Harness) -> None:
    runtime = harness.runtime(project=harness.recording_projector())
    runtime.ingest(job("a", queue="q"))
    runtime.ingest(job("b", queue="q"))
    runtime.ingest(job("a", queue="q"))  # duplicate: nothing changed, nothing projected
    assert len(harness.projections) == 2
    await runtime.tick()
    runtime.cancel("b", "c1")
    await runtime.tick()
    runtime.ingest(job("c", queue="q"))
    runtime.purge("q")
    summary = [
        (t.queue, t.head.job_id if t.head else None, t.head.state if t.head else None,
         t.settled.job_id if t.settled else None)
        for t in harness.projections
    ]
    assert summary == [
        ("q", "a", "queued", None),  # ingest a
        ("q", "a", "queued", None),  # ingest b (a still heads)
        ("q", "a", "running", None),  # claim a
        ("q", "b", "queued", "a"),  # settle a
        ("q", "b", "queued", None),  # cancellation of b recorded
        ("q", None, None, "b"),  # b settled cancelled
        ("q", "c", "queued", None),  # ingest c
        ("q", None, None, None),  # purge
    ]
    settled = harness.projections[3].settled
    assert settled is not None and settled.outcome == "completed"


@pytest.mark.parametrize("operation", ["ingest", "claim", "settle", "cancel", "fail_lane",
                                       "purge", "cancelled_settle"])
async def test_projector_error_rolls_back_the_whole_transition(
    harness: Harness, operation: str
) -> None:
    status_table(harness)
    failing = {"flag": False}
    runtime = harness.runtime(
        project=writing_projector(harness, lambda transition: failing["flag"]))
    runtime.ingest(job("a", queue="q", lane="l", payload={"do": "block"}))
    runtime.ingest(job("b", queue="q2", lane="l"))
    if operation == "settle":
        tick = asyncio.create_task(runtime.tick())
        await asyncio.sleep(0.01)
    if operation == "cancelled_settle":
        runtime.cancel("b", "c1")
    before_jobs = harness.host_query("SELECT * FROM tickwork_jobs ORDER BY sequence")
    before_status = harness.host_query("SELECT * FROM queue_status ORDER BY queue")
    failing["flag"] = True
    with pytest.raises(ProjectorError):
        if operation == "ingest":
            runtime.ingest(job("c", queue="q3"))
        elif operation == "claim":
            await runtime.tick()
        elif operation == "settle":
            harness.executor.release("a")
            await tick
        elif operation == "cancel":
            runtime.cancel("a", "c9")
        elif operation == "fail_lane":
            runtime.fail_lane("l", "refused")
        elif operation == "purge":
            runtime.purge("q2")
        elif operation == "cancelled_settle":
            await runtime.tick()
    assert harness.host_query("SELECT * FROM tickwork_jobs ORDER BY sequence") == before_jobs
    assert harness.host_query("SELECT * FROM queue_status ORDER BY queue") == before_status


def test_async_projector_is_refused_and_rolls_back(harness: Harness) -> None:
    async def project(transition: QueueTransition) -> None:
        pass

    runtime = harness.runtime(project=project)
    with pytest.raises(TypeError, match="synchronous"):
        runtime.ingest(job("a"))
    assert runtime.read("a") is None


async def test_purge_deletes_only_the_queues_waiting_jobs(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("done", queue="q"))
    await runtime.tick()
    runtime.ingest(job("running", queue="q", payload={"do": "block"}))
    tick = asyncio.create_task(runtime.tick())
    await asyncio.sleep(0.01)
    runtime.ingest(job("waiting-1", queue="q"))
    runtime.ingest(job("waiting-2", queue="q"))
    runtime.ingest(job("elsewhere", queue="other"))
    assert runtime.purge("q") == 2
    assert runtime.read("waiting-1") is None and runtime.read("waiting-2") is None
    assert runtime.read("done") is not None and runtime.read("elsewhere") is not None
    assert runtime.purge("q") == 0
    harness.executor.release("running")
    assert (await tick).outcome == "completed"
    # A purged id is free to be enqueued again as new work.
    assert runtime.ingest(job("waiting-1", queue="q")) == "queued"


async def test_wake_after_every_durable_change(harness: Harness) -> None:
    runtime = harness.runtime()
    wake = harness.wake
    base = wake.calls
    runtime.ingest(job("a"))
    assert wake.calls == base + 1
    runtime.ingest(job("a"))  # duplicate: nothing changed, but a replay wakes too
    assert wake.calls == base + 2
    runtime.cancel("missing", "c")
    assert wake.calls == base + 2
    runtime.ingest(job("b", queue="other"))
    runtime.cancel("b", "c")
    assert wake.calls == base + 4
    await runtime.tick()  # settles the cancellation
    assert wake.calls == base + 5
    await runtime.tick()  # runs a
    assert wake.calls == base + 6
    assert await runtime.tick() == TickResult("idle")
    assert wake.calls == base + 6
    runtime.ingest(job("c", lane="x"))
    runtime.fail_lane("x", "r")
    assert wake.calls == base + 8
    runtime.fail_lane("x", "r")  # nothing left
    runtime.purge("nothing-here")
    assert wake.calls == base + 8


async def test_async_wake_is_awaited_or_scheduled(harness: Harness) -> None:
    recomputed: list[str] = []

    class AsyncWake:
        async def recompute(self) -> None:
            await asyncio.sleep(0)
            recomputed.append("wake")

    runtime = harness.runtime(wake=AsyncWake())
    runtime.ingest(job("a"))  # synchronous API: scheduled as a task
    await asyncio.sleep(0.01)
    assert recomputed == ["wake"]
    await runtime.tick()  # async API: awaited before returning
    assert recomputed == ["wake", "wake"]


def test_has_pending_work(harness: Harness) -> None:
    runtime = harness.runtime()
    assert runtime.has_pending_work() is False
    runtime.ingest(job("a"))
    assert runtime.has_pending_work() is True
    runtime.purge("q")
    assert runtime.has_pending_work() is False


def test_a_conflict_in_the_middle_stores_nothing(harness: Harness) -> None:
    projector = harness.recording_projector()
    runtime = harness.runtime(project=projector)
    runtime.ingest(job("stored", payload={"v": 1}))
    rows = table_rows(harness)
    projections, wakes = len(harness.projections), harness.wake.calls
    with pytest.raises(IngestConflict) as caught:
        runtime.ingest_many([job("first"), job("second", queue="elsewhere"),
                             job("stored", priority=4, payload={"v": 1}), job("last")])
    assert (caught.value.job_id, caught.value.fields) == ("stored", ("priority",))
    assert table_rows(harness) == rows
    assert runtime.read("first") is None and runtime.read("last") is None
    assert harness.wake.calls == wakes
    # The projector ran for the first two inside the transaction that rolled back.
    assert [t.queue for t in harness.projections[projections:]] == ["q", "elsewhere"]


def test_the_projector_runs_in_the_same_transaction(harness: Harness) -> None:
    seen: list[QueueTransition] = []

    def project(transition: QueueTransition) -> None:
        seen.append(transition)
        if transition.head is not None and transition.head.job_id == "boom":
            raise RuntimeError("projection failed")

    runtime = harness.runtime(project=project)
    assert runtime.ingest_many([job("a", queue="q1"), job("b", queue="q2")]) == [
        "queued", "queued"]
    assert [(t.queue, t.head.job_id if t.head else None) for t in seen] == [
        ("q1", "a"), ("q2", "b")]
    with pytest.raises(RuntimeError, match="projection failed"):
        runtime.ingest_many([job("c", queue="q3"), job("boom", queue="q4", priority=1)])
    assert runtime.read("c") is None and runtime.read("boom") is None


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
