"""PeriodicRenewer and the executor-facing Heartbeat."""

from __future__ import annotations

import asyncio
import gc
import itertools
from typing import Any

import pytest

from tests.support.leases import Boom, Reply, immediately, make_harness, settle
from tickwork.leases import Heartbeat, LeaseState, PeriodicRenewer, StaleReason


async def test_periodic_renewal_writes_the_full_lease_every_interval() -> None:
    h = make_harness(deadline_ms=120_000, default_reply=Reply(latency_ms=50))
    renewer = h.keeper.start_periodic()
    assert renewer.every_ms == 10_000 and renewer.lease_ms == 120_000
    await h.clock.advance_to(35_000)
    assert [(c.started_ms, c.extra_ms) for c in h.store.calls] == [
        (10_000, 120_000),
        (20_000, 120_000),
        (30_000, 120_000),
    ]
    assert h.keeper.deadline_ms == 150_000
    assert len(h.watchdogs()) == 1
    # One tick timer for the renewer, one watchdog for the keeper.
    assert len(h.clock.live_timers(renewer)) == 1
    assert h.clock.peak_live(renewer) == 1


async def test_ticks_and_executor_heartbeats_share_the_single_flight() -> None:
    # The store is slower than the renewal interval: without single flight
    # ticks and heartbeats would pile up writes.
    h = make_harness(deadline_ms=120_000, default_reply=Reply(latency_ms=25_000))
    renewer = h.keeper.start_periodic()
    heartbeat = h.keeper.heartbeat(60_000)

    async def executor() -> None:
        for step in range(100):
            await h.clock.sleep(3_000)
            heartbeat.pulse()  # synchronous progress callback
            if step % 3 == 0:
                assert await heartbeat.beat() is True

    task = asyncio.get_running_loop().create_task(executor())
    await h.clock.run_until(task.done, step_ms=1_000, limit_ms=3_600_000)
    task.result()

    assert h.stale_log.count == 0
    assert h.store.max_in_flight == 1
    assert h.clock.peak_live(h.keeper) == 1
    # Back-to-back writes: each starts when the previous one answers.
    calls = h.store.calls
    assert len(calls) <= h.clock.now_ms() // 25_000 + 1
    assert all(b.started_ms == a.finished_ms for a, b in itertools.pairwise(calls))
    # Ticks ask for 120 s, the executor for 60 s: the longest wins.
    assert all(c.extra_ms == 120_000 for c in calls[1:])
    renewer.stop()


async def test_renewer_stops_when_the_keeper_is_cleared() -> None:
    h = make_harness(deadline_ms=120_000, default_reply=Reply(latency_ms=10))
    tasks_before = asyncio.all_tasks()
    renewer = h.keeper.start_periodic(every_ms=1_000, lease_ms=5_000)
    await h.clock.advance(3_500)
    writes = len(h.store.calls)
    h.keeper.clear()
    assert not renewer.running
    await h.clock.advance(100_000)
    assert len(h.store.calls) == writes == 3
    assert h.clock.live_timers() == []
    assert asyncio.all_tasks() == tasks_before


async def test_renewer_stops_when_the_lease_is_lost() -> None:
    h = make_harness(deadline_ms=120_000, replies=[Reply(10), Reply(10, False)])
    renewer = h.keeper.start_periodic(every_ms=1_000, lease_ms=5_000)
    await h.clock.advance(2_500)
    assert h.stale_log.reasons == [StaleReason.LOST]
    assert not renewer.running
    await h.clock.advance(100_000)
    assert len(h.store.calls) == 2
    assert h.clock.live_timers() == []


async def test_failed_timer_driven_write_is_observed_not_lost() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        error = Boom("connection reset")
        h = make_harness(deadline_ms=120_000, replies=[Reply(10, error)])
        renewer = h.keeper.start_periodic(every_ms=1_000, lease_ms=5_000)
        await h.clock.advance(1_500)
        assert not renewer.running
        stale = h.keeper.stale
        assert stale is not None and stale.reason is StaleReason.RENEW_FAILED
        assert stale.error is error
        assert h.stale_log.count == 1
        del h, renewer, stale
        gc.collect()
        await settle()
        # No "Task/Future exception was never retrieved".
        assert reported == []
    finally:
        loop.set_exception_handler(None)


