"""The drain loop: every runtime's worker loop and every host's tick loop.

``OwnerRuntime.drain``, ``SharedRuntime.drain`` and the hosts'
``tickwork.hosts.ticking.tick_until_idle`` all run ``drain_loop``; each
supplies only its ``Steps`` (one tick, or the run of the claim the step
before it took ahead) and what to do when a tick finds nothing
(``look_again``).

The loop has one budget rule (``Budget``): at most ``max_ticks`` ticks,
none started once the deadline has passed by ``now_ms()``, and none once
``stopping()`` says so. It is asked:

* before each tick: ``stopping()`` ends the loop;
* as each job settles: a step claims the next job in the transaction (or
  batch) of that settlement only when the budget lets the loop run one more
  tick; a claim taken ahead then always runs in this loop, unless
  ``stopping()`` ends it first or the loop raises or is cancelled (the
  owner-local steps and the shared drain then put such a claim back
  unstarted);
* after each tick: the loop ends on a spent budget, unless it carries a
  claim taken ahead (which runs first).

A tick that answers ``busy`` (another loop holds the ticker) or
``liveness_unknown`` (a suspect claim's liveness could not be judged, and
nothing else was done) ends the loop: ticking again at once would only find
the same, so the host looks again later. Runs on Pyodide: asyncio only.

An owner-local runtime opened with ``concurrency=N`` (N > 1) has N slots,
each a ticker with its own steps, and a shared drain with
``concurrency=N`` has N loops of steps; ``drain_slots`` runs one such loop
per slot on the same event loop, under one shared budget (see its doc).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

from tickwork.lifecycle.operations import ClaimNext
from tickwork.model.errors import InvalidArgument
from tickwork.model.jobs import check_safe_int
from tickwork.model.outcomes import TickResult

__all__ = ["Budget", "Parking", "SlotSteps", "Steps", "Stop", "Ticked", "drain_loop",
           "drain_slots"]

logger = logging.getLogger("tickwork.events")

#: Why a drain loop stopped: nothing was left to do; a tick found the ticker
#: busy (another loop ticks it) or could not judge a claim's liveness (look
#: again later, not at once); the budget ran out with work maybe left; the
#: host asked it to stop.
Stop: TypeAlias = Literal["idle", "busy", "liveness_unknown", "budget", "stopped"]


@dataclass(frozen=True, slots=True)
class Ticked:
    """How a drain loop ended: why, its last result, and how many ticks it ran."""

    stop: Stop
    last: TickResult | None
    ticks: int


class Steps(Protocol):
    """A drain's steps over one ticker (``OwnerRuntime.draining()``, the
    shared runtime's own)."""

    @property
    def carrying(self) -> bool:
        """Whether the last step took a claim ahead (the next step runs it)."""
        ...

    async def step(self, *, claim_next: ClaimNext = False) -> TickResult:
        """Tick, or run the claim taken ahead; ``claim_next`` (or its answer,
        asked as the step's job settles) says whether to claim the next job
        in that settlement's transaction."""
        ...


class SlotSteps(Steps, Protocol):
    """The steps of one slot of a runtime with several (``drain_slots``)."""

    @property
    def running(self) -> bool:
        """Whether the slot holds a claim now (executing it, or taken ahead)."""
        ...


class Parking(Protocol):
    """What ``drain_slots`` asks of the runtime while a slot has nothing to
    claim and other slots still run jobs."""

    def due_in_ms(self) -> float | None:
        """How long until a waiting job or schedule slot is due, as far as
        the runtime knows (0: look now; None: nothing waits for a time)."""
        ...

    def listen(self, arrived: Callable[[], None]) -> Callable[[], None]:
        """Call ``arrived()`` after every committed change that may have
        made a job claimable (an ingest, a cancellation, a resume...);
        returns the function that stops it."""
        ...


@dataclass(frozen=True, slots=True)
class Budget:
    """The drain loop's one budget rule (see the module doc).

    ``max_ticks`` counts every tick, those that found nothing and looked
    again included; ``deadline_ms`` is read by ``now_ms`` (any clock in
    milliseconds, the same one); ``stopping()`` is the host's.
    """

    max_ticks: int | None = None
    deadline_ms: float | None = None
    now_ms: Callable[[], float] | None = None
    stopping: Callable[[], bool] | None = None

    def __post_init__(self) -> None:
        if self.deadline_ms is not None and self.now_ms is None:
            raise ValueError("a deadline needs now_ms")

    @classmethod
    def of(cls, *, max_ticks: int | None, budget_ms: int | None,
           now_ms: Callable[[], float]) -> Budget:
        """The budget of a runtime's ``drain(max_ticks=, budget_ms=)``, its
        arguments checked; the deadline is ``budget_ms`` from now."""
        if max_ticks is not None:
            check_safe_int("max_ticks", max_ticks, InvalidArgument, 1)
        if budget_ms is not None:
            check_safe_int("budget_ms", budget_ms, InvalidArgument, 1)
        deadline = None if budget_ms is None else now_ms() + budget_ms
        return cls(max_ticks, deadline, now_ms)

    def spent(self, ticks: int) -> bool:
        """Whether a loop that ran ``ticks`` ticks may start no other."""
        max_ticks, deadline, now_ms = self.max_ticks, self.deadline_ms, self.now_ms
        if max_ticks is not None and ticks >= max_ticks:
            return True
        return deadline is not None and now_ms is not None and now_ms() >= deadline

    def stopped(self) -> bool:
        """Whether the host asked the loop to stop."""
        stopping = self.stopping
        return stopping is not None and stopping()


