"""Fair turns on PostgreSQL (schema/postgres/0018_turns.sql), on a real
server: a wide queue's line of lanes (tickwork_turns) as every path that
makes a job ready joins it, as both claims take turns and send a lane to
the back or out of the line, as limits widen and narrow a queue, and
ready_ahead's fair order; the race between a claim removing a lane and a
producer adding a ready job to it, driven on two connections; the claims'
plans with one lane 10,000 jobs deep; and eight worker processes draining
a wide queue, their claims replayed against the fairness invariant.
"""

from __future__ import annotations

import asyncio
import collections
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.contract.stores import FAILED, T0, valid_job
from tests.contract.under_test import SharedStoreUnderTest
from tests.shared.test_postgres_limits import ROOT, claim_many, claim_one, finish
from tests.shared.test_postgres_only import _runtime, plans_of
from tests.support.pg.fixtures import Pool
from tests.support.pg.store_under_test import postgres
from tickwork import Job, Schedule, ScheduledJob
from tickwork.model.limits import ConcurrencyLimit
from tickwork.model.rate_limits import validate_rate_limit
from tickwork.model.schedules import validate_schedule
from tickwork.stores.postgres.store import PostgresStore, settle_then_claim_params
from tickwork.stores.sql import postgres as sql

LEASE = 30_000


async def line(shared: SharedStoreUnderTest, queue: str = "w") -> list[str]:
    """The lanes of ``queue``'s line, front first."""
    return [row[0] for row in await shared.rows(
        f"SELECT lane FROM tickwork_turns WHERE queue = '{queue}' ORDER BY turn, lane")]


async def sequence_of(store: PostgresStore, job_id: str) -> int:
    job = await store.find(job_id)
    assert job is not None, job_id
    return job.sequence


async def wide(store: PostgresStore, queue: str = "w", max_running: int = 4) -> None:
    assert await store.put_limit(ConcurrencyLimit("queue", queue, max_running), T0)


async def ingest(store: PostgresStore, *jobs: tuple[str, str | None], queue: str = "w",
                 priority: int = 0) -> None:
    for job_id, lane in jobs:
        assert await store.insert(valid_job(job_id, queue, lane=lane, priority=priority), T0)


# ------------------------------------------------------------ taking turns


async def test_the_lanes_of_a_wide_queue_take_turns_in_both_claims(
        shared_store: SharedStoreUnderTest, pool: Pool) -> None:
    store = postgres(shared_store)
    await wide(store, max_running=3)
    # One tenant's backlog first, then two small ones: each lane joins the
    # line when its first job is stored.
    await ingest(store, ("big1", "big"), ("big2", "big"), ("big3", "big"), ("big4", "big"),
                 ("a1", "a"), ("b1", "b"), ("a2", "a"))
    assert await line(shared_store) == ["big", "a", "b"]
    # Each claim takes the front lane's best job and sends the lane to the
    # back; a lane with no ready job left leaves the line.
    assert await claim_one(store, T0 + 1) == "big1"
    assert await line(shared_store) == ["a", "b", "big"]
    assert await claim_many(pool, 1, T0 + 2) == ["a1"]
    assert await line(shared_store) == ["b", "big", "a"]
    assert await claim_one(store, T0 + 3) == "b1"
    assert await line(shared_store) == ["big", "a"]
    await finish(shared_store, "big1", "a1", "b1")
    # One group commit of three: a turn each, then big again (its second,
    # after every other lane with a ready job had one).
    assert sorted(await claim_many(pool, 3, T0 + 4)) == ["a2", "big2", "big3"]
    assert await line(shared_store) == ["big"]


