"""Fair turns on an owner-local runtime with several slots, on sqlite3 and
both Durable Object storage shapes (and, in the real-Pyodide tier, the
JavaScript ctx.storage).

Jobs block until the test releases them, so what started while what ran is
read from the executor's own events, never from sleeping.
"""

from __future__ import annotations

import asyncio

from tests.owner_local.test_limits import BLOCK, finish, set_limit, until
from tests.support import Harness, job

SLOTS = 4


async def test_small_tenants_start_in_the_first_round_of_an_owner_of_several_slots(
        harness: Harness) -> None:
    runtime = harness.runtime(concurrency=SLOTS)
    set_limit(runtime, "queue", "exports", SLOTS)
    runtime.ingest_many([job(f"big{number:02}", queue="exports", lane="big", payload=BLOCK)
                         for number in range(60)])
    small = [f"small{number}" for number in range(5)]
    runtime.ingest_many([job(job_id, queue="exports", lane=f"tenant-{job_id}", payload=BLOCK)
                         for job_id in small])
    drain = asyncio.ensure_future(runtime.drain())
    await until(lambda: harness.executor.running == SLOTS)
    # The line: big, then the small tenants in the order they came. The first
    # round of four starts: one of big's, then three small tenants'.
    assert set(harness.executor.started) == {"big00", "small0", "small1", "small2"}
    harness.executor.release("big00")
    await until(lambda: len(harness.executor.started) == SLOTS + 1)
    harness.executor.release("small0")
    await until(lambda: len(harness.executor.started) == SLOTS + 2)
    # Every small tenant started before big's second job.
    assert harness.executor.started[SLOTS:] == ["small3", "small4"]
    assert len(await finish(harness, runtime, drain)) == 65
    assert harness.executor.started.index("big01") == SLOTS + 2


async def test_a_concurrent_lane_takes_its_turns_on_its_own_slot(harness: Harness) -> None:
    runtime = harness.concurrent_runtime("fast", concurrency=2)
    set_limit(runtime, "queue", "q", 3)
    runtime.ingest_many([job(f"big{number:02}", lane="big", payload=BLOCK)
                         for number in range(20)])
    runtime.ingest_many([job(f"fast{number}", lane="fast", payload=BLOCK)
                         for number in range(3)])
    runtime.ingest_many([job("s1", lane="s1", payload=BLOCK), job("s2", lane="s2", payload=BLOCK)])
    drain = asyncio.ensure_future(runtime.drain())  # the serial slots
    concurrent = asyncio.ensure_future(runtime.tick_concurrent())
    await until(lambda: harness.executor.running == 3)
    await asyncio.sleep(0.05)  # room for a claim past the limit to show itself
    # Three places: the serial slots take big's first and s1 (the turns of
    # the lanes they serve), the concurrent slot fast's first.
    assert sorted(harness.executor.started) == ["big00", "fast0", "s1"]
    harness.executor.release("s1")
    await until(lambda: "s2" in harness.executor.started)
    # s2's turn came before big's second: the line took big to its back.
    assert "big01" not in harness.executor.started
    assert len(await finish(harness, runtime, drain)) == 22  # the lanes but fast
    assert (await concurrent).job_id == "fast0"
