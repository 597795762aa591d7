"""The tick loop of a host with an owner, shared by every such host.

The ``JobOwner`` Durable Object runs it in its alarm handler and ``tickwork
serve`` in each owner's tick task: tick until the owner is idle, hand every
result to the host, let other events in between ticks, and say why it
stopped, so the host decides what comes next (re-arm an alarm, retry later,
or nothing). Runs on Pyodide: asyncio only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, TypeAlias

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


async def tick_until_idle(
    tick: Callable[[], Awaitable[TickResult]],
    *,
    max_ticks: int | None = None,
    deadline_ms: int | None = None,
    now_ms: Callable[[], int] | None = None,
    on_result: Callable[[TickResult], None] | None = None,
    look_again: Callable[[], bool] | None = None,
    stopping: Callable[[], bool] | None = None,
) -> Ticked:
    """Tick until the owner is idle; see the module doc.

    * ``max_ticks``, ``deadline_ms`` (by ``now_ms``): the budget, checked
      between ticks (one job may run longer than it);
    * ``on_result(result)``: every result, as it comes;
    * ``look_again()``: asked when a tick found nothing to do; True (work
      arrived meanwhile) ticks once more;
    * ``stopping()``: asked before every tick; True ends the loop.

    A tick that raises (storage failed) propagates: the host retries its way.
    """
    if deadline_ms is not None and now_ms is None:
        raise ValueError("a deadline needs now_ms")
    ticks = 0
    last: TickResult | None = None
    while True:
        if stopping is not None and stopping():
            return Ticked("stopped", last, ticks)
        last = await tick()
        ticks += 1
        if on_result is not None:
            on_result(last)
        status = last.status
        if status == "busy" or status == "liveness_unknown":
            return Ticked(status, last, ticks)
        if status == "idle" and last.job_id is None and (
                look_again is None or not look_again()):
            return Ticked("idle", last, ticks)
        if (max_ticks is not None and ticks >= max_ticks) or (
                deadline_ms is not None and now_ms is not None and now_ms() >= deadline_ms):
            return Ticked("budget", last, ticks)
        # Let other events in between ticks: an executor that never awaits
        # would otherwise hold the event loop for the owner's whole backlog.
        await asyncio.sleep(0)