async def test_priority_orders_jobs_within_a_lane_not_the_lanes(
        shared_store: SharedStoreUnderTest, pool: Pool) -> None:
    store = postgres(shared_store)
    await wide(store)
    await ingest(store, ("a-low", "a"), ("b-low", "b"))
    await ingest(store, ("b-urgent", "b"), ("a-high", "a"), priority=9)
    assert await line(shared_store) == ["a", "b"]
    # b-urgent is first in global order, but lane a is first in the line:
    # a's best job (a-high) starts, then b's best (b-urgent).
    assert await claim_many(pool, 1, T0 + 1) == ["a-high"]
    assert await claim_one(store, T0 + 2) == "b-urgent"
    assert sorted(await claim_many(pool, 2, T0 + 3)) == ["a-low", "b-low"]
    assert await line(shared_store) == []


async def test_a_serial_queue_keeps_its_head_order_and_writes_no_line(
        shared_store: SharedStoreUnderTest, pool: Pool) -> None:
    store = postgres(shared_store)
    assert await store.put_limit(ConcurrencyLimit("queue", "one", 1), T0)
    await ingest(store, ("s1", "big"), ("s2", "big"), ("s3", "small"), queue="serial")
    await ingest(store, ("o1", "big"), ("o2", "small"), queue="one")
    assert await shared_store.rows("SELECT * FROM tickwork_turns") == []
    assert sorted(await claim_many(pool, 4, T0 + 1)) == ["o1", "s1"]
    await finish(shared_store, "s1", "o1")
    assert sorted(await claim_many(pool, 4, T0 + 2)) == ["o2", "s2"]
    assert await shared_store.rows("SELECT * FROM tickwork_turns") == []


async def test_other_queues_keep_their_place_in_global_order(
        shared_store: SharedStoreUnderTest, pool: Pool) -> None:
    store = postgres(shared_store)
    await wide(store, max_running=2)
    await ingest(store, ("w-big1", "big"), ("w-big2", "big"))
    await ingest(store, ("s1", None), queue="serial")
    await ingest(store, ("w-small1", "small"))
    # The walk still goes in global order across queues: w's turn (its
    # oldest job's place), the serial queue, w's second turn.
    assert await claim_many(pool, 3, T0 + 1) == ["w-big1", "s1", "w-small1"]


async def test_a_lane_at_its_limit_or_rate_held_keeps_its_place(
        shared_store: SharedStoreUnderTest, pool: Pool) -> None:
    store = postgres(shared_store)
    await wide(store, max_running=6)
    assert await store.put_limit(ConcurrencyLimit("lane", "capped", 1), T0)
    assert await store.put_rate_limit(validate_rate_limit("lane", "paced", 1, 60_000), T0)
    await ingest(store, ("c1", "capped"), ("p1", "paced"), ("x1", "x"),
                 ("c2", "capped"), ("p2", "paced"), ("x2", "x"), ("x3", "x"))
    assert await line(shared_store) == ["capped", "paced", "x"]
    assert await claim_one(store, T0 + 1) == "c1"
    assert await claim_many(pool, 1, T0 + 2) == ["p1"]
    assert await line(shared_store) == ["x", "capped", "paced"]
    assert await claim_one(store, T0 + 3) == "x1"
    assert await line(shared_store) == ["capped", "paced", "x"]
    # capped runs its one job, paced waits for its bucket: both passed over,
    # both keep their place at the front, by either claim.
    assert await claim_one(store, T0 + 4) == "x2"
    assert await line(shared_store) == ["capped", "paced", "x"]
    assert await claim_many(pool, 2, T0 + 5) == ["x3"]
    assert await line(shared_store) == ["capped", "paced"]
    assert await claim_many(pool, 2, T0 + 6) == []
    # Free again: each goes first in its turn (paced's bucket spent its
    # start at T0 + 2).
    await finish(shared_store, "c1", "p1", "x1", "x2", "x3")
    assert await claim_many(pool, 2, T0 + 7) == ["c2"]
    assert await claim_one(store, T0 + 60_001) is None
    assert await claim_one(store, T0 + 60_002) == "p2"
    assert await line(shared_store) == []


