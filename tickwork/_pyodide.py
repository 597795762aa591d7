"""Pyodide's FFI values, looked up when a store is built, never at import.

CPython hosts have no ``pyodide``; tests install a stand-in in ``sys.modules``
before building a store, so the lookup must happen then, not at import.
"""

from __future__ import annotations

from typing import Any


def load_jsnull() -> object | None:
    """``pyodide.ffi.jsnull`` (how SQL NULL must be bound and comes back), or None."""
    try:
        from pyodide.ffi import jsnull  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    return jsnull  # type: ignore[no-any-return, unused-ignore]


def load_to_js_for(value: Any) -> Any:
    """``pyodide.ffi.to_js`` when ``value`` is a raw JS proxy (built-in SDK), else None."""
    try:
        from pyodide.ffi import JsProxy, to_js  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    return to_js if isinstance(value, JsProxy) else None


def to_sql_bindings(values: Any, jsnull: object | None) -> Any:
    """``values`` with None bound as SQL NULL: ``jsnull`` under Pyodide.

    Python None crosses Pyodide's raw FFI as JS undefined, which D1 rejects
    and which is ambiguous anywhere else.
    """
    if jsnull is None:
        return values
    return [jsnull if value is None else value for value in values]


def plain_value(value: Any, jsnull: object | None) -> Any:
    """A SQLite value from JS as plain Python: NULL as None, integers as int.

    SQLite INTEGERs travel as JS doubles; tickwork stores no REALs and keeps
    every integer within 2**53, so an integral float is an int.
    """
    if value is None or value is jsnull:
        return None
    if type(value) is float and value.is_integer():
        return int(value)
    return value
