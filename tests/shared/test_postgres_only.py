"""PostgreSQL-specific behaviour: producer transactions, erasure, many workers."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.support import CountingWake, job
from tests.support.pg.fixtures import Pool, open_pool
from tests.support.shared import ManualNow
from tickwork import Completed, IngestConflict, JobRecord, SchemaError
from tickwork.lifecycle import Settlement
from tickwork.model.history import HistoryRow
from tickwork.runtimes.history import HistoryKeeper
from tickwork.runtimes.postgres import PostgresRuntime, purge_postgres_queues
from tickwork.runtimes.shared import LeasedSignal


@pytest_asyncio.fixture
async def pool(postgres_dsn: str) -> AsyncIterator[Pool]:
    async with open_pool(postgres_dsn, max_size=20) as opened:
        yield opened


def _runtime(pool: Pool, **options: Any) -> PostgresRuntime:
    async def complete(job: JobRecord, signal: LeasedSignal) -> Completed:
        return Completed()

    settings: dict[str, Any] = {"execute": complete, "wake": CountingWake()}
    settings.update(options)
    return PostgresRuntime(pool, **settings)


async def _count(pool: Pool, where: str = "true") -> int:
    async with pool.connection() as conn:
        cursor = await conn.execute(f"SELECT count(*) FROM tickwork_jobs WHERE {where}")
        row = await cursor.fetchone()
        assert row is not None
        return int(row[0])


async def test_enqueue_commits_and_rolls_back_with_the_callers_transaction(pool: Pool) -> None:
    runtime = _runtime(pool)
    async with pool.connection() as conn:
        await conn.execute("CREATE TABLE orders (id text PRIMARY KEY)")
    async with pool.connection() as conn, conn.transaction():
        await conn.execute("INSERT INTO orders VALUES ('o1')")
        await runtime.enqueue(conn, job("ship-o1", payload={"order": "o1"}))
    with pytest.raises(RuntimeError):
        async with pool.connection() as conn, conn.transaction():
            await conn.execute("INSERT INTO orders VALUES ('o2')")
            await runtime.enqueue(conn, job("ship-o2"))
            raise RuntimeError("the caller changes its mind")
    assert await runtime.read("ship-o1") is not None
    assert await runtime.read("ship-o2") is None
    # An identical replay inside another transaction does nothing.
    async with pool.connection() as conn, conn.transaction():
        await runtime.enqueue(conn, job("ship-o1", payload={"order": "o1"}))
    assert await _count(pool) == 1


async def test_a_conflicting_enqueue_fails_the_callers_transaction(pool: Pool) -> None:
    runtime = _runtime(pool)
    await runtime.ingest(job("a", payload={"v": 1}))
    async with pool.connection() as conn:
        await conn.execute("CREATE TABLE audit (note text)")
        await conn.commit()
        with pytest.raises(IngestConflict) as conflict:
            async with conn.transaction():
                await conn.execute("INSERT INTO audit VALUES ('written with the job')")
                await runtime.enqueue(conn, job("a", payload={"v": 2}))
        assert conflict.value.job_id == "a"
        cursor = await conn.execute("SELECT count(*) FROM audit")
        assert await cursor.fetchone() == (0,)
    stored = await runtime.read("a")
    assert stored is not None and stored.payload == {"v": 1}


async def test_purge_postgres_queues_erases_every_state_of_the_named_queues(pool: Pool) -> None:
    runtime = _runtime(pool)
    for queue in ("tenant-1:a", "tenant-1:b", "tenant-2:a"):
        await runtime.ingest(job(f"{queue}-done", queue=queue))
        await runtime.ingest(job(f"{queue}-waiting", queue=queue))
    for _ in range(3):
        await runtime.tick()
    statement, values = purge_postgres_queues(
        "SELECT DISTINCT queue FROM tickwork_jobs WHERE queue LIKE %s", ["tenant-1:%"])
    async with pool.connection() as conn, conn.transaction():
        cursor = await conn.execute(statement, values)
        assert cursor.rowcount == 4
    assert await _count(pool) == 2
    assert await _count(pool, "queue = 'tenant-2:a'") == 2


class _SerialWatch:
    """A no-op executor that records each job's runs, the order in which
    each queue's jobs start, and every moment a queue ran two jobs at once."""

    def __init__(self, pause: float = 0) -> None:
        self.pause = pause
        self.runs: collections.Counter[str] = collections.Counter()
        self.running: collections.Counter[str] = collections.Counter()
        self.started: dict[str, list[str]] = collections.defaultdict(list)
        self.overlaps: list[str] = []

    async def execute(self, job: JobRecord, signal: LeasedSignal | None) -> Completed:
        self.runs[job.job_id] += 1
        self.started[job.queue].append(job.job_id)
        self.running[job.queue] += 1
        if self.running[job.queue] > 1:
            self.overlaps.append(job.queue)
        await asyncio.sleep(self.pause)
        self.running[job.queue] -= 1
        return Completed()


