"""Tests of the Durable Object storage stand-in itself: one rule per test, each
written so that it fails if the stand-in stopped enforcing that rule."""

from __future__ import annotations

import asyncio
import datetime
import inspect
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakes.do_storage import (
    BIGINT_BINDING,
    INVALID_DATE,
    NO_STATEMENT,
    ONE_MULTIPLE_RESULTS,
    ONE_NO_RESULTS,
    TRANSACTION_ERROR_MESSAGE,
    WRONG_BINDING_COUNT,
    EvictedStorageError,
    FakeDurableObjectStorage,
    JsDict,
    StricterThanWorkersError,
    split_statements,
)
from tests.support.fakes.pyodide_ffi import (
    JsArray,
    JsBuffer,
    JsException,
    JsObject,
    fake_pyodide,
    fake_pyodide_ffi,  # noqa: F401 - the fixture under test, used via usefixtures
    fake_pyodide_installed,
    fake_pyodide_is_installed,
    install_fake_pyodide,
    jsnull,
    to_js,
    uninstall_fake_pyodide,
)

SDKS = ("builtin", "external")


def run(awaitable: Any) -> Any:
    async def wait() -> Any:
        return await awaitable

    return asyncio.run(wait())


@pytest.fixture(params=SDKS)
def storage(request: pytest.FixtureRequest) -> Iterator[FakeDurableObjectStorage]:
    store = FakeDurableObjectStorage(sdk=request.param)
    store.sql.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, v REAL, b BLOB)")
    yield store
    store.close()


@pytest.fixture
def builtin() -> Iterator[FakeDurableObjectStorage]:
    store = FakeDurableObjectStorage(sdk="builtin")
    store.sql.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, v REAL, b BLOB)")
    yield store
    store.close()


@pytest.fixture
def external() -> Iterator[FakeDurableObjectStorage]:
    store = FakeDurableObjectStorage(sdk="external")
    store.sql.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, v REAL, b BLOB)")
    yield store
    store.close()


def null_of(store: FakeDurableObjectStorage) -> Any:
    return jsnull if store.sdk == "builtin" else None


def as_dicts(store: FakeDurableObjectStorage, rows: Any) -> list[dict[str, Any]]:
    if store.sdk == "builtin":
        return [row.to_py() for row in rows]
    return [dict(row) for row in rows]


def ids(store: FakeDurableObjectStorage) -> list[int]:
    return [row[0] for row in store.debug_query("SELECT id FROM t ORDER BY id")]


def insert(store: FakeDurableObjectStorage, *row_ids: int) -> None:
    for row_id in row_ids:
        store.sql.exec("INSERT INTO t (id, name) VALUES (?, ?)", row_id, f"n{row_id}")


# ---------------------------------------------------------------------------
# Cursor API
# ---------------------------------------------------------------------------
def test_builtin_to_array_is_a_js_array(builtin: FakeDurableObjectStorage) -> None:
    insert(builtin, 1, 2)
    rows = builtin.sql.exec("SELECT id, name FROM t ORDER BY id").toArray()
    assert isinstance(rows, JsArray)
    assert not isinstance(rows, list)
    assert rows.length == 2
    assert len(rows) == 2
    assert rows[0].name == "n1"
    assert rows[-1].id == 2
    assert [row.id for row in rows] == [1, 2]
    assert rows.to_py() == [{"id": 1, "name": "n1"}, {"id": 2, "name": "n2"}]


def test_builtin_rows_are_plain_js_objects(builtin: FakeDurableObjectStorage) -> None:
    insert(builtin, 1)
    row = builtin.sql.exec("SELECT id, name FROM t").one()
    assert isinstance(row, JsObject)
    assert row.name == "n1"
    assert row.to_py() == {"id": 1, "name": "n1"}
    assert row.as_object_map()["name"] == "n1"
    assert not hasattr(row, "missing")
    with pytest.raises(TypeError):
        row["name"]  # type: ignore[index]  # a plain-object JsProxy is not subscriptable
    with pytest.raises(TypeError):
        iter(row)


