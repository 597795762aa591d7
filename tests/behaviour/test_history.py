"""History over time, on every store: each runtime counts its queues'
transitions per minute in memory and writes them a few rows at a time,
samples depth and head wait with a bounded cost, and reads them back a
bucket at a time with ``history``.

The clocks here are the tests' (``timed_runtime``): every transition's time,
and so its minute, is the one the test set. A runtime's ``history()`` writes
its own counts first, so each test reads what it did.
"""

from __future__ import annotations

import logging

import pytest

from tests.support import job
from tests.support.engine import Engine
from tickwork import InvalidArgument, Recovery, Retry
from tickwork.model.outcomes import HistoryPoint, QueueHistory
from tickwork.runtimes.history import HistoryKeeper

MINUTE = 60_000


def failing(succeed_on: int = 1_000_000) -> dict[str, object]:
    """A payload whose scripted executor fails until attempt ``succeed_on``."""
    return {"do": "fail_until", "succeed_on": succeed_on}


def counts(point: HistoryPoint) -> tuple[int, ...]:
    """(enqueued, started, completed, failed, cancelled, retried)."""
    return (point.enqueued, point.started, point.completed, point.failed, point.cancelled,
            point.retried)


def totals(history: QueueHistory | None) -> tuple[int, ...]:
    """The counts of every point, summed."""
    assert history is not None
    return tuple(sum(values) for values in zip(*(counts(point) for point in history.points),
                                               strict=True))


def to_next_minute(now: object, into_ms: int = 1_000) -> int:
    """Move the test clock ``into_ms`` past the start of the next minute; that start."""
    ms: int = now()  # type: ignore[operator]
    start = ms - ms % MINUTE + MINUTE
    now.advance(start + into_ms - ms)  # type: ignore[attr-defined]
    return start