async def test_eight_workers_settle_two_thousand_jobs_exactly_once(pool: Pool) -> None:
    watch = _SerialWatch()
    runs, overlaps = watch.runs, watch.overlaps
    execute = watch.execute

    workers = [_runtime(pool, execute=execute) for _ in range(8)]
    for index in range(2000):
        await workers[0].ingest(job(f"j{index}", queue=f"q{index % 50}", priority=index % 3))

    async def work(runtime: PostgresRuntime) -> None:
        idle = 0
        while idle < 3:
            result = await runtime.tick()
            idle = idle + 1 if result.status == "idle" else 0

    await asyncio.gather(*(work(worker) for worker in workers))
    assert len(runs) == 2000 and set(runs.values()) == {1}
    assert overlaps == []
    assert await _count(pool, "state = 'settled' AND outcome = 'completed'") == 2000


async def test_group_commit_shares_statements_between_concurrent_ticks(pool: Pool) -> None:
    workers = [_runtime(pool) for _ in range(8)]
    for index in range(400):
        await workers[0].ingest(job(f"j{index}", queue=f"q{index}"))
    store = workers[0]._store  # shared by every runtime on the pool
    assert all(worker._store is store for worker in workers)

    async def work(runtime: PostgresRuntime) -> None:
        while (await runtime.tick()).status != "idle":
            pass

    await asyncio.gather(*(work(worker) for worker in workers))
    commits = store._commits  # type: ignore[attr-defined]
    # Every job's claim and settlement went through the shared commits...
    assert commits.requests >= 800
    # ...and eight ticks in flight share them: fewer commits than jobs, where
    # one claim and one settlement per job would be two commits per job.
    assert commits.flushes < 400, (commits.flushes, commits.requests)


async def test_a_missing_schema_names_the_migration_to_apply(
    postgres_server: Any, postgres_templates: Any
) -> None:
    from tests.support.pg.server import unique_database_name

    name = unique_database_name("tickwork_empty")
    dsn = postgres_server.create_database(name)
    try:
        async with open_pool(dsn) as empty:
            runtime = _runtime(empty)
            with pytest.raises(SchemaError, match=r"0001_tickwork_jobs\.sql"):
                await runtime.ingest(job("a"))
            async with empty.connection() as conn:
                cursor = await conn.execute(
                    "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'tickwork%'")
                assert await cursor.fetchone() == (0,)
    finally:
        postgres_server.drop_database(name)


async def plans_of(conn: Any, statement: str, params: dict[str, Any]) -> list[str]:
    """The plans PostgreSQL used for ``statement`` and every query nested in it
    (auto_explain, sent back as notices); the statement's writes are rolled back."""
    plans: list[str] = []
    conn.add_notice_handler(lambda notice: plans.append(notice.message_primary or ""))
    await conn.execute("LOAD 'auto_explain'")
    for setting in ("auto_explain.log_min_duration = 0",
                    "auto_explain.log_nested_statements = on",
                    "auto_explain.log_level = 'notice'",
                    "client_min_messages = 'notice'"):
        await conn.execute(f"SET {setting}")
    await conn.execute(statement, params)
    await conn.rollback()
    await conn.execute("RESET ALL")
    return [plan for plan in plans if "Query Text" in plan]


