"""Retention: tick cost with a year of settled history beside none, and what a prune costs.

    python -m bench.retention [--per-day 800] [--jobs 2000] [--queues 10]

One sqlite3 owner (``open_sqlite3``, synchronous NORMAL as ``tickwork
serve`` uses it) per case, each on a fresh file, in the same run:

* ``none``: no settled history;
* ``a year``: 365 days x ``--per-day`` settled jobs over ``--queues``
  queues (one in 20 failed), written directly as a long-running owner
  would hold them (listed and filed), none pruned yet;
* ``a year, pruned``: the same, after the host's prune passes applied the
  built-in policy (completed and cancelled jobs 7 days, failures 30).

For each: ``--jobs`` jobs ingested one by one and drained (``drain()``, the
hosts' loop), in us per job, the best of three rounds; the database's size (pages in use, as a
Durable Object measures it). Then the prune itself: the passes that took the
year down to its retention (jobs deleted per second, the slowest batch of
``PRUNE_BATCH``) and a pass with nothing left to delete. Targets: a drained
job with a year of history kept to its retention within 15% of one with no
history at all, and an idle prune pass under 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tickwork import Completed, Job, OwnerRuntime
from tickwork.hosts.cpython import open_sqlite3
from tickwork.model.retention import DAY_MS, PRUNE_BATCH
from tickwork.stores import Sqlite3Database

#: The end of the simulated year: the clock the runtimes run at.
NOW_MS = 1_830_000_000_000


class NoWake:
    def recompute(self) -> None:
        return None


async def complete(job: object, signal: object) -> Completed:
    return Completed()


def _write_history(database: Sqlite3Database, per_day: int, queues: int) -> int:
    """A year of settled jobs, the newest settled just now; how many."""
    total = 365 * per_day
    # Row i settled (total - i) / per_day days ago: spread over the year.
    database.execute(
        "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < :total - 1),"
        " at(i, ms) AS (SELECT i, :now - (:total - i) * :day / :per_day FROM n) "
        "INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, "
        "max_recoveries, state, outcome, failure_reason, enqueued_at, started_at, settled_at, "
        "listed, filed) "
        "SELECT 'h' || i, 'q' || (i % :queues), 'q' || (i % :queues), 0, '{\"n\": 1}', 0, "
        "'settled', CASE WHEN i % 20 = 0 THEN 'failed' ELSE 'completed' END, "
        "CASE WHEN i % 20 = 0 THEN 'it broke' END, ms, ms, ms, 1, 1 FROM at",
        {"total": total, "now": NOW_MS, "day": DAY_MS, "per_day": per_day,  # type: ignore[arg-type]
         "queues": queues})
    return total


def _runtime(database: Sqlite3Database) -> OwnerRuntime:
    return OwnerRuntime(database, execute=complete, is_alive=lambda job: False,
                        wake=NoWake(), clock=lambda: NOW_MS)


@dataclass
class Case:
    name: str
    rows_before: int
    ingest_us: float
    drain_us: float
    size_bytes: int


def _best(name: str, database: Sqlite3Database, runtime: OwnerRuntime, jobs: int,
          tag: str, rounds: int = 3) -> Case:
    """The best of ``rounds`` rounds (each ``jobs`` new jobs): the machine's
    other load only ever slows a round down. Starts from a checkpointed WAL,
    as a file that has been open a while is."""
    database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    cases = [_drained(name, database, runtime, jobs, f"{tag}{round_}")
             for round_ in range(rounds)]
    return Case(name, cases[0].rows_before, min(case.ingest_us for case in cases),
                min(case.drain_us for case in cases), cases[-1].size_bytes)


def _drained(name: str, database: Sqlite3Database, runtime: OwnerRuntime, jobs: int,
             tag: str) -> Case:
    rows = int(database.query("SELECT count(*) FROM tickwork_jobs")[0][0])
    started = time.perf_counter()
    for number in range(jobs):
        runtime.ingest(Job(f"{tag}-{number}", f"work{number % 4}", f"work{number % 4}", 0,
                           {"n": number}))
    ingested = time.perf_counter()
    results = asyncio.run(runtime.drain())
    drained = time.perf_counter()
    if sum(result.status == "settled" for result in results) != jobs:
        raise RuntimeError(f"{name}: drained {len(results)} results for {jobs} jobs")
    return Case(name, rows, (ingested - started) / jobs * 1e6, (drained - ingested) / jobs * 1e6,
                database.size_bytes())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.retention")
    parser.add_argument("--per-day", type=int, default=800)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--queues", type=int, default=10)
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        fresh = open_sqlite3(root / "none.sqlite3", synchronous="NORMAL")
        none = _best("none", fresh, _runtime(fresh), options.jobs, "a")

        database = open_sqlite3(root / "year.sqlite3", synchronous="NORMAL")
        runtime = _runtime(database)  # creates the schema
        history = _write_history(database, options.per_day, options.queues)
        year = _best("a year", database, runtime, options.jobs, "a")

        # The prune passes a host runs, one after another until the year is down.
        batches: list[float] = []
        pruned = 0
        started = time.perf_counter()
        while True:
            batch_started = time.perf_counter()
            count = runtime.prune()
            batches.append(time.perf_counter() - batch_started)
            pruned += count
            if count < PRUNE_BATCH:
                break
        pruning_s = time.perf_counter() - started
        idle = []
        for _ in range(20):
            idle_started = time.perf_counter()
            assert runtime.prune() == 0
            idle.append(time.perf_counter() - idle_started)
        kept = int(database.query("SELECT count(*) FROM tickwork_jobs")[0][0])
        pruned_year = _best("a year, pruned", database, runtime, options.jobs, "b")

    print(f"a year of history: {history} settled jobs over {options.queues} queues "
          f"({options.per_day} a day, 1 in 20 failed); {options.jobs} jobs ingested "
          f"one by one, then drained, per case")
    print(f"{'':16} {'rows':>8} {'ingest':>10} {'drain':>10} {'size':>9}")
    for case in (none, year, pruned_year):
        print(f"{case.name:16} {case.rows_before:8d} {case.ingest_us:7.1f} us "
              f"{case.drain_us:7.1f} us {case.size_bytes / 1e6:6.1f} MB")
    print(f"prune to the built-in policy: {pruned} jobs deleted in {len(batches)} batches, "
          f"{pruning_s:.2f} s ({pruned / pruning_s:,.0f} jobs/s), slowest batch "
          f"{max(batches) * 1000:.1f} ms; {kept} rows kept")
    print(f"an idle prune pass ({options.queues + 4} queues, {kept} rows kept): "
          f"median {sorted(idle)[len(idle) // 2] * 1e6:.0f} us")
    ratio = pruned_year.drain_us / none.drain_us
    met = ratio <= 1.15 and sorted(idle)[len(idle) // 2] < 0.005
    print(f"drain with a year of history, pruned / with none: {ratio:.2f}x "
          f"(unpruned: {year.drain_us / none.drain_us:.2f}x)")
    print(f"target (a pruned year's drain within 15% of none's, an idle pass under 5 ms): "
          f"{'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