async def test_a_lane_without_a_ready_job_is_stepped_over_and_leaves(
        shared_store: SharedStoreUnderTest, pool: Pool) -> None:
    store = postgres(shared_store)
    await wide(store)
    await ingest(store, ("gone1", "gone"), ("x1", "x"), ("x2", "x"))
    await ingest(store, ("later1", "later"), ("later2", "later"))
    # gone's job is cancelled: its row stays (stale) until a claim passes it.
    assert await store.record_cancellation("gone1", "c-1", "only_if_queued")
    assert await store.settle_next_cancelled(T0 + 1) is not None
    assert await line(shared_store) == ["gone", "x", "later"]
    assert await claim_one(store, T0 + 2) == "x1"
    assert await line(shared_store) == ["later", "x"]
    assert await store.record_cancellation("later2", "c-2", "only_if_queued")
    assert await store.settle_next_cancelled(T0 + 3) is not None
    assert sorted(await claim_many(pool, 4, T0 + 4)) == ["later1", "x2"]
    assert await line(shared_store) == []


# --------------------------------------------------------------- joining

JoinPath = Callable[[SharedStoreUnderTest, Pool], Awaitable[None]]


async def claimed_alone(store: PostgresStore, job_id: str, lane: str, *,
                        now: int = T0 + 1, lease_ms: int = LEASE) -> int:
    """Store ``job_id`` in lane ``lane`` of the empty wide queue w and claim
    it: the lane leaves the line. Its sequence."""
    await ingest(store, (job_id, lane))
    job = await store.claim("tok", lease_ms, now, guarded=False)
    assert job is not None and job.job_id == job_id
    return job.sequence


async def by_insert(shared: SharedStoreUnderTest, pool: Pool) -> None:
    await ingest(postgres(shared), ("joins", "L"))


async def by_insert_many(shared: SharedStoreUnderTest, pool: Pool) -> None:
    store = postgres(shared)
    assert await store.insert_many([valid_job("joins", "w", lane="L"),
                                    valid_job("after", "w", lane="M"),
                                    valid_job("again", "w", lane="L"),
                                    valid_job("elsewhere", "other", lane="N"),
                                    valid_job("not-yet", "w", lane="D", delay_ms=60_000)],
                                   T0) == [True] * 5


async def by_enqueue(shared: SharedStoreUnderTest, pool: Pool) -> None:
    runtime = _runtime(pool)
    async with pool.connection() as conn, conn.transaction():
        await runtime.enqueue(conn, Job("joins", "w", lane="L"))


async def by_schedule(shared: SharedStoreUnderTest, pool: Pool) -> None:
    store = postgres(shared)
    schedule = validate_schedule(Schedule("tenant", ScheduledJob("w", "L"), every_ms=60_000))
    slot = T0 - T0 % 60_000
    assert await store.create_schedule(schedule, slot, T0)
    created, _ = await store.fire_slots(schedule, [slot], slot + 60_000, T0)
    assert len(created) == 1


async def by_promotion(shared: SharedStoreUnderTest, pool: Pool) -> None:
    store = postgres(shared)
    assert await store.insert(valid_job("joins", "w", lane="L", delay_ms=500), T0)
    assert await line(shared) == ["front"]
    # The claim at its time promotes it (its lane joins), then takes front's.
    assert await claim_many(pool, 1, T0 + 500) == ["front1"]
    await shared.rows("UPDATE tickwork_jobs SET state = 'settled', outcome = 'completed',"
                      " settled_at = 1 WHERE job_id = 'front1'")
    await ingest(store, ("front2", "front"))  # front again, behind L


async def by_requeue(shared: SharedStoreUnderTest, pool: Pool) -> None:
    store = postgres(shared)
    job = await store.find("joins")
    assert job is not None
    assert await store.requeue_expired(job.sequence, "tok", T0 + 2 + LEASE)


async def by_release(shared: SharedStoreUnderTest, pool: Pool) -> None:
    store = postgres(shared)
    assert await store.release_claim(await sequence_of(store, "joins"), "tok")


