"""The owner-local drain's commits per job, counted on sqlite3 (one connection
in autocommit: every lone write commits by itself, every BEGIN ... COMMIT once)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tickwork import Completed, Job, OwnerRuntime
from tickwork.stores import Sqlite3Database


class _NoWake:
    def recompute(self) -> None:
        pass


async def test_drain_takes_two_commits_per_job(tmp_path: Path) -> None:
    """A plain tick pays three commits per job with its ingest; the drain two
    (the settlement and the next claim share one)."""
    connection = sqlite3.connect(tmp_path / "jobs.sqlite3", isolation_level=None)
    runtime = OwnerRuntime(Sqlite3Database(connection), execute=lambda job, signal: Completed(),
                           is_alive=lambda job: False, wake=_NoWake())
    commits = [0]
    depth = [0]

    def trace(statement: str) -> None:
        word = statement.split(None, 1)[0].upper()
        if word == "BEGIN" or word == "SAVEPOINT":
            depth[0] += 1
        elif word in ("COMMIT", "RELEASE"):
            depth[0] -= 1
            commits[0] += depth[0] == 0
        elif word in ("UPDATE", "INSERT", "DELETE") and depth[0] == 0:
            commits[0] += 1

    connection.set_trace_callback(trace)
    jobs = 50
    for n in range(jobs):
        runtime.ingest(Job(f"j{n}", f"q{n % 5}", "lane", 0, {}))
    ingest_commits, commits[0] = commits[0], 0
    assert len(await runtime.drain()) == jobs
    # The first claim, one settlement-and-claim per job, the last tick's claim
    # that finds nothing (a write statement that changed nothing).
    assert (ingest_commits, commits[0]) == (jobs, jobs + 2)
    connection.close()