#: A budget that never runs out.
UNBOUNDED = Budget()


async def drain_loop(
    steps: Steps,
    budget: Budget = UNBOUNDED,
    *,
    on_result: Callable[[TickResult], None] | None = None,
    look_again: Callable[[], bool | Awaitable[bool]] | None = None,
    yielding: bool = True,
) -> Ticked:
    """Step until nothing is left to do, the budget is spent, or a tick
    answers busy or liveness_unknown; see the module doc.

    * ``on_result(result)``: every tick's result but those that found
      nothing to do (a runtime's ``drain()`` returns exactly these);
    * ``look_again()``: asked (and awaited, if it answers an awaitable)
      when a tick found nothing to do and the budget lets the loop tick once
      more; True (work arrived, or came due while it waited) ticks again.

    * ``yielding``: let other events in between every two ticks (a host's
      loop shares its event loop with requests: an executor that never
      awaits would otherwise hold it for the whole backlog). A runtime's
      ``drain()`` passes False and yields only where its steps await: an
      event loop pass per job costs about 2 us, some 7% of a no-op job's
      drain in memory, and cannot be rationed by time on Workers, where the
      clock stands still while code runs.

    A step that raises (storage failed) propagates: the caller retries its way.
    """
    ticks = 0
    last: TickResult | None = None

    def one_more() -> bool:
        # Asked as a step's job settles (the step then claims the next job in
        # the same transaction): whether this loop will run another tick.
        try:
            return not budget.spent(ticks + 1) and not budget.stopped()
        except Exception:  # a host's clock or stopping() failed: claim nothing ahead
            logger.exception("tickwork: a drain's budget check raised; nothing claimed ahead")
            return False

    while True:
        if budget.stopped():
            return Ticked("stopped", last, ticks)
        if yielding and ticks and not steps.carrying and budget.spent(ticks):
            # Spent while this loop let other events in (the deadline passed);
            # a loop that does not yield asked just before, at the end of its
            # last tick.
            return Ticked("budget", last, ticks)
        last = await steps.step(claim_next=one_more)
        ticks += 1
        status = last.status
        if status == "idle" and last.job_id is None:
            # Looking again (a shared drain sleeps until a job is due) is
            # worth it only when the budget lets the loop tick once more.
            if look_again is None or budget.spent(ticks):
                return Ticked("idle", last, ticks)
            again = look_again()
            if inspect.isawaitable(again):
                again = await again
            if not again:
                return Ticked("idle", last, ticks)
        else:
            if on_result is not None:
                on_result(last)
            if status == "busy" or status == "liveness_unknown":
                return Ticked(status, last, ticks)
        if not steps.carrying and budget.spent(ticks):
            return Ticked("budget", last, ticks)
        if yielding:
            await asyncio.sleep(0)


#: How long a parked slot waits at most when the host can ask it to stop
#: (``Budget.stopping``), which nothing signals: it then looks again.
STOPPING_POLL_MS = 1_000


