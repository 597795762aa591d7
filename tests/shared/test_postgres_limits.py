"""Concurrency limits enforced by PostgreSQL's claims on a real server: the
group commit and the exact claim, the advisory locks of queues, lanes and
the limits, and eight worker processes under a sampler. (The store's limit
methods are held to the port's contract in tests/contract, on D1 and
PostgreSQL alike.)
"""

from __future__ import annotations

import asyncio
import collections
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.contract.stores import COMPLETED, T0, valid_job
from tests.contract.under_test import SharedStoreUnderTest
from tests.shared.test_postgres_only import plans_of
from tests.support.pg.fixtures import Pool
from tickwork.model.limits import ConcurrencyLimit, validate_limit
from tickwork.stores.postgres.store import PostgresStore, settle_then_claim_params
from tickwork.stores.sql import postgres as sql

LEASE = 30_000
ROOT = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------- enforcement


async def claim_many(pool: Pool, count: int, now: int, *, tag: str = "t") -> list[str]:
    """One group commit asking for ``count`` claims (one call of
    tickwork_settle_then_claim, as the coalescer makes): the job ids it
    claimed, in its claim order."""
    tokens = [f"{tag}-{now}-{n}" for n in range(count)]
    params = settle_then_claim_params([], tokens, lease_ms=LEASE, now=now)
    async with pool.connection() as conn:
        cursor = await conn.execute(sql.SETTLE_THEN_CLAIM, params)
        rows = await cursor.fetchall()
    columns = sql.SETTLE_THEN_CLAIM_COLUMNS
    claimed = sorted((columns.value(row, "claim_index"), columns.job(row).job_id)
                     for row in rows)
    assert [index for index, _ in claimed] == list(range(1, len(claimed) + 1))
    return [job_id for _, job_id in claimed]


async def claim_one(store: PostgresStore, now: int) -> str | None:
    """The exact claim (tickwork_claim_one): the job id it claimed, if any."""
    job = await store.claim(f"exact-{now}", LEASE, now, guarded=False)
    return None if job is None else job.job_id


async def finish(shared: SharedStoreUnderTest, *job_ids: str) -> None:
    for job_id in job_ids:
        (sequence, token), = await shared.rows(
            f"SELECT sequence, claim_token FROM tickwork_jobs WHERE job_id = '{job_id}'")
        assert await shared.store.settle(sequence, token, COMPLETED, T0 + 1,
                                         cancelled=False), job_id


async def running(shared: SharedStoreUnderTest) -> list[str]:
    return [row[0] for row in await shared.rows(
        "SELECT job_id FROM tickwork_jobs WHERE state = 'running' ORDER BY job_id")]


async def test_a_queue_with_max_running_3_runs_3_at_once_and_the_4th_waits(
        shared_store: SharedStoreUnderTest, pool: Pool) -> None:
    store = shared_store.store
    assert isinstance(store, PostgresStore)
    assert await store.put_limit(ConcurrencyLimit("queue", "wide", 3), T0)
    for job_id, queue, priority in (("w1", "wide", 0), ("w2", "wide", 5), ("w3", "wide", 0),
                                    ("w4", "wide", 0), ("w5", "wide", 9),
                                    ("s1", "serial", 1), ("s2", "serial", 7)):
        assert await store.insert(valid_job(job_id, queue, priority=priority), T0)
    # One commit asking for six: the wide queue's three best (priority, then
    # age) and the serial queue's head, in global order.
    assert await claim_many(pool, 6, T0 + 1) == ["w5", "s2", "w2", "w1"]
    assert await running(shared_store) == ["s2", "w1", "w2", "w5"]
    # Full: neither claim takes a fourth, nor the serial queue's second job.
    assert await claim_many(pool, 4, T0 + 2) == []
    assert await claim_one(store, T0 + 3) is None
    # A place frees up: the next one takes it, the one after does not.
    await finish(shared_store, "w2")
    assert await claim_one(store, T0 + 4) == "w3"
    assert await claim_many(pool, 4, T0 + 5) == []
    await finish(shared_store, "w5", "w1")
    assert await claim_many(pool, 4, T0 + 6) == ["w4"]
    await finish(shared_store, "s2")
    assert await claim_one(store, T0 + 7) == "s1"


