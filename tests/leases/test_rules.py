"""One group of tests per numbered rule of issue #4.

Every test drives virtual time (FakeClock) and a FakeStore whose writes the
test answers by hand, so the interleavings are exact and nothing sleeps.
"""

from __future__ import annotations

import asyncio
import itertools
import traceback
from collections.abc import Coroutine
from typing import Any

import pytest

from tests.support.leases import (
    Boom,
    FakeClock,
    FakeStore,
    Reply,
    StaleLog,
    immediately,
    make_harness,
    settle,
)
from tickwork.leases import (
    DEFAULT_LEASE_MS,
    DEFAULT_RENEW_EVERY_MS,
    LeaseKeeper,
    LeaseState,
    LoopClock,
    StaleLease,
    StaleReason,
    coalesce_extra_ms,
    lease_deadline_ms,
    watchdog_delay_ms,
)


def spawn(coro: Coroutine[Any, Any, bool]) -> asyncio.Task[bool]:
    return asyncio.get_running_loop().create_task(coro)


# --------------------------------------------------------------------------
# Rule 1: single flight, coalescing, longest duration, callers released by
# the write that covers them.


async def test_calls_during_a_pending_write_share_one_follow_up_write() -> None:
    h = make_harness(deadline_ms=60_000)
    first = spawn(h.keeper.extend(1_000))
    await settle()
    assert len(h.store.calls) == 1

    followers = [spawn(h.keeper.extend(1_000)) for _ in range(5)]
    await settle()
    assert len(h.store.calls) == 1, "no second write while the first is pending"

    h.store.calls[0].succeed()
    await settle()
    assert first.done() and first.result() is True
    assert len(h.store.calls) == 2, "exactly one follow-up write"
    assert not any(f.done() for f in followers), "followers wait for the follow-up"

    h.store.calls[1].succeed()
    await settle()
    assert [f.result() for f in followers] == [True] * 5
    assert len(h.store.calls) == 2


async def test_follow_up_carries_the_longest_requested_duration() -> None:
    h = make_harness(deadline_ms=500)
    first = spawn(h.keeper.extend(1_000))
    await settle()
    # Longest in the middle: neither "first wins" nor "last wins" passes.
    followers = [spawn(h.keeper.extend(ms)) for ms in (5_000, 30_000, 2_000)]
    await settle()
    h.store.calls[0].succeed()
    await settle()
    assert [c.extra_ms for c in h.store.calls] == [1_000, 30_000]
    h.store.calls[1].succeed()
    await settle()
    assert first.result() and all(f.result() for f in followers)
    assert h.keeper.deadline_ms == h.store.calls[1].started_ms + 30_000


async def test_requests_made_before_the_write_starts_share_the_first_write() -> None:
    h = make_harness(deadline_ms=60_000)
    callers = [spawn(h.keeper.extend(ms)) for ms in (3_000, 9_000, 4_000)]
    await settle()
    assert [c.extra_ms for c in h.store.calls] == [9_000]
    h.store.calls[0].succeed()
    await settle()
    assert [c.result() for c in callers] == [True] * 3
    assert len(h.store.calls) == 1


async def test_each_caller_is_released_by_the_write_covering_it() -> None:
    h = make_harness(deadline_ms=60_000)
    a = spawn(h.keeper.extend(1_000))
    await settle()
    b = spawn(h.keeper.extend(1_000))
    await settle()
    h.store.calls[0].succeed()
    await settle()
    # a returns as soon as write 1 is done, while write 2 is still pending.
    assert a.done() and not b.done()
    assert h.store.calls[1].pending
    h.store.calls[1].succeed()
    await settle()
    assert b.done()


async def test_cancelling_one_caller_does_not_cancel_the_shared_write() -> None:
    h = make_harness(deadline_ms=500)
    waiters = [spawn(h.keeper.extend(1_000)) for _ in range(3)]
    await settle()
    waiters[0].cancel()
    await settle()
    assert waiters[0].cancelled()
    assert h.store.calls[0].pending and not h.store.calls[0].future.cancelled()
    h.store.calls[0].succeed()
    await settle()
    assert [w.result() for w in waiters[1:]] == [True, True]
    assert h.keeper.deadline_ms == 1_000


