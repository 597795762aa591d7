"""The queue gauges' read at every scrape: ``backlog()`` against ``status()``.

    python -m bench.queue_gauges [--settled 200000] [--pending 2000] [--queues 50]

One sqlite3 owner (``open_sqlite3``) holds ``--settled`` settled jobs (a
long history) and ``--pending`` unsettled ones (ready, delayed, running)
spread over ``--queues`` queues. Both reads are timed in the same run, best
of 5 each: ``status()`` (the baseline: every queue's counts, which reads the
whole table, history included) and ``backlog()`` (what a scrape of the
gauges reads: the indexes of unsettled jobs only). The pending rows are then
doubled, to show the backlog's read grows with the backlog and not with the
history. Target: ``backlog()`` under 10 ms with 200,000 settled jobs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.catch_up import START_MS, NoWake, never_run
from tickwork import Job, OwnerRuntime
from tickwork.hosts.cpython import open_sqlite3


def _best(read: Callable[[], Any], rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        read()
        best = min(best, time.perf_counter() - started)
    return best


def _settled_history(database: Any, first: int, settled: int, queues: int) -> None:
    """``settled`` settled rows, written directly, before any job is ingested."""
    database.connection.execute("""
        WITH RECURSIVE n(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM n WHERE i < ?)
        INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state, outcome,
                                   enqueued_at, started_at, settled_at, listed, filed)
        SELECT 'old-' || i, 'q' || (i % ?), 'lane', 0, 'null', 'settled', 'completed',
               ?, ?, ?, 1, 1 FROM n""", (first, first + settled - 1, queues, START_MS,
                                         START_MS, START_MS))
    # Listed through them, as the runtime's own listing would have left them.
    database.connection.execute("""
        UPDATE tickwork_meta SET value = (SELECT CAST(max(sequence) AS TEXT) FROM tickwork_jobs)
        WHERE key = 'listed_through'""")


def _fill(runtime: OwnerRuntime, database: Any, first: int, settled: int, pending: int,
          queues: int) -> None:
    """``settled`` settled rows written directly (as years of settlements
    would leave them), then ``pending`` jobs through the runtime: a third
    delayed, one running per queue."""
    if settled:
        _settled_history(database, first, settled, queues)
    batch = [Job(f"new-{first}-{i}", f"q{i % queues}", "lane", 0, None,
                 delay_ms=3_600_000 if i % 3 == 0 else None) for i in range(pending)]
    for start in range(0, len(batch), 100):
        runtime.ingest_many(batch[start:start + 100])
    database.connection.execute("""
        UPDATE tickwork_jobs SET state = 'running', claim_token = 't', started_at = ?
        WHERE sequence IN (SELECT min(sequence) FROM tickwork_jobs
                           WHERE state = 'queued' AND due_at IS NULL GROUP BY queue)""",
                                (START_MS,))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.queue_gauges")
    parser.add_argument("--settled", type=int, default=200_000)
    parser.add_argument("--pending", type=int, default=2_000)
    parser.add_argument("--queues", type=int, default=50)
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        database = open_sqlite3(Path(scratch) / "jobs.sqlite3")
        runtime = OwnerRuntime(database, execute=never_run, is_alive=lambda job: True,
                               wake=NoWake(), clock=lambda: START_MS + 1_000)
        _fill(runtime, database, 0, options.settled, options.pending, options.queues)
        rows = [("status() (baseline)", _best(runtime.status)),
                ("backlog()", _best(runtime.backlog))]
        _fill(runtime, database, 1, 0, options.pending, options.queues)
        rows.append((f"backlog(), {2 * options.pending} pending", _best(runtime.backlog)))
        ready = sum(entry.ready for entry in runtime.backlog())
    print(f"one owner: {options.settled} settled jobs, {options.pending} unsettled "
          f"({ready} ready after doubling), {options.queues} queues; best of 5")
    for name, seconds in rows:
        print(f"{name:34} {seconds * 1000:8.2f} ms")
    met = rows[1][1] < 0.01
    print(f"target (backlog() under 10 ms with {options.settled} settled): "
          f"{'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
