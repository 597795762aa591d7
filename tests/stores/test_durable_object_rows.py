"""How DurableObjectDatabase turns a cursor's rows into tuples: values in column
order whatever the column names, and a statement whose columns change.

Runs twice: under CPython on the ctx.storage stand-in (both SDK shapes), and
inside real Pyodide on the tier's JS storage (the "workers" suite of
tests/pyodide), where rows are real JS objects: a JS object lists
integer-like keys first and keeps one value per name, so the order of a
row's keys is not always the order of its columns.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tickwork.stores import DurableObjectDatabase


@pytest.fixture(params=["builtin", "external"])
def do_storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    # CPython only: the tier provides its own do_storage (a JS object).
    from tests.support.fakes.do_storage import FakeDurableObjectStorage
    from tests.support.fakes.pyodide_ffi import fake_pyodide

    with fake_pyodide():
        built = FakeDurableObjectStorage(tmp_path / "do.sqlite3", sdk=request.param)
        yield built
        built.close()


def test_values_come_in_column_order_when_a_name_looks_like_an_integer(
        do_storage: Any) -> None:
    db = DurableObjectDatabase(do_storage)
    for _ in range(2):  # the first read learns the columns, the second reuses them
        assert db.query('SELECT 2 AS b, 1 AS "1", 3 AS a, NULL AS "0"') == [(2, 1, 3, None)]
        assert db.query("SELECT 5, 'x' AS y") == [(5, "x")]


def test_a_name_used_twice_gives_both_positions_the_row_objects_value(do_storage: Any) -> None:
    db = DurableObjectDatabase(do_storage)
    # A row object holds one value per name (the last), on every SDK.
    assert db.query("SELECT 1 AS x, 2 AS x, 3 AS z") == [(2, 2, 3)]


def test_a_statement_whose_columns_change_reads_the_new_ones(do_storage: Any) -> None:
    db = DurableObjectDatabase(do_storage)
    db.execute("CREATE TABLE t (a INTEGER)")
    db.execute("INSERT INTO t VALUES (1)")
    assert db.query("SELECT * FROM t") == [(1,)]
    db.execute("ALTER TABLE t ADD COLUMN b TEXT")
    db.execute("UPDATE t SET b = 'two'")
    assert db.query("SELECT * FROM t") == [(1, "two")]
    db.execute("ALTER TABLE t RENAME COLUMN a TO c")
    assert db.query("SELECT * FROM t") == [(1, "two")]


def test_rows_keep_their_order_and_empty_results_are_empty(do_storage: Any) -> None:
    db = DurableObjectDatabase(do_storage)
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v REAL, s TEXT)")
    for k in range(5):
        db.mutate("INSERT INTO t VALUES (?, ?, ?) RETURNING k", (k, k + 0.5, None))
    assert db.query("SELECT k, v, s FROM t ORDER BY k DESC") == [
        (k, k + 0.5, None) for k in reversed(range(5))]
    assert db.query("SELECT k FROM t WHERE k < 0") == []
    assert db.mutate("UPDATE t SET s = 'x' WHERE k = 3 RETURNING s, k") == [("x", 3)]