def test_external_rows_are_dicts_with_attribute_access(external: FakeDurableObjectStorage) -> None:
    insert(external, 1, 2)
    rows = external.sql.exec("SELECT id, name FROM t ORDER BY id").toArray()
    assert type(rows) is list
    assert all(isinstance(row, JsDict) for row in rows)
    assert rows[0]["name"] == "n1"
    assert rows[1].name == "n2"
    assert rows == [{"id": 1, "name": "n1"}, {"id": 2, "name": "n2"}]


def test_one_requires_exactly_one_row(storage: FakeDurableObjectStorage) -> None:
    insert(storage, 1, 2)
    assert storage.sql.exec("SELECT name FROM t WHERE id = ?", 1).one().name == "n1"
    with pytest.raises(JsException) as none:
        storage.sql.exec("SELECT name FROM t WHERE id = ?", 99).one()
    assert (none.value.name, none.value.message) == ("Error", ONE_NO_RESULTS)
    with pytest.raises(JsException) as many:
        storage.sql.exec("SELECT name FROM t").one()
    assert (many.value.name, many.value.message) == ("Error", ONE_MULTIPLE_RESULTS)
    with pytest.raises(JsException, match="no results"):
        storage.sql.exec("INSERT INTO t (id) VALUES (3)").one()


def test_builtin_raw_yields_js_arrays_keeping_duplicate_columns(
    builtin: FakeDurableObjectStorage,
) -> None:
    raw = list(builtin.sql.exec("SELECT 1 AS a, 2 AS a, NULL AS c").raw())
    assert len(raw) == 1
    assert isinstance(raw[0], JsArray)
    assert raw[0].length == 3
    assert list(raw[0]) == [1, 2, jsnull]
    assert raw[0].to_py() == [1, 2, jsnull]
    # the object form keeps only the last of two equal column names
    assert builtin.sql.exec("SELECT 1 AS a, 2 AS a").one().to_py() == {"a": 2}


def test_external_raw_yields_lists(external: FakeDurableObjectStorage) -> None:
    insert(external, 1)
    raw = list(external.sql.exec("SELECT id, name, v FROM t").raw())
    assert raw == [[1, "n1", None]]
    assert type(raw[0]) is list


def test_iteration_and_next_consume_the_cursor_once(storage: FakeDurableObjectStorage) -> None:
    insert(storage, 1, 2, 3)
    cursor = storage.sql.exec("SELECT id FROM t ORDER BY id")
    first = cursor.next()
    assert first.done is False
    assert first.value.id == 1
    assert [row.id for row in cursor] == [2, 3]
    assert cursor.next().done is True
    assert list(cursor.toArray()) == []
    partial = storage.sql.exec("SELECT id FROM t ORDER BY id")
    partial.next()
    assert [row.id for row in partial.toArray()] == [2, 3]


def test_column_names(storage: FakeDurableObjectStorage) -> None:
    names = storage.sql.exec("SELECT id, name AS label FROM t").columnNames
    assert list(names) == ["id", "label"]
    if storage.sdk == "builtin":
        assert isinstance(names, JsArray)
    else:
        assert names == ["id", "label"]
    assert list(storage.sql.exec("INSERT INTO t (id) VALUES (1)").columnNames) == []
    returning = storage.sql.exec("INSERT INTO t (id) VALUES (2) RETURNING id")
    assert list(returning.columnNames) == ["id"]


def test_rows_written_and_rows_read(builtin: FakeDurableObjectStorage) -> None:
    sql = builtin.sql
    assert sql.exec("INSERT INTO t (id) VALUES (1), (2), (3)").rowsWritten == 3
    assert sql.exec("UPDATE t SET name = 'x' WHERE id < 3").rowsWritten == 2
    assert sql.exec("SELECT * FROM t").rowsWritten == 0
    cursor = sql.exec("SELECT id FROM t")
    assert cursor.rowsRead == 0
    cursor.next()
    assert cursor.rowsRead == 1
    cursor.toArray()
    assert cursor.rowsRead == 3


