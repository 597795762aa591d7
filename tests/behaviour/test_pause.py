"""Pausing and resuming a queue, on every store.

A paused queue's jobs are not claimed (other queues run on), its running job
finishes, cancellations and lane failures still settle its jobs, and the
status reads say it is paused. Both calls are idempotent and durable.
"""

from __future__ import annotations

import pytest

from tests.support import job
from tests.support.engine import Engine
from tickwork import InvalidArgument


async def test_a_paused_queue_is_not_claimed_and_others_run_on(engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.ingest(job("a1", queue="a", priority=9))
    await jobs.ingest(job("b1", queue="b"))
    assert await jobs.pause("a") is True
    assert await jobs.pause("a") is False  # already paused: nothing changes
    result = await jobs.tick()
    assert (result.status, result.job_id) == ("settled", "b1")
    assert (await jobs.tick()).status == "idle"
    assert engine.executor.started == ["b1"]
    assert await jobs.has_pending_work() is False  # nothing a tick could do
    status = await jobs.queue_status("a")
    assert (status.queued, status.paused) == (1, True)
    head = await jobs.read_queue_head("a")
    assert head is not None and head.job_id == "a1"  # what runs first on resume
    assert await jobs.resume("a") is True
    assert await jobs.resume("a") is False
    assert (await jobs.queue_status("a")).paused is False
    result = await jobs.tick()
    assert (result.status, result.job_id) == ("settled", "a1")


async def test_pausing_is_durable_across_runtimes(engine: Engine) -> None:
    await engine.runtime().ingest(job("a1", queue="a"))
    assert await engine.runtime().pause("a") is True
    other = engine.another_process()
    assert (await other.queue_status("a")).paused is True
    assert (await other.tick()).status == "idle"
    assert await other.resume("a") is True
    assert (await engine.runtime().tick()).job_id == "a1"


async def test_the_running_job_of_a_paused_queue_finishes(engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.ingest(job("slow", queue="a", payload={"do": "block"}))
    await jobs.ingest(job("next", queue="a"))
    task = await engine.start(jobs, "slow")
    assert await jobs.pause("a") is True
    engine.executor.release("slow")
    result = await task
    assert (result.job_id, result.outcome) == ("slow", "completed")
    assert (await jobs.tick()).status == "idle"
    states = await engine.job_states()
    assert states == {"slow": ("settled", "completed"), "next": ("queued", None)}


async def test_cancellations_and_lane_failures_still_settle_a_paused_queue(
        engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.ingest(job("c", queue="a", lane="l1"))
    await jobs.ingest(job("f", queue="a", lane="l2"))
    await jobs.pause("a")
    assert (await jobs.cancel("c", "c-1")).status == "recorded"
    result = await jobs.tick()
    assert (result.job_id, result.outcome) == ("c", "cancelled")
    assert (await jobs.fail_lane("l2", "closed")).settled == 1
    assert await engine.job_states() == {"c": ("settled", "cancelled"),
                                         "f": ("settled", "failed")}
    assert engine.executor.started == []


async def test_status_of_every_queue_lists_paused_queues_even_without_jobs(
        engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.ingest(job("b1", queue="b"))
    await jobs.pause("empty")
    listed = {status.queue: status.paused for status in await jobs.status()}
    assert listed == {"b": False, "empty": True}
    empty = await jobs.queue_status("empty")
    assert (empty.queued, empty.paused) == (0, True)
    await jobs.resume("empty")
    assert [status.queue for status in await jobs.status()] == ["b"]


@pytest.mark.parametrize("queue", ["", "x" * 257, 5])
async def test_a_bad_queue_name_is_refused_by_name(engine: Engine, queue: object) -> None:
    jobs = engine.runtime()
    for operation in (jobs.pause, jobs.resume):
        with pytest.raises(InvalidArgument) as refused:
            await operation(queue)  # type: ignore[arg-type]
        assert refused.value.field == "queue"
