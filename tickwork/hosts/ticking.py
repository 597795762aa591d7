"""The tick loop of a host with an owner, shared by every such host.

The ``JobOwner`` Durable Object runs it in its alarm handler and ``tickwork
serve`` in each owner's tick task: tick until the owner is idle, hand every
result to the host, let other events in between ticks, and say why it
stopped, so the host decides what comes next (re-arm an alarm, retry later,
or nothing). Over an ``OwnerRuntime`` it drains (``OwnerRuntime.draining``):
each job's settlement and the claim of the next share one transaction,
whenever the loop is sure to run that next job. Runs on Pyodide: asyncio only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Literal, Protocol, TypeAlias

from tickwork.model.outcomes import TickResult

#: Why the loop stopped: the owner is idle; a tick found the ticker busy (another
#: loop ticks it) or could not judge a claim's liveness (look again later,
#: not at once); the tick or time budget ran out with work maybe left; the
#: host asked it to stop.
Stop: TypeAlias = Literal["idle", "busy", "liveness_unknown", "budget", "stopped"]


@dataclass(frozen=True, slots=True)
class Ticked:
    """How a loop ended: why, its last result, and how many ticks it ran."""

    stop: Stop
    last: TickResult | None
    ticks: int


class Steps(Protocol):
    """A loop's steps over one ticker (``tickwork.runtimes.owner_local.DrainSteps``)."""

    @property
    def carrying(self) -> bool: ...

    async def step(self, *, claim_next: bool | Callable[[], bool] = False) -> TickResult: ...


class Drainable(Protocol):
    """A runtime whose ticker a loop can hold (``OwnerRuntime``)."""

    def draining(self) -> AbstractContextManager[Steps]: ...


class _TickSteps:
    """The steps of a plain tick function: it never claims ahead."""

    carrying = False

    def __init__(self, tick: Callable[[], Awaitable[TickResult]]) -> None:
        self._tick = tick

    async def step(self, *, claim_next: bool | Callable[[], bool] = False) -> TickResult:
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

    ``tick`` is the runtime (it drains, holding its ticker for the whole
    loop) or a plain tick function.

    * ``max_ticks``, ``deadline_ms`` (by ``now_ms``): the budget, checked
      between ticks (one job may run longer than it);
    * ``on_result(result)``: every result, as it comes;
    * ``look_again()``: asked when a tick found nothing to do; True (work
      arrived meanwhile) ticks once more;
    * ``stopping()``: asked before every tick; True ends the loop.

    The next job is claimed ahead only when, as a job settles, the budget and
    ``stopping()`` let the loop run one more; one claimed ahead runs in this
    call, except when ``stopping()`` ends the loop first or the loop raises
    or is cancelled: then it goes back to its queue unstarted.

    A tick that raises (storage failed) propagates: the host retries its way.
    """
    if deadline_ms is not None and now_ms is None:
        raise ValueError("a deadline needs now_ms")
    draining = getattr(tick, "draining", None)
    held: AbstractContextManager[Steps] = (
        draining() if draining is not None else _plain(tick))  # type: ignore[arg-type]
    ticks = 0
    last: TickResult | None = None
    with held as steps:

        def one_more() -> bool:
            # Asked as a job settles (a drain then claims the next one in the
            # same transaction): whether the loop will run another tick.
            return ((max_ticks is None or ticks + 1 < max_ticks)
                    and (deadline_ms is None or now_ms is None or now_ms() < deadline_ms)
                    and (stopping is None or not stopping()))

        while True:
            if stopping is not None and stopping():
                return Ticked("stopped", last, ticks)
            last = await steps.step(claim_next=one_more)
            ticks += 1
            if on_result is not None:
                on_result(last)
            status = last.status
            if status == "busy" or status == "liveness_unknown":
                return Ticked(status, last, ticks)
            if status == "idle" and last.job_id is None and (
                    look_again is None or not look_again()):
                return Ticked("idle", last, ticks)
            if not steps.carrying and (
                    (max_ticks is not None and ticks >= max_ticks)
                    or (deadline_ms is not None and now_ms is not None
                        and now_ms() >= deadline_ms)):
                return Ticked("budget", last, ticks)
            # Let other events in between ticks: an executor that never awaits
            # would otherwise hold the event loop for the owner's whole backlog.
            await asyncio.sleep(0)