async def test_claims_use_indexes_at_many_settled_rows(pool: Pool) -> None:
    """The hot path stays on indexes with 200,000 settled rows (the bench runs 1,000,000)."""
    async with pool.connection() as conn:
        await conn.execute("""
            INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,
                                       outcome, enqueued_at, started_at, settled_at, claim_token,
                                       lease_expires_at)
            SELECT 'old-' || n, 'q' || (n % 1000), 'lane', 0, '{}', 'settled', 'completed',
                   n, n, n, 't', n
            FROM generate_series(1, 200000) AS n""")
        await conn.execute("ANALYZE tickwork_jobs")
    runtime = _runtime(pool, now=ManualNow())
    await runtime.ingest(job("fresh"))
    await runtime.ingest(job("running", queue="busy"))
    from tickwork.stores.sql import postgres as sql

    plans: list[str] = []
    async with pool.connection() as conn:
        await conn.execute("UPDATE tickwork_jobs SET state = 'running', claim_token = 't',"
                           " lease_expires_at = 10, started_at = 1 WHERE job_id = 'running'")
        await conn.commit()
        for statement, params in (
            (sql.SETTLE_THEN_CLAIM, {
                "sequences": [1], "settle_tokens": ["t"], "outcomes": ["completed"],
                "reasons": [None], "errors": [None], "claim_tokens": ["t1", "t2"],
                "lease_ms": 1000, "scan": 40, "now": None}),
            (sql.CLAIM_ONE, {"token": "t3", "lease_ms": 1000, "now": None}),
            (sql.PROBE, {"now": None}),
            (sql.RENEW, {"sequence": 1, "token": "t", "lease_ms": 5, "now": None}),
            (sql.HAS_PENDING_WORK, {"now": None}),
            (sql.NEXT_WORK, {"now": None}),
            (sql.SELECT_QUEUE_HEAD, {"queue": "q1"}),
        ):
            plans += await plans_of(conn, statement, params)
    text = "\n".join(plans)
    # The function's settle and claim queries were planned too, not just the call.
    assert "tickwork_jobs_runnable" in text and "unnest" in text, text
    assert "Seq Scan on tickwork_jobs" not in text, text
    # The expired claim planted above is recovered first, then the fresh job runs.
    recovered, ran = await runtime.tick(), await runtime.tick()
    assert (recovered.job_id, recovered.outcome) == ("running", "interrupted")
    assert (ran.job_id, ran.outcome) == ("fresh", "completed")


async def test_the_group_commit_reads_indexes_whatever_the_costs_say(pool: Pool) -> None:
    """The function runs generic plans (0011), planned without its arguments:
    the walk's LIMIT scan_limit is then guessed at a tenth of the runnable
    rows, and with a large enough backlog a plan that reads the whole table
    and sorts it was seen to win. Sequential and bitmap scans are off in the
    function, so even when the session's costs make index reads look
    ruinous every statement stays on its index."""
    async with pool.connection() as conn:
        await conn.execute("""
            INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,
                                       enqueued_at)
            SELECT 'j' || n, 'q' || n, 'lane', n % 7, '{}', 'queued', n
            FROM generate_series(1, 20000) AS n""")
        await conn.execute("ANALYZE tickwork_jobs")
    from tickwork.stores.sql import postgres as sql

    async with pool.connection() as conn:
        await conn.execute("SET random_page_cost = 1000")
        await conn.execute("SET cpu_index_tuple_cost = 10")
        plans = await plans_of(conn, sql.SETTLE_THEN_CLAIM, {
            "sequences": [], "settle_tokens": [], "outcomes": [], "reasons": [],
            "errors": [], "claim_tokens": [f"t{n}" for n in range(10)], "lease_ms": 1000,
            "scan": 336, "now": None})
    text = "\n".join(plans)
    assert "Index Scan using tickwork_jobs_runnable" in text, text
    assert "Seq Scan on tickwork_jobs" not in text and "Bitmap" not in text, text
    drained = await _runtime(pool).drain(max_ticks=20)
    assert [result.outcome for result in drained] == ["completed"] * 20


