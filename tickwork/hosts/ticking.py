"""The tick loop of a host with an owner, shared by every such host.

The ``JobOwner`` Durable Object runs it in its alarm handler and ``tickwork
serve`` in each owner's tick task: tick until the owner is idle, hand every
result to the host, let other events in between ticks, and say why it
stopped, so the host decides what comes next (re-arm an alarm, retry later,
or nothing). It is the runtimes' drain loop
(``tickwork.runtimes.draining.drain_loop``), over an ``OwnerRuntime``'s
``draining()`` steps (each job's settlement and the claim of the next share
one transaction whenever the loop is sure to run that next job) or over a
plain tick function. A runtime with several slots (``concurrency`` N > 1)
is drained over every slot's steps at once (``draining_slots``,
``tickwork.runtimes.draining.drain_slots``): up to N jobs run side by side.
After the loop it prunes settled history when that is due
(``tickwork.runtimes.pruning``), and writes the history counted in it
(``tickwork.runtimes.history``). Runs on Pyodide: asyncio only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

from tickwork.lifecycle.operations import ClaimNext
from tickwork.model.outcomes import TickResult
from tickwork.runtimes.draining import (
    Budget,
    Parking,
    SlotSteps,
    Steps,
    Stop,
    Ticked,
    drain_loop,
    drain_slots,
)

__all__ = ["Drainable", "Stop", "Ticked", "tick_until_idle"]


class Slots(Parking, Protocol):
    """Every slot's steps, held (``OwnerRuntime.draining_slots()``)."""

    @property
    def steps(self) -> Sequence[SlotSteps]: ...


class Drainable(Protocol):
    """A runtime whose slots a loop can hold (``OwnerRuntime``)."""

    def draining_slots(self) -> AbstractContextManager[Slots]: ...


class _TickSteps:
    """The steps of a plain tick function: it never claims ahead."""

    carrying = False

    def __init__(self, tick: Callable[[], Awaitable[TickResult]]) -> None:
        self._tick = tick

    async def step(self, *, claim_next: ClaimNext = False) -> TickResult:
        return await self._tick()


@contextmanager
def _plain(tick: Callable[[], Awaitable[TickResult]]) -> Iterator[Steps]:
    yield _TickSteps(tick)


async def tick_until_idle(
    tick: Drainable | Callable[[], Awaitable[TickResult]],
    *,
    max_ticks: int | None = None,
    deadline_ms: int | None = None,
    now_ms: Callable[[], int] | None = None,
    on_result: Callable[[TickResult], None] | None = None,
    look_again: Callable[[], bool] | None = None,
    stopping: Callable[[], bool] | None = None,
) -> Ticked:
    """Tick until the owner is idle; see the module doc.

    ``tick`` is the runtime (it drains, holding its slots for the whole
    loop: with ``concurrency`` N, up to N jobs run at once) or a plain tick
    function.

    * ``max_ticks``, ``deadline_ms`` (by ``now_ms``), ``stopping()``: the
      budget (``tickwork.runtimes.draining.Budget``), asked as each job
      settles and between ticks (one job may run longer than it);
    * ``on_result(result)``: every result, as it comes, but that of a tick
      that found nothing to do;
    * ``look_again()``: asked when a tick found nothing to do and the budget
      lets the loop tick once more; True (work arrived meanwhile) ticks again.

    The next job is claimed ahead only when, as a job settles, the budget and
    ``stopping()`` let the loop run one more; one claimed ahead runs in this
    call, except when ``stopping()`` ends the loop first or the loop raises
    or is cancelled: then it goes back to its queue unstarted. A tick that
    answers busy or liveness_unknown ends the loop (``Ticked.stop`` says
    which): look again later, not at once.

    A tick that raises (storage failed) propagates: the host retries its way.

    After the loop, a runtime that prunes (``OwnerRuntime.prune_if_due``)
    runs a prune pass when one is due: settled history past its retention
    policy goes in a few bounded batches, between this loop and the next.
    """
    budget = Budget(max_ticks, deadline_ms, now_ms, stopping)
    draining_slots = getattr(tick, "draining_slots", None)
    if draining_slots is not None:
        with draining_slots() as pool:
            ended = await drain_slots(pool.steps, budget, parking=pool, on_result=on_result,
                                      look_again=look_again)
    else:
        with _plain(tick) as steps:  # type: ignore[arg-type]
            ended = await drain_loop(steps, budget, on_result=on_result, look_again=look_again)
    # Between this loop and the next: a prune pass when one is due (a few
    # bounded batches at most; tickwork.runtimes.pruning), never once the
    # host's stopping() ended the loop. A failure is logged there, not raised.
    prune_if_due = getattr(tick, "prune_if_due", None)
    if prune_if_due is not None and ended.stop != "stopped":
        prune_if_due()
    # The history's counts of this loop, and a sample when a minute has
    # turned (one or two statements; a failure is logged, the counts kept).
    flush_history = getattr(tick, "flush_history", None)
    if flush_history is not None:
        flush_history()
    return ended