async def test_a_group_commit_fills_several_wide_queues_up_to_each_room(
        shared_store: SharedStoreUnderTest, pool: Pool) -> None:
    store = shared_store.store
    assert await store.put_limit(ConcurrencyLimit("queue", "a", 2), T0)
    assert await store.put_limit(ConcurrencyLimit("queue", "b", 4), T0)
    for n in range(6):
        assert await store.insert(valid_job(f"a{n}", "a"), T0)
        assert await store.insert(valid_job(f"b{n}", "b"), T0)
    # Asked for three: the three oldest ready jobs the rooms allow.
    assert await claim_many(pool, 3, T0 + 1) == ["a0", "b0", "a1"]
    # Asked for more than the rooms hold: a has none left, b three.
    assert await claim_many(pool, 8, T0 + 2) == ["b1", "b2", "b3"]
    assert await claim_many(pool, 8, T0 + 3) == []


async def test_a_lane_limit_holds_across_queues(
        shared_store: SharedStoreUnderTest, pool: Pool) -> None:
    store = shared_store.store
    assert isinstance(store, PostgresStore)
    assert await store.put_limit(ConcurrencyLimit("lane", "acme", 2), T0)
    assert await store.put_limit(ConcurrencyLimit("queue", "wide", 5), T0)
    for job_id, queue, lane in (("a1", "a", "acme"), ("b1", "b", "acme"),
                                ("c1", "c", "acme"), ("c2", "c", "beta"),
                                ("w1", "wide", "acme"), ("w2", "wide", "beta"),
                                ("w3", "wide", "acme"), ("w4", "wide", None)):
        assert await store.insert(valid_job(job_id, queue, lane=lane), T0)
    # acme's two places go to the two oldest of its ready jobs; then queue c's
    # head (acme) waits and its next job (beta) runs, as do wide's jobs of
    # other lanes (w4's lane is its queue's name, without a limit).
    assert await claim_many(pool, 10, T0 + 1) == ["a1", "b1", "c2", "w2", "w4"]
    assert await claim_one(store, T0 + 2) is None
    assert await store.running_jobs("lane", "acme", 10) == ["a1", "b1"]
    # A place in acme: the exact claim takes the best acme job whose queue has room.
    await finish(shared_store, "a1")
    assert await claim_one(store, T0 + 3) == "w1"
    assert await claim_many(pool, 10, T0 + 4) == []
    # Queue c is busy (c2), so c1 waits for c, not only for acme.
    await finish(shared_store, "b1")
    assert await claim_many(pool, 10, T0 + 5) == ["w3"]
    # Without the lane's limit, c1 waits only for its queue.
    assert await store.delete_limit("lane", "acme")
    assert await claim_many(pool, 10, T0 + 6) == []
    await finish(shared_store, "c2")
    assert await claim_many(pool, 10, T0 + 7) == ["c1"]


async def test_lowering_a_limit_stops_new_claims_until_enough_settle_and_raising_it_resumes(
        shared_store: SharedStoreUnderTest, pool: Pool) -> None:
    store = shared_store.store
    assert isinstance(store, PostgresStore)
    assert await store.put_limit(ConcurrencyLimit("queue", "q", 3), T0)
    for n in range(8):
        assert await store.insert(valid_job(f"j{n}", "q", lane="tenant"), T0)
    assert await claim_many(pool, 8, T0 + 1) == ["j0", "j1", "j2"]
    # Lowered below what runs: nothing running is touched, nothing new starts.
    assert await store.put_limit(ConcurrencyLimit("queue", "q", 1), T0 + 2)
    assert await running(shared_store) == ["j0", "j1", "j2"]
    await finish(shared_store, "j0")
    assert await claim_many(pool, 8, T0 + 3) == []
    await finish(shared_store, "j1")
    assert await claim_one(store, T0 + 4) is None
    await finish(shared_store, "j2")
    assert await claim_many(pool, 8, T0 + 5) == ["j3"]
    # Raised: the next claims fill the new room at once.
    assert await store.put_limit(ConcurrencyLimit("queue", "q", 4), T0 + 6)
    assert await claim_many(pool, 8, T0 + 7) == ["j4", "j5", "j6"]
    # A lane limit lowers it again, for the jobs of that lane in any queue.
    assert await store.put_limit(ConcurrencyLimit("lane", "tenant", 2), T0 + 8)
    await finish(shared_store, "j3", "j4")
    assert await claim_many(pool, 8, T0 + 9) == []
    await finish(shared_store, "j5")
    assert await claim_one(store, T0 + 10) == "j7"
    # Cleared, the queue is serial again: j6 and j7 run, nothing more starts.
    assert await store.delete_limit("queue", "q")
    assert await store.delete_limit("lane", "tenant")
    assert await store.insert(valid_job("j8", "q"), T0)
    assert await claim_many(pool, 8, T0 + 11) == []
    await finish(shared_store, "j6")
    assert await claim_many(pool, 8, T0 + 12) == []
    await finish(shared_store, "j7")
    assert await claim_many(pool, 8, T0 + 13) == ["j8"]


