"""Concurrency limits per queue and per lane, on every store.

A queue runs one job at a time until it is given a limit; a limit of N lets
its N best ready jobs run together. A lane limit caps the lane's running
jobs across every queue. Both are read inside the claim, so they hold
whichever runtime or worker claims, and they change while jobs run.

Jobs run at once through a drain of several loops: an owner of four slots
(owner-local), a shared runtime's drain(concurrency=4) (D1, PostgreSQL).
Overlap is read from the scripted executor's own counters and gates, never
from sleeps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tests.support import job
from tests.support.engine import Engine, Jobs, until
from tickwork import ConcurrencyLimit, Hold, InvalidArgument, TickResult

BLOCK = {"do": "block"}
SLOTS = 4


def runtime_of_slots(engine: Engine) -> Jobs:
    """A runtime that runs up to SLOTS jobs at once in ``drain_at_once``."""
    return engine.runtime(concurrency=SLOTS) if engine.local else engine.runtime()


def drain_at_once(engine: Engine, jobs: Jobs) -> asyncio.Task[list[TickResult]]:
    """Drain ``jobs`` with SLOTS loops at once, as a task."""
    runtime: Any = jobs.runtime
    if engine.local:
        return asyncio.ensure_future(runtime.drain())
    return asyncio.ensure_future(runtime.drain(concurrency=SLOTS))


def started(engine: Engine) -> list[str]:
    return list(engine.executor.started)


async def settle_all(engine: Engine, drain: asyncio.Task[list[TickResult]],
                     job_ids: list[str]) -> list[TickResult]:
    for job_id in job_ids:
        engine.executor.release(job_id)
    return await asyncio.wait_for(drain, 10)


async def running_ids(engine: Engine) -> set[str]:
    return {row[0] for row in await engine.rows(
        "SELECT job_id FROM tickwork_jobs WHERE state = 'running'")}


# ----------------------------------------------------------- the operations


async def test_limits_are_set_listed_replaced_and_cleared(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    assert await jobs.limits() == []
    assert await jobs.set_limit("queue", "exports", 3) is True
    assert await jobs.set_limit("lane", "tenant-a", 2) is True
    assert await jobs.set_limit("queue", "emails", 5) is True
    # The same limit again changes nothing; another value replaces it.
    assert await jobs.set_limit("queue", "exports", 3) is False
    assert await jobs.set_limit("queue", "exports", 4) is True
    listed = await jobs.limits()
    assert [(limit.kind, limit.key, limit.max_running) for limit in listed] == [
        ("queue", "emails", 5), ("queue", "exports", 4), ("lane", "tenant-a", 2)]
    assert all(isinstance(limit, ConcurrencyLimit) and limit.updated_at == now()
               for limit in listed)
    assert await jobs.clear_limit("queue", "exports") is True
    assert await jobs.clear_limit("queue", "exports") is False
    assert await jobs.clear_limit("lane", "nobody") is False
    assert [(limit.kind, limit.key) for limit in await jobs.limits()] == [
        ("queue", "emails"), ("lane", "tenant-a")]
    # Durable: another process over the same database reads the same limits.
    other = engine.another_process()
    assert [(limit.kind, limit.key, limit.max_running) for limit in await other.limits()] == [
        ("queue", "emails", 5), ("lane", "tenant-a", 2)]


@pytest.mark.parametrize(("args", "field"), [
    (("tenant", "q", 2), "kind"),
    (("queue", "", 2), "queue"),
    (("queue", "q" * 257, 2), "queue"),
    (("lane", "", 2), "lane"),
    (("queue", "q", 0), "max_running"),
    (("queue", "q", 10_001), "max_running"),
    (("queue", "q", True), "max_running"),
    (("lane", "a", "3"), "max_running"),
])
async def test_a_bad_limit_is_refused_by_name_and_nothing_changes(
        engine: Engine, args: tuple[Any, ...], field: str) -> None:
    jobs = engine.runtime()
    await jobs.set_limit("queue", "kept", 2)
    before = await jobs.limits()
    with pytest.raises(InvalidArgument) as caught:
        await jobs.set_limit(*args)
    assert caught.value.field == field
    if field != "max_running":
        with pytest.raises(InvalidArgument):
            await jobs.clear_limit(*args[:2])
    assert await jobs.limits() == before


# ------------------------------------------------------------- queue limits


async def test_a_queue_runs_one_job_at_a_time_until_it_has_a_limit(engine: Engine) -> None:
    jobs = runtime_of_slots(engine)
    for index in range(3):
        await jobs.ingest(job(f"e{index}", queue="exports", payload=BLOCK))
    drain = drain_at_once(engine, jobs)
    await until(lambda: engine.executor.running == 1)
    await asyncio.sleep(0.05)  # room for a wrong second claim to show itself
    assert engine.executor.running == 1 and started(engine) == ["e0"]
    await settle_all(engine, drain, ["e0", "e1", "e2"])
    assert engine.executor.max_running == 1


async def test_a_wide_queue_runs_its_best_jobs_together_and_no_more(engine: Engine) -> None:
    jobs = runtime_of_slots(engine)
    await jobs.set_limit("queue", "exports", 3)
    for index, priority in enumerate((0, 5, 1, 9, 0)):
        await jobs.ingest(job(f"e{index}", queue="exports", priority=priority, payload=BLOCK))
    drain = drain_at_once(engine, jobs)
    await until(lambda: engine.executor.running == 3)
    # The three best by priority run; a fourth place is never taken.
    assert sorted(started(engine)) == ["e1", "e2", "e3"]
    assert await running_ids(engine) == {"e1", "e2", "e3"}
    wait = await jobs.explain("e0")
    assert wait is not None and wait.holds == (
        Hold("queue_busy", job_ids=tuple(wait.holds[0].job_ids), limit=3),)
    assert set(wait.holds[0].job_ids) == {"e1", "e2", "e3"}
    engine.executor.release("e3")
    await until(lambda: len(started(engine)) == 4)
    assert started(engine)[-1] == "e0"  # the oldest of the two left at priority 0
    assert engine.executor.running == 3
    await settle_all(engine, drain, ["e0", "e1", "e2", "e4"])
    assert engine.executor.max_running == 3


async def test_raising_a_limit_lets_waiting_jobs_start_and_lowering_stops_no_one(
        engine: Engine) -> None:
    jobs = runtime_of_slots(engine)
    await jobs.set_limit("queue", "q", 2)
    for index in range(5):
        await jobs.ingest(job(f"j{index}", queue="q", payload=BLOCK))
    drain = drain_at_once(engine, jobs)
    await until(lambda: engine.executor.running == 2)
    # Raised while two run: the waiting loops claim up to the new limit.
    await jobs.set_limit("queue", "q", 4)
    await until(lambda: engine.executor.running == 4)
    assert started(engine) == ["j0", "j1", "j2", "j3"]
    # Lowered to one while four run: none is stopped; no new claim until
    # fewer than one run.
    await jobs.set_limit("queue", "q", 1)
    assert await running_ids(engine) == {"j0", "j1", "j2", "j3"}
    for job_id in ("j0", "j1", "j2"):
        engine.executor.release(job_id)
    await until(lambda: engine.executor.running == 1)
    await asyncio.sleep(0.05)
    assert "j4" not in started(engine)
    assert (await jobs.explain("j4")).holds == (  # type: ignore[union-attr]
        Hold("queue_busy", job_ids=("j3",), limit=1),)
    engine.executor.release("j3")
    await until(lambda: "j4" in started(engine))
    await settle_all(engine, drain, ["j4"])


async def test_clearing_a_queues_limit_makes_it_serial_again(engine: Engine) -> None:
    jobs = runtime_of_slots(engine)
    await jobs.set_limit("queue", "q", 3)
    await jobs.clear_limit("queue", "q")
    for index in range(3):
        await jobs.ingest(job(f"j{index}", queue="q", payload=BLOCK))
    drain = drain_at_once(engine, jobs)
    await until(lambda: engine.executor.running == 1)
    await asyncio.sleep(0.05)
    assert engine.executor.running == 1
    assert (await jobs.explain("j2")).holds == (  # type: ignore[union-attr]
        Hold("queue_busy", job_ids=("j0",), limit=1),)
    await settle_all(engine, drain, ["j0", "j1", "j2"])
    assert engine.executor.max_running == 1


async def test_in_a_wide_queue_the_jobs_ahead_take_the_free_places(engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.set_limit("queue", "q", 2)
    await jobs.ingest(job("a", queue="q", priority=2))
    await jobs.ingest(job("b", queue="q", priority=1))
    await jobs.ingest(job("c", queue="q"))
    # Two places, both free: a and b take them; c waits behind both.
    assert (await jobs.explain("a")).holds == ()  # type: ignore[union-attr]
    assert (await jobs.explain("b")).holds == ()  # type: ignore[union-attr]
    assert (await jobs.explain("c")).holds == (  # type: ignore[union-attr]
        Hold("behind_head", job_ids=("a", "b")),)


# -------------------------------------------------------------- lane limits


async def test_a_lane_limit_holds_the_lane_across_queues(engine: Engine) -> None:
    jobs = runtime_of_slots(engine)
    await jobs.set_limit("lane", "tenant-a", 2)
    # Three queues, one tenant: two of its jobs run, the third waits, while
    # another tenant's job takes the free slot.
    for index, queue in enumerate(("exports", "emails", "reports")):
        await jobs.ingest(job(f"a{index}", queue=queue, lane="tenant-a", priority=5,
                              payload=BLOCK))
    await jobs.ingest(job("b0", queue="imports", lane="tenant-b", payload=BLOCK))
    drain = drain_at_once(engine, jobs)
    await until(lambda: engine.executor.running == 3)
    running = sorted(started(engine))
    if engine.kind == "postgres":
        # Concurrent claims skip the rows another claim has locked, so which
        # two of the lane's jobs start first is not promised there (the limit
        # is); every other store has one writer and starts the oldest two.
        assert len(running) == 3 and "b0" in running
    else:
        assert running == ["a0", "a1", "b0"]
    first, second = (job_id for job_id in running if job_id != "b0")
    (waiting,) = {"a0", "a1", "a2"} - set(running)
    wait = await jobs.explain(waiting)
    assert wait is not None
    # Its own queue is free: only its lane holds it.
    [lane_hold] = wait.holds
    assert (lane_hold.kind, set(lane_hold.job_ids), lane_hold.limit) == (
        "lane_busy", {first, second}, 2)
    assert "its lane runs at most 2 jobs at once" in lane_hold.describe()
    engine.executor.release(first)
    await until(lambda: waiting in started(engine))
    await settle_all(engine, drain, [second, waiting, "b0"])


async def test_a_lane_limit_and_a_queue_limit_both_hold(engine: Engine) -> None:
    jobs = runtime_of_slots(engine)
    await jobs.set_limit("queue", "q", 4)
    await jobs.set_limit("lane", "t", 1)
    for index in range(3):
        await jobs.ingest(job(f"t{index}", queue="q", lane="t", payload=BLOCK))
    for index in range(3):
        await jobs.ingest(job(f"u{index}", queue="q", lane="u", payload=BLOCK))
    drain = drain_at_once(engine, jobs)
    # Lane t: one at a time. The queue's other places go to lane u, which
    # has no limit of its own: three of its jobs.
    await until(lambda: engine.executor.running == 4)
    assert sorted(started(engine)) == ["t0", "u0", "u1", "u2"]
    await settle_all(engine, drain, ["t0", "u0", "u1", "u2", "t1", "t2"])
    assert engine.executor.max_running == 4


async def test_several_runtimes_obey_one_limit(engine: Engine) -> None:
    """Two loops of drains over one database (an owner's second process, or
    a second worker): the limit is the store's, not a runtime's."""
    if engine.local:
        pytest.skip("an owner's store has one runtime executing at a time")
    first, second = engine.runtime(), engine.runtime()
    await first.set_limit("queue", "q", 3)
    for index in range(8):
        await first.ingest(job(f"j{index}", queue="q", payload=BLOCK))
    drains = [asyncio.ensure_future(runtime.runtime.drain(concurrency=SLOTS))
              for runtime in (first, second)]
    await until(lambda: engine.executor.running == 3)
    await asyncio.sleep(0.05)
    assert engine.executor.running == 3
    for index in range(8):
        await until(_started_once(engine, f"j{index}"))
        engine.executor.release(f"j{index}")
    results = await asyncio.wait_for(asyncio.gather(*drains), 10)
    settled = sorted(result.job_id or "" for loop in results for result in loop)
    assert settled == [f"j{index}" for index in range(8)]
    assert engine.executor.max_running == 3


def _started_once(engine: Engine, job_id: str) -> Callable[[], bool]:
    return lambda: job_id in engine.executor.started
