"""Events end (runs inside Pyodide, under the runtime stand-in of inside/workerd.py).

Measured in workerd: a timer set during one event never fires once that
event has ended, and the cron drain that waited for a due job failed in
every firing after the first (python-workers-facts.md, second round). The
runtime stand-in gives the tier's loop that rule; these cases check the
stand-in against the measurement, then run the drain's wait across firings.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any


async def test_a_timer_set_in_an_ended_event_never_fires(deployment: Any) -> None:
    loop = asyncio.get_running_loop()
    fired: list[str] = []

    async def arm_and_end() -> None:
        loop.call_later(0.05, fired.append, "set in an ended event")

    async def arm_and_wait() -> None:
        loop.call_later(0.05, fired.append, "set in a running event")
        await asyncio.sleep(0.2)

    await deployment.runtime.event(arm_and_end, "first")
    await deployment.runtime.event(arm_and_wait, "second")
    assert fired == ["set in a running event"]


async def test_an_event_waiting_for_a_timer_of_an_ended_event_fails(deployment: Any) -> None:
    from tests.support.workers_events import EventHung

    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    async def arm() -> None:
        loop.call_later(0.05, lambda: done.done() or done.set_result(None))

    async def wait() -> None:
        await done

    await deployment.runtime.event(arm, "first")
    try:
        await deployment.events.run(wait, name="second", limit_s=0.5)
    except EventHung:
        pass
    else:
        raise AssertionError("the second event got the first event's timer")


async def test_the_cron_drain_waits_for_a_due_job_in_every_firing(deployment: Any) -> None:
    """Each firing finds a shared job due 300 ms later, inside its budget, and
    waits for it; firings come a minute apart."""
    for minute, name in enumerate(("first", "second", "third")):
        status, text = await deployment.send("POST", "/v1/shared/jobs",
                                             {"job_id": name, "queue": "q", "delay_ms": 300})
        assert status == 201, text
        await deployment.scheduled(1_796_000_000_000 + minute * 60_000)
        status, text = await deployment.send("GET", f"/v1/shared/jobs/{name}")
        assert json.loads(text)["job"]["state"] == "settled", text
        deployment.events.pass_time(60)