async def test_every_page_of_list_jobs_is_an_index_range_at_200000_rows(pool: Pool) -> None:
    """Each listing reads its rows through an index bounded by its queue or
    lane (no table scan) with 200,000 settled, queued and running jobs in
    1,000 queues and 50 lanes; the plans are printed when one does not."""
    async with pool.connection() as conn:
        await conn.execute("""
            INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,
                                       outcome, enqueued_at, started_at, settled_at, claim_token,
                                       lease_expires_at)
            SELECT 'old-' || n, 'q' || (n % 1000), 'lane' || (n % 50), 0, '{}',
                   CASE WHEN n % 10 = 0 THEN 'queued' WHEN n % 997 = 0 THEN 'running'
                        ELSE 'settled' END,
                   CASE WHEN n % 10 = 0 OR n % 997 = 0 THEN NULL
                        WHEN n % 7 = 0 THEN 'failed' ELSE 'completed' END,
                   n, n, CASE WHEN n % 10 = 0 OR n % 997 = 0 THEN NULL ELSE n END,
                   CASE WHEN n % 997 = 0 AND n % 10 <> 0 THEN 't' || n END,
                   CASE WHEN n % 997 = 0 AND n % 10 <> 0 THEN n END
            FROM generate_series(1, 200000) AS n
            -- PostgreSQL's running index is unique per queue: one running job each.
            WHERE n % 997 <> 0 OR n % 10 = 0 OR n < 997 * 1000""")
        await conn.execute("ANALYZE tickwork_jobs")
        await conn.commit()
    from tickwork.stores.sql import postgres as sql

    async with pool.connection() as conn:
        for (by, state, outcome, newest), statement in sql.LIST_JOBS.items():
            params = {"value": "q7" if by == "queue" else "lane7", "outcome": "failed",
                      "after_settled": 10**9 if newest else -1,
                      "after_sequence": 10**9 if newest else 0, "limit": 50}
            text = "\n".join(await plans_of(conn, statement, params))
            assert "Seq Scan" not in text, (by, state, outcome, newest, text)
            if (by, state) != ("lane", "running"):  # every running claim, filtered
                # The index bounds the rows read to the listing's own (the
                # planner sorts them when it expects few, as here: 20 a queue).
                assert re.search(rf"Index Cond: \(+{by} = ", text), (
                    by, state, outcome, newest, text)
    runtime = _runtime(pool, now=ManualNow())
    failed = await runtime.list_jobs("q7", state="settled", outcome="failed", limit=3)
    assert [r.job_id for r in failed.jobs] == [
        f"old-{n}" for n in range(200000, 0, -1)
        if n % 1000 == 7 and n % 10 != 0 and n % 997 != 0 and n % 7 == 0][:3]


async def test_a_page_of_jobs_by_id_prefix_is_a_range_of_its_byte_order_index(
        pool: Pool) -> None:
    """With 200,000 jobs both find_jobs statements read through 0013's index
    of job_id in byte order, bounded by the prefix's range (no table scan),
    whatever the database's collation; ids that a language's collation
    would sort among them ("ordeR-", "order_") stay out."""
    async with pool.connection() as conn:
        await conn.execute("""
            INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,
                                       enqueued_at)
            SELECT CASE n % 3 WHEN 0 THEN 'order-' WHEN 1 THEN 'ordeR-' ELSE 'order_' END
                   || n, 'q' || (n % 1000), 'lane' || (n % 50), 0, '{}', 'queued', n
            FROM generate_series(1, 200000) AS n""")
        await conn.execute("ANALYZE tickwork_jobs")
        await conn.commit()
    from tickwork.stores.sql import postgres as sql
    from tickwork.stores.sql.sqlite import id_prefix_range

    low, high = id_prefix_range("order-12", 256)
    async with pool.connection() as conn:
        for statement in (sql.JOBS_BY_ID_PREFIX_FIRST, sql.JOBS_BY_ID_PREFIX_NEXT):
            text = "\n".join(await plans_of(conn, statement,
                                            {"low": low, "high": high, "limit": 50}))
            assert "Seq Scan" not in text, text
            assert "tickwork_jobs_id_bytes" in text, text
            assert re.search(r"Index Cond: .*job_id.*>=?.*AND.*job_id.*<", text), text
    runtime = _runtime(pool, now=ManualNow())
    page = await runtime.find_jobs("order-12", limit=4)
    expected = sorted(f"order-{n}" for n in range(3, 200001, 3) if str(n).startswith("12"))
    assert [r.job_id for r in page.jobs] == expected[:4]
    following = await runtime.find_jobs("order-12", limit=100, cursor=page.cursor)
    assert [r.job_id for r in following.jobs] == expected[4:104]


