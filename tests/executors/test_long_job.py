"""The long job: payload checks, stopping on its signal, and heartbeats that keep a
shared runtime's lease alive past its length."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import pytest

from tests.support import job
from tests.support.shared import SharedHarness
from tickwork import (
    AbortSignal,
    Cancelled,
    Completed,
    Failed,
    Job,
    JobRecord,
    OutcomeUnknown,
    OwnerRuntime,
)
from tickwork.executors import long_job
from tickwork.stores import Sqlite3Database


def record(payload: Any) -> JobRecord:
    return JobRecord("long-1", "q", "lane", 0, payload, None, "running", None, None,
                     1, 0, 0, 0, None)


class FakeHeartbeat:
    def __init__(self, answers: list[Any] | None = None) -> None:
        self.answers = answers or []
        self.beats = 0
        self.stale: Any = None

    async def beat(self, extra_ms: int | None = None) -> bool:
        self.beats += 1
        answer = self.answers.pop(0) if self.answers else True
        if isinstance(answer, BaseException):
            raise answer
        return bool(answer)


class LeasedLike(AbortSignal):
    __slots__ = ("heartbeat",)

    def __init__(self, heartbeat: Any) -> None:
        super().__init__()
        self.heartbeat = heartbeat


@pytest.mark.parametrize("payload", [
    None, [], {}, {"steps": 1}, {"step_ms": 0}, {"steps": 0, "step_ms": 0},
    {"steps": 10_001, "step_ms": 0}, {"steps": 1, "step_ms": -1},
    {"steps": 1, "step_ms": 3_600_001}, {"steps": True, "step_ms": 0},
    {"steps": 1.0, "step_ms": 0}, {"steps": "2", "step_ms": 0},
])
async def test_a_bad_payload_fails(payload: Any) -> None:
    assert await long_job(record(payload), AbortSignal()) == Failed("bad_payload")


async def test_it_completes_and_beats_after_every_step() -> None:
    heartbeat = FakeHeartbeat()
    result = await long_job(record({"steps": 4, "step_ms": 1, "kind": "long"}),
                            LeasedLike(heartbeat))
    assert result == Completed()
    assert heartbeat.beats == 4


async def test_an_owner_local_signal_needs_no_heartbeat() -> None:
    assert await long_job(record({"steps": 3, "step_ms": 0}), AbortSignal()) == Completed()


async def test_an_already_aborted_signal_stops_before_the_first_step() -> None:
    signal = LeasedLike(FakeHeartbeat())
    signal._abort("cancelled")
    assert await long_job(record({"steps": 3, "step_ms": 0}), signal) == Cancelled()
    assert signal.heartbeat.beats == 0


@pytest.mark.parametrize(("reason", "expected"), [
    ("cancelled", Cancelled()), ("lane_failed", Cancelled()), ("interrupted", Cancelled()),
    ("lease_expired", OutcomeUnknown()), ("lease_lost", OutcomeUnknown()),
    ("lease_renew_failed", OutcomeUnknown()),
])
async def test_an_abort_during_a_step_stops_at_once(reason: str, expected: Any) -> None:
    signal = AbortSignal()
    loop = asyncio.get_running_loop()
    started = loop.time()
    running = asyncio.create_task(long_job(record({"steps": 5, "step_ms": 60_000}), signal))
    await asyncio.sleep(0.01)
    signal._abort(reason)
    assert await asyncio.wait_for(running, 1) == expected
    assert loop.time() - started < 1


@pytest.mark.parametrize("answers", [[True, False], [True, ConnectionError("renewal failed")]])
async def test_a_lost_lease_stops_with_outcome_unknown(answers: list[Any]) -> None:
    heartbeat = FakeHeartbeat(answers)
    result = await long_job(record({"steps": 5, "step_ms": 0}), LeasedLike(heartbeat))
    assert result == OutcomeUnknown()
    assert heartbeat.beats == 2


async def test_a_stale_heartbeat_stops_with_outcome_unknown() -> None:
    heartbeat = FakeHeartbeat()
    heartbeat.stale = object()
    assert await long_job(record({"steps": 5, "step_ms": 0}),
                          LeasedLike(heartbeat)) == OutcomeUnknown()
    assert heartbeat.beats == 1


class Wake:
    def recompute(self) -> None:
        pass


async def test_owner_local_cancellation_settles_cancelled() -> None:
    runtime = OwnerRuntime(Sqlite3Database(sqlite3.connect(":memory:", isolation_level=None)),
                           execute=long_job, is_alive=lambda job: False, wake=Wake())
    runtime.ingest(Job("long", "q", "lane", 0, {"steps": 100, "step_ms": 50}))
    ticking = asyncio.create_task(runtime.tick())
    await asyncio.sleep(0.08)
    assert runtime.cancel("long", "stop").status == "recorded"
    result = await asyncio.wait_for(ticking, 2)
    assert (result.status, result.outcome) == ("settled", "cancelled")


# ------------------------------------------------------- shared runtime leases

LEASE_MS = 600
STEPS, STEP_MS = 16, 100  # 1.6 s: over two and a half leases long


@pytest.fixture
def no_periodic_renewal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Switch the runtimes' own periodic lease renewal off: only the executor's
    heartbeats extend a lease."""
    from tickwork.leases import LeaseKeeper

    monkeypatch.setattr(LeaseKeeper, "start_periodic", lambda self, **options: None)


