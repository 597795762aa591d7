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
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench.report import Figures, Row, print_rows
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


SECTION = "D1"
RAW_INSERT = "INSERT INTO raw_jobs (id, payload, state) VALUES (?1, ?2, 'queued')"


def _trips(measure: str, trips: int, statements: int, note: str) -> Row:
    """A per-operation cost: context for the throughput rows, no baseline."""
    plural = "" if statements == 1 else "s"
    return Row(SECTION, f"{measure} ({statements} statement{plural})", trips, "round trips", note)


async def measure(bridge: D1Bridge, jobs: int) -> Figures:
    rows: list[Row] = []
    db = bridge.binding("external")
    await apply_d1_schema(db)
    runtime = D1Runtime(db, execute=_complete, wake=_Wake())
    await runtime.has_pending_work()  # the one-time schema check
    trips, statements = await _cost(db, runtime.tick)
    rows.append(_trips("a runtime's first (idle) tick", trips, statements,
                       "also reads when the next schedule slot comes"))

    # Costs per operation.
    trips, statements = await _cost(db, lambda: runtime.ingest(Job("c1", "q", "l", 0, {})))
    rows.append(_trips("ingest (new job)", trips, statements, ""))
    trips, statements = await _cost(db, lambda: runtime.ingest(Job("c1", "q", "l", 0, {})))
    rows.append(_trips("ingest (replay)", trips, statements, "insert, then compare"))
    trips, statements = await _cost(db, runtime.tick)
    rows.append(_trips("tick (claim + settle)", trips, statements, ""))
    trips, statements = await _cost(db, runtime.tick)
    rows.append(_trips("idle tick", trips, statements, "guarded claim + probe, one batch"))
    await runtime.ingest(Job("c2", "q", "l", 0, {}))
    trips, statements = await _cost(db, lambda: runtime.cancel("c2", "x"))
    rows.append(_trips("cancel (queued job)", trips, statements, "read + fenced write"))
    trips, statements = await _cost(db, lambda: runtime.fail_lane("l", "r"))
    rows.append(_trips("fail_lane (256/batch)", trips, statements, "one batch"))
    renewals: list[tuple[int, int]] = []

    async def renewing(job: JobRecord, signal: LeasedSignal) -> Completed:
        assert signal.heartbeat is not None
        renewals.append(await _cost(db, signal.heartbeat.beat))
        return Completed()

    renewer = D1Runtime(db, execute=renewing, wake=_Wake())
    await renewer.ingest(Job("c3", "q", "l", 0, {}))
    await renewer.tick()
    trips, statements = renewals[0]
    rows.append(_trips("lease renewal", trips, statements, "every 10 s while running"))
    enqueue_batch = [runtime.enqueue(Job(f"b{n}", "q", "l", 0, {"n": n})) for n in range(50)]
    trips, statements = await _cost(db, lambda: db.batch(enqueue_batch))
    rows.append(_trips("enqueue x50 in one db.batch", trips, statements,
                       "producer's own batch"))

    # Baseline: the raw loop on a bare table, loaded the same way.
    raw = bridge.binding("external")
    for statement in RAW_SCHEMA:
        await raw.prepare(statement).run()

    async def raw_load(first: int) -> None:
        for start in range(0, jobs, 50):
            await raw.batch([raw.prepare(RAW_INSERT).bind(first + n, f'{{"n":{n}}}')
                             for n in range(start, min(jobs, start + 50))])

    async def raw_loop() -> tuple[float, float, float]:
        """jobs/s, round trips and statements per job of one claim UPDATE + one
        settle UPDATE per job."""
        before = raw.stats.snapshot()
        started = time.perf_counter()
        done = 0
        while True:
            claimed = await raw.prepare(RAW_CLAIM).bind("t", 0).raw()
            if not claimed:
                break
            await raw.prepare(RAW_SETTLE).bind(claimed[0][0], "t").run()
            done += 1
        elapsed = time.perf_counter() - started
        assert done == jobs, done
        spent = raw.stats.since(before)
        return jobs / elapsed, spent.round_trips / jobs, spent.statements / jobs

    async def load(tag: str) -> None:
        for start in range(0, jobs, 50):
            await db.batch([runtime.enqueue(Job(f"{tag}{n}", f"q{n}", "l", 0, {"n": n}))
                            for n in range(start, min(jobs, start + 50))])

    # Throughput, one worker: ticks, then drain() (each settlement carries the
    # next claim in one batch), each beside a raw loop measured right before it.
    await db.prepare("DELETE FROM tickwork_jobs").run()
    for measure, tag in (("ticks, 1 worker", "j"), ("drain(), 1 worker", "d")):
        await raw_load(0)
        raw_rate, raw_trips, raw_statements = await raw_loop()
        await raw.prepare("DELETE FROM raw_jobs").run()
        await load(tag)
        before = db.stats.snapshot()
        started = time.perf_counter()
        if tag == "j":
            settled = 0
            while (await runtime.tick()).status == "settled":
                settled += 1
        else:
            settled = len(await runtime.drain())
        elapsed = time.perf_counter() - started
        assert settled == jobs, settled
        spent = db.stats.since(before)
        rows.append(Row(SECTION, measure, jobs / elapsed, "jobs/s",
                        "raw claim+settle loop, bare table", raw_rate))
        rows.append(Row(SECTION, f"{measure}: round trips per job", spent.round_trips / jobs,
                        "round trips/job", "the raw loop", raw_trips, lower_is_better=True))
        # D1 counts queries per Worker invocation (1,000; 50 on the free plan).
        rows.append(Row(SECTION, f"{measure}: statements per job", spent.statements / jobs,
                        "statements/job", "the raw loop", raw_statements, lower_is_better=True))

    # Ingest rates, each beside its raw INSERT measured right after it.
    started = time.perf_counter()
    for n in range(jobs):
        await runtime.ingest(Job(f"i{n}", "q", "l", 0, {"n": n}))
    ingest_rate = jobs / (time.perf_counter() - started)
    started = time.perf_counter()
    for n in range(jobs):
        await raw.prepare(RAW_INSERT).bind(jobs + n, f'{{"n":{n}}}').run()
    rows.append(Row(SECTION, "ingest(), one call per job", ingest_rate, "jobs/s",
                    "raw INSERT, one per round trip", jobs / (time.perf_counter() - started)))
    started = time.perf_counter()
    for start in range(0, jobs, 50):
        await db.batch([runtime.enqueue(Job(f"e{n}", "q", "l", 0, {"n": n}))
                        for n in range(start, min(jobs, start + 50))])
    enqueue_rate = jobs / (time.perf_counter() - started)
    started = time.perf_counter()
    await raw_load(2 * jobs)
    rows.append(Row(SECTION, "enqueue(), batches of 50", enqueue_rate, "jobs/s",
                    "raw INSERT, batches of 50", jobs / (time.perf_counter() - started)))
    rows.extend(await measure_io_bound(db, max(40, jobs // 20)))
    return Figures(rows=rows)


#: What an I/O-bound executor waits for (a webhook's answer, say).
IO_WAIT_S = 0.05


async def measure_io_bound(db: Any, jobs: int) -> list[Row]:
    """The cron's drain of ``jobs`` jobs whose executor awaits IO_WAIT_S,
    over 8 queues, at concurrency 1 and 4 (the cron's default), each beside
    a plain asyncio loop running the same waits under a semaphore of the
    same size: the most any drain of that width could do."""
    rows: list[Row] = []

    async def waits(job: JobRecord, signal: LeasedSignal) -> Completed:
        await asyncio.sleep(IO_WAIT_S)
        return Completed()

    async def plain_loop(width: int) -> float:
        gate = asyncio.Semaphore(width)

        async def one() -> None:
            async with gate:
                await asyncio.sleep(IO_WAIT_S)

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(jobs)))
        return jobs / (time.perf_counter() - started)

    runtime = D1Runtime(db, execute=waits, wake=_Wake())
    for width in (1, 4):
        await db.prepare("DELETE FROM tickwork_jobs").run()
        await db.batch([runtime.enqueue(Job(f"w{width}-{n}", f"q{n % 8}", "l", 0, {}))
                        for n in range(jobs)])
        started = time.perf_counter()
        settled = len(await runtime.drain(concurrency=width))
        rate = jobs / (time.perf_counter() - started)
        assert settled == jobs, settled
        rows.append(Row(SECTION, f"I/O-bound drain (jobs wait {IO_WAIT_S * 1000:.0f} ms), "
                        f"concurrency {width}", rate, "jobs/s",
                        f"plain asyncio loop, semaphore of {width}", await plain_loop(width)))
    return rows


def collect(*, quick: bool) -> Figures:
    """One run for the comparison command: 2,000 jobs (quick 300)."""
    with D1Bridge.start() as bridge:
        return asyncio.run(measure(bridge, 300 if quick else 2000))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="300 jobs")
    parser.add_argument("--jobs", type=int)
    args = parser.parse_args(argv)
    jobs = args.jobs or (300 if args.quick else 2000)
    with D1Bridge.start() as bridge:
        found = asyncio.run(measure(bridge, jobs))
    print(f"D1 (Miniflare), {jobs:,} jobs; load average {os.getloadavg()[0]:.2f}")
    print_rows(found.rows)


if __name__ == "__main__":
    main()
