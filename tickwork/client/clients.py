"""``AsyncClient`` and ``Client``: the job service of a tickwork host, typed.

    client = AsyncClient("https://jobs.example.workers.dev", token=TOKEN)
    jobs = client.owner("alice")              # or client.shared()
    await jobs.ingest(Job("j1", queue="emails", payload={"to": "a@example.com"}))
    record = await jobs.read("j1")            # a JobRecord, or None
    page = await client.list_owners(sort="dead_letters")  # the directory of owners

Each method has the name, arguments and result type of the runtime method
it calls on the host (``OwnerRuntime``, ``D1Runtime``, ``PostgresRuntime``):
both come from one declaration (``tickwork.lifecycle.surface``). A refusal
raises the runtime's error (``InvalidJob``, ``InvalidArgument``,
``IngestConflict``) or an ``ApiError`` with the host's status, code and
field. Bad arguments are refused before anything is sent. Idempotent
operations are sent again by the ``RetryPolicy`` after a lost reply or a
429/502/503/504; purge and fail_lane never are.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Coroutine, Sequence
from typing import Any

from tickwork.api.operations import BY_NAME, LIST_OWNERS, Operation
from tickwork.client.core import (
    DIRECTORY,
    SHARED,
    AsyncTransport,
    HttpAnswer,
    HttpRequest,
    RetryPolicy,
    SyncTransport,
    TransportError,
    check_base_url,
    may_retry,
    owner_scope,
    request_for,
    result_of,
)
from tickwork.directory import DEFAULT_OWNER_PAGE, OwnerPage, OwnerQuery
from tickwork.lifecycle.surface import AsyncSurface, Declared, JobOperations, SyncSurface
from tickwork.model.errors import InvalidArgument
from tickwork.model.jobs import Job, JobRecord, validate_job
from tickwork.model.outcomes import (
    IngestStatus,
)

#: Seconds one request may take, connecting included.
DEFAULT_TIMEOUT_S = 10.0


def _check_timeout(timeout_s: float) -> float:
    if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool) \
            or not timeout_s > 0:
        raise InvalidArgument("timeout_s", "must be a number of seconds > 0")
    return float(timeout_s)


def _check_token(token: str | None) -> str | None:
    # It goes into a header: no line breaks (nor NUL), and nothing empty.
    if token is None:
        return None
    if not isinstance(token, str) or not token.strip() \
            or any(char in token for char in "\r\n\0"):
        raise InvalidArgument("token", "must be a non-empty string without line breaks")
    return token


def _health(answer: HttpAnswer) -> bool:
    return answer.status == 200


class _Settings:
    """What both clients hold, and when they send again."""

    def __init__(self, base_url: str, token: str | None, retry: RetryPolicy | None,
                 timeout_s: float) -> None:
        self.base_url = check_base_url(base_url)
        self.token = _check_token(token)
        self.retry = retry or RetryPolicy()
        self.timeout_s = _check_timeout(timeout_s)

    def _request(self, scope: tuple[str, ...], name: str,
                 args: tuple[Any, ...]) -> tuple[Operation, HttpRequest]:
        operation = BY_NAME[name]
        return operation, request_for(self.base_url, self.token, scope, operation, args)

    def _owners_request(self, prefix: str, sort: str, cursor: str | None,
                        limit: int) -> HttpRequest:
        # OwnerQuery refuses bad values (InvalidArgument) before anything is sent.
        query = OwnerQuery(prefix, sort, cursor, limit)
        return request_for(self.base_url, self.token, DIRECTORY, LIST_OWNERS, (query,))

    def _health_request(self) -> HttpRequest:
        return HttpRequest("GET", f"{self.base_url}/v1/health", {"accept": "application/json"})

    def _wait_before_next(self, operation: Operation | None, attempt: int,
                          answer: HttpAnswer | None, error: TransportError | None
                          ) -> float | None:
        """Seconds to wait before sending again, or None: the answer stands
        (or, with ``error``, the error is raised)."""
        if not may_retry(operation, attempt, self.retry, answer, error):
            if error is not None:
                raise error
            return None
        return self.retry.delay_s(attempt, answer)


class AsyncClient(_Settings):
    """A tickwork host's API (``tickwork serve`` or the Worker), with ``await``.

    ``transport`` defaults to the Workers ``fetch`` inside a Worker and to
    Python's ``urllib`` (run in a thread) on CPython."""

    def __init__(self, base_url: str, *, token: str | None = None,
                 transport: AsyncTransport | None = None,
                 retry: RetryPolicy | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(base_url, token, retry, timeout_s)
        if transport is None:
            from tickwork.client.transports import default_async_transport

            transport = default_async_transport()
        self.transport = transport

    def owner(self, owner: str) -> AsyncJobs:
        """One owner's jobs (``/v1/owners/{owner}``)."""
        return AsyncJobs(self, owner_scope(owner))

    def shared(self) -> AsyncJobs:
        """The shared queues (``/v1/shared``)."""
        return AsyncJobs(self, SHARED)

    async def health(self) -> bool:
        """Whether the host answers ``GET /v1/health`` with 200 (no token needed)."""
        return _health(await self._send(None, self._health_request()))

    async def list_owners(self, *, prefix: str = "", sort: str = "key",
                          cursor: str | None = None,
                          limit: int = DEFAULT_OWNER_PAGE) -> OwnerPage:
        """One page of the host's directory of owners (``GET /v1/owners``):
        the owners whose key starts with ``prefix``, by ``sort`` ("key", or
        "queued", "running", "overdue", "dead_letters", "last_activity",
        largest first), ``limit`` (1 to 200) after ``cursor`` (the previous
        page's ``cursor``, with the same sort and prefix)."""
        request = self._owners_request(prefix, sort, cursor, limit)
        page: OwnerPage = result_of(LIST_OWNERS, await self._send(LIST_OWNERS, request))
        return page

    async def call(self, scope: tuple[str, ...], name: str, args: tuple[Any, ...]) -> Any:
        """Perform the operation ``name`` in ``scope``; its result."""
        operation, request = self._request(scope, name, args)
        return result_of(operation, await self._send(operation, request))

    async def _send(self, operation: Operation | None, request: HttpRequest) -> HttpAnswer:
        for attempt in itertools.count(1):
            answer, error = None, None
            try:
                answer = await self.transport.send(request, self.timeout_s)
            except TransportError as failed:
                error = failed
            wait = self._wait_before_next(operation, attempt, answer, error)
            if wait is None:
                assert answer is not None
                return answer
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")


class AsyncJobs(JobOperations, AsyncSurface):
    """The job service of one scope, over HTTP (see ``AsyncClient``): every
    operation of ``tickwork.lifecycle.surface.JobOperations``, with the
    runtime's signature, plus ``ingest``, ``ingest_many``, ``read_settled``
    and ``ready``."""

    def __init__(self, client: AsyncClient, scope: tuple[str, ...]) -> None:
        self._client = client
        self.scope = scope

    def _perform_declared(self, declared: Declared[Any, Any], args: tuple[Any, ...],
                          kwargs: dict[str, Any]) -> Coroutine[Any, Any, Any]:
        return self._client.call(self.scope, declared.name, declared.arguments(args, kwargs))

    async def ingest(self, job: Job) -> IngestStatus:
        """Store ``job``: "queued" when new, "duplicate" for an identical replay."""
        validate_job(job)  # refused as the runtime's ingest(job) refuses it
        statuses = await self.ingest_many([job])
        return statuses[0]

    async def ingest_many(self, jobs: Sequence[Job]) -> list[IngestStatus]:
        """Store up to 100 jobs atomically; one status per job."""
        statuses: list[IngestStatus] = await self._client.call(
            self.scope, "ingest", (jobs,))
        return statuses

    async def read_settled(self, limit: int = 100, after_sequence: int = 0) -> list[JobRecord]:
        """An owner's settled feed after ``after_sequence`` (owners only)."""
        jobs: list[JobRecord] = await self._client.call(self.scope, "read_settled",
                                                         (limit, after_sequence))
        return jobs

    async def ready(self) -> int:
        """Ask the scope to read its store now; its schema version (ApiError 503 if not)."""
        version: int = await self._client.call(self.scope, "ready", ())
        return version


class Client(_Settings):
    """``AsyncClient`` without ``await``, for scripts and synchronous code
    (CPython; ``urllib`` by default, so HTTPS proxies from the environment apply)."""

    def __init__(self, base_url: str, *, token: str | None = None,
                 transport: SyncTransport | None = None,
                 retry: RetryPolicy | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(base_url, token, retry, timeout_s)
        if transport is None:
            from tickwork.client.transports import UrllibTransport

            transport = UrllibTransport()
        self.transport = transport

    def owner(self, owner: str) -> Jobs:
        return Jobs(self, owner_scope(owner))

    def shared(self) -> Jobs:
        return Jobs(self, SHARED)

    def health(self) -> bool:
        return _health(self._send(None, self._health_request()))

    def list_owners(self, *, prefix: str = "", sort: str = "key", cursor: str | None = None,
                    limit: int = DEFAULT_OWNER_PAGE) -> OwnerPage:
        """One page of the host's directory of owners (see ``AsyncClient.list_owners``)."""
        request = self._owners_request(prefix, sort, cursor, limit)
        page: OwnerPage = result_of(LIST_OWNERS, self._send(LIST_OWNERS, request))
        return page

    def call(self, scope: tuple[str, ...], name: str, args: tuple[Any, ...]) -> Any:
        operation, request = self._request(scope, name, args)
        return result_of(operation, self._send(operation, request))

    def _send(self, operation: Operation | None, request: HttpRequest) -> HttpAnswer:
        for attempt in itertools.count(1):
            answer, error = None, None
            try:
                answer = self.transport.send(request, self.timeout_s)
            except TransportError as failed:
                error = failed
            wait = self._wait_before_next(operation, attempt, answer, error)
            if wait is None:
                assert answer is not None
                return answer
            time.sleep(wait)
        raise AssertionError("unreachable")


class Jobs(JobOperations, SyncSurface):
    """The job service of one scope, over HTTP, synchronously (see ``Client``
    and ``AsyncJobs``)."""

    def __init__(self, client: Client, scope: tuple[str, ...]) -> None:
        self._client = client
        self.scope = scope

    def _perform_declared(self, declared: Declared[Any, Any], args: tuple[Any, ...],
                          kwargs: dict[str, Any]) -> Any:
        return self._client.call(self.scope, declared.name, declared.arguments(args, kwargs))

    def ingest(self, job: Job) -> IngestStatus:
        validate_job(job)
        return self.ingest_many([job])[0]

    def ingest_many(self, jobs: Sequence[Job]) -> list[IngestStatus]:
        statuses: list[IngestStatus] = self._client.call(self.scope, "ingest", (jobs,))
        return statuses

    def read_settled(self, limit: int = 100, after_sequence: int = 0) -> list[JobRecord]:
        """An owner's settled feed after ``after_sequence`` (owners only)."""
        jobs: list[JobRecord] = self._client.call(self.scope, "read_settled",
                                                   (limit, after_sequence))
        return jobs

    def ready(self) -> int:
        """Ask the scope to read its store now; its schema version (ApiError 503 if not)."""
        version: int = self._client.call(self.scope, "ready", ())
        return version
