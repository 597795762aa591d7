"""``AsyncClient`` and ``Client``: the job service of a tickwork host, typed.

    client = AsyncClient("https://jobs.example.workers.dev", token=TOKEN)
    jobs = client.owner("alice")              # or client.shared()
    await jobs.ingest(Job("j1", queue="emails", payload={"to": "a@example.com"}))
    record = await jobs.read("j1")            # a JobRecord, or None

Each method has the name, arguments and result type of the runtime method
it calls on the host (``OwnerRuntime``, ``D1Runtime``, ``PostgresRuntime``),
and a refusal raises the runtime's error (``InvalidJob``, ``InvalidArgument``,
``IngestConflict``) or an ``ApiError`` with the host's status, code and
field. Bad arguments are refused before anything is sent. Idempotent
operations are sent again by the ``RetryPolicy`` after a lost reply or a
429/502/503/504; purge and fail_lane never are.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from typing import Any

from tickwork.api.operations import BY_NAME, Operation
from tickwork.client.core import (
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
from tickwork.model.errors import InvalidArgument
from tickwork.model.jobs import Job, JobRecord, JobState, Outcome, validate_job
from tickwork.model.outcomes import (
    CancelResult,
    DeadLetters,
    FailLaneResult,
    IngestStatus,
    JobPage,
    ListOrder,
    QueueStatus,
    RedriveResult,
)
from tickwork.model.schedules import Schedule, ScheduleRecord, ScheduleStatus

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


class AsyncJobs:
    """The job service of one scope, over HTTP (see ``AsyncClient``)."""

    def __init__(self, client: AsyncClient, scope: tuple[str, ...]) -> None:
        self._client = client
        self.scope = scope

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

    async def read(self, job_id: str) -> JobRecord | None:
        record: JobRecord | None = await self._client.call(self.scope, "read", (job_id,))
        return record

    async def read_queue_head(self, queue: str) -> JobRecord | None:
        record: JobRecord | None = await self._client.call(
            self.scope, "read_queue_head", (queue,))
        return record

    async def cancel(self, job_id: str, cancellation_id: str, *,
                     only_if_queued: bool = False) -> CancelResult:
        result: CancelResult = await self._client.call(
            self.scope, "cancel", (job_id, cancellation_id, only_if_queued))
        return result

    async def fail_lane(self, lane: str, reason: str) -> FailLaneResult:
        result: FailLaneResult = await self._client.call(self.scope, "fail_lane", (lane, reason))
        return result

    async def purge(self, queue: str) -> int:
        deleted: int = await self._client.call(self.scope, "purge", (queue,))
        return deleted

    async def pause(self, queue: str) -> bool:
        """Pause the queue; True when this call paused it."""
        changed: bool = await self._client.call(self.scope, "pause", (queue,))
        return changed

    async def resume(self, queue: str) -> bool:
        """Resume the queue; True when it was paused."""
        changed: bool = await self._client.call(self.scope, "resume", (queue,))
        return changed

    async def dead_letters(self, queue: str, *, limit: int = 50,
                           cursor: str | None = None) -> DeadLetters:
        """One page of the queue's dead letters, newest first."""
        page: DeadLetters = await self._client.call(self.scope, "dead_letters",
                                                    (queue, limit, cursor))
        return page

    async def list_jobs(self, queue: str | None = None, *, lane: str | None = None,
                        state: JobState = "queued", outcome: Outcome | None = None,
                        order: ListOrder = "newest", limit: int = 50,
                        cursor: str | None = None) -> JobPage:
        """One page of a queue's (or a lane's) jobs in ``state``."""
        page: JobPage = await self._client.call(
            self.scope, "list_jobs", (queue, lane, state, outcome, order, limit, cursor))
        return page

    async def read_settled(self, limit: int = 100, after_sequence: int = 0) -> list[JobRecord]:
        """An owner's settled feed after ``after_sequence`` (owners only)."""
        jobs: list[JobRecord] = await self._client.call(self.scope, "read_settled",
                                                         (limit, after_sequence))
        return jobs

    async def ready(self) -> int:
        """Ask the scope to read its store now; its schema version (ApiError 503 if not)."""
        version: int = await self._client.call(self.scope, "ready", ())
        return version

    async def redrive(self, job_id: str, redrive_id: str) -> RedriveResult:
        """Queue a dead letter again as a new attempt chain (replay-safe)."""
        result: RedriveResult = await self._client.call(self.scope, "redrive",
                                                        (job_id, redrive_id))
        return result

    async def put_schedule(self, schedule: Schedule) -> ScheduleStatus:
        """Create or replace a schedule: created, replaced or unchanged."""
        status: ScheduleStatus = await self._client.call(self.scope, "put_schedule",
                                                         (schedule,))
        return status

    async def schedules(self) -> list[ScheduleRecord]:
        records: list[ScheduleRecord] = await self._client.call(self.scope, "schedules", ())
        return records

    async def pause_schedule(self, name: str) -> bool:
        changed: bool = await self._client.call(self.scope, "pause_schedule", (name,))
        return changed

    async def resume_schedule(self, name: str) -> bool:
        changed: bool = await self._client.call(self.scope, "resume_schedule", (name,))
        return changed

    async def delete_schedule(self, name: str) -> bool:
        changed: bool = await self._client.call(self.scope, "delete_schedule", (name,))
        return changed

    async def status(self) -> list[QueueStatus]:
        statuses: list[QueueStatus] = await self._client.call(self.scope, "status", ())
        return statuses

    async def queue_status(self, queue: str) -> QueueStatus:
        status: QueueStatus = await self._client.call(self.scope, "queue_status", (queue,))
        return status


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


