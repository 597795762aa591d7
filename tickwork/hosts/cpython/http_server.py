"""A small HTTP/1.1 server on asyncio streams that hands requests to ``JobApi``.

Only what the /v1 API needs, strictly parsed:

* bodies with ``Content-Length`` only. ``Transfer-Encoding`` (chunked) is
  refused with 411 and both headers together with 400 (the classic request
  smuggling shape); either way the connection is closed, because the end of
  the refused body cannot be known.
* a declared body above ``JobApi.max_body_bytes`` is refused with 413 before
  a byte of it is read. Once the head is parsed, ``JobApi.refuse_early``
  answers what the head alone decides (no or a wrong token: 401, an unknown
  route: 404, a wrong method: 405) before the body is read, too; a refused
  request that declared a body closes the connection. ``Expect:
  100-continue`` is answered only for bodies that will be read.
* a malformed request line or header, bare CR/LF, a missing ``Host`` on
  HTTP/1.1, or an unknown ``Expect`` is refused (400, 417), as is a head
  larger than ``head_limit`` (431) and an HTTP version other than 1.0/1.1
  (505). Every refusal is a JSON error body in the API's own shape
  ``{"error": {"code", "message"}}``.
* persistent connections (HTTP/1.1 by default, HTTP/1.0 with
  ``Connection: keep-alive``), one request at a time (no pipelining beyond
  what the stream buffers), closed after ``idle_timeout_s`` without a request.

``parse_head`` is sans-I/O and unit tested on its own; ``ApiServer`` is the
socket side.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import traceback
from dataclasses import dataclass
from http import HTTPStatus

from tickwork.api import ApiError, ApiRequest, ApiResponse, JobApi
from tickwork.hosts.cpython.common import Log, finish_tasks, stderr

#: Largest request head (request line and headers) accepted.
HEAD_LIMIT = 64 * 1024
#: Most header fields accepted in one request.
MAX_HEADERS = 100

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VERSION = re.compile(r"HTTP/(\d)\.(\d)")
_TARGET = re.compile(r"/[\x21-\x7e]*")
_DIGITS = re.compile(r"[0-9]+")
_BAD_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


class HttpError(ApiError):
    """A request refused by the transport, before the API sees it.

    The connection is always closed after such a refusal: past a malformed
    head the server cannot know where the next request starts.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(status, code, message)

    def response(self) -> ApiResponse:
        return ApiResponse(self.status, self.to_wire())


@dataclass(frozen=True, slots=True)
class RequestHead:
    """A parsed request head. ``headers`` names are lower case; repeated
    fields are joined with ", " (Content-Length must then agree)."""

    method: str
    target: str
    version: tuple[int, int]
    headers: dict[str, str]
    content_length: int
    keep_alive: bool
    expect_continue: bool

    @property
    def path(self) -> str:
        """The raw path, without the query."""
        return self.target.split("?", 1)[0]

    @property
    def query(self) -> str:
        """The raw query string, without the ``?`` (empty when none)."""
        return self.target.partition("?")[2]


