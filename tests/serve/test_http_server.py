"""The host's HTTP/1.1 server: the sans-I/O head parser, and the server in process."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
import pytest_asyncio

from tickwork.api import ApiRequest, ApiResponse, JobApi
from tickwork.hosts.cpython.http_server import (
    HEAD_LIMIT,
    MAX_HEADERS,
    ApiServer,
    HttpError,
    encode_response,
    parse_head,
)

LIMIT = 1000


def head(*lines: str) -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def refused(data: bytes) -> tuple[int, str]:
    with pytest.raises(HttpError) as caught:
        parse_head(data, max_body_bytes=LIMIT)
    return caught.value.status, caught.value.code


# ---------------------------------------------------------------- parse_head


def test_a_plain_request() -> None:
    parsed = parse_head(head("POST /v1/owners/a%2Fb/jobs?x=1 HTTP/1.1", "Host: h",
                             "Content-Length: 12", "Authorization: Bearer t",
                             "X-Dup: 1", "x-dup: 2"), max_body_bytes=LIMIT)
    assert parsed.method == "POST"
    assert parsed.path == "/v1/owners/a%2Fb/jobs"  # still percent-encoded, no query
    assert parsed.content_length == 12
    assert parsed.headers["authorization"] == "Bearer t"
    assert parsed.headers["x-dup"] == "1, 2"
    assert parsed.keep_alive and not parsed.expect_continue


@pytest.mark.parametrize(("lines", "keep_alive"), [
    (("GET / HTTP/1.1", "Host: h"), True),
    (("GET / HTTP/1.1", "Host: h", "Connection: close"), False),
    (("GET / HTTP/1.1", "Host: h", "Connection: Keep-Alive, Close"), False),
    (("GET / HTTP/1.0",), False),
    (("GET / HTTP/1.0", "Connection: keep-alive"), True),
])
def test_keep_alive(lines: tuple[str, ...], keep_alive: bool) -> None:
    assert parse_head(head(*lines), max_body_bytes=LIMIT).keep_alive is keep_alive


def test_expect_continue_and_other_expectations() -> None:
    parsed = parse_head(head("POST / HTTP/1.1", "Host: h", "Content-Length: 3",
                             "Expect: 100-Continue"), max_body_bytes=LIMIT)
    assert parsed.expect_continue
    assert refused(head("POST / HTTP/1.1", "Host: h", "Expect: magic")) == (
        417, "expectation_failed")


def test_content_length_rules() -> None:
    assert parse_head(head("POST / HTTP/1.1", "Host: h", f"Content-Length: {LIMIT}"),
                      max_body_bytes=LIMIT).content_length == LIMIT
    assert parse_head(head("POST / HTTP/1.1", "Host: h", "Content-Length: 5",
                           "Content-Length: 5"), max_body_bytes=LIMIT).content_length == 5
    assert parse_head(head("POST / HTTP/1.1", "Host: h", "Content-Length: 5, 5"),
                      max_body_bytes=LIMIT).content_length == 5
    assert refused(head("POST / HTTP/1.1", "Host: h", f"Content-Length: {LIMIT + 1}")) == (
        413, "body_too_large")
    assert refused(head("POST / HTTP/1.1", "Host: h", "Content-Length: 99999999999999999999")
                   )[0] == 400
    for bad in ("-1", "+1", "1.0", "0x10", "", "1 2"):
        assert refused(head("POST / HTTP/1.1", "Host: h", f"Content-Length: {bad}"))[0] == 400
    assert refused(head("POST / HTTP/1.1", "Host: h", "Content-Length: 1",
                        "Content-Length: 2"))[0] == 400


def test_transfer_encoding_is_refused() -> None:
    assert refused(head("POST / HTTP/1.1", "Host: h", "Transfer-Encoding: chunked")) == (
        411, "length_required")
    assert refused(head("POST / HTTP/1.1", "Host: h", "Transfer-Encoding: gzip, chunked")
                   )[0] == 411
    assert refused(head("POST / HTTP/1.1", "Host: h", "Transfer-Encoding: chunked",
                        "Content-Length: 3")) == (400, "bad_request")


@pytest.mark.parametrize("data", [
    b"GET / HTTP/1.1\r\nHost: h\r\n\r",  # no CRLF CRLF
    head("GET /  HTTP/1.1", "Host: h"),  # two spaces
    head("GET / HTTP/1.1 extra", "Host: h"),
    head("G(T / HTTP/1.1", "Host: h"),
    head("GET / HTTX/1.1", "Host: h"),
    head("GET / HTTP/1", "Host: h"),
    head("GET http://h/ HTTP/1.1", "Host: h"),  # absolute form
    head("GET * HTTP/1.1", "Host: h"),
    head("GET /caf\xe9 HTTP/1.1", "Host: h"),  # raw non-ASCII in the target
    head("GET / HTTP/1.1"),  # no Host on 1.1
    head("GET / HTTP/1.1", "Host: h", "Bad Name: x"),
    head("GET / HTTP/1.1", "Host: h", "Name : x"),
    head("GET / HTTP/1.1", "Host: h", "NoColon"),
    head("GET / HTTP/1.1", "Host: h", " folded"),
    head("GET / HTTP/1.1", "Host: h", "X: a\x00b"),
    b"GET / HTTP/1.1\r\nHost: h\nX: y\r\n\r\n",  # bare LF
    b"GET / HTTP/1.1\r\nHost: h\rX: y\r\n\r\n",  # bare CR
])
def test_malformed_heads_get_400(data: bytes) -> None:
    assert refused(data) == (400, "bad_request")


def test_versions_and_limits() -> None:
    assert refused(head("GET / HTTP/2.0", "Host: h")) == (505, "http_version_not_supported")
    assert refused(head("GET / HTTP/0.9")) == (505, "http_version_not_supported")
    many = ["GET / HTTP/1.1", "Host: h", *(f"X-{n}: v" for n in range(MAX_HEADERS))]
    assert refused(head(*many)) == (431, "headers_too_large")


def test_error_bodies_are_api_errors() -> None:
    response = HttpError(411, "length_required", "send a Content-Length").response()
    assert response.status == 411
    assert response.body == {"error": {"code": "length_required",
                                       "message": "send a Content-Length"}}


def test_encode_response() -> None:
    wire = encode_response(ApiResponse(201, {"a": "é"}), keep_alive=True)
    head_part, _, body = wire.partition(b"\r\n\r\n")
    assert head_part.startswith(b"HTTP/1.1 201 Created\r\n")
    assert b"content-length: 10" in head_part  # é is two bytes
    assert b"connection: keep-alive" in head_part
    assert json.loads(body) == {"a": "é"}
    assert encode_response(ApiResponse(418, {}), keep_alive=False, head_only=True).endswith(
        b"connection: close\r\n\r\n")


# ------------------------------------------------------------- in process


class RecordingApi(JobApi):
    """A JobApi that records what reaches it and answers with an echo.

    Paths under /v1 get the real head checks (token "t", routes, methods);
    the other test paths (/x, /boom, /slow, /early-boom) pass them."""

    def __init__(self) -> None:
        super().__init__(token="t", max_body_bytes=100)
        self.requests: list[ApiRequest] = []
        self.heads: list[tuple[str, str]] = []

    def refuse_early(self, method: str, path: str, headers: Mapping[str, str],
                     content_length: int | None) -> ApiResponse | None:
        self.heads.append((method, path))
        if path == "/early-boom":
            raise RuntimeError("a bug in the head checks")
        if not path.startswith("/v1/"):
            return None
        return super().refuse_early(method, path, headers, content_length)

    async def handle(self, request: ApiRequest) -> ApiResponse:
        self.requests.append(request)
        if request.path == "/boom":
            raise RuntimeError("a bug")
        if request.path == "/slow":
            await asyncio.sleep(0.3)
        return ApiResponse(200, {"path": request.path, "body": request.body.decode()})


@pytest_asyncio.fixture
async def running() -> AsyncIterator[tuple[ApiServer, RecordingApi, int, list[str]]]:
    api = RecordingApi()
    errors: list[str] = []
    server = ApiServer(api, head_limit=2048, idle_timeout_s=0.5, body_timeout_s=0.5,
                       log_error=errors.append)
    _, port = await server.start("127.0.0.1", 0)
    try:
        yield server, api, port, errors
    finally:
        await server.close(1.0)


async def exchange(port: int, data: bytes, *, half_close: bool = False) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    if half_close:
        writer.write_eof()
    reply = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    return reply


def status_of(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1])


async def test_bodies_reach_the_api_and_bad_requests_do_not(running: Any) -> None:
    _, api, port, _ = running
    reply = await exchange(port, b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
                                 b"Connection: close\r\n\r\nhello")
    assert status_of(reply) == 200 and b'"body":"hello"' in reply
    reply = await exchange(port, b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 101\r\n\r\n")
    assert status_of(reply) == 413
    reply = await exchange(port, b"POST /x HTTP/1.1\r\nHost: h\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
    assert status_of(reply) == 411
    assert [request.body for request in api.requests] == [b"hello"]


async def test_a_head_over_the_limit_gets_431(running: Any) -> None:
    _, api, port, _ = running
    reply = await exchange(port, b"GET /x HTTP/1.1\r\nHost: h\r\nX: " + b"a" * 4096
                           + b"\r\n\r\n")
    assert status_of(reply) == 431 and api.requests == []
    assert HEAD_LIMIT >= 10_000 + 100  # the API's longest path fits the default


async def test_an_incomplete_body_is_never_handled(running: Any) -> None:
    _, api, port, _ = running
    reply = await exchange(port, b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\n"
                                 b"abc", half_close=True)
    assert reply == b"" and api.requests == []
    # A body that stops arriving times out (body_timeout_s) and is dropped too.
    reply = await exchange(port, b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 10\r\n\r\nab")
    assert reply == b"" and api.requests == []


async def test_an_api_failure_is_a_500_and_logged(running: Any) -> None:
    _, _, port, errors = running
    reply = await exchange(port, b"GET /boom HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
    assert status_of(reply) == 500 and b'"internal_error"' in reply
    assert b"a bug" not in reply
    assert len(errors) == 1 and "RuntimeError: a bug" in errors[0]


async def test_head_requests_get_no_body(running: Any) -> None:
    _, _, port, _ = running
    reply = await exchange(port, b"HEAD /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
    assert reply.endswith(b"\r\n\r\n") and b"content-length: " in reply


async def test_idle_keep_alive_connections_are_closed(running: Any) -> None:
    _, _, port, _ = running
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /x HTTP/1.1\r\nHost: h\r\n\r\n")
    first = await reader.readuntil(b'"body":""}')
    assert b"connection: keep-alive" in first
    assert await asyncio.wait_for(reader.read(), 3) == b""  # closed after idle_timeout_s
    writer.close()


async def test_close_lets_a_request_in_flight_finish(running: Any) -> None:
    server, _, port, _ = running
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /slow HTTP/1.1\r\nHost: h\r\n\r\n")
    await asyncio.sleep(0.1)
    await server.close(2.0)
    reply = await asyncio.wait_for(reader.read(), 3)
    assert status_of(reply) == 200 and b"connection: close" in reply
    assert await asyncio.wait_for(idle_reader.read(), 3) == b""
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
    writer.close()
    idle_writer.close()


async def test_a_refusal_from_the_head_never_reads_the_body(running: Any) -> None:
    _, api, port, _ = running
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    # A wrong token and a declared body that never comes: answered at once
    # (not after body_timeout_s), and the connection is closed.
    writer.write(b"POST /v1/owners/o/jobs HTTP/1.1\r\nHost: h\r\n"
                 b"Authorization: Bearer wrong\r\nContent-Length: 90\r\n\r\n")
    reply = await asyncio.wait_for(reader.read(), 0.4)
    assert status_of(reply) == 401 and b'"unauthorized"' in reply
    assert b"connection: close" in reply
    writer.close()
    for request, status in (
        (b"POST /v1/owners/o/nowhere HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer t\r\n"
         b"Content-Length: 50\r\n\r\n", 404),
        (b"PUT /v1/owners/o/jobs HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer t\r\n"
         b"Content-Length: 50\r\n\r\n", 405),
        (b"POST /v1/owners/o/jobs HTTP/1.1\r\nHost: h\r\nContent-Length: 50\r\n"
         b"Expect: 100-continue\r\n\r\n", 401),  # no 100 Continue either
    ):
        reply = await asyncio.wait_for(exchange(port, request), 0.4)
        assert status_of(reply) == status, reply
        assert not reply.startswith(b"HTTP/1.1 100")
    assert api.requests == []  # handle() never ran


async def test_a_refusal_without_a_body_keeps_the_connection(running: Any) -> None:
    _, api, port, _ = running
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /v1/owners/o/queues HTTP/1.1\r\nHost: h\r\n\r\n"
                 b"GET /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
    replies = await asyncio.wait_for(reader.read(), 3)
    writer.close()
    assert replies.startswith(b"HTTP/1.1 401 ")
    assert b"connection: keep-alive" in replies
    assert b"HTTP/1.1 200 OK" in replies
    assert [request.path for request in api.requests] == ["/x"]


async def test_a_failing_head_check_is_a_500_and_logged(running: Any) -> None:
    _, api, port, errors = running
    reply = await exchange(port, b"POST /early-boom HTTP/1.1\r\nHost: h\r\n"
                                 b"Content-Length: 5\r\n\r\nhello")
    assert status_of(reply) == 500 and b'"internal_error"' in reply
    assert api.requests == []
    assert len(errors) == 1 and "a bug in the head checks" in errors[0]


async def test_the_api_learns_the_clients_address(running: Any) -> None:
    """The dashboard's login throttle counts wrong tokens per address."""
    _, api, port, _ = running
    reply = await exchange(port, b"GET /x HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n")
    assert status_of(reply) == 200
    assert api.requests[-1].client == "127.0.0.1"
