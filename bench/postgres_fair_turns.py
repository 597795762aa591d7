"""Fair turns on PostgreSQL: what a claim costs in a wide queue, and what a
job's lane joining a line costs its ingest.

    python -m bench.postgres_fair_turns                 # 2,000 calls per shape
    python -m bench.postgres_fair_turns --calls 500
    PYTHONPATH=<checkout> python <this file> --ingest-only   # any checkout

Claims: one worker loop on one connection, each call of the group-commit
function settling the job it claimed last and claiming the next (the
statement tickwork's drain commits through, with one claim token), then
the same with the exact claim (tickwork_claim_one) and a settlement. A
queue of max_running 4 whose twenty small lanes take turns, in two shapes
measured in alternating rounds on one server: a tenant's 10,000 jobs
stored first, ahead of every small lane's in global order (each claim's
global pick is one of them; the turns pass it over for the small lanes,
but for one turn in 21), and the small lanes alone. A claim reads the line
and the lane's jobs through their indexes (tickwork_turns_line,
tickwork_jobs_lane_ready), so the two should cost alike.

Ingest: store.insert of one job at a time, a statement and a commit each,
in a queue without a limit while no queue is wide (the serial path: the
statement's probe of tickwork_limits finds nothing and no line is
touched), and, on a checkout with fair turns, into a wide queue whose lane
is in its line already (the row locked KEY SHARE) and into a new lane each
time (a row inserted). ``--ingest-only`` runs the serial shape alone, with
only what every checkout has, for a comparison across commits.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import psycopg

from tests.support.pg.server import start_postgres
from tickwork.model.jobs import validate_job
from tickwork.schemas import migrations

CALLS = 2000
SMALL_LANES = 20
BIG = 10_000
LEASE = 120_000
ROUNDS = 4


def _job(job_id: str, queue: str, lane: str | None) -> Any:
    from tickwork import Job

    return validate_job(Job(job_id, queue, lane=lane, payload={}))


def _schema(server: Any, name: str) -> str:
    dsn: str = server.create_database(name)
    with psycopg.connect(dsn, autocommit=True) as conn:
        for migration in migrations("postgres"):
            conn.execute(migration.sql.encode())
    return dsn


def _load_wide(dsn: str, calls: int, big: int) -> None:
    """Queue w, max_running 4: ``big`` jobs of lane big first, then enough
    jobs in each small lane for ``calls`` claims; lined up by put_limit."""
    per_lane = calls // SMALL_LANES + 2
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,"
            " enqueued_at) SELECT 'big-' || n, 'w', 'big', 0, '{}', 'queued', 0"
            " FROM generate_series(1, %s) AS n", (big,))
        conn.execute(
            "INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,"
            " enqueued_at) SELECT 'small-' || n, 'w', 'small-' || (n %% %s), 0, '{}',"
            " 'queued', 0 FROM generate_series(1, %s) AS n",
            (SMALL_LANES, per_lane * SMALL_LANES))
        conn.execute("INSERT INTO tickwork_limits (kind, key, max_running, updated_at)"
                     " VALUES ('queue', 'w', 4, 0)")
        from tickwork.stores.sql import postgres as sql

        conn.execute(sql.LINE_AFTER_LIMIT, {"queue": "w"})
        conn.execute("VACUUM ANALYZE tickwork_jobs")
        conn.execute("VACUUM ANALYZE tickwork_turns")
        conn.execute("CHECKPOINT")


class _Loop:
    """One worker loop on one autocommit connection."""

    def __init__(self, dsn: str) -> None:
        from tickwork.stores.postgres.store import settle_then_claim_params
        from tickwork.stores.sql import postgres as sql

        self.sql = sql
        self.params = settle_then_claim_params
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.held: tuple[int, str] | None = None
        self.tokens = 0
        self.big = 0

    def _token(self) -> str:
        self.tokens += 1
        return f"t{self.tokens}"

    def group_commit(self) -> None:
        from tickwork.lifecycle import Settlement

        settles = [] if self.held is None else [(*self.held, Settlement("completed"))]
        token = self._token()
        rows = self.conn.execute(self.sql.SETTLE_THEN_CLAIM, self.params(
            settles, [token], lease_ms=LEASE, now=None), prepare=True).fetchall()
        columns = self.sql.SETTLE_THEN_CLAIM_COLUMNS
        claimed = [columns.job(row) for row in rows if columns.value(row, "claim_index")]
        if len(claimed) != 1:
            raise RuntimeError(f"a call claimed {len(claimed)} jobs")
        self.held = (claimed[0].sequence, token)
        self.big += claimed[0].lane == "big"

    def exact(self) -> None:
        token = self._token()
        if self.held is not None:
            sequence, held = self.held
            self.conn.execute(
                "UPDATE tickwork_jobs SET state = 'settled', outcome = 'completed',"
                " settled_at = 0 WHERE sequence = %s AND claim_token = %s",
                (sequence, held), prepare=True)
        row = self.conn.execute(self.sql.CLAIM_ONE, {"token": token, "lease_ms": LEASE,
                                                      "now": None}, prepare=True).fetchone()
        if row is None:
            raise RuntimeError("the exact claim found nothing")
        self.held = (int(row[self.sql.SETTLE_THEN_CLAIM_COLUMNS.index["sequence"]]), token)
        self.big += row[2] == "big"


def _timed(step: Callable[[], None], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        step()
    return (time.perf_counter() - started) / calls


def claims(calls: int, ahead: int = BIG) -> list[str]:
    """Mean ms per call, each kind of claim, with ``ahead`` jobs of one lane
    ahead and without, in alternating rounds."""
    server = start_postgres()
    try:
        deep = f"{ahead:,} jobs of one lane ahead"
        shapes = {deep: _schema(server, "deep"), "no backlog": _schema(server, "shallow")}
        _load_wide(shapes[deep], 2 * calls, ahead)
        _load_wide(shapes["no backlog"], 2 * calls, 0)
        loops = {shape: _Loop(dsn) for shape, dsn in shapes.items()}
        spent = {(shape, kind): 0.0 for shape in shapes for kind in ("group", "exact")}
        per_round = calls // ROUNDS
        for _ in range(ROUNDS):
            for kind in ("group", "exact"):
                for shape, loop in loops.items():
                    step = loop.group_commit if kind == "group" else loop.exact
                    spent[(shape, kind)] += _timed(step, per_round) / ROUNDS
        lines = []
        for kind, label in (("group", "group commit (settle + claim, one call)"),
                            ("exact", "exact claim (tickwork_claim_one)")):
            for shape in loops:
                lines.append(f"{label}, wide queue, {shape}:"
                             f" {spent[(shape, kind)] * 1e3:.3f} ms per call")
        for shape, loop in loops.items():
            lines.append(f"    ({shape}: {loop.big} of {2 * per_round * ROUNDS} claims took"
                         " a job of the big lane)")
            loop.conn.close()
        return lines
    finally:
        server.stop()


async def _ingest(dsn: str, shape: str, count: int, offset: int) -> float:
    from psycopg_pool import AsyncConnectionPool

    from tickwork.stores.postgres.store import PostgresStore

    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(dsn, min_size=1, max_size=1,
                                                         open=False)
    await pool.open(wait=True)
    try:
        store = PostgresStore(pool)
        insert: Callable[[int], Awaitable[bool]]
        if shape == "serial":
            def insert(n: int) -> Awaitable[bool]:
                return store.insert(_job(f"s{n}", f"q{n % 100}", None), None)
        elif shape == "wide, lane in line":
            def insert(n: int) -> Awaitable[bool]:
                return store.insert(_job(f"l{n}", "w", f"lane-{n % 20}"), None)
        else:
            def insert(n: int) -> Awaitable[bool]:
                return store.insert(_job(f"n{n}", "w", f"new-{n}"), None)
        for n in range(50):  # warm: prepared statements, the first joins
            await insert(-offset - 1 - n)
        started = time.perf_counter()
        for n in range(count):
            await insert(offset + n)
        return (time.perf_counter() - started) / count
    finally:
        await pool.close()


def ingests(count: int, shapes: Sequence[str]) -> list[str]:
    """Mean ms per store.insert in each shape, in alternating rounds."""
    server = start_postgres()
    try:
        dsns = {}
        for index, shape in enumerate(shapes):
            dsns[shape] = _schema(server, f"ingest{index}")
            if shape != "serial":
                with psycopg.connect(dsns[shape], autocommit=True) as conn:
                    conn.execute("INSERT INTO tickwork_limits (kind, key, max_running,"
                                 " updated_at) VALUES ('queue', 'w', 4, 0)")
        spent = dict.fromkeys(shapes, 0.0)
        per_round = count // ROUNDS
        for round_number in range(ROUNDS):
            for shape in shapes:
                spent[shape] += asyncio.run(_ingest(
                    dsns[shape], shape, per_round, round_number * (per_round + 100))) / ROUNDS
        return [f"ingest (store.insert, one job a statement), {shape}:"
                f" {spent[shape] * 1e3:.3f} ms per job" for shape in shapes]
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=CALLS,
                        help=f"claims and ingests per shape (default {CALLS:,})")
    parser.add_argument("--ahead", type=int, default=BIG,
                        help=f"jobs of the deep lane (default {BIG:,})")
    parser.add_argument("--ingest-only", action="store_true",
                        help="only the serial ingest, with what every checkout has")
    args = parser.parse_args(argv)
    if args.ingest_only:
        lines = ingests(args.calls, ["serial"])
    else:
        lines = claims(args.calls, args.ahead) + ingests(
            args.calls, ["serial", "wide, lane in line", "wide, a new lane each job"])
    for line in lines:
        print(line, flush=True)


if __name__ == "__main__":
    main()
