"""What a value becomes across the Workers RPC boundary (``carry``), for the
real-Pyodide tier's facts about RPC (the deployment's own stubs are
``inside/workerd.py``'s, over ``js/bindings.mjs``).

``carry(value)`` takes a value across as the runtime carries it, with
Pyodide's real FFI and V8's real structured clone (``structuredClone``): on
the way out ``to_js(value, dict_converter=Map)``, then the clone, then on
the other side ``to_py()`` with JS null and undefined as None. What real workerd was
measured to do follows from that: dicts and lists arrive as plain Python
with None, a whole float 1.0 arrives as the int 1 (in both directions), a
set as a set, bytes as a memoryview, a tuple is refused (``TypeError: <class
'tuple'> cannot be sent over RPC.``). (An exception raised in the object
reaching the caller as ``Error: PythonError: ...`` is ``js/bindings.mjs``'s.)
"""

from __future__ import annotations

from types import LambdaType
from typing import Any

import js  # type: ignore[import-not-found]
from pyodide.ffi import JsProxy, jsnull, to_js  # type: ignore[import-not-found]


def _refuse_disabled(value: Any) -> None:
    if isinstance(value, (tuple, bytearray)) or (isinstance(value, LambdaType)
                                                 and not isinstance(value, type)):
        raise TypeError(f"{type(value)} cannot be sent over RPC.")
    if isinstance(value, dict):
        for item in value.values():
            _refuse_disabled(item)
    elif isinstance(value, (list, set)):
        for item in value:
            _refuse_disabled(item)


def _none_for_null(value: Any) -> Any:
    if value is jsnull:
        return None
    if isinstance(value, dict):
        return {key: _none_for_null(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_none_for_null(item) for item in value]
    return value


def carry(value: Any) -> Any:
    """``value`` as the other side of a Workers RPC call receives it."""
    _refuse_disabled(value)
    cloned = js.structuredClone(to_js(value, dict_converter=js.Map.new))
    if isinstance(cloned, JsProxy):
        return _none_for_null(cloned.to_py())
    return None if cloned is jsnull else cloned
