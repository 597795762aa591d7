"""Jobs with a due time (``run_at`` / ``delay_ms``), on every store.

A job waits until it is due: no tick claims it, it holds no queue, the status
reads count it as ``delayed`` and ``next_tick_at`` says when it will be due.
The first tick at or after that time moves it into the ready set (from then on
it can head its queue) and may claim it. Each test moves a manual clock
(database time is overridden by it on the shared stores).
"""

from __future__ import annotations

import pytest

from tests.support import job, unchecked_job
from tests.support.engine import Engine
from tickwork import IngestConflict, InvalidJob
from tickwork.model.jobs import MIN_RUN_AT_MS

MINUTE = 60_000


async def test_a_delayed_job_waits_until_it_is_due(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    start = now()
    assert await jobs.ingest(job("later", delay_ms=MINUTE)) == "queued"
    record = await jobs.read("later")
    assert record is not None
    assert (record.state, record.delay_ms, record.run_at, record.due_at) == (
        "queued", MINUTE, None, start + MINUTE)
    assert (await jobs.tick()).status == "idle"
    assert engine.executor.started == []
    assert await jobs.has_pending_work() is False
    assert await jobs.next_tick_at() == start + MINUTE
    status = await jobs.queue_status("q")
    assert (status.queued, status.delayed) == (0, 1)
    assert await jobs.read_queue_head("q") is None

    now.advance(MINUTE - 1)
    assert (await jobs.tick()).status == "idle"
    now.advance(1)
    assert await jobs.has_pending_work() is True  # a tick has work: to move it
    assert await jobs.next_tick_at() == now()
    # Until a tick moves it into the ready set, it is still counted as delayed.
    status = await jobs.queue_status("q")
    assert (status.queued, status.delayed) == (0, 1)
    assert await jobs.read_queue_head("q") is None
    result = await jobs.tick()
    assert (result.status, result.job_id, result.outcome) == ("settled", "later", "completed")
    assert await jobs.next_tick_at() is None


async def test_a_job_waiting_for_its_time_holds_no_queue(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.ingest(job("first-but-later", priority=9, delay_ms=MINUTE))
    await jobs.ingest(job("second-now"))
    result = await jobs.tick()
    assert (result.status, result.job_id) == ("settled", "second-now")
    assert (await jobs.tick()).status == "idle"
    now.advance(MINUTE)
    result = await jobs.tick()
    assert (result.status, result.job_id) == ("settled", "first-but-later")


async def test_a_due_job_takes_its_place_by_priority_then_age(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.ingest(job("low-now", queue="a", priority=1))
    await jobs.ingest(job("high-later", queue="b", priority=5, delay_ms=1_000))
    now.advance(1_000)
    assert (await jobs.tick()).job_id == "high-later"
    assert (await jobs.tick()).job_id == "low-now"


async def test_run_at_is_an_absolute_time_and_a_past_one_is_due_at_once(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.ingest(job("past", queue="a", run_at=now() - 5))
    await jobs.ingest(job("future", queue="b", run_at=now() + 2_000))
    past = await jobs.read("past")
    assert past is not None and (past.run_at, past.due_at) == (now() - 5, None)
    assert (await jobs.tick()).job_id == "past"
    assert (await jobs.tick()).status == "idle"
    assert await jobs.next_tick_at() == now() + 2_000
    now.advance(2_000)
    assert (await jobs.tick()).job_id == "future"


async def test_a_replay_compares_the_delay_as_asked(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    due = now() + MINUTE
    await jobs.ingest(job("j", delay_ms=MINUTE))
    now.advance(10_000)
    # The same delay, later: a duplicate, and the due time stays.
    assert await jobs.ingest(job("j", delay_ms=MINUTE)) == "duplicate"
    record = await jobs.read("j")
    assert record is not None and record.due_at == due
    with pytest.raises(IngestConflict) as other_delay:
        await jobs.ingest(job("j", delay_ms=MINUTE + 1))
    assert other_delay.value.fields == ("delay_ms",)
    with pytest.raises(IngestConflict) as absolute:
        await jobs.ingest(job("j", run_at=due))
    assert absolute.value.fields == ("run_at", "delay_ms")
    with pytest.raises(IngestConflict):
        await jobs.ingest(job("j"))
    assert [status for status in await jobs.ingest_many([job("j", delay_ms=MINUTE)])] == [
        "duplicate"]


async def test_ingest_many_stores_due_times_per_job(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    start = now()
    statuses = await jobs.ingest_many([
        job("a", queue="a", delay_ms=1_000), job("b", queue="b"),
        job("c", queue="c", run_at=start + 3_000)])
    assert statuses == ["queued"] * 3
    due = {}
    for job_id in "abc":
        record = await jobs.read(job_id)
        assert record is not None
        due[job_id] = record.due_at
    assert due == {"a": start + 1_000, "b": None, "c": start + 3_000}
    assert [result.job_id for result in await jobs.drain()] == ["b"]
    now.advance(3_000)
    assert sorted(result.job_id or "" for result in await jobs.drain()) == ["a", "c"]


async def test_a_delayed_job_cancelled_settles_without_waiting(engine: Engine) -> None:
    jobs, _ = engine.timed_runtime()
    await jobs.ingest(job("later", delay_ms=MINUTE))
    assert (await jobs.cancel("later", "c-1")).status == "recorded"
    assert await jobs.has_pending_work() is True
    result = await jobs.tick()
    assert (result.status, result.job_id, result.outcome) == ("settled", "later", "cancelled")
    assert engine.executor.started == []
    assert await jobs.next_tick_at() is None


async def test_status_of_every_queue_counts_delayed_jobs(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.ingest(job("now", queue="a"))
    await jobs.ingest(job("later", queue="a", delay_ms=MINUTE))
    await jobs.ingest(job("later-b", queue="b", delay_ms=MINUTE))
    counts = {status.queue: (status.queued, status.delayed) for status in await jobs.status()}
    assert counts == {"a": (1, 1), "b": (0, 1)}
    now.advance(MINUTE)
    assert (await jobs.tick()).job_id == "now"  # and both waiting jobs are moved
    counts = {status.queue: (status.queued, status.delayed) for status in await jobs.status()}
    assert counts == {"a": (1, 0), "b": (1, 0)}


async def test_purge_deletes_waiting_jobs_too(engine: Engine) -> None:
    jobs, _ = engine.timed_runtime()
    await jobs.ingest(job("later", delay_ms=MINUTE))
    await jobs.ingest(job("now"))
    assert await jobs.purge("q") == 2
    assert await jobs.next_tick_at() is None


@pytest.mark.parametrize(("fields", "field", "problem"), [
    ({"run_at": MIN_RUN_AT_MS, "delay_ms": 1}, "delay_ms", "cannot be combined with run_at"),
    ({"delay_ms": -1}, "delay_ms", "must be within 0"),
    ({"run_at": -1}, "run_at", f"must be epoch milliseconds within {MIN_RUN_AT_MS}"),
    ({"run_at": 1_796_523_995}, "run_at",
     "must be epoch milliseconds; 1796523995 looks like seconds (multiply by 1000)"),
    ({"run_at": MIN_RUN_AT_MS - 1}, "run_at", "must be epoch milliseconds within"),
    ({"delay_ms": True}, "delay_ms", "must be an integer"),
    ({"run_at": 1.5}, "run_at", "must be an integer"),
    ({"delay_ms": 2**53}, "delay_ms", "must be within 0"),
    ({"delay_ms": 2**53 // 1000 + 1}, "delay_ms", "must be within 0 and"),
])
async def test_a_bad_due_time_is_refused_by_name_and_nothing_changes(
        engine: Engine, fields: dict[str, object], field: str, problem: str) -> None:
    # Job() refuses it where it is built; a job that got around the
    # constructor is refused by ingest with the same error.
    with pytest.raises(InvalidJob) as built:
        job("bad", **fields)  # type: ignore[arg-type]
    jobs, _ = engine.timed_runtime()
    await jobs.ingest(job("kept"))
    before = await engine.table()
    with pytest.raises(InvalidJob) as refused:
        await jobs.ingest(unchecked_job("bad", **fields))
    assert refused.value.field == field and problem in refused.value.problem
    assert (built.value.field, built.value.problem) == (field, refused.value.problem)
    assert await engine.table() == before


async def test_the_largest_due_times_cross_every_store_exactly(engine: Engine) -> None:
    """run_at at 2**53 - 1 and the longest delay: stored, read back, compared
    on replay and reported by next_tick_at exactly (on a Durable Object these
    cross to JS, where that integer must travel as a Number, not a BigInt)."""
    from tickwork.model.jobs import MAX_DELAY_MS, MAX_SAFE_INTEGER

    jobs, now = engine.timed_runtime()
    far = job("far", queue="a", run_at=MAX_SAFE_INTEGER)
    longest = job("longest", queue="b", delay_ms=MAX_DELAY_MS)
    assert await jobs.ingest_many([far, longest]) == ["queued", "queued"]
    assert await jobs.ingest(far) == "duplicate"
    assert await jobs.ingest(longest) == "duplicate"
    stored = await jobs.read("far")
    assert stored is not None and (stored.run_at, stored.due_at) == (
        MAX_SAFE_INTEGER, MAX_SAFE_INTEGER)
    stored = await jobs.read("longest")
    assert stored is not None and stored.due_at == now() + MAX_DELAY_MS
    assert await jobs.next_tick_at() == now() + MAX_DELAY_MS
    assert (await jobs.tick()).status == "idle"