def test_external_sdk_caches_attributes_at_first_read(external: FakeDurableObjectStorage) -> None:
    insert(external, 1, 2, 3)
    cursor = external.sql.exec("SELECT id FROM t")
    assert cursor.rowsRead == 0
    cursor.toArray()
    assert cursor.rowsRead == 0  # cached by the SDK's _BindingWrapper.__getattr__
    fresh = external.sql.exec("SELECT id FROM t")
    fresh.toArray()
    assert fresh.rowsRead == 3


def test_database_size(storage: FakeDurableObjectStorage) -> None:
    size = storage.sql.databaseSize
    assert isinstance(size, int)
    assert size > 0
    storage.sql.exec("INSERT INTO t (id, name) SELECT value, printf('%.2000c', 'x') FROM "
                     "json_each('[1,2,3,4,5,6,7,8,9,10]')")
    later = storage.sql.databaseSize
    if storage.sdk == "builtin":
        assert later > size
    else:
        assert later == size  # ctx.storage.sql and its databaseSize are cached by the SDK
        assert FakeDurableObjectStorage.reopen(storage).sql.databaseSize > size


def test_multiple_statements_bind_and_return_the_last(storage: FakeDurableObjectStorage) -> None:
    cursor = storage.sql.exec(
        "INSERT INTO t (id, name) VALUES (1, 'a;b'); "
        "INSERT INTO t (id) VALUES (2); "
        "SELECT id, name FROM t WHERE id >= ? ORDER BY id; -- trailing comment",
        1,
    )
    assert list(cursor.columnNames) == ["id", "name"]
    assert as_dicts(storage, cursor.toArray()) == [
        {"id": 1, "name": "a;b"},
        {"id": 2, "name": null_of(storage)},
    ]
    # bindings go to the last statement only, so the first one lacks its value
    with pytest.raises(JsException, match="Wrong number of parameter bindings"):
        storage.sql.exec("INSERT INTO t (id) VALUES (?); SELECT 1", 3)
    assert ids(storage) == [1, 2]


def test_split_statements_follows_sqlite_tokenizer() -> None:
    trigger = (
        "CREATE TRIGGER tr AFTER INSERT ON t BEGIN UPDATE t SET name = ';' WHERE id = new.id; END;"
    )
    assert split_statements(f"{trigger} SELECT 1; ; -- c\n/* d */") == [trigger, " SELECT 1;"]
    assert split_statements("  -- only a comment\n") == []


def test_empty_query_is_an_error(storage: FakeDurableObjectStorage) -> None:
    with pytest.raises(JsException) as error:
        storage.sql.exec("  -- nothing\n")
    assert error.value.message == NO_STATEMENT


# ---------------------------------------------------------------------------
# transactionSync
# ---------------------------------------------------------------------------
def test_transaction_sync_returns_fn_result(storage: FakeDurableObjectStorage) -> None:
    payload = {"k": [1, 2]}
    assert storage.transactionSync(lambda: payload) is payload
    assert storage.transactionSync(lambda: None) is None
    two = storage.transactionSync(lambda: 2.0)  # crosses JS: an integral double reads as int
    assert (two, type(two)) == (2, int)
    assert storage.transactionSync(lambda: "s") == "s"


def test_transaction_sync_commits_writes(storage: FakeDurableObjectStorage) -> None:
    storage.transactionSync(lambda: insert(storage, 1, 2))
    assert ids(storage) == [1, 2]


def test_exception_rolls_back_everything_and_propagates(storage: FakeDurableObjectStorage) -> None:
    insert(storage, 1)
    boom = ValueError("boom")

    def fn() -> None:
        insert(storage, 2, 3)
        storage.sql.exec("UPDATE t SET name = 'changed' WHERE id = 1")
        raise boom

    with pytest.raises(ValueError) as raised:
        storage.transactionSync(fn)
    assert raised.value is boom
    assert storage.debug_query("SELECT id, name FROM t") == [(1, "n1")]
    assert not storage._database.connection.in_transaction


