"""The ``workers`` module for the real-Pyodide tier: the built-in SDK's surface,
over real JavaScript objects.

workerd's built-in SDK is not in the npm ``pyodide`` package, so this
module gives tickwork's glue the same surface, written after the SDK's
behaviour as measured in a real workerd (python-workers-facts.md, "Measured
in real workerd") and its documented API:

* ``Request`` wraps the JS Request a fetch handler receives: ``method`` is an
  ``http.HTTPMethod`` enum, ``headers`` an ``http.client.HTTPMessage`` (so
  ``headers.get(name)`` is None when missing), ``url`` the URL after the JS
  URL parser (dot segments, ``%2E%2E`` included, already resolved), ``body``
  the JS ReadableStream (JS null, i.e. ``jsnull``, without one), and
  ``await bytes()`` / ``text()`` read it.
* ``Response(body, status=..., headers=dict)`` builds a JS Response.
* ``fetch(url, **options)`` is the global JS ``fetch``.
* ``DurableObject`` and ``WorkerEntrypoint`` keep ``ctx`` and ``env``.

Everything crosses Pyodide's real FFI; nothing here converts more kindly
than the runtime does.
"""

from __future__ import annotations

import http.client
from collections.abc import Mapping
from http import HTTPMethod
from typing import Any

import js  # type: ignore[import-not-found]
from pyodide.ffi import to_js  # type: ignore[import-not-found]


class DurableObject:
    def __init__(self, ctx: Any, env: Any) -> None:
        self.ctx = ctx
        self.env = env


class WorkerEntrypoint:
    def __init__(self, ctx: Any, env: Any) -> None:
        self.ctx = ctx
        self.env = env


def _options(values: Mapping[str, Any]) -> Any:
    return to_js(dict(values), dict_converter=js.Object.fromEntries)


class Request:
    """A fetch handler's request (see the module doc)."""

    def __init__(self, js_request: Any) -> None:
        self.js_object = js_request

    @classmethod
    def new(cls, url: str, *, method: str = "GET", headers: Mapping[str, str] | None = None,
            body: bytes | None = None) -> Request:
        """A JS Request, as the runtime would hand one to the Worker."""
        init: dict[str, Any] = {"method": method, "headers": dict(headers or {})}
        if body is not None:
            init["body"] = to_js(body)
        return cls(js.Request.new(url, _options(init)))

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
