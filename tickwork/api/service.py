"""JobService: the operations the API serves for one scope of jobs, typed once.

A scope is one owner (a Durable Object or one file of ``tickwork serve``) or
the shared queues (D1 or PostgreSQL). Each method below is one operation of
``tickwork.api.operations.OPERATIONS``; a service only says how it performs
an operation (``perform``), so every adapter is one small class:

* ``RuntimeService``: an in-process runtime, owner-local (synchronous) or
  shared (async);
* ``ScopedService``: whichever service a host resolves per call (``tickwork
  serve`` opens an owner's file only when an operation needs it);
* ``tickwork.api.rpc.RpcService``: a ``JobOwner`` Durable Object, over RPC.

A subclass may override one operation's method to add to it (the Worker's
shared ingest commits the deployment's rows in the same batch); the routes
and the RPC methods always call the named method.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from tickwork.api.operations import BY_NAME, Operation
from tickwork.model.jobs import Job, JobRecord
from tickwork.model.outcomes import (
    CancelResult,
    DeadLetters,
    FailLaneResult,
    IngestStatus,
    JobPage,
    QueueStatus,
    RedriveResult,
)
from tickwork.model.schedules import Schedule, ScheduleRecord, ScheduleStatus


class JobService:
    """The operations the API serves, for one scope of jobs."""

    async def perform(self, operation: Operation, args: tuple[Any, ...]) -> Any:
        """Perform ``operation`` with ``args`` (validated already, or validated
        by the runtime); its result."""
        raise NotImplementedError

    async def ingest(self, jobs: Sequence[Job]) -> list[IngestStatus]:
        """Store every job or none (an IngestConflict or InvalidJob stores nothing)."""
        statuses: list[IngestStatus] = await self.perform(_INGEST, (jobs,))
        return statuses

    async def read(self, job_id: str) -> JobRecord | None:
        record: JobRecord | None = await self.perform(_READ, (job_id,))
        return record

    async def read_queue_head(self, queue: str) -> JobRecord | None:
        record: JobRecord | None = await self.perform(_READ_QUEUE_HEAD, (queue,))
        return record

    async def cancel(self, job_id: str, cancellation_id: str,
                     only_if_queued: bool) -> CancelResult:
        result: CancelResult = await self.perform(
            _CANCEL, (job_id, cancellation_id, only_if_queued))
        return result

    async def fail_lane(self, lane: str, reason: str) -> FailLaneResult:
        result: FailLaneResult = await self.perform(_FAIL_LANE, (lane, reason))
        return result

    async def purge(self, queue: str) -> int:
        deleted: int = await self.perform(_PURGE, (queue,))
        return deleted

    async def pause(self, queue: str) -> bool:
        changed: bool = await self.perform(_PAUSE, (queue,))
        return changed

    async def resume(self, queue: str) -> bool:
        changed: bool = await self.perform(_RESUME, (queue,))
        return changed

    async def dead_letters(self, queue: str, limit: int, cursor: str | None) -> DeadLetters:
        page: DeadLetters = await self.perform(_DEAD_LETTERS, (queue, limit, cursor))
        return page

    async def list_jobs(self, queue: str | None, lane: str | None, state: str,
                        outcome: str | None, order: str, limit: int,
                        cursor: str | None) -> JobPage:
        """One page of a queue's or a lane's jobs in one state."""
        page: JobPage = await self.perform(
            _LIST_JOBS, (queue, lane, state, outcome, order, limit, cursor))
        return page

    async def read_settled(self, limit: int, after_sequence: int) -> list[JobRecord]:
        """An owner's settled feed (the shared queues answer 404 not_available)."""
        jobs: list[JobRecord] = await self.perform(_READ_SETTLED, (limit, after_sequence))
        return jobs

    async def ready(self) -> int:
        """Read the scope's store now; its schema version (503 not_ready if it fails)."""
        version: int = await self.perform(_READY, ())
        return version

    async def redrive(self, job_id: str, redrive_id: str) -> RedriveResult:
        result: RedriveResult = await self.perform(_REDRIVE, (job_id, redrive_id))
        return result

    async def put_schedule(self, schedule: Schedule) -> ScheduleStatus:
        status: ScheduleStatus = await self.perform(_PUT_SCHEDULE, (schedule,))
        return status

    async def schedules(self) -> list[ScheduleRecord]:
        records: list[ScheduleRecord] = await self.perform(_SCHEDULES, ())
        return records

    async def pause_schedule(self, name: str) -> bool:
        changed: bool = await self.perform(_PAUSE_SCHEDULE, (name,))
        return changed

    async def resume_schedule(self, name: str) -> bool:
        changed: bool = await self.perform(_RESUME_SCHEDULE, (name,))
        return changed

    async def delete_schedule(self, name: str) -> bool:
        changed: bool = await self.perform(_DELETE_SCHEDULE, (name,))
        return changed

    async def status(self) -> list[QueueStatus]:
        """Counts of every queue that has jobs, by queue name."""
        statuses: list[QueueStatus] = await self.perform(_STATUS, ())
        return statuses

    async def queue_status(self, queue: str) -> QueueStatus:
        status: QueueStatus = await self.perform(_QUEUE_STATUS, (queue,))
        return status


_INGEST = BY_NAME["ingest"]
_READ = BY_NAME["read"]
_READ_QUEUE_HEAD = BY_NAME["read_queue_head"]
_CANCEL = BY_NAME["cancel"]
_FAIL_LANE = BY_NAME["fail_lane"]
_PURGE = BY_NAME["purge"]
_PAUSE = BY_NAME["pause"]
_RESUME = BY_NAME["resume"]
_DEAD_LETTERS = BY_NAME["dead_letters"]
_REDRIVE = BY_NAME["redrive"]
_LIST_JOBS = BY_NAME["list_jobs"]
_READY = BY_NAME["ready"]
_READ_SETTLED = BY_NAME["read_settled"]
_PUT_SCHEDULE = BY_NAME["put_schedule"]
_SCHEDULES = BY_NAME["schedules"]
_PAUSE_SCHEDULE = BY_NAME["pause_schedule"]
_RESUME_SCHEDULE = BY_NAME["resume_schedule"]
_DELETE_SCHEDULE = BY_NAME["delete_schedule"]
_STATUS = BY_NAME["status"]
_QUEUE_STATUS = BY_NAME["queue_status"]


def call(service: JobService, operation: Operation, args: tuple[Any, ...]) -> Awaitable[Any]:
    """``operation`` on ``service`` through its named method (so overrides apply)."""
    method: Callable[..., Awaitable[Any]] = getattr(service, operation.name)
    return method(*args)


class RuntimeService(JobService):
    """A runtime in this process (``OwnerRuntime``, ``SharedRuntime``) as a JobService."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    async def perform(self, operation: Operation, args: tuple[Any, ...]) -> Any:
        result = operation.perform(self.runtime, *args)
        if inspect.isawaitable(result):
            result = await result
        return result


#: ``resolve(operation, args)``: the service that performs one call.
Resolve = Callable[[Operation, tuple[Any, ...]], "JobService | Awaitable[JobService]"]


class ScopedService(JobService):
    """The service ``resolve`` picks per call, as a JobService."""

    def __init__(self, resolve: Resolve) -> None:
        self._resolve = resolve

    async def perform(self, operation: Operation, args: tuple[Any, ...]) -> Any:
        service = self._resolve(operation, args)
        if inspect.isawaitable(service):
            service = await service
        return await call(service, operation, args)
