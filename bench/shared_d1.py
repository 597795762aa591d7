"""tickwork's D1 runtime on Miniflare's real D1 engine, beside raw D1 baselines.

    python -m bench.shared_d1            # 2,000 jobs
    python -m bench.shared_d1 --quick    # 300 jobs

Prints jobs/s and, for every operation, the D1 round trips and statements it
costs (the figures that matter on Cloudflare: a Worker invocation may make at
most 1,000 queries, 50 on the free plan). Baselines, measured in the same run
on the same bridge: a raw loop on a bare two-index table (one claim UPDATE,
one settle UPDATE per job, no lease or fence checks beyond the token) and raw
batched INSERTs. Needs ``npm ci`` (Miniflare). Absolute rates include the
test bridge's own hop (Python -> Node -> workerd, about 0.5 ms); compare the
rows with one another, not with production D1.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.d1.miniflare import D1Bridge
from tests.support.stores import apply_d1_schema
from tickwork import Completed, Job, JobRecord
from tickwork.runtimes.d1 import D1Runtime
from tickwork.runtimes.shared import LeasedSignal

RAW_SCHEMA = (
    "CREATE TABLE raw_jobs (id INTEGER PRIMARY KEY, payload TEXT NOT NULL,"
    " state TEXT NOT NULL, token TEXT, lease INTEGER)",
    "CREATE INDEX raw_jobs_queued ON raw_jobs (id) WHERE state = 'queued'",
)
RAW_CLAIM = (
    "UPDATE raw_jobs SET state = 'running', token = ?1, lease = ?2"
    " WHERE id = (SELECT id FROM raw_jobs WHERE state = 'queued' ORDER BY id LIMIT 1)"
    " RETURNING id, payload"
)
RAW_SETTLE = "UPDATE raw_jobs SET state = 'settled' WHERE id = ?1 AND token = ?2"


class _Wake:
    def recompute(self) -> None:
        return None


async def _complete(job: JobRecord, signal: LeasedSignal) -> Completed:
    return Completed()


async def _cost(db: Any, operation: Callable[[], Awaitable[Any]]) -> tuple[int, int]:
    before = db.stats.snapshot()
    await operation()
    spent = db.stats.since(before)
    return spent.round_trips, spent.statements


async def measure(bridge: D1Bridge, jobs: int) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    db = bridge.binding("external")
    await apply_d1_schema(db)
    runtime = D1Runtime(db, execute=_complete, wake=_Wake())
    await runtime.has_pending_work()  # the one-time schema check
    trips, statements = await _cost(db, runtime.tick)
    rows.append(("a runtime's first (idle) tick", f"{trips} rt / {statements} st",
                 "and when the next schedule slot comes"))

    # Costs per operation.
    trips, statements = await _cost(db, lambda: runtime.ingest(Job("c1", "q", "l", 0, {})))
    rows.append(("ingest (new job)", f"{trips} rt / {statements} st", ""))
    trips, statements = await _cost(db, lambda: runtime.ingest(Job("c1", "q", "l", 0, {})))
    rows.append(("ingest (replay)", f"{trips} rt / {statements} st", "insert, then compare"))
    trips, statements = await _cost(db, runtime.tick)
    rows.append(("tick (claim + settle)", f"{trips} rt / {statements} st", ""))
    trips, statements = await _cost(db, runtime.tick)
    rows.append(("idle tick", f"{trips} rt / {statements} st", "guarded claim + probe, one batch"))
    await runtime.ingest(Job("c2", "q", "l", 0, {}))
    trips, statements = await _cost(db, lambda: runtime.cancel("c2", "x"))
    rows.append(("cancel (queued job)", f"{trips} rt / {statements} st", "read + fenced write"))
    trips, statements = await _cost(db, lambda: runtime.fail_lane("l", "r"))
    rows.append(("fail_lane (256/batch)", f"{trips} rt / {statements} st", "one batch"))
    renewals: list[tuple[int, int]] = []

    async def renewing(job: JobRecord, signal: LeasedSignal) -> Completed:
        assert signal.heartbeat is not None
        renewals.append(await _cost(db, signal.heartbeat.beat))
        return Completed()

    renewer = D1Runtime(db, execute=renewing, wake=_Wake())
    await renewer.ingest(Job("c3", "q", "l", 0, {}))
    await renewer.tick()
    trips, statements = renewals[0]
    rows.append(("lease renewal", f"{trips} rt / {statements} st", "every 10 s while running"))
    enqueue_batch = [runtime.enqueue(Job(f"b{n}", "q", "l", 0, {"n": n})) for n in range(50)]
    trips, statements = await _cost(db, lambda: db.batch(enqueue_batch))
    rows.append(("enqueue x50 in one db.batch", f"{trips} rt / {statements} st",
                 "producer's own batch"))

    # Throughput: tickwork, one worker.
    await db.prepare("DELETE FROM tickwork_jobs").run()
    for start in range(0, jobs, 50):
        await db.batch([runtime.enqueue(Job(f"j{n}", f"q{n}", "l", 0, {"n": n}))
                        for n in range(start, min(jobs, start + 50))])
    before = db.stats.snapshot()
    started = time.perf_counter()
    settled = 0
    while (await runtime.tick()).status == "settled":
        settled += 1
    elapsed = time.perf_counter() - started
    spent = db.stats.since(before)
    assert settled == jobs, settled
    rows.append(("tickwork ticks, 1 worker", f"{jobs / elapsed:,.0f} jobs/s",
                 f"{spent.round_trips / jobs:.2f} rt/job"))

    # The worker loop: each settlement carries the next claim in one batch.
    for start in range(0, jobs, 50):
        await db.batch([runtime.enqueue(Job(f"d{n}", f"q{n}", "l", 0, {"n": n}))
                        for n in range(start, min(jobs, start + 50))])
    before = db.stats.snapshot()
    started = time.perf_counter()
    drained = await runtime.drain()
    elapsed = time.perf_counter() - started
    spent = db.stats.since(before)
    assert len(drained) == jobs, len(drained)
    rows.append(("tickwork drain(), 1 worker", f"{jobs / elapsed:,.0f} jobs/s",
                 f"{spent.round_trips / jobs:.2f} rt/job"))

    # Baseline: the raw loop on a bare table.
    raw = bridge.binding("external")
    for statement in RAW_SCHEMA:
        await raw.prepare(statement).run()
    for start in range(0, jobs, 50):
        await raw.batch([
            raw.prepare("INSERT INTO raw_jobs (id, payload, state) VALUES (?1, ?2, 'queued')")
            .bind(n, f'{{"n":{n}}}') for n in range(start, min(jobs, start + 50))])
    started = time.perf_counter()
    done = 0
    while True:
        claimed = await raw.prepare(RAW_CLAIM).bind("t", 0).raw()
        if not claimed:
            break
        await raw.prepare(RAW_SETTLE).bind(claimed[0][0], "t").run()
        done += 1
    elapsed = time.perf_counter() - started
    assert done == jobs
    rows.append(("raw claim+settle loop, bare table", f"{jobs / elapsed:,.0f} jobs/s",
                 "2.00 rt/job"))

    # Ingest rates.
    started = time.perf_counter()
    for n in range(jobs):
        await runtime.ingest(Job(f"i{n}", "q", "l", 0, {"n": n}))
    rows.append(("tickwork ingest(), one call per job",
                 f"{jobs / (time.perf_counter() - started):,.0f} jobs/s", "1 rt/job"))
    started = time.perf_counter()
    for start in range(0, jobs, 50):
        await db.batch([runtime.enqueue(Job(f"e{n}", "q", "l", 0, {"n": n}))
                        for n in range(start, min(jobs, start + 50))])
    rows.append(("tickwork enqueue(), batches of 50",
                 f"{jobs / (time.perf_counter() - started):,.0f} jobs/s", "0.02 rt/job"))
    started = time.perf_counter()
    for start in range(0, jobs, 50):
        await raw.batch([
            raw.prepare("INSERT INTO raw_jobs (id, payload, state) VALUES (?1, ?2, 'queued')")
            .bind(jobs + n, f'{{"n":{n}}}') for n in range(start, min(jobs, start + 50))])
    rows.append(("raw INSERT, batches of 50",
                 f"{jobs / (time.perf_counter() - started):,.0f} jobs/s", "0.02 rt/job"))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 jobs")
    parser.add_argument("--jobs", type=int)
    args = parser.parse_args(argv)
    jobs = args.jobs or (300 if args.quick else 2000)
    with D1Bridge.start() as bridge:
        rows = asyncio.run(measure(bridge, jobs))
    width = max(len(row[0]) for row in rows)
    print(f"D1 (Miniflare), {jobs:,} jobs; rt = round trips, st = statements")
    for name, figure, note in rows:
        print(f"{name:<{width}}  {figure:>18}  {note}")


if __name__ == "__main__":
    main()
