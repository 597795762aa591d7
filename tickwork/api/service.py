"""JobService: the operations the API serves for one scope of jobs, typed once.

A scope is one owner (a Durable Object or one file of ``tickwork serve``) or
the shared queues (D1 or PostgreSQL). Each of its methods is one operation of
``tickwork.api.operations.OPERATIONS``: the declared ones
(``tickwork.lifecycle.surface.JobOperations``) are derived, ``ingest``,
``ready`` and ``read_settled`` are written below. A service only says how it
performs an operation (``perform``), so every adapter is one small class:

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
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from tickwork.api.operations import BY_NAME, DECLARED, Operation
from tickwork.lifecycle.surface import AsyncSurface, Declared, JobOperations
from tickwork.model.jobs import Job, JobRecord
from tickwork.model.outcomes import IngestStatus


class JobService(JobOperations, AsyncSurface):
    """The operations the API serves, for one scope of jobs: every operation
    of ``JobOperations`` (typed from its plan) and ``ingest``, ``ready`` and
    ``read_settled``, each sent to ``perform`` with its operation."""

    async def perform(self, operation: Operation, args: tuple[Any, ...]) -> Any:
        """Perform ``operation`` with ``args`` (validated already, or validated
        by the runtime); its result."""
        raise NotImplementedError

    def _perform_declared(self, declared: Declared[Any, Any], args: tuple[Any, ...],
                          kwargs: dict[str, Any]) -> Coroutine[Any, Any, Any]:
        return self.perform(BY_NAME[declared.name], declared.arguments(args, kwargs))

    async def ingest(self, jobs: Sequence[Job]) -> list[IngestStatus]:
        """Store every job or none (an IngestConflict or InvalidJob stores nothing)."""
        statuses: list[IngestStatus] = await self.perform(_INGEST, (jobs,))
        return statuses

    async def read_settled(self, limit: int, after_sequence: int) -> list[JobRecord]:
        """An owner's settled feed (the shared queues answer 404 not_available)."""
        jobs: list[JobRecord] = await self.perform(_READ_SETTLED, (limit, after_sequence))
        return jobs

    async def ready(self) -> int:
        """Read the scope's store now; its schema version (503 not_ready if it fails)."""
        version: int = await self.perform(_READY, ())
        return version


_INGEST = BY_NAME["ingest"]
_READY = BY_NAME["ready"]
_READ_SETTLED = BY_NAME["read_settled"]


def call(service: JobService, operation: Operation, args: tuple[Any, ...]) -> Awaitable[Any]:
    """``operation`` on ``service`` through its named method (so overrides apply)."""
    method: Callable[..., Awaitable[Any]] = getattr(service, operation.name)
    declared = DECLARED.get(operation.name)
    return method(*args) if declared is None else declared.call_with(method, args)


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
