"""DurableObjectDatabase against the ctx.storage stand-in: the Durable Object rules."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.support import ScriptedExecutor, job
from tests.support.fakes.do_storage import FakeDurableObjectStorage
from tests.support.fakes.pyodide_ffi import fake_pyodide
from tickwork import IngestConflict, InvalidArgument, OwnerRuntime, Recovery
from tickwork.model.jobs import MAX_SAFE_INTEGER
from tickwork.stores import DurableObjectDatabase

TRANSACTION_WORDS = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE", "END")


class Wake:
    def recompute(self) -> None:
        pass


class SpyingSql:
    """Wraps storage.sql to record every statement and binding the owner sends."""

    def __init__(self, sql: Any) -> None:
        self._sql = sql
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def exec(self, query: str, *bindings: Any) -> Any:
        self.calls.append((query, bindings))
        return self._sql.exec(query, *bindings)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sql, name)


class SpyingStorage:
    def __init__(self, storage: FakeDurableObjectStorage) -> None:
        self._storage = storage
        self.sql = SpyingSql(storage.sql)

    def transactionSync(self, fn: Any) -> Any:
        return self._storage.transactionSync(fn)


async def test_full_lifecycle_never_sends_transaction_sql_and_stays_in_limits(
    storage: FakeDurableObjectStorage,
) -> None:
    spy = SpyingStorage(storage)
    executor = ScriptedExecutor()
    runtime = OwnerRuntime(DurableObjectDatabase(spy), execute=executor,
                           is_alive=lambda job: False, wake=Wake(),
                           project=lambda transition: None)
    runtime.ingest(job("a", priority=MAX_SAFE_INTEGER, recovery=Recovery(3)))
    runtime.ingest(job("b", queue="q2", lane="bad", priority=-MAX_SAFE_INTEGER))
    runtime.ingest(job("c", queue="q3"))
    runtime.cancel("c", "c1")
    runtime.fail_lane("bad", "refused")
    while (await runtime.tick()).status != "idle":
        pass
    runtime.ingest(job("d", queue="q4"))
    runtime.purge("q4")
    assert spy.sql.calls, "the owner sent nothing"
    for query, bindings in spy.sql.calls:
        first_word = query.split()[0].upper()
        assert first_word not in TRANSACTION_WORDS, query
        assert len(bindings) <= 100
        for value in bindings:
            assert value is not None, "None must be bound as JS null"
            assert not isinstance(value, bool), "a bool would be stored as the TEXT 'true'"
            if isinstance(value, int):
                # Pyodide hands +-(2**53 - 1) itself to JS as a BigInt (refused).
                assert -MAX_SAFE_INTEGER < value < MAX_SAFE_INTEGER, (query, value)
            elif isinstance(value, float):
                assert abs(value) <= MAX_SAFE_INTEGER, (query, value)


def test_rows_are_normalised_to_plain_python_values(storage: FakeDurableObjectStorage) -> None:
    owner = DurableObjectDatabase(storage)
    owner.execute("CREATE TABLE t (i INTEGER, n TEXT, r REAL, s TEXT)")
    owner.execute("INSERT INTO t VALUES (?, ?, ?, ?)", (MAX_SAFE_INTEGER, None, 1.5, "x"))
    [row] = owner.query("SELECT i, n, r, s FROM t")
    assert row == (MAX_SAFE_INTEGER, None, 1.5, "x")
    assert type(row[0]) is int and row[1] is None


def test_more_than_100_parameters_is_refused_before_reaching_storage(
    storage: FakeDurableObjectStorage,
) -> None:
    spy = SpyingStorage(storage)
    owner = DurableObjectDatabase(spy)
    with pytest.raises(InvalidArgument, match="100"):
        owner.query("SELECT " + ", ".join("?" * 101), tuple(range(101)))
    assert spy.sql.calls == []


def test_atomic_keeps_the_original_error_and_rolls_back(storage: FakeDurableObjectStorage) -> None:
    owner = DurableObjectDatabase(storage)
    owner.execute("CREATE TABLE t (v TEXT)")

    def write_then_fail() -> None:
        owner.execute("INSERT INTO t VALUES ('x')")
        raise IngestConflict("a", ("payload",))

    with pytest.raises(IngestConflict) as caught:
        owner.atomic(write_then_fail)
    assert caught.value.job_id == "a"
    assert owner.query("SELECT count(*) FROM t") == [(0,)]
    assert owner.atomic(lambda: owner.query("SELECT 7")) == [(7,)]


async def test_evicted_object_rebuilds_and_recovers(tmp_path: Path) -> None:
    """An object evicted mid-job loses its in-memory execution; the rebuilt
    object finds the running claim at start-up and recovers it."""
    with fake_pyodide():
        storage = FakeDurableObjectStorage(tmp_path / "do.sqlite3", sdk="builtin")
        executor = ScriptedExecutor()
        before = OwnerRuntime(DurableObjectDatabase(storage), execute=executor,
                              is_alive=lambda job: False, wake=Wake())
        before.ingest(job("a", payload={"do": "block"}, recovery=Recovery(1)))
        task = asyncio.create_task(before.tick())
        await asyncio.sleep(0.01)
        rebuilt_storage = FakeDurableObjectStorage.reopen(storage)  # eviction
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)  # its storage is gone
        after = OwnerRuntime(DurableObjectDatabase(rebuilt_storage), execute=executor,
                             is_alive=lambda job: False, wake=Wake())
        assert (await after.tick()).status == "requeued"
        executor.release("a")
        assert (await after.tick()).outcome == "completed"
        record = after.read("a")
        assert record is not None and record.recoveries == 1
        rebuilt_storage.close()


class FloatingCursor:
    """A cursor whose INTEGER values arrive as floats (JS doubles not converted back)."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor
        self.columnNames = cursor.columnNames

    def toArray(self) -> list[dict[str, Any]]:
        return [
            {name: float(value) if type(value) is int else value for name, value in row.items()}
            for row in self._cursor.toArray()
        ]


class FloatingSql:
    def __init__(self, sql: Any) -> None:
        self._sql = sql

    def exec(self, query: str, *bindings: Any) -> FloatingCursor:
        return FloatingCursor(self._sql.exec(query, *bindings))


class FloatingStorage:
    def __init__(self, storage: FakeDurableObjectStorage) -> None:
        self._storage = storage
        self.sql = FloatingSql(storage.sql)

    def transactionSync(self, fn: Any) -> Any:
        return self._storage.transactionSync(fn)


async def test_integers_arriving_as_floats_are_ints_again(tmp_path: Path) -> None:
    with fake_pyodide():
        storage = FakeDurableObjectStorage(tmp_path / "do.sqlite3", sdk="external")
        runtime = OwnerRuntime(DurableObjectDatabase(FloatingStorage(storage)),
                               execute=ScriptedExecutor(), is_alive=lambda job: False,
                               wake=Wake())
        runtime.ingest(job("a", priority=MAX_SAFE_INTEGER, recovery=Recovery(2)))
        runtime.ingest(job("b", priority=-5))
        assert (await runtime.tick()).job_id == "a"
        record = runtime.read("a")
        assert record is not None
        for value in (record.priority, record.sequence, record.recoveries, record.enqueued_at,
                      record.started_at, record.settled_at, record.recovery.max_recoveries
                      if record.recovery else None):
            assert type(value) is int, value
        assert record.priority == MAX_SAFE_INTEGER
        head = runtime.read_queue_head("q")
        assert head is not None and head.job_id == "b" and type(head.priority) is int
        storage.close()
