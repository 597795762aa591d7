"""The /v1 HTTP API, written once and served by the Worker and the local host.

Sans-I/O: a host turns its request into an ``ApiRequest``, awaits
``JobApi.handle`` and writes the ``ApiResponse`` back (``refuse_early``
answers from the head alone, before the body is read). The routes never see
a socket or a JS object, so the Worker (``tickwork.cloudflare.app``) and
``tickwork serve`` route, validate and refuse alike; only what a host does
with an unexpected failure (a 500) is its own.

Scopes: ``/v1/owners/{owner}/...`` addresses one owner's jobs (a
``JobOwner`` Durable Object, or one sqlite3 file locally);
``/v1/shared/...`` the shared queues (D1, or PostgreSQL locally). Path
segments are percent-decoded, so ids may hold any text. ``GET /v1/owners``
(``operations.LIST_OWNERS``) reads across owners: a page of the host's
directory of owners (``tickwork.directory``), not any one scope.

Every /v1 route needs ``Authorization: Bearer <token>``: mutations by the
contract, reads because job payloads are the caller's data. Only
``GET /v1/health`` is open. The dashboard's paths (``tickwork.api.dashboard``)
check the same token themselves, or the session cookie derived from it.
A refused request changes nothing: the token (first), the route and the
whole body, every job validated, are checked before any service is called.
"""

from __future__ import annotations

import hmac
import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import unquote

from tickwork._version import VERSION
from tickwork.api import dashboard, wire
from tickwork.api.operations import LIST_OWNERS, OPERATIONS, Operation
from tickwork.api.service import JobService, call
from tickwork.api.wire import ApiError
from tickwork.directory import OwnerPage, OwnerQuery
from tickwork.model.jobs import (
    check_id,
)

#: Request bodies above this size are refused with 413 before parsing.
MAX_BODY_BYTES = 1_000_000

#: Longest request path accepted: a 256-character owner and a 512-character
#: lane, percent-encoded (up to 12 characters per UTF-8 character), fit.
MAX_PATH_LENGTH = 10_000

API_VERSION = "v1"

OwnerServices = Callable[[str], JobService | Awaitable[JobService]]


class DirectoryOfOwners(Protocol):
    """A host's directory of owners (``GET /v1/owners``): the D1 table on
    Cloudflare, the data directory under ``tickwork serve``."""

    async def list_owners(self, query: OwnerQuery) -> OwnerPage:
        """The page ``query`` asks for."""
        ...


@dataclass(frozen=True, slots=True)
class ApiRequest:
    """An HTTP request as the API sees it. ``headers`` keys are lower case;
    ``path`` is the raw (still percent-encoded) path without the query, and
    ``query`` the raw query string (without the ``?``)."""

    method: str
    path: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    query: str = ""
    #: "https" or "http": how the request reached the host (the dashboard's
    #: session cookie is ``Secure`` over https).
    scheme: str = "http"
    #: The client's address as the host knows it ("" when it does not):
    #: ``tickwork serve`` the peer's IP, the Worker ``CF-Connecting-IP``. The
    #: dashboard's login throttle counts wrong tokens per address.
    client: str = ""