async def test_workers_in_separate_processes_never_run_one_queue_twice(postgres_dsn: str) -> None:
    """Four pools stand for four processes: their claims really race in the server."""
    watch = _SerialWatch(pause=0.001)
    runs, overlaps = watch.runs, watch.overlaps
    execute = watch.execute

    pools = [open_pool(postgres_dsn, max_size=4) for _ in range(4)]
    opened = [await pool.__aenter__() for pool in pools]
    try:
        workers = [_runtime(pool, execute=execute) for pool in opened for _ in range(2)]
        for index in range(100):
            await workers[0].ingest(job(f"j{index}", queue=f"q{index % 4}"))

        async def produce() -> None:
            # Ever more urgent jobs arrive while workers claim: each claim's
            # snapshot may see a different head for the same queue.
            for index in range(100, 300):
                await workers[index % 8].ingest(job(f"j{index}", queue=f"q{index % 4}",
                                                    priority=index))
                await asyncio.sleep(0)

        async def work(runtime: PostgresRuntime) -> None:
            idle = 0
            await asyncio.sleep(0)
            while idle < 5 or not producer.done():
                result = await runtime.tick()
                idle = idle + 1 if result.status == "idle" else 0
                if result.status == "idle":
                    await asyncio.sleep(0.002)
                else:
                    idle = 0

        producer = asyncio.create_task(produce())
        await asyncio.gather(producer, *(work(worker) for worker in workers))
    finally:
        for pool in pools:
            await pool.__aexit__(None, None, None)
    assert overlaps == []
    assert len(runs) == 300 and set(runs.values()) == {1}


async def test_two_pools_claiming_at_once_keep_every_queue_serial(postgres_dsn: str) -> None:
    """Two pools (two coalescers, so their claims race in the server, each
    under its own queue locks) drain the same queues while a third caller
    takes exact claims and delayed jobs fall due: no queue ever runs two jobs
    at once, no job is claimed twice, each queue's ready jobs start in
    (priority, enqueue) order, and no claim fails on the running index."""
    watch = _SerialWatch(pause=0.0005)
    runs, overlaps, started = watch.runs, watch.overlaps, watch.started
    execute = watch.execute

    async with open_pool(postgres_dsn, max_size=4) as first, \
            open_pool(postgres_dsn, max_size=4) as second, \
            open_pool(postgres_dsn, max_size=2) as third:
        workers = [_runtime(pool, execute=execute) for pool in (first, second)
                   for _ in range(5)]
        assert workers[0]._store is not workers[5]._store
        ready: dict[str, list[tuple[int, int, str]]] = collections.defaultdict(list)
        for index in range(300):
            queue, priority = f"q{index % 12}", index % 3
            delayed = index % 10 == 0
            await workers[0].ingest(job(f"j{index}", queue=queue, priority=priority,
                                        delay_ms=5 + index % 40 if delayed else None))
            if not delayed:
                ready[queue].append((-priority, index, f"j{index}"))
        exact = _runtime(third)._store
        exact_claims = 0

        async def take_exact() -> None:
            nonlocal exact_claims
            while await _count(third, "state <> 'settled'"):
                claimed = await exact.claim(f"exact-{exact_claims}", 60_000, None,
                                            guarded=False)
                if claimed is None:
                    await asyncio.sleep(0.001)
                    continue
                exact_claims += 1
                await execute(claimed, None)
                assert await exact.settle(claimed.sequence, f"exact-{exact_claims - 1}",
                                          Settlement("completed"), None, cancelled=False)

        async def work(runtime: PostgresRuntime) -> None:
            while await _count(first, "state <> 'settled'"):
                for result in await runtime.drain():
                    assert result.status == "settled", result
                await asyncio.sleep(0.001)

        await asyncio.gather(take_exact(), *(work(worker) for worker in workers))
        assert await _count(first, "state = 'settled' AND outcome = 'completed'") == 300
    assert overlaps == []
    assert len(runs) == 300 and set(runs.values()) == {1}
    assert exact_claims > 0
    for queue, jobs in ready.items():
        in_order = [job_id for _, _, job_id in sorted(jobs)]
        assert [j for j in started[queue] if j in set(in_order)] == in_order, queue


