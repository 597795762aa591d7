"""Concurrency limits on an owner-local runtime with several slots, on
sqlite3 and both Durable Object storage shapes (and, in the real-Pyodide
tier, the JavaScript ctx.storage).

Limits are set through the runtime's store here (the operations that set
them are the lead's, on every surface). What runs at once is counted by the
executor itself (``RunningCounts``), and jobs block until the test releases
them: overlap is proven by the executor's own events, never by sleeping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from tests.support import Harness, job
from tests.support.limits import RunningCounts
from tickwork import OwnerRuntime
from tickwork.model.limits import ConcurrencyLimit, LimitKind

BLOCK = {"do": "block"}


async def until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Let the event loop run until ``predicate()`` holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.002)


async def settled(runtime: OwnerRuntime, job_id: str) -> None:
    """Wait until ``job_id`` is settled, then let every slot take its turn
    (a slot that settles claims its next job in the same transaction)."""
    await until(lambda: (record := runtime.read(job_id)) is not None
                and record.state == "settled")
    for _ in range(20):
        await asyncio.sleep(0)


def set_limit(runtime: OwnerRuntime, kind: LimitKind, key: str, max_running: int) -> None:
    runtime._store.put_limit(ConcurrencyLimit(kind, key, max_running), runtime._clock())


def blocked(runtime: OwnerRuntime, job_id: str, queue: str, lane: str | None = None) -> None:
    assert runtime.ingest(job(job_id, queue=queue, lane=lane, payload=BLOCK)) == "queued"


def counting(harness: Harness, concurrency: int) -> tuple[OwnerRuntime, RunningCounts]:
    counts = RunningCounts(harness.executor)
    return harness.runtime(concurrency=concurrency, execute=counts), counts


async def finish(harness: Harness, runtime: OwnerRuntime, drain: Any) -> list[str]:
    """Release every blocked job until the drain ends; the settled ids."""
    gates = harness.executor._gate
    while not drain.done():
        for job_id in list(harness.executor.signals):
            if not gates(job_id).done():
                harness.executor.release(job_id)
        await asyncio.sleep(0.002)
    return sorted(result.job_id or "" for result in drain.result())


async def test_a_queue_with_max_running_3_runs_3_of_its_jobs_and_the_4th_waits(
        harness: Harness) -> None:
    runtime, counts = counting(harness, 4)
    set_limit(runtime, "queue", "wide", 3)
    for index in range(1, 6):
        blocked(runtime, f"w{index}", "wide")
    blocked(runtime, "o1", "other")
    drain = asyncio.ensure_future(runtime.drain())
    await until(lambda: harness.executor.running == 4)
    # Three of wide (priority then age), and the fourth slot goes to another
    # queue: w4 waits for a place in wide, not for a slot.
    assert harness.executor.started == ["w1", "w2", "w3", "o1"]
    assert counts.queues["wide"] == 3
    assert runtime.read("w4").state == "queued"  # type: ignore[union-attr]
    harness.executor.release("w2")
    await until(lambda: "w4" in harness.executor.started)
    assert counts.queues["wide"] == 3 and "w5" not in harness.executor.started
    assert sorted(await finish(harness, runtime, drain)) == ["o1", "w1", "w2", "w3", "w4", "w5"]
    assert counts.most_in_queue == {"wide": 3, "other": 1}


async def test_a_queue_without_a_limit_stays_serial_on_an_owner_of_4(harness: Harness) -> None:
    runtime, counts = counting(harness, 4)
    for index in range(1, 4):
        blocked(runtime, f"s{index}", "serial")
    blocked(runtime, "x", "elsewhere")
    drain = asyncio.ensure_future(runtime.drain())
    await until(lambda: harness.executor.running == 2)
    assert harness.executor.started == ["s1", "x"]
    harness.executor.release("s1")
    await until(lambda: "s2" in harness.executor.started)
    assert counts.queues["serial"] == 1
    await finish(harness, runtime, drain)
    assert counts.most_in_queue["serial"] == 1


async def test_a_lane_limit_holds_the_lanes_third_job_while_another_lane_runs(
        harness: Harness) -> None:
    runtime, counts = counting(harness, 4)
    set_limit(runtime, "lane", "tenant", 2)
    for index in (1, 2, 3):
        blocked(runtime, f"t{index}", f"q{index}", lane="tenant")
    blocked(runtime, "o", "q4", lane="other")
    drain = asyncio.ensure_future(runtime.drain())
    await until(lambda: harness.executor.running == 3)
    assert harness.executor.started == ["t1", "t2", "o"]
    assert runtime.read("t3").state == "queued"  # type: ignore[union-attr]
    assert runtime._store.running_jobs("lane", "tenant", 10) == ["t1", "t2"]
    harness.executor.release("o")  # another lane settling frees no place in tenant
    await settled(runtime, "o")
    assert "t3" not in harness.executor.started
    harness.executor.release("t1")
    await until(lambda: "t3" in harness.executor.started)
    await finish(harness, runtime, drain)
    assert counts.most_in_lane["tenant"] == 2


async def test_a_settlement_that_frees_a_queue_and_a_lane_starts_two_jobs(
        harness: Harness) -> None:
    # a runs in queue q and lane L. b waits for q (serial), c for L (limit
    # 1): a's settlement frees both places, and two slots take them.
    runtime, counts = counting(harness, 3)
    set_limit(runtime, "lane", "L", 1)
    blocked(runtime, "a", "q", lane="L")
    blocked(runtime, "b", "q", lane="M")
    blocked(runtime, "c", "r", lane="L")
    drain = asyncio.ensure_future(runtime.drain())
    await until(lambda: harness.executor.started == ["a"])
    await until(lambda: runtime.read("b").state == runtime.read("c").state  # type: ignore[union-attr]
                == "queued")
    harness.executor.release("a")
    await until(lambda: harness.executor.running == 2)
    assert sorted(harness.executor.started) == ["a", "b", "c"]
    await finish(harness, runtime, drain)
    assert counts.most_in_lane["L"] == 1 and counts.most_in_queue["q"] == 1


async def test_lowering_a_limit_stops_nothing_and_holds_claims_until_enough_settle(
        harness: Harness) -> None:
    runtime, counts = counting(harness, 4)
    set_limit(runtime, "queue", "wide", 3)
    for index in range(1, 5):
        blocked(runtime, f"w{index}", "wide")
    drain = asyncio.ensure_future(runtime.drain())
    await until(lambda: harness.executor.running == 3)
    set_limit(runtime, "queue", "wide", 1)
    # Nothing running is touched: no abort reaches the three.
    assert not any(harness.executor.signals[job_id].aborted for job_id in ("w1", "w2", "w3"))
    harness.executor.release("w1")
    await settled(runtime, "w1")
    harness.executor.release("w2")
    await settled(runtime, "w2")
    assert "w4" not in harness.executor.started  # w3 still runs: wide is at 1
    harness.executor.release("w3")
    await until(lambda: "w4" in harness.executor.started)
    await finish(harness, runtime, drain)
    assert counts.most_in_queue["wide"] == 3


async def test_raising_a_limit_lets_waiting_jobs_start_on_the_next_claims(
        harness: Harness) -> None:
    runtime, counts = counting(harness, 4)
    for index in range(1, 5):
        blocked(runtime, f"a{index}", "q")
    drain = asyncio.ensure_future(runtime.drain())
    await until(lambda: harness.executor.started == ["a1"])
    set_limit(runtime, "queue", "q", 3)
    # The settlement's claim and the slots it wakes take the new places.
    harness.executor.release("a1")
    await until(lambda: harness.executor.running == 3)
    assert harness.executor.started == ["a1", "a2", "a3", "a4"]
    await finish(harness, runtime, drain)
    assert counts.most_in_queue["q"] == 3


async def test_limits_survive_reopening_the_store(harness: Harness) -> None:
    runtime = harness.runtime()
    set_limit(runtime, "queue", "wide", 2)
    set_limit(runtime, "lane", "tenant", 5)
    harness.open()
    reopened, counts = counting(harness, 3)
    assert [(limit.kind, limit.key, limit.max_running)
            for limit in reopened._store.limits()] == [("queue", "wide", 2),
                                                       ("lane", "tenant", 5)]
    for index in range(1, 4):
        blocked(reopened, f"w{index}", "wide")
    drain = asyncio.ensure_future(reopened.drain())
    await until(lambda: harness.executor.running == 2)
    assert harness.executor.started == ["w1", "w2"]
    await finish(harness, reopened, drain)
    assert counts.most_in_queue["wide"] == 2


async def test_the_concurrent_lane_and_the_serial_slots_share_a_wide_queues_places(
        harness: Harness) -> None:
    counts = RunningCounts(harness.executor)
    runtime = harness.concurrent_runtime("fast", execute=counts)
    set_limit(runtime, "queue", "q", 2)
    blocked(runtime, "f1", "q", lane="fast")
    blocked(runtime, "s1", "q", lane="slow")
    blocked(runtime, "s2", "q", lane="slow")
    serial = asyncio.ensure_future(runtime.tick())
    await until(lambda: harness.executor.started == ["s1"])
    concurrent = asyncio.ensure_future(runtime.tick_concurrent())
    await until(lambda: harness.executor.started == ["s1", "f1"])
    assert counts.queues["q"] == 2
    # s1 started though f1 comes first in q: the two places are for both.
    harness.executor.release("f1")
    await concurrent
    assert (await runtime.tick_concurrent()).status == "idle"  # s2 is the serial slot's
    harness.executor.release("s1")
    assert (await serial).job_id == "s1"
    harness.executor.release("s2")
    assert (await runtime.tick()).job_id == "s2"
    assert counts.most_in_queue["q"] == 2
