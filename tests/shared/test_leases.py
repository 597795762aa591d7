"""Leases: expiry recovery, fencing of late writes, renewal, renewal failure."""

from __future__ import annotations

import asyncio

import pytest

from tests.support import ScriptedExecutor, job
from tests.support.shared import SharedHarness, WorkerDied, until
from tickwork import Completed, JobRecord, LeasedSignal, Recovery
from tickwork.lifecycle import LEASE_EXPIRED

LEASE = 120_000


async def _start_blocked(shared: SharedHarness, runtime: object, job_id: str) -> asyncio.Task:
    task = asyncio.create_task(runtime.tick())  # type: ignore[attr-defined]
    await until(lambda: job_id in shared.executor.started, while_running=task)
    return task


async def test_a_killed_worker_is_recovered_after_its_lease_expires(
    shared: SharedHarness,
) -> None:
    doomed, survivor = shared.runtime(), shared.runtime()
    await survivor.ingest(job("a", payload={"do": "block"}, recovery=Recovery(1)))
    await survivor.ingest(job("b", queue="other", payload={"do": "block"}))
    task_a = await _start_blocked(shared, doomed, "a")
    await shared.kill(doomed, task_a)
    other = shared.runtime()
    task_b = await _start_blocked(shared, other, "b")
    await shared.kill(other, task_b)
    assert (await shared.job_states())["a"] == ("running", None)
    # Not yet expired: nothing to recover, the queues stay busy.
    shared.now.advance(LEASE - 1)
    assert (await survivor.tick()).status == "idle"
    shared.now.advance(1)
    # With budget left the job goes back to its queue...
    assert (await survivor.tick()).status == "requeued"
    # ...without budget it settles interrupted.
    result = await survivor.tick()
    assert (result.status, result.job_id, result.outcome) == ("settled", "b", "interrupted")
    record = await survivor.read("a")
    assert record is not None and (record.state, record.recoveries) == ("queued", 1)
    shared.executor.signals.clear()
    task = await _start_blocked(shared, survivor, "a")
    shared.executor.release("a")
    assert (await task).outcome == "completed"


async def test_a_late_settlement_after_expiry_is_rejected_and_not_written(
    shared: SharedHarness,
) -> None:
    slow = shared.runtime()
    await slow.ingest(job("a", payload={"do": "block"}))
    task = await _start_blocked(shared, slow, "a")
    shared.now.advance(LEASE + 1)
    shared.executor.release("a")
    result = await task
    assert (result.status, result.job_id, result.reason) == ("idle", "a", LEASE_EXPIRED)
    assert (await shared.job_states())["a"] == ("running", None)
    # Any worker's next tick recovers it honestly.
    result = await shared.runtime().tick()
    assert (result.job_id, result.outcome) == ("a", "interrupted")


async def test_a_replaced_claim_cannot_settle(shared: SharedHarness) -> None:
    slow_executor = ScriptedExecutor()
    slow, other = shared.runtime(execute=slow_executor), shared.runtime()
    await slow.ingest(job("a", payload={"do": "block"}, recovery=Recovery(5)))
    task = asyncio.create_task(slow.tick())
    await until(lambda: "a" in slow_executor.started, while_running=task)
    shared.now.advance(LEASE)
    assert (await other.tick()).status == "requeued"
    second = await _start_blocked(shared, other, "a")
    # The first execution finishes late: its claim was replaced.
    slow_executor.release("a")
    result = await task
    assert (result.status, result.reason) == ("idle", "claim_replaced")
    shared.executor.release("a")
    assert (await second).outcome == "completed"
    record = await other.read("a")
    assert record is not None and record.recoveries == 1


async def test_renewal_cannot_resurrect_an_expired_claim(shared: SharedHarness) -> None:
    worker = shared.runtime()
    await worker.ingest(job("a", payload={"do": "block"}))
    task = await _start_blocked(shared, worker, "a")
    shared.now.advance(LEASE + 5)
    heartbeat = shared.executor.signals["a"].heartbeat  # type: ignore[attr-defined]
    assert await heartbeat.beat() is False
    assert shared.executor.signals["a"].reason == "lease_lost"
    result = await task
    assert result.reason == LEASE_EXPIRED
    # A renewal never moved the lease: the job is still recoverable.
    assert (await shared.runtime().tick()).outcome == "interrupted"