def parse_head(data: bytes, *, max_body_bytes: int) -> RequestHead:
    """Parse a request head (everything up to and including the blank line).

    Raises ``HttpError`` for anything this server refuses.
    """
    if not data.endswith(b"\r\n\r\n"):
        raise HttpError(400, "bad_request", "request head does not end with CRLF CRLF")
    text = data[:-4].decode("latin-1")
    lines = text.split("\r\n")
    if any("\r" in line or "\n" in line for line in lines):
        raise HttpError(400, "bad_request", "bare CR or LF in the request head")
    request_line, header_lines = lines[0], lines[1:]
    parts = request_line.split(" ")
    if len(parts) != 3:
        raise HttpError(400, "bad_request", "malformed request line")
    method, target, version_text = parts
    if not _TOKEN.fullmatch(method):
        raise HttpError(400, "bad_request", "malformed method")
    version_match = _VERSION.fullmatch(version_text)
    if version_match is None:
        raise HttpError(400, "bad_request", "malformed HTTP version")
    version = (int(version_match[1]), int(version_match[2]))
    if version not in ((1, 0), (1, 1)):
        raise HttpError(505, "http_version_not_supported",
                        f"HTTP/{version[0]}.{version[1]} is not supported; use HTTP/1.1")
    if not _TARGET.fullmatch(target):
        raise HttpError(400, "bad_request",
                        "request target must be an origin-form path of visible ASCII "
                        "(percent-encode anything else)")
    if len(header_lines) > MAX_HEADERS:
        raise HttpError(431, "headers_too_large", f"more than {MAX_HEADERS} header fields")

    headers: dict[str, str] = {}
    lengths: set[str] = set()
    for line in header_lines:
        if line[:1] in (" ", "\t"):
            raise HttpError(400, "bad_request", "obsolete header line folding is not accepted")
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name):
            raise HttpError(400, "bad_request", f"malformed header field {name[:40]!r}")
        value = value.strip(" \t")
        if _BAD_VALUE.search(value):
            raise HttpError(400, "bad_request", f"control character in header {name!r}")
        name = name.lower()
        if name == "content-length":
            lengths.update(item.strip(" \t") for item in value.split(","))
        headers[name] = f"{headers[name]}, {value}" if name in headers else value

    if version == (1, 1) and "host" not in headers:
        raise HttpError(400, "bad_request", "HTTP/1.1 request without a Host header")
    if "transfer-encoding" in headers:
        if lengths:
            raise HttpError(400, "bad_request",
                            "both Transfer-Encoding and Content-Length; send one Content-Length")
        raise HttpError(411, "length_required",
                        "Transfer-Encoding (chunked) is not accepted; send a Content-Length")
    content_length = 0
    if lengths:
        if len(lengths) != 1:
            raise HttpError(400, "bad_request", "conflicting Content-Length values")
        (length_text,) = lengths
        if not _DIGITS.fullmatch(length_text) or len(length_text) > 18:
            raise HttpError(400, "bad_request", "malformed Content-Length")
        content_length = int(length_text)
    if content_length > max_body_bytes:
        raise HttpError(413, "body_too_large",
                        f"request body is {content_length} bytes; at most {max_body_bytes} "
                        "are accepted")

    expect = headers.get("expect", "").lower()
    if expect and expect != "100-continue":
        raise HttpError(417, "expectation_failed", f"unsupported Expect: {expect!r}")
    tokens = {item.strip().lower() for item in headers.get("connection", "").split(",")}
    keep_alive = "close" not in tokens and (version == (1, 1) or "keep-alive" in tokens)
    return RequestHead(method, target, version, headers, content_length, keep_alive,
                       expect == "100-continue")


def encode_response(response: ApiResponse, *, keep_alive: bool, head_only: bool = False) -> bytes:
    """The bytes of ``response`` on the wire."""
    body = response.encoded()
    try:
        phrase = HTTPStatus(response.status).phrase
    except ValueError:
        phrase = "Unknown"
    lines = [f"HTTP/1.1 {response.status} {phrase}"]
    headers = {**response.all_headers(), "content-length": str(len(body)),
               "connection": "keep-alive" if keep_alive else "close"}
    lines += [f"{name}: {value}" for name, value in headers.items()]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + body


