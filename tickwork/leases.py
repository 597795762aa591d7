"""Lease renewal that stays correct when many tasks heartbeat at once.

A claimed job is protected by a lease in the shared store (D1, PostgreSQL, ...)
and by a local *watchdog* timer that marks the execution stale when that lease
runs out.  Heartbeats come from several places at the same time: the runtime's
periodic renewer, the executor's own timer, progress callbacks.  This module
owns the whole concurrency boundary so that none of them needs a lock:

* one renewal write in flight per execution, later requests folded into a
  single follow-up write carrying the longest requested duration;
* one watchdog per execution, replaced in a single synchronous step after a
  successful write, never across an ``await``;
* the local deadline is computed from when the write *started*, so store
  latency shortens the lease instead of lengthening it;
* a finished or stale execution never arms a timer again.

Everything that touches time goes through a :class:`Clock`, so tests can run on
virtual time.  The module uses asyncio only (no threads), which keeps it usable
on Pyodide inside Cloudflare Workers as well as on CPython.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import heapq
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from types import TracebackType
from typing import Any, Final, Generic, Protocol, TypeVar

__all__ = [
    "DEFAULT_LEASE_MS",
    "DEFAULT_RENEW_EVERY_MS",
    "Clock",
    "Heartbeat",
    "LeaseKeeper",
    "LeaseState",
    "LoopClock",
    "PeriodicRenewer",
    "RenewPort",
    "StaleLease",
    "StaleReason",
    "TimerHandle",
    "coalesce_extra_ms",
    "lease_deadline_ms",
    "watchdog_delay_ms",
]

DEFAULT_LEASE_MS: Final = 120_000
"""Length of a lease written by a claim or a periodic renewal (2 minutes)."""

DEFAULT_RENEW_EVERY_MS: Final = 10_000
"""Interval of the periodic renewer (10 seconds)."""

ClaimT = TypeVar("ClaimT")

RenewPort = Callable[[ClaimT, int], Awaitable[bool]]
"""``await renew(claim, extra_ms)``: one fenced write extending the lease.

