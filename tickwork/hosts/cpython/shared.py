"""Shared queues of ``tickwork serve --postgres DSN``: PostgreSQL, drained by local workers.

Also the workers of ``tickwork worker`` (``worker_cli``), which serves no API.
psycopg 3 and psycopg-pool are imported only here, and only when
PostgreSQL is used. The schema (``schema/postgres/*.sql``) must have
been applied (``tickwork migrate postgres``); start-up checks it and names
the missing migration.

Layout: one ``AsyncConnectionPool`` shared by

* the API's runtime (``RuntimeService`` over a ``PostgresRuntime`` that never
  ticks), and
* ``workers`` worker runtimes, each a loop of ``drain()`` (in rounds of at
  most a second, so a shutdown is noticed): it runs jobs until the store is
  idle, then waits for a local wake (an API change) or ``poll_s`` seconds,
  whichever comes first. The poll picks up jobs other
  processes enqueue and leases that expired elsewhere. The first worker
  also prunes settled history between its drains, when a pass is due
  (``tickwork.runtimes.pruning``: once a minute, a few bounded batches; the
  other processes' first workers may prune at the same time, which is
  safe: every delete is fenced).

Leases keep other processes honest; within this process, a cancellation or
failing a lane recorded through the API reaches the local worker executing
the job at once, instead of at its next lease renewal.
"""

from __future__ import annotations

import asyncio
import contextlib
import traceback
from collections.abc import Sequence
from typing import Any

from tickwork.api import RuntimeService
from tickwork.events import EventHook
from tickwork.executors import Executor
from tickwork.hosts.cpython.common import (
    Log,
    error_line,
    finish_tasks,
    redact_dsn,
    stderr,
)
from tickwork.hosts.cpython.owners import HostError
from tickwork.hosts.cpython.progress import Progress
from tickwork.leases import DEFAULT_LEASE_MS, DEFAULT_RENEW_EVERY_MS
from tickwork.model.errors import SchemaError
from tickwork.model.outcomes import CancelResult, FailLaneResult, QueueBacklog

#: Longest drain() before a worker looks whether it should stop.
DRAIN_BUDGET_MS = 1000
#: How long start-up waits for PostgreSQL.
CONNECT_TIMEOUT_S = 15.0

PSYCOPG_HINT = ("PostgreSQL needs psycopg 3 and psycopg-pool: pip install 'tickwork[postgres]' "
                "(or pip install 'psycopg[binary]' psycopg-pool)")


class _Wake:
    def __init__(self, workers: SharedWorkers) -> None:
        self._workers = workers

    def recompute(self) -> None:
        self._workers.poke()