async def test_idle_keeper_writes_again_for_a_later_call() -> None:
    h = make_harness(default_reply=Reply(latency_ms=5))
    first = spawn(h.keeper.extend(1_000))
    await h.clock.advance(10)
    second = spawn(h.keeper.extend(2_000))
    await h.clock.advance(10)
    assert first.result() is True and second.result() is True
    assert [c.extra_ms for c in h.store.calls] == [1_000, 2_000]


# --------------------------------------------------------------------------
# Rule 2: constant-size pending state.

BURST = 10_000


async def test_ten_thousand_concurrent_calls_issue_at_most_two_writes() -> None:
    h = make_harness(deadline_ms=60_000)
    tasks_before = len(asyncio.all_tasks())
    first = spawn(h.keeper.extend(1_000))
    await settle()
    burst = [spawn(h.keeper.extend(1_000 + i)) for i in range(BURST)]
    await settle()

    assert len(h.store.calls) == 1
    # Beyond the callers themselves, the keeper runs exactly one task (the
    # write loop); a queue of per-call tasks would show up here.
    assert len(asyncio.all_tasks()) == tasks_before + 1 + BURST + 1
    # Its own state is a fixed set of scalar fields: nothing grows per call.
    for name in type(h.keeper).__slots__:
        value = getattr(h.keeper, name)
        if name == "_claim":
            continue
        assert not isinstance(value, list | tuple | set | dict), name
        if hasattr(value, "__len__"):
            assert len(value) <= 1, name

    h.store.calls[0].succeed()
    await settle()
    assert len(h.store.calls) == 2
    assert h.store.calls[1].extra_ms == 1_000 + BURST - 1
    h.store.calls[1].succeed()
    await settle()

    assert first.result() is True
    assert all(t.result() is True for t in burst)
    assert len(h.store.calls) == 2
    assert len(asyncio.all_tasks()) == tasks_before, "no task left behind"


async def test_ten_thousand_calls_on_an_idle_keeper_issue_one_write() -> None:
    h = make_harness(deadline_ms=60_000)
    burst = [spawn(h.keeper.extend(500)) for _ in range(BURST)]
    await settle()
    assert len(h.store.calls) == 1
    h.store.calls[0].succeed()
    await settle()
    assert all(t.result() is True for t in burst)
    assert len(h.store.calls) == 1


# --------------------------------------------------------------------------
# Rule 3: sequential writes, so an older write never lands after a newer one.


async def test_writes_never_overlap_even_when_latency_would_reorder_them() -> None:
    # Write 1 is slow, everything after it fast: concurrent writes would
    # let write 2 land first and write 1 land last with an older lease.
    latencies = iter([5_000, 100, 100, 100])
    h = make_harness(deadline_ms=20_000, replies=lambda _i: Reply(next(latencies, 100)))
    a = spawn(h.keeper.extend(30_000))
    await h.clock.advance(1_000)
    b = spawn(h.keeper.extend(30_000))
    await h.clock.advance(1_000)
    c = spawn(h.keeper.extend(30_000))
    await h.clock.advance(10_000)

    assert all(t.result() for t in (a, b, c))
    assert h.store.max_in_flight == 1
    for earlier, later in itertools.pairwise(h.store.calls):
        assert earlier.finished_ms is not None
        assert later.started_ms >= earlier.finished_ms
        assert later.started_seq > earlier.started_seq
    stored = [value for _, value in h.store.stored_history]
    assert stored == sorted(stored), "the stored lease never moved backwards"
    assert h.store.stored_lease_ms == h.store.calls[-1].started_ms + 30_000


# --------------------------------------------------------------------------
# Rule 4: one watchdog, replaced in one step after a successful write.