async def test_renewer_validation_and_lifecycle() -> None:
    h = make_harness(deadline_ms=120_000)
    with pytest.raises(ValueError, match="shorter"):
        h.keeper.start_periodic(every_ms=120_000)
    with pytest.raises(ValueError):
        PeriodicRenewer(h.keeper, every_ms=0)
    renewer = h.keeper.start_periodic(every_ms=1_000, lease_ms=5_000)
    with pytest.raises(RuntimeError):
        h.keeper.start_periodic(every_ms=2_000, lease_ms=5_000)
    renewer.stop()
    renewer.stop()
    renewer.start()  # a stopped renewer stays stopped
    assert not renewer.running
    await h.clock.advance(5_000)
    assert h.store.calls == []
    # The slot is free again once stopped.
    other = h.keeper.start_periodic(every_ms=2_000, lease_ms=5_000)
    assert other.running
    h.keeper.clear()
    assert not other.running


async def test_heartbeat_is_the_executor_view_of_the_keeper() -> None:
    h = make_harness(deadline_ms=120_000, default_reply=Reply(latency_ms=100))
    heartbeat = h.keeper.heartbeat()
    assert isinstance(heartbeat, Heartbeat)
    assert heartbeat.alive and heartbeat.stale is None

    beats = [asyncio.get_running_loop().create_task(heartbeat.beat(30_000)) for _ in range(5)]
    heartbeat.pulse(45_000)
    await h.clock.advance(200)
    assert [b.result() for b in beats] == [True] * 5
    assert [c.extra_ms for c in h.store.calls] == [45_000]
    # The store keeps the claim's longer lease (120 s): the watchdog stays there.
    assert h.keeper.deadline_ms == 120_000 == h.store.stored_lease_ms

    await h.clock.advance_to(119_999)
    assert heartbeat.alive
    await h.clock.advance_to(120_000)
    assert not heartbeat.alive
    assert heartbeat.stale is not None and heartbeat.stale.reason is StaleReason.EXPIRED
    assert await immediately(heartbeat.beat()) is False
    assert h.keeper.state is LeaseState.STALE


async def test_heartbeat_default_duration() -> None:
    h = make_harness(deadline_ms=120_000, lease_ms=90_000, default_reply=Reply(latency_ms=1))
    h.keeper.heartbeat().pulse()
    await h.clock.advance(10)
    h.keeper.heartbeat(15_000).pulse()
    await h.clock.advance(10)
    assert [c.extra_ms for c in h.store.calls] == [90_000, 15_000]


async def test_loop_clock_waits_in_steps_beyond_the_js_timer_limit() -> None:
    """setTimeout fires delays above 2**31 - 1 ms at once; LoopClock must not hand it one."""
    import asyncio

    from tickwork.leases import MAX_TIMER_DELAY_MS, LoopClock, _timers_of

    loop = asyncio.get_running_loop()
    delays: list[float] = []
    original = loop.call_later

    def recording_call_later(delay: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
        delays.append(delay * 1000.0)
        return original(delay, callback, *args)

    loop.call_later = recording_call_later  # type: ignore[method-assign]
    try:
        fired: list[bool] = []
        handle = LoopClock().call_later(3 * MAX_TIMER_DELAY_MS, lambda: fired.append(True))
        assert delays == [MAX_TIMER_DELAY_MS]  # the first step, not the whole delay
        # As if the first step of the loop's one timer elapsed:
        _timers_of(loop)._armed._step()  # type: ignore[union-attr]
        assert len(delays) == 2 and delays[1] <= MAX_TIMER_DELAY_MS
        handle.cancel()
        await asyncio.sleep(0)
        assert fired == []
        short = LoopClock().call_later(5, lambda: fired.append(True))
        assert delays[-1] == pytest.approx(5, abs=0.5)  # measured from its due time
        await asyncio.sleep(0.02)
        assert fired == [True]
        short.cancel()
    finally:
        loop.call_later = original  # type: ignore[method-assign]


async def test_a_renewer_started_late_keeps_the_schedule_of_its_since_time() -> None:
    # Started 4 s after the execution began (a runtime arms its timers when
    # the executor first waits): the first renewal still comes 10 s after
    # the start, then every 10 s.
    h = make_harness(deadline_ms=120_000, default_reply=Reply(latency_ms=50))
    await h.clock.advance_to(4_000)
    renewer = h.keeper.start_periodic(since_ms=0)
    await h.clock.advance_to(25_000)
    assert [c.started_ms for c in h.store.calls] == [10_000, 20_000]
    renewer.stop()


async def test_a_renewer_whose_first_renewal_is_overdue_renews_at_once() -> None:
    h = make_harness(deadline_ms=120_000, default_reply=Reply(latency_ms=50))
    await h.clock.advance_to(15_000)
    renewer = h.keeper.start_periodic(since_ms=0)
    await h.clock.advance_to(15_000)
    assert [c.started_ms for c in h.store.calls] == [15_000]
    await h.clock.advance_to(26_000)
    assert [c.started_ms for c in h.store.calls] == [15_000, 25_000]
    renewer.stop()
