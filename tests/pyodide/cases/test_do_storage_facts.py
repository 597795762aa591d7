"""The tier's Durable Object storage, seen from Python through the real FFI,
against what real workerd was measured to do (runs inside Pyodide).

Each fact here is one the tier's behaviour run depends on; the CPython
stand-in (tests/support/fakes/do_storage.py) is held to the same facts by
tests/stores/test_do_storage_stand_in.py.
"""

from __future__ import annotations

from typing import Any

import pytest

EDGE = 2**53 - 1


def _table(storage: Any) -> None:
    storage.sql.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, v REAL, b BLOB)")


def test_rows_are_js_objects_and_values_convert_as_measured(do_storage: Any) -> None:
    from collections.abc import Mapping

    from pyodide.ffi import JsProxy, jsnull, to_js  # type: ignore[import-not-found]

    _table(do_storage)
    do_storage.sql.exec("INSERT INTO t VALUES (?, ?, ?, ?)", 7, None, 2.0, to_js(b"\x00\x01"))
    [row] = do_storage.sql.exec("SELECT id, name, v, b FROM t").toArray()
    assert isinstance(row, JsProxy) and not isinstance(row, Mapping)
    assert (row.id, type(row.id)) == (7, int)
    assert row.name is jsnull  # NULL
    assert (row.v, type(row.v)) == (2, int)  # REAL 2.0 reads back as the int 2
    assert row.b.constructor.name == "ArrayBuffer"
    converted = row.to_py()
    assert converted["name"] is jsnull  # to_py() keeps jsnull
    assert isinstance(converted["b"], memoryview) and bytes(converted["b"]) == b"\x00\x01"


def test_none_binds_null_and_a_bool_binds_text(do_storage: Any) -> None:
    _table(do_storage)
    do_storage.sql.exec("INSERT INTO t (id, name) VALUES (1, ?)", None)
    do_storage.sql.exec("INSERT INTO t (id, name) VALUES (2, ?)", True)
    rows = [list(values) for values in do_storage.sql.exec(
        "SELECT typeof(name), name FROM t ORDER BY id").raw()]
    assert rows[0][0] == "null"
    assert rows[1] == ["text", "true"]


def test_the_integer_bounds_are_refused_as_bigints(do_storage: Any) -> None:
    from pyodide.ffi import JsException  # type: ignore[import-not-found]

    for value in (EDGE, -EDGE):
        with pytest.raises(JsException) as refused:
            do_storage.sql.exec("SELECT ?", value)
        assert str(refused.value) == "TypeError: Cannot convert a BigInt value to a number"
    assert do_storage.sql.exec("SELECT ? AS v", float(EDGE)).one().v == EDGE


def test_too_many_parameters_names_the_offset(do_storage: Any) -> None:
    from pyodide.ffi import JsException  # type: ignore[import-not-found]

    with pytest.raises(JsException) as refused:
        do_storage.sql.exec("SELECT " + ", ".join(["?"] * 101), *range(101))
    assert refused.value.message == "too many SQL variables at offset 307: SQLITE_ERROR"


def test_transaction_statements_are_refused(do_storage: Any) -> None:
    from pyodide.ffi import JsException  # type: ignore[import-not-found]

    for statement in ("BEGIN", "COMMIT", "SAVEPOINT x", "  begin immediate"):
        with pytest.raises(JsException) as refused:
            do_storage.sql.exec(statement)
        assert refused.value.message.startswith(
            "To execute a transaction, please use the state.storage.transaction() or "
            "state.storage.transactionSync() APIs")


def test_transaction_sync_returns_nests_and_rolls_back_with_the_original_exception(
    do_storage: Any,
) -> None:
    _table(do_storage)

    class Refused(Exception):
        pass

    def inner() -> None:
        do_storage.sql.exec("INSERT INTO t (id) VALUES (2)")
        raise Refused("inner")

    def outer() -> str:
        do_storage.sql.exec("INSERT INTO t (id) VALUES (1)")
        with pytest.raises(Refused):
            do_storage.transactionSync(inner)
        return "done"

    assert do_storage.transactionSync(outer) == "done"
    assert [list(v) for v in do_storage.sql.exec("SELECT id FROM t").raw()] == [[1]]
    with pytest.raises(Refused) as raised:
        do_storage.transactionSync(inner)
    assert str(raised.value) == "inner"  # the very exception, its type intact
    assert [list(v) for v in do_storage.sql.exec("SELECT id FROM t").raw()] == [[1]]


async def test_alarms_read_back_as_int_or_jsnull(do_storage: Any) -> None:
    from pyodide.ffi import jsnull  # type: ignore[import-not-found]

    assert await do_storage.getAlarm() is jsnull
    await do_storage.setAlarm(1_796_000_000_000)
    value = await do_storage.getAlarm()
    assert (value, type(value)) == (1_796_000_000_000, int)
    await do_storage.deleteAlarm()
    assert await do_storage.getAlarm() is jsnull