class Jobs:
    """The job service of one scope, over HTTP, synchronously (see ``Client``)."""

    def __init__(self, client: Client, scope: tuple[str, ...]) -> None:
        self._client = client
        self.scope = scope

    def ingest(self, job: Job) -> IngestStatus:
        validate_job(job)
        return self.ingest_many([job])[0]

    def ingest_many(self, jobs: Sequence[Job]) -> list[IngestStatus]:
        statuses: list[IngestStatus] = self._client.call(self.scope, "ingest", (jobs,))
        return statuses

    def read(self, job_id: str) -> JobRecord | None:
        record: JobRecord | None = self._client.call(self.scope, "read", (job_id,))
        return record

    def read_queue_head(self, queue: str) -> JobRecord | None:
        record: JobRecord | None = self._client.call(self.scope, "read_queue_head", (queue,))
        return record

    def cancel(self, job_id: str, cancellation_id: str, *,
               only_if_queued: bool = False) -> CancelResult:
        result: CancelResult = self._client.call(
            self.scope, "cancel", (job_id, cancellation_id, only_if_queued))
        return result

    def fail_lane(self, lane: str, reason: str) -> FailLaneResult:
        result: FailLaneResult = self._client.call(self.scope, "fail_lane", (lane, reason))
        return result

    def purge(self, queue: str) -> int:
        deleted: int = self._client.call(self.scope, "purge", (queue,))
        return deleted

    def pause(self, queue: str) -> bool:
        """Pause the queue; True when this call paused it."""
        changed: bool = self._client.call(self.scope, "pause", (queue,))
        return changed

    def resume(self, queue: str) -> bool:
        """Resume the queue; True when it was paused."""
        changed: bool = self._client.call(self.scope, "resume", (queue,))
        return changed

    def dead_letters(self, queue: str, *, limit: int = 50,
                     cursor: str | None = None) -> DeadLetters:
        """One page of the queue's dead letters, newest first."""
        page: DeadLetters = self._client.call(self.scope, "dead_letters",
                                              (queue, limit, cursor))
        return page

    def list_jobs(self, queue: str | None = None, *, lane: str | None = None,
                  state: JobState = "queued", outcome: Outcome | None = None,
                  order: ListOrder = "newest", limit: int = 50,
                  cursor: str | None = None) -> JobPage:
        """One page of a queue's (or a lane's) jobs in ``state``."""
        page: JobPage = self._client.call(
            self.scope, "list_jobs", (queue, lane, state, outcome, order, limit, cursor))
        return page

    def read_settled(self, limit: int = 100, after_sequence: int = 0) -> list[JobRecord]:
        """An owner's settled feed after ``after_sequence`` (owners only)."""
        jobs: list[JobRecord] = self._client.call(self.scope, "read_settled",
                                                   (limit, after_sequence))
        return jobs

    def ready(self) -> int:
        """Ask the scope to read its store now; its schema version (ApiError 503 if not)."""
        version: int = self._client.call(self.scope, "ready", ())
        return version

    def redrive(self, job_id: str, redrive_id: str) -> RedriveResult:
        """Queue a dead letter again as a new attempt chain (replay-safe)."""
        result: RedriveResult = self._client.call(self.scope, "redrive", (job_id, redrive_id))
        return result

    def put_schedule(self, schedule: Schedule) -> ScheduleStatus:
        """Create or replace a schedule: created, replaced or unchanged."""
        status: ScheduleStatus = self._client.call(self.scope, "put_schedule", (schedule,))
        return status

    def schedules(self) -> list[ScheduleRecord]:
        records: list[ScheduleRecord] = self._client.call(self.scope, "schedules", ())
        return records

    def pause_schedule(self, name: str) -> bool:
        changed: bool = self._client.call(self.scope, "pause_schedule", (name,))
        return changed

    def resume_schedule(self, name: str) -> bool:
        changed: bool = self._client.call(self.scope, "resume_schedule", (name,))
        return changed

    def delete_schedule(self, name: str) -> bool:
        changed: bool = self._client.call(self.scope, "delete_schedule", (name,))
        return changed

    def status(self) -> list[QueueStatus]:
        statuses: list[QueueStatus] = self._client.call(self.scope, "status", ())
        return statuses

    def queue_status(self, queue: str) -> QueueStatus:
        status: QueueStatus = self._client.call(self.scope, "queue_status", (queue,))
        return status
