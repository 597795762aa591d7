"""A Durable Object namespace for the real-Pyodide tier (``env.JOB_OWNERS``).

``getByName(name)`` gives a stub; each call of a stub method crosses the
Workers RPC boundary as the runtime carries it, with Pyodide's real FFI and
V8's real structured clone (``structuredClone``): on the way out
``to_js(value, dict_converter=Map)``, then the clone, then on the other side
``to_py()`` with JS null and undefined as None. What real workerd was
measured to do follows from that: dicts and lists arrive as plain Python
with None, a whole float 1.0 arrives as the int 1 (in both directions), a
set as a set, bytes as a memoryview, a tuple is refused (``TypeError: <class
'tuple'> cannot be sent over RPC.``), and an exception raised in the object
reaches the caller as a JS Error whose message is ``PythonError:`` and the
whole remote traceback.

One instance per name over that name's ``ctx.storage`` (a JS object from
``js/do_storage.mjs``); ``evict(name)`` ends the instance and gives the next
one a new storage object over the same database.
"""

from __future__ import annotations

import traceback
from types import FunctionType, LambdaType, SimpleNamespace
from typing import Any

import js  # type: ignore[import-not-found]
import tickwork_tier  # type: ignore[import-not-found]
from pyodide.ffi import JsProxy, jsnull, to_js  # type: ignore[import-not-found]


def rpc_methods(cls: type) -> set[str]:
    """Public functions of the class (and its bases): what workerd lists as RPC."""
    names = set()
    for base in reversed(cls.__mro__):
        for name, value in vars(base).items():
            if not name.startswith("_") and isinstance(value, FunctionType):
                names.add(name)
    return names - {"alarm", "fetch"}


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


class Stub:
    def __init__(self, namespace: Namespace, name: str) -> None:
        self._namespace = namespace
        self.name = name

    def __getattr__(self, method: str) -> Any:
        if method.startswith("__"):
            raise AttributeError(method)
        namespace, name = self._namespace, self.name

        async def call(*args: Any) -> Any:
            sent = [carry(arg) for arg in args]
            if method not in rpc_methods(namespace.cls):
                raise TypeError(f'The RPC receiver does not implement the method "{method}".')
            namespace.calls.append((name, method))
            instance = namespace.instance(name)
            try:
                result = await getattr(instance, method)(*sent)
            except Exception as error:
                trace = "".join(traceback.format_exception(error))
                tickwork_tier.throwError(f"PythonError: {trace}")
            return carry(result)

        return call


class Namespace:
    """``env.JOB_OWNERS`` over ``cls`` (one instance per name)."""

    def __init__(self, cls: type, env: Any) -> None:
        self.cls = cls
        self.env = env
        self.calls: list[tuple[str, str]] = []
        self._storages: dict[str, Any] = {}
        self._instances: dict[str, Any] = {}

    def getByName(self, name: str) -> Stub:
        return Stub(self, name)

    def storage(self, name: str) -> Any:
        if name not in self._storages:
            self._storages[name] = tickwork_tier.newStorage()
        return self._storages[name]

    def instance(self, name: str) -> Any:
        if name not in self._instances:
            ctx = SimpleNamespace(storage=self.storage(name), id=name)
            self._instances[name] = self.cls(ctx, self.env)
        return self._instances[name]

    def evict(self, name: str) -> None:
        """The object's instance dies; the next one starts from what storage holds."""
        self._instances.pop(name, None)
        if name in self._storages:
            self._storages[name] = tickwork_tier.evictStorage(self._storages[name])

    def close(self) -> None:
        for storage in self._storages.values():
            storage.evicted = True


def alarm_info(retry_count: int = 0) -> Any:
    """The ``alarm_info`` the runtime passes to ``alarm()``: a JS object."""
    return to_js({"retryCount": retry_count, "isRetry": retry_count > 0},
                 dict_converter=js.Object.fromEntries)