async def test_a_claim_finding_only_a_wide_queue_another_claimer_holds_waits_for_it(
        shared_store: SharedStoreUnderTest, pool: Pool) -> None:
    """A serial queue another claimer holds will be busy once that claim
    commits, but a wide one may still have room: a group commit that found
    nothing else waits for the claim in flight (holding no queue lock of its
    own, so no cycle of waits can form) and takes what is left, instead of
    answering "nothing" and leaving its loops to park."""
    store = shared_store.store
    assert await store.put_limit(ConcurrencyLimit("queue", "wide", 3), T0)
    for n in range(5):
        assert await store.insert(valid_job(f"w{n}", "wide"), T0)
    async with pool.connection() as conn:
        await conn.execute("BEGIN")
        params = settle_then_claim_params([], ["a1", "a2"], lease_ms=LEASE, now=T0 + 1)
        rows = await (await conn.execute(sql.SETTLE_THEN_CLAIM, params)).fetchall()
        assert len(rows) == 2  # w0 and w1, not yet committed
        other = asyncio.create_task(claim_many(pool, 2, T0 + 2))
        await asyncio.sleep(0.3)
        assert not other.done()
        await conn.execute("COMMIT")
    assert await asyncio.wait_for(other, 10) == ["w2"]
    assert await running(shared_store) == ["w0", "w1", "w2"]


async def test_a_change_of_limits_waits_for_the_claims_in_flight(
        shared_store: SharedStoreUnderTest, pool: Pool) -> None:
    """A claim holds the limits' lock shared until it commits, so a limit
    stored meanwhile commits after it: no claim that read the old limits can
    commit beside one that obeys the new ones."""
    store = shared_store.store
    assert await store.insert(valid_job("a", "q", lane="tenant"), T0)
    async with pool.connection() as conn:
        await conn.execute("BEGIN")
        params = settle_then_claim_params([], ["held"], lease_ms=LEASE, now=T0 + 1)
        rows = await (await conn.execute(sql.SETTLE_THEN_CLAIM, params)).fetchall()
        assert len(rows) == 1  # claimed "a", not yet committed
        put = asyncio.create_task(
            store.put_limit(ConcurrencyLimit("lane", "tenant", 1), T0 + 2))
        deleted = asyncio.create_task(store.delete_limit("queue", "nothing"))
        await asyncio.sleep(0.3)
        assert not put.done()
        await conn.execute("COMMIT")
    assert await asyncio.wait_for(put, 10) is True
    assert await asyncio.wait_for(deleted, 10) is False
    assert [limit.key for limit in await store.limits()] == ["tenant"]
    # Removing a limit waits the same way (a queue's removal lowers it to 1).
    assert await store.insert(valid_job("b", "q2"), T0)
    async with pool.connection() as conn:
        await conn.execute("BEGIN")
        params = settle_then_claim_params([], ["held-2"], lease_ms=LEASE, now=T0 + 3)
        assert len(await (await conn.execute(sql.SETTLE_THEN_CLAIM, params)).fetchall()) == 1
        deleted = asyncio.create_task(store.delete_limit("lane", "tenant"))
        await asyncio.sleep(0.3)
        assert not deleted.done()
        await conn.execute("COMMIT")
    assert await asyncio.wait_for(deleted, 10) is True
    assert await store.limits() == []


# ------------------------------------------- eight worker processes at once

#: A worker process: drains with WIDTH loops over jobs that sleep a little,
#: printing each job it runs, until no job is left unsettled.
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
        await asyncio.sleep(random.uniform(0.005, 0.025))
        return Completed()

    async def main():
        pool = AsyncConnectionPool(sys.argv[1], min_size=1, max_size=6, open=False)
        await pool.open(wait=True, timeout=30)
        runtime = PostgresRuntime(pool, execute=run, wake=Wake())
        while True:
            # A drain ends when its claims come back empty, which limits make
            # happen while jobs still wait: look again until none is left.
            await runtime.drain(concurrency=int(sys.argv[2]))
            async with pool.connection() as conn:
                cursor = await conn.execute(
                    "SELECT count(*) FROM tickwork_jobs WHERE state <> 'settled'")
                left, = await cursor.fetchone()
            if not left:
                break
            await asyncio.sleep(0.005)
        await pool.close()

    asyncio.run(main())
