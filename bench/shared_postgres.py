"""tickwork's PostgreSQL runtime beside PgQueuer and a bare SKIP LOCKED loop.

    python -m bench.shared_postgres            # 20,000 jobs at 1, 4 and 8 workers
    python -m bench.shared_postgres --quick    # 2,000 jobs

Same server, same fresh-database-per-measurement procedure, same no-op
executor and same exactly-once checks as ``bench.postgres_baselines``, whose
contenders run in the same invocation.

A tickwork *worker* here is one process-like unit with ``--ticks`` ticks in
flight (default 10: PgQueuer's default batch size, i.e. PgQueuer also has up
to 10 jobs of one worker in flight). Each tick in flight has its own PostgresRuntime (a
runtime runs one tick at a time); all of a worker's runtimes share one pool,
so their claims and settlements share statements and commits (group commit).
Every job still gets its own private claim token, its own 2-minute lease and
a settlement fenced on both. Workers are asyncio tasks in this one process,
as for the other contenders; workers do not share pools with one another.
Each of them runs ``runtime.drain()``, the worker loop, in which a job's
settlement and the next claim share one commit. Jobs are loaded with one
INSERT ... SELECT before the clock starts.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from bench.postgres_baselines import BenchmarkError, Contender, ContenderFactory, main
from tests.support.pg.server import fresh_database, start_postgres
from tickwork import Completed, JobRecord
from tickwork.runtimes.postgres import PostgresRuntime
from tickwork.runtimes.shared import LeasedSignal
from tickwork.schemas import migrations

DEFAULT_TICKS = 10


class _Wake:
    def recompute(self) -> None:
        return None


class TickworkContender(Contender):
    def __init__(self, ticks: int, *, shared_pool: bool = True) -> None:
        super().__init__()
        self.ticks = ticks
        self.shared_pool = shared_pool
        self.label = (f"tickwork, {ticks} tick{'s' if ticks > 1 else ''}/worker,"
                      f" {'one pool' if shared_pool else 'pool per worker'}")
        self._pools: list[AsyncConnectionPool[Any]] = []
        self._runtimes: list[PostgresRuntime] = []
        self.commits = 0

    async def prepare(self, dsn: str, jobs: int) -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            for migration in migrations("postgres"):
                await conn.execute(migration.sql.encode())
            await conn.execute(
                "INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json,"
                " state, enqueued_at)"
                " SELECT 'job-' || n, 'queue-' || n, 'bench', 0, '{\"n\":' || n || '}',"
                " 'queued', tickwork_now_ms() FROM generate_series(0, %s - 1) AS n",
                (jobs,))

    async def connect(self, dsn: str, workers: int) -> None:
        pools = 1 if self.shared_pool else workers
        for _ in range(pools):
            pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                dsn, min_size=2, max_size=4, open=False)
            await pool.open(wait=True)
            self._pools.append(pool)
        for worker in range(workers):
            pool = self._pools[worker % pools]
            self._runtimes += [
                PostgresRuntime(pool, execute=self._execute, wake=_Wake())
                for _ in range(self.ticks)
            ]

    async def _execute(self, job: JobRecord, signal: LeasedSignal) -> Completed:
        await self.execute(int(job.payload["n"]))
        return Completed()

    async def drain(self) -> None:
        async def drain_one(runtime: PostgresRuntime) -> None:
            # drain() is the worker loop: each settlement carries the next claim.
            for result in await runtime.drain():
                if result.status != "settled" or result.outcome != "completed":
                    raise BenchmarkError(f"unexpected tick result {result}")
                self.settled(1)

        await asyncio.gather(*(drain_one(runtime) for runtime in self._runtimes))
        stores = {id(runtime._store): runtime._store for runtime in self._runtimes}
        for store in stores.values():
            self.commits += store._commits.flushes  # type: ignore[attr-defined]

    async def close(self) -> None:
        for pool in self._pools:
            await pool.close()

    async def verify(self, dsn: str, jobs: int) -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            cursor = await conn.execute(
                "SELECT count(*) FILTER (WHERE state = 'settled' AND outcome = 'completed'),"
                " count(*) FROM tickwork_jobs")
            counts = await cursor.fetchone()
        if counts != (jobs, jobs):
            raise BenchmarkError(f"{self.label}: (settled, total) = {counts}, expected {jobs}")
        print(f"    {self.label}: {jobs:,} jobs, {self.commits:,} shared claim/settle"
              f" commits ({jobs / max(1, self.commits):.1f} jobs per commit)", flush=True)


def tickwork_contenders(ticks: Sequence[int]) -> list[ContenderFactory]:
    factories: list[ContenderFactory] = []
    for n in ticks:
        factories.append(lambda n=n: TickworkContender(n))  # type: ignore[misc]
        factories.append(lambda n=n: TickworkContender(n, shared_pool=False))  # type: ignore[misc]
    return factories


async def _history(dsn: str, settled_rows: int, jobs: int) -> list[str]:
    """Mean tick time with ``settled_rows`` of history beside none, and the claim's plan."""
    from tickwork.stores.sql import postgres as sql

    lines = []
    contender = TickworkContender(1)
    await contender.prepare(dsn, jobs)
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        async def timed_ticks() -> float:
            pool: AsyncConnectionPool[Any] = AsyncConnectionPool(dsn, min_size=1, max_size=2,
                                                                 open=False)
            await pool.open(wait=True)
            try:
                runtime = PostgresRuntime(pool, execute=_noop, wake=_Wake())
                await runtime.tick()  # schema check, warm-up
                started = time.perf_counter()
                for _ in range(jobs - 1):
                    await runtime.tick()
                return (time.perf_counter() - started) / (jobs - 1)
            finally:
                await pool.close()

        empty = await timed_ticks()
        await conn.execute(
            "INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,"
            " outcome, enqueued_at, started_at, settled_at, claim_token, lease_expires_at)"
            " SELECT 'old-' || n, 'old-q' || (n %% 10000), 'bench', 0, '{}', 'settled',"
            " 'completed', n, n, n, 'old', n FROM generate_series(1, %s) AS n",
            (settled_rows,))
        await conn.execute(
            "INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json,"
            " state, enqueued_at) SELECT 'new-' || n, 'queue-' || n, 'bench', 0,"
            " '{\"n\":' || n || '}', 'queued', 0 FROM generate_series(0, %s - 1) AS n",
            (jobs,))
        await conn.execute("VACUUM ANALYZE tickwork_jobs")
        plan = await _nested_plans(conn, sql.SETTLE_THEN_CLAIM, {
            "sequences": [], "settle_tokens": [], "outcomes": [], "reasons": [], "errors": [],
            "claim_tokens": ["t1"], "lease_ms": 1000, "scan": 36, "now": None})
        full = await timed_ticks()
    scans = sorted({line.strip().removeprefix("->").strip().split("  (")[0]
                    for line in plan if " on tickwork_jobs" in line})
    lines.append(f"mean tick, 1 worker: {empty * 1e3:.2f} ms with no history,"
                 f" {full * 1e3:.2f} ms with {settled_rows:,} settled rows"
                 f" ({full / empty:.2f}x)")
    lines.append("claim plan over tickwork_jobs: " + ", ".join(scans))
    # The job table must never be scanned; tickwork_paused_queues (one row per
    # paused queue, read once per claim call) may be.
    if any(re.search(r"Seq Scan on tickwork_jobs\b", line) for line in plan):
        raise BenchmarkError("the claim plan scans the table:\n" + "\n".join(plan))
    return lines