def test_inner_failure_caught_by_outer_rolls_back_only_inner(
    storage: FakeDurableObjectStorage,
) -> None:
    def inner() -> None:
        insert(storage, 2)
        raise KeyError("inner")

    def outer() -> str:
        insert(storage, 1)
        with pytest.raises(KeyError):
            storage.transactionSync(inner)
        insert(storage, 3)
        return "done"

    assert storage.transactionSync(outer) == "done"
    assert ids(storage) == [1, 3]


def test_outer_failure_rolls_back_committed_inner_part(storage: FakeDurableObjectStorage) -> None:
    def outer() -> None:
        storage.transactionSync(lambda: insert(storage, 1))
        assert ids(storage) == [1]
        raise RuntimeError("outer")

    with pytest.raises(RuntimeError):
        storage.transactionSync(outer)
    assert ids(storage) == []


def test_async_fn_is_refused(storage: FakeDurableObjectStorage) -> None:
    async def fn() -> None:
        insert(storage, 1)

    with pytest.raises(StricterThanWorkersError, match="awaitable"):
        storage.transactionSync(fn)

    def returns_awaitable() -> Any:
        insert(storage, 2)
        return asyncio.sleep(0)

    with pytest.raises(StricterThanWorkersError):
        storage.transactionSync(returns_awaitable)
    assert ids(storage) == []


def test_transaction_sync_needs_a_function(storage: FakeDurableObjectStorage) -> None:
    with pytest.raises(JsException) as error:
        storage.transactionSync("not callable")  # type: ignore[arg-type]
    assert error.value.name == "TypeError"


def test_user_sql_cannot_touch_the_internal_savepoint(storage: FakeDurableObjectStorage) -> None:
    def fn() -> None:
        insert(storage, 1)
        for statement in ("RELEASE _cf_sync_savepoint_0", "ROLLBACK TO _cf_sync_savepoint_0"):
            with pytest.raises(JsException, match="transactionSync"):
                storage.sql.exec(statement)
        raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        storage.transactionSync(fn)
    assert ids(storage) == []


# ---------------------------------------------------------------------------
# Transaction statements
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "statement",
    [
        "BEGIN",
        "begin transaction",
        "BEGIN IMMEDIATE",
        "  \n\tCOMMIT",
        "/* note */ commit transaction",
        "-- note\nROLLBACK",
        "End",
        "SAVEPOINT sp",
        "RELEASE sp",
        "release savepoint sp",
        "ROLLBACK TO sp",
        "INSERT INTO t (id) VALUES (1); BEGIN",
    ],
)
def test_transaction_statements_are_refused(
    storage: FakeDurableObjectStorage, statement: str
) -> None:
    with pytest.raises(JsException) as error:
        storage.sql.exec(statement)
    assert (error.value.name, error.value.message) == ("Error", TRANSACTION_ERROR_MESSAGE)
    assert not storage._database.connection.in_transaction


# ---------------------------------------------------------------------------
# Bound parameters
# ---------------------------------------------------------------------------
def test_at_most_100_bound_parameters(storage: FakeDurableObjectStorage) -> None:
    hundred = storage.sql.exec("SELECT " + ", ".join(["?"] * 100), *range(100))
    assert len(next(iter(hundred.raw()))) == 100
    with pytest.raises(JsException) as error:
        storage.sql.exec("SELECT " + ", ".join(["?"] * 101), *range(101))
    # The 101st "?" starts at byte 7 + 100 * 3: SQLite's error offset, as workerd shows it.
    assert error.value.message == "too many SQL variables at offset 307: SQLITE_ERROR"
    with pytest.raises(JsException, match=r"between \?1 and \?100"):
        storage.sql.exec("SELECT ?101", 1)


