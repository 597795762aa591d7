"""Owner concurrency: I/O-bound jobs on one owner at concurrency 1, 10 and 50,
each beside a plain asyncio loop running the same sleeps under a semaphore
of the same size, in the same run.

    python -m bench.concurrency            # 1,000 jobs of 50 ms (about a minute)
    python -m bench.concurrency --quick    # 200 jobs, for a smoke run

Each measure drains ``--jobs`` jobs whose executor awaits
``asyncio.sleep(0.05)`` (a webhook, an email or an LLM call, as far as the
event loop can tell), spread over 100 queues (a queue runs one job at a
time, so the owner can run up to 100 at once), on one owner's sqlite3 file
in WAL mode with ``synchronous = NORMAL`` (as bench.owner_local's file
figures; one more row at 50 with ``FULL``, every commit synced, for
context), through ``tick_until_idle`` (the loop ``tickwork serve`` and
the Durable Object's alarm run). The baseline runs the same number of the
same sleeps as tasks under an ``asyncio.Semaphore`` of the same size: the
most a single event loop can get out of that limit, with no store at all.
Target: at concurrency 50, at least 80% of the baseline's jobs/s.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.report import Figures, Row, print_rows
from tickwork import Completed, Job, OwnerRuntime
from tickwork.hosts.cpython import open_sqlite3
from tickwork.hosts.ticking import tick_until_idle

SECTION = "owner concurrency"
SLEEP_S = 0.05
QUEUES = 100
LEVELS = (1, 10, 50)
#: At concurrency 50, tickwork's jobs/s against the plain loop's.
TARGET = 0.8


class _NoWake:
    def recompute(self) -> None:
        return None


async def _io_bound(job: Any, signal: Any) -> Completed:
    await asyncio.sleep(SLEEP_S)
    return Completed()


def _jobs(count: int) -> list[Job]:
    return [Job(f"job-{n:05}", f"q{n % QUEUES}", "lane", 0, {"n": n}, None)
            for n in range(count)]


def tickwork_jobs_per_s(directory: Path, jobs: int, concurrency: int,
                        synchronous: str = "NORMAL") -> float:
    """Drain ``jobs`` I/O-bound jobs at ``concurrency``; jobs/s."""
    path = directory / f"c{concurrency}-{synchronous}.sqlite3"
    runtime = OwnerRuntime(open_sqlite3(path, synchronous=synchronous),
                           execute=_io_bound, is_alive=lambda record: False, wake=_NoWake(),
                           concurrency=concurrency)
    batch = _jobs(jobs)
    for start in range(0, jobs, 100):
        runtime.ingest_many(batch[start:start + 100])

    async def run() -> float:
        started = time.perf_counter()
        ended = await tick_until_idle(runtime)
        took = time.perf_counter() - started
        assert ended.stop == "idle", ended
        return took

    took = asyncio.run(run())
    settled = runtime.status()
    assert sum(queue.outcomes["completed"] for queue in settled) == jobs, settled
    return jobs / took


def plain_loop_jobs_per_s(jobs: int, limit: int) -> float:
    """The same sleeps as asyncio tasks under a semaphore of ``limit``; jobs/s."""

    async def run() -> float:
        semaphore = asyncio.Semaphore(limit)

        async def one() -> None:
            async with semaphore:
                await asyncio.sleep(SLEEP_S)

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(jobs)))
        return time.perf_counter() - started

    return jobs / asyncio.run(run())


def collect(*, quick: bool = False, jobs: int | None = None) -> Figures:
    count = jobs if jobs is not None else (200 if quick else 1_000)
    figures = Figures()
    with tempfile.TemporaryDirectory() as scratch:
        for level in LEVELS:
            value = tickwork_jobs_per_s(Path(scratch), count, level)
            baseline = plain_loop_jobs_per_s(count, level)
            figures.rows.append(Row(
                SECTION, f"{count:,} jobs awaiting 50 ms, concurrency {level}", value,
                "jobs/s", f"plain asyncio loop, semaphore of {level}", baseline,
                TARGET if level == 50 else None))
        # Context: the same at 50 with every commit synced (open_sqlite3's
        # default): each settlement is a commit of its own, so the disk's
        # sync rate bounds the jobs/s however many run at once.
        value = tickwork_jobs_per_s(Path(scratch), count, 50, synchronous="FULL")
        figures.rows.append(Row(
            SECTION, f"{count:,} jobs awaiting 50 ms, concurrency 50, synchronous FULL",
            value, "jobs/s", "plain asyncio loop, semaphore of 50",
            plain_loop_jobs_per_s(count, 50)))
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.concurrency")
    parser.add_argument("--quick", action="store_true", help="200 jobs instead of 1,000")
    parser.add_argument("--jobs", type=int, default=None)
    options = parser.parse_args(argv)
    print_rows(collect(quick=options.quick, jobs=options.jobs).rows)


if __name__ == "__main__":
    main()
