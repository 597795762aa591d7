"""The built-in ``workers`` SDK's shape for the real-Pyodide tier (the ``builtin`` shape).

workerd's built-in SDK (compatibility dates before 2026-04-21) is not in the
npm ``pyodide`` package, so this module gives tickwork's glue its surface and
its behaviour as measured in a real workerd (python-workers-facts.md,
"Measured in real workerd" and its second round), over real JavaScript
objects. It is our own stand-in, written from those measurements; the other
shape the tier runs is the real external SDK (``inside/sdk_shapes.py``).

* Entry classes: ``DurableObject`` and ``WorkerEntrypoint`` keep ``ctx`` and
  ``env``. Every subclass has the ``__init__`` it resolves to replaced by one
  that wraps its second argument, ``env``, in ``_EnvWrapper`` and calls the
  one it replaced. The wrapper is **not idempotent**: a subclass of a
  subclass receives ``env`` wrapped twice (measured: a class made by
  ``worker_class()`` got it twice; the facts file's wording, "per class that
  defines ``__init__``", is the narrower reading, and per subclass is the
  one both measurements fit). ``ctx`` is not wrapped: ``ctx.storage`` is the
  raw JS storage.
* ``_EnvWrapper``: reading a binding whose JS constructor is
  ``DurableObjectNamespace`` gives a namespace wrapper, ``Fetcher`` a fetcher
  wrapper, anything else (D1, strings) the value itself; each is kept on the
  wrapper after the first read. A namespace wrapper forwards every other
  attribute (``constructor`` too) to the namespace, so an outer env wrapper
  takes it for a namespace and wraps it again. A fetcher wrapper's method
  converts its arguments (``python_to_rpc``: a dict as a JS Map; a tuple,
  bytearray, lambda or awaitable refused with ``TypeError: <class 'tuple'>
  cannot be sent over RPC.``), calls the binding's method, and when that
  returns a JS promise awaits it and converts the reply (``to_py()``);
  anything else it returns converted as it is. Wrapped twice, the inner
  wrapper's method is a Python coroutine function: the outer one hands the
  caller the coroutine instead of the reply (measured: "JobOwner replied
  with coroutine").
* ``Request`` wraps the JS Request a fetch handler receives: ``method`` is an
  ``http.HTTPMethod`` enum, ``headers`` an ``http.client.HTTPMessage`` (so
  ``headers.get(name)`` is None when missing), ``url`` the URL after the JS
  URL parser (dot segments, ``%2E%2E`` included, already resolved), ``body``
  the JS ReadableStream (JS null, i.e. ``jsnull``, without one), and
  ``await bytes()`` / ``text()`` read it.
* ``Response(body, status=..., headers=dict)`` builds a JS Response.
* ``fetch(url, **options)`` is the global JS ``fetch``.

Everything crosses Pyodide's real FFI; nothing here converts more kindly
than the runtime does.
"""

from __future__ import annotations

import http.client
import inspect
from collections.abc import Mapping
from http import HTTPMethod
from types import LambdaType
from typing import Any

import js  # type: ignore[import-not-found]
from pyodide.ffi import JsProxy, to_js  # type: ignore[import-not-found]


def _js_name(value: Any) -> str | None:
    """``value.constructor.name``, or None (no constructor: not a JS object)."""
    if not hasattr(value, "constructor"):
        return None
    name = getattr(value.constructor, "name", None)
    return name if isinstance(name, str) else None


def python_to_rpc(value: Any) -> Any:
    """A Python value as the built-in SDK sends it over RPC."""
    _refuse(value)
    return to_js(value, dict_converter=js.Map.new)


def _refuse(value: Any) -> None:
    if isinstance(value, (tuple, bytearray, LambdaType)) or inspect.isawaitable(value):
        raise TypeError(f"{type(value)} cannot be sent over RPC.")
    if isinstance(value, dict):
        for item in value.values():
            _refuse(item)
    elif isinstance(value, (list, set)):
        for item in value:
            _refuse(item)