Returns True when the write matched our claim, False when the claim is no
longer ours (replaced or expired).  Raising means the outcome is unknown.
The write sets the lease to the later of its current end and ``now +
extra_ms``: a short renewal never shortens a longer lease (every tickwork
store renews that way, in one statement), so the keeper's watchdog never
moves earlier either.
"""


# --------------------------------------------------------------------------
# Time


class TimerHandle(Protocol):
    """A scheduled callback that can be cancelled."""

    def cancel(self) -> None: ...


class Clock(Protocol):
    """Monotonic milliseconds plus one-shot timers."""

    def now_ms(self) -> float: ...

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> TimerHandle: ...


#: Whether LoopClock timers share one loop timer by default: not on Pyodide.
#: A Worker's or a Durable Object's loop outlives the events it serves, and
#: a timer armed during one event never fires once that event has ended
#: (measured in workerd); a loop-wide timer would then be remembered as
#: armed in the next event, which would wait for it for ever.
SHARE_LOOP_TIMERS: Final = sys.platform != "emscripten"


class LoopClock:
    """:class:`Clock` backed by the running asyncio event loop.

    With ``shared`` (the default on CPython, ``SHARE_LOOP_TIMERS``), all of
    a loop's timers share one loop timer (:class:`_LoopTimers`): a worker
    arms a watchdog and a renewal timer for every job it claims and cancels
    both when the job ends, mostly milliseconds later, and one loop timer
    per pair cost more than the rest of the lease keeping. Without it (the
    default on Pyodide), every timer is a loop timer of its own, held only
    by whoever armed it, so no timer state outlives the event that armed it.
    """

    __slots__ = ("_shared",)

    def __init__(self, *, shared: bool = SHARE_LOOP_TIMERS) -> None:
        self._shared = shared

    def now_ms(self) -> float:
        return asyncio.get_running_loop().time() * 1000.0

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> TimerHandle:
        loop = asyncio.get_running_loop()
        timers = _timers_of(loop) if self._shared else None
        if timers is None:
            return _loop_timer(loop, delay_ms, callback)
        return timers.add(loop.time() * 1000.0 + delay_ms, callback)


def _timers_of(loop: asyncio.AbstractEventLoop) -> _LoopTimers | None:
    """The loop's shared timers, kept on the loop itself so that they go
    with it (a registry beside it would keep every loop alive through its
    armed handle); None for a loop that takes no attributes (uvloop), whose
    timers stay one loop timer each."""
    timers: _LoopTimers | None = getattr(loop, _TIMERS_ATTRIBUTE, None)
    if timers is None:
        timers = _LoopTimers(loop)
        try:
            setattr(loop, _TIMERS_ATTRIBUTE, timers)
        except AttributeError:
            return None
    return timers


_TIMERS_ATTRIBUTE: Final = "_tickwork_lease_timers"


def _loop_timer(
    loop: asyncio.AbstractEventLoop, delay_ms: float, callback: Callable[[], None]
) -> TimerHandle:
    """One timer of ``loop`` itself, ``delay_ms`` from now."""
    # Pyodide's WebLoop raises on negative delays; "already due" means now.
    delay_ms = max(0.0, delay_ms)
    if delay_ms <= MAX_TIMER_DELAY_MS:
        return loop.call_later(delay_ms / 1000.0, callback)
    # On Pyodide call_later is setTimeout, which fires a delay above
    # 2**31 - 1 ms (about 24.8 days) at once: wait in steps instead.
    return _SteppedTimer(loop, loop.time() * 1000.0 + delay_ms, callback)


class _QueuedTimer:
    """One LoopClock timer: an entry of its loop's :class:`_LoopTimers`."""

    __slots__ = ("_callback", "_context", "_queue", "_state")

    def __init__(self, queue: _LoopTimers, callback: Callable[[], None]) -> None:
        self._queue = queue
        self._callback = callback
        # Run in the context it was set in, as a timer of the loop would be.
        self._context = contextvars.copy_context()
        self._state = _WAITING

    def cancel(self) -> None:
        state = self._state
        self._state = _SETTLED
        if state == _WAITING:
            self._queue._cancelled_one()
        # _DUE: popped for this firing, not run yet; it will not run.


#: A queued timer's states: in the heap, popped to run in this firing, done.
_WAITING, _DUE, _SETTLED = 0, 1, 2


class _LoopTimers:
    """Every LoopClock timer of one loop, behind the one loop timer armed for
    the earliest of them.

    Entries sit in a heap of (due ms, arrival, timer), ordered in C; a
    cancelled entry is only marked, and is dropped when it reaches the top,
    when cancelled entries outnumber live ones (the heap is rebuilt), or
    when none is live. The loop timer is moved only to an earlier due time,
    so an idle loop holds at most one, due no later than the last timer it
    had. Timers fire no earlier than asyncio's would, in due order, equal
    dues in the order they were set; a callback that raises goes to the
    loop's exception handler and the others still run.
    """

    __slots__ = ("_armed", "_armed_due", "_arrivals", "_cancelled", "_heap", "_live", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[float, int, _QueuedTimer]] = []
        self._arrivals = 0
        self._live = 0
        self._cancelled = 0
        self._armed: TimerHandle | None = None
        self._armed_due = 0.0

    def add(self, due_ms: float, callback: Callable[[], None]) -> _QueuedTimer:
        timer = _QueuedTimer(self, callback)
        self._arrivals += 1
        heapq.heappush(self._heap, (due_ms, self._arrivals, timer))
        self._live += 1
        if self._armed is None or due_ms < self._armed_due:
            self._arm(due_ms)
        return timer

    def _cancelled_one(self) -> None:
        self._live -= 1
        self._cancelled += 1
        if self._live == 0:
            # The loop timer stays: a worker between two batches of jobs
            # would otherwise cancel it and arm it again for every batch. It
            # fires once more, finds nothing and arms nothing.
            self._heap.clear()
            self._cancelled = 0
        elif self._cancelled > _COMPACT_AFTER and self._cancelled > self._live:
            self._heap = [entry for entry in self._heap if entry[2]._state == _WAITING]
            heapq.heapify(self._heap)
            self._cancelled = 0

    def _arm(self, due_ms: float) -> None:
        armed = self._armed
        if armed is not None:
            armed.cancel()
        self._armed_due = due_ms
        self._armed = _loop_timer(self._loop, due_ms - self._loop.time() * 1000.0, self._fire)

    def _fire(self) -> None:
        self._armed = None
        heap = self._heap
        now = self._loop.time() * 1000.0
        due: list[_QueuedTimer] = []
        while heap and heap[0][0] <= now:
            timer = heapq.heappop(heap)[2]
            if timer._state == _SETTLED:
                self._cancelled -= 1
            else:
                timer._state = _DUE
                self._live -= 1
                due.append(timer)
        while heap and heap[0][2]._state == _SETTLED:
            heapq.heappop(heap)
            self._cancelled -= 1
        if heap:
            # Timers set by the callbacks below arm an earlier one if they need it.
            self._arm(heap[0][0])
        for timer in due:
            if timer._state != _DUE:
                continue  # cancelled by an earlier callback, as asyncio would skip it
            timer._state = _SETTLED
            try:
                timer._context.run(timer._callback)
            except (SystemExit, KeyboardInterrupt):
                raise
            except BaseException as error:
                self._loop.call_exception_handler({
                    "message": "tickwork.leases: a timer callback raised",
                    "exception": error,
                })


