"""Miniflare's real D1, called from Pyodide as a JS object, against what real
workerd was measured to do (runs inside Pyodide)."""

from __future__ import annotations

from typing import Any

import pytest

EDGE = 2**53 - 1


async def test_bigints_are_refused_with_d1s_own_message(d1: Any) -> None:
    from pyodide.ffi import JsException  # type: ignore[import-not-found]

    for value in (EDGE, -EDGE):
        with pytest.raises(JsException) as refused:
            await d1.prepare("SELECT ?1").bind(value).all()
        assert refused.value.message == (
            f"D1_TYPE_ERROR: Type 'bigint' not supported for value '{value}'")
    row = await d1.prepare("SELECT ?1 AS v").bind(float(EDGE)).first()
    assert row.v == EDGE and type(row.v) is int


async def test_none_is_refused_as_undefined_and_true_binds_as_one(d1: Any) -> None:
    from pyodide.ffi import JsException, jsnull  # type: ignore[import-not-found]

    with pytest.raises(JsException) as refused:
        await d1.prepare("SELECT ?1").bind(None).all()
    assert "D1_TYPE_ERROR: Type 'undefined' not supported for value 'undefined'" in (
        refused.value.message)
    assert (await d1.prepare("SELECT ?1 AS v").bind(True).first()).v == 1
    assert (await d1.prepare("SELECT ?1 AS v").bind(jsnull).first()).v is jsnull


async def test_raw_and_batch_rows_keep_jsnull_and_changes_is_an_int(d1: Any) -> None:
    from pyodide.ffi import jsnull, to_js  # type: ignore[import-not-found]

    await d1.prepare("CREATE TABLE t (a INTEGER, b TEXT)").run()
    ran = await d1.prepare("INSERT INTO t VALUES (1, NULL), (2, 'x')").run()
    changes = ran.meta.changes
    assert (changes, type(changes)) == (2, int)
    raw = (await d1.prepare("SELECT a, b FROM t ORDER BY a").raw()).to_py()
    assert raw == [[1, jsnull], [2, "x"]] and raw[0][1] is jsnull
    results = (await d1.batch(to_js([d1.prepare("SELECT b FROM t ORDER BY a")]))).to_py()
    assert results[0]["results"][0]["b"] is jsnull


async def test_a_failed_batch_rolls_back_whole_and_begin_is_refused(d1: Any) -> None:
    from pyodide.ffi import JsException, to_js  # type: ignore[import-not-found]

    await d1.prepare("CREATE TABLE t (a INTEGER PRIMARY KEY)").run()
    with pytest.raises(JsException, match="UNIQUE constraint failed"):
        await d1.batch(to_js([d1.prepare("INSERT INTO t VALUES (1)"),
                              d1.prepare("INSERT INTO t VALUES (1)")]))
    assert (await d1.prepare("SELECT count(*) AS n FROM t").first()).n == 0
    with pytest.raises(JsException) as refused:
        await d1.prepare("BEGIN").run()
    assert refused.value.message.startswith("D1_ERROR: To execute a transaction")


async def test_tickwork_hands_batch_a_js_array(d1: Any) -> None:
    # workerd's D1 takes a plain Python list too (measured); Miniflare's Node
    # proxy does not ("DevalueError: Cannot stringify arbitrary non-POJOs").
    # D1Binding converts the list with to_js for a raw JS binding, so both work.
    from pyodide.ffi import JsException  # type: ignore[import-not-found]

    from tickwork.stores.d1.binding import D1Binding

    binding = D1Binding(d1)
    assert await binding.batch([("SELECT ?1 AS n", [EDGE])], [["n"]]) == [[(EDGE,)]]
    with pytest.raises(JsException, match="DevalueError"):
        await d1.batch([d1.prepare("SELECT 1")])
