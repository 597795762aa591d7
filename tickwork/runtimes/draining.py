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
the same, so the host looks again later.

``drain_together`` runs several such loops at once over one budget (a
shared runtime's ``drain(concurrency=N)``): the deadline and ``stopping()``
are theirs in common, ``max_ticks`` is shared out between them, and a loop
that raises spends the others' budgets, so each finishes the job it holds
(and any claim it took ahead) and claims nothing more before the failure
propagates. Runs on Pyodide: asyncio only.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

from tickwork.lifecycle.operations import ClaimNext
from tickwork.model.errors import InvalidArgument
from tickwork.model.jobs import check_safe_int
from tickwork.model.outcomes import TickResult

__all__ = ["Budget", "Steps", "Stop", "Ticked", "drain_loop", "drain_together"]

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


@dataclass(frozen=True, slots=True)
class Budget:
    """The drain loop's one budget rule (see the module doc).

    ``max_ticks`` counts every tick, those that found nothing and looked
    again included; ``deadline_ms`` is read by ``now_ms`` (any clock in
    milliseconds, the same one); ``stopping()`` is the host's;
    ``cut_short()``, when given, spends the budget once it answers True (a
    loop run beside others by ``drain_together`` whose sibling failed).
    """

    max_ticks: int | None = None
    deadline_ms: float | None = None
    now_ms: Callable[[], float] | None = None
    stopping: Callable[[], bool] | None = None
    cut_short: Callable[[], bool] | None = None

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
        if self.cut_short is not None and self.cut_short():
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
        if ticks and not steps.carrying and budget.spent(ticks):
            # Spent while this loop let other events in (the deadline passed,
            # or a loop beside it in drain_together failed).
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


async def drain_together(
    steps: Sequence[Steps],
    budget: Budget = UNBOUNDED,
    *,
    on_result: Callable[[TickResult], None] | None = None,
    look_again: Callable[[], bool | Awaitable[bool]] | None = None,
    yielding: bool = True,
) -> list[Ticked]:
    """Run one ``drain_loop`` per element of ``steps`` at once, over one
    budget (see the module doc); how each loop ended, in ``steps``' order.

    ``max_ticks`` is shared out as evenly as it divides (loops left with
    none are not run): the loops tick at most ``max_ticks`` times in all.
    Results reach ``on_result`` as they come, from whichever loop. When a
    loop raises, the others claim nothing more and end once the jobs they
    hold have settled; then the first failure (the earliest raised)
    propagates. Cancelling the call cancels every loop.
    """
    if not steps:
        raise ValueError("drain_together needs at least one loop's steps")
    failed = False
    first_failure: BaseException | None = None

    def cut_short() -> bool:
        return failed

    shares: list[int | None]
    if budget.max_ticks is None:
        shares = [None] * len(steps)
    else:
        share, extra = divmod(budget.max_ticks, len(steps))
        shares = [share + (1 if number < extra else 0) for number in range(len(steps))]

    async def one_loop(loop_steps: Steps, max_ticks: int | None) -> Ticked:
        nonlocal failed, first_failure
        if failed:  # a loop before this one failed before this one began
            return Ticked("budget", None, 0)
        loop_budget = Budget(max_ticks, budget.deadline_ms, budget.now_ms, budget.stopping,
                             cut_short)
        try:
            return await drain_loop(loop_steps, loop_budget, on_result=on_result,
                                    look_again=look_again, yielding=yielding)
        except BaseException as error:
            failed = True
            if first_failure is None:
                first_failure = error
            raise

    running = [one_loop(loop_steps, share) for loop_steps, share in zip(steps, shares, strict=True)
               if share != 0]
    ended = await asyncio.gather(*running, return_exceptions=True)
    if first_failure is not None:
        raise first_failure
    return [outcome for outcome in ended if isinstance(outcome, Ticked)]