def test_binding_count_must_match(storage: FakeDurableObjectStorage) -> None:
    with pytest.raises(JsException) as error:
        storage.sql.exec("SELECT ?, ?", 1)
    assert error.value.message == WRONG_BINDING_COUNT
    with pytest.raises(JsException):
        storage.sql.exec("SELECT ?", 1, 2)


# ---------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------
def test_integers_read_back_as_int(storage: FakeDurableObjectStorage) -> None:
    biggest = 2**53 - 1
    # The bounds themselves cross as BigInts (refused), so they are bound as floats.
    storage.sql.exec("INSERT INTO t (id, name) VALUES (?, 'x'), (?, 'y')",
                     float(biggest), float(-biggest))
    rows = as_dicts(storage, storage.sql.exec("SELECT id FROM t ORDER BY id").toArray())
    assert rows == [{"id": -biggest}, {"id": biggest}]
    assert all(type(row["id"]) is int for row in rows)


def test_integers_beyond_2_53_lose_precision_on_read(storage: FakeDurableObjectStorage) -> None:
    value = storage.sql.exec("SELECT 9007199254740993 AS n").one().n
    assert type(value) is float
    assert value == 9007199254740992.0


def test_reals_with_integral_value_read_back_as_int(storage: FakeDurableObjectStorage) -> None:
    row = storage.sql.exec("SELECT CAST(2 AS REAL) AS whole, 2.5 AS half").one()
    assert (row.whole, type(row.whole)) == (2, int)
    assert (row.half, type(row.half)) == (2.5, float)


def test_integers_are_bound_as_doubles(storage: FakeDurableObjectStorage) -> None:
    assert storage.sql.exec("SELECT typeof(?) AS ty", 5).one().ty == "real"
    storage.sql.exec("INSERT INTO t (id, name) VALUES (1, ?)", 5)
    assert storage.debug_query("SELECT name FROM t") == [("5.0",)]


@pytest.mark.parametrize("value", [2**53 - 1, -(2**53 - 1), 2**53, -(2**53), 2**63])
def test_integers_beyond_safe_range_are_refused(
    storage: FakeDurableObjectStorage, value: int
) -> None:
    with pytest.raises(JsException) as error:
        storage.sql.exec("INSERT INTO t (id) VALUES (?)", value)
    assert (error.value.name, error.value.message) == ("TypeError", BIGINT_BINDING)
    assert ids(storage) == []


def test_builtin_null_is_jsnull(builtin: FakeDurableObjectStorage) -> None:
    builtin.sql.exec("INSERT INTO t (id) VALUES (1)")
    row = builtin.sql.exec("SELECT name FROM t").one()
    assert row.name is jsnull
    assert row.name is not None
    assert bool(row.name) is True  # truthy, as in Pyodide 0.28.x
    assert row.to_py() == {"name": jsnull}
    assert next(iter(builtin.sql.exec("SELECT name FROM t").raw()))[0] is jsnull


def test_external_null_is_none(external: FakeDurableObjectStorage) -> None:
    external.sql.exec("INSERT INTO t (id) VALUES (1)")
    assert external.sql.exec("SELECT name FROM t").one() == {"name": None}
    assert list(external.sql.exec("SELECT name FROM t").raw()) == [[None]]


def test_builtin_none_binding_stores_null(builtin: FakeDurableObjectStorage) -> None:
    builtin.sql.exec("INSERT INTO t (id, name) VALUES (?, ?)", 1, None)
    assert builtin.debug_query("SELECT id, typeof(name) FROM t") == [(1, "null")]


def test_none_binding_can_be_refused_on_request() -> None:
    store = FakeDurableObjectStorage(reject_undefined_binding=True)
    store.sql.exec("CREATE TABLE t (id INTEGER, name TEXT)")
    with pytest.raises(StricterThanWorkersError, match="undefined"):
        store.sql.exec("INSERT INTO t VALUES (?, ?)", 1, None)
    assert store.debug_query("SELECT id FROM t") == []


