"""Pyodide's FFI as workerd runs it, and tickwork's edge to it (runs inside Pyodide).

These are the conversions the facts file measured in real workerd; here they
are checked against the same Pyodide build, so a change of Pyodide line (or
of what tickwork binds) shows up as a failing fact, not as a broken Worker.
"""

from __future__ import annotations

from typing import Any

EDGE = 2**53 - 1


def _typeof(value: Any) -> str:
    import tickwork_tier  # type: ignore[import-not-found]

    result: str = tickwork_tier.typeOf(value)
    return result


#: The Pyodide lines workerd runs, and their Python: 0.28.2 for compatibility
#: dates before the python_workers_20260610 flag, 314 from it on (the
#: version of Cloudflare's workers-py package index for Python 3.14).
WORKERD_LINES = {"0.28.2": (3, 13), "314.0.6": (3, 14)}


def test_this_is_a_pyodide_workerd_runs() -> None:
    import sys

    import pyodide  # type: ignore[import-not-found]

    assert WORKERD_LINES.get(pyodide.__version__) == sys.version_info[:2], (
        pyodide.__version__, sys.version_info)


def test_ints_cross_as_numbers_only_strictly_inside_the_safe_range() -> None:
    assert [_typeof(value) for value in (EDGE - 1, -(EDGE - 1), 0)] == ["number"] * 3
    # The bounds themselves are BigInts, like everything beyond them.
    assert [_typeof(value) for value in (EDGE, -EDGE, EDGE + 1, 2**63)] == ["bigint"] * 4
    # The same value as a float is a Number.
    assert _typeof(float(EDGE)) == "number"


def test_tickwork_binds_every_accepted_integer_as_a_number() -> None:
    from pyodide.ffi import jsnull  # type: ignore[import-not-found]

    from tickwork._pyodide import js_number, to_sql_bindings

    bound = to_sql_bindings([EDGE, -EDGE, EDGE - 1, 0, True, None, "x"], jsnull)
    assert [_typeof(value) for value in bound] == ["number"] * 5 + ["object", "string"]
    assert bound[5] is jsnull
    assert _typeof(js_number(EDGE, "alarm time")) == "number"


def test_none_crosses_as_undefined_and_js_null_comes_back_as_jsnull() -> None:
    import js  # type: ignore[import-not-found]
    from pyodide.ffi import jsnull  # type: ignore[import-not-found]

    assert _typeof(None) == "undefined"
    assert js.JSON.parse("null") is jsnull
    assert js.JSON.parse("null") is not None


def test_numbers_come_back_as_int_when_whole() -> None:
    import js  # type: ignore[import-not-found]

    whole, half, edge = js.JSON.parse("[2.0, 2.5, 9007199254740991]")
    assert (whole, type(whole)) == (2, int)
    assert (half, type(half)) == (2.5, float)
    assert (edge, type(edge)) == (EDGE, int)