async def by_retry(shared: SharedStoreUnderTest, pool: Pool) -> None:
    store = postgres(shared)
    retried = await store.retry(await sequence_of(store, "joins"), "tok", FAILED, 100, T0 + 2)
    assert retried is not None
    # Waiting for its time, it is not ready: it joins once promoted.
    assert await line(shared) == ["front"]
    assert await claim_many(pool, 1, T0 + 102) == ["front1"]
    await shared.rows("UPDATE tickwork_jobs SET state = 'settled', outcome = 'completed',"
                      " settled_at = 1 WHERE job_id = 'front1'")
    await ingest(store, ("front2", "front"))


async def by_redrive(shared: SharedStoreUnderTest, pool: Pool) -> None:
    store = postgres(shared)
    assert await store.settle(await sequence_of(store, "joins"), "tok", FAILED, T0 + 2,
                              cancelled=False)
    assert await store.redrive("joins", "r-1", T0 + 3) is not None


async def by_rate_limited_put_back(shared: SharedStoreUnderTest, pool: Pool) -> None:
    store = postgres(shared)
    assert await store.put_back_rate_limited(await sequence_of(store, "joins"), "tok",
                                             "lane", "other-lane", T0 + 5, T0 + 2) is not None


#: Each path that makes a job ready, and whether its job was claimed first
#: (so that its lane left the line).
JOIN_PATHS: dict[str, tuple[JoinPath, bool]] = {
    "insert": (by_insert, False), "insert_many": (by_insert_many, False),
    "enqueue": (by_enqueue, False), "schedule": (by_schedule, False),
    "promotion": (by_promotion, False), "requeue_expired": (by_requeue, True),
    "release_claim": (by_release, True), "retry": (by_retry, True),
    "redrive": (by_redrive, True), "put_back_rate_limited": (by_rate_limited_put_back, True),
}


@pytest.mark.parametrize("path", JOIN_PATHS)
async def test_a_lane_joins_the_back_of_the_line_when_a_job_of_it_becomes_ready(
        shared_store: SharedStoreUnderTest, pool: Pool, path: str) -> None:
    store = postgres(shared_store)
    make_ready, claimed_first = JOIN_PATHS[path]
    await wide(store)
    if claimed_first:
        await claimed_alone(store, "joins", "L")
        assert await line(shared_store) == []
    await ingest(store, ("front1", "front"))
    assert await line(shared_store) == ["front"]
    await make_ready(shared_store, pool)
    expected = {"insert_many": ["front", "L", "M"], "promotion": ["L", "front"],
                "retry": ["L", "front"]}.get(path, ["front", "L"])
    assert await line(shared_store) == expected
    # The lane's job is ready, and its turn comes.
    await claim_many(pool, 4, T0 + 1000)
    assert await shared_store.rows(
        "SELECT count(*) > 0 FROM tickwork_jobs WHERE lane = 'L' AND state = 'running'") == [
        (True,)]


async def test_a_queue_that_becomes_wide_lines_up_its_lanes_and_one_that_stops_drops_them(
        shared_store: SharedStoreUnderTest, pool: Pool) -> None:
    store = postgres(shared_store)
    await ingest(store, ("b1", "b"), ("a1", "a"), ("b2", "b"), ("c1", "c"))
    assert await store.insert(valid_job("d1", "w", lane="d", delay_ms=60_000), T0)
    assert await store.record_cancellation("c1", "c-1", "only_if_queued")
    assert await line(shared_store) == []
    # Wide: each lane with a ready job, by its oldest ready job (c's only
    # job is cancelled, d's waits for its time).
    await wide(store, max_running=3)
    assert await line(shared_store) == ["b", "a"]
    assert await claim_one(store, T0 + 1) == "b1"
    assert await line(shared_store) == ["a", "b"]
    # Wider: the line stays as it is.
    assert await store.put_limit(ConcurrencyLimit("queue", "w", 5), T0)
    assert await line(shared_store) == ["a", "b"]
    # Serial: no line; jobs stored meanwhile join none.
    assert await store.put_limit(ConcurrencyLimit("queue", "w", 1), T0)
    assert await line(shared_store) == []
    await ingest(store, ("e1", "e"))
    assert await line(shared_store) == []
    # Wide again: lined up afresh, by oldest ready job.
    await wide(store, max_running=3)
    assert await line(shared_store) == ["a", "b", "e"]
    assert await store.delete_limit("queue", "w")
    assert await line(shared_store) == []
    # Storing a limit again mends a line that lost a lane.
    await wide(store, max_running=3)
    await shared_store.rows("DELETE FROM tickwork_turns WHERE lane = 'b'")
    assert not await store.put_limit(ConcurrencyLimit("queue", "w", 3), T0)
    assert await line(shared_store) == ["a", "e", "b"]