def test_jsnull_binding_stores_null(storage: FakeDurableObjectStorage) -> None:
    storage.sql.exec("INSERT INTO t (id, name) VALUES (?, ?)", 1, jsnull)
    assert storage.debug_query("SELECT typeof(name) FROM t") == [("null",)]


def test_external_none_binding_stores_null(external: FakeDurableObjectStorage) -> None:
    external.sql.exec("INSERT INTO t (id, name) VALUES (?, ?)", 1, None)
    assert external.debug_query("SELECT typeof(name) FROM t") == [("null",)]


def test_builtin_bytes_need_to_js_and_come_back_as_array_buffer(
    builtin: FakeDurableObjectStorage,
) -> None:
    with pytest.raises(StricterThanWorkersError, match="to_js"):
        builtin.sql.exec("INSERT INTO t (id, b) VALUES (1, ?)", b"\x00\x01")
    builtin.sql.exec("INSERT INTO t (id, b) VALUES (2, ?)", to_js(b"\x00\x01"))
    assert builtin.debug_query("SELECT typeof(b), b FROM t") == [("blob", b"\x00\x01")]
    blob = builtin.sql.exec("SELECT b FROM t").one().b
    assert isinstance(blob, JsBuffer)
    assert blob.to_bytes() == b"\x00\x01"
    assert blob.byteLength == 2
    with pytest.raises(TypeError):
        len(blob)  # an ArrayBuffer has no length
    converted = builtin.sql.exec("SELECT b FROM t").one().to_py()["b"]
    assert isinstance(converted, memoryview)
    assert bytes(converted) == b"\x00\x01"


def test_external_bytes_are_blobs(external: FakeDurableObjectStorage) -> None:
    external.sql.exec("INSERT INTO t (id, b) VALUES (1, ?)", b"\xff")
    assert external.debug_query("SELECT typeof(b), b FROM t") == [("blob", b"\xff")]
    blob = external.sql.exec("SELECT b FROM t").one()["b"]
    assert isinstance(blob, memoryview)
    assert bytes(blob) == b"\xff"


@pytest.mark.parametrize("value", [bytearray(b"x"), (1, 2)])
def test_external_refuses_what_rpc_refuses(external: FakeDurableObjectStorage, value: Any) -> None:
    with pytest.raises(TypeError, match="cannot be sent over RPC"):
        external.sql.exec("SELECT ?", value)


@pytest.mark.parametrize(("value", "stored"), [(True, "true"), (False, "false")])
def test_booleans_are_stored_as_text(
    storage: FakeDurableObjectStorage, value: bool, stored: str
) -> None:
    storage.sql.exec("INSERT INTO t (id, name) VALUES (1, ?)", value)
    assert storage.debug_query("SELECT typeof(name), name FROM t") == [("text", stored)]


@pytest.mark.parametrize(
    ("value", "explanation"),
    [
        ([1, 2], "coerce it to a string"),
        ({"a": 1}, "coerce it to a string"),
        (datetime.date(2020, 1, 1), "coerce it to a string"),
    ],
)
def test_values_the_runtime_would_stringify_are_refused(
    storage: FakeDurableObjectStorage, value: Any, explanation: str
) -> None:
    with pytest.raises(StricterThanWorkersError, match=explanation):
        storage.sql.exec("INSERT INTO t (id, name) VALUES (1, ?)", value)
    assert ids(storage) == []


def test_keyword_arguments_and_non_string_queries_are_refused(
    builtin: FakeDurableObjectStorage,
) -> None:
    with pytest.raises(StricterThanWorkersError):
        builtin.sql.exec("SELECT ?", 1, extra=2)
    with pytest.raises(StricterThanWorkersError):
        builtin.sql.exec(b"SELECT 1")


