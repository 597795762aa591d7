"""A small HTTP/1.1 client on asyncio streams (http and https), CPython only.

    reply = await http_post(url, body, headers, timeout_s, signal)   # an HttpPost
    response = await request("GET", url, headers=..., timeout_s=5.0)

``http_post`` is the transport of ``tickwork.executors.webhook`` on CPython
(``guarded_http_post(policy)`` is the one ``tickwork serve`` uses: every
destination is checked by a ``DestinationPolicy`` and the connection goes to
exactly the addresses checked) and keeps its contract:

* one connection per request (``Connection: close``), redirects are not
  followed (a 3xx is returned as it is);
* ``HttpUnreachable`` only when nothing was sent: the name did not resolve,
  the connection was refused or timed out, or the TLS handshake failed
  (certificates are verified with the system's trust store);
* ``HttpTimeout`` when no full reply came within ``timeout_s`` (measured from
  the start, connecting included) once the request may have left, and when
  ``signal`` aborts;
* ``HttpProtocolError`` for a reply that cannot be read (a malformed status
  line or header, a connection closed mid-reply): the request may have been
  acted on.

Replies: ``Content-Length``, chunked and read-until-close bodies; at most
``max_body_bytes`` of a body are kept (``HttpResponse.truncated`` says so).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tickwork.executors.webhook import HttpPost, HttpReply, HttpTimeout, HttpUnreachable
from tickwork.hosts.cpython.destinations import DestinationPolicy
from tickwork.model.signals import AbortSignal

__all__ = [
    "HttpProtocolError",
    "HttpReply",
    "HttpResponse",
    "HttpTimeout",
    "HttpUnreachable",
    "guarded_http_post",
    "http_post",
    "request",
]

#: Body bytes kept from a reply by default.
MAX_REPLY_BODY = 1_000_000
#: Largest status line or header line read from a reply.
LINE_LIMIT = 64 * 1024
USER_AGENT = "tickwork"

_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_HEADER_VALUE = re.compile(r"[\x20-\x7e\x80-\xff\t]*")
_STATUS_LINE = re.compile(r"HTTP/1\.[01] ([0-9]{3})(?: .*)?")


class HttpProtocolError(Exception):
    """The reply could not be read; the request may have been sent and acted on."""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    headers: dict[str, str]  # names lower case; repeated fields joined with ", "
    body: bytes
    truncated: bool = False


@dataclass(slots=True)
class _Progress:
    sent: bool = False
    writer: asyncio.StreamWriter | None = field(default=None)


@dataclass(frozen=True, slots=True)
class _Target:
    scheme: str
    host: str
    port: int
    host_header: str
    path: str

    @classmethod
    def parse(cls, url: str) -> _Target:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as error:
            raise ValueError(f"invalid URL {url!r}: {error}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"invalid URL {url!r}: need http:// or https:// and a host")
        default = 443 if parts.scheme == "https" else 80
        host = parts.hostname
        shown = f"[{host}]" if ":" in host else host
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        if any(ord(char) <= 0x20 or ord(char) >= 0x7f for char in path):
            raise ValueError(f"invalid URL {url!r}: the path must be percent-encoded ASCII")
        return cls(parts.scheme, host, port or default,
                   shown if port in (None, default) else f"{shown}:{port}", path)


async def http_post(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    timeout_s: float,
    signal: AbortSignal,
) -> HttpReply:
    """POST ``body`` to ``url``: the ``HttpPost`` of the webhook executor on CPython,
    to any destination (see ``guarded_http_post`` for one that checks)."""
    response = await request("POST", url, body=body, headers=headers, timeout_s=timeout_s,
                             signal=signal)
    return _reply(response)


def guarded_http_post(policy: DestinationPolicy) -> HttpPost:
    """``http_post`` to the destinations ``policy`` allows only (``HttpRefused``
    for the others, before anything is sent)."""

    async def post(url: str, body: bytes, headers: Mapping[str, str], timeout_s: float,
                   signal: AbortSignal) -> HttpReply:
        response = await request("POST", url, body=body, headers=headers,
                                 timeout_s=timeout_s, signal=signal, destinations=policy)
        return _reply(response)

    return post


def _reply(response: HttpResponse) -> HttpReply:
    return HttpReply(response.status, response.body.decode("utf-8", errors="replace"),
                     response.headers.get("retry-after"))


async def request(
    method: str,
    url: str,
    *,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    signal: AbortSignal | None = None,
    max_body_bytes: int = MAX_REPLY_BODY,
    ssl_context: ssl.SSLContext | None = None,
    destinations: DestinationPolicy | None = None,
) -> HttpResponse:
    """Send one request and read its reply (see the module doc for the errors).

    With ``destinations``, the host is resolved and checked first and the
    connection goes to the checked addresses only."""
    target = _Target.parse(url)
    head = _request_head(method, target, body, headers or {})
    progress = _Progress()
    work = asyncio.ensure_future(
        _exchange(target, head, body, method, progress, max_body_bytes, ssl_context,
                  destinations))
    waiting: set[asyncio.Future[Any]] = {work}
    aborted: asyncio.Future[str] | None = None
    if signal is not None:
        aborted = asyncio.ensure_future(signal.wait())
        waiting.add(aborted)
    try:
        await asyncio.wait(waiting, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if aborted is not None:
            aborted.cancel()
        if not work.done():
            work.cancel()
            work.add_done_callback(_retrieve)
            if progress.writer is not None:
                progress.writer.close()
    if work.done() and not work.cancelled():
        return work.result()  # the reply, or the exchange's own error
    if signal is not None and signal.aborted:
        raise HttpTimeout(f"aborted ({signal.reason}) before a reply from {url}")
    if not progress.sent:
        raise HttpUnreachable(f"could not connect to {target.host}:{target.port} "
                              f"within {timeout_s:g} s")
    raise HttpTimeout(f"no reply from {url} within {timeout_s:g} s")


def _request_head(method: str, target: _Target, body: bytes,
                  headers: Mapping[str, str]) -> bytes:
    if not _HEADER_NAME.fullmatch(method):
        raise ValueError(f"invalid method {method!r}")
    fields = {"host": target.host_header, "user-agent": USER_AGENT, "accept": "*/*"}
    for name, value in headers.items():
        if not _HEADER_NAME.fullmatch(name) or not _HEADER_VALUE.fullmatch(value):
            raise ValueError(f"invalid header {name!r}")
        fields[name.lower()] = value
    fields["content-length"] = str(len(body))
    fields["connection"] = "close"
    fields.pop("transfer-encoding", None)
    lines = [f"{method} {target.path} HTTP/1.1", *(f"{k}: {v}" for k, v in fields.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def _connect(target: _Target, context: ssl.SSLContext | None,
                   destinations: DestinationPolicy | None,
                   ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    # Without a policy the name is resolved by the connection itself; with
    # one, only the addresses the policy checked are tried, in order, so the
    # name cannot resolve to something else in between (the name still goes
    # to TLS as the server name, and the certificate is checked against it).
    addresses = [target.host] if destinations is None \
        else await destinations.resolve(target.host, target.port)
    server_hostname = target.host if context is not None else None
    failure: BaseException | None = None
    for address in addresses:
        try:
            return await asyncio.open_connection(address, target.port, ssl=context,
                                                 server_hostname=server_hostname,
                                                 limit=LINE_LIMIT)
        except (OSError, ssl.SSLError) as error:  # refused, no route, DNS, TLS handshake
            failure = error
    raise HttpUnreachable(f"could not connect to {target.host}:{target.port}: "
                          f"{failure}") from failure


async def _exchange(target: _Target, head: bytes, body: bytes, method: str,
                    progress: _Progress, max_body_bytes: int,
                    ssl_context: ssl.SSLContext | None,
                    destinations: DestinationPolicy | None) -> HttpResponse:
    context = None
    if target.scheme == "https":
        context = ssl_context or ssl.create_default_context()
    reader, writer = await _connect(target, context, destinations)
    progress.writer = writer
    try:
        progress.sent = True  # from here on the request may reach the receiver
        writer.write(head + body)
        await writer.drain()
        return await _read_response(reader, method, max_body_bytes)
    except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as error:
        raise HttpProtocolError(f"reading the reply from {target.host_header} failed: "
                                f"{type(error).__name__}: {error}") from error
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(writer.wait_closed(), 1.0)


async def _read_response(reader: asyncio.StreamReader, method: str,
                         max_body_bytes: int) -> HttpResponse:
    while True:
        line = await _line(reader)
        match = _STATUS_LINE.fullmatch(line)
        if match is None:
            raise HttpProtocolError(f"malformed status line {line[:80]!r}")
        status = int(match[1])
        headers = await _headers(reader)
        if 100 <= status < 200 and status != 101:
            continue  # an interim reply (100 Continue): the final one follows
        break
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return HttpResponse(status, headers, b"")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body, truncated = await _chunked(reader, max_body_bytes)
        return HttpResponse(status, headers, body, truncated)
    length_text = headers.get("content-length")
    if length_text is not None:
        if not length_text.isdigit():
            raise HttpProtocolError(f"malformed Content-Length {length_text!r}")
        length = int(length_text)
        body = await reader.readexactly(min(length, max_body_bytes))
        return HttpResponse(status, headers, body, length > max_body_bytes)
    kept = bytearray()
    while len(kept) < max_body_bytes:
        chunk = await reader.read(max_body_bytes - len(kept))
        if not chunk:
            break
        kept += chunk
    truncated = len(kept) >= max_body_bytes and bool(await reader.read(1))
    return HttpResponse(status, headers, bytes(kept), truncated)


async def _line(reader: asyncio.StreamReader) -> str:
    raw = await reader.readuntil(b"\r\n")
    return raw[:-2].decode("latin-1")


async def _headers(reader: asyncio.StreamReader) -> dict[str, str]:
    headers: dict[str, str] = {}
    for _ in range(200):
        line = await _line(reader)
        if not line:
            return headers
        name, colon, value = line.partition(":")
        if not colon or not _HEADER_NAME.fullmatch(name):
            raise HttpProtocolError(f"malformed header line {line[:80]!r}")
        name, value = name.lower(), value.strip(" \t")
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    raise HttpProtocolError("too many header lines in the reply")


async def _chunked(reader: asyncio.StreamReader, max_body_bytes: int) -> tuple[bytes, bool]:
    body = bytearray()
    truncated = False
    while True:
        size_text = (await _line(reader)).split(";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise HttpProtocolError(f"malformed chunk size {size_text[:20]!r}") from None
        if size == 0:
            await _headers(reader)  # trailers
            return bytes(body), truncated
        room = max_body_bytes - len(body)
        if size > room:
            body += await reader.readexactly(room)
            return bytes(body), True  # stop reading: the connection is closed anyway
        body += await reader.readexactly(size)
        if await reader.readexactly(2) != b"\r\n":
            raise HttpProtocolError("malformed chunk terminator")


def _retrieve(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        with contextlib.suppress(BaseException):
            task.exception()
