"""The SyncDatabase contract, on every adapter: Python's sqlite3 and a Durable
Object's storage (the stand-in answering like either SDK).

What the owner-local runtime relies on: rows as tuples of plain values (NULL
as None, INTEGER as int), a lone write durable by itself, ``atomic`` all or
nothing and nesting, and the host's own transaction joined, not ended.
"""

from __future__ import annotations

import pytest

from tests.support import Harness
from tickwork.ports.database import SizedDatabase, SyncDatabase


def prepared(harness: Harness) -> SyncDatabase:
    database = harness.database()
    database.execute("CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, n INTEGER, x TEXT)")
    return database


def test_rows_are_tuples_of_plain_values(harness: Harness) -> None:
    database = prepared(harness)
    database.mutate("INSERT INTO t VALUES (?, ?, ?)", ("a", 2**53 - 2, None))
    rows = database.query("SELECT k, n, x, 2.0 AS f FROM t")
    [row] = rows
    assert row[:3] == ("a", 2**53 - 2, None)
    # A REAL may come back as an int (a Durable Object reads 2.0 as 2): tickwork
    # stores none, and every value it reads is compared by value.
    assert row[3] == 2
    assert isinstance(row, tuple) and type(row[1]) is int and row[2] is None


def test_mutate_returns_returning_rows_and_is_durable_alone(harness: Harness) -> None:
    database = prepared(harness)
    assert database.mutate("INSERT INTO t VALUES ('a', 1, 'x') RETURNING n") == [(1,)]
    assert database.mutate("UPDATE t SET n = 2 WHERE k = 'missing' RETURNING n") == []
    harness.open()  # another handle (a restarted process) sees it
    assert harness.database().query("SELECT n FROM t") == [(1,)]


def test_atomic_commits_everything_or_nothing(harness: Harness) -> None:
    database = prepared(harness)

    def both() -> str:
        database.mutate("INSERT INTO t VALUES ('a', 1, NULL)")
        database.mutate("INSERT INTO t VALUES ('b', 2, NULL)")
        return "done"

    assert database.atomic(both) == "done"

    def half() -> None:
        database.mutate("INSERT INTO t VALUES ('c', 3, NULL)")
        raise LookupError("boom")

    with pytest.raises(LookupError, match="boom"):
        database.atomic(half)
    assert database.query("SELECT k FROM t ORDER BY k") == [("a",), ("b",)]


def test_atomic_nests_and_an_inner_failure_undoes_only_its_writes(harness: Harness) -> None:
    database = prepared(harness)

    def inner() -> None:
        database.mutate("INSERT INTO t VALUES ('inner', 1, NULL)")
        raise ValueError("inner failed")

    def outer() -> None:
        database.mutate("INSERT INTO t VALUES ('outer', 1, NULL)")
        with pytest.raises(ValueError):
            database.atomic(inner)

    database.atomic(outer)
    assert database.query("SELECT k FROM t") == [("outer",)]


def test_the_hosts_transaction_is_joined_not_ended(harness: Harness) -> None:
    database = prepared(harness)

    def host_work() -> None:
        database.atomic(lambda: database.mutate("INSERT INTO t VALUES ('job', 1, NULL)"))
        harness.host_execute("INSERT INTO t VALUES ('domain', 1, NULL)")
        raise RuntimeError("the host rolls back")

    with pytest.raises(RuntimeError):
        harness.host_transaction(host_work)
    assert database.query("SELECT k FROM t") == []  # both rolled back together


def test_size_bytes_is_the_pages_in_use_and_follows_every_write(harness: Harness) -> None:
    database = prepared(harness)
    assert isinstance(database, SizedDatabase)
    empty = database.size_bytes()
    assert empty > 0 and empty % 512 == 0  # whole pages
    database.mutate("INSERT INTO t (k, x) SELECT value, zeroblob(200000) FROM json_each(?)",
                    ('["a", "b", "c"]',))
    grown = database.size_bytes()  # read again, not a value kept from the first read
    assert grown >= empty + 3 * 200_000
    database.mutate("DELETE FROM t")
    # The freed pages leave the count at once, though the file keeps them.
    assert database.size_bytes() < grown - 500_000