# ---------------------------------------------------------------------------
# Reserved names, PRAGMA, limits
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("statement", ["PRAGMA user_version", "PRAGMA user_version = 3"])
def test_pragma_user_version_is_refused(storage: FakeDurableObjectStorage, statement: str) -> None:
    with pytest.raises(JsException) as error:
        storage.sql.exec(statement)
    assert error.value.message == "not authorized: SQLITE_AUTH"
    assert storage.debug_query("PRAGMA user_version") == [(0,)]


def test_read_only_pragmas_are_allowed(storage: FakeDurableObjectStorage) -> None:
    columns = storage.sql.exec("PRAGMA table_info(t)").toArray()
    assert [column.name for column in columns] == ["id", "name", "v", "b"]


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE TABLE _cf_mine (x)",
        "SELECT * FROM _cf_METADATA",
        "DELETE FROM _cf_METADATA",
        "DROP TABLE _cf_METADATA",
        "CREATE INDEX i ON _cf_METADATA (value)",
    ],
)
def test_cf_names_are_reserved(storage: FakeDurableObjectStorage, statement: str) -> None:
    run(storage.setAlarm(1000))  # creates the _cf_METADATA table
    with pytest.raises(JsException) as error:
        storage.sql.exec(statement)
    # SQLite words a refused read differently ("access to ... is prohibited")
    assert error.value.message.endswith(": SQLITE_AUTH")
    assert run(storage.getAlarm()) == 1000


def test_compound_select_limit(storage: FakeDurableObjectStorage) -> None:
    five = " UNION ALL ".join(["SELECT 1"] * 5)
    assert len(list(storage.sql.exec(five).toArray())) == 5
    with pytest.raises(JsException, match="too many terms in compound SELECT"):
        storage.sql.exec(five + " UNION ALL SELECT 1")


# ---------------------------------------------------------------------------
# Alarms
# ---------------------------------------------------------------------------
def test_alarm_round_trip(storage: FakeDurableObjectStorage) -> None:
    assert run(storage.getAlarm()) is null_of(storage)
    assert run(storage.setAlarm(1_700_000_000_123.9)) is None
    alarm = run(storage.getAlarm())
    assert (alarm, type(alarm)) == (1_700_000_000_123, int)  # whole milliseconds
    run(storage.deleteAlarm())
    assert run(storage.getAlarm()) is null_of(storage)


def test_alarm_rejects_non_finite_times(storage: FakeDurableObjectStorage) -> None:
    with pytest.raises(JsException) as error:
        run(storage.setAlarm(float("nan")))
    assert (error.value.name, error.value.message) == ("TypeError", INVALID_DATE)
    assert run(storage.getAlarm()) is null_of(storage)


def test_alarm_datetime_only_with_external_sdk(
    builtin: FakeDurableObjectStorage, external: FakeDurableObjectStorage
) -> None:
    when = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
    with pytest.raises(JsException, match="Date"):
        run(builtin.setAlarm(when))  # a datetime reaches JS as a PyProxy
    run(external.setAlarm(when))  # python_to_rpc turns it into a JS Date
    assert run(external.getAlarm()) == int(when.timestamp() * 1000)


def test_alarm_is_rolled_back_with_the_transaction(storage: FakeDurableObjectStorage) -> None:
    def fn() -> None:
        pending = storage.setAlarm(5000)  # the write happens at the call, as in the runtime
        if inspect.iscoroutine(pending):
            pending.close()  # the external SDK's wrapper coroutine, never awaited here
        raise RuntimeError("roll back")

    with pytest.raises(RuntimeError):
        storage.transactionSync(fn)
    assert run(storage.getAlarm()) is null_of(storage)


