"""The edge to JavaScript (``tickwork._pyodide``): every value tickwork binds
on a Durable Object or D1 crosses as a JS Number, a string, a buffer or null."""

from __future__ import annotations

import pytest

from tests.support.fakes.pyodide_ffi import JsBigInt, py_to_js
from tickwork._pyodide import JS_NUMBER_BOUND, js_number, plain_value, to_sql_bindings

JSNULL = object()


@pytest.mark.parametrize("value", [0, 1, -1, 2**31, 2**53 - 2, -(2**53 - 2)])
def test_integers_inside_the_bounds_stay_ints(value: int) -> None:
    assert js_number(value) is value
    assert to_sql_bindings([value], JSNULL) == [value]


@pytest.mark.parametrize("value", [2**53 - 1, -(2**53 - 1)])
def test_the_bounds_become_the_equal_float(value: int) -> None:
    # Pyodide 0.28.2 hands the bounds to JS as BigInts; the equal float is a Number.
    assert isinstance(py_to_js(value), JsBigInt)
    [bound] = to_sql_bindings([value], JSNULL)
    assert type(bound) is float and bound == value and int(bound) == value
    assert not isinstance(py_to_js(bound), JsBigInt)


@pytest.mark.parametrize("value", [2**53, -(2**53), 2**63, -(2**70)])
def test_integers_beyond_the_bounds_are_refused_naming_the_binding(value: int) -> None:
    with pytest.raises(ValueError, match=rf"binding 1: the integer {value} is beyond"):
        to_sql_bindings(["x", value], JSNULL)
    with pytest.raises(ValueError, match="alarm time"):
        js_number(value, "alarm time")


def test_none_binds_as_js_null_and_booleans_as_integers() -> None:
    assert to_sql_bindings([None, True, False, "t", 1.5, b"b"], JSNULL) == [
        JSNULL, 1, 0, "t", 1.5, b"b"]
    assert [type(v) for v in to_sql_bindings([True, False], JSNULL)] == [int, int]
    # Without Pyodide (CPython hosts) None stays None.
    assert to_sql_bindings([None], None) == [None]


def test_reads_come_back_as_plain_python() -> None:
    assert plain_value(JSNULL, JSNULL) is None
    assert plain_value(None, JSNULL) is None
    assert (plain_value(float(JS_NUMBER_BOUND), JSNULL), type(plain_value(2.0, JSNULL))) == (
        JS_NUMBER_BOUND, int)
    assert plain_value(2.5, JSNULL) == 2.5
    assert plain_value("x", JSNULL) == "x"
