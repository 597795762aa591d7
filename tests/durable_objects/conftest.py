"""A JobOwner deployment on stand-ins: namespace, storage, alarms, simulated clock.

``host`` is parametrised over both storage shapes (built-in SDK: raw JS
proxies and ``jsnull``; external SDK: dict rows). The object class is a
``JobOwner`` subclass whose only changes are test hooks: the executor and the
clock come from ``env``, and its storage can be made to fail (``host.faults``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.support.fakes.alarms import AlarmScheduler, SimClock
from tests.support.fakes.do_namespace import FakeDurableObjectNamespace
from tests.support.fakes.do_storage import Sdk
from tests.support.fakes.pyodide_ffi import JsException, fake_pyodide
from tests.support.fakes.workers_module import installed_workers_module
from tickwork import AbortSignal, Completed, Failed, JobRecord, RateLimited

OWNER = "tenant-1"
STORAGE_ERROR = "SQLITE_IOERR: disk I/O error"


@dataclass
class Faults:
    """Switches that make an object's storage throw, as a failing runtime would."""

    sql: bool = False
    alarms: bool = False


class FlakySql:
    def __init__(self, sql: Any, faults: Faults) -> None:
        self._sql = sql
        self._faults = faults

    def exec(self, query: str, *bindings: Any) -> Any:
        if self._faults.sql:
            raise JsException("Error", STORAGE_ERROR)
        return self._sql.exec(query, *bindings)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sql, name)


class FlakyStorage:
    """``ctx.storage`` passed through, failing while ``faults`` says so."""

    def __init__(self, storage: Any, faults: Faults) -> None:
        self._storage = storage
        self._faults = faults

    @property
    def sql(self) -> FlakySql:
        return FlakySql(self._storage.sql, self._faults)

    def transactionSync(self, fn: Any) -> Any:
        return self._storage.transactionSync(fn)

    def _alarm_call(self, method: str, *args: Any) -> Any:
        if self._faults.alarms:
            raise JsException("Error", STORAGE_ERROR)
        return getattr(self._storage, method)(*args)

    def getAlarm(self) -> Any:
        return self._alarm_call("getAlarm")

    def setAlarm(self, when: Any) -> Any:
        return self._alarm_call("setAlarm", when)

    def deleteAlarm(self) -> Any:
        return self._alarm_call("deleteAlarm")