#: How many cancelled timers a loop's heap may hold beyond its live ones.
_COMPACT_AFTER: Final = 64



#: The longest delay a JS timer (setTimeout, behind Pyodide's event loop) honours.
MAX_TIMER_DELAY_MS: Final = 2**31 - 1


class _SteppedTimer:
    """A timer longer than MAX_TIMER_DELAY_MS, armed as a chain of shorter ones."""

    __slots__ = ("_callback", "_due_ms", "_handle", "_loop")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, due_ms: float, callback: Callable[[], None]
    ) -> None:
        self._loop = loop
        self._due_ms = due_ms
        self._callback = callback
        self._handle = self._arm()

    def _arm(self) -> asyncio.TimerHandle:
        remaining = max(0.0, self._due_ms - self._loop.time() * 1000.0)
        if remaining <= MAX_TIMER_DELAY_MS:
            return self._loop.call_later(remaining / 1000.0, self._callback)
        return self._loop.call_later(MAX_TIMER_DELAY_MS / 1000.0, self._step)

    def _step(self) -> None:
        self._handle = self._arm()

    def cancel(self) -> None:
        self._handle.cancel()


# --------------------------------------------------------------------------
# Pure decisions


def lease_deadline_ms(started_at_ms: float, extra_ms: int) -> float:
    """Local end of a lease written by a renewal that started at ``started_at_ms``.

    Measured from the start of the write, never from its response: the store may
    have applied the write at any moment in between, so this is the earliest
    end it can have.
    """
    return started_at_ms + extra_ms


def watchdog_delay_ms(deadline_ms: float, now_ms: float) -> float:
    """How long the watchdog should wait; zero or less means already expired."""
    return deadline_ms - now_ms


def coalesce_extra_ms(pending_ms: int | None, requested_ms: int) -> int:
    """Duration of a follow-up write after another request joins it."""
    return requested_ms if pending_ms is None else max(pending_ms, requested_ms)


def _checked_duration(ms: int, what: str) -> int:
    if isinstance(ms, bool) or not isinstance(ms, int):
        raise TypeError(f"{what} must be an int number of milliseconds, got {ms!r}")
    if ms <= 0:
        raise ValueError(f"{what} must be positive, got {ms}")
    return ms


# --------------------------------------------------------------------------
# Outcomes