async def test_old_watchdog_stays_armed_while_a_renewal_is_in_flight() -> None:
    h = make_harness(deadline_ms=1_000)
    [old] = h.watchdogs()
    task = spawn(h.keeper.extend(5_000))
    await h.clock.advance(200)
    # Clearing before the await would leave the execution unguarded here.
    assert h.watchdogs() == [old]
    assert h.keeper.deadline_ms == 1_000

    h.store.only_pending().succeed()
    await settle()
    assert task.result() is True
    [new] = h.watchdogs()
    assert new is not old and old.cancelled and not old.fired
    assert new.due_ms == 5_000
    assert h.clock.peak_live(h.keeper) == 1


async def test_an_execution_never_owns_two_watchdogs() -> None:
    h = make_harness(deadline_ms=10_000, default_reply=Reply(latency_ms=700))
    live_counts: list[int] = []
    h.clock.after_fire.append(lambda: live_counts.append(len(h.watchdogs())))

    async def pulses(every: int, count: int) -> None:
        for _ in range(count):
            await h.clock.sleep(every)
            await h.keeper.extend(10_000)

    loop = asyncio.get_running_loop()
    drivers = [loop.create_task(pulses(every, 40)) for every in (250, 400, 1_000)]
    await h.clock.run_until(lambda: all(d.done() for d in drivers), step_ms=100, limit_ms=600_000)
    assert h.stale_log.count == 0
    h.keeper.clear()
    assert h.clock.peak_live(h.keeper) == 1
    assert set(live_counts) == {1}
    created = h.clock.created_by(h.keeper)
    assert len(created) > 10
    # Every replaced timer was cancelled, never left to fire.
    assert all(t.cancelled and not t.fired for t in created[:-1])


async def test_replaced_watchdog_is_harmless_even_if_its_timer_still_fires() -> None:
    # A clock that ignores cancel(): the replaced timer fires at its old due
    # time and must not mark the (renewed, healthy) execution stale.
    clock = FakeClock(honour_cancel=False)
    store = FakeStore(clock, default_reply=Reply(latency_ms=100))
    log = StaleLog(clock)
    keeper = LeaseKeeper("c", store.renew, on_stale=log, clock=clock, deadline_ms=1_000)
    task = spawn(keeper.extend(5_000))
    await clock.advance_to(1_000)
    assert task.result() is True
    assert keeper.active and log.count == 0
    await clock.advance_to(4_999)
    assert keeper.active
    await clock.advance_to(5_000)
    assert log.reasons == [StaleReason.EXPIRED]


# --------------------------------------------------------------------------
# Rule 5: deadline from the start of the write; latency eats into the lease.


def test_deadline_arithmetic() -> None:
    assert lease_deadline_ms(1_000, 500) == 1_500
    assert watchdog_delay_ms(1_500, 1_200) == 300
    assert watchdog_delay_ms(1_500, 1_500) == 0
    assert coalesce_extra_ms(None, 7) == 7
    assert coalesce_extra_ms(9, 7) == 9
    assert coalesce_extra_ms(3, 7) == 7


async def test_watchdog_delay_is_measured_from_the_write_start() -> None:
    h = make_harness(deadline_ms=500)
    task = spawn(h.keeper.extend(1_000))
    await h.clock.advance(300)
    h.store.only_pending().succeed()
    await settle()
    assert task.result() is True
    [timer] = h.watchdogs()
    assert timer.due_ms == 1_000, "latency (300 ms) is not added to the lease"

    await h.clock.advance_to(999)
    assert h.keeper.active
    await h.clock.advance_to(1_000)
    assert h.keeper.state is LeaseState.STALE
    assert h.stale_log.reasons == [StaleReason.EXPIRED]
    assert h.stale_log.events[0][0] == 1_000


@pytest.mark.parametrize("answer_at", [1_000, 1_500])
async def test_a_renewal_answered_after_the_held_lease_ended_is_too_late(answer_at: int) -> None:
    # The store's lease ends at 800. The watchdog stays armed while the 1 s
    # renewal (started at 0) is in flight, fires at 800, and the late answer
    # changes nothing: the execution stopped when its lease ended.
    h = make_harness(deadline_ms=800)
    task = spawn(h.keeper.extend(1_000))
    await h.clock.advance_to(answer_at)
    assert h.keeper.state is LeaseState.STALE
    assert h.stale_log.reasons == [StaleReason.EXPIRED]
    assert h.stale_log.events[0][0] == 800
    h.store.only_pending().succeed()
    await settle()
    assert task.result() is False
    assert h.watchdogs() == []


