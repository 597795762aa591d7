"""The owner-local drain's commits per job, counted on sqlite3 (one connection
in autocommit: every lone write commits by itself, every BEGIN ... COMMIT once),
and the shape of its hot statements there. CPython only: the Pyodide tier has
no sqlite3."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tickwork import Completed, IngestConflict, Job, OwnerRuntime
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
    # One per ingest, and one more: the first insert of a runtime lists the
    # rows an earlier one left unlisted (then every 100th lists, schema 0009).
    # The first claim, one settlement-and-claim per job, the last tick's claim
    # that finds nothing (a write statement that changed nothing).
    assert (ingest_commits, commits[0]) == (jobs + 1, jobs + 2)
    connection.close()


async def test_sqlite3_writes_on_the_hot_path_run_without_returning() -> None:
    """On Sqlite3Database (a CountingDatabase) ingest, its replay, a delayed
    job's insert, the claims and the settlements of a drain write with
    statements that have no RETURNING clause, and still tell a new job from
    a replay and a conflict, and a claim from none. (Promoting due jobs
    keeps its RETURNING: it reads the queues it moved.)"""
    connection = sqlite3.connect(":memory:", isolation_level=None)
    runtime = OwnerRuntime(Sqlite3Database(connection), execute=lambda job, signal: Completed(),
                           is_alive=lambda job: False, wake=_NoWake())
    writes: list[str] = []

    def trace(text: str) -> None:
        if text.lstrip().startswith(("INSERT", "UPDATE")):
            writes.append(text)

    connection.set_trace_callback(trace)
    assert runtime.ingest(Job("a", "q", "q", 0, {"n": 1})) == "queued"
    assert runtime.ingest(Job("a", "q", "q", 0, {"n": 1})) == "duplicate"
    with pytest.raises(IngestConflict):
        runtime.ingest(Job("a", "q", "q", 0, {"n": 2}))
    assert runtime.ingest(Job("b", "q", "q", 0, {}, delay_ms=0)) == "queued"
    assert [result.job_id for result in await runtime.drain()] == ["a", "b"]
    # (The first insert also lists the rows before it: its note of the
    # sequence listed through is an INSERT into tickwork_meta, not a job.)
    inserts = [text for text in writes if text.lstrip().startswith("INSERT INTO tickwork_jobs")]
    claims = [text for text in writes if "SET state = 'running'" in text]
    settles = [text for text in writes if "SET state = 'settled'" in text]
    assert (len(inserts), len(settles)) == (4, 2) and len(claims) >= 3, writes
    hot = [*inserts, *claims, *settles]
    assert not [text for text in hot if "RETURNING" in text.upper()], hot
    (stored,), = connection.execute("SELECT count(*) FROM tickwork_jobs").fetchall()
    assert stored == 2
    connection.close()
