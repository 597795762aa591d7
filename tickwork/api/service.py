"""JobService: what the HTTP API needs from one scope of jobs.

A scope is one owner (a Durable Object or a local sqlite3 file) or the
shared queues (D1 or PostgreSQL). Every host adapts its runtime to this one
async port, so the routes in ``tickwork.api.routes`` are written once:

* ``OwnerJobs`` wraps an in-process ``OwnerRuntime`` (the local host, and
  ``JobOwner`` inside the Durable Object);
* ``SharedJobs`` wraps a ``SharedRuntime`` (D1, PostgreSQL);
* ``RpcJobs`` is the Worker's view of a ``JobOwner`` stub: it calls the
  object's RPC methods (``JobOwnerRpc``) with text and reads their JSON text
  replies, so every value arrives exactly as it was sent (see "RPC" below).
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from tickwork._pyodide import load_jsnull
from tickwork.api import wire
from tickwork.api.wire import ApiError
from tickwork.model.jobs import Job, JobRecord, check_id
from tickwork.model.outcomes import CancelResult, FailLaneResult, IngestStatus, QueueStatus


class JobService(Protocol):
    """The operations the API serves, for one scope of jobs."""

    async def ingest(self, jobs: Sequence[Job]) -> list[IngestStatus]:
        """Store every job or none (an IngestConflict or InvalidJob stores nothing)."""
        ...

    async def read(self, job_id: str) -> JobRecord | None: ...

    async def read_queue_head(self, queue: str) -> JobRecord | None: ...

    async def cancel(self, job_id: str, cancellation_id: str,
                     only_if_queued: bool) -> CancelResult: ...

    async def fail_lane(self, lane: str, reason: str) -> FailLaneResult: ...

    async def purge(self, queue: str) -> int: ...

    async def status(self) -> list[QueueStatus]:
        """Counts of every queue that has jobs, by queue name."""
        ...

    async def queue_status(self, queue: str) -> QueueStatus: ...


class OwnerJobs:
    """An owner-local runtime (synchronous) as a JobService."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    async def ingest(self, jobs: Sequence[Job]) -> list[IngestStatus]:
        statuses: list[IngestStatus] = self.runtime.ingest_many(jobs)
        return statuses

    async def read(self, job_id: str) -> JobRecord | None:
        record: JobRecord | None = self.runtime.read(job_id)
        return record

    async def read_queue_head(self, queue: str) -> JobRecord | None:
        record: JobRecord | None = self.runtime.read_queue_head(queue)
        return record

    async def cancel(self, job_id: str, cancellation_id: str,
                     only_if_queued: bool) -> CancelResult:
        result: CancelResult = self.runtime.cancel(
            job_id, cancellation_id, only_if_queued=only_if_queued)
        return result

    async def fail_lane(self, lane: str, reason: str) -> FailLaneResult:
        result: FailLaneResult = self.runtime.fail_lane(lane, reason)
        return result

    async def purge(self, queue: str) -> int:
        deleted: int = self.runtime.purge(queue)
        return deleted

    async def status(self) -> list[QueueStatus]:
        statuses: list[QueueStatus] = self.runtime.status()
        return statuses

    async def queue_status(self, queue: str) -> QueueStatus:
        status: QueueStatus = self.runtime.queue_status(queue)
        return status


class SharedJobs:
    """A shared runtime (async already) as a JobService."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    async def ingest(self, jobs: Sequence[Job]) -> list[IngestStatus]:
        statuses: list[IngestStatus] = await self.runtime.ingest_many(jobs)
        return statuses

    async def read(self, job_id: str) -> JobRecord | None:
        record: JobRecord | None = await self.runtime.read(job_id)
        return record

    async def read_queue_head(self, queue: str) -> JobRecord | None:
        record: JobRecord | None = await self.runtime.read_queue_head(queue)
        return record

    async def cancel(self, job_id: str, cancellation_id: str,
                     only_if_queued: bool) -> CancelResult:
        result: CancelResult = await self.runtime.cancel(
            job_id, cancellation_id, only_if_queued=only_if_queued)
        return result

    async def fail_lane(self, lane: str, reason: str) -> FailLaneResult:
        result: FailLaneResult = await self.runtime.fail_lane(lane, reason)
        return result

    async def purge(self, queue: str) -> int:
        deleted: int = await self.runtime.purge(queue)
        return deleted

    async def status(self) -> list[QueueStatus]:
        statuses: list[QueueStatus] = await self.runtime.status()
        return statuses

    async def queue_status(self, queue: str) -> QueueStatus:
        status: QueueStatus = await self.runtime.queue_status(queue)
        return status


# ---------------------------------------------------------------- RPC (DO)
#
# What crosses Workers RPC between the Worker and a JobOwner is text: every
# argument is a str or a bool (ids, names, a flag) or JSON text (the jobs of
# an ingest), and every reply is the JSON text of an envelope,
# {"ok": true, "value": ...} or {"ok": false, "status": N, "error": {...}}.
# RPC converts structured values on the way (a whole float 1.0 arrives as 1,
# so a payload would change; an int at +-(2**53 - 1) crosses as a BigInt),
# while a string arrives as it was sent. Refusals travel as data because an
# exception raised in the object reaches the caller as a bare JsException
# whose message is only the remote traceback text.


async def rpc_reply(call: Callable[[], Awaitable[Any] | Any]) -> str:
    """Run one RPC method body on the object's side; its reply envelope as JSON text.

    Bad input and conflicts become error envelopes; anything else (a bug, a
    storage failure) propagates, so the caller sees a 5xx and nothing is
    reported as done that was not.
    """
    try:
        value = call()
        if inspect.isawaitable(value):
            value = await value
    except Exception as error:
        refused = wire.error_for(error)
        if refused is None:
            raise
        return wire.to_json_text({"ok": False, "status": refused.status, **refused.to_wire()})
    return wire.to_json_text({"ok": True, "value": value})


def _unwrap(reply: Any) -> Any:
    """The value of a JobOwner's reply envelope (JSON text); refusals raise ApiError."""
    if not isinstance(reply, str):
        raise RuntimeError(f"JobOwner replied with {type(reply).__name__}, "
                           "not the JSON text of an RPC envelope")
    envelope = json.loads(reply)
    if not isinstance(envelope, Mapping) or "ok" not in envelope:
        raise RuntimeError("JobOwner's reply is not an RPC envelope")
    if envelope["ok"]:
        return envelope.get("value")
    error = envelope["error"]
    raise ApiError(int(envelope["status"]), error["code"], error["message"], error.get("field"))