async def test_a_claim_walks_past_a_queue_whose_head_another_transaction_holds(
    pool: Pool,
) -> None:
    """The claim's second statement passes over a head row another
    transaction holds (FOR UPDATE SKIP LOCKED); the claim then walks again
    (0012), past that queue, and takes the next free queue's head instead of
    coming back empty, and the held job is claimed once it is let go."""
    runtime = _runtime(pool)
    await runtime.ingest(job("held", queue="a", priority=1))
    await runtime.ingest(job("free", queue="b"))
    async with pool.connection() as holder, holder.transaction():
        await holder.execute("SELECT 1 FROM tickwork_jobs WHERE job_id = 'held' FOR UPDATE")
        result = await runtime.tick()
        assert (result.status, result.job_id, result.outcome) == (
            "settled", "free", "completed")
        assert (await runtime.tick()).status == "idle"  # only "held" is left
    result = await runtime.tick()
    assert (result.job_id, result.outcome) == ("held", "completed")


async def test_drains_of_racing_pools_end_only_once_the_work_is_taken(
    postgres_dsn: str,
) -> None:
    """Claims of four pools race in the server over 1,200 queues of one job
    each. A queue another pool claimed and committed after a claim's walk
    began still looks free to that walk, whose second statement then finds
    its head gone; before 0012 such a claim could come back empty while
    hundreds of heads were free, and the drain that made it ended. Each
    runtime drains once: when a drain returns, no more jobs are queued than
    there are claims in flight (20 runtimes), and every job ran once."""
    watch = _SerialWatch()
    async with contextlib.AsyncExitStack() as stack:
        pools = [await stack.enter_async_context(open_pool(postgres_dsn, max_size=4))
                 for _ in range(4)]
        runtimes = [_runtime(pool, execute=watch.execute) for pool in pools for _ in range(5)]
        for start in range(0, 1200, 100):
            await runtimes[0].ingest_many(
                [job(f"j{n}", queue=f"q{n}") for n in range(start, start + 100)])
        left_when_done: list[int] = []

        async def drain_once(runtime: PostgresRuntime) -> None:
            await runtime.drain()
            left_when_done.append(await _count(pools[0], "state = 'queued'"))

        await asyncio.gather(*(drain_once(runtime) for runtime in runtimes))
        assert await _count(pools[0], "state = 'settled' AND outcome = 'completed'") == 1200
    assert max(left_when_done) <= len(runtimes), sorted(left_when_done)
    assert len(watch.runs) == 1200 and set(watch.runs.values()) == {1}


async def test_drain_shares_one_commit_between_a_settlement_and_the_next_claim(
    pool: Pool,
) -> None:
    runtime = _runtime(pool)
    for index in range(50):
        await runtime.ingest(job(f"j{index}", queue=f"q{index}"))
    commits = runtime._store._commits  # type: ignore[attr-defined]
    before = commits.flushes
    assert len(await runtime.drain()) == 50
    # first claim + 50 settle-and-claim commits + the idle tick's claim
    assert commits.flushes - before == 52


async def test_queue_status_counts_every_state_from_indexes_only(pool: Pool) -> None:
    """Queued, running and settled counts each come from a partial index (settled
    ones from 0003's queue_settled): no sequential scan, before or after VACUUM."""
    async with pool.connection() as conn:
        await conn.execute("""
            INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,
                                       outcome, enqueued_at, started_at, settled_at, claim_token,
                                       lease_expires_at)
            SELECT 'old-' || n, 'q' || (n % 1000), 'lane', 0, '{}',
                   CASE WHEN n % 10 = 0 THEN 'queued' ELSE 'settled' END,
                   CASE WHEN n % 10 = 0 THEN NULL ELSE 'completed' END,
                   n, n, n, 't', n
            FROM generate_series(1, 50000) AS n""")
        await conn.execute("ANALYZE tickwork_jobs")
        await conn.commit()
    from tickwork.stores.sql import postgres as sql

    for prepare in (None, "VACUUM ANALYZE tickwork_jobs"):
        async with pool.connection() as conn:
            if prepare:
                await conn.set_autocommit(True)
                await conn.execute(prepare)
                await conn.set_autocommit(False)
            plans = await plans_of(conn, sql.QUEUE_STATUS, {"queue": "q10"})
        text = "\n".join(plans)
        # Queued jobs are counted through either index holding them by queue.
        assert ("tickwork_jobs_queue_waiting" in text
                or "tickwork_jobs_queue_pending" in text), text
        # Running jobs come from an index of running jobs only (any of the
        # partial ones: by queue, by lane (0016), by lease expiry).
        assert any(f"tickwork_jobs_{index}" in text
                   for index in ("running", "lane_running", "lease")), text
        # Settled ones from the queue_outcomes index (0008): index-only once VACUUM has
        # set the visibility map, an index or bitmap scan of the queue's rows (of
        # either index keyed by queue) before.
        assert any(f"{scan} {on} tickwork_jobs_{index}" in text
                   for scan, on in (("Index Only Scan", "using"), ("Index Scan", "using"),
                                    ("Bitmap Index Scan", "on"))
                   for index in ("queue_outcomes", "queue_settled")), text
        assert "Seq Scan" not in text, text
        if prepare:
            assert "Index Only Scan using tickwork_jobs_queue_outcomes" in text, text
    runtime = _runtime(pool)
    status = await runtime.queue_status("q10")
    assert (status.queued, status.running, status.settled) == (50, 0, 0)
    status = await runtime.queue_status("q11")
    assert (status.queued, status.settled, status.outcomes["completed"]) == (0, 50, 50)


