"""A CPython stand-in for the ``workers`` module of Python Workers.

Only what tickwork's Worker and Durable Object glue touch: ``DurableObject``
and ``WorkerEntrypoint`` (which keep ``ctx`` and ``env``, as both SDKs do),
``Response`` (body, status, headers, like ``workers.Response``), ``Request``
and ``fetch`` (delegating to a test-installed function; there is no network
here).

``Request`` is what a fetch handler receives from either SDK (both wrap the
JS Request the same way). Measured in real workerd with the built-in SDK:
``request.method`` is an ``http.HTTPMethod`` enum, ``request.headers.get(name)``
answers None for a missing header, and the URL's path has its dot segments
(``.``, ``..``, and their percent-encoded spellings such as ``%2E%2E``)
resolved by the runtime's URL parser before the Worker sees it. The body is
a JS ReadableStream (``request.body``; :class:`FakeReadableStream` here)
that can be read whole once (``await bytes()`` / ``text()``), read chunk by
chunk through ``getReader()``, or cancelled.

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
from http import HTTPMethod
from http.client import HTTPMessage
from typing import Any
from urllib.parse import urlsplit, urlunsplit


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


class _Chunk:
    """``{done, value}``: what ``reader.read()`` resolves to."""

    def __init__(self, value: bytes | None) -> None:
        self.done = value is None
        self.value = value


class FakeStreamReader:
    """``ReadableStreamDefaultReader`` of a :class:`FakeReadableStream`."""

    def __init__(self, stream: FakeReadableStream) -> None:
        self._stream = stream

    async def read(self) -> _Chunk:
        return _Chunk(self._stream._next_chunk())

    async def cancel(self, reason: Any = None) -> None:
        self._stream._cancel()


class FakeReadableStream:
    """A request body as JavaScript hands it over: chunks of at most
    ``chunk_size`` bytes. ``state`` says what the Worker did with it:
    ``"unread"``, ``"reading"``, ``"drained"`` (read to the end, chunk by
    chunk or whole) or ``"cancelled"``; ``bytes_read`` how much it took."""

    def __init__(self, data: bytes, chunk_size: int = 65_536) -> None:
        self._data = data
        self._chunk_size = chunk_size
        self.bytes_read = 0
        self.state = "unread"
        self.locked = False

    def getReader(self) -> FakeStreamReader:
        if self.locked:
            raise TypeError("ReadableStream is locked")
        self.locked = True
        return FakeStreamReader(self)

    async def cancel(self, reason: Any = None) -> None:
        if self.locked:
            raise TypeError("Cannot cancel a locked ReadableStream")
        self._cancel()

    def _next_chunk(self) -> bytes | None:
        if self.state in ("drained", "cancelled"):
            return None
        self.state = "reading"
        chunk = self._data[self.bytes_read:self.bytes_read + self._chunk_size]
        if not chunk:
            self.state = "drained"
            return None
        self.bytes_read += len(chunk)
        return chunk

    def _cancel(self) -> None:
        if self.state != "drained":
            self.state = "cancelled"

    def _read_all(self) -> bytes:
        if self.state != "unread" or self.locked:
            raise OSError("Body already used")
        self.bytes_read = len(self._data)
        self.state = "drained"
        return self._data


def resolve_dot_segments(path: str) -> str:
    """``path`` as the WHATWG URL parser leaves it: ``.`` and ``..`` segments,
    also spelled ``%2e`` (any case), are resolved."""
    single = {".", "%2e"}
    double = {"..", ".%2e", "%2e.", "%2e%2e"}
    segments = path.split("/")[1:]
    out: list[str] = []
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        lowered = segment.lower()
        if lowered in double:
            if out:
                out.pop()
            if last:
                out.append("")
        elif lowered in single:
            if last:
                out.append("")
        else:
            out.append(segment)
    return "/" + "/".join(out)


class Request:
    """The SDK's ``workers.Request`` over an incoming request (see the module doc)."""

    def __init__(self, url: str, *, method: str = "GET",
                 headers: Mapping[str, str] | None = None, body: bytes = b"") -> None:
        parts = urlsplit(url)
        self.url = urlunsplit(parts._replace(path=resolve_dot_segments(parts.path or "/")))
        self.method = HTTPMethod(method)
        self.headers = HTTPMessage()
        for name, value in (headers or {}).items():
            self.headers[name] = value
        # GET and HEAD requests carry no body: JS gives null.
        self.body: FakeReadableStream | None = (
            None if self.method in (HTTPMethod.GET, HTTPMethod.HEAD) else FakeReadableStream(body))

    @property
    def body_used(self) -> bool:
        return self.body is not None and self.body.state != "unread"

    async def bytes(self) -> bytes:
        return b"" if self.body is None else self.body._read_all()

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
    # tickwork.cloudflare binds the workers module at import, as the glue does.
    for name in list(sys.modules):
        if name.split(".")[0] in _GLUE_PACKAGES or name == "tickwork.cloudflare" \
                or name.startswith("tickwork.cloudflare."):
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
