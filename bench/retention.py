"""Retention: tick cost with a year of settled history beside none, and what a prune costs.

    python -m bench.retention [--per-day 800] [--jobs 2000] [--queues 10]

One sqlite3 owner (``open_sqlite3``, synchronous NORMAL as ``tickwork
serve`` uses it) per case, each on a fresh file, in the same run:

* ``none``: no settled history;
* ``a year``: 365 days x ``--per-day`` settled jobs over ``--queues``
  queues (one in 20 failed), written directly as a long-running owner
  would hold them (listed and filed), none pruned yet;
* ``a year, pruned``: the same, right after prune passes applied the
  built-in policy (completed and cancelled jobs 7 days, failures 30) to the
  whole year at once (its file keeps the freed pages);
* ``kept all along``: an owner whose history was pruned as it went: 30
  days of the same jobs on a fresh file, pruned to the same policy (the
  steady state of a year under retention).

For each: ``--jobs`` jobs ingested one by one and drained (``drain()``, the
hosts' loop), in us per job, the best of ``--rounds`` rounds interleaved
over the cases; the database's size (pages in use, as a
Durable Object measures it). Then the prune itself: the passes that took the
year down to its retention (jobs deleted per second, the slowest batch of
``PRUNE_BATCH``) and a pass with nothing left to delete. Targets: a drained
job with its history kept to its retention all along within 15% of one with
no history at all, and an idle prune pass under 5 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
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


def _write_history(database: Sqlite3Database, per_day: int, queues: int,
                   days: int = 365) -> int:
    """``days`` of settled jobs, the newest settled just now; how many."""
    total = days * per_day
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


def _prune_all(runtime: OwnerRuntime) -> tuple[int, list[float]]:
    """Prune batches one after another until one is not full: how many jobs
    went, and each batch's seconds."""
    batches: list[float] = []
    pruned = 0
    while True:
        started = time.perf_counter()
        count = runtime.prune()
        batches.append(time.perf_counter() - started)
        pruned += count
        if count < PRUNE_BATCH:
            return pruned, batches


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.retention")
    parser.add_argument("--per-day", type=int, default=800)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)

        def opened(name: str) -> tuple[Sqlite3Database, OwnerRuntime]:
            database = open_sqlite3(root / f"{name}.sqlite3", synchronous="NORMAL")
            return database, _runtime(database)  # the runtime creates the schema

        none = opened("none")
        year = opened("year")
        history = _write_history(year[0], options.per_day, options.queues)
        year[0].execute("PRAGMA wal_checkpoint(TRUNCATE)")
        shutil.copyfile(root / "year.sqlite3", root / "pruned.sqlite3")
        pruned_year = opened("pruned")
        # The prune passes a host would run, back to back until the year is down.
        started = time.perf_counter()
        pruned, batches = _prune_all(pruned_year[1])
        pruning_s = time.perf_counter() - started
        idle = []
        for _ in range(20):
            idle_started = time.perf_counter()
            assert pruned_year[1].prune() == 0
            idle.append(time.perf_counter() - idle_started)
        kept = int(pruned_year[0].query("SELECT count(*) FROM tickwork_jobs")[0][0])
        steady = opened("steady")
        _write_history(steady[0], options.per_day, options.queues, days=30)
        _prune_all(steady[1])
        cases = {"none": none, "a year": year, "a year, pruned": pruned_year,
                 "kept all along": steady}
        for database, _ in cases.values():
            database.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        # Rounds interleaved over the cases, the best of each case's kept: the
        # machine's other load only ever slows a round down, and a change in
        # that load reaches every case alike.
        rounds: dict[str, list[Case]] = {name: [] for name in cases}
        for round_ in range(options.rounds):
            for name, (database, runtime) in cases.items():
                rounds[name].append(_drained(name, database, runtime, options.jobs,
                                             f"r{round_}"))
        best = {name: Case(name, runs[0].rows_before, min(run.ingest_us for run in runs),
                           min(run.drain_us for run in runs), runs[-1].size_bytes)
                for name, runs in rounds.items()}

    print(f"a year of history: {history} settled jobs over {options.queues} queues "
          f"({options.per_day} a day, 1 in 20 failed); {options.jobs} jobs ingested "
          f"one by one, then drained, per case and round; the best of {options.rounds} "
          f"rounds, interleaved")
    print(f"{'':16} {'rows':>8} {'ingest':>10} {'drain':>10} {'size':>9}")
    for case in best.values():
        print(f"{case.name:16} {case.rows_before:8d} {case.ingest_us:7.1f} us "
              f"{case.drain_us:7.1f} us {case.size_bytes / 1e6:6.1f} MB")
    print(f"prune to the built-in policy: {pruned} jobs deleted in {len(batches)} batches, "
          f"{pruning_s:.2f} s ({pruned / pruning_s:,.0f} jobs/s), slowest batch "
          f"{max(batches) * 1000:.1f} ms; {kept} rows kept")
    median_idle = sorted(idle)[len(idle) // 2]
    print(f"an idle prune pass ({options.queues} queues, {kept} rows kept): "
          f"median {median_idle * 1e6:.0f} us")
    baseline = best["none"].drain_us
    ratio = best["kept all along"].drain_us / baseline
    met = ratio <= 1.15 and median_idle < 0.005
    print(f"drain / with no history: kept all along {ratio:.2f}x, a year unpruned "
          f"{best['a year'].drain_us / baseline:.2f}x, a year pruned at once "
          f"{best['a year, pruned'].drain_us / baseline:.2f}x")
    print(f"target (drain kept all along within 15% of none's, an idle pass under 5 ms): "
          f"{'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
