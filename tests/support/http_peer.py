"""A tiny CPython ``HttpPost`` over asyncio streams, and a loopback HTTP server.

``stdlib_post`` speaks just enough HTTP/1.1 (one request per connection,
``content-length`` or read-to-close replies) for the webhook executor's
tests: connection failures before anything is written are
``HttpUnreachable``; a missing reply, a dropped connection or the timeout is
``HttpTimeout``.

``LoopbackServer`` answers by path: ``/status/<code>`` replies with that
code, ``/slow`` never replies (until the client goes away), ``/drop`` closes
the connection after reading the request. Every request it read is kept in
``requests``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from tickwork.executors.webhook import HttpReply, HttpTimeout, HttpUnreachable
from tickwork.model.signals import AbortSignal


async def stdlib_post(url: str, body: bytes, headers: Mapping[str, str], timeout_s: float,
                      signal: AbortSignal) -> HttpReply:
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 80
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    except (OSError, TimeoutError) as error:
        raise HttpUnreachable(f"cannot connect to {host}:{port}: {error}") from error
    try:
        lines = [f"POST {parts.path or '/'} HTTP/1.1", f"host: {parts.netloc}",
                 f"content-length: {len(body)}", "connection: close",
                 *(f"{name}: {value}" for name, value in headers.items())]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        async with asyncio.timeout(timeout_s):
            await writer.drain()
            status_line = await reader.readline()
            if not status_line:
                raise HttpTimeout("the connection closed without a reply")
            status = int(status_line.split()[1])
            length = None
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
            data = await (reader.readexactly(length) if length is not None else reader.read())
    except TimeoutError:
        raise HttpTimeout(f"no reply within {timeout_s} s") from None
    except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as error:
        raise HttpTimeout(f"the exchange failed after sending: {error}") from error
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    return HttpReply(status, data.decode("utf-8", "replace"))


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class LoopbackServer:
    requests: list[Received] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    port: int = 0
    _server: asyncio.Server | None = None

    async def start(self) -> LoopbackServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = (await reader.readline()).decode("latin-1").split()
            headers: dict[str, str] = {}
            while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            method, path = request_line[0], request_line[1]
            self.requests.append(Received(method, path, headers, body))
            self.arrived.set()
            if path == "/slow":
                await reader.read()  # until the client gives up and closes
                return
            if path == "/drop":
                return
            status = int(path.removeprefix("/status/")) if path.startswith("/status/") else 200
            reply = b"thanks"
            writer.write(f"HTTP/1.1 {status} X\r\ncontent-length: {len(reply)}\r\n"
                         "connection: close\r\n\r\n".encode() + reply)
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port: int = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    return port
