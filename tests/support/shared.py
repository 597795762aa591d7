"""Harness for the shared-runtime suites (PostgreSQL and D1).

A ``SharedHarness`` owns one real database and opens any number of runtimes
over it: each runtime stands for one worker. ``now`` is the test clock that
replaces database time, so lease expiry is exercised without waiting.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from tests.support import CountingWake, ScriptedExecutor
from tickwork.runtimes.shared import SharedRuntime

STORE_KINDS = ("postgres", "d1-external", "d1-builtin")

#: The fixed start of the test clock (2026-11-30T00:00:00Z).
EPOCH_MS = 1_796_000_000_000


class ManualNow:
    """A clock the test moves by hand (epoch milliseconds)."""

    def __init__(self) -> None:
        self.ms = EPOCH_MS

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms


Query = Callable[[str], Awaitable[list[tuple[Any, ...]]]]


def pool_query(pool: Any) -> Query:
    """A raw SELECT (or statement) on a psycopg pool, for test assertions."""
    async def query(statement: str) -> list[tuple[Any, ...]]:
        async with pool.connection() as conn:
            cursor = await conn.execute(statement)
            return await cursor.fetchall() if cursor.description else []
    return query


def d1_query(db: Any) -> Query:
    """A raw SELECT (or statement) on a D1 binding, for test assertions."""
    from tickwork.stores.d1.binding import D1Binding

    return D1Binding(db).query


async def apply_d1_statements(db: Any, statements: Sequence[str]) -> None:
    """Run ``statements`` (a schema's migrations, split) on a D1 binding as one
    batch: one round trip instead of one per statement (the fixtures' setup
    cost), and all or nothing, as D1 runs a batch in one transaction."""
    from tickwork.stores.d1.binding import D1Binding

    statements = list(statements)
    if statements:
        await D1Binding(db).batch([(statement, ()) for statement in statements],
                                  [None] * len(statements))


class WorkerDied(ConnectionError):
    """What a killed worker's store calls raise: nothing it does reaches the database."""


class _DeadStore:
    def __getattr__(self, name: str) -> Any:
        async def dead(*args: Any, **kwargs: Any) -> Any:
            raise WorkerDied(f"this worker is dead; {name} never reached the database")

        return dead


class SharedHarness:
    """One database; ``runtime()`` opens another worker on it."""

    def __init__(
        self,
        kind: str,
        factory: Callable[..., SharedRuntime],
        query: Callable[[str], Awaitable[list[tuple[Any, ...]]]],
    ) -> None:
        self.kind = kind
        self._factory = factory
        self.query = query  # raw SQL against the database, for assertions
        self.now = ManualNow()
        self.wake = CountingWake()
        self.executor = ScriptedExecutor()
        self.runtimes: list[SharedRuntime] = []

    def runtime(self, *, db_time: bool = False, **overrides: Any) -> SharedRuntime:
        """A worker. ``db_time=True`` judges leases by the database clock
        instead of ``self.now``."""
        options: dict[str, Any] = {"execute": self.executor, "wake": self.wake}
        if not db_time:
            options["now"] = self.now
        options.update(overrides)
        runtime = self._factory(**options)
        self.runtimes.append(runtime)
        return runtime

    @staticmethod
    async def kill(runtime: SharedRuntime, task: asyncio.Task[Any]) -> None:
        """The worker running ``task`` dies: its connection is gone, then its task."""
        runtime._store = _DeadStore()  # type: ignore[assignment]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def job_states(self) -> dict[str, tuple[str, str | None]]:
        rows = await self.query("SELECT job_id, state, outcome FROM tickwork_jobs")
        return {row[0]: (row[1], row[2]) for row in rows}


#: How long ``until`` waits for a condition: the time a failing test takes to
#: say so. Generous, because the real-Pyodide tier runs D1 through
#: Miniflare's synchronous proxy beside the rest of the suite on two cores
#: (a claim once took over 5 s there, in a CI run).
UNTIL_TIMEOUT_S = 20.0


async def until(predicate: Callable[[], bool], timeout: float = UNTIL_TIMEOUT_S, *,
                while_running: asyncio.Future[Any] | None = None) -> None:
    """Let the loop run until ``predicate()`` holds. ``while_running`` is the
    task whose work makes it hold: if that task ends first, its own error is
    the failure, not a timeout that hides it."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if while_running is not None and while_running.done():
            ended = while_running.result()  # raises the task's error, if it failed
            raise AssertionError(f"condition not reached: the task it waited on "
                                 f"returned {ended!r} first")
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.005)
