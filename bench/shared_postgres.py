"""tickwork's PostgreSQL runtime beside PgQueuer and a bare SKIP LOCKED loop.

    python -m bench.shared_postgres            # 20,000 jobs at 1, 4 and 8 workers
    python -m bench.shared_postgres --quick    # 2,000 jobs, 20,000 settled rows

``collect(quick=...)`` hands the comparison command (``bench/report.py``) the
rows "tickwork one pool vs PgQueuer/asyncpg" and "tickwork pool per worker vs
PgQueuer/asyncpg" at each worker count (target 1.0), the pool-per-worker
shape beside PgQueuer/psycopg, the SKIP LOCKED loop, tickwork's
group-commit function called with no engine and a raw loop on tickwork's
table (``bench.postgres_raw_batches``; context), those two loops and a raw
loop on a narrow schema beside PgQueuer/asyncpg (context), CPU time per
job at the most workers, pool per worker (the client's for tickwork and for
its group-commit function alone, the server's for tickwork, each beside
PgQueuer/asyncpg's; context, see ``cpu_rows``), the mean tick at 1,000,000
settled rows against none (target at most 1.2x), and jobs/s against workers
for every contender (chart "workers").

Same server, same fresh-database-per-measurement procedure, same no-op
executor and same exactly-once checks as ``bench.postgres_baselines``, whose
contenders run in the same invocation.

A tickwork *worker* here is one process-like unit with ``--ticks`` ticks in
flight, default 20: as many jobs as a PgQueuer worker holds at its default
batch of 10. A PgQueuer worker dequeues its next batch while the jobs of
the last one run and their results wait in its buffer, so it holds up to
two batches at once; every run counts this (jobs dequeued and not yet
logged, per worker) and prints the most, which has been 20, beside
tickwork's own count (jobs claimed and not yet settled). Each tick in
flight has its own PostgresRuntime (a runtime holds one claim at a time);
all of a worker's runtimes share one pool,
so their claims and settlements share statements and commits (group commit).
Every job still gets its own private claim token, its own 2-minute lease and
a settlement fenced on both. Workers are asyncio tasks in this one process,
as for the other contenders. "one pool": every worker's runtimes share one
pool, hence one group commit; "pool per worker": each worker has its own
pool (its own coalescer), so workers' claims race one another in the server
as separate processes' would, the shape PgQueuer has (a connection per
worker).
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
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from bench.postgres_baselines import (
    JOBS,
    QUICK_JOBS,
    WORKER_COUNTS,
    BenchmarkError,
    Contender,
    ContenderFactory,
    HeldJobs,
    PgQueuerContender,
    Result,
    SkipLockedLoop,
    asyncpg_available,
    baseline_contenders,
    describe_server,
    print_table,
    run_contenders,
)
from bench.postgres_raw_batches import BATCH, BatchedRawLoop, load_tickwork_jobs
from bench.report import Figures, Point, Row, print_rows
from tests.support.pg.server import fresh_database, start_postgres
from tickwork import Completed, JobRecord
from tickwork.runtimes.postgres import PostgresRuntime
from tickwork.runtimes.shared import LeasedSignal
from tickwork.schemas import migrations

#: Ticks in flight per tickwork worker: the jobs a PgQueuer worker holds at
#: its default batch of 10 (see the module docstring).
DEFAULT_TICKS = 20


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
            await load_tickwork_jobs(conn, jobs)

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

        for store in {id(runtime._store): runtime._store for runtime in self._runtimes}.values():
            self._count_held(store)

    def _count_held(self, store: Any) -> None:
        """Observe (not change) one pool's group commits: the jobs its
        runtimes claimed and have not yet settled (``HeldJobs``; with a pool
        per worker, one worker's). A commit settles before it claims."""
        held = HeldJobs()
        self.held.append(held)
        commits = store._commits
        flush = commits._flush

        async def counted(requests: list[Any]) -> list[Any]:
            answers = await flush(requests)
            for answer in answers:  # a claim's job, a settlement's bool, or both
                if isinstance(answer, JobRecord) or answer is None:
                    settled, claimed = False, answer
                elif isinstance(answer, bool):
                    settled, claimed = answer, None
                else:
                    settled, claimed = answer
                held.settled(int(settled))
                held.took(int(claimed is not None))
            return answers

        commits._flush = counted

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
              f" commits ({jobs / max(1, self.commits):.1f} jobs per commit); one"
              f" {'pool' if self.shared_pool else 'worker'} held up to {self.most_held}"
              " at once (claimed, not yet settled)", flush=True)