async def test_periodic_renewal_keeps_a_slow_job_alive_on_database_time(
    shared: SharedHarness,
) -> None:
    # The lease leaves 1,900 ms for a renewal's round trip. Under real
    # Pyodide and Miniflare on a loaded 2-core machine one took over the
    # 350 ms a 400 ms lease renewed every 50 ms left, and later over the
    # 900 ms of a 1,000 ms lease (a fresh-clone CI run with other tests
    # running beside it); each time the job lost its lease.
    worker = shared.runtime(db_time=True, lease_ms=2000, renew_every_ms=100)
    thief = shared.runtime(db_time=True, lease_ms=2000, renew_every_ms=100)
    await worker.ingest(job("slow", payload={"do": "block"}))
    task = await _start_blocked(shared, worker, "slow")
    for _ in range(8):  # 6.4 s: three leases long
        await asyncio.sleep(0.8)
        assert (await thief.tick()).status == "idle"
    shared.executor.release("slow")
    result = await task
    assert (result.status, result.outcome) == ("settled", "completed")


async def test_a_hung_renewal_lets_the_lease_run_out_on_database_time(
    shared: SharedHarness,
) -> None:
    seen: list[str] = []

    async def stubborn(job: JobRecord, signal: LeasedSignal) -> Completed:
        seen.append(await signal.wait())  # told to stop when the local lease ran out
        await asyncio.sleep(0.3)  # ...and finishes well after the durable one did
        return Completed()

    worker = shared.runtime(db_time=True, lease_ms=300, renew_every_ms=100, execute=stubborn)
    await worker.ingest(job("slow"))

    async def hung_renew(*args: object) -> str:
        await asyncio.Event().wait()  # the store never answers
        raise AssertionError("unreachable")

    worker._store.renew = hung_renew  # type: ignore[attr-defined]
    result = await worker.tick()
    assert seen == ["lease_expired"]
    assert (result.status, result.job_id, result.reason) == ("idle", "slow", LEASE_EXPIRED)
    assert (await shared.job_states())["slow"] == ("running", None)
    recovered = await shared.runtime(db_time=True).tick()
    assert (recovered.job_id, recovered.outcome) == ("slow", "interrupted")


async def test_a_store_error_during_renewal_aborts_the_execution(shared: SharedHarness) -> None:
    worker = shared.runtime(renew_every_ms=20)
    await worker.ingest(job("a", payload={"do": "block"}))

    async def broken_renew(*args: object) -> str:
        raise WorkerDied("connection reset during renewal")

    store = worker._store  # type: ignore[attr-defined]
    original = store.renew
    store.renew = broken_renew
    try:
        task = await _start_blocked(shared, worker, "a")
        await until(lambda: shared.executor.signals["a"].aborted)
        assert shared.executor.signals["a"].reason == "lease_renew_failed"
        result = await task
    finally:
        store.renew = original
    # The lease had not expired, so the settlement is honest and lands.
    assert (result.status, result.outcome, result.failure_reason) == (
        "settled", "failed", "stopped")


async def test_heartbeat_extends_the_lease_past_its_first_expiry(shared: SharedHarness) -> None:
    worker, other = shared.runtime(), shared.runtime()
    await worker.ingest(job("a", payload={"do": "block"}))
    task = await _start_blocked(shared, worker, "a")
    heartbeat = shared.executor.signals["a"].heartbeat  # type: ignore[attr-defined]
    shared.now.advance(LEASE - 10)
    assert await heartbeat.beat(LEASE) is True
    shared.now.advance(LEASE - 10)
    assert (await other.tick()).status == "idle"
    shared.executor.release("a")
    assert (await task).outcome == "completed"


@pytest.mark.parametrize("lease_ms", [0, -5, 2**53])
async def test_bad_lease_settings_are_refused(shared: SharedHarness, lease_ms: int) -> None:
    from tickwork import InvalidArgument

    with pytest.raises(InvalidArgument):
        shared.runtime(lease_ms=lease_ms)
    with pytest.raises(InvalidArgument):
        shared.runtime(lease_ms=1000, renew_every_ms=1000)


