"""Shared runtimes across Workers events: no timer state outlives its event.

Under ``tests.support.workers_events`` a loop behaves as a Worker's does: a
timer armed during an event never fires once the event has ended, and time
passes between events. The runtime's default clock on Pyodide keeps no
loop-wide timer (``LoopClock(shared=False)``), so a drain that waits for a
due job, and a lease renewed every ``renew_every_ms``, work in every event.
The loop-wide timers of ``LoopClock(shared=True)`` (CPython's default, where
a loop's events never end) are shown failing under the same rules: that is
the cron drain that died in real workerd.

Also run inside real Pyodide (tests/pyodide, suite ``shared-d1``), where the
default clock is the unshared one.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from tests.support import job
from tests.support.shared import SharedHarness
from tests.support.workers_events import EventHung, WorkersEvents
from tickwork import Completed
from tickwork.leases import SHARE_LOOP_TIMERS, LoopClock

#: Whether LoopClock shares one loop timer; None: the runtime's default clock
#: (loop-wide on CPython, per event on Pyodide).
CLOCKS = [pytest.param(False, id="timers-per-event"), pytest.param(True, id="loop-wide-timer"),
          pytest.param(None, id="default-clock")]


def _clock(shared_timers: bool | None) -> dict[str, Any]:
    return {} if shared_timers is None else {"clock": LoopClock(shared=shared_timers)}


def _works_across_events(shared_timers: bool | None) -> bool:
    return not (SHARE_LOOP_TIMERS if shared_timers is None else shared_timers)


def fresh_loop_timers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The running loop's shared timers start empty, as in a new isolate:
    inside Pyodide one loop runs every case, and a timer an earlier case
    left armed (outside any event, so alive) would fire into these events
    and hide what a loop-wide timer does across them."""
    monkeypatch.delattr(asyncio.get_running_loop(), "_tickwork_lease_timers", raising=False)


def test_the_default_clock_keeps_no_loop_wide_timer_on_pyodide() -> None:
    assert SHARE_LOOP_TIMERS is (sys.platform != "emscripten")


@pytest.mark.parametrize("shared_timers", CLOCKS)
async def test_a_drain_waits_for_a_due_job_in_every_event(
    shared: SharedHarness, shared_timers: bool | None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    fresh_loop_timers(monkeypatch)
    runtime = shared.runtime(db_time=True, **_clock(shared_timers))

    async def firing(job_id: str) -> list[str]:
        # A cron firing: a job comes due within the drain's budget. Its delay
        # is long enough that the drain's first tick finds it waiting even on
        # a loaded machine (with 150 ms, a slow ingest let the tick find it
        # due at once: nothing waited, and a loop-wide timer hung nothing).
        await runtime.ingest(job(job_id, delay_ms=1_000))
        return [result.job_id or "" for result in await runtime.drain(budget_ms=10_000)]

    with WorkersEvents() as events:
        assert await events.run(lambda: firing("first"), name="first firing",
                                limit_s=8) == ["first"]
        events.pass_time(60)  # the next firing comes a minute later
        if _works_across_events(shared_timers):
            assert await events.run(lambda: firing("second"), name="second firing",
                                    limit_s=8) == ["second"]
        else:
            with pytest.raises(EventHung):
                await events.run(lambda: firing("second"), name="second firing", limit_s=4)


@pytest.mark.parametrize("shared_timers", CLOCKS)
async def test_a_lease_is_renewed_in_a_later_event(
    shared: SharedHarness, shared_timers: bool | None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    fresh_loop_timers(monkeypatch)
    renewals: list[str] = []

    async def slow(record: Any, signal: Any) -> Any:
        await asyncio.sleep(0)  # a job that waits once has its lease timers armed
        if record.job_id == "slow":
            await asyncio.sleep(2.0)  # longer than the 1.5 s lease
        return Completed()

    # Each event makes its own runtime, as the Worker's cron does: the first
    # with the default lease settings, the second renewing every 100 ms.
    first = shared.runtime(db_time=True, execute=slow, **_clock(shared_timers))
    runtime = shared.runtime(db_time=True, execute=slow, lease_ms=1_500, renew_every_ms=100,
                             **_clock(shared_timers))
    store = runtime._store
    renew = store.renew

    async def counted_renew(*args: Any, **kwargs: Any) -> Any:
        renewals.append("renew")
        return await renew(*args, **kwargs)

    store.renew = counted_renew  # type: ignore[method-assign]

    async def run_one(worker: Any, job_id: str) -> list[tuple[str | None, str | None]]:
        await worker.ingest(job(job_id))
        return [(r.job_id, r.outcome) for r in await worker.drain()]

    with WorkersEvents() as events:
        # A quick job: its renewal timer is armed, then cancelled with the job.
        assert await events.run(lambda: run_one(first, "quick")) == [("quick", "completed")]
        events.pass_time(60)
        renewals.clear()
        outcome = await events.run(lambda: run_one(runtime, "slow"), limit_s=10)
    if _works_across_events(shared_timers):
        assert outcome == [("slow", "completed")]
        assert len(renewals) >= 4  # every 100 ms for 2 s, however slow the machine
    else:
        assert renewals == []  # the renewal timer waited behind a timer that never fired
        assert outcome != [("slow", "completed")]  # the lease lapsed under the running job