async def test_ready_ahead_follows_the_turns_of_a_wide_queue(
        shared_store: SharedStoreUnderTest, pool: Pool) -> None:
    store = postgres(shared_store)
    await wide(store, max_running=3)
    await ingest(store, ("big1", "big"), ("big2", "big"), ("big3", "big"), ("big4", "big"),
                 ("a1", "a"), ("b1", "b"), ("a2", "a"))
    await ingest(store, ("other", "a"), queue="elsewhere")

    async def ahead(job_id: str, limit: int = 10) -> list[str]:
        job = await store.find(job_id)
        assert job is not None
        return await store.ready_ahead(job.queue, job.priority, job.sequence, limit)

    # The claims take big1, a1, b1, then big2, a2, then big3, big4.
    assert await ahead("big1") == []
    assert await ahead("b1") == ["big1", "a1"]
    assert await ahead("a2") == ["big1", "a1", "b1", "big2"]
    assert await ahead("big4") == ["big1", "a1", "b1", "big2", "a2", "big3"]
    assert await ahead("big4", 3) == ["big1", "a1", "b1"]
    # A claim moves big to the back: b1 is next but one.
    assert await claim_one(store, T0 + 1) == "big1"
    assert await ahead("b1") == ["a1"]
    assert await ahead("big4") == ["a1", "b1", "big2", "a2", "big3"]
    # A higher priority ranks first within its lane only.
    await ingest(store, ("a-urgent", "a"), priority=5)
    assert await ahead("a-urgent") == []
    assert await ahead("a1") == ["a-urgent", "b1", "big2"]
    # A serial queue: pick order, as before.
    assert await store.put_limit(ConcurrencyLimit("queue", "w", 1), T0)
    assert await ahead("a1") == ["a-urgent", "big2", "big3", "big4"]


# ------------------------------------------------------------------ race


async def producer_adds(conn: Any, job_id: str, lane: str) -> None:
    """A producer's statement in its own open transaction on ``conn``."""
    job = valid_job(job_id, "w", lane=lane)
    await conn.execute(sql.INSERT_JOB, {
        "job_id": job.job_id, "queue": job.queue, "lane": job.lane, "priority": job.priority,
        "payload_json": job.payload_json, "max_recoveries": job.max_recoveries,
        "run_at": job.run_at, "delay_ms": job.delay_ms, "retry_json": job.retry_json,
        "now": T0})


async def test_a_producer_in_flight_keeps_the_lane_a_claim_would_remove(
        shared_store: SharedStoreUnderTest, pool: Pool) -> None:
    """The producer first: its transaction adds a ready job to lane L (and
    holds L's row) and stays open; a claim takes L's last ready job that it
    can see, so it would remove L, and commits. The producer commits: L is
    in the line, with a ready job."""
    store = postgres(shared_store)
    await wide(store)
    await ingest(store, ("l1", "L"), ("m1", "M"))
    async with pool.connection() as producer:
        await producer_adds(producer, "l2", "L")  # open transaction: l2 unseen
        assert await claim_many(pool, 1, T0 + 1) == ["l1"]
        assert await line(shared_store) == ["M", "L"]  # not removed
        await producer.commit()
    assert await line(shared_store) == ["M", "L"]
    assert await claim_one(store, T0 + 2) == "m1"
    assert await claim_one(store, T0 + 3) == "l2"
    assert await line(shared_store) == []