async def test_each_transition_is_counted_in_its_own_minute(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    first = to_next_minute(now)
    await jobs.ingest(job("ok", payload={"do": "complete"}))
    await jobs.ingest(job("flaky", payload=failing(), retry=Retry(2, base_delay_ms=0)))
    await jobs.ingest(job("unwanted", queue="side", payload={"do": "complete"}))
    await jobs.cancel("unwanted", "c-1")
    # Minute 0: the cancelled job of "side" settles without running, ok completes.
    result = await jobs.tick()
    assert (result.job_id, result.outcome) == ("unwanted", "cancelled")
    assert (await jobs.tick()).job_id == "ok"

    second = to_next_minute(now)
    result = await jobs.tick()  # minute 1: flaky's first attempt fails, retried
    assert (result.status, result.job_id) == ("retried", "flaky")
    third = to_next_minute(now)
    result = await jobs.tick()  # minute 2: its second and last attempt fails
    assert (result.status, result.job_id, result.outcome) == ("settled", "flaky", "failed")

    history = await jobs.history("q", since=first)
    assert history is not None
    assert (history.queue, history.bucket, history.since) == ("q", 60, first)
    assert [point.at for point in history.points] == [first, second, third]
    assert [counts(point) for point in history.points] == [
        (2, 1, 1, 0, 0, 0), (0, 1, 0, 0, 0, 1), (0, 1, 0, 1, 0, 0)]
    side = await jobs.history("side", since=first)
    assert side is not None
    assert [counts(point) for point in side.points] == [
        (1, 0, 0, 0, 1, 0), (0, 0, 0, 0, 0, 0), (0, 0, 0, 0, 0, 0)]


async def test_a_batch_and_a_replay_count_each_new_job_once(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    first = to_next_minute(now)
    batch = [job(f"b{number}", payload={"do": "complete"}) for number in range(3)]
    assert await jobs.ingest_many(batch) == ["queued"] * 3
    assert await jobs.ingest_many(batch) == ["duplicate"] * 3  # no transition
    assert await jobs.ingest(batch[0]) == "duplicate"
    assert totals(await jobs.history("q", since=first)) == (3, 0, 0, 0, 0, 0)


async def test_a_redrive_counts_as_enqueued_and_keeps_the_failure_it_redrives(
        engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    first = to_next_minute(now)
    await jobs.ingest(job("hook", payload=failing(succeed_on=2)))
    assert (await jobs.tick()).outcome == "failed"
    second = to_next_minute(now, into_ms=30_000)
    assert (await jobs.redrive("hook", "r-1")).status == "redriven"
    assert (await jobs.redrive("hook", "r-1")).status == "replayed"  # counted once
    result = await jobs.tick()  # the redriven chain's first attempt fails again
    assert (result.job_id, result.outcome) == ("hook", "failed")

    history = await jobs.history("q", since=first)
    assert history is not None
    # The first failure stays counted in its minute; the redrive and the
    # second failure count in theirs.
    assert [counts(point) for point in history.points] == [
        (1, 1, 0, 1, 0, 0), (1, 1, 0, 1, 0, 0)]
    assert history.points[1].at == second


async def test_a_recovery_counts_its_settlement_and_its_requeue_nothing(
        engine: Engine) -> None:
    dying = engine.runtime()
    await dying.ingest(job("a", payload={"do": "block"}, recovery=Recovery(1)))
    await engine.lose(dying, await engine.start(dying, "a"))
    engine.make_recoverable()
    # The process that died took its counts with it (they were in its
    # memory); the survivor counts what it does.
    survivor, now = engine.timed_runtime()
    since = now() - now() % MINUTE
    assert (await survivor.tick()).status == "requeued"
    # Nothing counted (the read samples the job back in the queue).
    requeued = await survivor.history("q", since=since)
    assert totals(requeued) == (0, 0, 0, 0, 0, 0)
    assert requeued is not None and requeued.points[-1].depth == 1
    await engine.lose(survivor, await engine.start(survivor, "a"))  # runs, dies again
    engine.make_recoverable()
    last, _ = engine.timed_runtime()
    assert (await last.tick()).outcome == "interrupted"
    assert totals(await last.history("q", since=since)) == (0, 0, 0, 1, 0, 0)


async def test_buckets_larger_than_a_minute_sum_their_minutes(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    ms = now()
    hour = ms - ms % 3_600_000 + 3_600_000
    now.advance(hour + 1_000 - ms)
    for minute in range(7):  # one job a minute: minutes 0-4, then 5 and 6
        await jobs.ingest(job(f"j{minute}", payload={"do": "complete"}))
        assert (await jobs.tick()).outcome == "completed"
        now.advance(MINUTE)
    history = await jobs.history("q", since=hour, bucket=300)
    assert history is not None
    assert [point.at for point in history.points] == [hour, hour + 5 * MINUTE]
    assert [counts(point) for point in history.points] == [
        (5, 5, 5, 0, 0, 0), (2, 2, 2, 0, 0, 0)]


async def test_counts_are_written_when_their_minute_turns(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    first = to_next_minute(now)
    await jobs.ingest(job("a", payload={"do": "complete"}))
    assert (await jobs.tick()).outcome == "completed"
    # Counted in memory only: nothing is written during the minute.
    assert await engine.rows("SELECT queue FROM tickwork_queue_history") == []
    second = to_next_minute(now)
    # The first count of a later minute marks the flush due: the next step,
    # or here the write itself, writes what is pending, both minutes.
    await jobs.ingest(job("b", payload={"do": "complete"}))
    written = await engine.rows(
        "SELECT minute, enqueued, started, completed FROM tickwork_queue_history "
        "WHERE queue = 'q' AND enqueued > 0")
    assert sorted(tuple(int(value) for value in row) for row in written) == [
        (first, 1, 1, 1), (second, 1, 0, 0)]
    # Another runtime over the same store reads them.
    other = engine.another_process(**({"clock": now} if engine.local else {}))
    assert totals(await other.history("q", since=first)) == (2, 1, 1, 0, 0, 0)


async def test_a_flush_samples_depth_and_the_head_jobs_wait(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    to_next_minute(now)
    assert await jobs.pause("deep")
    for number in range(3):
        await jobs.ingest(job(f"d{number}", queue="deep", payload={"do": "complete"}))
    await jobs.ingest(job("later", queue="deep", payload={"do": "complete"}, delay_ms=MINUTE))
    enqueued_at = now()
    sampled = to_next_minute(now, into_ms=5_000)
    assert (await jobs.tick()).status == "idle"  # finds "deep" paused
    await jobs.flush_history()  # as a host does after its loop: writes, and samples
    history = await jobs.history("deep", since=sampled)
    assert history is not None
    point = history.points[0]
    assert (point.at, point.depth, point.oldest_age_ms, point.depth_capped) == (
        sampled, 4, now() - enqueued_at, False)
    # The queue emptied: the next minute's sample says so.
    assert await jobs.resume("deep")
    for _ in range(3):
        assert (await jobs.tick()).status == "settled"
    await jobs.cancel("later", "c-1")
    assert (await jobs.tick()).outcome == "cancelled"
    emptied = to_next_minute(now)
    await jobs.flush_history()
    history = await jobs.history("deep", since=sampled)
    assert history is not None
    assert [(point.at, point.depth) for point in history.points] == [
        (sampled, 4), (emptied, 0)]


async def test_a_deep_queue_is_sampled_up_to_the_cap(engine: Engine,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The cap is 10,000; the same statements with a cap of 3 here.
    for module in ("tickwork.stores.owner_local", "tickwork.stores.d1.store",
                   "tickwork.stores.postgres.store", "tickwork.lifecycle.operations"):
        monkeypatch.setattr(f"{module}.DEPTH_CAP", 3)
    jobs, now = engine.timed_runtime()
    to_next_minute(now)
    assert await jobs.pause("deep")
    assert await jobs.pause("shallow")
    await jobs.ingest_many([job(f"d{number}", queue="deep") for number in range(5)])
    await jobs.ingest_many([job(f"s{number}", queue="shallow") for number in range(3)])
    sampled = to_next_minute(now)
    deep = await jobs.history("deep", since=sampled)  # the read flushes, and samples
    shallow = await jobs.history("shallow", since=sampled)
    assert deep is not None and shallow is not None
    assert (deep.points[0].depth, deep.points[0].depth_capped) == (3, True)
    assert (shallow.points[0].depth, shallow.points[0].depth_capped) == (3, False)


async def test_history_refuses_what_it_cannot_answer(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.ingest(job("a", payload={"do": "complete"}))
    with pytest.raises(InvalidArgument, match="since: is in the future"):
        await jobs.history("q", since=now() + MINUTE)
    with pytest.raises(InvalidArgument, match=r"bucket: must be one of 60, 300, 900, 3600"):
        await jobs.history("q", bucket=120)
    with pytest.raises(InvalidArgument, match="more than 2017: give a later since"):
        await jobs.history("q", since=now() - 2 * 24 * 3_600_000)
    # The 7 days kept, in 5-minute buckets: the most one answer holds.
    week = await jobs.history("q", since=now() - 7 * 24 * 3_600_000, bucket=300)
    assert week is not None and len(week.points) == 2017
    # A queue tickwork has not seen has no history (HTTP: 404 queue_not_found).
    assert await jobs.history("nobody") is None
    history = await jobs.history("q")  # the last hour, by default
    assert history is not None
    assert len(history.points) == 61
    assert sum(point.enqueued for point in history.points) == 1


async def test_old_minutes_are_pruned_a_bounded_batch_at_a_time(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tickwork.runtimes.owner_local.HISTORY_PRUNE_BATCH", 2)
    monkeypatch.setattr("tickwork.runtimes.shared.HISTORY_PRUNE_BATCH", 2)
    jobs, now = engine.timed_runtime()
    old = to_next_minute(now)
    for number in range(3):  # three old minutes of queue q
        await jobs.ingest(job(f"old{number}", payload={"do": "complete"}))
        to_next_minute(now)
    await jobs.history("q", since=old)  # written
    now.advance(7 * 24 * 3_600_000)  # past the 7 days kept
    await jobs.ingest(job("new", payload={"do": "complete"}))
    await jobs.history("q")  # written too
    minutes = "SELECT minute FROM tickwork_queue_history ORDER BY minute"
    assert len(await engine.rows(minutes)) >= 4

    await jobs.prune_if_due()  # the retention pass: one batch of 2 rows
    left = [int(row[0]) for row in await engine.rows(minutes)]
    assert left[0] == old + 2 * MINUTE
    now.advance(MINUTE)  # the next pass, a minute later
    await jobs.prune_if_due()
    assert all(int(row[0]) > old + 2 * MINUTE for row in await engine.rows(minutes))


class Lines(logging.Handler):
    """The messages logged on a logger while it is attached (the real-Pyodide
    tier has no ``caplog``)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.logger, self.messages = logging.getLogger(name), []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def __enter__(self) -> list[str]:
        self.logger.addHandler(self)
        return self.messages

    def __exit__(self, *exc_info: object) -> None:
        self.logger.removeHandler(self)


async def test_a_failed_flush_keeps_its_counts_and_never_fails_a_step(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store refuses every flush while a drain runs, one flush tried
    before each step (as if each minute turned): every job still runs and
    settles once, each claim taken ahead is run, and the counts wait in
    memory until a flush succeeds."""
    jobs, now = engine.timed_runtime()
    first = to_next_minute(now)
    await jobs.ingest_many([job(f"j{number}", payload={"do": "complete"})
                            for number in range(5)])
    runtime = jobs.runtime
    store = runtime._store
    tried: list[int] = []

    def refuse(rows: object) -> None:
        tried.append(len(rows))  # type: ignore[arg-type]
        raise ConnectionError("the store is down")

    async def refuse_async(rows: object) -> None:
        refuse(rows)

    working = store.add_history
    monkeypatch.setattr(store, "add_history", refuse if engine.local else refuse_async)
    counting = HistoryKeeper.count

    def count_and_flush_next(keeper: HistoryKeeper, report: object, at: int) -> None:
        counting(keeper, report, at)  # type: ignore[arg-type]
        keeper.flush_due = True  # as if every count landed in a later minute

    monkeypatch.setattr(HistoryKeeper, "count", count_and_flush_next)
    with Lines("tickwork.history") as logged:
        results = await jobs._call("drain")
    assert [(result.job_id, result.outcome) for result in results] == [
        (f"j{number}", "completed") for number in range(5)]
    failures = [line for line in logged if "could not write the history's counts" in line]
    assert tried and len(failures) == len(tried)
    assert await engine.rows("SELECT queue FROM tickwork_queue_history "
                             "WHERE enqueued > 0 OR started > 0") == []
    monkeypatch.setattr(store, "add_history", working)  # the store is back
    assert totals(await jobs.history("q", since=first)) == (5, 5, 5, 0, 0, 0)