# ---------------------------------------------------------------------------
# Persistence and eviction
# ---------------------------------------------------------------------------
def test_reopen_over_a_file_keeps_committed_state(tmp_path: Path) -> None:
    first = FakeDurableObjectStorage(tmp_path / "do.sqlite3", sdk="builtin")
    first.sql.exec("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    first.sql.exec("INSERT INTO t VALUES (1)")
    run(first.setAlarm(42))
    second = FakeDurableObjectStorage.reopen(first, sdk="external")
    assert second.sdk == "external"
    assert second.sql.exec("SELECT id FROM t").toArray() == [{"id": 1}]
    assert run(second.getAlarm()) == 42
    assert first.evicted
    with pytest.raises(EvictedStorageError):
        first.sql.exec("SELECT 1")
    second.close()


def test_reopen_over_memory_shares_the_database() -> None:
    first = FakeDurableObjectStorage()
    first.sql.exec("CREATE TABLE t (id INTEGER)")
    first.sql.exec("INSERT INTO t VALUES (7)")
    second = FakeDurableObjectStorage.reopen(first)
    assert second.sql.exec("SELECT id FROM t").one().id == 7
    with pytest.raises(EvictedStorageError):
        first.transactionSync(lambda: None)


@pytest.mark.parametrize("kind", ["memory", "file"])
def test_cannot_evict_from_inside_transaction_sync(tmp_path: Path, kind: str) -> None:
    store = FakeDurableObjectStorage(":memory:" if kind == "memory" else tmp_path / "do.sqlite3")
    with pytest.raises(RuntimeError, match="inside transactionSync"):
        store.transactionSync(lambda: FakeDurableObjectStorage.reopen(store))
    assert not store.evicted


def test_two_storages_over_one_file_both_work(tmp_path: Path) -> None:
    path = str(tmp_path / "do.sqlite3")
    one = FakeDurableObjectStorage(path)
    one.sql.exec("CREATE TABLE t (id INTEGER)")
    two = FakeDurableObjectStorage(path, sdk="external")
    two.sql.exec("INSERT INTO t VALUES (1)")
    assert one.sql.exec("SELECT count(*) AS n FROM t").one().n == 1
    one.close()
    two.close()


def test_a_file_written_by_the_stand_in_is_plain_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "do.sqlite3"
    store = FakeDurableObjectStorage(path)
    store.sql.exec("CREATE TABLE t (id INTEGER); INSERT INTO t VALUES (1)")
    store.close()
    with sqlite3.connect(path) as connection:
        assert connection.execute("SELECT id FROM t").fetchall() == [(1,)]


def test_unknown_sdk_is_refused() -> None:
    with pytest.raises(ValueError, match="sdk"):
        FakeDurableObjectStorage(sdk="js")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# The fake pyodide module
# ---------------------------------------------------------------------------
def test_install_is_idempotent_and_uninstall_removes_it() -> None:
    assert not fake_pyodide_is_installed()
    try:
        ffi = install_fake_pyodide()
        assert install_fake_pyodide() is ffi
        from pyodide.ffi import jsnull as imported  # type: ignore[import-not-found, unused-ignore]

        assert imported is jsnull
        import pyodide  # type: ignore[import-not-found, unused-ignore]

        assert pyodide.ffi is ffi
    finally:
        uninstall_fake_pyodide()
    assert "pyodide" not in sys.modules
    assert "pyodide.ffi" not in sys.modules


def test_context_manager_restores_previous_state() -> None:
    with fake_pyodide() as ffi:
        assert sys.modules["pyodide.ffi"] is ffi
        with fake_pyodide_installed():
            assert fake_pyodide_is_installed()
        assert fake_pyodide_is_installed()  # the outer block still owns it
    assert not fake_pyodide_is_installed()


def test_install_refuses_to_replace_another_pyodide(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyodide", type(sys)("pyodide"))
    with pytest.raises(RuntimeError):
        install_fake_pyodide()


@pytest.mark.usefixtures("fake_pyodide_ffi")
def test_fixture_makes_production_imports_see_the_stand_in_null() -> None:
    def production_code() -> Any:
        from pyodide.ffi import jsnull as imported

        return imported

    store = FakeDurableObjectStorage()
    assert store.sql.exec("SELECT NULL AS n").one().n is production_code()


def test_nothing_leaked_by_earlier_tests() -> None:
    assert "pyodide" not in sys.modules
