"""LoopClock's timers share one loop timer per event loop (tickwork.leases._LoopTimers):
they fire when asyncio's own would, in due order, and an idle loop holds none."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

import pytest

from tickwork.leases import LoopClock, _LoopTimers, _timers_of


def shared_timers(loop: asyncio.AbstractEventLoop) -> _LoopTimers:
    timers = _timers_of(loop)
    assert timers is not None  # asyncio's own loop takes the attribute
    return timers


def loop_timers_armed(loop: asyncio.AbstractEventLoop) -> int:
    """How many timers of the loop itself are scheduled and not cancelled."""
    return sum(1 for handle in loop._scheduled if not handle.cancelled())  # type: ignore[attr-defined,misc]


async def test_timers_fire_in_due_order_and_equal_dues_in_the_order_set() -> None:
    clock = LoopClock()
    fired: list[str] = []
    for name, delay in (("c", 30), ("a", 10), ("b1", 20), ("b2", 20), ("now", 0)):
        clock.call_later(delay, lambda name=name: fired.append(name))  # type: ignore[misc]
    await asyncio.sleep(0.06)
    assert fired == ["now", "a", "b1", "b2", "c"]


async def test_a_timer_never_fires_before_its_delay() -> None:
    clock = LoopClock()
    loop = asyncio.get_running_loop()
    fired_at: list[float] = []
    set_at = loop.time()
    for delay in (5, 15, 25):
        clock.call_later(delay, lambda: fired_at.append(loop.time()))
    await asyncio.sleep(0.05)
    assert len(fired_at) == 3
    for delay, at in zip((5, 15, 25), fired_at, strict=True):
        assert (at - set_at) * 1000 >= delay - 1.0  # asyncio's own resolution


async def test_many_timers_behind_one_loop_timer_and_an_idle_loop_holds_at_most_one() -> None:
    clock = LoopClock()
    loop = asyncio.get_running_loop()
    before = loop_timers_armed(loop)
    handles = [clock.call_later(10_000 + i, lambda: None) for i in range(500)]
    assert loop_timers_armed(loop) == before + 1
    for handle in handles:
        handle.cancel()
    assert shared_timers(loop)._heap == []
    assert loop_timers_armed(loop) <= before + 1
    # The next batch of timers, due later, arms no second loop timer.
    later = [clock.call_later(20_000 + i, lambda: None) for i in range(10)]
    assert loop_timers_armed(loop) <= before + 1
    for handle in later:
        handle.cancel()


async def test_the_leftover_loop_timer_fires_once_and_arms_nothing() -> None:
    clock = LoopClock()
    loop = asyncio.get_running_loop()
    before = loop_timers_armed(loop)
    clock.call_later(5, lambda: None).cancel()
    await asyncio.sleep(0.03)
    assert loop_timers_armed(loop) == before


async def test_a_cancelled_timer_never_fires_and_cancel_twice_or_after_firing_is_harmless() -> None:
    clock = LoopClock()
    fired: list[str] = []
    keep = clock.call_later(10, lambda: fired.append("kept"))
    dropped = clock.call_later(5, lambda: fired.append("dropped"))
    dropped.cancel()
    dropped.cancel()
    await asyncio.sleep(0.03)
    assert fired == ["kept"]
    keep.cancel()
    assert shared_timers(asyncio.get_running_loop())._live == 0


async def test_an_earlier_timer_rearms_the_loop_timer() -> None:
    clock = LoopClock()
    fired: list[str] = []
    late = clock.call_later(60_000, lambda: fired.append("late"))
    clock.call_later(5, lambda: fired.append("early"))
    await asyncio.sleep(0.03)
    assert fired == ["early"]
    late.cancel()


async def test_a_long_run_of_short_lived_timers_keeps_the_heap_near_the_live_ones() -> None:
    # A worker's pattern: each job sets two long timers and cancels both soon after.
    clock = LoopClock()
    loop = asyncio.get_running_loop()
    resident = [clock.call_later(120_000, lambda: None) for _ in range(10)]
    for _ in range(5_000):
        first = clock.call_later(10_000, lambda: None)
        second = clock.call_later(120_000, lambda: None)
        first.cancel()
        second.cancel()
    timers = shared_timers(loop)
    assert timers._live == 10
    assert len(timers._heap) <= 10 + 2 * 64 + 2
    for handle in resident:
        handle.cancel()


async def test_timers_set_by_a_callback_fire_later_not_in_the_same_pass() -> None:
    clock = LoopClock()
    fired: list[str] = []

    def first() -> None:
        fired.append("first")
        clock.call_later(0, lambda: fired.append("set by first"))

    clock.call_later(0, first)
    await asyncio.sleep(0)
    await asyncio.sleep(0)  # one turn for the timer, as with asyncio's own
    assert fired == ["first"]
    await asyncio.sleep(0.01)
    assert fired == ["first", "set by first"]


async def test_a_raising_callback_reaches_the_exception_handler_and_the_others_still_run() -> None:
    clock = LoopClock()
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    fired: list[str] = []
    try:
        def boom() -> None:
            raise ValueError("boom")

        clock.call_later(1, boom)
        clock.call_later(1, lambda: fired.append("after"))
        await asyncio.sleep(0.02)
    finally:
        loop.set_exception_handler(None)
    assert fired == ["after"]
    assert [type(context["exception"]) for context in reported] == [ValueError]


async def test_a_callback_runs_in_the_context_it_was_set_in() -> None:
    clock = LoopClock()
    where: contextvars.ContextVar[str] = contextvars.ContextVar("where", default="loop")
    seen: list[str] = []

    async def setter(name: str) -> None:
        where.set(name)
        clock.call_later(1, lambda: seen.append(where.get()))

    await asyncio.gather(setter("task one"), setter("task two"))
    await asyncio.sleep(0.02)
    assert sorted(seen) == ["task one", "task two"]


def test_each_event_loop_has_its_own_timers() -> None:
    clock = LoopClock()  # one clock, used on two loops one after the other

    async def run_one() -> list[str]:
        fired: list[str] = []
        clock.call_later(1, lambda: fired.append("fired"))
        pending = clock.call_later(60_000, lambda: fired.append("never"))
        await asyncio.sleep(0.02)
        pending.cancel()
        return fired

    assert asyncio.run(run_one()) == ["fired"]
    assert asyncio.run(run_one()) == ["fired"]


@pytest.mark.parametrize("delay", [-50, 0])
async def test_past_and_zero_delays_fire_on_the_next_turn(delay: float) -> None:
    fired: list[bool] = []
    LoopClock().call_later(delay, lambda: fired.append(True))
    assert fired == []
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert fired == [True]


async def test_a_timer_cancelled_by_an_earlier_callback_of_the_same_firing_does_not_run() -> None:
    # asyncio skips a ready handle cancelled before its turn; so must the shared timer.
    clock = LoopClock()
    loop = asyncio.get_running_loop()
    fired: list[str] = []
    later: list[Any] = []

    def first() -> None:
        fired.append("first")
        later[0].cancel()

    clock.call_later(5, first)
    later.append(clock.call_later(5, lambda: fired.append("second")))
    clock.call_later(5, lambda: fired.append("third"))
    await asyncio.sleep(0.03)
    assert fired == ["first", "third"]
    timers = shared_timers(loop)
    assert timers._live == 0 and timers._cancelled == 0


def test_a_finished_loop_with_timers_is_not_kept_alive() -> None:
    import gc
    import weakref

    loops: list[weakref.ref[asyncio.AbstractEventLoop]] = []

    async def set_timers() -> None:
        loop = asyncio.get_running_loop()
        loops.append(weakref.ref(loop))
        LoopClock().call_later(10_000, lambda: None)  # still pending when the loop ends
        LoopClock().call_later(10_000, lambda: None).cancel()

    for _ in range(3):
        asyncio.run(set_timers())
    gc.collect()
    assert [ref() for ref in loops] == [None, None, None]