def plain_data(value: Any) -> Any:
    """JSON-like data from JS as plain Python: a JS proxy (a JS object, Array or
    Map) becomes plain Python, recursively, and JS null (``pyodide.ffi.jsnull``,
    truthy) becomes None."""
    return _plain(value, load_jsnull())


def _plain(value: Any, jsnull: object | None) -> Any:
    if value is None or (jsnull is not None and value is jsnull):
        return None
    to_py = getattr(value, "to_py", None)
    if to_py is not None:
        value = to_py()
    if isinstance(value, Mapping):
        return {str(key): _plain(item, jsnull) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item, jsnull) for item in value]
    return value


class RpcJobs:
    """A ``JobOwner`` Durable Object stub as a JobService (the Worker's side)."""

    def __init__(self, stub: Any) -> None:
        self.stub = stub

    async def ingest(self, jobs: Sequence[Job]) -> list[IngestStatus]:
        text = wire.to_json_text([wire.job_to_wire(job) for job in jobs])
        statuses: list[IngestStatus] = _unwrap(await self.stub.ingest(text))
        return statuses

    async def read(self, job_id: str) -> JobRecord | None:
        value = _unwrap(await self.stub.read(job_id))
        return None if value is None else wire.record_from_wire(value)

    async def read_queue_head(self, queue: str) -> JobRecord | None:
        value = _unwrap(await self.stub.read_queue_head(queue))
        return None if value is None else wire.record_from_wire(value)

    async def cancel(self, job_id: str, cancellation_id: str,
                     only_if_queued: bool) -> CancelResult:
        value = _unwrap(await self.stub.cancel(job_id, cancellation_id, only_if_queued))
        return wire.cancel_from_wire(value)

    async def fail_lane(self, lane: str, reason: str) -> FailLaneResult:
        return wire.fail_lane_from_wire(_unwrap(await self.stub.fail_lane(lane, reason)))

    async def purge(self, queue: str) -> int:
        deleted: int = _unwrap(await self.stub.purge(queue))
        return deleted

    async def status(self) -> list[QueueStatus]:
        return [wire.status_from_wire(item) for item in _unwrap(await self.stub.status())]

    async def queue_status(self, queue: str) -> QueueStatus:
        return wire.status_from_wire(_unwrap(await self.stub.queue_status(queue)))


class JobOwnerRpc:
    """The RPC methods of a Durable Object hosting an owner-local runtime.

    ``JobOwner`` inherits these; ``_job_service()`` returns the object's
    ``OwnerJobs`` (underscored, so the runtime does not list it as an RPC
    method). Arguments are decoded and validated here, once; every method
    replies with the JSON text of an envelope (see ``rpc_reply``).
    """

    def _job_service(self) -> JobService:
        raise NotImplementedError

    async def _after_call(self) -> None:
        """Runs after every call that produced a reply, refusals included
        (``JobOwner`` brings its alarm in step here). Default: nothing."""

    async def _reply(self, call: Callable[[], Awaitable[Any] | Any]) -> str:
        reply = await rpc_reply(call)
        await self._after_call()
        return reply

    async def ingest(self, jobs_json: Any) -> str:
        async def call() -> list[IngestStatus]:
            return await self._job_service().ingest(wire.jobs_from_rpc(plain_data(jobs_json)))
        return await self._reply(call)

    async def read(self, job_id: Any) -> str:
        async def call() -> dict[str, Any] | None:
            record = await self._job_service().read(check_id("job_id", plain_data(job_id)))
            return None if record is None else wire.record_to_wire(record)
        return await self._reply(call)

    async def read_queue_head(self, queue: Any) -> str:
        async def call() -> dict[str, Any] | None:
            record = await self._job_service().read_queue_head(
                check_id("queue", plain_data(queue)))
            return None if record is None else wire.record_to_wire(record)
        return await self._reply(call)

    async def cancel(self, job_id: Any, cancellation_id: Any, only_if_queued: Any = False) -> str:
        async def call() -> dict[str, Any]:
            result = await self._job_service().cancel(
                plain_data(job_id), plain_data(cancellation_id), plain_data(only_if_queued))
            return wire.cancel_to_wire(result)
        return await self._reply(call)

    async def fail_lane(self, lane: Any, reason: Any) -> str:
        async def call() -> dict[str, Any]:
            result = await self._job_service().fail_lane(plain_data(lane), plain_data(reason))
            return wire.fail_lane_to_wire(result)
        return await self._reply(call)

    async def purge(self, queue: Any) -> str:
        return await self._reply(lambda: self._job_service().purge(plain_data(queue)))

    async def status(self) -> str:
        async def call() -> list[dict[str, Any]]:
            return [wire.status_to_wire(item) for item in await self._job_service().status()]
        return await self._reply(call)

    async def queue_status(self, queue: Any) -> str:
        async def call() -> dict[str, Any]:
            return wire.status_to_wire(await self._job_service().queue_status(plain_data(queue)))
        return await self._reply(call)
