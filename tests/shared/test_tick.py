"""Ticks, outcomes, cancellation and lane refusal on every shared store."""

from __future__ import annotations

import asyncio

from tests.shared.support import SharedHarness, until
from tests.support import job
from tickwork import Failed


async def test_tick_picks_highest_priority_oldest_first_across_queues(
    shared: SharedHarness,
) -> None:
    runtime = shared.runtime()
    await runtime.ingest(job("a-old", queue="a", priority=1))
    await runtime.ingest(job("b-high", queue="b", priority=7))
    await runtime.ingest(job("a-high", queue="a", priority=7))
    await runtime.ingest(job("c-low", queue="c", priority=0))
    order = [(await runtime.tick()).job_id for _ in range(4)]
    assert order == ["b-high", "a-high", "a-old", "c-low"]
    idle = await runtime.tick()
    assert idle.status == "idle" and idle.job_id is None


async def test_every_outcome_is_recorded_once(shared: SharedHarness) -> None:
    runtime = shared.runtime()
    cases = {
        "complete": ("completed", None),
        "fail_reason": ("failed", "card_declined"),
        "raise": ("failed", "execution_failed"),
        "invalid": ("failed", "invalid_outcome"),
        "unknown": ("outcome_unknown", None),
        "cancel": ("cancelled", None),
    }
    for index, action in enumerate(cases):
        await runtime.ingest(job(f"j{index}", queue=f"q{index}",
                                 payload={"do": action, "reason": "card_declined"}))
    for index, (action, (outcome, reason)) in enumerate(cases.items()):
        result = await runtime.tick()
        assert (result.status, result.job_id, result.outcome, result.failure_reason) == (
            "settled", f"j{index}", outcome, reason), action
        stored = await runtime.read(f"j{index}")
        assert stored is not None
        assert (stored.state, stored.outcome, stored.failure_reason) == ("settled", outcome, reason)
        assert stored.started_at is not None and stored.settled_at is not None


async def test_a_second_tick_on_one_runtime_is_busy_and_queues_stay_serial(
    shared: SharedHarness,
) -> None:
    first, second = shared.runtime(), shared.runtime()
    await first.ingest(job("one", payload={"do": "block"}))
    await first.ingest(job("two"))
    await first.ingest(job("elsewhere", queue="other"))
    task = asyncio.create_task(first.tick())
    await until(lambda: "one" in shared.executor.started)
    assert (await first.tick()).status == "busy"
    # Another worker skips the busy queue and runs the other queue's head.
    result = await second.tick()
    assert result.job_id == "elsewhere"
    assert (await second.tick()).status == "idle"
    shared.executor.release("one")
    assert (await task).job_id == "one"
    assert (await second.tick()).job_id == "two"


async def test_cancel_statuses(shared: SharedHarness) -> None:
    runtime = shared.runtime()
    assert (await runtime.cancel("missing", "c")).status == "not_found"
    await runtime.ingest(job("a"))
    assert (await runtime.cancel("a", "c1")).status == "recorded"
    assert (await runtime.cancel("a", "c1")).status == "replayed"
    assert (await runtime.cancel("a", "c2")).status == "conflict"
    result = await runtime.tick()
    assert (result.status, result.job_id, result.outcome) == ("settled", "a", "cancelled")
    await runtime.ingest(job("b"))
    await runtime.tick()
    assert (await runtime.cancel("b", "c")).status == "already_settled"


async def test_cancelled_waiting_job_settles_past_a_busy_queue(shared: SharedHarness) -> None:
    runtime, other = shared.runtime(), shared.runtime()
    await runtime.ingest(job("head", payload={"do": "block"}))
    await runtime.ingest(job("behind"))
    task = asyncio.create_task(runtime.tick())
    await until(lambda: "head" in shared.executor.started)
    await other.cancel("behind", "stop")
    result = await other.tick()
    assert (result.status, result.job_id, result.outcome) == ("settled", "behind", "cancelled")
    assert "behind" not in shared.executor.started
    shared.executor.release("head")
    assert (await task).outcome == "completed"


