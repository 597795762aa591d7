"""Stand-ins for the Worker's bindings and requests, in both Workers SDK shapes.

* ``make_env``: ``env.JOB_OWNERS`` is ``tests.fakes.do_namespace``'s
  namespace over the real ``JobOwner`` (Workers RPC rules applied to every
  argument and reply), ``env.DB`` the test's D1 binding.
* ``request(shape, ...)``: the incoming request as ``Default.fetch`` sees it:
  ``"external"`` is the external SDK's wrapper (``workers.Request`` of the
  stand-in module: an ``http.HTTPMethod`` method, ``await bytes()``),
  ``"builtin"`` the raw JS Request (``headers.get`` answers ``jsnull`` for a
  missing header, the body comes from ``await arrayBuffer()``).
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping
from http import HTTPMethod
from typing import Any

from tests.fakes.do_namespace import FakeDurableObjectNamespace

BASE_URL = "https://tickwork.example"
TOKEN = "s3cret-token"


def make_env(db: Any, sdk: str, *, token: str | None = TOKEN) -> types.SimpleNamespace:
    """The Worker's env: DB (D1), JOB_OWNERS (real ``JobOwner`` objects behind the
    namespace stand-in, storage in the same SDK shape) and the token secret."""
    from durable_objects.job_owner import JobOwner

    env = types.SimpleNamespace(DB=db)
    if token is not None:
        env.TICKWORK_TOKEN = token
    env.JOB_OWNERS = FakeDurableObjectNamespace(JobOwner, env, sdk=sdk)  # type: ignore[arg-type]
    return env


class _JsHeaders:
    def __init__(self, values: Mapping[str, str]) -> None:
        self._values = {name.lower(): value for name, value in values.items()}

    def get(self, name: str) -> Any:
        from pyodide.ffi import jsnull  # type: ignore[import-not-found]

        return self._values.get(name.lower(), jsnull)


class RawJsRequest:
    """The built-in SDK's view: a raw JS Request proxy (no ``bytes()``)."""

    def __init__(self, url: str, method: str, headers: Mapping[str, str], body: bytes) -> None:
        self.url = url
        self.method = method
        self.headers = _JsHeaders(headers)
        self._body = body
        self.reads = 0

    async def arrayBuffer(self) -> Any:
        from pyodide.ffi import JsBuffer  # type: ignore[import-not-found]

        self.reads += 1
        return JsBuffer(self._body)


def request(
    shape: str,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str | None = TOKEN,
    headers: Mapping[str, str] | None = None,
    raw: bytes | None = None,
) -> Any:
    """A request of ``shape`` (see the module doc). ``body`` is JSON-encoded
    unless ``raw`` bytes are given."""
    import workers  # the stand-in module, installed by the test

    all_headers = dict(headers or {})
    if token is not None:
        all_headers.setdefault("authorization", f"Bearer {token}")
    data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
    if data:
        all_headers.setdefault("content-type", "application/json")
    url = BASE_URL + path
    if shape == "builtin":
        return RawJsRequest(url, method, all_headers, data)
    wrapped = workers.Request(url, method="GET", headers=all_headers, body=data)
    wrapped.method = HTTPMethod(method)
    return wrapped


def body_was_read(request: Any) -> bool:
    """Whether the Worker read the body of a request made by ``request()``
    (``arrayBuffer()`` of the raw JS one, ``bytes()`` of the external SDK's)."""
    if isinstance(request, RawJsRequest):
        return request.reads > 0
    return bool(request.body_used)


async def send(worker: Any, shape: str, method: str, path: str, body: Any = None,
               **options: Any) -> tuple[int, Any]:
    """``Default.fetch`` one request; (status, decoded JSON body)."""
    response = await worker.fetch(request(shape, method, path, body, **options))
    return response.status, json.loads(response.body.decode()) if response.body else None


def job(job_id: str, queue: str = "q", **fields: Any) -> dict[str, Any]:
    return {"job_id": job_id, "queue": queue, **fields}