class StaleReason(enum.StrEnum):
    """Why an execution lost its lease.

    A ``str``, so it can serve directly as an abort reason.
    """

    EXPIRED = "lease_expired"
    """The local deadline passed without a successful renewal covering it."""

    LOST = "lease_lost"
    """``renew`` answered False: the claim was replaced or had expired."""

    RENEW_FAILED = "lease_renew_failed"
    """``renew`` raised, so ownership can no longer be vouched for."""


class StaleLease(Exception):
    """The execution no longer holds its lease and must stop.

    Passed to ``on_stale``; suitable as an abort signal's reason.  When the
    cause was an exception from ``renew`` it is available as :attr:`error`
    (and as ``__cause__``).
    """

    def __init__(self, reason: StaleReason, error: BaseException | None = None) -> None:
        message = reason.value
        if error is not None:
            message = f"{message} ({type(error).__name__}: {error})"
        super().__init__(message)
        self.reason: Final = reason
        self.error: Final = error
        self.__cause__ = error


class LeaseState(enum.Enum):
    """Life cycle of a :class:`LeaseKeeper`; only ``ACTIVE`` can change."""

    ACTIVE = "active"
    CLEARED = "cleared"
    STALE = "stale"


class _Failure:
    """A write that raised, shared by all the callers it covered.

    Kept as a value rather than set on the future, so a write nobody awaits
    (a timer-driven one) never leaves an unretrieved exception behind.
    """

    __slots__ = ("error", "traceback")

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.traceback: TracebackType | None = error.__traceback__

    def raise_for_caller(self) -> None:
        # Reset the traceback each time so N callers don't grow one chain.
        raise self.error.with_traceback(self.traceback)


_Outcome = bool | _Failure


# --------------------------------------------------------------------------
# The keeper