async def test_cancel_of_a_job_running_here_aborts_it_and_it_settles_cancelled(
    shared: SharedHarness,
) -> None:
    runtime = shared.runtime()
    await runtime.ingest(job("a", payload={"do": "block"}))
    task = asyncio.create_task(runtime.tick())
    await until(lambda: "a" in shared.executor.started)
    assert (await runtime.cancel("a", "c", only_if_queued=True)).status == "refused"
    assert not shared.executor.signals["a"].aborted
    assert (await runtime.cancel("a", "c")).status == "recorded"
    assert shared.executor.signals["a"].reason == "cancelled"
    result = await task
    assert (result.status, result.outcome) == ("settled", "cancelled")


async def test_cancel_of_a_job_another_worker_runs_reaches_it_at_renewal(
    shared: SharedHarness,
) -> None:
    worker = shared.runtime(renew_every_ms=20)
    admin = shared.runtime()
    await admin.ingest(job("a", payload={"do": "block"}))
    task = asyncio.create_task(worker.tick())
    await until(lambda: "a" in shared.executor.started)
    assert (await admin.cancel("a", "c")).status == "recorded"
    await until(lambda: shared.executor.signals["a"].aborted)
    assert shared.executor.signals["a"].reason == "cancelled"
    result = await task
    assert (result.status, result.job_id, result.outcome) == ("settled", "a", "cancelled")


async def test_a_job_cancelled_while_it_runs_settles_cancelled_whatever_it_returns(
    shared: SharedHarness,
) -> None:
    worker, admin = shared.runtime(), shared.runtime()
    await admin.ingest(job("a", payload={"do": "block"}))
    task = asyncio.create_task(worker.tick())
    await until(lambda: "a" in shared.executor.started)
    await admin.cancel("a", "c")  # the worker only learns at its next renewal
    shared.executor.release("a")  # ...and the executor reports completion anyway
    result = await task
    assert (result.status, result.outcome, result.failure_reason) == (
        "settled", "cancelled", "executor_completed")
    stored = await admin.read("a")
    assert stored is not None
    assert (stored.outcome, stored.failure_reason) == ("cancelled", "executor_completed")
    shared_failed = shared.runtime()
    await shared_failed.ingest(job("b", payload={"do": "block"}))
    task = asyncio.create_task(worker.tick())
    await until(lambda: "b" in shared.executor.started)
    await admin.cancel("b", "c")
    shared.executor.release("b", Failed("gave_up"))
    result = await task
    assert (result.status, result.outcome) == ("settled", "cancelled")


async def test_fail_lane_settles_running_and_waiting_work_in_batches(
    shared: SharedHarness,
) -> None:
    runtime = shared.runtime()
    for index in range(300):
        await runtime.ingest(job(f"j{index:03}", queue=f"q{index % 7}", lane="doomed"))
    await runtime.ingest(job("safe", lane="fine"))
    await runtime.ingest(job("first", queue="running-q", lane="doomed", priority=50,
                             payload={"do": "block"}))
    task = asyncio.create_task(runtime.tick())
    await until(lambda: "first" in shared.executor.started)
    assert shared.executor.signals["first"].aborted is False
    first = await runtime.fail_lane("doomed", "tenant_suspended")
    assert (first.settled, first.more) == (256, True)
    # The running job went first, and its local execution was aborted.
    assert shared.executor.signals["first"].reason == "lane_failed"
    result = await task
    assert (result.status, result.job_id, result.outcome, result.failure_reason) == (
        "settled", "first", "failed", "tenant_suspended")
    second = await runtime.fail_lane("doomed", "tenant_suspended")
    assert (second.settled, second.more) == (45, False)
    assert (await runtime.fail_lane("doomed", "tenant_suspended")).settled == 0
    states = await shared.job_states()
    assert states.pop("safe") == ("queued", None)
    assert set(states.values()) == {("settled", "failed")}
    assert (await runtime.tick()).job_id == "safe"


async def test_a_remote_worker_loses_a_refused_claim_at_renewal(shared: SharedHarness) -> None:
    worker = shared.runtime(renew_every_ms=20)
    admin = shared.runtime()
    await admin.ingest(job("a", lane="doomed", payload={"do": "block"}))
    task = asyncio.create_task(worker.tick())
    await until(lambda: "a" in shared.executor.started)
    assert (await admin.fail_lane("doomed", "refused")).settled == 1
    await until(lambda: shared.executor.signals["a"].aborted)
    assert shared.executor.signals["a"].reason == "lease_lost"
    # The worker reports the committed refusal; nothing overwrites it.
    result = await task
    assert (result.status, result.outcome, result.failure_reason) == (
        "settled", "failed", "refused")
