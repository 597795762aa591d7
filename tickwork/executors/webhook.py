"""Webhook delivery: POST a job's JSON to a URL and record an honest outcome.

    from tickwork.executors.webhook import webhook_executor

    registry.on_queue("webhooks", webhook_executor(post, timeout_s=30.0))

``post`` is the transport (an ``HttpPost``): ``tickwork.cloudflare.http`` implements it
over the Workers ``fetch``; any other host brings its own. This module is
pure Python and runs unchanged on CPython and Pyodide.

Payload (other keys, such as a registry's ``kind``, are ignored)::

    {"url": "https://example.com/hook",   # http(s), at most 8192 characters
     "body": <any JSON>,                  # required (null is a value); sent as JSON
     "headers": {"x-name": "value"}}      # optional; str -> str

The request is ``POST url`` with the body as compact UTF-8 JSON and the
headers given, plus ``content-type: application/json`` and
``idempotency-key: <job_id>`` (the id percent-encoded when it holds anything
but printable ASCII), so a receiver can drop a repeated delivery. The payload
may not set ``content-type``, ``idempotency-key``, ``content-length``,
``host``, ``transfer-encoding`` or ``connection`` itself, nor credentials
(``authorization``, ``cookie``, ``proxy-authorization``) unless the
executor was built with ``allow_credentials=True``: whoever may enqueue a
job must not be able to make the host send credentials they chose.

Where a request may go is the transport's rule: ``tickwork serve``'s
(``tickwork.hosts.cpython``) refuses every non-public destination unless allowed
(``HttpRefused``: nothing was sent); on Workers, ``fetch`` runs on
Cloudflare's network, which has no route to your machines' loopback or
private networks.

Outcomes (exact; the engine records what the executor returns):

=====================================================  =======================
What happened                                          Outcome
=====================================================  =======================
payload invalid (nothing sent)                         ``Failed("bad_payload")``
signal already aborted before sending (nothing sent)   ``Cancelled()``
reply 2xx                                              ``Completed()``
reply 429 with a ``Retry-After`` in delay-seconds      ``RateLimited(ms)``: back
                                                       to its queue, no attempt
                                                       used, its lane held
reply 3xx (redirects are not followed) or 4xx,         ``Failed("http_<code>")``,
including 408, and 429 without a readable              e.g. ``http_408``, with
``Retry-After``                                        the reply's Retry-After
reply 5xx, or any status outside 200-599               ``OutcomeUnknown()``
``HttpTimeout``: no reply in time                      ``OutcomeUnknown()``
``HttpUnreachable``: connection failed before sending  ``Failed("unreachable")``
``HttpRefused``: destination not allowed (not sent)    ``Failed("destination_refused")``
a credential header without ``allow_credentials``      ``Failed("credentials_refused")``
any other error from ``post``                          ``OutcomeUnknown()``
signal aborted while the request is in flight          ``OutcomeUnknown()``
``post`` overran ``timeout_s`` by ``OVERRUN_GRACE_S``  ``OutcomeUnknown()``
=====================================================  =======================

Why: a 4xx (and a 3xx) is the receiver refusing the request, so it did not
act; 408 and 429 are refusals too ("too slow", "too many"). A 429 that says
when to come back (``Retry-After`` in delay-seconds, capped at a day) is
the receiver's rate limit, not the job's failure: the executor returns
``RateLimited``, so the job goes back to its queue without using an
attempt and its lane (its queue, for a job that names no lane) starts
nothing until then; give each receiver its own lane (say, its domain) and
one busy receiver holds no other. Any other refusal fails with its code,
and a job with a retry policy (``tickwork.Retry``) is then retried after
its backoff, or after the reply's ``Retry-After`` when it sent one. A 5xx may come
after the receiver acted (a crash after the write, a proxy timing out), and
so may a timeout or a dropped connection: only ``OutcomeUnknown`` is honest
there, and a policy retries it only with ``retry_unknown=True`` (safe when
the receiver drops repeated deliveries by their ``idempotency-key``). Only
``HttpUnreachable`` proves that nothing was sent.

The abort signal (cancellation, failing a lane, lost lease): checked before
sending (then nothing is sent and the job is ``Cancelled``), and forwarded to
``post`` (``tickwork.cloudflare.http`` aborts the ``fetch`` with it). Once the request
may have left, an abort stops the wait and returns ``OutcomeUnknown``: the
request may have arrived. The engine then settles the job as its durable
record says (a recorded cancellation settles ``cancelled``, a failed lane
``failed`` with the lane's failure reason, a lost lease is recovered by the next
claim), never as "done". A reply that is already in when the abort comes is
used as it is (a 2xx is ``Completed``: the work happened).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote, urlsplit

from tickwork.executors.registry import Executor
from tickwork.model.jobs import JobRecord
from tickwork.model.outcomes import (
    Cancelled,
    Completed,
    ExecutionResult,
    Failed,
    OutcomeUnknown,
    RateLimited,
)
from tickwork.model.signals import AbortSignal

__all__ = [
    "BAD_PAYLOAD",
    "CREDENTIALS_REFUSED",
    "CREDENTIAL_HEADERS",
    "DESTINATION_REFUSED",
    "OVERRUN_GRACE_S",
    "RESERVED_HEADERS",
    "UNREACHABLE",
    "HttpPost",
    "HttpRefused",
    "HttpReply",
    "HttpTimeout",
    "HttpUnreachable",
    "outcome_for_status",
    "webhook_executor",
]

#: Failure reason of a job whose payload is not a valid webhook.
BAD_PAYLOAD = "bad_payload"
#: Failure reason when the connection failed before the request was sent.
UNREACHABLE = "unreachable"
#: Failure reason when the transport refused the destination (nothing sent).
DESTINATION_REFUSED = "destination_refused"
#: Failure reason of a payload setting credentials the executor may not send.
CREDENTIALS_REFUSED = "credentials_refused"

#: How long past ``timeout_s`` the executor waits for a ``post`` that does not
#: honour its timeout before giving up on it (``OutcomeUnknown``).
OVERRUN_GRACE_S = 1.0

#: Header names the payload may not set (the executor or the transport owns them).
RESERVED_HEADERS = frozenset({
    "content-type", "idempotency-key", "content-length", "host", "transfer-encoding",
    "connection",
})

#: Credentials a payload may set only with ``allow_credentials=True``.
CREDENTIAL_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})

MAX_URL_LENGTH = 8192
MAX_HEADERS = 64
MAX_HEADER_VALUE_LENGTH = 8192

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # RFC 9110 field-name
_PRINTABLE_ASCII = re.compile(r"[\x20-\x7e]*")  # used with fullmatch


@dataclass(frozen=True, slots=True)
class HttpReply:
    """What the receiver answered: the status code, the body as text, and its
    ``retry-after`` header as sent (None without one)."""

    status: int
    body: str
    retry_after: str | None = None


#: The longest Retry-After the executor passes on (a day); a longer one is
#: capped, so a receiver cannot park a job for years.
MAX_RETRY_AFTER_MS = 86_400_000


def retry_after_ms(value: str | None) -> int | None:
    """A ``retry-after`` header in delay-seconds as milliseconds (capped at a
    day), or None when there is none or it is not delay-seconds (an HTTP
    date is not read: the receiver's clock is not the store's)."""
    if value is None:
        return None
    text = value.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 12):
        return None
    return min(int(text) * 1000, MAX_RETRY_AFTER_MS)


class HttpTimeout(Exception):
    """No reply in time: the request may have been sent (and acted on)."""


class HttpUnreachable(Exception):
    """The connection failed before the request was sent: nothing reached the receiver."""


class HttpRefused(Exception):
    """The transport may not send to this destination; nothing was sent."""


class HttpPost(Protocol):
    """The transport: send one POST and return the reply.

    Contract: send ``body`` with exactly ``headers``; do not follow redirects
    (return the 3xx); give up after ``timeout_s`` seconds with
    ``HttpTimeout``; raise ``HttpUnreachable`` only when it is certain that
    nothing was sent; stop (raising ``HttpTimeout``) when ``signal`` aborts.
    """

    async def __call__(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float,
        signal: AbortSignal,
    ) -> HttpReply: ...


def outcome_for_status(status: int, retry_after: str | None = None) -> ExecutionResult:
    """The outcome of a reply with ``status`` (see the module's table): a
    429's ``retry-after`` becomes ``RateLimited``, any other refusal's
    ``Failed.retry_after_ms``."""
    if 200 <= status < 300:
        return Completed()
    if 300 <= status < 500:
        delay = retry_after_ms(retry_after)
        if status == 429 and delay is not None:
            return RateLimited(delay)
        return Failed(f"http_{status}", delay)
    return OutcomeUnknown()


@dataclass(frozen=True, slots=True)
class _Request:
    url: str
    body: bytes
    headers: dict[str, str]


class _BadPayload(Exception):
    pass


class _CredentialsRefused(Exception):
    pass


def webhook_executor(post: HttpPost, *, timeout_s: float = 30.0,
                     allow_credentials: bool = False) -> Executor:
    """An executor delivering webhook jobs through ``post`` (see the module doc).

    ``allow_credentials``: let payloads set ``authorization``, ``cookie`` and
    ``proxy-authorization`` (off by default).
    """
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
            or not 0 < timeout_s <= 3600:
        raise ValueError(f"timeout_s must be a number of seconds in (0, 3600], got {timeout_s!r}")
    if not callable(post):
        raise ValueError("post must be an async callable (an HttpPost)")
    limit = float(timeout_s)

    async def deliver_webhook(job: JobRecord, signal: Any) -> ExecutionResult:
        try:
            request = _request_for(job, allow_credentials)
        except _BadPayload:
            return Failed(BAD_PAYLOAD)
        except _CredentialsRefused:
            return Failed(CREDENTIALS_REFUSED)
        if signal.aborted:
            return Cancelled()
        return await _send(post, request, limit, signal)

    return deliver_webhook


async def _send(post: HttpPost, request: _Request, timeout_s: float,
                signal: AbortSignal) -> ExecutionResult:
    sending = asyncio.ensure_future(
        post(request.url, request.body, dict(request.headers), timeout_s, signal))
    aborted = asyncio.ensure_future(signal.wait())
    try:
        await asyncio.wait({sending, aborted}, timeout=timeout_s + OVERRUN_GRACE_S,
                           return_when=asyncio.FIRST_COMPLETED)
    finally:
        aborted.cancel()
        if not sending.done():
            # Aborted, overran, or this task itself was cancelled: stop waiting.
            sending.cancel()
            sending.add_done_callback(_retrieve)
    if not sending.done() or sending.cancelled():
        return OutcomeUnknown()
    error = sending.exception()
    if error is None:
        reply = sending.result()
        status = getattr(reply, "status", None)
        if isinstance(status, bool) or not isinstance(status, int):
            return OutcomeUnknown()  # a broken transport: the request may have left
        after = getattr(reply, "retry_after", None)
        return outcome_for_status(status, after if isinstance(after, str) else None)
    if isinstance(error, HttpUnreachable):
        return Failed(UNREACHABLE)
    if isinstance(error, HttpRefused):
        return Failed(DESTINATION_REFUSED)
    # HttpTimeout, an abort surfacing as an error, or anything else: the
    # request may have been sent.
    return OutcomeUnknown()


def _retrieve(task: asyncio.Future[Any]) -> None:
    # Mark a late failure as seen, so no "exception never retrieved" noise.
    if not task.cancelled():
        with contextlib.suppress(BaseException):
            task.exception()


def _request_for(job: JobRecord, allow_credentials: bool) -> _Request:
    payload = job.payload
    if not isinstance(payload, Mapping):
        raise _BadPayload
    url = payload.get("url")
    if not isinstance(url, str) or not 0 < len(url) <= MAX_URL_LENGTH \
            or not _PRINTABLE_ASCII.fullmatch(url) or " " in url:
        raise _BadPayload
    try:
        parts = urlsplit(url)
    except ValueError:
        raise _BadPayload from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _BadPayload
    if "body" not in payload:
        raise _BadPayload
    try:
        body = json.dumps(payload["body"], separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False).encode("utf-8")
    except (TypeError, ValueError, RecursionError):
        raise _BadPayload from None
    given = payload.get("headers", {})
    if given is None:
        given = {}
    if not isinstance(given, Mapping) or len(given) > MAX_HEADERS:
        raise _BadPayload
    headers: dict[str, str] = {}
    for name, value in given.items():
        if not isinstance(name, str) or not _TOKEN.fullmatch(name) \
                or name.lower() in RESERVED_HEADERS or name.lower() in headers:
            raise _BadPayload
        if not isinstance(value, str) or len(value) > MAX_HEADER_VALUE_LENGTH \
                or not _PRINTABLE_ASCII.fullmatch(value):
            raise _BadPayload
        if not allow_credentials and name.lower() in CREDENTIAL_HEADERS:
            raise _CredentialsRefused
        headers[name.lower()] = value
    headers["content-type"] = "application/json"
    headers["idempotency-key"] = idempotency_key(job.job_id)
    return _Request(url, body, headers)


def idempotency_key(job_id: str) -> str:
    """The ``idempotency-key`` header value for ``job_id``: the id itself when it
    is printable ASCII, else its UTF-8 percent-encoding (header values must be
    ASCII)."""
    if _PRINTABLE_ASCII.fullmatch(job_id) and job_id.strip() == job_id:
        return job_id
    return quote(job_id, safe="")