def heartbeats_only(shared: SharedHarness, **options: Any) -> Any:
    """A worker on database time with a short lease."""
    return shared.runtime(db_time=True, lease_ms=LEASE_MS, renew_every_ms=LEASE_MS - 1,
                          **options)


async def until_executing(worker: Any, job_id: str) -> None:
    """Wait until ``worker`` has claimed ``job_id`` and runs it: a thief that
    ticked before that claim would take the job itself, which is not what
    these tests are about (a loaded machine can take over 50 ms to claim)."""
    for _ in range(500):
        if any(record.job_id == job_id for record in worker.executing()):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the worker never claimed {job_id!r}")


async def thief_finds_nothing(shared: SharedHarness, done: asyncio.Task[Any]) -> float:
    """Another worker ticks every 150 ms while ``done`` runs, and must find
    nothing to recover; returns how long after the start it last looked (s)."""
    thief = shared.runtime(db_time=True, lease_ms=LEASE_MS, renew_every_ms=LEASE_MS - 1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    last = 0.0
    while not done.done():
        await asyncio.sleep(0.15)
        if done.done():
            break
        looked = loop.time() - started
        result = await thief.tick()
        assert result.status == "idle", result
        last = looked
    return last


@pytest.mark.usefixtures("no_periodic_renewal")
async def test_heartbeats_keep_the_lease_alive_past_its_length(shared: SharedHarness) -> None:
    worker = heartbeats_only(shared, execute=long_job)
    await worker.ingest(job("long", payload={"steps": STEPS, "step_ms": STEP_MS}))
    ticking = asyncio.create_task(worker.tick())
    await until_executing(worker, "long")
    last_look = await thief_finds_nothing(shared, ticking)
    result = await ticking
    assert (result.status, result.job_id, result.outcome) == ("settled", "long", "completed")
    # the thief looked well past two lease lengths and found no expired lease
    assert last_look > 2 * LEASE_MS / 1000


@pytest.mark.usefixtures("no_periodic_renewal")
async def test_without_heartbeats_the_same_lease_expires(shared: SharedHarness) -> None:
    """The control: the same job length with no heartbeat loses its lease, and
    another worker recovers the job."""

    async def silent(job_record: JobRecord, signal: Any) -> Completed:
        await asyncio.sleep(STEPS * STEP_MS / 1000)
        return Completed()

    worker = heartbeats_only(shared, execute=silent)
    await worker.ingest(job("long"))
    ticking = asyncio.create_task(worker.tick())
    await until_executing(worker, "long")
    thief = shared.runtime(db_time=True, lease_ms=LEASE_MS, renew_every_ms=LEASE_MS - 1)
    recovered = None
    for _ in range(40):
        await asyncio.sleep(0.05)
        result = await thief.tick()
        if result.job_id == "long":
            recovered = result
            break
    assert recovered is not None and recovered.outcome == "interrupted"
    late = await ticking  # its settlement is refused: the job is no longer its own
    assert (late.status, late.job_id) == ("idle", "long")
    assert late.reason in ("lease_expired", "claim_replaced")


async def test_a_cancellation_reaches_a_long_job_on_another_worker(
        shared: SharedHarness) -> None:
    worker = shared.runtime(db_time=True, lease_ms=5_000, renew_every_ms=50,
                            execute=long_job)
    await worker.ingest(job("long", payload={"steps": 100, "step_ms": 50}))
    ticking = asyncio.create_task(worker.tick())
    await asyncio.sleep(0.1)
    other = shared.runtime(db_time=True)
    assert (await other.cancel("long", "stop")).status == "recorded"
    result = await asyncio.wait_for(ticking, 5)
    assert (result.status, result.outcome) == ("settled", "cancelled")