def tickwork_contenders(ticks: Sequence[int]) -> list[ContenderFactory]:
    factories: list[ContenderFactory] = []
    for n in ticks:
        factories.append(lambda n=n: TickworkContender(n))  # type: ignore[misc]
        factories.append(lambda n=n: TickworkContender(n, shared_pool=False))  # type: ignore[misc]
    return factories


async def _load(dsn: str, settled_rows: int, jobs: int) -> None:
    """tickwork's schema, ``settled_rows`` settled jobs (10,000 queues), then
    ``jobs`` queued ones; VACUUM ANALYZE and a CHECKPOINT, so neither side of
    the comparison starts with checkpoint debt or an unvacuumed table."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        for migration in migrations("postgres"):
            await conn.execute(migration.sql.encode())
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
        await conn.execute("CHECKPOINT")


async def _history(empty_dsn: str, full_dsn: str, settled_rows: int,
                   jobs: int) -> tuple[float, float, list[str]]:
    """Mean time of a lone tick (claim, no-op, settle: two commits) on a table
    with no history and on one with ``settled_rows`` settled rows, in
    alternating rounds of ticks so that the machine's other load hits both
    alike; and the claim's plans on the full table (printed whole)."""
    from tickwork.stores.sql import postgres as sql

    await _load(empty_dsn, 0, jobs)
    await _load(full_dsn, settled_rows, jobs)
    async with await psycopg.AsyncConnection.connect(full_dsn, autocommit=True) as conn:
        plan = await _nested_plans(conn, sql.SETTLE_THEN_CLAIM, {
            "sequences": [], "settle_tokens": [], "outcomes": [], "reasons": [], "errors": [],
            "claim_tokens": ["t1"], "lease_ms": 1000, "scan": 264, "now": None})
    pools: list[AsyncConnectionPool[Any]] = []
    spent = [0.0, 0.0]
    try:
        runtimes = []
        for dsn in (empty_dsn, full_dsn):
            pool: AsyncConnectionPool[Any] = AsyncConnectionPool(dsn, min_size=1, max_size=2,
                                                                 open=False)
            await pool.open(wait=True)
            pools.append(pool)
            runtime = PostgresRuntime(pool, execute=_noop, wake=_Wake())
            await runtime.tick()  # schema check, warm-up
            runtimes.append(runtime)
        rounds = 10
        per_round = (jobs - 1) // rounds
        for _ in range(rounds):
            for side, runtime in enumerate(runtimes):
                started = time.perf_counter()
                for _ in range(per_round):
                    if (await runtime.tick()).status != "settled":
                        raise BenchmarkError("a history tick found nothing to run")
                spent[side] += time.perf_counter() - started
    finally:
        for pool in pools:
            await pool.close()
    empty, full = (seconds / (rounds * per_round) for seconds in spent)
    scans = sorted({line.strip().removeprefix("->").strip().split("  (")[0]
                    for line in plan if " on tickwork_jobs" in line})
    lines = [f"mean tick, 1 worker: {empty * 1e3:.2f} ms with no history,"
             f" {full * 1e3:.2f} ms with {settled_rows:,} settled rows"
             f" ({full / empty:.2f}x)",
             "claim plan over tickwork_jobs: " + ", ".join(scans),
             "claim plans (auto_explain, each statement of the function, analysed):",
             *("    " + line for line in plan)]
    # The job table must never be scanned; tickwork_paused_queues (one row per
    # paused queue, read once per claim call) may be.
    if any(re.search(r"Seq Scan on tickwork_jobs\b", line) for line in plan):
        raise BenchmarkError("the claim plan scans the table:\n" + "\n".join(plan))
    return empty, full, lines


async def _nested_plans(conn: Any, statement: str, params: dict[str, Any]) -> list[str]:
    """Plan lines of ``statement`` and of every query nested in it (auto_explain)."""
    notices: list[str] = []
    conn.add_notice_handler(lambda notice: notices.append(notice.message_primary or ""))
    await conn.execute("LOAD 'auto_explain'")
    for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_analyze = on",
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


SECTION = "PostgreSQL"
QUICK_SETTLED_ROWS = 20_000
SETTLED_ROWS = 1_000_000
#: Rounds of the full comparison; each contender keeps its best, the rounds
#: taken in turns (other load on the machine only ever slows a round down).
#: One round of 20,000 jobs moved the same tickwork shape from 5,036 to
#: 7,534 jobs/s between two runs of the command.
ROUNDS = 3
HISTORY_TICKS = 1000