async def test_recheck_executing_stops_what_another_runtime_cancelled_or_refused(
    shared: SharedHarness,
) -> None:
    worker, api = shared.runtime(), shared.runtime()
    await api.ingest(job("a", payload={"do": "block"}))
    await api.ingest(job("b", queue="other", lane="bad", payload={"do": "block"}))
    await api.ingest(job("c", queue="third", payload={"do": "block"}))
    helpers = [shared.runtime(), shared.runtime()]
    tasks = [await _start_blocked(shared, runtime, name)
             for runtime, name in zip([worker, *helpers], ["a", "b", "c"], strict=True)]
    assert [j.job_id for j in worker.executing()] == ["a"]
    # Nothing changed yet: nobody is stopped.
    assert [await r.recheck_executing() for r in (worker, *helpers)] == [0, 0, 0]
    assert (await api.cancel("a", "stop")).status == "recorded"
    assert (await api.fail_lane("bad", "suspended")).settled == 1
    assert [await r.recheck_executing() for r in (worker, *helpers)] == [1, 1, 0]
    assert shared.executor.signals["a"].reason == "cancelled"
    assert shared.executor.signals["b"].reason == "lease_lost"
    assert not shared.executor.signals["c"].aborted
    assert (await tasks[0]).outcome == "cancelled"
    assert ((await tasks[1]).outcome, (await api.read("b")).failure_reason) == (  # type: ignore[union-attr]
        "failed", "suspended")
    shared.executor.release("c")
    assert (await tasks[2]).outcome == "completed"


async def test_a_short_heartbeat_does_not_abort_a_job_whose_lease_is_live(
    shared: SharedHarness,
) -> None:
    """The renewal statement keeps the longer of the stored lease and now + 50
    ms, so the lease stays two minutes ahead: the local watchdog must not go
    off 50 ms later (it did, before the keeper stopped shortening its
    deadline) and report a healthy job stale."""
    worker = shared.runtime()
    await worker.ingest(job("a", payload={"do": "block"}))
    task = await _start_blocked(shared, worker, "a")
    signal = shared.executor.signals["a"]
    assert await signal.heartbeat.beat(50) is True  # type: ignore[attr-defined]
    await asyncio.sleep(0.5)  # real time: the keeper's watchdog runs on the loop's clock
    assert not signal.aborted, signal.reason
    shared.executor.release("a")
    result = await task
    assert (result.status, result.outcome) == ("settled", "completed")


async def test_cancel_of_a_job_another_worker_runs_reaches_it_at_renewal(
    shared: SharedHarness,
) -> None:
    worker = shared.runtime(renew_every_ms=20)
    admin = shared.runtime()
    await admin.ingest(job("a", payload={"do": "block"}))
    task = asyncio.create_task(worker.tick())
    await until(lambda: "a" in shared.executor.started, while_running=task)
    assert (await admin.cancel("a", "c")).status == "recorded"
    await until(lambda: shared.executor.signals["a"].aborted)
    assert shared.executor.signals["a"].reason == "cancelled"
    result = await task
    assert (result.status, result.job_id, result.outcome) == ("settled", "a", "cancelled")


async def test_a_remote_worker_loses_a_claim_whose_lane_failed_at_renewal(
    shared: SharedHarness,
) -> None:
    worker = shared.runtime(renew_every_ms=20)
    admin = shared.runtime()
    await admin.ingest(job("a", lane="doomed", payload={"do": "block"}))
    task = asyncio.create_task(worker.tick())
    await until(lambda: "a" in shared.executor.started, while_running=task)
    assert (await admin.fail_lane("doomed", "tenant_gone")).settled == 1
    await until(lambda: shared.executor.signals["a"].aborted)
    assert shared.executor.signals["a"].reason == "lease_lost"
    # The worker reports the committed failure; nothing overwrites it.
    result = await task
    assert (result.status, result.outcome, result.failure_reason) == (
        "settled", "failed", "tenant_gone")