async def _nested_plans(conn: Any, statement: str, params: dict[str, Any]) -> list[str]:
    """Plan lines of ``statement`` and of every query nested in it (auto_explain)."""
    notices: list[str] = []
    conn.add_notice_handler(lambda notice: notices.append(notice.message_primary or ""))
    await conn.execute("LOAD 'auto_explain'")
    for setting in ("auto_explain.log_min_duration = 0",
                    "auto_explain.log_nested_statements = on",
                    "auto_explain.log_level = 'notice'", "client_min_messages = 'notice'"):
        await conn.execute(f"SET {setting}")
    async with conn.transaction():
        await conn.execute(statement, params)
        raise psycopg.Rollback()
    await conn.execute("RESET ALL")
    return [line for notice in notices for line in notice.splitlines()]


async def _noop(job: JobRecord, signal: LeasedSignal) -> Completed:
    return Completed()


def run(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--ticks", default=f"1,{DEFAULT_TICKS}",
                        help="ticks in flight per tickwork worker (comma-separated)")
    parser.add_argument("--settled-rows", type=int, default=1_000_000,
                        help="history size for the tick-time check (0 skips it)")
    known, rest = parser.parse_known_args(argv)
    ticks = [int(n) for n in known.ticks.split(",") if n.strip()]
    main(rest, extra_contenders=tickwork_contenders(ticks))
    if known.settled_rows:
        server = start_postgres()
        try:
            with fresh_database(server, prefix="history") as dsn:
                for line in asyncio.run(_history(dsn, known.settled_rows, 1000)):
                    print(line)
        finally:
            server.stop()


if __name__ == "__main__":
    run(sys.argv[1:])
