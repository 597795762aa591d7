"""Engine: any store kind behind one harness, for the behaviour suite.

The behaviour suite (``tests/behaviour``) runs unchanged over any kind of
store: owner-local (sqlite3, the Durable Object storage stand-in answering
like either SDK, and in the real-Pyodide tier a JavaScript storage) and
shared (D1 through either SDK, PostgreSQL); under CPython on one kind per
family (``BEHAVIOUR_KINDS``). What differs is kept here:

* ``runtime()`` opens a runtime over the engine's database (another worker,
  for a shared store); ``Jobs`` gives every runtime one async API;
* ``lose(jobs, task)``: the process running ``task`` dies, its claims left
  running; ``make_recoverable()`` then lets a survivor recover them (an
  owner-local survivor's liveness probe says "dead"; a shared store's lease
  must expire first, so the test clock moves past it);
* ``rows(sql)``: the host's own read of the database, for assertions.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Coroutine, Sequence
from typing import Any

from tests.support.shared import until
from tickwork import DEFAULT_LEASE_MS
from tickwork.lifecycle.surface import AsyncSurface, Declared, RuntimeOperations
from tickwork.model.outcomes import (
    TickResult,
)

OWNER_LOCAL_KINDS = ("sqlite3", "do-builtin", "do-external")
SHARED_KINDS = ("d1-external", "d1-builtin", "postgres")
ENGINE_KINDS = OWNER_LOCAL_KINDS + SHARED_KINDS
#: The kinds the behaviour suite runs on under CPython: one store per family.
#: The other kinds differ only below the store port (the Durable Object
#: stand-in's and the D1 binding's SDK shapes), which the store contract
#: suite (tests/contract) exercises method by method on every kind; and the
#: real-Pyodide tier runs the whole behaviour suite again on a JavaScript
#: ctx.storage and on Miniflare's D1 handed to Pyodide.
BEHAVIOUR_KINDS = ("sqlite3", "d1-builtin", "postgres")


class Jobs(RuntimeOperations, AsyncSurface):
    """One runtime, owner-local (synchronous) or shared (async), as one async
    API: every operation of ``RuntimeOperations``, awaited."""

    def __init__(self, runtime: Any) -> None:
        self.runtime = runtime

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.runtime, name)(*args, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        return result

    def _perform_declared(self, declared: Declared[Any, Any], args: tuple[Any, ...],
                          kwargs: dict[str, Any]) -> Coroutine[Any, Any, Any]:
        return self._call(declared.name, *args, **kwargs)

    async def check_ready(self) -> int:
        version: int = await self._call("check_ready")
        return version

    async def fire_schedules(self) -> int:
        created: int = await self._call("fire_schedules")
        return created

    async def tick(self) -> TickResult:
        result: TickResult = await self.runtime.tick()
        return result

    async def prune_if_due(self) -> int:
        """The retention pass the hosts run between loops."""
        pruned: int = await self._call("prune_if_due")
        return pruned

    async def flush_history(self) -> None:
        """Write the history counted in memory, as the hosts do after a loop."""
        await self._call("flush_history")

    async def drain(self, limit: int = 100) -> list[TickResult]:
        """Tick until idle; what each tick did (idle ticks excluded)."""
        results = []
        for _ in range(limit):
            result = await self.tick()
            if result.status == "idle" and result.job_id is None:
                return results
            results.append(result)
        raise AssertionError("the runtime never went idle")


class Engine:
    """One database of one store kind; see the module doc."""

    def __init__(self, kind: str, harness: Any) -> None:
        self.kind = kind
        self.local = kind in OWNER_LOCAL_KINDS or kind == "do-js"
        self.harness = harness  # tests.support.Harness or tests.support.shared.SharedHarness
        self.executor = harness.executor
        self.wake = harness.wake

    def runtime(self, **overrides: Any) -> Jobs:
        """A runtime over the database (for a shared store: another worker)."""
        return Jobs(self.harness.runtime(**overrides))

    def timed_runtime(self, **overrides: Any) -> tuple[Jobs, Any]:
        """A runtime whose clock the test moves by hand, and that clock
        (``ManualNow``: ``advance(ms)``). A shared store's statements take
        it instead of database time, the owner-local runtime as its clock."""
        if self.local:
            from tests.support.shared import ManualNow

            now = ManualNow()
            return self.runtime(clock=now, **overrides), now
        return self.runtime(**overrides), self.harness.now

    def another_process(self, **overrides: Any) -> Jobs:
        """A runtime of another process over the same database: for an
        owner-local store, on a database handle of its own."""
        if self.local:
            self.harness.open()
        return self.runtime(**overrides)

    async def start(self, jobs: Jobs, job_id: str) -> asyncio.Task[TickResult]:
        """Start a tick on ``jobs`` and wait until its executor starts ``job_id``
        (again, if it ran before)."""
        started = self.executor.started
        runs = started.count(job_id)
        task = asyncio.create_task(jobs.tick())
        await until(lambda: started.count(job_id) > runs or task.done())
        if task.done():
            raise AssertionError(f"the tick ended without running {job_id!r}: {task.result()}")
        return task

    async def rows(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The host's own read of the database."""
        if self.local:
            return [tuple(row) for row in self.harness.host_query(statement, tuple(params))]
        assert not params, "shared engines run plain SQL"
        return [tuple(row) for row in await self.harness.query(statement)]

    async def table(self) -> list[tuple[Any, ...]]:
        """Every stored job, every column, in enqueue order ("nothing changed" checks)."""
        return await self.rows("SELECT * FROM tickwork_jobs ORDER BY sequence")

    async def set_schema_version(self, version: int) -> None:
        """Write another schema version into the store, as a newer tickwork would."""
        statement = (f"UPDATE tickwork_meta SET value = '{int(version)}' "
                     "WHERE key = 'schema_version'")
        if self.local:
            self.harness.host_query(statement)
        else:
            await self.harness.query(statement)

    async def job_states(self) -> dict[str, tuple[str, str | None]]:
        rows = await self.rows("SELECT job_id, state, outcome FROM tickwork_jobs")
        return {row[0]: (row[1], row[2]) for row in rows}

    async def lose(self, jobs: Jobs, task: asyncio.Task[Any]) -> None:
        """The process running ``task`` on ``jobs`` dies; nothing it does after
        reaches the database, and its running claims stay as they are."""
        if self.local:
            await self.harness.crash(task)
        else:
            await self.harness.kill(jobs.runtime, task)

    def others_are_alive(self) -> None:
        """Claims other processes hold are alive: an owner-local liveness probe
        says so (a shared store's live leases say so by themselves)."""
        if self.local:
            self.harness.alive = lambda job: True

    def make_recoverable(self) -> None:
        """Let a survivor recover the claims lost processes left running."""
        if not self.local:
            self.harness.now.advance(DEFAULT_LEASE_MS + 1)
