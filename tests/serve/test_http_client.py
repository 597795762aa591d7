"""The host's HTTP client (the webhook transport on CPython) against loopback servers."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tickwork import AbortSignal, Completed, Failed, JobRecord, OutcomeUnknown
from tickwork.executors.webhook import webhook_executor
from tickwork.hosts.cpython.http_client import (
    HttpProtocolError,
    HttpTimeout,
    HttpUnreachable,
    http_post,
    request,
)

Reply = Callable[[bytes, asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Loopback:
    """A raw TCP server whose reply the test scripts; records each request."""

    def __init__(self) -> None:
        self.reply: Reply = self.ok
        self.requests: list[bytes] = []
        self.port = 0
        self.server: asyncio.Server | None = None

    async def start(self, context: ssl.SSLContext | None = None) -> Loopback:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=context)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.decode("latin-1").split("\r\n"):
                if line.lower().startswith("content-length:"):
                    length = int(line.split(":", 1)[1])
            body = await reader.readexactly(length)
            self.requests.append(head + body)
            await self.reply(head + body, reader, writer)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    @staticmethod
    async def ok(request: bytes, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello")


@pytest_asyncio.fixture
async def loopback() -> AsyncIterator[Loopback]:
    server = await Loopback().start()
    try:
        yield server
    finally:
        assert server.server is not None
        server.server.close()


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_post_sends_exactly_what_it_is_given(loopback: Loopback) -> None:
    reply = await http_post(f"{loopback.url}/hook?x=1", b'{"a":1}',
                            {"content-type": "application/json", "idempotency-key": "k-1"},
                            5.0, AbortSignal())
    assert (reply.status, reply.body) == (200, "hello")
    sent = loopback.requests[0].decode()
    head, body = sent.split("\r\n\r\n")
    lines = head.split("\r\n")
    assert lines[0] == "POST /hook?x=1 HTTP/1.1"
    headers = dict(line.split(": ", 1) for line in lines[1:])
    assert headers["host"] == f"127.0.0.1:{loopback.port}"
    assert headers["content-type"] == "application/json"
    assert headers["idempotency-key"] == "k-1"
    assert headers["content-length"] == "7" and headers["connection"] == "close"
    assert body == '{"a":1}'


async def test_post_reports_the_retry_after_header(loopback: Loopback) -> None:
    async def reply(request: bytes, reader: Any, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 120\r\n"
                     b"Content-Length: 0\r\n\r\n")

    loopback.reply = reply
    answer = await http_post(loopback.url, b"{}", {}, 5.0, AbortSignal())
    assert (answer.status, answer.retry_after) == (429, "120")
    loopback.reply = Loopback.ok
    assert (await http_post(loopback.url, b"{}", {}, 5.0, AbortSignal())).retry_after is None


@pytest.mark.parametrize(("wire", "status", "body", "truncated"), [
    (b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok", 201, b"ok", False),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: x\r\n\r\n", 200, b"abcde", False),
    (b"HTTP/1.0 200 OK\r\n\r\nto close", 200, b"to close", False),
    (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", 204, b"", False),
    (b"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n", 302, b"",
     False),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n" + b"x" * 20, 200, b"x" * 10, True),
    (b"HTTP/1.1 200 OK\r\n\r\n" + b"y" * 20, 200, b"y" * 10, True),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n14\r\n" + b"z" * 20
     + b"\r\n0\r\n\r\n", 200, b"z" * 10, True),
], ids=["length", "chunked", "until-close", "interim-100", "redirect-not-followed",
        "truncated-length", "truncated-close", "truncated-chunked"])
async def test_reply_bodies(loopback: Loopback, wire: bytes, status: int, body: bytes,
                            truncated: bool) -> None:
    async def reply(request: bytes, reader: Any, writer: asyncio.StreamWriter) -> None:
        writer.write(wire)

    loopback.reply = reply
    response = await request_get(loopback.url, max_body_bytes=10)
    assert (response.status, response.body, response.truncated) == (status, body, truncated)


async def request_get(url: str, **options: Any) -> Any:
    return await request("GET", url, timeout_s=5.0, **options)


@pytest.mark.parametrize("wire", [
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",  # closed mid-body
    b"NOT HTTP\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"",  # closed without a reply
], ids=["mid-body", "status-line", "header", "length", "chunk-size", "nothing"])
async def test_unreadable_replies(loopback: Loopback, wire: bytes) -> None:
    async def reply(request: bytes, reader: Any, writer: asyncio.StreamWriter) -> None:
        writer.write(wire)

    loopback.reply = reply
    with pytest.raises(HttpProtocolError):
        await request_get(loopback.url)


async def test_connection_refused_is_unreachable() -> None:
    with pytest.raises(HttpUnreachable, match="could not connect"):
        await http_post(f"http://127.0.0.1:{free_port()}/", b"", {}, 5.0, AbortSignal())


async def test_an_unknown_host_is_unreachable() -> None:
    with pytest.raises(HttpUnreachable):
        await request_get("http://no-such-host.invalid/")


async def test_no_reply_in_time_is_a_timeout(loopback: Loopback) -> None:
    async def hang(request: bytes, reader: Any, writer: Any) -> None:
        await asyncio.sleep(10)

    loopback.reply = hang
    started = time.monotonic()
    with pytest.raises(HttpTimeout, match="no reply"):
        await http_post(loopback.url, b"x", {}, 0.3, AbortSignal())
    assert time.monotonic() - started < 2


async def test_an_abort_stops_the_request(loopback: Loopback) -> None:
    async def hang(request: bytes, reader: Any, writer: Any) -> None:
        await asyncio.sleep(10)

    loopback.reply = hang
    signal = AbortSignal()
    asyncio.get_running_loop().call_later(0.2, signal._abort, "cancelled")
    started = time.monotonic()
    with pytest.raises(HttpTimeout, match="aborted"):
        await http_post(loopback.url, b"x", {}, 30.0, signal)
    assert time.monotonic() - started < 2


async def test_bad_input_is_refused_before_connecting() -> None:
    for url in ("ftp://h/", "http:///path", "http://h:99999/", "http://h/a b"):
        with pytest.raises(ValueError):
            await request_get(url)
    with pytest.raises(ValueError):
        await request("GET", "http://127.0.0.1:1/", headers={"x": "a\r\nInjected: 1"})


async def test_tls_handshake_failure_is_unreachable() -> None:
    async def plain(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")  # not TLS
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(plain, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        started = time.monotonic()
        with pytest.raises(HttpUnreachable):
            await request_get(f"https://127.0.0.1:{port}/")
        assert time.monotonic() - started < 2
    finally:
        server.close()


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl command to make a test certificate")
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True,
                   timeout=60)
    return cert, key


async def test_https(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)
    server = await Loopback().start(server_context)
    try:
        url = f"https://localhost:{server.port}/secure"
        trusting = ssl.create_default_context(cafile=str(cert))
        response = await request("POST", url, body=b"{}", timeout_s=5.0, ssl_context=trusting)
        assert (response.status, response.body) == (200, b"hello")
        assert server.requests[0].startswith(b"POST /secure HTTP/1.1\r\n")
        # Not trusted by the system store: verification fails, nothing is sent.
        with pytest.raises(HttpUnreachable):
            await request("POST", url, body=b"{}", timeout_s=5.0)
        assert len(server.requests) == 1
    finally:
        assert server.server is not None
        server.server.close()


def webhook_job(url: str) -> JobRecord:
    return JobRecord("hook-1", "webhooks", "webhooks", 0, {"url": url, "body": {"n": 1}},
                     None, "running", None, None, 1, 0, 0, 0, None)


@pytest.mark.parametrize(("status", "outcome"), [
    (200, Completed()), (404, Failed("http_404")), (503, OutcomeUnknown())])
async def test_the_webhook_executor_over_this_transport(
        loopback: Loopback, status: int, outcome: Any) -> None:
    async def reply(request: bytes, reader: Any, writer: asyncio.StreamWriter) -> None:
        writer.write(f"HTTP/1.1 {status} X\r\nContent-Length: 0\r\n\r\n".encode())

    loopback.reply = reply
    deliver = webhook_executor(http_post, timeout_s=5.0)
    assert await deliver(webhook_job(f"{loopback.url}/hook"), AbortSignal()) == outcome
    sent = loopback.requests[0]
    assert b"idempotency-key: hook-1\r\n" in sent and sent.endswith(b'{"n":1}')


async def test_the_webhook_executor_fails_unreachable_hosts() -> None:
    deliver = webhook_executor(http_post, timeout_s=5.0)
    result = await deliver(webhook_job(f"http://127.0.0.1:{free_port()}/"), AbortSignal())
    assert result == Failed("unreachable")