OLD_ROWS = """
INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,
                           outcome, enqueued_at, started_at, settled_at)
VALUES ('old-queued', 'q', 'lane', 0, '{"n":1}', 'queued', NULL, 5, NULL, NULL),
       ('old-settled', 'q', 'lane', 0, '{}', 'settled', 'completed', 1, 2, 3)
"""


async def test_a_database_without_0004_is_refused_then_upgraded_with_its_rows(
    postgres_server: Any, postgres_templates: Any
) -> None:
    from tests.support.pg.server import unique_database_name
    from tickwork.schemas import migrations

    name = unique_database_name("tickwork_v3")
    dsn = postgres_server.create_database(name)
    try:
        async with open_pool(dsn) as pool:
            async with pool.connection() as conn:
                for migration in migrations("postgres")[:3]:
                    await conn.execute(migration.sql.encode())
                await conn.execute(OLD_ROWS.encode())
                await conn.commit()
                before = await (await conn.execute(
                    "SELECT * FROM tickwork_jobs ORDER BY sequence")).fetchall()
            runtime = _runtime(pool)
            with pytest.raises(SchemaError, match=r"version 3, this package needs 18: apply "
                                                  r"0004_due_times\.sql, 0005_paused_queues"
                                                  r"\.sql, 0006_retries\.sql, 0007_schedules"
                                                  r"\.sql, 0008_error_summaries\.sql, "
                                                  r"0009_browse\.sql, 0010_queue_claims\.sql, "
                                                  r"0011_generic_claim_plans\.sql, "
                                                  r"0012_claim_passes\.sql, "
                                                  r"0013_job_id_prefix\.sql, 0014_retention\.sql"
                                                  r", 0015_history\.sql, 0016_limits\.sql, "
                                                  r"0017_rate_limits\.sql, 0018_turns\.sql "
                                                  r"from schema/postgres"):
                await runtime.ingest(job("a"))
            assert await _count(pool) == 2
            async with pool.connection() as conn:
                for migration in migrations("postgres")[3:]:
                    await conn.execute(migration.sql.encode())
                await conn.commit()
                after = await (await conn.execute(
                    "SELECT * FROM tickwork_jobs ORDER BY sequence")).fetchall()
            # New columns NULL (due at once, no retry policy, no history, no
            # error kept), and every job on its first attempt.
            assert [(*row, None, None, None, None, 1, None, None) for row in before] == after
            assert await runtime.ingest(job("old-queued", payload={"n": 1})) == "duplicate"
            assert await runtime.ingest(job("later", delay_ms=60_000)) == "queued"
            result = await runtime.tick()
            assert (result.job_id, result.outcome) == ("old-queued", "completed")
            assert (await runtime.tick()).status == "idle"  # "later" waits
            # It held a settled job, so retention keeps its history: a default of
            # "keep forever" until its owner chooses a policy, and a prune deletes nothing.
            default = (await runtime.retention())[0]
            assert (default.queue, default.keep_completed_ms, default.keep_failed_ms) == (
                None, None, None)
            assert (await runtime.prune()) == 0
    finally:
        postgres_server.drop_database(name)


