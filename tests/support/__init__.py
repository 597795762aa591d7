"""Test harness: builds owner-local runtimes over a real store, as a host would.

``Harness`` owns one database (a sqlite3 file, or a Durable Object storage
stand-in over a sqlite file) and can rebuild runtimes over it, which is how
the tests simulate a process that died and came back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tickwork import (
    AbortSignal,
    Cancelled,
    Completed,
    Failed,
    Job,
    JobRecord,
    OutcomeUnknown,
    OwnerRuntime,
    QueueTransition,
    RateLimited,
    Recovery,
    Retry,
)
from tickwork.ports.database import SyncDatabase
from tickwork.runtimes.owner_local import ConcurrentOwnerRuntime
from tickwork.stores import DurableObjectDatabase, Sqlite3Database

if TYPE_CHECKING:
    import sqlite3  # imported where used: the real-Pyodide tier has no sqlite3

OWNER_KINDS = ("sqlite3", "do-builtin", "do-external")


def job(
    job_id: str,
    queue: str = "q",
    lane: str = "lane",
    priority: int = 0,
    payload: Any = None,
    recovery: Recovery | None = None,
    *,
    run_at: int | None = None,
    delay_ms: int | None = None,
    retry: Retry | None = None,
) -> Job:
    return Job(job_id, queue, lane, priority, {} if payload is None else payload, recovery,
               run_at=run_at, delay_ms=delay_ms, retry=retry)


def unchecked_job(
    job_id: object,
    queue: object = "q",
    lane: object = "lane",
    priority: object = 0,
    payload: object = None,
    recovery: object = None,
    *,
    run_at: object = None,
    delay_ms: object = None,
    retry: object = None,
) -> Job:
    """A Job holding whatever it is given, made around the checks of
    ``Job()``: as a job whose fields changed after it was built (a payload
    mutated, ``object.__setattr__``, an unpickled copy). What ingest's own
    validation is there to refuse."""
    made = object.__new__(Job)
    for name, value in (("job_id", job_id), ("queue", queue), ("lane", lane),
                        ("priority", priority), ("payload", payload), ("recovery", recovery),
                        ("run_at", run_at), ("delay_ms", delay_ms), ("retry", retry)):
        object.__setattr__(made, name, value)
    return made


class CountingWake:
    """A wake that records how often it was asked to recompute."""

    def __init__(self) -> None:
        self.calls = 0

    def recompute(self) -> None:
        self.calls += 1


#: Executor actions that return (or raise) at once, by name.
IMMEDIATE_ACTIONS = ("complete", "fail", "fail_reason", "raise", "unknown", "cancel", "invalid")


def immediate_result(action: str, payload: dict[str, Any]) -> Any:
    """What a scripted executor returns for an immediate action (``raise`` raises)."""
    if action == "complete":
        return Completed()
    if action in ("fail", "fail_reason"):
        return Failed(payload.get("reason"))
    if action == "raise":
        raise RuntimeError("executor exploded")
    if action == "unknown":
        return OutcomeUnknown()
    if action == "cancel":
        return Cancelled()
    if action == "invalid":
        return "not an outcome"
    raise ValueError(f"not an immediate action: {action!r}")


class ScriptedExecutor:
    """Executes jobs according to ``payload["do"]``.

    complete | fail | raise | unknown | cancel | invalid | block |
    rate_limited. ``block`` waits until the test calls ``release(job_id,
    result)`` or the signal is aborted (then it returns ``Failed("stopped")``,
    like an executor that honours its signal). ``rate_limited`` returns
    ``RateLimited(payload["retry_after_ms"], payload.get("hold"))`` on the
    job's first ``payload["times"]`` (default 1) executions, then completes
    (a rate-limited execution uses no attempt, so ``executions`` counts them).
    """

    def __init__(self) -> None:
        self.started: list[str] = []
        self.signals: dict[str, AbortSignal] = {}
        self._gates: dict[str, asyncio.Future[Any]] = {}
        self.running = 0
        self.max_running = 0
        self.executions: dict[str, int] = {}

    async def __call__(self, job: JobRecord, signal: AbortSignal) -> Any:
        self.started.append(job.job_id)
        self.signals[job.job_id] = signal
        executions = self.executions[job.job_id] = self.executions.get(job.job_id, 0) + 1
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            payload = job.payload if isinstance(job.payload, dict) else {}
            action = payload.get("do", "complete")
            await asyncio.sleep(0)
            if action in IMMEDIATE_ACTIONS:
                return immediate_result(action, payload)
            if action == "fail_until":
                # Fails (or, with "raise", raises; with "raise_before", raises
                # on the attempts before that one) until attempt "succeed_on".
                if job.attempt >= payload.get("succeed_on", 1_000_000):
                    return Completed()
                if payload.get("raise") or job.attempt < payload.get("raise_before", 0):
                    raise RuntimeError(f"attempt {job.attempt} exploded")
                return Failed(f"attempt-{job.attempt}", payload.get("retry_after_ms"))
            if action == "rate_limited":
                if executions <= payload.get("times", 1):
                    return RateLimited(payload["retry_after_ms"], payload.get("hold"))
                return Completed()
            if action == "block":
                gate = self._gate(job.job_id)
                aborted = asyncio.ensure_future(signal.wait())
                done, _ = await asyncio.wait({gate, aborted}, return_when=asyncio.FIRST_COMPLETED)
                aborted.cancel()
                if gate in done:
                    result = gate.result()
                    if isinstance(result, BaseException):
                        raise result
                    return result
                return Failed("stopped")
            raise AssertionError(f"unknown scripted action {action!r}")
        finally:
            self.running -= 1

    def _gate(self, job_id: str) -> asyncio.Future[Any]:
        if job_id not in self._gates:
            self._gates[job_id] = asyncio.get_running_loop().create_future()
        return self._gates[job_id]

    def release(self, job_id: str, result: Any = None) -> None:
        self._gate(job_id).set_result(Completed() if result is None else result)


class Harness:
    """One database plus the means to open runtimes over it."""

    def __init__(self, kind: str, directory: Path) -> None:
        self.kind = kind
        self.path = directory / "tickwork.sqlite3"
        self.wake = CountingWake()
        self.executor = ScriptedExecutor()
        self.alive: Callable[[JobRecord], Any] = lambda job: False
        self.projections: list[QueueTransition] = []
        self._connection: sqlite3.Connection | None = None
        self._storage: Any = None
        self._opened: list[sqlite3.Connection] = []
        self.open()

    # -- the store -----------------------------------------------------------
    def open(self) -> None:
        """(Re)open the database, as a restarted process would."""
        # Earlier connections stay open: a runtime built on them may still be
        # running (the "process" that a test pretends has died).
        if self.kind == "sqlite3":
            import sqlite3

            self._connection = sqlite3.connect(self.path)
            self._opened.append(self._connection)
        else:
            from tests.support.fakes.do_storage import FakeDurableObjectStorage

            sdk = "builtin" if self.kind == "do-builtin" else "external"
            self._storage = FakeDurableObjectStorage(str(self.path), sdk=sdk)

    def database(self) -> SyncDatabase:
        if self.kind == "sqlite3":
            return Sqlite3Database(self._connection)
        return DurableObjectDatabase(self._storage)

    def runtime(self, **overrides: Any) -> OwnerRuntime:
        options: dict[str, Any] = {
            "execute": self.executor,
            "is_alive": lambda job: self.alive(job),
            "wake": self.wake,
        }
        options.update(overrides)
        return OwnerRuntime(self.database(), **options)

    def concurrent_runtime(self, lane: str = "fast", **overrides: Any) -> ConcurrentOwnerRuntime:
        """A runtime whose concurrent lane is ``lane`` (built like ``runtime``)."""
        runtime = self.runtime(concurrent_lane=lane, **overrides)
        assert isinstance(runtime, ConcurrentOwnerRuntime)
        return runtime

    def recording_projector(self) -> Callable[[QueueTransition], None]:
        def project(transition: QueueTransition) -> None:
            self.projections.append(transition)

        return project

    # -- the host's own SQL, outside the engine --------------------------------
    def host_execute(self, statement: str, params: tuple[Any, ...] = ()) -> None:
        if self.kind == "sqlite3":
            assert self._connection is not None
            self._connection.execute(statement, params)
        else:
            # As a host would: None must travel as JS null, not undefined.
            DurableObjectDatabase(self._storage).execute(statement, params)

    def host_query(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.kind == "sqlite3":
            assert self._connection is not None
            return [tuple(row) for row in self._connection.execute(statement, params)]
        return DurableObjectDatabase(self._storage).query(statement, params)

    def host_transaction(self, fn: Callable[[], Any]) -> Any:
        """Run fn inside a transaction the host opened (and commit it)."""
        if self.kind == "sqlite3":
            assert self._connection is not None
            connection = self._connection
            connection.execute("BEGIN")
            try:
                result = fn()
            except BaseException:
                connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")
            return result
        return self._storage.transactionSync(fn)

    async def crash(self, task: asyncio.Task[Any], *more: asyncio.Task[Any]) -> None:
        """Kill the "process" running ``task`` (and ``more`` tasks of it, e.g.
        both tick slots): its database handle dies with it.

        Nothing the dying runtime does afterwards reaches the database; a new
        handle is opened for the runtimes built after the crash.
        """
        if self.kind == "sqlite3":
            assert self._connection is not None
            self._connection.close()
        else:
            self._storage.close()
        tasks = (task, *more)
        for dying in tasks:
            dying.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.open()

    def close(self) -> None:
        for connection in self._opened:
            connection.close()
        if self._storage is not None and hasattr(self._storage, "close"):
            self._storage.close()