""")

PROCESSES = 8
WIDTH = 4
JOBS = 960
QUEUES = ("wide5", "wide3", "serial-a", "serial-b", "wide4")
#: Lanes by job: None is the queue's own name (no limit of its own).
LANES = ("tenant-1", "tenant-2", "tenant-3", None)
START_LIMITS = {("queue", "wide5"): 5, ("queue", "wide3"): 3, ("queue", "wide4"): 4,
                ("lane", "tenant-1"): 2, ("lane", "tenant-2"): 4}
#: Changed once a third of the jobs settled: lowered below what may run, raised.
CHANGED_LIMITS = {("queue", "wide5"): 2, ("queue", "wide3"): 6, ("lane", "tenant-2"): 1}

SAMPLE = """
SELECT 'queue', queue, count(*) FROM tickwork_jobs WHERE state = 'running' GROUP BY queue
UNION ALL
SELECT 'lane', lane, count(*) FROM tickwork_jobs WHERE state = 'running' GROUP BY lane
"""


def limit_of(limits: dict[tuple[str, str], int], kind: str, key: str) -> int | None:
    """A key's limit: its row's, else 1 for a queue and none for a lane."""
    most = limits.get((kind, key))
    return 1 if most is None and kind == "queue" else most


async def test_eight_worker_processes_never_run_more_than_a_limit_allows(
        postgres_dsn: str, pool: Pool) -> None:
    """The issue's test: eight worker processes, four loops each, drain one
    database under queue and lane limits; a sampler reads the running counts
    per queue and per lane (one statement, so one snapshot) in a loop and
    never sees more than a limit allows, before and after limits change
    under load; every job runs and settles exactly once."""
    store = PostgresStore(pool)
    for (kind, key), most in START_LIMITS.items():
        assert await store.put_limit(validate_limit(kind, key, most), None)
    jobs = [valid_job(f"j{n}", QUEUES[n % len(QUEUES)], lane=LANES[n // len(QUEUES) % len(LANES)],
                      priority=n % 3)
            for n in range(JOBS)]
    assert await store.insert_many(jobs, None) == [True] * JOBS

    limits = dict(START_LIMITS)
    highest: dict[tuple[str, str], int] = collections.Counter()
    over: list[str] = []
    changed_at: int | None = None  # the sample count when the change had committed
    after_change: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    samples = 0

    async def sample() -> int:
        nonlocal samples
        async with pool.connection() as conn:
            rows = await (await conn.execute(SAMPLE)).fetchall()
            settled = await (await conn.execute(
                "SELECT count(*) FROM tickwork_jobs WHERE state = 'settled'")).fetchone()
        samples += 1
        counts = {(kind, key): count for kind, key, count in rows}
        for key_of, count in counts.items():
            highest[key_of] = max(highest[key_of], count)
        if changed_at is not None:
            for key_of in CHANGED_LIMITS:
                after_change[key_of].append(counts.get(key_of, 0))
        for (kind, key), count in counts.items():
            most = limit_of(limits, kind, key)
            lowered_from = limit_of(START_LIMITS, kind, key)
            if changed_at is not None and (kind, key) in CHANGED_LIMITS and (
                    lowered_from is not None and most is not None and lowered_from > most):
                continue  # a lowered limit: checked on its own below
            if most is not None and count > most:
                over.append(f"sample {samples}: {kind} {key} runs {count}, limit {most}")
        assert settled is not None
        return int(settled[0])

    children = [subprocess.Popen([sys.executable, "-c", WORKER, postgres_dsn, str(WIDTH)],
                                 cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
                for _ in range(PROCESSES)]
    try:
        deadline = time.monotonic() + 240
        while True:
            settled = await sample()
            if settled == JOBS:
                break
            if changed_at is None and settled >= JOBS // 3:
                highest_before = dict(highest)
                for (kind, key), most in CHANGED_LIMITS.items():
                    assert await store.put_limit(validate_limit(kind, key, most), None)
                limits.update(CHANGED_LIMITS)
                changed_at = samples
            assert time.monotonic() < deadline, f"{settled} of {JOBS} settled"
            assert all(child.poll() in (None, 0) for child in children), [
                child.stderr.read() for child in children if child.poll()]  # type: ignore[union-attr]
        outputs = [child.communicate(timeout=60) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert [child.returncode for child in children] == [0] * PROCESSES, [
        err for _, err in outputs]
    assert over == []
    # Every job ran once, in one of the processes, and settled once.
    ran = collections.Counter(line.split()[1] for out, _ in outputs
                              for line in out.splitlines() if line.startswith("ran "))
    assert ran == collections.Counter(job.job_id for job in jobs)
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT outcome, attempt, recoveries, count(*) FROM tickwork_jobs "
            "GROUP BY 1, 2, 3")).fetchall()
    assert rows == [("completed", 1, 0, JOBS)]
    # The load reached each limit before the change (so the test could see
    # an excess), and the processes shared the work.
    assert changed_at is not None and samples - changed_at > 10, (samples, changed_at)
    for key_of, most in START_LIMITS.items():
        assert highest_before[key_of] == most, (key_of, highest_before)
    assert highest_before[("queue", "serial-a")] == 1
    assert all(sum(1 for line in out.splitlines() if line.startswith("ran ")) > 0
               for out, _ in outputs)
    # A lowered limit: what ran above it only went down, and once at or
    # below it, stayed there. A raised one let more run than before.
    for key_of, most in CHANGED_LIMITS.items():
        counts = after_change[key_of]
        if most < START_LIMITS[key_of]:
            above = []
            for count in counts:
                if count <= most:
                    break
                above.append(count)
            assert above == sorted(above, reverse=True), (key_of, counts)
            assert all(count <= most for count in counts[len(above):]), (key_of, counts)
        else:
            assert START_LIMITS[key_of] < max(counts) <= most, (key_of, counts)


# ------------------------------------------------------------------ plans


async def test_counting_what_runs_walks_the_running_indexes_up_to_the_limit(
        pool: Pool) -> None:
    """With limits stored, a claim counts a queue's and a lane's running
    jobs through tickwork_jobs_running and tickwork_jobs_lane_running, each
    scan stopping at the limit (auto_explain's row counts) though 2,000 jobs
    of that queue and lane run."""
    async with pool.connection() as conn:
        await conn.execute("""
            INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,
                                       enqueued_at, started_at, claim_token, lease_expires_at)
            SELECT 'r' || n, 'wide', 'tenant', 0, '{}', 'running', n, n, 't', 9000000000000
            FROM generate_series(1, 2000) AS n""")
        await conn.execute("""
            INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,
                                       enqueued_at)
            SELECT 'j' || n, CASE WHEN n % 2 = 0 THEN 'wide' ELSE 'q' || n END,
                   CASE WHEN n % 3 = 0 THEN 'tenant' ELSE 'other' END, 0, '{}', 'queued', n
            FROM generate_series(1, 2000) AS n""")
        await conn.execute("INSERT INTO tickwork_limits VALUES ('queue', 'wide', 50, 1), "
                           "('lane', 'tenant', 30, 1)")
        await conn.commit()
        await conn.set_autocommit(True)
        await conn.execute("VACUUM ANALYZE tickwork_jobs")
        await conn.set_autocommit(False)
        await conn.execute("SET auto_explain.log_analyze = on")
        plans = await plans_of(conn, sql.SETTLE_THEN_CLAIM, settle_then_claim_params(
            [], [f"t{n}" for n in range(20)], lease_ms=LEASE, now=None))
    text = "\n".join(plans)
    assert "Seq Scan on tickwork_jobs" not in text, text
    counts = [plan for plan in plans if "AS counted" in plan]
    walked: dict[str, list[int]] = {"tickwork_jobs_running": [],
                                    "tickwork_jobs_lane_running": []}
    for plan in counts:
        # Each count reads its key's running rows from its own index, by key...
        index = ("tickwork_jobs_lane_running" if "running.lane =" in plan
                 else "tickwork_jobs_running")
        assert re.search(rf"Index Only Scan using {index} on tickwork_jobs running .*"
                         rf"\n\s+Index Cond: \(\w+ = ", plan), plan
        walked[index] += [int(n) for n in re.findall(
            r"Index Only Scan using \S+ on tickwork_jobs running .*actual time=\S+ rows=(\d+)",
            plan)]
    # ...and stops at the limit: 50 (the queue's) or 30 (the lane's), where
    # 2,000 run. (A lane without a limit is not counted.)
    assert 50 in walked["tickwork_jobs_running"], text
    assert 30 in walked["tickwork_jobs_lane_running"], text
    assert max(walked["tickwork_jobs_running"]) == 50, text
    assert max(walked["tickwork_jobs_lane_running"]) == 30, text
