"""A failed COMMIT or ROLLBACK on the sqlite3 owner loses nothing reported as written.

A COMMIT can fail (``database is locked`` while another connection reads a
rollback-journal database, a full disk, an I/O error) and leave the
transaction open; if nothing ends it, every later write joins it, each call
reports success, and all of it is gone when the connection closes. These
tests make COMMIT fail for real (a reader holding the file) and by injection
(COMMIT, ROLLBACK, ``commit()``, ``rollback()``), in every journal mode and
transaction-control mode, with and without a projector, and check what a
fresh connection finds in the file afterwards.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import ScriptedExecutor, job
from tickwork import DatabaseUnusable, OwnerRuntime, QueueTransition
from tickwork.stores import Sqlite3Database


class Wake:
    def recompute(self) -> None:
        pass


class FaultyConnection:
    """A sqlite3 connection whose next COMMIT/ROLLBACK statements (or
    ``commit()``/``rollback()`` calls) fail, as a locked or broken database's
    would: the real transaction stays open, as it does after SQLITE_BUSY."""

    def __init__(self, real: sqlite3.Connection) -> None:
        self.real = real
        self.failures: dict[str, int] = {}
        self.failed: list[str] = []

    def fail(self, point: str, times: int = 1) -> None:
        self.failures[point] = times

    def _maybe_fail(self, point: str) -> None:
        left = self.failures.get(point, 0)
        if left:
            self.failures[point] = left - 1
            self.failed.append(point)
            raise sqlite3.OperationalError(f"{point} failed (injected)")

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        word = sql.split(None, 1)[0].upper()
        if word in ("COMMIT", "ROLLBACK") and " TO " not in sql.upper():
            self._maybe_fail(word)
        return self.real.execute(sql, params)

    def commit(self) -> None:
        self._maybe_fail("commit()")
        self.real.commit()

    def rollback(self) -> None:
        self._maybe_fail("rollback()")
        self.real.rollback()

    @property
    def in_transaction(self) -> bool:
        return self.real.in_transaction

    @property
    def isolation_level(self) -> str | None:
        return self.real.isolation_level

    def close(self) -> None:
        self.real.close()


JOURNAL_MODES = ("delete", "wal")
#: None: autocommit; "DEFERRED": Python's default (legacy) transaction control.
ISOLATION_LEVELS = (None, "DEFERRED")


def connect(path: Path, journal: str, isolation: str | None, **options: Any) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=isolation, **options)
    connection.execute(f"PRAGMA journal_mode = {journal}")
    return connection


def stored(path: Path) -> dict[str, tuple[str, str | None, str | None]]:
    """job_id -> (state, outcome, cancellation_id), as a fresh connection reads the file."""
    reader = sqlite3.connect(path)
    try:
        return {row[0]: tuple(row[1:]) for row in reader.execute(
            "SELECT job_id, state, outcome, cancellation_id FROM tickwork_jobs ORDER BY sequence")}
    finally:
        reader.close()


@pytest.fixture(params=[(j, i, p) for j in JOURNAL_MODES for i in ISOLATION_LEVELS
                        for p in (False, True)],
                ids=lambda v: f"{v[0]}-{'autocommit' if v[1] is None else 'legacy'}"
                              f"{'-projector' if v[2] else ''}")
def setup(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    journal, isolation, projector = request.param
    path = tmp_path / "jobs.sqlite3"
    connection = FaultyConnection(connect(path, journal, isolation))
    projected: list[QueueTransition] = []
    runtime = OwnerRuntime(Sqlite3Database(connection), execute=ScriptedExecutor(),
                           is_alive=lambda job: False, wake=Wake(),
                           project=projected.append if projector else None)
    yield {"path": path, "connection": connection, "runtime": runtime, "journal": journal,
           "isolation": isolation}
    connection.close()


def _ingest_many(runtime: OwnerRuntime) -> Any:
    return runtime.ingest_many([job("m1"), job("m2", queue="other")])


OPERATIONS: dict[str, Callable[[OwnerRuntime], Any]] = {
    "ingest_many": _ingest_many,
    "cancel": lambda runtime: runtime.cancel("a", "c1"),
    "fail_lane": lambda runtime: runtime.fail_lane("lane", "refused"),
    "purge": lambda runtime: runtime.purge("q"),
    "tick": lambda runtime: asyncio.run(runtime.tick()),
}


@pytest.mark.parametrize("operation", list(OPERATIONS))
@pytest.mark.parametrize("point", ["COMMIT", "COMMIT+ROLLBACK"])
def test_a_failed_commit_writes_nothing_and_later_writes_are_durable(
    setup: dict[str, Any], operation: str, point: str,
) -> None:
    runtime: OwnerRuntime = setup["runtime"]
    connection: FaultyConnection = setup["connection"]
    runtime.ingest(job("a"))
    before = stored(setup["path"])
    # Where the operation ends a transaction of its own, make that end fail.
    connection.fail("COMMIT")
    connection.fail("commit()")
    if point == "COMMIT+ROLLBACK":
        connection.fail("ROLLBACK")
        connection.fail("rollback()")
    succeeded = False
    try:
        OPERATIONS[operation](runtime)
    except sqlite3.OperationalError as error:
        assert "injected" in str(error)
        assert stored(setup["path"]) == before  # the failed operation wrote nothing
    else:
        succeeded = True
        # Nothing of this operation ended a transaction (a lone autocommit
        # statement): it must be durable as it was reported.
        assert connection.failed == []
        connection.failures.clear()
    # A ROLLBACK that failed is retried before the next call; then all is normal.
    connection.failures.clear()
    assert not connection.in_transaction or point == "COMMIT+ROLLBACK"
    assert runtime.ingest(job("after", queue="after")) == "queued"
    assert not connection.in_transaction
    result = asyncio.run(runtime.tick())
    assert result.status == "settled"
    connection.close()  # everything reported as written must be in the file
    final = stored(setup["path"])
    # A cancellation that landed (a lone fenced write in autocommit mode) is
    # what the tick settles first; otherwise a job runs.
    expected = "cancelled" if operation == "cancel" and succeeded else "completed"
    assert final[result.job_id or ""][:2] == ("settled", expected)
    assert "after" in final
    assert ("a" in final) is not (operation == "purge" and succeeded)
    if operation == "ingest_many" and connection.failed:
        assert "m1" not in final and "m2" not in final


def test_a_rollback_that_keeps_failing_makes_the_owner_refuse_work(tmp_path: Path) -> None:
    path = tmp_path / "jobs.sqlite3"
    connection = FaultyConnection(connect(path, "delete", None))
    runtime = OwnerRuntime(Sqlite3Database(connection), execute=ScriptedExecutor(),
                           is_alive=lambda job: False, wake=Wake())
    connection.fail("COMMIT")
    connection.fail("ROLLBACK", times=2)
    with pytest.raises(sqlite3.OperationalError, match="COMMIT failed") as failed:
        _ingest_many(runtime)
    assert any("rolling back failed too" in note for note in failed.value.__notes__)
    assert connection.in_transaction
    # The next call tries the ROLLBACK again, fails, and refuses to work in there.
    with pytest.raises(DatabaseUnusable, match="still inside a transaction"):
        runtime.ingest(job("x"))
    assert connection.in_transaction
    # The third ROLLBACK works: the owner is usable again, nothing was kept.
    assert runtime.ingest(job("y")) == "queued"
    connection.close()
    assert list(stored(path)) == ["y"]


@pytest.mark.parametrize("isolation", ISOLATION_LEVELS,
                         ids=["autocommit", "legacy"])
def test_a_reader_in_a_rollback_journal_database_fails_the_commit_not_the_data(
    tmp_path: Path, isolation: str | None,
) -> None:
    """The issue's reproduction, for real: no injection."""
    path = tmp_path / "jobs.sqlite3"
    connection = connect(path, "delete", isolation, timeout=0.05)
    runtime = OwnerRuntime(Sqlite3Database(connection), execute=ScriptedExecutor(),
                           is_alive=lambda job: False, wake=Wake())
    reader = sqlite3.connect(path, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM tickwork_jobs").fetchall()  # holds a read lock
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _ingest_many(runtime)
    assert not connection.in_transaction
    reader.execute("ROLLBACK")
    assert runtime.ingest(job("a")) == "queued"
    result = asyncio.run(runtime.tick())
    assert (result.status, result.job_id) == ("settled", "a")
    connection.close()
    assert stored(path) == {"a": ("settled", "completed", None)}
    reader.close()


def test_a_host_transaction_keeps_its_savepoint_behaviour(tmp_path: Path) -> None:
    """Inside the host's own transaction tickwork never commits or rolls back:
    a failing write is undone to its savepoint, and the host decides."""
    path = tmp_path / "jobs.sqlite3"
    connection = connect(path, "delete", None)
    runtime = OwnerRuntime(Sqlite3Database(connection), execute=ScriptedExecutor(),
                           is_alive=lambda job: False, wake=Wake(),
                           project=lambda transition: None)
    connection.execute("CREATE TABLE orders (id TEXT PRIMARY KEY)")
    connection.execute("BEGIN")
    connection.execute("INSERT INTO orders VALUES ('o1')")
    runtime.transactional.enqueue(job("a"))
    assert connection.in_transaction  # still the host's
    connection.execute("ROLLBACK")  # the host changes its mind: both go
    assert stored(path) == {}
    assert connection.execute("SELECT count(*) FROM orders").fetchone() == (0,)
    connection.close()
