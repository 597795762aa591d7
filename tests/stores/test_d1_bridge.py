"""The Miniflare D1 fixture is a real D1: each test asserts D1's own behaviour
(observed through Miniflare 4.20260426.0 / workerd 1.20260426.1), so a fixture
that quietly fell back to something else would fail here."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.d1.fixtures import d1_binding
from tests.support.d1.miniflare import (
    D1Bridge,
    D1BridgeError,
    D1Error,
    D1Stats,
    StaleD1Binding,
    check_node_setup,
)
from tests.support.fakes.do_storage import JsDict, python_from_rpc
from tests.support.fakes.pyodide_ffi import (
    JsArray,
    JsBuffer,
    JsException,
    JsObject,
    JsProxy,
    fake_pyodide_is_installed,
    jsnull,
    to_js,
)

TRANSACTION_REFUSED = (
    "D1_ERROR: To execute a transaction, please use the state.storage.transaction() or "
    "state.storage.transactionSync() APIs instead of the SQL BEGIN TRANSACTION or SAVEPOINT "
    "statements."
)
UNDEFINED_REFUSED = "D1_TYPE_ERROR: Type 'undefined' not supported for value 'undefined'"
WRONG_BINDING_COUNT = "D1_ERROR: Wrong number of parameter bindings for SQL query."
USER_OBJECTS = (
    "SELECT type, name FROM sqlite_master "
    "WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE '\\_cf\\_%' ESCAPE '\\' "
    "ORDER BY name"
)


def plain(value: Any) -> Any:
    """Any result as plain Python (dicts, lists, None for NULL), whatever the shape."""
    return python_from_rpc(value)


def null_value(db: Any) -> Any:
    """What binds SQL NULL in this shape."""
    return jsnull if db.shape == "builtin" else None


def blob_value(db: Any, data: bytes) -> Any:
    """What binds a BLOB in this shape (a Uint8Array for the built-in SDK)."""
    return to_js(data) if db.shape == "builtin" else data


async def user_objects(db: Any) -> list[Any]:
    rows: list[Any] = plain((await db.prepare(USER_OBJECTS).all()).results)
    return rows


async def expect_d1_error(awaitable: Any, text: str) -> D1Error:
    with pytest.raises(D1Error) as caught:
        await awaitable
    assert text in caught.value.message
    return caught.value


# ---------------------------------------------------------------------------
# Prepared statements and parameters
# ---------------------------------------------------------------------------
async def test_numbered_and_anonymous_parameters(d1_database: Any) -> None:
    db = d1_database
    row = await db.prepare("SELECT ?2 AS b, ?1 AS a, ?2 AS b_again").bind("one", "two").first()
    assert plain(row) == {"b": "two", "a": "one", "b_again": "two"}
    row = await db.prepare("SELECT ? AS x, ? AS y").bind(1, 2.5).first()
    assert plain(row) == {"x": 1, "y": 2.5}
    # ?NNN and ? mix as in SQLite: a bare ? takes the next number after the largest so far.
    row = await db.prepare("SELECT ?2 AS b, ? AS c, ?1 AS a").bind("a", "b", "c").first()
    assert plain(row) == {"b": "b", "c": "c", "a": "a"}


async def test_d1_wants_exactly_as_many_values_as_parameters(d1_database: Any) -> None:
    db = d1_database
    await expect_d1_error(db.prepare("SELECT ?1 AS a").bind(1, 2).first(), WRONG_BINDING_COUNT)
    await expect_d1_error(db.prepare("SELECT ?1 AS a, ?2 AS b").bind(1).all(), WRONG_BINDING_COUNT)
    await expect_d1_error(db.prepare("SELECT ?1 AS a").first(), WRONG_BINDING_COUNT)


async def test_one_hundred_parameters_is_the_limit(d1_database: Any) -> None:
    db = d1_database
    hundred = ", ".join(f"?{n}" for n in range(1, 101))
    rows = await db.prepare(f"SELECT {hundred}").bind(*range(100)).raw()
    assert plain(rows) == [list(range(100))]
    # ?101 is refused when the statement is compiled, whatever is bound.
    await expect_d1_error(
        db.prepare(f"SELECT {hundred}, ?101").bind(*range(101)).raw(),
        "D1_ERROR: variable number must be between ?1 and ?100",
    )
    await expect_d1_error(
        db.prepare("SELECT ?101").raw(), "variable number must be between ?1 and ?100"
    )
    await expect_d1_error(
        db.prepare("SELECT " + ", ".join("?" * 101)).bind(*range(101)).raw(),
        "D1_ERROR: too many SQL variables",
    )


async def test_bind_returns_a_new_statement(d1_database: Any) -> None:
    db = d1_database
    base = db.prepare("SELECT ?1 AS v")
    one, two = base.bind(1), base.bind(2)
    assert one is not base and two is not one
    assert await one.first("v") == 1
    assert await two.first("v") == 2
    assert await one.bind(3).first("v") == 3  # bind replaces the values
    await expect_d1_error(base.first(), WRONG_BINDING_COUNT)  # base stays unbound


# ---------------------------------------------------------------------------
# Batches and transactions
# ---------------------------------------------------------------------------
async def test_batch_is_one_transaction(d1_database: Any) -> None:
    db = d1_database
    await db.exec("CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)")
    insert = db.prepare("INSERT INTO t (k, v) VALUES (?1, ?2)")
    select = db.prepare("SELECT k FROM t")
    results = await db.batch([insert.bind("a", 1), insert.bind("b", 2), select])
    assert [plain(result)["meta"]["changes"] for result in results] == [1, 1, 0]
    assert plain(results[2])["results"] == [{"k": "a"}, {"k": "b"}]  # sees the earlier writes

    error = await expect_d1_error(
        db.batch([insert.bind("c", 3), db.prepare("UPDATE t SET v = v + 10"), insert.bind("a", 9)]),
        "UNIQUE constraint failed: t.k",
    )
    assert error.message.startswith("D1_ERROR: ")
    rows = await db.prepare("SELECT k, v FROM t ORDER BY k").raw()
    assert plain(rows) == [["a", 1], ["b", 2]]  # the insert of c and the update rolled back


async def test_batch_takes_a_list_or_a_js_array(builtin_db: Any) -> None:
    db = builtin_db
    statements = [db.prepare("SELECT 1 AS one"), db.prepare("SELECT 2 AS two")]
    from_list = await db.batch(statements)
    from_array = await db.batch(to_js(statements))
    for results in (from_list, from_array):
        assert isinstance(results, JsArray)
        assert [result.results[0].to_py() for result in results] == [{"one": 1}, {"two": 2}]
    await expect_d1_error(db.batch([]), "D1_ERROR: No SQL statements detected.")


@pytest.mark.parametrize(
    "statement",
    ["BEGIN", "BEGIN IMMEDIATE", "COMMIT", "ROLLBACK", "END", "SAVEPOINT s", "RELEASE s"],
)
async def test_transaction_statements_are_refused(d1_database: Any, statement: str) -> None:
    await expect_d1_error(d1_database.prepare(statement).run(), TRANSACTION_REFUSED)


async def test_exec_runs_line_by_line_and_refuses_begin(d1_database: Any) -> None:
    db = d1_database
    result = plain(await db.exec("CREATE TABLE u (a INTEGER)\n\nINSERT INTO u VALUES (1)\n"))
    assert result["count"] == 2  # one query per non-empty line
    await expect_d1_error(db.exec("BEGIN TRANSACTION"), "D1_EXEC_ERROR: Error in line 1: BEGIN")
    await expect_d1_error(
        db.exec("INSERT INTO u VALUES (2)\nINSERT INTO missing VALUES (1)"),
        "no such table: missing",
    )
    assert await db.prepare("SELECT count(*) AS n FROM u").first("n") == 1  # nothing of it stayed


# ---------------------------------------------------------------------------
# The SQLite underneath
# ---------------------------------------------------------------------------
async def test_sqlite_version_is_hidden_but_features_pin_it(d1_database: Any) -> None:
    """D1 refuses sqlite_version(); its features place it at 3.47 (the source id
    compiled into workerd 1.20260426.1 is 3.47.0, 2024-10-21)."""
    db = d1_database
    for function in ("sqlite_version()", "sqlite_source_id()"):
        await expect_d1_error(
            db.prepare(f"SELECT {function}").first(), "not authorized to use function"
        )
    present = {
        "3.38 ->>": ("SELECT json_object('a', 1) ->> '$.a'", 1),
        "3.42 unixepoch subsec": ("SELECT unixepoch('subsec') > 0", 1),
        "3.43 timediff": (
            "SELECT timediff('2024-01-02', '2024-01-01')",
            "+0000-00-01 00:00:00.000",
        ),
        "3.44 concat": ("SELECT concat('a', 'b')", "ab"),
        "3.44 string_agg": ("SELECT string_agg(x, ',') FROM (SELECT 'a' AS x)", "a"),
        "3.45 jsonb": ("SELECT json(jsonb('[1]'))", "[1]"),
        "3.46 format %,d": ("SELECT format('%,d', 1234567)", "1,234,567"),
    }
    for sql, expected in present.values():
        assert plain(await db.prepare(sql).raw()) == [[expected]], sql
    # 3.47: RAISE takes an expression.
    await db.exec("CREATE TABLE r (a INTEGER)")
    await db.exec(
        "CREATE TRIGGER r_check BEFORE INSERT ON r WHEN NEW.a < 0 "
        "BEGIN SELECT RAISE(ABORT, 'negative: ' || NEW.a); END"
    )
    await expect_d1_error(db.prepare("INSERT INTO r VALUES (-5)").run(), "negative: -5")
    # Not yet there: 3.48's two-argument iif(), 3.50's unistr().
    await expect_d1_error(db.prepare("SELECT iif(0, 1)").first(), "wrong number of arguments")
    await expect_d1_error(db.prepare("SELECT unistr('x')").first(), "no such function: unistr")


async def test_time_functions(d1_database: Any) -> None:
    db = d1_database
    before = time.time()
    row = plain(
        await db.prepare(
            "SELECT unixepoch('subsec') AS subsec, unixepoch() AS whole, "
            "CAST(strftime('%s', 'now') AS INTEGER) AS strf, datetime('now') AS dt, "
            "julianday('now') AS jd, strftime('%Y-%m-%dT%H:%M:%fZ', 'now') AS iso"
        ).first()
    )
    after = time.time()
    assert before - 1 <= row["subsec"] <= after + 1
    assert isinstance(row["whole"], int) and isinstance(row["strf"], int)
    assert abs(row["whole"] - row["subsec"]) < 1.5
    assert len(row["dt"]) == 19 and row["iso"].endswith("Z")
    assert isinstance(row["jd"], float)
    # subsec has milliseconds: over a few calls a fraction shows up.
    fractions = [await db.prepare("SELECT unixepoch('subsec') AS s").first("s") for _ in range(5)]
    assert any(isinstance(value, float) and not value.is_integer() for value in fractions)


async def test_returning(d1_database: Any) -> None:
    db = d1_database
    await db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
    inserted = plain(
        await db.prepare("INSERT INTO t (name) VALUES (?1), (?2) RETURNING id, name")
        .bind("a", "b")
        .all()
    )
    assert inserted["results"] == [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]
    assert inserted["meta"]["changes"] == 2
    assert inserted["meta"]["last_row_id"] == 2
    update = db.prepare("UPDATE t SET name = upper(name) WHERE id = ?1 RETURNING name")
    updated = await update.bind(2).first()
    assert plain(updated) == {"name": "B"}
    deleted = await db.prepare("DELETE FROM t RETURNING id").raw()
    assert sorted(row[0] for row in plain(deleted)) == [1, 2]


async def test_on_conflict(d1_database: Any) -> None:
    db = d1_database
    await db.exec("CREATE TABLE kv (k TEXT PRIMARY KEY, v INTEGER NOT NULL, n INTEGER DEFAULT 1)")
    upsert = db.prepare(
        "INSERT INTO kv (k, v) VALUES (?1, ?2) "
        "ON CONFLICT (k) DO UPDATE SET v = excluded.v, n = n + 1 RETURNING v, n"
    )
    assert plain(await upsert.bind("a", 1).first()) == {"v": 1, "n": 1}
    assert plain(await upsert.bind("a", 5).first()) == {"v": 5, "n": 2}
    ignore = db.prepare("INSERT INTO kv (k, v) VALUES (?1, ?2) ON CONFLICT DO NOTHING")
    result = plain(await ignore.bind("a", 9).run())
    assert result["meta"]["changes"] == 0
    assert plain(await db.prepare("SELECT v FROM kv").raw()) == [[5]]
    await expect_d1_error(
        db.prepare("INSERT INTO kv (k, v) VALUES ('a', 1)").run(),
        "D1_ERROR: UNIQUE constraint failed: kv.k: SQLITE_CONSTRAINT",
    )


async def test_foreign_keys_are_enforced(d1_database: Any) -> None:
    db = d1_database
    assert await db.prepare("PRAGMA foreign_keys").first("foreign_keys") == 1
    await db.exec("CREATE TABLE p (id INTEGER PRIMARY KEY)")
    await db.exec("CREATE TABLE c (p INTEGER REFERENCES p(id))")
    await expect_d1_error(
        db.prepare("INSERT INTO c VALUES (1)").run(), "FOREIGN KEY constraint failed"
    )


# ---------------------------------------------------------------------------
# Result shapes and values
# ---------------------------------------------------------------------------
async def test_run_and_all_report_meta(d1_database: Any) -> None:
    db = d1_database
    await db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    result = await db.prepare("INSERT INTO t (v) VALUES (?1)").bind("x").run()
    meta = plain(result)["meta"]
    for key in ("duration", "changes", "last_row_id", "changed_db", "size_after", "rows_read",
                "rows_written", "served_by"):
        assert key in meta, key
    assert plain(result)["success"] is True
    assert (meta["changes"], meta["last_row_id"], meta["changed_db"]) == (1, 1, True)
    selected = plain(await db.prepare("SELECT * FROM t").all())
    assert selected["results"] == [{"id": 1, "v": "x"}]
    assert selected["meta"]["rows_read"] == 1 and selected["meta"]["changed_db"] is False


async def test_external_shape(external_db: Any) -> None:
    db = external_db
    await db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT, r REAL)")
    await db.prepare("INSERT INTO t (v, r) VALUES (?1, ?2)").bind(None, 2.0).run()
    result = await db.prepare("SELECT id, v, r FROM t").all()
    assert isinstance(result, JsDict) and isinstance(result["meta"], dict)
    assert result.success is True  # JsDict: keys read as attributes too
    row = result["results"][0]
    assert row == {"id": 1, "v": None, "r": 2}  # None for NULL; REAL 2.0 is the JS number 2
    assert isinstance(row["r"], int)
    assert await db.prepare("SELECT 1 AS a WHERE 0").first() is None
    assert await db.prepare("SELECT NULL AS a").first("a") is None
    assert await db.prepare("SELECT 1 AS a WHERE 0").first("a") is None
    assert await db.prepare("SELECT 1 AS a, 'x' AS b").raw() == [[1, "x"]]
    assert await db.prepare("SELECT 1 AS a").raw(columnNames=True) == [["a"], [1]]
    # python_to_rpc turns None into null, so first(None) asks for a column "null".
    await expect_d1_error(db.prepare("SELECT 1 AS a").first(None), "D1_COLUMN_NOTFOUND")


async def test_builtin_shape(builtin_db: Any) -> None:
    db = builtin_db
    assert fake_pyodide_is_installed()
    assert isinstance(builtin_db, JsProxy) and builtin_db.constructor.name == "D1Database"
    await db.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT, r REAL)")
    await db.prepare("INSERT INTO t (v, r) VALUES (?1, ?2)").bind(jsnull, 2.5).run()
    result = await db.prepare("SELECT id, v, r FROM t").all()
    assert isinstance(result, JsObject) and result.success is True
    row: Any = result.results[0]
    assert isinstance(row, JsObject)
    assert row.id == 1 and row.r == 2.5
    assert row.v is jsnull and bool(row.v)  # JS null: truthy, not None
    with pytest.raises(TypeError):
        row["id"]  # type: ignore[index]  # a plain-object JsProxy is not subscriptable
    assert row.to_py() == {"id": 1, "v": jsnull, "r": 2.5}
    assert (await db.prepare("SELECT 1 AS a WHERE 0").first()) is jsnull
    assert (await db.prepare("SELECT 1 AS a WHERE 0").first("a")) is jsnull
    assert (await db.prepare("SELECT 7 AS a").first(None)).a == 7  # None crosses as undefined
    assert (await db.prepare("SELECT 1 AS a, 'x' AS b").raw()).to_py() == [[1, "x"]]
    assert (await db.prepare("SELECT 1 AS a").raw(columnNames=True)).to_py() == [["a"], [1]]


async def test_builtin_none_binds_undefined_which_d1_refuses(builtin_db: Any) -> None:
    db = builtin_db
    before = db.stats.snapshot()
    with pytest.raises(D1Error) as caught:
        db.prepare("SELECT ?1 AS a").bind(None)  # refused by bind() itself, synchronously
    assert caught.value.message == UNDEFINED_REFUSED
    assert str(caught.value) == f"Error: {UNDEFINED_REFUSED}"
    with pytest.raises(D1Error, match="D1_TYPE_ERROR"):
        db.prepare("SELECT ?1 AS a, ?2 AS b").bind(1, None)
    assert db.stats.since(before) == D1Stats(0, 0)  # bind() is no round trip
    assert await db.prepare("SELECT ?1 AS a").bind(jsnull).first("a") is jsnull


async def test_external_none_binds_null(external_db: Any) -> None:
    row = await external_db.prepare("SELECT ?1 AS a, typeof(?1) AS t").bind(None).first()
    assert row == {"a": None, "t": "null"}


async def test_values_d1_accepts(d1_database: Any) -> None:
    """str, numbers, booleans, null and byte buffers bind; every number binds as
    a JS double, so a bare ? holding 5 is REAL and only column affinity makes it
    INTEGER again (the bridge checks nothing else before sending them)."""
    db = d1_database
    await db.exec("CREATE TABLE t (i INTEGER, r REAL, x)")
    await db.prepare("INSERT INTO t VALUES (?1, ?1, ?1)").bind(5).run()
    stored = await db.prepare(
        "SELECT typeof(i) AS i, typeof(r) AS r, typeof(x) AS x FROM t"
    ).first()
    assert plain(stored) == {"i": "integer", "r": "real", "x": "real"}
    row = plain(
        await db.prepare(
            "SELECT typeof(?1) AS s, typeof(?2) AS n, typeof(?3) AS f, ?4 AS yes, ?5 AS no, "
            "typeof(?6) AS nul, typeof(?7) AS blob, ?8 AS nan"
        )
        .bind("x", 5, 2.5, True, False, null_value(db), blob_value(db, b"\x01"), float("nan"))
        .first()
    )
    assert row == {
        "s": "text", "n": "real", "f": "real", "yes": 1, "no": 0,
        "nul": "null", "blob": "blob", "nan": None,
    }


async def test_integers_are_js_numbers_strictly_inside_the_safe_range(d1_database: Any) -> None:
    db = d1_database
    inside = 2**53 - 2
    assert await db.prepare("SELECT ?1 AS v").bind(inside).first("v") == inside
    assert await db.prepare("SELECT ?1 AS v").bind(-inside).first("v") == -inside
    # Measured in real workerd (Pyodide 0.28.2): +-(2**53 - 1) themselves cross
    # as BigInts, and D1's bind() refuses them, as it refuses everything larger.
    for edge in (2**53 - 1, -(2**53 - 1), 2**53 + 10):
        with pytest.raises(D1Error) as refused:
            db.prepare("SELECT ?1").bind(edge)
        assert refused.value.message == (
            f"D1_TYPE_ERROR: Type 'bigint' not supported for value '{edge}'")
    # The same value as a float is a Number, and reads back as the int.
    edge = 2**53 - 1
    assert await db.prepare("SELECT ?1 AS v").bind(float(edge)).first("v") == edge
    # Read back, an INTEGER past 2**53 is a double that has lost precision.
    value = await db.prepare("SELECT 9007199254740993 AS v").first("v")
    assert value == 2**53 and isinstance(value, float)


async def test_python_objects_d1_cannot_bind(d1_bridge: D1Bridge) -> None:
    refused = r"D1_TYPE_ERROR: Type 'object' not supported for value 'b'ab''"
    # bytes cross the raw FFI as a PyProxy: D1 sees an object.
    with d1_binding(d1_bridge, "builtin") as db, pytest.raises(D1Error, match=refused):
        db.prepare("SELECT ?1").bind(b"ab")
    # workers-runtime-sdk refuses tuples before D1 sees them.
    with d1_binding(d1_bridge, "external") as db, pytest.raises(TypeError, match="over RPC"):
        db.prepare("SELECT ?1").bind((1, 2))


async def test_blob_round_trip(d1_database: Any) -> None:
    db = d1_database
    data = bytes(range(256)) * 4
    await db.exec("CREATE TABLE b (id INTEGER PRIMARY KEY, data BLOB)")
    await db.prepare("INSERT INTO b (data) VALUES (?1)").bind(blob_value(db, data)).run()
    await db.prepare("INSERT INTO b (data) VALUES (?1)").bind(blob_value(db, b"")).run()
    stored = await db.prepare("SELECT data FROM b ORDER BY id").all()
    # D1 returns a BLOB as an Array of byte numbers.
    values = [row["data"] for row in plain(stored)["results"]]
    assert values == [list(data), []]
    assert bytes(values[0]) == data
    count = db.prepare("SELECT count(*) AS n FROM b WHERE data = ?1")
    assert await count.bind(blob_value(db, data)).first("n") == 1
    # An ArrayBuffer binds as a BLOB too.
    buffer = JsBuffer(b"\x00\xff", kind="ArrayBuffer")
    assert plain(await db.prepare("SELECT hex(?1) AS h").bind(buffer).first("h")) == "00FF"


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------
async def test_errors_carry_d1_messages(d1_database: Any) -> None:
    db = d1_database
    error = await expect_d1_error(db.prepare("SELEC 1").run(), 'near "SELEC": syntax error')
    assert isinstance(error, JsException) and error.name == "Error"
    assert error.message == 'D1_ERROR: near "SELEC": syntax error at offset 0: SQLITE_ERROR'
    assert error.cause == 'near "SELEC": syntax error at offset 0: SQLITE_ERROR'
    with pytest.raises(D1Error, match="D1_ERROR: no such table: missing"):
        await db.prepare("SELECT * FROM missing").all()
    await expect_d1_error(
        db.prepare("SELECT 1 AS a").first("b"), "D1_COLUMN_NOTFOUND: Column not found (b)"
    )
    await expect_d1_error(db.prepare("").all(), "D1_ERROR: No SQL statements detected.")
    await expect_d1_error(
        db.prepare("PRAGMA user_version").first(), "D1_ERROR: not authorized: SQLITE_AUTH"
    )


# ---------------------------------------------------------------------------
# Isolation, concurrency, stats, event loops
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("attempt", [1, 2])
async def test_each_test_starts_empty(d1_database: Any, attempt: int) -> None:
    db = d1_database
    assert await user_objects(db) == []
    await db.exec("CREATE TABLE leftover (id INTEGER PRIMARY KEY AUTOINCREMENT, v)")
    await db.prepare("INSERT INTO leftover (v) VALUES (?1)").bind(attempt).run()


async def test_a_recycled_database_is_emptied(d1_bridge: D1Bridge) -> None:
    first = d1_bridge.new_database()
    db = d1_bridge.binding("external", database=first)
    await db.exec("CREATE TABLE parent (id INTEGER PRIMARY KEY AUTOINCREMENT)")
    await db.exec("CREATE TABLE child (p INTEGER REFERENCES parent(id))")
    await db.exec("CREATE INDEX child_p ON child (p)")
    await db.exec("CREATE VIEW both_ AS SELECT * FROM parent JOIN child ON child.p = parent.id")
    await db.exec(
        "CREATE TRIGGER t AFTER INSERT ON parent BEGIN INSERT INTO child VALUES (NEW.id); END"
    )
    await db.exec("CREATE VIRTUAL TABLE docs USING fts5(body)")
    await db.prepare("INSERT INTO parent DEFAULT VALUES").run()
    await db.prepare("INSERT INTO docs (body) VALUES ('hello')").run()
    assert len(await user_objects(db)) > 5

    for _ in range(len(d1_bridge.databases) - 1):
        d1_bridge.retire(d1_bridge.new_database())
    again = d1_bridge.new_database()
    assert again.name == first.name and again.generation > first.generation
    assert d1_bridge.debug_query(again, USER_OBJECTS) == []
    with pytest.raises(StaleD1Binding):
        db.prepare("SELECT 1").all()
    fresh = d1_bridge.binding("external", database=again)
    await fresh.exec("CREATE TABLE parent (id INTEGER PRIMARY KEY AUTOINCREMENT)")
    row = await fresh.prepare("INSERT INTO parent DEFAULT VALUES RETURNING id").first()
    assert plain(row) == {"id": 1}  # AUTOINCREMENT starts again
    d1_bridge.retire(again)


async def test_a_binding_goes_stale_when_its_test_ends(d1_bridge: D1Bridge) -> None:
    with d1_binding(d1_bridge, "external") as db:
        assert await db.prepare("SELECT 1 AS a").first("a") == 1
    with pytest.raises(StaleD1Binding):
        db.prepare("SELECT 1 AS a").first()


async def test_many_tasks_on_one_binding(d1_database: Any) -> None:
    db = d1_database
    await db.exec("CREATE TABLE hits (task INTEGER PRIMARY KEY, seen INTEGER NOT NULL)")
    tasks = 200
    in_flight = peak = 0

    async def hit(task: int) -> int:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await db.prepare(
            "INSERT INTO hits (task, seen) VALUES (?1, (SELECT count(*) FROM hits))"
        ).bind(task).run()
        seen = await db.prepare("SELECT seen FROM hits WHERE task = ?1").bind(task).first("seen")
        in_flight -= 1
        return int(seen)

    before = db.stats.snapshot()
    seen = await asyncio.gather(*(hit(task) for task in range(tasks)))
    assert peak == tasks  # every task had a request in flight at the same time
    assert sorted(seen) == list(range(tasks))  # D1 ran the writes one at a time
    assert db.stats.since(before) == D1Stats(round_trips=2 * tasks, statements=2 * tasks)


async def test_yield_to_loop_interleaves_tasks(d1_bridge: D1Bridge) -> None:
    with d1_binding(d1_bridge, "builtin", yield_to_loop=True) as db:
        order: list[str] = []

        async def steps(name: str) -> None:
            for step in range(3):
                await db.prepare("SELECT ?1 AS v").bind(step).first()
                order.append(name)

        await asyncio.gather(steps("a"), steps("b"))
        assert sorted(order) == ["a"] * 3 + ["b"] * 3
        assert order not in (["a"] * 3 + ["b"] * 3, ["b"] * 3 + ["a"] * 3)


async def test_yield_to_loop_yields_around_each_call(
    d1_bridge: D1Bridge, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_sleep = asyncio.sleep
    zero_sleeps = 0

    async def counting_sleep(delay: float, result: Any = None) -> Any:
        nonlocal zero_sleeps
        zero_sleeps += delay == 0
        return await real_sleep(delay, result)

    monkeypatch.setattr(asyncio, "sleep", counting_sleep)
    for yield_to_loop, expected in ((False, 0), (True, 2)):
        with d1_binding(d1_bridge, "external", yield_to_loop=yield_to_loop) as db:
            zero_sleeps = 0
            assert await db.prepare("SELECT 1 AS a").first("a") == 1
            assert zero_sleeps == expected


async def test_stats_count_round_trips_and_statements(d1_database: Any) -> None:
    db = d1_database
    start = db.stats.snapshot()
    statement = db.prepare("SELECT ?1 AS v").bind(1)
    assert db.stats.since(start) == D1Stats(0, 0)
    await statement.first()
    await statement.raw()
    assert db.stats.since(start) == D1Stats(2, 2)
    await db.batch([statement, statement, statement])
    assert db.stats.since(start) == D1Stats(3, 5)
    await db.exec("CREATE TABLE a (x)\nCREATE TABLE b (x)\nCREATE TABLE c (x)")
    assert db.stats.since(start) == D1Stats(4, 8)
    with pytest.raises(D1Error):
        await db.prepare("SELECT * FROM nowhere").all()
    assert db.stats.since(start) == D1Stats(5, 9)  # a failed statement was still sent


def test_one_bridge_serves_many_event_loops(d1_bridge: D1Bridge) -> None:
    """pytest-asyncio gives each test its own loop; the session's bridge is
    bound to none of them. Here: several asyncio.run() loops, one after the
    other and one in another thread at the same time."""
    with d1_binding(d1_bridge, "external") as db:

        async def setup() -> None:
            await db.exec("CREATE TABLE t (v INTEGER)")

        async def insert(value: int) -> None:
            await db.prepare("INSERT INTO t VALUES (?1)").bind(value).run()

        async def insert_many(values: range) -> None:
            await asyncio.gather(*(insert(value) for value in values))

        asyncio.run(setup())
        for value in range(3):
            asyncio.run(insert(value))
        thread = threading.Thread(target=lambda: asyncio.run(insert_many(range(100, 150))))
        thread.start()
        asyncio.run(insert_many(range(200, 250)))
        thread.join()
        assert d1_bridge.debug_query(db.database, "SELECT count(*) AS n FROM t") == [{"n": 103}]


async def test_two_shapes_share_one_database(d1_bridge: D1Bridge) -> None:
    with (
        d1_binding(d1_bridge, "external") as external,
        d1_binding(d1_bridge, "builtin", database=external.database) as builtin,
    ):
        await external.exec("CREATE TABLE t (v TEXT)")
        await builtin.prepare("INSERT INTO t VALUES (?1)").bind("from builtin").run()
        assert await external.prepare("SELECT v FROM t").first("v") == "from builtin"
        assert external.stats is not builtin.stats


# ---------------------------------------------------------------------------
# Setup errors and timings
# ---------------------------------------------------------------------------
def test_missing_npm_packages_fail_loudly(tmp_path: Path) -> None:
    (tmp_path / "package.json").write_text(
        json.dumps({"devDependencies": {"miniflare": "4.20260426.0"}})
    )
    with pytest.raises(D1BridgeError, match="run `npm ci` in"):
        check_node_setup(tmp_path)
    with pytest.raises(D1BridgeError, match="npm ci"):
        D1Bridge.start(root=tmp_path)
    installed = tmp_path / "node_modules" / "miniflare"
    installed.mkdir(parents=True)
    (installed / "package.json").write_text(json.dumps({"version": "4.0.0"}))
    with pytest.raises(D1BridgeError, match=r"miniflare 4\.0\.0, package\.json pins 4\.2026"):
        check_node_setup(tmp_path)


def test_missing_node_fails_loudly(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("TICKWORK_NODE", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(D1BridgeError, match=r"Node\.js"):
        check_node_setup()


def test_a_dead_bridge_fails_loudly_and_leaves_no_workerd() -> None:
    bridge = D1Bridge.start(databases=1)
    try:
        db = bridge.binding("external")
        pending = db.prepare("SELECT 1 AS a").first()
        os.kill(bridge.process_group, signal.SIGKILL)  # node only, as in a crash
        with pytest.raises(D1BridgeError, match="exited unexpectedly"):
            asyncio.run(asyncio.wait_for(_settle(pending), timeout=30))
        assert not bridge.alive
        with pytest.raises(D1BridgeError, match="exited unexpectedly"):
            db.prepare("SELECT 1").all()
        # The workerd that Miniflare started went with it.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(bridge.process_group, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        else:
            pytest.fail("workerd outlived its bridge")
    finally:
        bridge.close()


async def _settle(promise: Any) -> Any:
    return await promise


def test_bridge_reports_versions_and_latency(d1_bridge: D1Bridge) -> None:
    assert d1_bridge.alive
    assert d1_bridge.info["versions"]["miniflare"] == "4.20260426.0"
    assert d1_bridge.info["versions"]["node"].startswith("v")
    best = min(d1_bridge.ping() for _ in range(20))
    assert best < 0.25, f"a bridge round trip took {best * 1000:.1f} ms"
    if os.environ.get("TICKWORK_D1_TIMINGS"):
        print(f"\nD1 bridge: start-up {d1_bridge.startup_seconds * 1000:.0f} ms, "
              f"ping {best * 1000:.2f} ms")