async def test_a_claim_in_flight_that_removed_a_lane_lets_the_producer_join_it_again(
        shared_store: SharedStoreUnderTest, pool: Pool) -> None:
    """The claim first: its transaction takes L's last ready job and removes
    L, and stays open; a producer adding a ready job to L waits for it. The
    claim commits, the producer finds L gone and joins it, at the back."""
    store = postgres(shared_store)
    await wide(store)
    await ingest(store, ("l1", "L"), ("m1", "M"))
    async with pool.connection() as claimer:
        params = settle_then_claim_params([], ["held"], lease_ms=LEASE, now=T0 + 1)
        rows = await (await claimer.execute(sql.SETTLE_THEN_CLAIM, params)).fetchall()
        assert [sql.SETTLE_THEN_CLAIM_COLUMNS.job(row).job_id for row in rows] == ["l1"]
        async with pool.connection() as producer:
            adding = asyncio.create_task(producer_adds(producer, "l2", "L"))
            await asyncio.sleep(0.3)
            assert not adding.done()  # waiting for the claim's lock on L's row
            await claimer.commit()
            await asyncio.wait_for(adding, 10)
            await producer.commit()
    assert await line(shared_store) == ["M", "L"]
    assert await claim_one(store, T0 + 2) == "m1"
    assert await claim_one(store, T0 + 3) == "l2"


# ----------------------------------------------------------------- costs


async def test_a_claim_reads_the_line_and_the_lanes_through_their_indexes(pool: Pool) -> None:
    """One lane 10,000 ready jobs deep ahead of twenty small lanes, among
    the lines of 5,000 lanes: the group commit and the exact claim reach the
    lines and the lanes' jobs through tickwork_turns_line and
    tickwork_jobs_lane_ready, and scan neither table."""
    store = PostgresStore(pool)
    assert await store.put_limit(ConcurrencyLimit("queue", "w", 4), None)
    async with pool.connection() as conn:
        await conn.execute("""
            INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,
                                       enqueued_at)
            SELECT 'big-' || n, 'w', 'big', 0, '{}', 'queued', n
            FROM generate_series(1, 10000) AS n""")
        await conn.execute("""
            INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,
                                       enqueued_at)
            SELECT 'small-' || n, 'w', 'small-' || (n % 20), 0, '{}', 'queued', n
            FROM generate_series(1, 60) AS n""")
        await conn.commit()
    # Stored again (unchanged): the lanes the rows above hold line up.
    assert not await store.put_limit(ConcurrencyLimit("queue", "w", 4), None)
    # Other wide queues' lines: 5,000 lanes.
    async with pool.connection() as conn:
        await conn.execute("""
            INSERT INTO tickwork_turns (queue, lane)
            SELECT 'other-' || (n % 50), 'tenant-' || n FROM generate_series(1, 5000) AS n""")
        await conn.commit()
    async with pool.connection() as conn:
        await conn.set_autocommit(True)
        await conn.execute("VACUUM ANALYZE tickwork_jobs")
        await conn.execute("VACUUM ANALYZE tickwork_turns")
        await conn.set_autocommit(False)
        # Small lanes first in the line: the claims pass over big's jobs.
        await conn.execute("UPDATE tickwork_turns SET turn = turn + 100000 WHERE lane = 'big'")
        await conn.commit()
        plans = []
        for statement, params in (
                (sql.SETTLE_THEN_CLAIM, settle_then_claim_params(
                    [], [f"t{n}" for n in range(4)], lease_ms=LEASE, now=T0)),
                (sql.CLAIM_ONE, {"token": "exact", "lease_ms": LEASE, "now": T0})):
            plans += await plans_of(conn, statement, params)
    text = "\n".join(plans)
    assert "Seq Scan on tickwork_jobs" not in text, text
    assert "Seq Scan on tickwork_turns" not in text, text
    assert "tickwork_jobs_lane_ready" in text, text
    assert "tickwork_turns_line" in text, text
    # The four claims took the first four small lanes' jobs.
    picks = await claim_many(pool, 4, T0)
    assert len(picks) == 4 and all(job_id.startswith("small-") for job_id in picks), picks


