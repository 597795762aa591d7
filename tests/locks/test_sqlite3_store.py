"""JobLock over a CPython sqlite3 connection: transaction modes and table creation."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tickwork.locks import JobLock, LockLease
from tickwork.model.errors import InvalidArgument


async def idle(lease: LockLease) -> int:
    return lease.fence


def tables(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {row[0] for row in rows}


async def test_a_connection_in_pythons_default_mode_commits_every_lock_write(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.sqlite3"
    conn = sqlite3.connect(path)  # isolation_level "" (implicit BEGIN before writes)
    try:
        lock = JobLock(conn)
        run = await lock.run("job", 60_000, idle, slot="2026-11-30")
        assert run.ran and run.result == 1
        assert not conn.in_transaction
        with sqlite3.connect(path) as observer:  # committed, so another connection sees it
            assert observer.execute(
                "SELECT owner, fence FROM tickwork_job_locks").fetchall() == [(None, 1)]
            assert observer.execute(
                "SELECT slot FROM tickwork_job_locks_slots").fetchall() == [("2026-11-30",)]
        assert not (await lock.run("job", 60_000, idle, slot="2026-11-30")).ran
        assert not conn.in_transaction
    finally:
        conn.close()


async def test_the_lock_creates_its_tables_and_leaves_other_tables_alone(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("CREATE TABLE mine (a)")
        await JobLock(conn).run("job", 1000, idle)
        await JobLock(conn, table="other_locks").run("job", 1000, idle)
        assert tables(path) == {"mine", "tickwork_job_locks", "tickwork_job_locks_slots",
                                "other_locks", "other_locks_slots"}
    finally:
        conn.close()


async def test_a_connection_inside_its_own_transaction_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("CREATE TABLE mine (a)")
        conn.execute("BEGIN")
        conn.execute("INSERT INTO mine VALUES (1)")
        called = []

        async def job(lease: LockLease) -> None:
            called.append(lease)

        with pytest.raises(InvalidArgument, match="inside an open transaction") as caught:
            await JobLock(conn).run("job", 1000, job)
        assert caught.value.field == "store"
        assert called == []
        assert conn.in_transaction  # the caller's transaction is untouched
        conn.execute("ROLLBACK")
        assert tables(path) == {"mine"}
    finally:
        conn.close()


class NeverCommits(sqlite3.Connection):
    """Stands for Python 3.12's ``sqlite3.connect(..., autocommit=False)``."""

    autocommit = False


async def test_a_connection_that_never_commits_is_refused(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "jobs.sqlite3", factory=NeverCommits)
    try:
        with pytest.raises(InvalidArgument, match="autocommit=False"):
            await JobLock(conn).run("job", 1000, idle)
    finally:
        conn.close()