@dataclass(frozen=True, slots=True)
class ApiResponse:
    """An answer: ``body`` is JSON data, or bytes sent as they are (with their
    own ``content-type`` in ``headers``, which override the defaults)."""

    status: int
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)

    def encoded(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body  # encoded already: its content-type is in ``headers``
        return json.dumps(self.body, separators=(",", ":"), ensure_ascii=False).encode()

    def all_headers(self) -> dict[str, str]:
        return {"content-type": "application/json; charset=utf-8",
                "cache-control": "no-store", **self.headers}


def refusal(error: BaseException) -> ApiResponse | None:
    """The response refusing a request that raised ``error`` (an ``ApiError`` or
    the engine's bad-input errors), or None when ``error`` is no refusal."""
    refused = wire.error_for(error)
    if refused is None:
        return None
    return ApiResponse(refused.status, refused.to_wire(), refused.headers)


class JobApi:
    """Routes /v1 requests to a scope's ``JobService``.

    ``owners(owner_key)`` returns (or resolves to) the service of one owner;
    ``shared`` is the shared queues' service; ``directory`` the directory of
    owners. Any may be None: its routes then answer 404
    ``scope_not_configured``. ``token`` is the bearer token; with None every
    /v1 route but health answers 503 (fail closed).
    ``metrics()`` (optional) returns (or resolves to) the Prometheus text ``GET /v1/metrics``
    answers, behind the same token; without it that route answers 404.
    """

    def __init__(
        self,
        *,
        token: str | None,
        owners: OwnerServices | None = None,
        shared: JobService | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        metrics: Callable[[], str | Awaitable[str]] | None = None,
        directory: DirectoryOfOwners | None = None,
    ) -> None:
        self._token = token.encode() if token else None
        self._directory = directory
        self._metrics = metrics
        self._owners = owners
        self._shared = shared
        self.max_body_bytes = max_body_bytes
        self._dashboard = dashboard.Dashboard(self._token, self._service)

    async def handle(self, request: ApiRequest) -> ApiResponse:
        try:
            answer = await self._handle(request)
        except Exception as error:
            refused = refusal(error)
            if refused is None:
                raise
            answer = refused
        return _dashboard_headers(request.path, answer)

    def refuse_early(self, method: str, path: str, headers: Mapping[str, str],
                     content_length: int | None) -> ApiResponse | None:
        """The refusal a request gets from its head alone, or None to go on.

        Hosts call this before reading the body: a request with no or a wrong
        token, an unknown route or a declared body over the limit is answered
        without the body ever being read. ``handle`` checks all of it again.
        """
        try:
            self._check_head(ApiRequest(method, path, headers))
            if content_length is not None and content_length > self.max_body_bytes:
                raise _too_large(content_length, self.max_body_bytes)
        except Exception as error:
            answer = refusal(error)
            if answer is None:
                raise
            return _dashboard_headers(path, answer)
        return None

    def _check_head(self, request: ApiRequest) -> Route | dashboard.DashboardRoute | str | None:
        """Path, token, route and method; None for the health route,
        ``METRICS_ROUTE`` for the metrics. A dashboard path checks its own
        session or token (``dashboard``)."""
        raw = _raw_segments(request.path)
        if raw == [API_VERSION, "health"]:
            _allow(request, "GET")
            return None
        if not raw or raw[0] != API_VERSION:
            raise ApiError(404, "no_route", f"no route for {request.path[:200]!r}; the API "
                                            f"lives under /{API_VERSION}")
        page = dashboard.match(raw[1:], request.method)
        if page is not None:
            return page
        # The token first: without it, no route (nor its argument checks)
        # tells the caller anything about the API.
        self._authorise(request)
        if raw == [API_VERSION, METRICS_ROUTE]:
            _allow(request, "GET")
            if self._metrics is None:
                raise ApiError(404, "metrics_not_configured", "this server exposes no metrics")
            return METRICS_ROUTE
        return _match(_decoded(raw[1:]), request.method)

    async def _handle(self, request: ApiRequest) -> ApiResponse:
        route = self._check_head(request)
        if route is None:
            return ApiResponse(200, {"ok": True, "api": API_VERSION, "version": VERSION})
        if isinstance(route, str):
            assert self._metrics is not None  # checked with the head
            text = self._metrics()
            if not isinstance(text, str):
                text = await text
            return ApiResponse(200, text.encode(), {"content-type": PROMETHEUS_CONTENT_TYPE})
        if len(request.body) > self.max_body_bytes:
            raise _too_large(len(request.body), self.max_body_bytes)
        if isinstance(route, dashboard.DashboardRoute):
            status, page, headers = await self._dashboard.handle(route, request)
            return ApiResponse(status, page, headers)
        scope, operation, path_args = route
        # A GET's "body" is its query: the parameters a read takes (a POST
        # takes none in its query).
        body = _json_body(request) if operation.method == "POST" else _query(request.query)
        # The whole request is valid once decode returns; only then is any
        # service (a Durable Object, a file) touched.
        args, context = operation.decode(path_args, body)
        service = await self._service(scope)
        result = await call(service, operation, args)
        reply = operation.reply(args, context, result)
        return ApiResponse(reply.status, reply.body)

    def _authorise(self, request: ApiRequest) -> None:
        if self._token is None:
            raise ApiError(503, "token_not_configured",
                           "the server has no API token configured; set TICKWORK_TOKEN")
        header = request.headers.get("authorization", "")
        scheme, _, presented = header.partition(" ")
        if scheme.lower() != "bearer" or not presented:
            raise ApiError(401, "unauthorized", "missing bearer token (Authorization: Bearer ...)")
        # Constant time in the token's content; only its length may leak.
        if not hmac.compare_digest(presented.strip().encode(), self._token):
            raise ApiError(401, "unauthorized", "wrong bearer token")

    async def _service(self, scope: tuple[str, str | None]) -> Any:
        kind, owner = scope
        if kind == "directory":
            if self._directory is None:
                raise ApiError(404, "scope_not_configured",
                               "this server keeps no directory of owners")
            return self._directory
        if kind == "shared":
            if self._shared is None:
                raise ApiError(404, "scope_not_configured",
                               "this server has no shared queues configured")
            return self._shared
        if self._owners is None:
            raise ApiError(404, "scope_not_configured", "this server hosts no owners")
        assert owner is not None
        service = self._owners(owner)
        if inspect.isawaitable(service):
            service = await service
        return service


def _dashboard_headers(path: str, answer: ApiResponse) -> ApiResponse:
    """``answer`` with the dashboard's security headers (CSP, nosniff, no
    caching) when ``path`` is a dashboard path: its refusals too (an unknown
    page, a wrong method), which the API answers in JSON."""
    segments = [segment for segment in path[:MAX_PATH_LENGTH].split("?", 1)[0].split("/")
                if segment != ""]
    if not dashboard.is_dashboard_path(segments[1:]):
        return answer
    headers = {**dashboard.SECURITY_HEADERS, **answer.headers}
    return ApiResponse(answer.status, answer.body, headers)


# ------------------------------------------------------------------ routing

#: ``GET /v1/metrics``: the Prometheus text of ``JobApi(metrics=...)``.
METRICS_ROUTE = "metrics"
#: The Prometheus text exposition format's content type (tickwork.metrics has it too).
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: (scope, operation, path arguments); the scope is ("shared", None), ("owner", key)
#: or ("directory", None) (``GET /v1/owners``).
Route = tuple[tuple[str, str | None], Operation, list[str]]


def _raw_segments(path: str) -> list[str]:
    """The path's segments, still percent-encoded (empty ones dropped)."""
    if len(path) > MAX_PATH_LENGTH:
        raise ApiError(414, "path_too_long", f"path is {len(path)} characters; "
                                             f"at most {MAX_PATH_LENGTH} are accepted")
    return [segment for segment in path.split("?", 1)[0].split("/") if segment != ""]


def _decoded(segments: list[str]) -> list[str]:
    try:
        return [unquote(segment, errors="strict") for segment in segments]
    except UnicodeDecodeError:
        raise ApiError(400, "bad_path", "path is not valid percent-encoded UTF-8") from None


def _match(rest: list[str], method: str) -> Route:
    """(scope, action, path arguments) for ``method`` on the path after /v1
    (405, naming the methods the path takes, for another method)."""
    for segment in rest:
        if segment in (".", ".."):
            # URL parsers (WHATWG, so the Workers runtime) resolve these before
            # any route sees them; refuse them everywhere, alike on every host.
            raise ApiError(400, "bad_path", f"{segment!r} cannot be a path segment; "
                                            "ids '.' and '..' cannot be addressed")
    if rest == ["owners"]:
        # The directory of owners: one route, across owners.
        if method != LIST_OWNERS.method:
            raise ApiError(405, "method_not_allowed",
                           f"{method[:40]} is not allowed here; use {LIST_OWNERS.method}",
                           headers={"allow": LIST_OWNERS.method})
        return ("directory", None), LIST_OWNERS, []
    if rest[:1] == ["shared"]:
        scope: tuple[str, str | None] = ("shared", None)
        tail = rest[1:]
    elif rest[:1] == ["owners"] and len(rest) >= 2:
        scope = ("owner", check_id("owner", rest[1]))
        tail = rest[2:]
    else:
        raise _no_route(rest)
    allowed: list[str] = []
    for operation in OPERATIONS:
        args = operation.match(tail)
        if args is not None:
            # Method names are case-sensitive (RFC 9110, 9.1): "get" is not GET.
            if operation.method == method:
                return scope, operation, args
            allowed.append(operation.method)
    if allowed:
        methods = sorted(set(allowed))
        raise ApiError(405, "method_not_allowed",
                       f"{method[:40]} is not allowed here; use {' or '.join(methods)}",
                       headers={"allow": ", ".join(methods)})
    raise _no_route(rest)


def _too_large(size: int, limit: int) -> ApiError:
    return ApiError(413, "body_too_large",
                    f"request body is {size} bytes; at most {limit} are accepted")


def _no_route(rest: list[str]) -> ApiError:
    return ApiError(404, "no_route", f"no route for /{API_VERSION}/{'/'.join(rest)}")


def _allow(request: ApiRequest, method: str) -> None:
    # Method names are case-sensitive (RFC 9110, 9.1): "get" is not GET.
    if request.method != method:
        raise ApiError(405, "method_not_allowed",
                       f"{request.method[:40]} is not allowed here; use {method}",
                       headers={"allow": method})


def _query(query: str) -> dict[str, str] | None:
    """The query's parameters (None without a query); a repeated or
    malformed parameter is refused."""
    if not query:
        return None
    return wire.urlencoded_fields(query, "query", max_fields=20)


def _json_body(request: ApiRequest) -> Any:
    content_type = request.headers.get("content-type", "application/json")
    if content_type.split(";")[0].strip().lower() not in ("application/json", ""):
        raise ApiError(415, "unsupported_media_type",
                       f"content-type {content_type!r}; send application/json")
    if not request.body:
        return {}
    try:
        return json.loads(request.body.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise ApiError(400, "malformed_json", "body is not UTF-8") from None
    except (ValueError, RecursionError) as error:
        raise ApiError(400, "malformed_json", f"body is not JSON: {error}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")
