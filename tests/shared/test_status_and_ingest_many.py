"""Queue status and ingest_many on every shared store."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.shared.support import SharedHarness, until
from tests.support import job
from tickwork import IngestConflict, InvalidArgument, InvalidJob, Job, QueueStatus, Recovery
from tickwork.model.jobs import MAX_INGEST_BATCH

LEASE = 120_000
NO_OUTCOMES = {"completed": 0, "failed": 0, "cancelled": 0, "outcome_unknown": 0,
               "interrupted": 0}


def counts(queued: int = 0, running: int = 0, **outcomes: int) -> tuple[Any, ...]:
    """(queued, running, settled, outcomes) as QueueStatus carries them."""
    return queued, running, sum(outcomes.values()), {**NO_OUTCOMES, **outcomes}


def of(status: QueueStatus) -> tuple[Any, ...]:
    return status.queued, status.running, status.settled, status.outcomes


async def rows(shared: SharedHarness) -> list[tuple[Any, ...]]:
    return await shared.query(
        "SELECT job_id, queue, lane, priority, payload_json, max_recoveries, state"
        " FROM tickwork_jobs ORDER BY sequence")


async def test_counts_follow_every_transition(shared: SharedHarness) -> None:
    runtime = shared.runtime()
    assert await runtime.status() == []
    # A claim whose worker died settles interrupted once its lease expires.
    doomed = shared.runtime()
    await runtime.ingest(job("lost", payload={"do": "block"}))
    task = asyncio.create_task(doomed.tick())
    await until(lambda: "lost" in shared.executor.started)
    await shared.kill(doomed, task)
    assert of(await runtime.queue_status("q")) == counts(running=1)
    shared.now.advance(LEASE)
    assert (await runtime.tick()).outcome == "interrupted"

    assert await runtime.ingest_many([
        job("done"),
        job("failed", payload={"do": "fail"}),
        job("unknown", payload={"do": "unknown"}),
        job("cancelled"),
        job("refused", queue="r", lane="bad"),
        job("purged", queue="p"),
        job("waiting", queue="w"),
    ]) == ["queued"] * 7
    assert of(await runtime.queue_status("q")) == counts(queued=4, interrupted=1)
    assert (await runtime.cancel("cancelled", "c1")).status == "recorded"
    for _ in range(4):  # the cancelled job first, then done, failed, unknown
        assert (await runtime.tick()).status == "settled"
    assert of(await runtime.queue_status("q")) == counts(
        completed=1, failed=1, cancelled=1, outcome_unknown=1, interrupted=1)

    assert (await runtime.fail_lane("bad", "tenant_gone")).settled == 1
    assert await runtime.purge("p") == 1
    await runtime.ingest_many([job("blocking", queue="w2", priority=9, payload={"do": "block"}),
                               job("behind", queue="w2")])
    tick = asyncio.create_task(runtime.tick())
    await until(lambda: "blocking" in shared.executor.started)

    everything = await runtime.status()
    assert [status.queue for status in everything] == ["q", "r", "w", "w2"]
    assert {status.queue: of(status) for status in everything} == {
        "q": counts(completed=1, failed=1, cancelled=1, outcome_unknown=1, interrupted=1),
        "r": counts(failed=1),
        "w": counts(queued=1),
        "w2": counts(queued=1, running=1),
    }
    for status in everything:
        assert await runtime.queue_status(status.queue) == status
    assert await runtime.queue_status("p") == QueueStatus("p", 0, 0, 0, NO_OUTCOMES)
    shared.executor.release("blocking")
    assert (await tick).outcome == "completed"
    assert of(await runtime.queue_status("w2")) == counts(queued=1, completed=1)


async def test_queues_sort_by_name_whatever_the_collation(shared: SharedHarness) -> None:
    runtime = shared.runtime()
    await runtime.ingest_many([job("a", queue="b"), job("b", queue="a"), job("c", queue="a"),
                               job("d", queue="A"), job("e", queue="ä"), job("f", queue="_z")])
    assert [(s.queue, s.queued) for s in await runtime.status()] == [
        ("A", 1), ("_z", 1), ("a", 2), ("b", 1), ("ä", 1)]
    assert await runtime.queue_status("B") == QueueStatus("B", 0, 0, 0, NO_OUTCOMES)


@pytest.mark.parametrize("bad", ["", "q" * 257, 7, None])
async def test_queue_status_refuses_a_bad_queue_name(shared: SharedHarness, bad: Any) -> None:
    runtime = shared.runtime()
    with pytest.raises(InvalidArgument) as caught:
        await runtime.queue_status(bad)
    assert caught.value.field == "queue"


async def test_ingest_many_stores_in_list_order_and_wakes_once(shared: SharedHarness) -> None:
    runtime = shared.runtime()
    before = shared.wake.calls
    assert await runtime.ingest_many([
        job("c", priority=1), job("a", queue="other", recovery=Recovery(2)),
        job("b", payload=None)]) == ["queued"] * 3
    assert shared.wake.calls == before + 1
    assert [row[0] for row in await rows(shared)] == ["c", "a", "b"]
    record = await runtime.read("a")
    assert record is not None
    assert (record.queue, record.state, record.recovery) == ("other", "queued", Recovery(2))


async def test_an_identical_replay_of_the_whole_list_is_all_duplicates(
    shared: SharedHarness,
) -> None:
    runtime = shared.runtime()
    jobs = [job(f"j{n}", payload={"n": n, "m": [n]},
                recovery=Recovery(n) if n % 2 else None) for n in range(5)]
    assert await runtime.ingest_many(jobs) == ["queued"] * 5
    stored, wakes = await rows(shared), shared.wake.calls
    replay = [job(f"j{n}", payload={"m": [n], "n": n},
                  recovery=Recovery(n) if n % 2 else None) for n in range(5)]
    assert await shared.runtime().ingest_many(replay) == ["duplicate"] * 5
    assert await rows(shared) == stored
    assert shared.wake.calls == wakes
    assert await runtime.ingest_many([jobs[0], job("new"), jobs[4]]) == [
        "duplicate", "queued", "duplicate"]


async def test_a_repeated_id_within_one_call(shared: SharedHarness) -> None:
    runtime = shared.runtime()
    assert await runtime.ingest_many([
        job("a", payload={"v": 1}), job("b"), job("a", payload={"v": 1})]) == [
        "queued", "queued", "duplicate"]
    stored = await rows(shared)
    assert len(stored) == 2
    with pytest.raises(IngestConflict) as caught:
        await runtime.ingest_many([job("x", payload={"v": 1}), job("y"),
                                   job("x", payload={"v": 2}, lane="other")])
    assert (caught.value.job_id, caught.value.fields) == ("x", ("lane", "payload"))
    assert await rows(shared) == stored


async def test_a_conflict_in_the_middle_stores_nothing(shared: SharedHarness) -> None:
    runtime = shared.runtime()
    await runtime.ingest(job("stored", payload={"v": 1}))
    await runtime.tick()  # settled history conflicts just the same
    stored, wakes = await rows(shared), shared.wake.calls
    with pytest.raises(IngestConflict) as caught:
        await runtime.ingest_many([job("first"), job("second", queue="elsewhere"),
                                   job("stored", priority=4, payload={"v": 1},
                                       recovery=Recovery(1)),
                                   job("last")])
    assert (caught.value.job_id, caught.value.fields) == ("stored", ("priority", "recovery"))
    assert await rows(shared) == stored
    assert shared.wake.calls == wakes
    # The same list without the conflicting job goes through.
    assert await runtime.ingest_many([job("first"), job("second", queue="elsewhere"),
                                      job("last")]) == ["queued"] * 3


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (Job("a", "q", "l", True, {}), "jobs[2].priority"),
        (Job("a", "q", "l" * 513, 0, {}), "jobs[2].lane"),
        (Job("a", "q", "l", 0, {}, Recovery(-1)), "jobs[2].recovery.max_recoveries"),
        ("not a job", "jobs[2]"),
    ],
)
async def test_an_invalid_job_names_its_index_and_nothing_is_written(
    shared: SharedHarness, bad: Any, field: str
) -> None:
    runtime = shared.runtime()
    await runtime.ingest(job("kept"))
    stored = await rows(shared)
    with pytest.raises(InvalidJob) as caught:
        await runtime.ingest_many([job("x"), job("y"), bad, job("z")])
    assert caught.value.field == field
    assert await rows(shared) == stored


@pytest.mark.parametrize(
    "bad",
    [[], [job(f"j{n}") for n in range(MAX_INGEST_BATCH + 1)], job("a"), None],
    ids=["empty", "too-many", "a-job", "none"],
)
async def test_a_bad_list_is_refused_and_nothing_is_written(
    shared: SharedHarness, bad: Any
) -> None:
    runtime = shared.runtime()
    await runtime.ingest(job("kept"))
    stored = await rows(shared)
    with pytest.raises(InvalidArgument) as caught:
        await runtime.ingest_many(bad)
    assert caught.value.field == "jobs"
    assert await rows(shared) == stored


async def test_the_limit_is_accepted_in_full(shared: SharedHarness) -> None:
    runtime = shared.runtime()
    jobs = [job(f"j{n:03}", queue=f"q{n % 7}", priority=n, payload={"n": n},
                recovery=Recovery(n)) for n in range(MAX_INGEST_BATCH)]
    assert await runtime.ingest_many(jobs) == ["queued"] * MAX_INGEST_BATCH
    assert await runtime.ingest_many(tuple(jobs)) == ["duplicate"] * MAX_INGEST_BATCH
    assert len(await rows(shared)) == MAX_INGEST_BATCH
    assert sum(status.queued for status in await runtime.status()) == MAX_INGEST_BATCH
    with pytest.raises(IngestConflict) as caught:
        await runtime.ingest_many([*jobs[:99], job("j099", queue="q1")])
    assert (caught.value.job_id, caught.value.fields) == (
        "j099", ("priority", "payload", "recovery"))