# ------------------------------------------- eight worker processes at once

#: A worker process: WIDTH loops of tick() (each its own runtime on one
#: pool, a claim and a settlement in separate commits, so that every
#: process's claims compete for the queue's places), over jobs that sleep a
#: little, printing each job it runs, until no job is left unsettled.
WORKER = textwrap.dedent("""
    import asyncio, random, sys
    from psycopg_pool import AsyncConnectionPool
    from tickwork import Completed
    from tickwork.runtimes.postgres import PostgresRuntime

    class Wake:
        def recompute(self):
            pass

    async def run(job, signal):
        print("ran", job.job_id, flush=True)
        await asyncio.sleep(random.uniform(0.002, 0.010))
        return Completed()

    async def loop(pool, runtime):
        while True:
            result = await runtime.tick()
            if result.status != "idle":
                continue
            async with pool.connection() as conn:
                cursor = await conn.execute(
                    "SELECT count(*) FROM tickwork_jobs WHERE state <> 'settled'")
                left, = await cursor.fetchone()
            if not left:
                return
            await asyncio.sleep(random.uniform(0.001, 0.003))

    async def main():
        pool = AsyncConnectionPool(sys.argv[1], min_size=1, max_size=6, open=False)
        await pool.open(wait=True, timeout=30)
        runtimes = [PostgresRuntime(pool, execute=run, wake=Wake())
                    for _ in range(int(sys.argv[2]))]
        await asyncio.gather(*(loop(pool, runtime) for runtime in runtimes))
        await pool.close()

    asyncio.run(main())
""")

PROCESSES = 8
WIDTH = 4
BIG = 2000
SMALL_LANES = 20
SMALL_JOBS = 3

#: Stamps every claim of a job with a number from one sequence, and the
#: transaction it came in: claims of one queue hold the queue's lock until
#: they commit, so in one queue this order is their commit order, and the
#: claims of one transaction committed together.
STAMP_CLAIMS = """
CREATE SEQUENCE claim_order;
CREATE TABLE claims (n bigint, tx bigint, job_id text, queue text, lane text);
CREATE FUNCTION stamp_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO claims VALUES (nextval('claim_order'), txid_current(), NEW.job_id,
                               NEW.queue, NEW.lane);
    RETURN NULL;
END $$;
CREATE TRIGGER stamp_claim AFTER UPDATE OF state ON tickwork_jobs FOR EACH ROW
WHEN (OLD.state = 'queued' AND NEW.state = 'running') EXECUTE FUNCTION stamp_claim();
"""


def fair_violations(commits: list[list[str]], jobs_of: dict[str, int]) -> list[str]:
    """The fairness invariant over claims of one wide queue with no limit or
    hold on its lanes, whose jobs were all ready before the first claim:
    ``commits``, the lanes of each commit's claims in commit order. A lane
    is startable while it has a job not yet claimed. No lane may start twice
    while another lane was startable at every claim in between (both
    included) and did not start. The claims of one commit start together:
    in it a lane's first claim comes before any lane's second (round by
    round), lanes of a round in the order they last started (never: first)."""
    started: collections.Counter[str] = collections.Counter()
    last: dict[str, int] = {}
    order: list[str] = []
    for commit in commits:
        rounds: dict[int, list[str]] = collections.defaultdict(list)
        seen: collections.Counter[str] = collections.Counter()
        for lane in commit:
            rounds[seen[lane]].append(lane)
            seen[lane] += 1
        for round_number in sorted(rounds):
            for lane in sorted(rounds[round_number], key=lambda lane: last.get(lane, -1)):
                last[lane] = len(order)
                order.append(lane)
    violations = []
    for index, lane in enumerate(order):
        started[lane] += 1
        if started[lane] < 2:
            continue
        before = max(i for i in range(index) if order[i] == lane)
        for other in jobs_of:
            if other == lane:
                continue
            # other was startable at both starts and every claim between:
            # it had unclaimed jobs up to and at index, and started nowhere
            # in between.
            claimed_by_then = order[:index + 1].count(other)
            if (claimed_by_then < jobs_of[other]
                    and other not in order[before:index]):
                violations.append(f"{lane} at claims {before} and {index} while {other} waited")
    return violations


