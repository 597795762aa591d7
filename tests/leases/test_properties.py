"""Property-based test: random schedules of heartbeats, store latencies,
store failures, finish times and periodic renewal.

Invariants checked at every step of virtual time:

* never two renewal writes in flight;
* at most one live watchdog, and while the lease is held exactly one, due at
  the deadline written by the latest successful renewal;
* never a stale mark while that deadline is in the future (EXPIRED), and
  LOST / RENEW_FAILED only right after the store said so;
* terminal states are final: no watchdog, tick or write starts afterwards.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from functools import partial

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.leases import Boom, FakeClock, FakeStore, Reply
from tickwork.leases import LeaseKeeper, LeaseState, StaleLease, StaleReason

OUTCOMES = ["ok", "ok", "ok", "ok", "ok", "lost", "error"]


@dataclass(frozen=True)
class Request:
    at_ms: int
    extra_ms: int
    awaited: bool


@dataclass(frozen=True)
class Schedule:
    lease_ms: int
    initial_ms: int
    requests: tuple[Request, ...]
    replies: tuple[tuple[int, str], ...]
    finish_at_ms: int | None
    periodic_every_ms: int | None


@st.composite
def schedules(draw: st.DrawFn) -> Schedule:
    lease_ms = draw(st.integers(50, 400))
    requests = draw(
        st.lists(
            st.builds(
                Request,
                at_ms=st.integers(0, 1_500),
                extra_ms=st.integers(1, 500),
                awaited=st.booleans(),
            ),
            max_size=25,
        )
    )
    replies = draw(st.lists(st.tuples(st.integers(0, 300), st.sampled_from(OUTCOMES)), max_size=30))
    periodic = draw(st.none() | st.integers(1, lease_ms - 1))
    return Schedule(
        lease_ms=lease_ms,
        initial_ms=draw(st.integers(1, 600)),
        requests=tuple(sorted(requests, key=lambda r: r.at_ms)),
        replies=tuple(replies),
        finish_at_ms=draw(st.none() | st.integers(0, 2_000)),
        periodic_every_ms=periodic,
    )


@dataclass
class Observations:
    violations: list[str] = field(default_factory=list)
    terminal_seq: int | None = None
    terminal_state: LeaseState | None = None
    stale: list[StaleLease] = field(default_factory=list)
    # Which write (by index) each request joined, and what it asked for.
    joined: dict[int, list[int]] = field(default_factory=dict)
    errors: list[Boom] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.violations.append(message)


END_MS = 5_000


async def simulate(s: Schedule) -> Observations:
    clock = FakeClock()
    obs = Observations()

    def reply(index: int) -> Reply:
        if index >= len(s.replies):
            return Reply(1, True)
        latency, kind = s.replies[index]
        if kind == "error":
            error = Boom(f"write {index}")
            obs.errors.append(error)
            return Reply(latency, error)
        return Reply(latency, kind == "ok")

    store = FakeStore(clock, replies=reply)
    store.latest_success_deadline_ms = s.initial_ms

    def on_stale(stale: StaleLease) -> None:
        now = clock.now_ms()
        obs.stale.append(stale)
        if stale.reason is StaleReason.EXPIRED:
            deadline = store.latest_success_deadline_ms
            if deadline is not None and now < deadline:
                obs.fail(f"stale at {now} while the lease runs until {deadline}")
        elif stale.reason is StaleReason.LOST:
            if store.last_result is not False or store.last_answer_ms != now:
                obs.fail(f"LOST at {now} without a False answer")
        elif not isinstance(store.last_result, Boom) or store.last_answer_ms != now:
            obs.fail(f"RENEW_FAILED at {now} without a failing write")

    keeper: LeaseKeeper[str] = LeaseKeeper(
        "claim",
        store.renew,
        on_stale=on_stale,
        clock=clock,
        lease_ms=s.lease_ms,
        deadline_ms=s.initial_ms,
    )
    renewer = None
    if s.periodic_every_ms is not None:
        renewer = keeper.start_periodic(every_ms=s.periodic_every_ms)

    loop = asyncio.get_running_loop()
    callers: list[asyncio.Task[bool]] = []

    class Driver:
        def request(self, request: Request) -> None:
            if keeper.active:
                # Pending requests always belong to the next write to start.
                obs.joined.setdefault(len(store.calls), []).append(request.extra_ms)
            if request.awaited:
                callers.append(loop.create_task(keeper.extend(request.extra_ms)))
            else:
                keeper.extend_nowait(request.extra_ms)

        def finish(self) -> None:
            keeper.clear()

    driver = Driver()
    for request in s.requests:
        clock.call_later(request.at_ms, partial(driver.request, request))
    if s.finish_at_ms is not None:
        clock.call_later(s.finish_at_ms, driver.finish)

    def check() -> None:
        live = clock.live_timers(keeper)
        if store.in_flight > 1:
            obs.fail(f"{store.in_flight} writes in flight at {clock.now_ms()}")
        if len(live) > 1:
            obs.fail(f"{len(live)} watchdogs at {clock.now_ms()}")
        if keeper.state is not LeaseState.ACTIVE and obs.terminal_seq is None:
            obs.terminal_seq = clock.seq()
            obs.terminal_state = keeper.state
        if obs.terminal_state is not None:
            if keeper.state is not obs.terminal_state:
                obs.fail(f"left terminal state {obs.terminal_state} for {keeper.state}")
            if live:
                obs.fail("watchdog alive after a terminal state")
            if renewer is not None and renewer.running:
                obs.fail("periodic renewer running after a terminal state")

    def check_idle() -> None:
        check()
        if keeper.active:
            # All timers due by now have fired, so a held lease must have one
            # watchdog, at the deadline the store actually has.
            live = clock.live_timers(keeper)
            deadline = store.latest_success_deadline_ms
            if len(live) != 1 or live[0].due_ms != deadline or keeper.deadline_ms != deadline:
                obs.fail(f"active at {clock.now_ms()} with {live} vs deadline {deadline}")
            if deadline is not None and clock.now_ms() >= deadline:
                obs.fail(f"still active at {clock.now_ms()} past deadline {deadline}")

    clock.after_fire.append(check)
    clock.when_idle.append(check_idle)

    await clock.advance_to(END_MS)
    keeper.clear()  # a periodic renewer would otherwise run forever
    await clock.advance_to(END_MS * 2)

    # Nothing outlives the execution.
    if clock.live_timers():
        obs.fail(f"timers left behind: {clock.live_timers()}")
    if not all(c.done() for c in callers):
        obs.fail("a caller never returned")
    for caller in callers:
        error = caller.exception()
        if error is not None and not any(error is e for e in obs.errors):
            obs.fail(f"caller raised something the store never raised: {error!r}")
    if len(obs.stale) > 1:
        obs.fail(f"stale handling ran {len(obs.stale)} times")
    if obs.terminal_seq is not None:
        late = [t for t in clock.created_by(keeper) if t.created_seq > obs.terminal_seq]
        if late:
            obs.fail("watchdog installed after a terminal state")
        if any(c.started_seq > obs.terminal_seq for c in store.calls):
            obs.fail("write started after a terminal state")
    # Coalescing: each write carries the longest duration of the requests it
    # covers, and (without ticks) no write happens that nobody asked for.
    for call in store.calls:
        asked = obs.joined.get(call.index, [])
        if renewer is None:
            if not asked or call.extra_ms != max(asked):
                obs.fail(f"write {call.index} wrote {call.extra_ms}, requests were {asked}")
        elif asked and call.extra_ms < max(asked):
            obs.fail(f"write {call.index} shorter than requested: {call.extra_ms} < {asked}")
    return obs


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(schedules())
def test_invariants_hold_for_random_schedules(schedule: Schedule) -> None:
    observations = asyncio.run(simulate(schedule))
    assert observations.violations == []