@dataclass
class Script:
    """The test executor. ``payload["do"]``: ``complete`` (default), ``sync``
    (completes without ever awaiting), ``fail``,
    ``raise``, ``block`` (until released or aborted), ``block_first`` (block on
    the first attempt only), ``slow`` (advance the clock by ``payload["ms"]``),
    ``rate_limited`` (``RateLimited(payload["ms"])`` on its first execution)."""

    clock: SimClock
    started: list[str] = field(default_factory=list)
    attempts: Counter[str] = field(default_factory=Counter)
    signals: dict[str, AbortSignal] = field(default_factory=dict)
    blocked: asyncio.Event = field(default_factory=asyncio.Event)
    _gates: dict[str, asyncio.Event] = field(default_factory=dict)

    async def __call__(self, job: JobRecord, signal: AbortSignal) -> Any:
        self.started.append(job.job_id)
        self.attempts[job.job_id] += 1
        self.signals[job.job_id] = signal
        payload = job.payload if isinstance(job.payload, dict) else {}
        action = payload.get("do", "complete")
        if action == "sync":
            return Completed()
        await asyncio.sleep(0)
        if action == "fail":
            return Failed("declined")
        if action == "raise":
            raise RuntimeError("executor exploded")
        if action == "slow":
            self.clock.advance(int(payload["ms"]))
            return Completed()
        if action == "rate_limited" and self.attempts[job.job_id] == 1:
            return RateLimited(int(payload["ms"]))
        if action == "block" or (action == "block_first" and self.attempts[job.job_id] == 1):
            gate = self._gates.setdefault(job.job_id, asyncio.Event())
            self.blocked.set()
            aborted = asyncio.ensure_future(signal.wait())
            released = asyncio.ensure_future(gate.wait())
            try:
                await asyncio.wait({aborted, released}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                aborted.cancel()
                released.cancel()
            return Completed() if gate.is_set() else Failed("stopped")
        return Completed()

    def release(self, job_id: str) -> None:
        self._gates.setdefault(job_id, asyncio.Event()).set()


@dataclass
class Host:
    namespace: FakeDurableObjectNamespace
    scheduler: AlarmScheduler
    clock: SimClock
    executor: Script
    faults: Faults
    owner_class: Any  # the JobOwner subclass (built under the stand-in workers module)

    def stub(self, name: str = OWNER) -> DecodingStub:
        """The object's stub for tests: jobs given as dicts are sent as RPC
        text and every reply's JSON text is decoded (see ``DecodingStub``)."""
        return DecodingStub(self.namespace.getByName(name))

    def raw_stub(self, name: str = OWNER) -> Any:
        """The object's stub as the Worker has it: text in, text out."""
        return self.namespace.getByName(name)

    def instance(self, name: str = OWNER) -> Any:
        return self.namespace.instance(name)

    def rows(self, name: str = OWNER) -> dict[str, tuple[Any, ...]]:
        """job_id -> (state, outcome, failure_reason, recoveries, cancellation_id),
        read straight from the object's SQLite file."""
        return {row[0]: tuple(row[1:]) for row in self.namespace.storage(name).debug_query(
            "SELECT job_id, state, outcome, failure_reason, recoveries, cancellation_id"
            " FROM tickwork_jobs ORDER BY sequence")}

    async def alarm(self, name: str = OWNER) -> int | None:
        return await self.scheduler.alarm_of(name)


class DecodingStub:
    """A ``JobOwner`` stub that speaks dicts to the test and text over RPC.

    ``ingest(job_or_jobs)`` sends the JSON text of the job list (one job
    dict is sent as a list of one); a str argument is sent as it is. Every
    reply (JSON text of an envelope) comes back decoded, so tests read
    ``reply["value"]``. What crosses the stand-in's RPC boundary is exactly
    what ``RpcService`` sends: text, str and bool.
    """

    def __init__(self, stub: Any) -> None:
        self._stub = stub

    def __getattr__(self, method: str) -> Any:
        remote = getattr(self._stub, method)

        async def call(*args: Any) -> Any:
            if method == "ingest" and args and not isinstance(args[0], str):
                items = args[0] if isinstance(args[0], list) else [args[0]]
                args = (json.dumps(items), *args[1:])
            reply = await remote(*args)
            return json.loads(reply) if isinstance(reply, str) else reply

        return call


def job(job_id: str, queue: str = "q", **fields: Any) -> dict[str, Any]:
    """A job in the wire shape (``tickwork.api.wire.job_to_wire``)."""
    return {"job_id": job_id, "queue": queue, **fields}


@pytest.fixture(params=["builtin", "external"])
def host(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Host]:
    with hosted(request.param, tmp_path) as made:
        yield made


@contextlib.contextmanager
def hosted(sdk: Sdk, tmp_path: Path, *, db: Any = None) -> Iterator[Host]:
    """A ``Host`` whose objects' storage has the ``sdk`` shape; with ``db``,
    their env has it as the ``DB`` binding (D1: the directory of owners)."""
    with installed_workers_module(), fake_pyodide():
        from durable_objects.job_owner import JobOwner

        class TestJobOwner(JobOwner):
            def __init__(self, ctx: Any, env: Any) -> None:
                ctx.storage = FlakyStorage(ctx.storage, env.FAULTS)
                super().__init__(ctx, env)

            def _executor(self) -> Any:
                return self.env.EXECUTOR

            def _now_ms(self) -> int:
                clock: SimClock = self.env.CLOCK
                return clock()

        clock = SimClock()
        executor = Script(clock)
        faults = Faults()
        env = SimpleNamespace(CLOCK=clock, EXECUTOR=executor, FAULTS=faults)
        if db is not None:
            env.DB = db
        namespace = FakeDurableObjectNamespace(TestJobOwner, env, directory=tmp_path,
                                               sdk=sdk)
        env.JOB_OWNERS = namespace
        yield Host(namespace, AlarmScheduler(namespace, clock), clock, executor, faults,
                   TestJobOwner)
        namespace.close()
