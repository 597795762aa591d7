"""Regression test for the race described in lock-heartbeat-renewal.txt.

A periodic heartbeat (fire and forget, every 15 s) and progress callbacks
(awaited after every 4 s chunk) both extend the lease by 60 s while the store
answers slowly, so their renewals overlap.  The scenario runs against any
keeper-like object; ``NaiveKeeper`` reproduces the buggy design (clear the
timer, await the write, install a new timer) to show the scenario really
catches it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pytest

from tests.support.leases import FakeClock, FakeStore, FakeTimer, Reply, StaleLog
from tickwork.leases import LeaseKeeper, StaleLease

# Slow and uneven, so concurrent writes would overlap and finish out of order.
LATENCIES_MS = [200, 7_000, 11_000, 3_000, 9_500, 500, 12_000, 1_500]
HEARTBEAT_EVERY_MS = 15_000
CHUNK_MS = 4_000
EXTEND_MS = 60_000
CHUNKS = 300  # ~20 minutes of work plus renewal waits


class KeeperLike(Protocol):
    async def extend(self, extra_ms: int) -> bool: ...

    def clear(self) -> None: ...


class NaiveKeeper:
    """The pre-fix design: every call clears, awaits its own write, re-arms."""

    def __init__(
        self,
        clock: FakeClock,
        renew: Callable[[str, int], Awaitable[bool]],
        on_stale: Callable[[Any], None],
        lease_ms: int,
    ) -> None:
        self._clock = clock
        self._renew = renew
        self._on_stale = on_stale
        self._done = False
        self._timer: FakeTimer | None = clock.call_later(lease_ms, self._expired)

    async def extend(self, extra_ms: int) -> bool:
        if self._done:
            return False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        ok = await self._renew("claim-token", extra_ms)
        if ok and not self._done:
            self._timer = self._clock.call_later(extra_ms, self._expired)
        return ok

    def _expired(self) -> None:
        if not self._done:
            self._done = True
            self._on_stale("expired")

    def clear(self) -> None:
        self._done = True
        if self._timer is not None:
            self._timer.cancel()


MakeKeeper = Callable[[FakeClock, FakeStore, StaleLog], KeeperLike]


@dataclass
class Report:
    stale_events: int = 0
    peak_watchdogs: int = 0
    watchdogs_at_idle_steps: set[int] = field(default_factory=set)
    max_writes_in_flight: int = 0
    stored_lease_went_backwards: bool = False
    finished: bool = False
    leftover_timers: int = 0


class AppHeartbeat:
    """The application's own ``setInterval(() => void extend(60_000), 15_000)``."""

    def __init__(self, clock: FakeClock, keeper: KeeperLike) -> None:
        self.clock, self.keeper = clock, keeper
        self.tasks: list[asyncio.Task[bool]] = []
        self.timer = clock.call_later(HEARTBEAT_EVERY_MS, self.tick)

    def tick(self) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(self.keeper.extend(EXTEND_MS)))
        self.timer = self.clock.call_later(HEARTBEAT_EVERY_MS, self.tick)

    def stop(self) -> None:
        self.timer.cancel()


async def run_spec_scenario(make_keeper: MakeKeeper, *, keeps_longer: bool = True) -> Report:
    clock = FakeClock()
    store = FakeStore(clock, replies=lambda i: Reply(LATENCIES_MS[i % len(LATENCIES_MS)]),
                      keeps_longer=keeps_longer)
    store.latest_success_deadline_ms = EXTEND_MS  # the claim's own lease
    log = StaleLog(clock)
    keeper = make_keeper(clock, store, log)
    report = Report()
    finished = False

    def watchdogs() -> int:
        return len(clock.live_timers(keeper))

    def on_idle() -> None:
        if not finished and log.count == 0:
            report.watchdogs_at_idle_steps.add(watchdogs())

    clock.when_idle.append(on_idle)

    async def process_file() -> None:
        for _ in range(CHUNKS):
            await clock.sleep(CHUNK_MS)
            await keeper.extend(EXTEND_MS)  # onProgress

    heartbeat = AppHeartbeat(clock, keeper)
    work = asyncio.get_running_loop().create_task(process_file())
    try:
        await clock.run_until(work.done, step_ms=1_000, limit_ms=6 * 3_600_000)
    finally:
        heartbeat.stop()
        keeper.clear()
        finished = True
    await clock.advance(10 * 60_000)  # let stragglers land; nothing may fire

    stored = [value for _, value in store.stored_history]
    report.stale_events = log.count
    report.peak_watchdogs = clock.peak_live(keeper)
    report.max_writes_in_flight = store.max_in_flight
    report.stored_lease_went_backwards = stored != sorted(stored)
    report.finished = work.done() and all(t.done() for t in heartbeat.tasks)
    report.leftover_timers = len(clock.live_timers())
    return report