def python_from_rpc(value: Any) -> Any:
    return value.to_py() if isinstance(value, JsProxy) else value


class _FetcherWrapper:
    def __init__(self, binding: Any) -> None:
        self._binding = binding

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        attribute = getattr(self._binding, name)
        if not callable(attribute):
            return attribute

        async def call(*args: Any) -> Any:
            result = attribute(*[python_to_rpc(arg) for arg in args])
            if hasattr(result, "then") and callable(result.then):
                return python_from_rpc(await result)
            return python_from_rpc(result)

        setattr(self, name, call)
        return call


class _DurableObjectNamespaceWrapper:
    def __init__(self, binding: Any) -> None:
        self._binding = binding

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._binding, name)

    def get(self, *args: Any) -> _FetcherWrapper:
        return _FetcherWrapper(self._binding.get(*args))

    def getByName(self, *args: Any) -> _FetcherWrapper:
        return _FetcherWrapper(self._binding.getByName(*args))


class _EnvWrapper:
    def __init__(self, env: Any) -> None:
        self._env = env

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        binding = getattr(self._env, name)
        kind = _js_name(binding)
        if kind == "Fetcher":
            binding = _FetcherWrapper(binding)
        elif kind == "DurableObjectNamespace":
            binding = _DurableObjectNamespaceWrapper(binding)
        setattr(self, name, binding)
        return binding


def _wrap_env_in_init(cls: type) -> None:
    replaced = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > 1:
            args = (args[0], _EnvWrapper(args[1]), *args[2:])
        replaced(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]


class DurableObject:
    def __init__(self, ctx: Any, env: Any) -> None:
        self.ctx = ctx
        self.env = env

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _wrap_env_in_init(cls)


class WorkerEntrypoint:
    def __init__(self, ctx: Any, env: Any) -> None:
        self.ctx = ctx
        self.env = env

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _wrap_env_in_init(cls)


def _options(values: Mapping[str, Any]) -> Any:
    return to_js(dict(values), dict_converter=js.Object.fromEntries)


class Request:
    """A fetch handler's request (see the module doc)."""

    def __init__(self, js_request: Any) -> None:
        self.js_object = js_request

    @property
    def method(self) -> HTTPMethod:
        return HTTPMethod[self.js_object.method]

    @property
    def url(self) -> str:
        return str(self.js_object.url)

    @property
    def headers(self) -> http.client.HTTPMessage:
        message = http.client.HTTPMessage()
        for name, value in self.js_object.headers:
            message[name] = value.strip()
        return message

    @property
    def body(self) -> Any:
        return self.js_object.body

    @property
    def body_used(self) -> bool:
        return bool(self.js_object.bodyUsed)

    async def bytes(self) -> bytes:
        if self.body_used:
            raise OSError("Body already used")
        return bytes((await self.js_object.arrayBuffer()).to_bytes())

    async def text(self) -> str:
        return str(await self.js_object.text())


class Response:
    """A JS Response built from Python values."""

    def __init__(self, body: str | bytes | None = None, status: int | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        init: dict[str, Any] = {}
        if status is not None:
            init["status"] = status
        if headers:
            init["headers"] = dict(headers)
        js_body = to_js(body) if isinstance(body, bytes) else body
        self.js_object = js.Response.new(js_body, _options(init))

    @property
    def status(self) -> int:
        return int(self.js_object.status)

    @property
    def headers(self) -> Any:
        return self.js_object.headers

    async def text(self) -> str:
        return str(await self.js_object.text())

    async def bytes(self) -> bytes:
        return bytes((await self.js_object.arrayBuffer()).to_bytes())


async def fetch(resource: str, **options: Any) -> Response:
    reply = await js.fetch(resource, _options(options))
    response = Response.__new__(Response)
    response.js_object = reply
    return response
