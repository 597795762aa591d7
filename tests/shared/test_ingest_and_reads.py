"""Ingest, reads, purge and validation on every shared store."""

from __future__ import annotations

import pytest

from tests.shared.support import SharedHarness
from tests.support import job
from tickwork import IngestConflict, InvalidArgument, InvalidJob, Job, Recovery


async def test_ingest_is_idempotent_and_conflicts_name_the_fields(shared: SharedHarness) -> None:
    runtime = shared.runtime()
    assert await runtime.ingest(job("a", payload={"b": 1, "a": [1, 2]})) == "queued"
    # Key order does not matter: payloads compare canonically.
    assert await runtime.ingest(job("a", payload={"a": [1, 2], "b": 1})) == "duplicate"
    with pytest.raises(IngestConflict) as conflict:
        await runtime.ingest(job("a", queue="other", priority=3, payload={"b": 1, "a": [1, 2]}))
    assert conflict.value.fields == ("queue", "priority")
    with pytest.raises(IngestConflict) as conflict:
        await runtime.ingest(job("a", payload={"b": 1, "a": [1, 2]}, recovery=Recovery(1)))
    assert conflict.value.fields == ("recovery",)
    stored = await runtime.read("a")
    assert stored is not None
    assert (stored.queue, stored.priority, stored.recovery) == ("q", 0, None)
    assert stored.state == "queued"
    assert stored.payload == {"a": [1, 2], "b": 1}


async def test_a_second_worker_sees_the_same_jobs(shared: SharedHarness) -> None:
    first, second = shared.runtime(), shared.runtime()
    await first.ingest(job("a", payload={"n": 1}))
    assert await second.ingest(job("a", payload={"n": 1})) == "duplicate"
    read = await second.read("a")
    assert read is not None and read.payload == {"n": 1}


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (Job("", "q", "l", 0, {}), "job_id"),
        (Job("x" * 257, "q", "l", 0, {}), "job_id"),
        (Job("a", "q", "l" * 513, 0, {}), "lane"),
        (Job("a", "q", "l", 2**53, {}), "priority"),
        (Job("a", "q", "l", 0, {"f": float("nan")}), "payload"),
        (Job("a", "q", "l", 0, {}, Recovery(-1)), "recovery.max_recoveries"),
    ],
)
async def test_invalid_jobs_are_refused_and_nothing_is_written(
    shared: SharedHarness, bad: Job, field: str
) -> None:
    runtime = shared.runtime()
    await runtime.ingest(job("keep"))
    with pytest.raises(InvalidJob) as error:
        await runtime.ingest(bad)
    assert error.value.field == field
    assert await shared.job_states() == {"keep": ("queued", None)}


async def test_reads_validate_their_arguments(shared: SharedHarness) -> None:
    runtime = shared.runtime()
    with pytest.raises(InvalidArgument):
        await runtime.read("")
    with pytest.raises(InvalidArgument):
        await runtime.read_queue_head("q" * 300)
    with pytest.raises(InvalidArgument):
        await runtime.cancel("a", "")
    with pytest.raises(InvalidArgument):
        await runtime.fail_lane("lane", "")
    with pytest.raises(InvalidArgument):
        await runtime.purge("")


async def test_queue_head_is_running_first_then_priority_then_age(shared: SharedHarness) -> None:
    runtime = shared.runtime()
    assert await runtime.read_queue_head("q") is None
    await runtime.ingest(job("low", priority=1))
    await runtime.ingest(job("high", priority=5))
    await runtime.ingest(job("high-later", priority=5))
    head = await runtime.read_queue_head("q")
    assert head is not None and head.job_id == "high"
    await runtime.ingest(job("urgent", priority=9, payload={"do": "block"}))
    import asyncio

    task = asyncio.create_task(runtime.tick())
    from tests.shared.support import until

    await until(lambda: "urgent" in shared.executor.started)
    await runtime.ingest(job("even-more-urgent", priority=99))
    head = await runtime.read_queue_head("q")
    assert head is not None and (head.job_id, head.state) == ("urgent", "running")
    shared.executor.release("urgent")
    await task


async def test_purge_deletes_only_waiting_jobs_of_one_queue(shared: SharedHarness) -> None:
    import asyncio

    from tests.shared.support import until

    runtime = shared.runtime()
    await runtime.ingest(job("done"))
    assert (await runtime.tick()).status == "settled"
    await runtime.ingest(job("running", payload={"do": "block"}))
    task = asyncio.create_task(runtime.tick())
    await until(lambda: "running" in shared.executor.started)
    await runtime.ingest(job("waiting-1"))
    await runtime.ingest(job("waiting-2"))
    await runtime.ingest(job("other", queue="other"))
    assert await runtime.purge("q") == 2
    assert await runtime.purge("q") == 0
    states = await shared.job_states()
    assert set(states) == {"done", "running", "other"}
    shared.executor.release("running")
    assert (await task).status == "settled"
    # A purged id is free again: a later enqueue is new work.
    assert await runtime.ingest(job("waiting-1")) == "queued"


async def test_has_pending_work(shared: SharedHarness) -> None:
    runtime = shared.runtime()
    assert await runtime.has_pending_work() is False
    await runtime.ingest(job("a"))
    assert await runtime.has_pending_work() is True
    await runtime.tick()
    assert await runtime.has_pending_work() is False


async def test_wake_is_asked_after_durable_changes(shared: SharedHarness) -> None:
    runtime = shared.runtime()
    before = shared.wake.calls
    await runtime.ingest(job("a"))
    assert shared.wake.calls == before + 1
    await runtime.ingest(job("a"))  # a duplicate changes nothing
    assert shared.wake.calls == before + 1
    await runtime.tick()
    assert shared.wake.calls == before + 2
