"""A CPython stand-in for the ``workers`` module of Python Workers.

Only what tickwork's Worker and Durable Object glue touch: ``DurableObject``
and ``WorkerEntrypoint`` (which keep ``ctx`` and ``env``, as both SDKs do),
``Response`` (body, status, headers, like ``workers.Response``), ``Request``
(``method``, ``url``, ``headers``, ``await bytes()`` / ``text()``, like the
external SDK's wrapper) and ``fetch`` (delegating to a test-installed
function; there is no network here).

``installed_workers_module()`` puts it in ``sys.modules["workers"]`` for the
``with`` block, and removes ``worker``/``durable_objects`` modules imported
under it so a later test imports them afresh.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Awaitable, Callable, Iterator, Mapping
from email.message import Message
from typing import Any


class DurableObject:
    def __init__(self, ctx: Any, env: Any) -> None:
        self.ctx = ctx
        self.env = env


class WorkerEntrypoint:
    def __init__(self, ctx: Any, env: Any) -> None:
        self.ctx = ctx
        self.env = env


def _headers(values: Mapping[str, str] | None) -> Message:
    # The external SDK exposes headers as an email.message.Message (case-insensitive get).
    message = Message()
    for name, value in (values or {}).items():
        message[name] = value
    return message


class Response:
    def __init__(self, body: str | bytes | None = None, status: int | None = None,
                 status_text: str = "", headers: Mapping[str, str] | None = None) -> None:
        if body is not None and not isinstance(body, (str, bytes)):
            raise TypeError(f"Unsupported type in Response: {type(body).__name__}")
        self.body = body.encode() if isinstance(body, str) else (body or b"")
        self.status = status or 200
        self.headers = _headers(headers)

    async def text(self) -> str:
        return self.body.decode()

    async def bytes(self) -> bytes:
        return self.body


class Request:
    def __init__(self, url: str, *, method: str = "GET",
                 headers: Mapping[str, str] | None = None, body: bytes = b"") -> None:
        self.url = url
        self.method = method
        self.headers = _headers(headers)
        self._body = body
        self.body_used = False

    async def bytes(self) -> bytes:
        if self.body_used:
            raise OSError("Body already used")
        self.body_used = True
        return self._body

    async def text(self) -> str:
        return (await self.bytes()).decode()


Fetch = Callable[..., Awaitable[Response]]


class _FetchSlot:
    handler: Fetch | None = None


async def fetch(resource: str, **options: Any) -> Response:
    if _FetchSlot.handler is None:
        raise OSError("no network in tests: install a fetch handler with use_fetch()")
    return await _FetchSlot.handler(resource, **options)


def use_fetch(handler: Fetch | None) -> None:
    """Route ``workers.fetch`` to ``handler`` (None: refuse every fetch)."""
    _FetchSlot.handler = handler


def build_module() -> types.ModuleType:
    module = types.ModuleType("workers")
    for name, value in {
        "DurableObject": DurableObject,
        "WorkerEntrypoint": WorkerEntrypoint,
        "Response": Response,
        "Request": Request,
        "fetch": fetch,
    }.items():
        setattr(module, name, value)
    return module


_GLUE_PACKAGES = ("worker", "durable_objects")


def _forget_glue() -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in _GLUE_PACKAGES:
            del sys.modules[name]


@contextlib.contextmanager
def installed_workers_module() -> Iterator[types.ModuleType]:
    previous = sys.modules.get("workers")
    module = build_module()
    sys.modules["workers"] = module
    _forget_glue()
    try:
        yield module
    finally:
        use_fetch(None)
        _forget_glue()
        if previous is None:
            sys.modules.pop("workers", None)
        else:
            sys.modules["workers"] = previous
