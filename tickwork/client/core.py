"""The client's logic, sans-I/O: requests from the operations table, results back.

``request_for`` turns an operation and its arguments into an ``HttpRequest``
(validated first by the operation's own ``decode``, so bad input raises the
engine's error before anything is sent); ``result_of`` turns the answer into
the operation's result, or raises the error the host refused with, rebuilt
as the engine raised it (``tickwork.api.wire.refusal_from_wire``).
``RetryPolicy`` says whether and when to send again. The two clients
(``tickwork.client.clients``) only add a transport.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Protocol
from urllib.parse import quote, urlencode, urlsplit

from tickwork.api import wire
from tickwork.api.operations import Operation
from tickwork.api.wire import ApiError
from tickwork.model.errors import InvalidArgument, TickworkError
from tickwork.model.jobs import check_id

#: The shared queues' scope; an owner's is ``("owners", key)``.
SHARED: Final = ("shared",)
#: Where the directory of owners is (``GET /v1/owners``).
DIRECTORY: Final = ("owners",)

#: Statuses that say "try again later".
RETRY_STATUSES: Final = frozenset({429, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes | None = None


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    status: int
    headers: Mapping[str, str]  # lower-case names
    body: bytes


class TransportError(TickworkError):
    """No answer came. ``maybe_sent`` is False only when the request certainly
    never left (the name did not resolve, the connection was refused)."""

    def __init__(self, message: str, *, maybe_sent: bool) -> None:
        super().__init__(message)
        self.maybe_sent = maybe_sent


class AsyncTransport(Protocol):
    async def send(self, request: HttpRequest, timeout_s: float) -> HttpAnswer:
        """The answer, or TransportError."""
        ...


class SyncTransport(Protocol):
    def send(self, request: HttpRequest, timeout_s: float) -> HttpAnswer:
        """The answer, or TransportError."""
        ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When to send an idempotent operation again: after a TransportError or
    a 429/502/503/504 answer, up to ``attempts`` sends in all, waiting
    ``base_s * 2**n`` (at most ``cap_s``, with up to 50% jitter) or what the
    answer's ``retry-after`` asks, if that is longer and within ``cap_s``.
    Operations that are not idempotent (purge, fail_lane) are sent once, and
    a request that certainly never left is always safe to send again."""

    attempts: int = 3
    base_s: float = 0.2
    cap_s: float = 5.0
    jitter: float = 0.5
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def __post_init__(self) -> None:
        if type(self.attempts) is not int or self.attempts < 1:
            raise InvalidArgument("attempts", "must be an integer >= 1")
        for name in ("base_s", "cap_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or value < 0:
                raise InvalidArgument(name, "must be a number >= 0")
        if not 0 <= self.jitter <= 1:
            raise InvalidArgument("jitter", "must be between 0 and 1")

    def delay_s(self, attempt: int, answer: HttpAnswer | None) -> float:
        """Seconds to wait before send number ``attempt + 1`` (``attempt`` >= 1)."""
        delay = float(min(self.cap_s, self.base_s * 2.0 ** (attempt - 1)))
        delay *= 1 - self.jitter * self.rng.random()
        asked = _retry_after_s(answer)
        if asked is not None and delay < asked <= self.cap_s:
            delay = asked
        return delay


def may_retry(operation: Operation | None, attempt: int, policy: RetryPolicy,
              answer: HttpAnswer | None, error: TransportError | None) -> bool:
    """Whether send number ``attempt`` may be followed by another one."""
    if attempt >= policy.attempts:
        return False
    if error is not None:
        return not error.maybe_sent or operation is None or operation.idempotent
    assert answer is not None
    if answer.status not in RETRY_STATUSES:
        return False
    # tickwork's own 429/503 come before any work, but the same statuses from
    # a proxy or the platform may come after the host acted: only calls that
    # are safe twice go again.
    return operation is None or operation.idempotent


def _retry_after_s(answer: HttpAnswer | None) -> float | None:
    if answer is None:
        return None
    value = answer.headers.get("retry-after", "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def check_base_url(base_url: str) -> str:
    """``base_url`` without a trailing slash, or InvalidArgument naming what is wrong."""
    if not isinstance(base_url, str):
        raise InvalidArgument("base_url", "must be a string")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise InvalidArgument("base_url", f"must be an http:// or https:// URL, got "
                                          f"{base_url!r}")
    if parts.query or parts.fragment:
        raise InvalidArgument("base_url", "must not have a query or a fragment")
    return base_url.rstrip("/")


def request_for(base_url: str, token: str | None, scope: tuple[str, ...],
                operation: Operation, args: tuple[Any, ...]) -> HttpRequest:
    """The request performing ``operation``; the engine's error for bad arguments."""
    path_args, body = operation.to_http(args)
    # The host's own decoding, here first: the same input is refused the same
    # way, before anything is sent.
    try:
        operation.decode(path_args, body)
    except ApiError as refused:  # as the host would answer it, rebuilt
        raise (wire.refusal_from_wire(refused.status, refused.to_wire()) or refused) from None
    for name, value in zip(operation.path_params, path_args, strict=True):
        _check_addressable(name, value)
    filled = iter(path_args)
    segments = [next(filled) if part.startswith("{") else part for part in operation.path]
    path = "/".join(quote(segment, safe="") for segment in ("v1", *scope, *segments))
    headers = {"accept": "application/json"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    encoded = None
    if operation.method == "GET":
        # A read's parameters travel in its query.
        if body:
            path += "?" + urlencode(body, quote_via=quote)
    elif body is not None:
        headers["content-type"] = "application/json"
        encoded = wire.to_json_text(body).encode()
    return HttpRequest(operation.method, f"{base_url}/{path}", headers, encoded)


def result_of(operation: Operation, answer: HttpAnswer) -> Any:
    """The operation's result from ``answer``, or the error it was refused with."""
    body = _json(answer)
    if isinstance(body, Mapping) and "error" in body:
        refused = wire.refusal_from_wire(answer.status, body)
        if isinstance(refused, ApiError) and refused.code == operation.none_when:
            return None
        if refused is not None:
            raise refused
    if answer.status >= 400 and not _is_answer(operation, answer.status):
        raise ApiError(answer.status, "unexpected_answer",
                       f"HTTP {answer.status} with no tickwork error body")
    try:
        return operation.from_http(body)
    except (KeyError, TypeError, ValueError) as error:
        raise ApiError(answer.status, "unexpected_answer",
                       f"the answer to {operation.name} is not the API's shape: {error!r}"
                       ) from None


def _is_answer(operation: Operation, status: int) -> bool:
    # cancel answers 404/409 with its status in the body, not as a refusal.
    return status in operation.answers


def _json(answer: HttpAnswer) -> Any:
    try:
        return json.loads(answer.body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        if answer.status >= 400:
            raise ApiError(answer.status, "unexpected_answer",
                           f"HTTP {answer.status} with a body that is not JSON") from None
        raise ApiError(answer.status, "unexpected_answer",
                       "the answer is not JSON") from None


def owner_scope(owner: str) -> tuple[str, ...]:
    """The scope of one owner's jobs; InvalidArgument for a key the API refuses."""
    return ("owners", _check_addressable("owner", check_id("owner", owner)))


def _check_addressable(name: str, value: str) -> str:
    # URL parsers resolve these segments away; the API refuses them (bad_path).
    if value in (".", ".."):
        raise InvalidArgument(name, f"{value!r} cannot be addressed in a URL path")
    return value
