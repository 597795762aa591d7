"""Deterministic stand-ins for time and for the store's ``renew`` write.

``FakeClock`` is a virtual-time timer scheduler: nothing happens until the
test advances it, due timers then fire in order, and between two firings the
asyncio loop is run until it is idle.  It remembers every timer it created,
so a test can count the live ones (not cancelled, not fired) per owner at any
moment, and the largest number that was ever live at once.

``FakeStore`` provides the ``renew`` port.  Each call blocks on a future that
either the test resolves by hand or a reply plan resolves after a virtual
latency.  It models the stored lease the way the stores' renewal statements
keep it (the later of the held lease and ``started + extra``, applied when
the write completes; ``keeps_longer=False`` overwrites it instead) and
counts how many writes were in flight at once.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from tickwork.leases import LeaseKeeper

T = TypeVar("T")

# --------------------------------------------------------------------------
# Virtual time


def owner_of(callback: Callable[..., Any]) -> object | None:
    """The object a timer callback belongs to (bound method or partial of one)."""
    while isinstance(callback, partial):
        callback = callback.func
    return getattr(callback, "__self__", None)


class FakeTimer:
    __slots__ = ("_clock", "callback", "cancelled", "created_seq", "due_ms", "fired", "owner")

    def __init__(
        self,
        clock: FakeClock,
        due_ms: float,
        callback: Callable[[], None],
        owner: object | None,
        seq: int,
    ) -> None:
        self._clock = clock
        self.due_ms = due_ms
        self.callback = callback
        self.owner = owner
        self.created_seq = seq
        self.cancelled = False
        self.fired = False

    def cancel(self) -> None:
        if self.live:
            self.cancelled = True
            self._clock._retire(self)

    @property
    def live(self) -> bool:
        return not self.cancelled and not self.fired

    def __repr__(self) -> str:
        state = "live" if self.live else ("fired" if self.fired else "cancelled")
        return f"FakeTimer(due={self.due_ms}, {state}, owner={type(self.owner).__name__})"


async def settle(max_rounds: int = 100_000) -> None:
    """Let every ready task and callback run until the loop is idle.

    Checks CPython's ready queue instead of guessing a number of yields.
    """
    loop = asyncio.get_running_loop()
    ready = getattr(loop, "_ready", None)
    if ready is None:  # pragma: no cover - non-CPython loop
        for _ in range(200):
            await asyncio.sleep(0)
        return
    for _ in range(max_rounds):
        await asyncio.sleep(0)
        if not ready:
            return
    raise AssertionError("event loop never went idle")


async def immediately(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` and require it to finish without virtual time passing.

    For calls that must not wait on the store: a regression fails the test
    instead of hanging it.
    """
    task = asyncio.get_running_loop().create_task(coro)
    await settle()
    if not task.done():
        task.cancel()
        raise AssertionError("expected an immediate result, but the call is waiting")
    return task.result()


