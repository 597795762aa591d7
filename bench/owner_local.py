"""Owner-local benchmarks, each printed beside a baseline measured in the same run.

    python -m bench.owner_local            # full sizes (about a minute)
    python -m bench.owner_local --quick    # smaller sizes, for a smoke run

1. Tick and drain throughput: a no-op executor over 20,000 jobs in 50
   queues, on ``:memory:`` and on a WAL file (synchronous NORMAL), beside the
   raw limit: a bare sqlite3 loop doing one claim UPDATE and one settle
   UPDATE per job, each in its own transaction, on tickwork's own table
   (target: ``tick()`` >= 60% of it on ``:memory:``; the settlement files
   its row into the history indexes, as a tick's does) and on a bare table
   (context). ``drain()`` settles a job and claims the next in one
   transaction (two commits per job with its ingest, against three).
2. Single-job ``ingest()`` calls on ``:memory:`` beside a raw INSERT of the
   same columns into tickwork's own table, one transaction per INSERT, and
   every 100th insert one more listing the rows inserted since, as the store
   does (target >= 50%).
3. Claim cost against depth: mean tick time with 100,000 queued jobs against
   1,000 (target: within 1.5x).
4. Claim cost beside jobs waiting for their time: mean tick time with 1,000
   due jobs and 100,000 jobs due in a year (stored first, at a higher
   priority: the worst place for a claim walk), against 1,000 due jobs alone
   (target: within 1.5x). Each mean-tick pair here and in 5 is the lowest
   of five rounds, its two sides taken in turns.
5. Schedule slots: filling 1,000 missed slots of one schedule (one
   ``fire_schedules``: a job per slot and the schedule's advance, in one
   transaction) beside ``ingest_many`` of the same 1,000 jobs in batches of
   100; and the mean tick with 100 schedules whose slots are hours away
   beside the mean tick with none (what schedules cost a tick that has no
   slot to fill).
6. Fair turns: the mean claim (the store's claim-if-clear, as a tick runs
   it, with the line kept in its transaction) in a wide queue (limit 2)
   where one lane holds 10,000 ready jobs stored first and each claim's
   job settles while a job of another lane arrives (untimed), so the
   claims take the lanes in turns, against the same with no backlog
   (target: within 1.5x: the walk reads the line, not the backlog).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.report import Figures, Point, Row, print_rows
from tickwork import Completed, ConcurrencyLimit, Job, OwnerRuntime, Schedule, ScheduledJob
from tickwork.lifecycle import Settlement
from tickwork.model.jobs import validate_job
from tickwork.stores import Sqlite3Database
from tickwork.stores.index_batching import LIST_EVERY
from tickwork.stores.owner_local import EVERY_JOB, OwnerLocalStore

SECTION = "owner-local"


class NoWake:
    def recompute(self) -> None:
        pass


async def noop(job: Any, signal: Any) -> Completed:
    return Completed()


def connect(target: str) -> sqlite3.Connection:
    # Autocommit, as the README recommends for Sqlite3Database: a lone statement
    # is its own transaction; the engine opens explicit ones where it needs them.
    connection = sqlite3.connect(target, isolation_level=None)
    if target != ":memory:":
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = NORMAL")
    return connection


def runtime_over(connection: sqlite3.Connection) -> OwnerRuntime:
    return OwnerRuntime(Sqlite3Database(connection), execute=noop, is_alive=lambda job: False,
                        wake=NoWake())


def bulk_load(connection: sqlite3.Connection, jobs: int, queues: int) -> None:
    """Fill the engine's own table quickly (one transaction) for tick benchmarks,
    and list the rows, as the store would have by then."""
    runtime_over(connection)  # creates the schema
    connection.execute("BEGIN")
    connection.executemany(
        "INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,"
        " enqueued_at) VALUES (?, ?, 'lane', ?, '{}', 'queued', 0)",
        ((f"job-{i}", f"queue-{i % queues}", i % 3) for i in range(jobs)),
    )
    connection.execute("COMMIT")
    OwnerLocalStore(Sqlite3Database(connection)).list_new_rows()


def engine_ticks(target: str, jobs: int, queues: int, *, drain: bool = False,
                 runs: int | None = None) -> float:
    """Jobs per second of ``runs`` (default: all ``jobs``) ticks, or of one
    ``drain()`` of as many, over ``jobs`` queued jobs."""
    connection = connect(target)
    bulk_load(connection, jobs, queues)
    runtime = runtime_over(connection)
    wanted = jobs if runs is None else runs

    async def ticks() -> int:
        settled = 0
        while settled < wanted and (await runtime.tick()).status == "settled":
            settled += 1
        return settled

    async def drained() -> int:
        return sum(result.status == "settled"
                   for result in await runtime.drain(max_ticks=wanted))

    started = time.perf_counter()
    settled = asyncio.run(drained() if drain else ticks())
    elapsed = time.perf_counter() - started
    assert settled == wanted, (settled, wanted)
    connection.close()
    return wanted / elapsed


RAW_TABLES = {
    # The bare minimum a claim loop needs: an index to find the next job.
    "bare table": (
        "CREATE TABLE raw_jobs (sequence INTEGER PRIMARY KEY, queue TEXT, priority INTEGER,"
        " state TEXT, claim_token TEXT, outcome TEXT, cancellation_id TEXT);"
        "CREATE INDEX raw_jobs_ready ON raw_jobs (priority DESC, sequence)"
        " WHERE state = 'queued' AND cancellation_id IS NULL;",
        "raw_jobs",
    ),
    # tickwork's own table and indexes (what queue heads, failing a lane, recovery
    # and reads need), driven by the same bare loop: the storage limit of the
    # engine's schema, without the engine.
    "engine table": ("", "tickwork_jobs"),
}


def raw_claim_settle(target: str, jobs: int, queues: int, table: str,
                     runs: int | None = None) -> float:
    """The raw limit: per job, one claim UPDATE that picks the next queued job
    (highest priority, oldest first, through an index) and one settle UPDATE
    fenced on the claim token, each in its own transaction, with no engine
    around it: no queue exclusivity, no recovery probe, no projection."""
    ddl, name = RAW_TABLES[table]
    connection = connect(target)
    if ddl:
        connection.executescript(ddl)
        connection.execute("BEGIN")
        connection.executemany(
            f"INSERT INTO {name} (queue, priority, state) VALUES (?, ?, 'queued')",
            ((f"queue-{i % queues}", i % 3) for i in range(jobs)))
        connection.execute("COMMIT")
    else:
        bulk_load(connection, jobs, queues)
    connection.isolation_level = None
    # On the engine table, the one extra term its runnable index needs (it
    # holds only jobs that are due).
    due = " AND due_at IS NULL" if name == "tickwork_jobs" else ""
    claim = (
        f"UPDATE {name} SET state = 'running', claim_token = ? WHERE sequence = ("
        f" SELECT sequence FROM {name} WHERE state = 'queued' AND cancellation_id IS NULL{due}"
        " ORDER BY priority DESC, sequence LIMIT 1) RETURNING sequence")
    # On the engine table a tick's settlement also files its row (schema
    # 0009): without it the row would stay out of the history indexes.
    filed = ", filed = 1" if name == "tickwork_jobs" else ""
    settle = (f"UPDATE {name} SET state = 'settled', outcome = 'completed'{filed}"
              " WHERE sequence = ? AND claim_token = ?")
    wanted = jobs if runs is None else runs
    started = time.perf_counter()
    for number in range(wanted):
        token = str(number)
        connection.execute("BEGIN")
        (sequence,), = connection.execute(claim, (token,)).fetchall()
        connection.execute("COMMIT")
        connection.execute("BEGIN")
        connection.execute(settle, (sequence, token))
        connection.execute("COMMIT")
    elapsed = time.perf_counter() - started
    connection.close()
    return wanted / elapsed


def engine_ingest(count: int) -> float:
    runtime = runtime_over(connect(":memory:"))
    jobs = [Job(f"job-{i}", f"queue-{i % 50}", "lane", i % 3, {"n": i}) for i in range(count)]
    started = time.perf_counter()
    for job in jobs:
        runtime.ingest(job)
    return count / (time.perf_counter() - started)


def raw_insert(count: int) -> float:
    """The raw limit of ingest: one INSERT per transaction into tickwork's own
    table (its indexes included), of the columns ``ingest()`` writes for a
    job that names no time, with the values it would write."""
    connection = connect(":memory:")
    runtime_over(connection)  # creates the schema
    insert = ("INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json,"
              " max_recoveries, run_at, delay_ms, retry_json, due_at, state, enqueued_at)"
              " VALUES (?, ?, 'lane', ?, ?, NULL, NULL, NULL, NULL, NULL, 'queued', ?)")
    # The store's listing (schema 0009), every LIST_EVERY inserts, in a
    # transaction of its own.
    store = OwnerLocalStore(Sqlite3Database(connection))
    started = time.perf_counter()
    for i in range(count):
        connection.execute("BEGIN")
        connection.execute(insert, (f"job-{i}", f"queue-{i % 50}", i % 3, f'{{"n":{i}}}',
                                    int(time.time() * 1000)))
        connection.execute("COMMIT")
        if i % LIST_EVERY == 0:
            store.list_new_rows()
    elapsed = time.perf_counter() - started
    connection.close()
    return count / elapsed


YEAR_MS = 365 * 86_400_000


def bulk_load_waiting(connection: sqlite3.Connection, jobs: int, queues: int) -> None:
    """Jobs due in a year, stored as ingest stores them (run_at and due_at set),
    at a priority above every due job."""
    runtime_over(connection)  # creates the schema
    due = int(time.time() * 1000) + YEAR_MS
    connection.execute("BEGIN")
    connection.executemany(
        "INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,"
        " enqueued_at, run_at, due_at) VALUES (?, ?, 'lane', 9, '{}', 'queued', 0, ?, ?)",
        ((f"later-{i}", f"queue-{i % queues}", due, due) for i in range(jobs)),
    )
    connection.execute("COMMIT")
    OwnerLocalStore(Sqlite3Database(connection)).list_new_rows()


def mean_tick_seconds(depth: int, queues: int, samples: int, waiting: int = 0) -> float:
    """Mean time of one tick while the queue depth stays at ``depth`` (with
    ``waiting`` jobs due in a year stored before them)."""
    connection = connect(":memory:")
    if waiting:
        bulk_load_waiting(connection, waiting, queues)
    bulk_load(connection, depth, queues)
    runtime = runtime_over(connection)
    refill = (Job(f"refill-{i}", f"queue-{i % queues}", "lane", 0, {}) for i in range(samples))

    async def run() -> list[float]:
        timings = []
        for job in refill:
            started = time.perf_counter()
            result = await runtime.tick()
            timings.append(time.perf_counter() - started)
            assert result.status == "settled", result
            runtime.ingest(job)  # untimed: keeps the depth constant
        return timings

    return statistics.fmean(asyncio.run(run()))


SLOT_START = 1_800_000_000_000


def slot_filling(slots: int) -> tuple[float, float]:
    """(slot jobs created per second by one fire_schedules, the same jobs
    stored per second by ingest_many in batches of 100), on :memory:."""
    now = [SLOT_START]
    runtime = OwnerRuntime(Sqlite3Database(connect(":memory:")), execute=noop,
                           is_alive=lambda job: False, wake=NoWake(), clock=lambda: now[0])
    runtime.put_schedule(Schedule("beat", ScheduledJob("beats", "beats", 0, {"n": 1}),
                                  every_ms=1000, catch_up=slots))
    now[0] += slots * 1000
    started = time.perf_counter()
    created = runtime.fire_schedules()
    filling = created / (time.perf_counter() - started)
    assert created == slots, created
    baseline = runtime_over(connect(":memory:"))
    jobs = [Job(f"beat@{n}", "beats", "beats", 0, {"n": 1}, run_at=SLOT_START + n * 1000)
            for n in range(slots)]
    started = time.perf_counter()
    for first in range(0, slots, 100):
        baseline.ingest_many(jobs[first:first + 100])
    return filling, slots / (time.perf_counter() - started)


def mean_tick_with_schedules(schedules: int, depth: int, samples: int) -> float:
    """Mean tick over ``depth`` queued jobs with ``schedules`` schedules
    whose slots are hours away."""
    connection = connect(":memory:")
    bulk_load(connection, depth, 50)
    runtime = OwnerRuntime(Sqlite3Database(connection), execute=noop,
                           is_alive=lambda job: False, wake=NoWake(),
                           clock=lambda: SLOT_START)
    for n in range(schedules):
        runtime.put_schedule(Schedule(f"daily-{n}", ScheduledJob("q", "q"),
                                      cron=f"{n % 60} {(n // 60) % 24} * * *"))

    async def run() -> float:
        started = time.perf_counter()
        for _ in range(samples):
            await runtime.tick()
        return (time.perf_counter() - started) / samples

    return asyncio.run(run())


def mean_claim_taking_turns(backlog: int, samples: int) -> float:
    """Mean seconds of one claim in a wide queue whose lane "big" holds
    ``backlog`` ready jobs stored first (see the module doc, 6)."""
    connection = connect(":memory:")
    runtime_over(connection)  # creates the schema
    connection.execute("BEGIN")
    connection.executemany(
        "INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,"
        " enqueued_at) VALUES (?, 'wide', 'big', 0, '{}', 'queued', 0)",
        ((f"big-{i}",) for i in range(backlog)))
    connection.execute("COMMIT")
    store = OwnerLocalStore(Sqlite3Database(connection))
    store.list_new_rows()
    store.put_limit(ConcurrencyLimit("queue", "wide", 2), SLOT_START)  # "big" joins its line
    done = Settlement("completed")
    timings = []
    for number in range(samples):
        store.insert(validate_job(Job(f"small-{number}", "wide", f"tenant-{number % 10}", 0,
                                      {})), SLOT_START)
        token = f"t-{number}"
        started = time.perf_counter()
        job = store.claim_next_if_clear(EVERY_JOB, token, SLOT_START, [])
        timings.append(time.perf_counter() - started)
        assert job is not None
        store.settle_claim(job.sequence, token, done, SLOT_START, cancelled=False)
    connection.close()
    return statistics.fmean(timings)


def _fresh_raw(target: Callable[[], str], jobs: int, queues: int, table: str) -> float:
    return raw_claim_settle(target(), jobs, queues, table)


def _fresh_engine(target: Callable[[], str], jobs: int, queues: int, drain: bool) -> float:
    return engine_ticks(target(), jobs, queues, drain=drain)


def interleaved(repeats: int, measures: Sequence[Callable[[], float]], *,
                lowest: bool = False) -> list[float]:
    """Each measure's best of ``repeats``, taken in turns (one of each per
    round): the highest rate, or with ``lowest`` the lowest time."""
    rounds = [[measure() for measure in measures] for _ in range(repeats)]
    pick = min if lowest else max
    return [pick(taken) for taken in zip(*rounds, strict=True)]


def collect(*, quick: bool) -> Figures:
    """One run of every measurement (see the module doc), as rows and the
    "depth" chart's points. A full run takes each throughput figure as the
    best of two and each mean tick as the lowest of five (the machine is
    shared: the best is the least disturbed)."""
    repeats = 1 if quick else 2

    def best(measure: Callable[[], float]) -> float:
        return max(measure() for _ in range(repeats))

    jobs, deep = (2_000, 20_000) if quick else (20_000, 100_000)
    queues = 50
    figures = Figures()
    rows = figures.rows
    engine_loop = "raw claim+settle loop, tickwork's table"
    with tempfile.TemporaryDirectory() as directory:
        wal_path = Path(directory) / "bench.sqlite3"

        def fresh_wal_file() -> str:
            for suffix in ("", "-wal", "-shm"):
                Path(f"{wal_path}{suffix}").unlink(missing_ok=True)
            return str(wal_path)

        targets: dict[str, Callable[[], str]] = {
            ":memory:": lambda: ":memory:", "WAL file": fresh_wal_file}
        for label, target in targets.items():
            # Interleaved (raw, tick, drain, bare, raw, ...), each the best of
            # its repeats, so a change of the machine's load in between falls
            # on every figure alike rather than between a figure and its baseline.
            raw, tick, drain, bare = interleaved(repeats, (
                functools.partial(_fresh_raw, target, jobs, queues, "engine table"),
                functools.partial(_fresh_engine, target, jobs, queues, False),
                functools.partial(_fresh_engine, target, jobs, queues, True),
                functools.partial(_fresh_raw, target, jobs, queues, "bare table")))
            memory = label == ":memory:"
            rows.append(Row(SECTION, f"tick(), {label}", tick, "jobs/s", engine_loop, raw,
                            0.60 if memory else None))
            rows.append(Row(SECTION, f"drain(), {label}", drain, "jobs/s", engine_loop, raw))
            rows.append(Row(SECTION, f"tick(), {label}", tick, "jobs/s",
                            "raw claim+settle loop, bare table", bare))

    count = 5_000 if quick else 50_000
    ingest, insert = interleaved(repeats, (functools.partial(engine_ingest, count),
                                           functools.partial(raw_insert, count)))
    rows.append(Row(SECTION, "single-job ingest(), :memory:", ingest, "jobs/s",
                    "raw INSERT into tickwork's table, 1 per transaction", insert, 0.50))

    # A mean of 2,000 ticks is a tenth of a second, and one such sample
    # moved by up to 1.5x between two runs of the same setup on an idle
    # machine; each pair is the lowest of five, taken in turns, instead.
    samples = 500 if quick else 2_000
    tick_rounds = 1 if quick else 5
    shallow, deep_mean = interleaved(tick_rounds, (
        functools.partial(mean_tick_seconds, 1_000, queues, samples),
        functools.partial(mean_tick_seconds, deep, queues, samples)), lowest=True)
    rows.append(Row(SECTION, f"mean tick, depth {deep:,}", deep_mean * 1e6, "us/tick",
                    "mean tick, depth 1,000", shallow * 1e6, 1.5, lower_is_better=True))
    alone, beside = interleaved(tick_rounds, (
        functools.partial(mean_tick_seconds, 1_000, queues, samples),
        functools.partial(mean_tick_seconds, 1_000, queues, samples, waiting=deep)),
        lowest=True)
    rows.append(Row(SECTION, f"mean tick, 1,000 due beside {deep:,} waiting", beside * 1e6,
                    "us/tick", "mean tick, 1,000 due, none waiting", alone * 1e6, 1.5,
                    lower_is_better=True))
    filling, ingesting = slot_filling(1_000)
    rows.append(Row(SECTION, "fire_schedules, 1,000 missed slots", filling, "jobs/s",
                    "ingest_many of the same jobs, 100 per call", ingesting))
    without, with_schedules = interleaved(tick_rounds, (
        functools.partial(mean_tick_with_schedules, 0, 5_000, samples),
        functools.partial(mean_tick_with_schedules, 100, 5_000, samples)), lowest=True)
    rows.append(Row(SECTION, "mean tick, 100 schedules not due", with_schedules * 1e6,
                    "us/tick", "mean tick, no schedules", without * 1e6,
                    lower_is_better=True))

    none_ahead, lane_ahead = interleaved(tick_rounds, (
        functools.partial(mean_claim_taking_turns, 0, samples),
        functools.partial(mean_claim_taking_turns, 10_000, samples)), lowest=True)
    rows.append(Row(SECTION, "mean claim taking turns, a 10,000-job lane ahead",
                    lane_ahead * 1e6, "us/claim", "mean claim taking turns, no backlog",
                    none_ahead * 1e6, 1.5, lower_is_better=True))

    # Jobs/s against queue depth: a share of the stored jobs runs, so the
    # depth stays within a factor of two of its label.
    for depth in ((1_000, 5_000, 20_000) if quick else (1_000, 10_000, 100_000)):
        runs = min(depth // 2, 1_000 if quick else 5_000)
        measures: dict[str, Callable[[], float]] = {
            "tick()": functools.partial(engine_ticks, ":memory:", depth, queues, runs=runs),
            "drain()": functools.partial(engine_ticks, ":memory:", depth, queues, drain=True,
                                         runs=runs),
            "raw claim+settle loop": functools.partial(
                raw_claim_settle, ":memory:", depth, queues, "engine table", runs=runs)}
        for series, measure in measures.items():
            figures.points.append(Point("depth", series, depth, best(measure)))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args()
    figures = collect(quick=args.quick)
    print("owner-local (one run; python -m bench runs it twice and prints min-max)")
    print_rows(figures.rows)
    print("jobs/s against queue depth, :memory:")
    for point in figures.points:
        print(f"  {point.series:22} depth {point.x:>9,.0f}: {point.y:9,.0f} jobs/s")


if __name__ == "__main__":
    main()