def make_keeper(clock: FakeClock, store: FakeStore, log: StaleLog) -> KeeperLike:
    def on_stale(stale: StaleLease) -> None:
        log(stale)

    return LeaseKeeper(
        "claim-token", store.renew, on_stale=on_stale, clock=clock, deadline_ms=EXTEND_MS
    )


def make_naive(clock: FakeClock, store: FakeStore, log: StaleLog) -> KeeperLike:
    return NaiveKeeper(clock, store.renew, log, lease_ms=EXTEND_MS)


@pytest.mark.parametrize("keeps_longer", [True, False], ids=["keeps-longer", "overwrites"])
async def test_overlapping_heartbeats_never_make_a_healthy_execution_stale(
    keeps_longer: bool,
) -> None:
    report = await run_spec_scenario(make_keeper, keeps_longer=keeps_longer)
    assert report.finished
    assert report.stale_events == 0
    assert report.peak_watchdogs == 1
    assert report.watchdogs_at_idle_steps == {1}, "exactly one live timer at every step"
    assert report.max_writes_in_flight == 1
    assert not report.stored_lease_went_backwards
    assert report.leftover_timers == 0


async def test_scenario_detects_the_original_race() -> None:
    """The same scenario fails loudly on the pre-fix design, with the spec's
    store (a renewal overwrites the lease)."""
    report = await run_spec_scenario(make_naive, keeps_longer=False)
    assert report.stale_events == 1  # a healthy execution marked stale
    assert report.peak_watchdogs >= 2  # an orphaned timer existed
    assert report.watchdogs_at_idle_steps != {1}
    assert report.max_writes_in_flight >= 2
    assert report.stored_lease_went_backwards


async def test_runtime_scenario_with_periodic_renewer_and_executor_heartbeat() -> None:
    """The same race, wired as the shared runtimes will wire it."""
    clock = FakeClock()
    store = FakeStore(clock, replies=lambda i: Reply(LATENCIES_MS[i % len(LATENCIES_MS)]))
    store.latest_success_deadline_ms = 120_000  # the claim's own lease
    log = StaleLog(clock)
    keeper: LeaseKeeper[str] = LeaseKeeper(
        "claim-token", store.renew, on_stale=log, clock=clock, deadline_ms=120_000
    )
    renewer = keeper.start_periodic()  # 10 s / 120 s
    heartbeat = keeper.heartbeat(EXTEND_MS)
    mismatches: list[tuple[float, float | None, float | None]] = []

    def check() -> None:
        if not keeper.active:
            return
        expected = store.stored_lease_ms or 120_000
        if len(clock.live_timers(keeper)) != 1 or keeper.deadline_ms != expected:
            mismatches.append((clock.now_ms(), keeper.deadline_ms, store.stored_lease_ms))

    clock.when_idle.append(check)
    clock.after_fire.append(check)

    async def executor() -> None:
        for chunk in range(CHUNKS):
            await clock.sleep(CHUNK_MS)
            heartbeat.pulse()
            if chunk % 5 == 0:
                assert await heartbeat.beat() is True

    work = asyncio.get_running_loop().create_task(executor())
    await clock.run_until(work.done, step_ms=1_000, limit_ms=6 * 3_600_000)
    work.result()
    keeper.clear()
    await clock.advance(10 * 60_000)

    assert log.count == 0
    assert mismatches == []
    assert store.max_in_flight == 1
    assert clock.peak_live(keeper) == 1
    assert not renewer.running
    assert clock.live_timers() == []