class ApiServer:
    """Serves ``api`` over HTTP/1.1 on one listening socket."""

    def __init__(
        self,
        api: JobApi,
        *,
        head_limit: int = HEAD_LIMIT,
        idle_timeout_s: float = 30.0,
        body_timeout_s: float = 30.0,
        log_error: Log = stderr,
    ) -> None:
        self.api = api
        self.head_limit = head_limit
        self.idle_timeout_s = idle_timeout_s
        self.body_timeout_s = body_timeout_s
        self._log_error = log_error
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], bool] = {}  # task -> handling a request
        self._closing = False

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on ``host:port`` (port 0 picks one); the bound address."""
        self._server = await asyncio.start_server(self._connection, host, port,
                                                  limit=self.head_limit)
        bound = self._server.sockets[0].getsockname()
        return str(bound[0]), int(bound[1])

    async def close(self, grace_s: float = 5.0) -> None:
        """Stop accepting; close idle connections; give requests in flight
        ``grace_s`` to finish (their connections close after the response)."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        for task, busy in list(self._connections.items()):
            if not busy:
                task.cancel()
        await finish_tasks(list(self._connections), grace_s, cancel_wait_s=1.0)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections[task] = False
        try:
            await self._serve(reader, writer, task)
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            self._log_error("tickwork serve: connection failed:\n" + traceback.format_exc())
        finally:
            self._connections.pop(task, None)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     task: asyncio.Task[None]) -> None:
        peer = writer.get_extra_info("peername")
        client = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        while not self._closing:
            try:
                data = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"),
                                              self.idle_timeout_s)
            except asyncio.LimitOverrunError:
                await self._refuse(reader, writer, HttpError(
                    431, "headers_too_large",
                    f"request head is larger than {self.head_limit} bytes"))
                return
            except (asyncio.IncompleteReadError, TimeoutError):
                return  # the client went away, or stayed idle too long
            self._connections[task] = True
            try:
                head = parse_head(data, max_body_bytes=self.api.max_body_bytes)
            except HttpError as error:
                await self._refuse(reader, writer, error)
                return
            early = self._refuse_early(head)
            if early is not None:
                if head.content_length:
                    # The body is never read, so the connection cannot carry
                    # another request: answer and close.
                    await self._close_with(reader, writer, early,
                                           head_only=head.method == "HEAD")
                    return
                if not await self._answer(writer, head, early):
                    return
                self._connections[task] = False
                continue
            body = b""
            if head.content_length:
                if head.expect_continue:
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                try:
                    body = await asyncio.wait_for(reader.readexactly(head.content_length),
                                                  self.body_timeout_s)
                except (asyncio.IncompleteReadError, TimeoutError):
                    return  # an incomplete body is never handed to the API
            response = await self._handle(head, body, client)
            if not await self._answer(writer, head, response):
                return
            self._connections[task] = False

    async def _answer(self, writer: asyncio.StreamWriter, head: RequestHead,
                      response: ApiResponse) -> bool:
        """Write ``response``; True when the connection stays open for another request."""
        keep_alive = head.keep_alive and not self._closing
        writer.write(encode_response(response, keep_alive=keep_alive,
                                     head_only=head.method == "HEAD"))
        await writer.drain()
        return keep_alive

    def _refuse_early(self, head: RequestHead) -> ApiResponse | None:
        """The API's answer from the head alone (a wrong token, an unknown
        route, a wrong method...), or None to read the body and go on."""
        try:
            return self.api.refuse_early(head.method, head.path, head.headers,
                                         head.content_length)
        except Exception:
            return self._failed(head)

    async def _handle(self, head: RequestHead, body: bytes, client: str = "") -> ApiResponse:
        request = ApiRequest(head.method, head.path, head.headers, body, head.query,
                             client=client)
        try:
            return await self.api.handle(request)
        except Exception:
            return self._failed(head)

    def _failed(self, head: RequestHead) -> ApiResponse:
        """Log the failure being handled; the 500 the client gets instead."""
        self._log_error(f"tickwork serve: {head.method} {head.path} failed:\n"
                        + traceback.format_exc())
        return ApiResponse(500, ApiError(
            500, "internal_error", "the server failed to handle the request; "
            "see its log").to_wire())

    async def _refuse(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      error: HttpError) -> None:
        await self._close_with(reader, writer, error.response())

    async def _close_with(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          response: ApiResponse, *, head_only: bool = False) -> None:
        """Answer a request whose body is not read and close, letting the
        client read the answer.

        The client may still be sending a body; closing with unread data
        would reset the connection and could destroy the response before the
        client reads it. So: answer, shut down our side, and discard what
        arrives for a short while before closing.
        """
        writer.write(encode_response(response, keep_alive=False, head_only=head_only))
        with contextlib.suppress(Exception):
            await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
            async with asyncio.timeout(1.0):
                discarded = 0
                while discarded < 4 * self.api.max_body_bytes:
                    chunk = await reader.read(65536)
                    if not chunk:
                        break
                    discarded += len(chunk)
