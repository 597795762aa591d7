"""How DurableObjectDatabase turns a cursor's rows into tuples: values in column
order whatever the column names, and a statement whose columns change.

Runs under CPython on the ctx.storage stand-in (both SDK shapes, the
``storage`` fixture of tests/conftest.py), and inside real Pyodide on the tier's JS
storage (the "workers" suite of tests/pyodide, where ``storage`` is the tier's
``do_storage``), where rows are real JS objects: a JS object lists
integer-like keys first and keeps one value per name, so the order of a
row's keys is not always the order of its columns.
"""

from __future__ import annotations

from typing import Any

from tickwork.stores import DurableObjectDatabase


def test_values_come_in_column_order_when_a_name_looks_like_an_integer(
        storage: Any) -> None:
    db = DurableObjectDatabase(storage)
    for _ in range(2):  # the first read learns the columns, the second reuses them
        assert db.query('SELECT 2 AS b, 1 AS "1", 3 AS a, NULL AS "0"') == [(2, 1, 3, None)]
        assert db.query("SELECT 5, 'x' AS y") == [(5, "x")]


def test_a_name_used_twice_gives_both_positions_the_row_objects_value(storage: Any) -> None:
    db = DurableObjectDatabase(storage)
    # A row object holds one value per name (the last), on every SDK.
    assert db.query("SELECT 1 AS x, 2 AS x, 3 AS z") == [(2, 2, 3)]


def test_a_statement_whose_columns_change_reads_the_new_ones(storage: Any) -> None:
    db = DurableObjectDatabase(storage)
    db.execute("CREATE TABLE t (a INTEGER)")
    db.execute("INSERT INTO t VALUES (1)")
    assert db.query("SELECT * FROM t") == [(1,)]
    db.execute("ALTER TABLE t ADD COLUMN b TEXT")
    db.execute("UPDATE t SET b = 'two'")
    assert db.query("SELECT * FROM t") == [(1, "two")]
    db.execute("ALTER TABLE t RENAME COLUMN a TO c")
    assert db.query("SELECT * FROM t") == [(1, "two")]


def test_rows_keep_their_order_and_empty_results_are_empty(storage: Any) -> None:
    db = DurableObjectDatabase(storage)
    db.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v REAL, s TEXT)")
    for k in range(5):
        db.mutate("INSERT INTO t VALUES (?, ?, ?) RETURNING k", (k, k + 0.5, None))
    assert db.query("SELECT k, v, s FROM t ORDER BY k DESC") == [
        (k, k + 0.5, None) for k in reversed(range(5))]
    assert db.query("SELECT k FROM t WHERE k < 0") == []
    assert db.mutate("UPDATE t SET s = 'x' WHERE k = 3 RETURNING s, k") == [("x", 3)]