class LeaseKeeper(Generic[ClaimT]):
    """Renews one execution's lease and watches its deadline.

    ``extend()`` may be called from any number of tasks at once.  At most one
    ``renew`` call is in flight; requests arriving meanwhile share a single
    follow-up write carrying the longest duration asked for.  The keeper holds
    a fixed number of fields whatever the number of callers.

    ``deadline_ms`` (in the clock's time) arms the watchdog for the lease the
    claim already wrote; without it the watchdog starts at the first renewal.
    ``on_stale`` is called once, synchronously, when the lease is lost.
    """

    __slots__ = (
        "_claim",
        "_clock",
        "_deadline_ms",
        "_lease_ms",
        "_next_extra_ms",
        "_next_flight",
        "_on_stale",
        "_periodic",
        "_pump",
        "_renew",
        "_stale",
        "_state",
        "_watchdog",
        "_watchdog_generation",
        "_writing",
    )

    def __init__(
        self,
        claim: ClaimT,
        renew: RenewPort[ClaimT],
        *,
        on_stale: Callable[[StaleLease], object],
        clock: Clock | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        deadline_ms: float | None = None,
    ) -> None:
        self._claim = claim
        self._renew = renew
        self._on_stale = on_stale
        self._clock: Clock = clock if clock is not None else LoopClock()
        self._lease_ms = _checked_duration(lease_ms, "lease_ms")
        self._state = LeaseState.ACTIVE
        self._stale: StaleLease | None = None
        self._watchdog: TimerHandle | None = None
        self._watchdog_generation = 0
        self._deadline_ms: float | None = None
        self._writing = False
        # The whole pending state: one future and one duration for the next
        # write, whatever the number of callers waiting on it.
        self._next_flight: asyncio.Future[_Outcome] | None = None
        self._next_extra_ms = 0
        self._pump: asyncio.Task[None] | None = None
        self._periodic: PeriodicRenewer | None = None
        if deadline_ms is not None:
            self._arm_watchdog(deadline_ms)

    # -- read-only view ----------------------------------------------------

    @property
    def claim(self) -> ClaimT:
        return self._claim

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def lease_ms(self) -> int:
        """Duration used when ``extend()`` is called without one."""
        return self._lease_ms

    @property
    def state(self) -> LeaseState:
        return self._state

    @property
    def active(self) -> bool:
        return self._state is LeaseState.ACTIVE

    @property
    def stale(self) -> StaleLease | None:
        """Why the lease was lost, once it has been."""
        return self._stale

    @property
    def deadline_ms(self) -> float | None:
        """When the armed watchdog fires, or None when none is armed."""
        return self._deadline_ms if self._watchdog is not None else None

    @property
    def writing(self) -> bool:
        """True while a ``renew`` call is in flight."""
        return self._writing

    # -- renewals ----------------------------------------------------------

    async def extend(self, extra_ms: int | None = None) -> bool:
        """Extend the lease by ``extra_ms`` (default: ``lease_ms``) from now.

        Returns when the write covering this request has completed:

        * True: that write matched our claim and came back before the
          deadline it set.
        * False: the lease is not held: the write reported the claim lost, it
          came back too late, or the keeper was already cleared or stale (or
          became so before the covering write could start); no error is raised
          because ``on_stale`` already tells the execution to stop.

        If the covering write raised, the original exception is re-raised here
        (in every caller it covered) and the execution is stale.  Cancelling
        one caller does not cancel the write or affect the other callers.
        """
        flight = self._join(extra_ms)
        if flight is None:
            return False
        # shield: the flight future is shared, so one caller's cancellation
        # must not cancel it for the others.
        outcome = await asyncio.shield(flight)
        if isinstance(outcome, _Failure):
            outcome.raise_for_caller()
        return outcome is True

    def extend_nowait(self, extra_ms: int | None = None) -> None:
        """Request an extension without waiting for it (fire and forget).

        Joins the same single flight as :meth:`extend`; usable from synchronous
        code such as a progress callback.  Failures are not lost: they make the
        execution stale and reach ``on_stale``.
        """
        self._join(extra_ms)

    def _join(self, extra_ms: int | None) -> asyncio.Future[_Outcome] | None:
        extra = self._lease_ms if extra_ms is None else _checked_duration(extra_ms, "extra_ms")
        if self._state is not LeaseState.ACTIVE:
            return None
        loop = asyncio.get_running_loop()
        flight = self._next_flight
        if flight is None:
            flight = loop.create_future()
            self._next_flight = flight
            self._next_extra_ms = extra
        else:
            self._next_extra_ms = coalesce_extra_ms(self._next_extra_ms, extra)
        # The flight is captured before the pump may start (eagerly, on loops
        # with an eager task factory) and take it.
        if self._pump is None or self._pump.done():
            self._pump = loop.create_task(self._drain(), name="tickwork-lease-renewal")
        return flight

    async def _drain(self) -> None:
        """Run queued writes one after another until none is pending."""
        while (flight := self._next_flight) is not None:
            extra_ms = self._next_extra_ms
            self._next_flight = None
            outcome: _Outcome
            try:
                outcome = await self._write(extra_ms)
            except BaseException as error:
                self._writing = False
                self._become_stale(StaleReason.RENEW_FAILED, error)
                flight.set_result(_Failure(error))
                if isinstance(error, Exception):
                    continue  # stale now, so nothing is pending: the loop ends
                raise  # cancellation of the pump itself
            flight.set_result(outcome)

    async def _write(self, extra_ms: int) -> bool:
        self._writing = True
        started_at = self._clock.now_ms()
        matched = await self._renew(self._claim, extra_ms)
        self._writing = False
        if not matched:
            self._become_stale(StaleReason.LOST)
            return False
        # The store kept the later of the lease it held and this write's end
        # (RenewPort), so the lease ends no earlier than the deadline already
        # watched: a short renewal must not bring the watchdog forward and
        # abort an execution whose lease is still live.
        deadline = lease_deadline_ms(started_at, extra_ms)
        if self._deadline_ms is not None and self._deadline_ms > deadline:
            deadline = self._deadline_ms
        in_time = watchdog_delay_ms(deadline, self._clock.now_ms()) > 0
        # No await between the write's response and this decision, and
        # _arm_watchdog does nothing once the keeper is cleared or stale.
        self._arm_watchdog(deadline)
        return in_time

    # -- watchdog ------------------------------------------------------------

    def watch(self, deadline_ms: float) -> None:
        """Arm the watchdog for the lease ending at ``deadline_ms`` (in the
        clock's time), as the constructor's ``deadline_ms`` does, for a keeper
        that arms it later. Already past: the keeper goes stale at once."""
        self._arm_watchdog(deadline_ms)

    def _arm_watchdog(self, deadline_ms: float) -> None:
        """The single place a watchdog is installed.

        The old timer is cancelled and the new one installed in the same
        synchronous step, so the keeper never owns two timers and never loses
        track of one.
        """
        if self._state is not LeaseState.ACTIVE:
            return
        self._disarm_watchdog()
        delay = watchdog_delay_ms(deadline_ms, self._clock.now_ms())
        if delay <= 0:
            self._become_stale(StaleReason.EXPIRED)
            return
        self._watchdog_generation += 1
        self._deadline_ms = deadline_ms
        self._watchdog = self._clock.call_later(
            delay, partial(self._watchdog_fired, self._watchdog_generation)
        )

    def _disarm_watchdog(self) -> None:
        timer, self._watchdog = self._watchdog, None
        self._deadline_ms = None
        if timer is not None:
            timer.cancel()

    def _watchdog_fired(self, generation: int) -> None:
        # A timer that is no longer the current one is ignored: a replaced
        # watchdog can never mark the execution stale, even if a clock
        # implementation failed to honour cancel().
        if self._watchdog is None or generation != self._watchdog_generation:
            return
        self._watchdog = None
        self._become_stale(StaleReason.EXPIRED)

    # -- terminal states ---------------------------------------------------

    def clear(self) -> None:
        """Finish: disarm the watchdog for good and stop all renewals.

        Idempotent.  A write already in flight completes and its callers get
        its result, but it arms nothing.  Callers waiting for a follow-up write
        that has not started return False at once.  Does not call
        ``on_stale``.
        """
        if self._state is LeaseState.ACTIVE:
            self._state = LeaseState.CLEARED
            self._shut_down()

    def _become_stale(self, reason: StaleReason, error: BaseException | None = None) -> None:
        if self._state is not LeaseState.ACTIVE:
            return  # terminal states are final; stale handling runs once
        self._state = LeaseState.STALE
        stale = StaleLease(reason, error)
        self._stale = stale
        self._shut_down()
        try:
            self._on_stale(stale)
        except Exception as callback_error:
            # Must not break the renewal loop or the other callers.
            asyncio.get_running_loop().call_exception_handler(
                {
                    "message": "tickwork.leases: on_stale callback raised",
                    "exception": callback_error,
                }
            )

    def _shut_down(self) -> None:
        self._disarm_watchdog()
        periodic, self._periodic = self._periodic, None
        if periodic is not None:
            periodic.stop()
        flight, self._next_flight = self._next_flight, None
        if flight is not None and not flight.done():
            flight.set_result(False)

    # -- helpers for the runtime -------------------------------------------

    def start_periodic(
        self, *, every_ms: int = DEFAULT_RENEW_EVERY_MS, lease_ms: int | None = None,
        since_ms: float | None = None,
    ) -> PeriodicRenewer:
        """Start renewing ``lease_ms`` (default ``self.lease_ms``) every ``every_ms``,
        the first renewal ``every_ms`` after ``since_ms`` (clock time; default now).

        The renewer stops by itself when the keeper is cleared or goes stale.
        """
        renewer = PeriodicRenewer(self, every_ms=every_ms, lease_ms=lease_ms)
        renewer.start(since_ms=since_ms)
        return renewer

    def heartbeat(self, extra_ms: int | None = None) -> Heartbeat:
        """The object to hand to the executor for its own heartbeats."""
        return Heartbeat(self, extra_ms=extra_ms)

    def _attach_periodic(self, renewer: PeriodicRenewer) -> bool:
        if self._state is not LeaseState.ACTIVE:
            return False
        if self._periodic is not None and self._periodic is not renewer:
            raise RuntimeError("a periodic renewer is already running for this lease")
        self._periodic = renewer
        return True

    def _detach_periodic(self, renewer: PeriodicRenewer) -> None:
        if self._periodic is renewer:
            self._periodic = None