class FakeClock:
    """Virtual milliseconds; implements ``tickwork.leases.Clock``."""

    def __init__(self, start_ms: float = 0.0, *, honour_cancel: bool = True) -> None:
        self._now = float(start_ms)
        self._seq = itertools.count()
        # A clock that fires cancelled timers anyway, to prove a replaced
        # watchdog is harmless even then.
        self._honour_cancel = honour_cancel
        self.timers: list[FakeTimer] = []
        self._heap: list[tuple[float, int, FakeTimer]] = []
        self._live: dict[int, dict[int, FakeTimer]] = {}  # id(owner) -> live timers
        self._created: dict[int, list[FakeTimer]] = {}
        # id(owner) -> largest number of live timers it held at once, sampled
        # right after each installation (the only moment the count can grow).
        self._peak_live: dict[int, int] = {}
        self.after_fire: list[Callable[[], None]] = []
        self.when_idle: list[Callable[[], None]] = []

    # Clock protocol
    def now_ms(self) -> float:
        return self._now

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> FakeTimer:
        assert not math.isnan(delay_ms), "NaN delay"
        owner = owner_of(callback)
        timer = FakeTimer(self, self._now + max(0.0, delay_ms), callback, owner, self.seq())
        self.timers.append(timer)
        heapq.heappush(self._heap, (timer.due_ms, timer.created_seq, timer))
        key = id(owner)
        self._created.setdefault(key, []).append(timer)
        live = self._live.setdefault(key, {})
        live[timer.created_seq] = timer
        self._peak_live[key] = max(self._peak_live.get(key, 0), len(live))
        return timer

    def _retire(self, timer: FakeTimer) -> None:
        self._live.get(id(timer.owner), {}).pop(timer.created_seq, None)

    # Inspection
    def seq(self) -> int:
        """A global order shared by timers and anything else a test records."""
        return next(self._seq)

    def live_timers(self, owner: object | None = None) -> list[FakeTimer]:
        if owner is not None:
            return sorted(self._live.get(id(owner), {}).values(), key=lambda t: t.created_seq)
        return [t for t in self.timers if t.live]

    def peak_live(self, owner: object) -> int:
        return self._peak_live.get(id(owner), 0)

    def created_by(self, owner: object) -> list[FakeTimer]:
        return list(self._created.get(id(owner), []))

    # Driving time
    async def advance(self, ms: float) -> None:
        await self.advance_to(self._now + ms)

    async def advance_to(self, target_ms: float) -> None:
        """Fire every timer due up to ``target_ms`` in (due, creation) order."""
        assert target_ms >= self._now, "time only moves forward"
        await settle()
        while self._heap and self._heap[0][0] <= target_ms:
            due_ms, _, timer = heapq.heappop(self._heap)
            if timer.fired or (timer.cancelled and self._honour_cancel):
                continue
            if due_ms > self._now:
                # About to move time: everything due earlier has run.
                self._run_hooks(self.when_idle)
                self._now = due_ms
            if not timer.cancelled:
                timer.fired = True
                self._retire(timer)
            timer.callback()
            await settle()
            self._run_hooks(self.after_fire)
        self._run_hooks(self.when_idle)
        self._now = float(target_ms)
        await settle()

    async def run_until(self, done: Callable[[], bool], *, step_ms: float, limit_ms: float) -> None:
        """Advance in steps until ``done()``; fail instead of spinning forever."""
        deadline = self._now + limit_ms
        while not done():
            assert self._now < deadline, f"not done after {limit_ms} ms of virtual time"
            await self.advance(step_ms)

    async def sleep(self, ms: float) -> None:
        """Virtual-time ``asyncio.sleep`` for test drivers."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.call_later(ms, partial(_resolve, future))
        await future

    @staticmethod
    def _run_hooks(hooks: Iterable[Callable[[], None]]) -> None:
        for hook in hooks:
            hook()


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


# --------------------------------------------------------------------------
# Store


class Boom(Exception):
    """A store failure raised by the fake ``renew``."""


Result = bool | BaseException


@dataclass
class Reply:
    """How the store answers one write: after ``latency_ms``, with ``result``."""

    latency_ms: float
    result: Result = True


@dataclass(eq=False)
class RenewCall:
    index: int
    claim: object
    extra_ms: int
    started_ms: float
    started_seq: int
    future: asyncio.Future[bool]
    finished_ms: float | None = None
    outcome: Result | None = None

    def succeed(self) -> None:
        self.resolve(True)

    def lose(self) -> None:
        self.resolve(False)

    def fail(self, error: BaseException) -> None:
        self.resolve(error)

    def resolve(self, result: Result) -> None:
        assert not self.future.done(), "write already answered"
        if isinstance(result, BaseException):
            self.future.set_exception(result)
        else:
            self.future.set_result(result)

    @property
    def pending(self) -> bool:
        return self.finished_ms is None


@dataclass
class FakeStore:
    """The ``renew`` port, with controllable latency and outcomes."""

    clock: FakeClock
    replies: Iterable[Reply] | Callable[[int], Reply] | None = None
    default_reply: Reply | None = None
    #: True: a renewal keeps the later of the held lease and its own end, as
    #: tickwork's stores do. False: it overwrites the lease (the store of the
    #: lock-heartbeat-renewal spec's story), so a late older write shortens it.
    keeps_longer: bool = True
    calls: list[RenewCall] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    # The lease as the store holds it, and its history (time, value).
    stored_lease_ms: float | None = None
    stored_history: list[tuple[float, float]] = field(default_factory=list)
    # End of the lease written by the most recent write that answered True.
    latest_success_deadline_ms: float | None = None
    last_result: Result | None = None
    last_answer_ms: float | None = None
    _reply_iter: Iterator[Reply] | None = None

    def __post_init__(self) -> None:
        if self.replies is not None and not callable(self.replies):
            self._reply_iter = iter(self.replies)

    def _planned_reply(self, index: int) -> Reply | None:
        if callable(self.replies):
            return self.replies(index)
        if self._reply_iter is not None:
            reply = next(self._reply_iter, None)
            if reply is not None:
                return reply
        return self.default_reply

    async def renew(self, claim: object, extra_ms: int) -> bool:
        loop = asyncio.get_running_loop()
        call = RenewCall(
            index=len(self.calls),
            claim=claim,
            extra_ms=extra_ms,
            started_ms=self.clock.now_ms(),
            started_seq=self.clock.seq(),
            future=loop.create_future(),
        )
        self.calls.append(call)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        reply = self._planned_reply(call.index)
        if reply is not None:
            self.clock.call_later(reply.latency_ms, partial(call.resolve, reply.result))
        try:
            matched = await call.future
        except BaseException as error:
            self._finish(call, error)
            raise
        self._finish(call, matched)
        if matched:
            # As the stores' renewal SQL does: the later of the held lease and
            # this write's end (measured, as the keeper measures it, from the
            # moment the write started).
            value = call.started_ms + extra_ms
            held = self.latest_success_deadline_ms
            if self.keeps_longer and held is not None and held > value:
                value = held
            self.stored_lease_ms = value
            self.stored_history.append((self.clock.now_ms(), value))
            self.latest_success_deadline_ms = value
        return matched

    def _finish(self, call: RenewCall, result: Result) -> None:
        self.in_flight -= 1
        call.finished_ms = self.clock.now_ms()
        call.outcome = result
        self.last_result = result
        self.last_answer_ms = call.finished_ms

    def pending(self) -> list[RenewCall]:
        return [c for c in self.calls if c.pending and not c.future.done()]

    def only_pending(self) -> RenewCall:
        pending = self.pending()
        assert len(pending) == 1, f"expected one pending write, got {len(pending)}"
        return pending[0]


# --------------------------------------------------------------------------
# Recording on_stale


@dataclass
class StaleLog:
    clock: FakeClock
    events: list[tuple[float, int, Any]] = field(default_factory=list)

    def __call__(self, stale: Any) -> None:
        self.events.append((self.clock.now_ms(), self.clock.seq(), stale))

    @property
    def count(self) -> int:
        return len(self.events)

    @property
    def reasons(self) -> list[Any]:
        return [stale.reason for _, _, stale in self.events]


# --------------------------------------------------------------------------
# A keeper wired to the fakes


@dataclass
class LeaseHarness:
    clock: FakeClock
    store: FakeStore
    stale_log: StaleLog
    keeper: LeaseKeeper[str]

    def watchdogs(self) -> list[FakeTimer]:
        """Live timers owned by the keeper: its watchdog(s)."""
        return self.clock.live_timers(self.keeper)


def make_harness(
    *,
    lease_ms: int = 120_000,
    deadline_ms: float | None = None,
    replies: Iterable[Reply] | Callable[[int], Reply] | None = None,
    default_reply: Reply | None = None,
    start_ms: float = 0.0,
) -> LeaseHarness:
    clock = FakeClock(start_ms)
    store = FakeStore(clock, replies=replies, default_reply=default_reply)
    store.latest_success_deadline_ms = deadline_ms
    log = StaleLog(clock)
    keeper: LeaseKeeper[str] = LeaseKeeper(
        "claim-token",
        store.renew,
        on_stale=log,
        clock=clock,
        lease_ms=lease_ms,
        deadline_ms=deadline_ms,
    )
    return LeaseHarness(clock, store, log, keeper)
