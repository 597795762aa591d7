"""When a shared runtime arms a job's lease timers: once its executor first
waits (no timer can fire before the loop runs), with the watchdog deadline
and first renewal time that arming at the start would have given; never for
a job that finishes without waiting; and a lease already past its deadline
still aborts the signal before the executor runs."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tests.support import job
from tests.support.shared import SharedHarness
from tickwork import Completed, JobRecord, LeasedSignal
from tickwork.leases import LoopClock, TimerHandle
from tickwork.lifecycle.requests import Execute

LEASE_MS, RENEW_EVERY_MS = 120_000, 10_000


class RecordingClock:
    """The loop's clock, moved ahead by ``skip_ms`` at will, recording every
    timer it is asked for (as its delay); the timers are really set."""

    def __init__(self) -> None:
        self._loop_clock = LoopClock()
        self.skip_ms = 0.0
        self.delays: list[float] = []

    def now_ms(self) -> float:
        return self._loop_clock.now_ms() + self.skip_ms

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> TimerHandle:
        self.delays.append(delay_ms)
        return self._loop_clock.call_later(delay_ms, callback)


def _worker(shared: SharedHarness, clock: RecordingClock, execute: Any) -> Any:
    return shared.runtime(clock=clock, execute=execute, lease_ms=LEASE_MS,
                          renew_every_ms=RENEW_EVERY_MS)


async def test_a_job_that_finishes_without_waiting_arms_no_lease_timer(
    shared: SharedHarness,
) -> None:
    clock = RecordingClock()

    async def at_once(job: JobRecord, signal: LeasedSignal) -> Completed:
        return Completed()

    worker = _worker(shared, clock, at_once)
    for n in range(3):
        await worker.ingest(job(f"j{n}", queue=f"q{n}"))
    results = await worker.drain()
    assert [(r.job_id, r.outcome) for r in results] == [
        ("j0", "completed"), ("j1", "completed"), ("j2", "completed")]
    assert clock.delays == []


async def test_a_waiting_job_gets_the_timers_arming_at_its_start_would_give(
    shared: SharedHarness,
) -> None:
    clock = RecordingClock()
    seen: list[list[float]] = []

    async def busy_then_waits(job: JobRecord, signal: LeasedSignal) -> Completed:
        clock.skip_ms += 3_000  # three seconds of work before the first wait
        assert clock.delays == []  # nothing armed yet: the loop has not run
        await asyncio.sleep(0)
        seen.append(list(clock.delays))
        return Completed()

    worker = _worker(shared, clock, busy_then_waits)
    await worker.ingest(job("a"))
    result = await worker.tick()
    assert result.outcome == "completed"
    (armed,) = seen
    watchdog, renewal = armed
    # Both counted from the claim, not from the wait, 3 s later: the
    # watchdog ends with the lease the claim wrote, the first renewal comes
    # RENEW_EVERY_MS after the execution began.
    assert LEASE_MS - 3_000 - 1_000 < watchdog <= LEASE_MS - 3_000
    assert RENEW_EVERY_MS - 3_000 - 1_000 < renewal <= RENEW_EVERY_MS - 3_000


async def test_a_lease_past_its_deadline_aborts_the_signal_before_the_executor_runs(
    shared: SharedHarness,
) -> None:
    clock = RecordingClock()
    seen: list[tuple[bool, str | None]] = []

    async def records_its_signal(job: JobRecord, signal: LeasedSignal) -> Completed:
        seen.append((signal.aborted, signal.reason))
        return Completed()

    worker = _worker(shared, clock, records_its_signal)
    await worker.ingest(job("late"))
    original = worker._execute_claim  # type: ignore[attr-defined]

    async def claimed_long_ago(request: Any) -> Any:
        clock.skip_ms += LEASE_MS + 1  # the claim's lease ran out before it started
        return await original(request)

    worker._answers[Execute] = claimed_long_ago  # type: ignore[attr-defined]
    await worker.tick()
    assert seen == [(True, "lease_expired")]
    assert clock.delays == []  # stale at once: no timer was armed