# --------------------------------------------------------------------------
# Periodic renewal and the executor's heartbeat


class PeriodicRenewer:
    """Asks its keeper for a ``lease_ms`` extension every ``every_ms``.

    Each tick is a fire-and-forget request into the keeper's single flight, so
    ticks and executor heartbeats coalesce; a slow store never piles up writes.
    The renewer owns at most one timer and no task.  It stops on :meth:`stop`
    or when the keeper is cleared or goes stale.  A failing timer-driven write
    is reported through the keeper's ``on_stale`` (with the error attached).
    """

    __slots__ = ("_every_ms", "_keeper", "_lease_ms", "_stopped", "_timer")

    def __init__(
        self,
        keeper: LeaseKeeper[Any],
        *,
        every_ms: int = DEFAULT_RENEW_EVERY_MS,
        lease_ms: int | None = None,
    ) -> None:
        every = _checked_duration(every_ms, "every_ms")
        lease = keeper.lease_ms if lease_ms is None else _checked_duration(lease_ms, "lease_ms")
        if every >= lease:
            raise ValueError(
                f"every_ms ({every}) must be shorter than lease_ms ({lease}),"
                " or the lease lapses between renewals"
            )
        self._keeper = keeper
        self._every_ms = every
        self._lease_ms = lease
        self._timer: TimerHandle | None = None
        self._stopped = False

    @property
    def every_ms(self) -> int:
        return self._every_ms

    @property
    def lease_ms(self) -> int:
        return self._lease_ms

    @property
    def running(self) -> bool:
        return self._timer is not None

    def start(self, *, since_ms: float | None = None) -> None:
        """Schedule the first tick ``every_ms`` after ``since_ms`` (clock
        time; default now), at once if that has passed (no-op if running)."""
        if self._stopped or self._timer is not None:
            return
        if not self._keeper._attach_periodic(self):
            self._stopped = True  # keeper already finished: never start
            return
        self._schedule(None if since_ms is None
                       else max(0.0, since_ms + self._every_ms - self._keeper.clock.now_ms()))

    def stop(self) -> None:
        """Cancel the next tick for good.  Idempotent."""
        self._stopped = True
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        self._keeper._detach_periodic(self)

    def _schedule(self, delay_ms: float | None = None) -> None:
        """Arm the next tick, ``delay_ms`` (default ``every_ms``) from now."""
        delay = self._every_ms if delay_ms is None else delay_ms
        self._timer = self._keeper.clock.call_later(delay, self._tick)

    def _tick(self) -> None:
        self._timer = None
        if self._stopped:
            return
        if not self._keeper.active:
            self.stop()
            return
        self._keeper.extend_nowait(self._lease_ms)
        self._schedule()


class Heartbeat:
    """What an executor uses to keep its lease while it works.

    Safe to call from any number of tasks and callbacks at once; no mutex is
    needed because every call goes through the keeper's single flight.
    """

    __slots__ = ("_extra_ms", "_keeper")

    def __init__(self, keeper: LeaseKeeper[Any], *, extra_ms: int | None = None) -> None:
        self._keeper = keeper
        self._extra_ms = None if extra_ms is None else _checked_duration(extra_ms, "extra_ms")

    async def beat(self, extra_ms: int | None = None) -> bool:
        """Extend the lease and wait for the write; see :meth:`LeaseKeeper.extend`."""
        return await self._keeper.extend(self._extra_ms if extra_ms is None else extra_ms)

    def pulse(self, extra_ms: int | None = None) -> None:
        """Request an extension without waiting (for synchronous callbacks)."""
        self._keeper.extend_nowait(self._extra_ms if extra_ms is None else extra_ms)

    @property
    def alive(self) -> bool:
        """False once the job finished or its lease was lost."""
        return self._keeper.active

    @property
    def stale(self) -> StaleLease | None:
        """Why the lease was lost, if it was."""
        return self._keeper.stale