class SharedWorkers:
    """The shared queues on PostgreSQL: an API service and ``workers`` drain loops."""

    def __init__(
        self,
        dsn: str,
        execute: Executor,
        *,
        workers: int = 4,
        poll_s: float = 1.0,
        progress: Progress | None = None,
        log: Log | None = None,
        on_event: EventHook | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        renew_every_ms: int = DEFAULT_RENEW_EVERY_MS,
        name: str = "tickwork serve",
    ) -> None:
        if workers < 1:
            raise HostError("--workers must be at least 1")
        self.dsn = dsn
        self._execute = execute
        self._on_event = on_event
        # The worker runtimes' leases (the API's runtime never claims).
        self._lease_ms, self._renew_every_ms = lease_ms, renew_every_ms
        self._name = name  # the command, in log lines
        self._worker_count = workers
        self._poll_s = poll_s
        self._progress = progress or Progress()
        self._log = log or stderr
        self._pool: Any = None
        self._runtimes: list[Any] = []
        self._events: list[asyncio.Event] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        self.service: SharedService | None = None

    async def start(self) -> SharedService:
        try:
            from psycopg import AsyncConnection
            from psycopg_pool import AsyncConnectionPool

            from tickwork.runtimes.postgres import PostgresRuntime
        except ImportError as error:
            raise HostError(f"{PSYCOPG_HINT} ({error})") from None
        try:
            # One connection first: it fails fast, with the server's own reason.
            probe = await asyncio.wait_for(AsyncConnection.connect(self.dsn), CONNECT_TIMEOUT_S)
            await probe.close()
        except Exception as error:
            raise HostError(f"cannot connect to PostgreSQL ({redact_dsn(self.dsn)}): "
                            f"{error_line(error)}") from None
        pool: Any = AsyncConnectionPool(self.dsn, min_size=1,
                                        max_size=self._worker_count + 4, open=False)
        try:
            await pool.open(wait=True, timeout=CONNECT_TIMEOUT_S)
        except Exception as error:
            with contextlib.suppress(Exception):
                await pool.close()
            raise HostError(f"cannot connect to PostgreSQL ({redact_dsn(self.dsn)}): "
                            f"{error_line(error)}") from None
        self._pool = pool
        wake = _Wake(self)
        api_runtime = PostgresRuntime(pool, execute=self._execute, wake=wake,
                                      on_event=self._on_event)
        try:
            await api_runtime.has_pending_work()  # checks the schema once, now
        except SchemaError as error:
            await self.close(0)
            raise HostError(f"PostgreSQL schema: {error}") from None
        self._runtimes = [PostgresRuntime(pool, execute=self._execute, wake=wake,
                                          on_event=self._on_event, lease_ms=self._lease_ms,
                                          renew_every_ms=self._renew_every_ms)
                          for _ in range(self._worker_count)]
        self.service = SharedService(api_runtime, self._runtimes)
        loop = asyncio.get_running_loop()
        for number, runtime in enumerate(self._runtimes):
            event = asyncio.Event()
            self._events.append(event)
            self._tasks.append(loop.create_task(self._worker(runtime, event,
                                                             prunes=number == 0),
                                                name=f"shared worker {number}"))
        return self.service

    def poke(self) -> None:
        for event in self._events:
            event.set()

    async def backlog(self) -> list[QueueBacklog]:
        """The shared queues' backlog, for the metrics' gauges: one statement
        over the indexes of unsettled jobs (nothing before ``start``)."""
        if self.service is None:
            return []
        backlogs: list[QueueBacklog] = await self.service.runtime.backlog()
        return backlogs

    async def _worker(self, runtime: Any, event: asyncio.Event, *, prunes: bool) -> None:
        while not self._stopping:
            event.clear()
            try:
                # A bounded drain, so that a shutdown is noticed between two.
                results = await runtime.drain(budget_ms=DRAIN_BUDGET_MS)
            except asyncio.CancelledError:
                raise
            except Exception:
                self._log(f"{self._name}: shared worker: drain failed; retrying\n"
                          + traceback.format_exc())
                results = []
            for result in results:
                self._progress.record(result)
            if prunes and not self._stopping:
                await runtime.prune_if_due()  # logs its own failures
            await runtime.flush_history()  # likewise
            if results or self._stopping:
                continue  # there may be more at once
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), self._poll_s)

    def interrupt(self) -> None:
        """Interrupt every worker now (a second shutdown signal)."""
        self._stopping = True
        for task in self._tasks:
            task.cancel()

    async def close(self, grace_s: float) -> None:
        """Let running jobs settle for ``grace_s``, interrupt the rest, close the pool."""
        self._stopping = True
        self.poke()
        await finish_tasks(self._tasks, grace_s)
        if self.service is not None:
            # Counts not written yet, while the pool is open (each logs its failures).
            for runtime in (self.service.runtime, *self._runtimes):
                await runtime.flush_history()
        if self._pool is not None:
            with contextlib.suppress(Exception):
                await self._pool.close(timeout=5.0)
            self._pool = None


class SharedService(RuntimeService):
    """``RuntimeService`` over the API's runtime that also stops local executions.

    A cancellation or failing a lane recorded by the API's runtime would reach
    a worker of this process only at its next lease renewal; the service
    aborts the worker's execution at once, exactly as that renewal would.
    """

    def __init__(self, runtime: Any, workers: Sequence[Any]) -> None:
        super().__init__(runtime)
        self._workers = list(workers)

    async def cancel(self, job_id: str, cancellation_id: str, *,
                     only_if_queued: bool = False) -> CancelResult:
        result: CancelResult = await super().cancel(job_id, cancellation_id,
                                                    only_if_queued=only_if_queued)
        if result.status == "recorded":
            await self._recheck_workers()
        return result

    async def fail_lane(self, lane: str, reason: str) -> FailLaneResult:
        result: FailLaneResult = await super().fail_lane(lane, reason)
        if result.settled:
            await self._recheck_workers()
        return result

    async def _recheck_workers(self) -> None:
        for worker in self._workers:
            await worker.recheck_executing()

