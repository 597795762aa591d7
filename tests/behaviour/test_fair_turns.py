"""Fair turns in a wide queue (#48), on every store.

In a queue that runs more than one job at once, lanes take turns: a claim
takes the best job (priority, then age) of the first lane in the queue's
line that can start one, and that lane goes to the back of the line. So a
tenant with 10,000 queued jobs does not hold back a tenant with one. A
serial queue keeps its head order.

Most tests here claim one job at a time (``tick``), so the order the jobs
start in is the order of the turns; the last drains with several loops.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.support import job
from tests.support.engine import Engine, Jobs
from tickwork import Hold

SLOTS = 4


def started(engine: Engine) -> list[str]:
    return list(engine.executor.started)


async def ticks(jobs: Jobs, count: int) -> None:
    for _ in range(count):
        assert (await jobs.tick()).status == "settled"


#: Tenant a's 10,000 jobs, stored in one statement (a hundred calls of
#: ingest_many take minutes on D1 through the real-Pyodide tier's proxy):
#: rows as ingest stores a job that names no time. Owner-local lists them at
#: its next insert, D1's triggers line their lane up as they come.
TEN_THOUSAND = """
WITH RECURSIVE numbers(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM numbers WHERE n < 9999)
INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state, enqueued_at)
SELECT 'a' || (10000 + n), 'exports', 'tenant-a', 0, '{}', 'queued', 0 FROM numbers
"""


async def test_a_tenant_with_one_job_is_not_held_back_by_one_with_ten_thousand(
        engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.set_limit("queue", "exports", 2)
    await engine.rows(TEN_THOUSAND)
    await jobs.ingest(job("a-urgent", queue="exports", lane="tenant-a", priority=5))
    await jobs.ingest(job("b-old", queue="exports", lane="tenant-b"))
    await jobs.ingest(job("b-urgent", queue="exports", lane="tenant-b", priority=3))
    await ticks(jobs, 6)
    # Tenant b starts second, after one job of tenant a; within each
    # tenant, priority then age.
    assert started(engine) == ["a-urgent", "b-urgent", "a10000", "b-old", "a10001", "a10002"]
    assert len(await engine.rows("SELECT 1 FROM tickwork_jobs WHERE state = 'queued'")) == 9_997


async def test_lanes_take_turns_in_the_order_they_joined_and_a_new_lane_joins_at_the_back(
        engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.set_limit("queue", "q", 3)
    await jobs.ingest_many([job("a1", lane="A"), job("a2", lane="A"), job("a3", lane="A"),
                            job("b1", lane="B"), job("c1", lane="C"), job("c2", lane="C")])
    await ticks(jobs, 2)
    await jobs.ingest(job("d1", lane="D"))
    await ticks(jobs, 5)
    assert started(engine) == ["a1", "b1", "c1", "a2", "d1", "c2", "a3"]


async def test_a_serial_queue_keeps_its_head_order(engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.ingest_many([job("a1", lane="A"), job("a2", lane="A"), job("b1", lane="B"),
                            job("c1", lane="C", priority=1)])
    await ticks(jobs, 4)
    assert started(engine) == ["c1", "a1", "a2", "b1"]


async def test_a_queue_made_wide_lines_up_its_lanes_by_their_oldest_ready_job(
        engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.ingest_many([job("b1", lane="B"), job("a1", lane="A"), job("a2", lane="A"),
                            job("b2", lane="B"), job("b3", lane="B")])
    await ticks(jobs, 1)  # serial: b1
    await jobs.set_limit("queue", "q", 2)  # a1 is older than b2: A goes first
    await ticks(jobs, 2)
    await jobs.set_limit("queue", "q", 1)  # serial again: the head order
    await ticks(jobs, 2)
    assert started(engine) == ["b1", "a1", "b2", "a2", "b3"]


async def test_explain_names_the_jobs_the_turns_take_first(engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.set_limit("queue", "q", 2)
    await jobs.ingest_many([job("a1", lane="A"), job("a2", lane="A"), job("a3", lane="A"),
                            job("b1", lane="B"), job("c1", lane="C")])
    # Two places: the first turns take a1 and b1, not a1 and a2.
    assert (await jobs.explain("b1")).holds == ()  # type: ignore[union-attr]
    for waiting in ("a2", "c1"):
        assert (await jobs.explain(waiting)).holds == (  # type: ignore[union-attr]
            Hold("behind_head", job_ids=("a1", "b1")),)


async def test_small_tenants_start_in_the_first_round_of_a_drain_of_several_loops(
        engine: Engine) -> None:
    jobs = engine.runtime(concurrency=SLOTS) if engine.local else engine.runtime()
    runtime: Any = jobs.runtime
    await jobs.set_limit("queue", "q", 2)
    await jobs.ingest_many([job(f"big{number:02}", lane="big") for number in range(40)])
    await jobs.ingest_many([job(f"small{number}", lane=f"small-{number}")
                            for number in range(3)])
    await asyncio.wait_for(runtime.drain() if engine.local
                           else runtime.drain(concurrency=SLOTS), 30)
    assert sorted(started(engine)) == sorted(
        [f"big{number:02}" for number in range(40)] + ["small0", "small1", "small2"])
    # The line is big, small-0, small-1, small-2: each small tenant's job
    # starts before big's second.
    assert set(started(engine)[:4]) == {"big00", "small0", "small1", "small2"}