async def test_workers_firing_one_schedule_at_once_create_each_slot_once(pool: Pool) -> None:
    """Eight workers, each on its own connection, fill the same 40 missed
    slots at the same moment (and again, and once more after a replace races
    them): every slot has one job, with the definition it was read with."""
    from tickwork import Schedule, ScheduledJob

    now = ManualNow()
    workers = [_runtime(pool, now=now) for _ in range(8)]
    beat = Schedule("beat", ScheduledJob("beats", "beats", 0, {"v": 1}), every_ms=60_000,
                    catch_up=40)
    assert await workers[0].put_schedule(beat) == "created"
    now.advance(40 * 60_000)
    created = await asyncio.gather(*(worker.fire_schedules() for worker in workers))
    assert sum(created) == 40 and await _count(pool) == 40
    assert sum(await asyncio.gather(*(worker.fire_schedules() for worker in workers))) == 0
    now.advance(10 * 60_000)
    replaced = Schedule("beat", ScheduledJob("beats", "beats", 0, {"v": 2}), every_ms=60_000,
                        catch_up=40)
    results = await asyncio.gather(workers[0].put_schedule(replaced),
                                   *(worker.fire_schedules() for worker in workers[1:]))
    assert results[0] == "replaced"
    assert await _count(pool) == 40 + sum(results[1:])  # each slot filled once at most
    async with pool.connection() as conn:
        rows = await (await conn.execute(
            "SELECT count(*), count(DISTINCT job_id) FROM tickwork_jobs")).fetchall()
    assert rows[0][0] == rows[0][1]


async def test_concurrent_drains_flushing_before_every_step_count_every_job_once(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """Ten runtimes over two pools drain 1,200 jobs of 200 queues, each writing
    its history before every step (as if every minute turned) and sampling
    once: their upserts of the same (queue, minute) rows wait for each other
    in one order, so no flush deadlocks or fails, and once each has written
    what it counted, every queue's counts are exactly its jobs."""
    counting = HistoryKeeper.count

    def count_and_flush_next(keeper: HistoryKeeper, report: Any, at: int) -> None:
        counting(keeper, report, at)
        keeper.flush_due = True  # as if every count landed in a later minute

    monkeypatch.setattr(HistoryKeeper, "count", count_and_flush_next)
    watch = _SerialWatch()
    async with open_pool(postgres_dsn, max_size=6) as first, \
            open_pool(postgres_dsn, max_size=6) as second:
        runtimes = [_runtime(pool, execute=watch.execute) for pool in (first, second)
                    for _ in range(5)]
        started_at = await runtimes[0]._store.store_now(None)
        for start in range(0, 1200, 100):
            await runtimes[start // 200].ingest_many(
                [job(f"j{n}", queue=f"q{n % 200:03}") for n in range(start, start + 100)])

        async def work(runtime: PostgresRuntime) -> None:
            while await _count(first, "state <> 'settled'"):
                await runtime.drain()
                await asyncio.sleep(0.001)

        await asyncio.gather(*(work(runtime) for runtime in runtimes))
        for runtime in runtimes:
            await runtime.flush_history()
        assert len(watch.runs) == 1200 and set(watch.runs.values()) == {1}
        since = started_at - started_at % 60_000
        for queue in (f"q{n:03}" for n in range(200)):
            history = await runtimes[0].history(queue, since=since)
            assert history is not None
            sums = [sum(getattr(point, name) for point in history.points)
                    for name in ("enqueued", "started", "completed", "failed", "retried")]
            assert sums == [6, 6, 6, 0, 0], queue
    assert "could not write the history's counts" not in caplog.text
    assert "could not sample" not in caplog.text


async def test_flushes_of_the_same_rows_at_once_never_deadlock(pool: Pool) -> None:
    """Sixteen flushes at once, each adding to the same 400 (queue, minute)
    rows, six rounds: each statement takes its rows' locks in (queue, minute)
    order, so they queue up behind each other instead of deadlocking, and
    every row ends with every flush's counts."""
    store = _runtime(pool)._store
    rows = [HistoryRow(f"q{n % 100:02}", 60_000 * (n // 100), enqueued=1, completed=2)
            for n in range(400)]
    for _ in range(6):
        await asyncio.gather(*(store.add_history(rows) for _ in range(16)))
    async with pool.connection() as conn:
        cursor = await conn.execute("SELECT count(*), min(enqueued), max(enqueued), "
                                    "min(completed), max(completed) FROM tickwork_queue_history")
        assert await cursor.fetchone() == (400, 96, 96, 192, 192)