async def test_a_late_answer_to_a_short_renewal_is_not_stale_while_a_longer_lease_runs() -> None:
    """The store keeps the longer lease (its renewal keeps the later end), so a
    short renewal answered after its own end leaves a healthy execution alone:
    the watchdog stays at the lease the store holds."""
    h = make_harness(deadline_ms=5_000)
    task = spawn(h.keeper.extend(1_000))
    await h.clock.advance_to(1_500)  # answered after 0 + 1_000
    h.store.only_pending().succeed()
    await settle()
    assert task.result() is True
    assert h.keeper.active and h.stale_log.reasons == []
    assert h.keeper.deadline_ms == 5_000 == h.store.stored_lease_ms
    await h.clock.advance_to(4_999)
    assert h.keeper.active
    await h.clock.advance_to(5_000)
    assert h.stale_log.reasons == [StaleReason.EXPIRED]


async def test_a_short_heartbeat_never_brings_the_watchdog_forward() -> None:
    """As measured on PostgreSQL and both D1 shapes before the fix: beat(50)
    returned True, and half a second later the watchdog aborted the job with
    lease_expired while the database lease was still ~120 s ahead."""
    h = make_harness(deadline_ms=120_000, default_reply=Reply(latency_ms=5))
    beat = spawn(h.keeper.heartbeat().beat(50))
    await h.clock.advance(10)
    assert beat.result() is True
    await h.clock.advance(500)
    assert h.keeper.active and h.stale_log.reasons == []
    assert h.keeper.deadline_ms == 120_000 == h.store.stored_lease_ms
    # A longer renewal still moves it later.
    longer = spawn(h.keeper.extend(200_000))
    await h.clock.advance(10)
    assert longer.result() is True
    assert h.keeper.deadline_ms == 510 + 200_000 == h.store.stored_lease_ms


# --------------------------------------------------------------------------
# Rule 6: terminal states win.


async def test_write_pending_at_finish_installs_no_timer() -> None:
    h = make_harness(deadline_ms=5_000)
    task = spawn(h.keeper.extend(60_000))
    await h.clock.advance(100)
    h.keeper.clear()
    assert h.watchdogs() == []
    h.store.only_pending().succeed()
    await settle()

    assert task.result() is True, "the write itself matched"
    assert h.keeper.state is LeaseState.CLEARED
    assert h.watchdogs() == []
    assert len(h.clock.created_by(h.keeper)) == 1, "only the initial watchdog ever"
    await h.clock.advance(1_000_000)
    assert h.stale_log.count == 0


async def test_write_pending_when_the_lease_expires_installs_no_timer() -> None:
    h = make_harness(deadline_ms=1_000)
    task = spawn(h.keeper.extend(60_000))
    await h.clock.advance_to(1_000)
    assert h.stale_log.reasons == [StaleReason.EXPIRED]
    h.store.only_pending().succeed()
    await settle()
    assert h.keeper.state is LeaseState.STALE
    assert h.watchdogs() == []
    assert len(h.clock.created_by(h.keeper)) == 1
    assert task.done()
    assert h.stale_log.count == 1


async def test_clear_disarms_permanently() -> None:
    h = make_harness(deadline_ms=5_000)
    h.keeper.clear()
    h.keeper.clear()
    assert h.watchdogs() == []
    assert await immediately(h.keeper.extend(1_000)) is False
    h.keeper.extend_nowait(1_000)
    renewer = h.keeper.start_periodic(every_ms=1_000, lease_ms=5_000)
    await h.clock.advance(100_000)
    assert h.store.calls == []
    assert not renewer.running
    assert h.clock.live_timers() == []
    assert h.stale_log.count == 0
    assert h.keeper.state is LeaseState.CLEARED