async def drain_slots(
    slots: Sequence[SlotSteps],
    budget: Budget = UNBOUNDED,
    *,
    parking: Parking,
    on_result: Callable[[TickResult], None] | None = None,
    look_again: Callable[[], bool | Awaitable[bool]] | None = None,
    yielding: bool = True,
) -> Ticked:
    """``drain_loop`` over several slots at once: each slot steps as the
    drain loop does (its settlement and the claim of its next job share one
    transaction when the budget allows), and they run side by side on the
    event loop, so up to ``len(slots)`` jobs execute at once. One slot is
    exactly ``drain_loop``.

    The budget is shared: ``max_ticks`` counts every slot's ticks (a claim
    taken ahead is counted as it is claimed, so the slots never start more
    than the budget allows); once it is spent, or the deadline passed, or
    ``stopping()`` says so, no slot claims another job, and the jobs in
    flight finish (each settled as its slot's step settles it).

    A slot whose tick found nothing while other slots run jobs parks: its
    tick is not counted, and it ticks again when one of them claims a new
    job (there may be more to claim), when ``parking`` reports a change
    that may have made a job claimable, or when the next known due time
    comes. The loop is idle when a slot finds nothing while no other slot
    runs a job (``look_again`` is asked then, as in ``drain_loop``). A slot
    whose tick answers ``busy`` (another loop holds its ticker) leaves the
    loop; the loop reports ``busy`` only if every slot did. A
    ``liveness_unknown`` answer parks the slot while others run, and ends
    the loop otherwise.

    A slot that raises stops every slot from claiming; the jobs in flight
    finish, and the first error (the earliest raised) propagates.
    """
    if len(slots) == 1:
        return await drain_loop(slots[0], budget, on_result=on_result,
                                look_again=look_again, yielding=yielding)
    loop = asyncio.get_running_loop()
    started = 0
    in_flight = 0
    parked: deque[asyncio.Future[None]] = deque()
    ended: list[Stop] = []
    last: list[TickResult | None] = [None]

    arrivals = 0  # changes heard of so far (see run_slot)

    def arrived() -> None:
        nonlocal arrivals
        arrivals += 1
        wake_one()

    def wake_one() -> None:
        while parked:
            waiter = parked.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def end(stop: Stop) -> None:
        if not ended:
            ended.append(stop)
        while parked:
            waiter = parked.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def others_run(me: SlotSteps) -> bool:
        return in_flight > 0 or any(other.carrying for other in slots if other is not me)

    def park_ms() -> float | None:
        waits = []
        due = parking.due_in_ms()
        if due is not None:
            waits.append(due)
        if budget.deadline_ms is not None and budget.now_ms is not None:
            waits.append(budget.deadline_ms - budget.now_ms())
        if budget.stopping is not None:
            waits.append(STOPPING_POLL_MS)
        return max(0.0, min(waits)) if waits else None

    async def park() -> None:
        waiter: asyncio.Future[None] = loop.create_future()
        parked.append(waiter)
        wait_ms = park_ms()
        await asyncio.wait((waiter,), timeout=None if wait_ms is None else wait_ms / 1000)

    async def run_slot(steps: SlotSteps) -> None:
        nonlocal started, in_flight
        reserved = False

        def one_more() -> bool:
            # Asked as this slot's job settles: claim the next in the same
            # transaction only if the shared budget has a tick left, and
            # count that tick now (no other slot may start it).
            nonlocal started, reserved
            try:
                if ended or budget.spent(started) or budget.stopped():
                    return False  # spent, or the loop is ending (a slot failed)
            except Exception:  # a host's clock or stopping() failed: claim nothing ahead
                logger.exception("tickwork: a drain's budget check raised; nothing claimed ahead")
                return False
            started += 1
            reserved = True
            return True

        def claimed_fresh() -> None:
            # Runs once the step reached its first await: a fresh tick that
            # claimed a job may have left more to claim for a parked slot.
            if steps.running:
                arrived()

        while True:
            if budget.stopped():
                end("stopped")
                return
            carried = steps.carrying
            if not carried:
                if ended or budget.spent(started):
                    end("budget")
                    return
                started += 1
            in_flight += 1
            # A change heard of while this step claimed (a raised limit, a
            # job another slot's settlement freed) may have come after the
            # claim read the store: a step that found nothing then looks
            # again instead of parking, or the change would wake no one.
            heard = arrivals
            check = None if carried else loop.call_soon(claimed_fresh)
            try:
                result = await steps.step(claim_next=one_more)
            finally:
                in_flight -= 1
                if check is not None:
                    check.cancel()
            if reserved and not steps.carrying:
                started -= 1  # counted for a claim ahead that found nothing
            reserved = False
            status = result.status
            found_nothing = status == "idle" and result.job_id is None
            if not found_nothing:
                last[0] = result
                if on_result is not None:
                    on_result(result)
                if status == "busy":
                    return  # another loop holds this slot's ticker
            if found_nothing and arrivals != heard and not ended:
                started -= 1  # not counted, as for a parked slot
                continue
            if found_nothing or status == "liveness_unknown":
                if others_run(steps) and not ended:
                    if found_nothing:
                        started -= 1  # parked, not counted: see the doc
                    await park()
                    continue
                if status == "liveness_unknown":
                    end("liveness_unknown")
                    return
                if look_again is None or budget.spent(started):
                    end("idle")
                    return
                again = look_again()
                if inspect.isawaitable(again):
                    again = await again
                if not again:
                    end("idle")
                    return
                wake_one()
            if yielding:
                await asyncio.sleep(0)

    first_failure: list[BaseException] = []

    async def guarded(steps: SlotSteps) -> None:
        try:
            await run_slot(steps)
        except BaseException as error:
            end("stopped")  # no slot claims more; the jobs in flight finish
            first_failure.append(error)
            raise

    unlisten = parking.listen(arrived)
    tasks = [asyncio.ensure_future(guarded(steps)) for steps in slots]
    try:
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        unlisten()
    if first_failure:
        raise first_failure[0]  # the earliest, whichever slot raised it
    return Ticked(ended[0] if ended else "busy", last[0], started)