def history(settled_rows: int, ticks: int = HISTORY_TICKS) -> tuple[float, float, list[str]]:
    """``_history`` on a server started for it."""
    server = start_postgres()
    try:
        with fresh_database(server, prefix="history") as empty, \
                fresh_database(server, prefix="history") as full:
            return asyncio.run(_history(empty, full, settled_rows, ticks))
    finally:
        server.stop()


def figures(results: Sequence[Result], tick_times: tuple[float, float] | None,
            settled_rows: int) -> Figures:
    """The rows and chart points of one run (see the module docstring)."""
    out = Figures()
    by = {(result.system, result.workers): result.jobs_per_second for result in results}
    label_of = {
        "one pool": TickworkContender(DEFAULT_TICKS).label,
        "pool per worker": TickworkContender(DEFAULT_TICKS, shared_pool=False).label,
        "asyncpg": PgQueuerContender("asyncpg").label if asyncpg_available() else None,
        "psycopg": PgQueuerContender("psycopg").label,
        "loop": SkipLockedLoop().label,
        "raw table": BatchedRawLoop("tickwork").label,
        "raw function": BatchedRawLoop("function").label,
        "raw narrow": BatchedRawLoop("narrow").label,
    }
    peer = label_of["asyncpg"] or PgQueuerContender("psycopg").label
    peer_name = "PgQueuer/asyncpg" if label_of["asyncpg"] else "PgQueuer/psycopg"
    for workers in sorted({result.workers for result in results}):
        def rate(key: str, workers: int = workers) -> float | None:
            label = label_of[key]
            return None if label is None else by.get((label, workers))

        plural = "s" if workers != 1 else ""
        for shape in ("one pool", "pool per worker"):
            value, base = rate(shape), by.get((peer, workers))
            if value is not None:
                out.rows.append(Row(SECTION, f"tickwork {shape}, {workers} worker{plural}", value,
                                    "jobs/s", peer_name,
                                    base, target=1.0))
        value = rate("pool per worker")
        for key, name in (("psycopg", "PgQueuer/psycopg"), ("loop", "SKIP LOCKED loop")):
            base = rate(key)
            if value is not None and base is not None and not (
                    key == "psycopg" and peer_name == name):
                out.rows.append(Row(SECTION, f"tickwork pool per worker, {workers} worker{plural}",
                                    value, "jobs/s", name, base))
        # The loops with no engine, in the same shape (a connection per
        # worker, 20 jobs per commit): tickwork's share of its group-commit
        # function called alone and of the raw loop on its table, and the
        # three loops beside the peer.
        for key, name in (("raw function", "its group-commit function called alone"),
                          ("raw table", f"raw SQL on tickwork's table, {BATCH} jobs/commit")):
            base = rate(key)
            if value is not None and base is not None:
                out.rows.append(Row(SECTION, f"tickwork pool per worker, {workers} worker{plural}",
                                    value, "jobs/s", name, base))
        for key, name in (("raw function", "tickwork's group-commit function, no engine"),
                          ("raw table", "raw SQL on tickwork's table"),
                          ("raw narrow", "raw SQL, narrow schema")):
            raw, base = rate(key), by.get((peer, workers))
            if raw is not None and base is not None:
                out.rows.append(Row(SECTION, f"{name}, {workers} worker{plural}", raw, "jobs/s",
                                    peer_name, base))
    out.rows += worker_rows(results, label_of, peer, peer_name)
    for result in results:
        out.points.append(Point("workers", result.system, result.workers,
                                result.jobs_per_second))
    if tick_times is not None:
        empty, full = tick_times
        out.rows.append(Row(SECTION, f"mean tick, {settled_rows:,} settled rows", full * 1e6,
                            "us/tick", "same, no settled rows", empty * 1e6, target=1.2,
                            lower_is_better=True))
    return out