async def test_clear_releases_callers_of_a_follow_up_that_never_started() -> None:
    h = make_harness(deadline_ms=5_000)
    first = spawn(h.keeper.extend(1_000))
    await settle()
    queued = [spawn(h.keeper.extend(2_000)) for _ in range(3)]
    await settle()
    h.keeper.clear()
    await settle()
    assert [q.result() for q in queued] == [False] * 3
    h.store.only_pending().succeed()
    await settle()
    assert first.result() is True
    assert len(h.store.calls) == 1, "no follow-up write after clear"


@pytest.mark.parametrize("answer", [False, Boom("late failure")])
async def test_bad_answer_after_finish_does_not_mark_stale(answer: bool | Exception) -> None:
    h = make_harness(deadline_ms=5_000)
    task = spawn(h.keeper.extend(1_000))
    await settle()
    h.keeper.clear()
    h.store.only_pending().resolve(answer)
    await settle()
    assert h.stale_log.count == 0
    assert h.keeper.state is LeaseState.CLEARED
    if isinstance(answer, Exception):
        assert task.exception() is answer
    else:
        assert task.result() is False


async def test_stale_keeper_stays_stale() -> None:
    h = make_harness(deadline_ms=1_000)
    await h.clock.advance_to(1_000)
    assert h.keeper.state is LeaseState.STALE
    h.keeper.clear()
    assert h.keeper.state is LeaseState.STALE
    assert await immediately(h.keeper.extend(1_000)) is False
    assert h.store.calls == []


# --------------------------------------------------------------------------
# Rule 7: claim lost -> stale handling exactly once.


async def test_lost_claim_runs_stale_handling_once_for_all_waiters() -> None:
    h = make_harness(deadline_ms=60_000)
    covered = [spawn(h.keeper.extend(1_000)) for _ in range(20)]
    await settle()
    queued = [spawn(h.keeper.extend(1_000)) for _ in range(30)]
    await settle()
    h.store.only_pending().lose()
    await settle()

    assert h.stale_log.reasons == [StaleReason.LOST]
    assert all(t.result() is False for t in covered + queued)
    assert len(h.store.calls) == 1, "no write after the claim was lost"
    assert h.watchdogs() == []
    assert await immediately(h.keeper.extend(1_000)) is False
    await h.clock.advance(1_000_000)
    assert h.stale_log.count == 1
    stale = h.keeper.stale
    assert isinstance(stale, StaleLease) and stale.reason is StaleReason.LOST


# --------------------------------------------------------------------------
# Rule 8: renew raising -> stale once, covered callers get the original error.


async def test_renew_error_reaches_covered_callers_and_marks_stale_once() -> None:
    h = make_harness(deadline_ms=60_000)
    covered = [spawn(h.keeper.extend(1_000)) for _ in range(3)]
    await settle()
    queued = [spawn(h.keeper.extend(1_000)) for _ in range(3)]
    await settle()
    error = Boom("database unavailable")
    h.store.only_pending().fail(error)
    await settle()

    for task in covered:
        assert task.exception() is error
    # Not covered by the failing write, and no write will cover them now.
    assert [t.result() for t in queued] == [False] * 3
    assert h.stale_log.reasons == [StaleReason.RENEW_FAILED]
    stale = h.keeper.stale
    assert stale is not None and stale.error is error and stale.__cause__ is error
    assert len(h.store.calls) == 1
    assert h.watchdogs() == []
    # Each caller re-raises with the original traceback, not an ever-growing one.
    depths = []
    for task in covered:
        try:
            task.result()
        except Boom as raised:
            depths.append(len(traceback.extract_tb(raised.__traceback__)))
    assert max(depths) - min(depths) <= 1


async def test_error_from_awaited_extend_is_the_original_exception() -> None:
    h = make_harness(deadline_ms=60_000, default_reply=Reply(10, Boom("nope")))
    task = spawn(h.keeper.extend(1_000))
    await h.clock.advance(10)
    with pytest.raises(Boom, match="nope"):
        task.result()


# --------------------------------------------------------------------------
# Robustness around the rules.


