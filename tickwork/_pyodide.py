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