def worker_rows(results: Sequence[Result], labels: Mapping[str, str | None], peer: str,
                peer_name: str) -> list[Row]:
    """At the most workers measured, pool per worker, beside the peer's in
    the same run: the most jobs one tickwork worker held at once (claimed,
    not yet settled) against the most one peer worker held (dequeued, not
    yet logged), which is what the two shapes are matched on; then CPU time
    per job, the client's (this process: the workers' Python and driver) for
    tickwork and for its group-commit function called with no engine, and
    the server's (the rest of the machine) for tickwork. The two sides share
    the machine's cores, so a contender is ahead only if its client and
    server time per job together are below the peer's. ``labels`` maps
    "pool per worker" and "raw function" to those contenders' result labels
    (None: not measured)."""
    by = {(result.system, result.workers): result for result in results}
    workers = max((result.workers for result in results), default=0)
    peer_result = by.get((peer, workers))
    if peer_result is None:
        return []
    plural = "s" if workers != 1 else ""
    rows = []
    for key, who in (("pool per worker", f"tickwork pool per worker, {workers} worker{plural}"),
                     ("raw function", "tickwork's group-commit function, no engine,"
                                      f" {workers} worker{plural}")):
        label = labels[key]
        result = None if label is None else by.get((label, workers))
        if result is None:
            continue
        if key == "pool per worker" and None not in (result.most_held, peer_result.most_held):
            rows.append(Row(SECTION, f"{who}: most jobs one worker held at once",
                            float(result.most_held or 0), "jobs", peer_name,
                            float(peer_result.most_held or 0)))
        rows.append(Row(SECTION, f"{who}: client CPU per job", result.client_us_per_job,
                        "us/job", peer_name, peer_result.client_us_per_job,
                        lower_is_better=True))
        server, peer_server = result.server_us_per_job, peer_result.server_us_per_job
        if key == "pool per worker" and server is not None and peer_server is not None:
            rows.append(Row(SECTION, f"{who}: server CPU per job (rest of the machine)",
                            server, "us/job", peer_name, peer_server, lower_is_better=True))
    return rows


def measure_all(jobs: int, worker_counts: Sequence[int], settled_rows: int,
                ticks: Sequence[int] = (DEFAULT_TICKS,), *, repeats: int = 1,
                history_ticks: int = HISTORY_TICKS) -> Figures:
    """Every contender at every worker count, then the history check; prints as it goes."""
    factories: list[ContenderFactory] = [*baseline_contenders(), *tickwork_contenders(ticks),
                                         lambda: BatchedRawLoop("function"),
                                         lambda: BatchedRawLoop("tickwork"),
                                         lambda: BatchedRawLoop("narrow")]
    server = start_postgres()
    try:
        print(describe_server(server), flush=True)
        results = run_contenders(server, factories, worker_counts, jobs, repeats=repeats,
                                 progress=sys.stdout)
    finally:
        server.stop()
    print()
    print_table(results)
    tick_times = None
    if settled_rows:
        empty, full, lines = history(settled_rows, history_ticks)
        for line in lines:
            print(line)
        tick_times = (empty, full)
    return figures(results, tick_times, settled_rows)


def collect(*, quick: bool) -> Figures:
    """One run for the comparison command: 2,000 jobs and 20,000 settled rows
    when quick, else 20,000 jobs, the best of ROUNDS rounds, and 1,000,000
    settled rows."""
    return measure_all(QUICK_JOBS if quick else JOBS, WORKER_COUNTS,
                       QUICK_SETTLED_ROWS if quick else SETTLED_ROWS,
                       repeats=1 if quick else ROUNDS)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_JOBS:,} jobs, {QUICK_SETTLED_ROWS:,} settled rows")
    parser.add_argument("--jobs", type=int, help=f"jobs per measurement (default {JOBS:,})")
    parser.add_argument("--workers", default=",".join(map(str, WORKER_COUNTS)),
                        help="comma-separated worker counts (default 1,4,8)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds; the best of them is kept (default 1)")
    parser.add_argument("--ticks", default=str(DEFAULT_TICKS),
                        help="ticks in flight per tickwork worker (comma-separated)")
    parser.add_argument("--settled-rows", type=int,
                        help=f"history size for the tick-time check (default"
                             f" {SETTLED_ROWS:,}; 0 skips it)")
    args = parser.parse_args(argv)
    jobs = args.jobs or (QUICK_JOBS if args.quick else JOBS)
    settled = args.settled_rows if args.settled_rows is not None else (
        QUICK_SETTLED_ROWS if args.quick else SETTLED_ROWS)
    ticks = [int(n) for n in args.ticks.split(",") if n.strip()]
    if DEFAULT_TICKS not in ticks:
        ticks.append(DEFAULT_TICKS)  # the rows compare this shape
    workers = [int(n) for n in args.workers.split(",") if n.strip()]
    found = measure_all(jobs, workers, settled, ticks, repeats=max(1, args.repeat))
    print()
    print_rows(found.rows)


if __name__ == "__main__":
    main(sys.argv[1:])