async def test_on_stale_that_raises_is_reported_and_does_not_break_callers() -> None:
    reported: list[dict[str, object]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    clock = FakeClock()
    store = FakeStore(clock)

    def bad_callback(_stale: StaleLease) -> None:
        raise RuntimeError("callback bug")

    keeper = LeaseKeeper("c", store.renew, on_stale=bad_callback, clock=clock, deadline_ms=9e9)
    callers = [spawn(keeper.extend(1_000)) for _ in range(2)]
    await settle()
    store.only_pending().lose()
    await settle()
    loop.set_exception_handler(None)
    assert [c.result() for c in callers] == [False, False]
    assert keeper.state is LeaseState.STALE
    assert len(reported) == 1
    assert isinstance(reported[0]["exception"], RuntimeError)


@pytest.mark.parametrize("bad", [0, -5, 1.5, True])
async def test_durations_are_validated(bad: object) -> None:
    h = make_harness()
    with pytest.raises((ValueError, TypeError)):
        await immediately(h.keeper.extend(bad))  # type: ignore[arg-type]
    with pytest.raises((ValueError, TypeError)):
        LeaseKeeper("c", h.store.renew, on_stale=print, clock=h.clock, lease_ms=bad)  # type: ignore[arg-type]
    assert h.store.calls == []


async def test_initial_deadline_already_past_is_stale_immediately() -> None:
    clock = FakeClock(start_ms=10_000)
    log = StaleLog(clock)
    keeper = LeaseKeeper("c", FakeStore(clock).renew, on_stale=log, clock=clock, deadline_ms=9_000)
    assert keeper.state is LeaseState.STALE
    assert log.reasons == [StaleReason.EXPIRED]
    assert clock.timers == []


def test_defaults() -> None:
    assert DEFAULT_LEASE_MS == 120_000
    assert DEFAULT_RENEW_EVERY_MS == 10_000


async def test_loop_clock_uses_the_running_loop() -> None:
    clock = LoopClock()
    loop = asyncio.get_running_loop()
    before = clock.now_ms()
    assert before == pytest.approx(loop.time() * 1000, abs=1.0)
    fired: list[str] = []
    clock.call_later(-50, lambda: fired.append("past"))  # clamped, not rejected
    cancelled = clock.call_later(0, lambda: fired.append("cancelled"))
    cancelled.cancel()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert fired == ["past"]
    assert clock.now_ms() >= before


async def test_cancellation_of_the_write_itself_makes_the_execution_stale() -> None:
    # E.g. the store call is cancelled under the keeper while callers wait.
    h = make_harness(deadline_ms=60_000)
    covered = spawn(h.keeper.extend(1_000))
    await settle()
    queued = spawn(h.keeper.extend(1_000))
    await settle()
    h.store.only_pending().fail(asyncio.CancelledError())
    await settle()
    assert covered.cancelled()  # the caller re-raised CancelledError
    assert queued.result() is False
    assert h.stale_log.reasons == [StaleReason.RENEW_FAILED]
    assert h.watchdogs() == []
    assert await immediately(h.keeper.extend(1_000)) is False


@pytest.mark.skipif(not hasattr(asyncio, "eager_task_factory"), reason="Python 3.12+")
async def test_works_with_an_eager_task_factory() -> None:
    loop = asyncio.get_running_loop()
    loop.set_task_factory(asyncio.eager_task_factory)  # type: ignore[attr-defined,unused-ignore]
    try:
        h = make_harness(deadline_ms=60_000, default_reply=Reply(latency_ms=10))
        first = spawn(h.keeper.extend(1_000))
        burst = [spawn(h.keeper.extend(2_000 + i)) for i in range(100)]
        await h.clock.advance(100)
        assert first.result() is True and all(t.result() is True for t in burst)
        assert [c.extra_ms for c in h.store.calls] == [1_000, 2_099]
        # A write that completes without suspending still leaves the keeper usable.
        writes: list[int] = []

        async def instant_renew(_claim: str, extra_ms: int) -> bool:
            writes.append(extra_ms)
            return True

        keeper = LeaseKeeper("c", instant_renew, on_stale=print, clock=h.clock, deadline_ms=9e9)
        assert await immediately(keeper.extend(1_000)) is True
        assert await immediately(keeper.extend(2_000)) is True
        assert writes == [1_000, 2_000]
        keeper.clear()
    finally:
        loop.set_task_factory(None)