def test_the_invariant_check_catches_a_lane_starting_twice() -> None:
    jobs_of = {"big": 5, "a": 1, "b": 1}
    assert fair_violations([["big"], ["a"], ["big", "b"], ["big"]], jobs_of) == []
    assert fair_violations([["big", "a", "b"], ["big"], ["big"]], jobs_of) == []
    assert fair_violations([["big"], ["big"], ["a"]], jobs_of) != []
    assert fair_violations([["big", "big", "a"]], jobs_of) != []
    # Lanes of one commit follow their last starts: a, then big.
    assert fair_violations([["big", "a"], ["b"], ["big", "a"]], jobs_of) == []
    assert fair_violations([["a", "big"], ["b"], ["a", "big"]], jobs_of) == []


async def test_eight_worker_processes_drain_a_wide_queue_lane_by_lane(
        postgres_dsn: str, pool: Pool) -> None:
    """Eight worker processes, four tick loops each, drain a queue of max_running
    4 holding one lane 2,000 jobs deep (stored first) and twenty lanes of
    three. Every claim is stamped in its transaction; replayed in commit
    order, no lane started twice while another waited through both starts,
    and the small lanes were all done while most of the big one waited.
    Every job runs and settles exactly once."""
    store = PostgresStore(pool)
    async with pool.connection() as conn:
        await conn.execute(STAMP_CLAIMS)
        await conn.commit()
    assert await store.put_limit(ConcurrencyLimit("queue", "w", 4), None)
    jobs = [valid_job(f"big-{n}", "w", lane="big") for n in range(BIG)]
    jobs += [valid_job(f"small-{lane}-{n}", "w", lane=f"small-{lane}")
             for n in range(SMALL_JOBS) for lane in range(SMALL_LANES)]
    assert await store.insert_many(jobs, None) == [True] * len(jobs)
    children = [subprocess.Popen([sys.executable, "-c", WORKER, postgres_dsn, str(WIDTH)],
                                 cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
                for _ in range(PROCESSES)]
    try:
        outputs = [child.communicate(timeout=300) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert [child.returncode for child in children] == [0] * PROCESSES, [
        err for _, err in outputs]
    ran = collections.Counter(line.split()[1] for out, _ in outputs
                              for line in out.splitlines() if line.startswith("ran "))
    assert ran == collections.Counter(job.job_id for job in jobs)
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT outcome, attempt, recoveries, count(*) FROM tickwork_jobs "
            "GROUP BY 1, 2, 3")).fetchall()
        assert rows == [("completed", 1, 0, len(jobs))]
        stamped = await (await conn.execute(
            "SELECT tx, lane FROM claims ORDER BY n")).fetchall()
        lines_left = await (await conn.execute("SELECT count(*) FROM tickwork_turns")).fetchone()
    assert len(stamped) == len(jobs)
    commits: list[list[str]] = []
    last_tx = None
    for tx, lane in stamped:
        if tx != last_tx:
            commits.append([])
            last_tx = tx
        commits[-1].append(lane)
    jobs_of = collections.Counter(job.lane for job in jobs)
    assert fair_violations(commits, dict(jobs_of)) == []
    # The small lanes' 60 jobs started among the first claims: at most
    # SMALL_JOBS rounds of turns, each a start of big's at most.
    order = [lane for commit in commits for lane in commit]
    last_small = max(index for index, lane in enumerate(order) if lane != "big")
    assert last_small < SMALL_JOBS * (SMALL_LANES + 1) + PROCESSES * WIDTH, last_small
    # Every lane left the line with its last job.
    assert lines_left == (0,)
    # The processes shared the work (all of them, but for one that started
    # late on a loaded machine).
    assert sum(any(line.startswith("ran ") for line in out.splitlines())
               for out, _ in outputs) >= PROCESSES - 1
