"""Crash: a PostgreSQL worker process running several jobs at once
(``drain(concurrency=N)``) killed with SIGKILL; every claim it held is
recovered once its lease expires, by the budget of the job's recovery."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.pg.fixtures import open_pool
from tests.support.pg.with_schema import (  # noqa: F401  (pytest finds fixtures by name)
    postgres_dsn,
    postgres_schema_files,
    postgres_server,
    postgres_templates,
)
from tickwork import Completed, Job, JobRecord, Recovery
from tickwork.runtimes.postgres import PostgresRuntime

ROOT = Path(__file__).resolve().parents[2]

#: The child's leases: short, so the test waits seconds, not minutes.
LEASE_MS = 3_000
WIDTH = 4

# Drains WIDTH loops at once over jobs that never finish; prints each claim.
HANG_WITH_FOUR_IN_FLIGHT = textwrap.dedent(f"""
    import asyncio, sys
    from psycopg_pool import AsyncConnectionPool
    from tickwork import Completed
    from tickwork.runtimes.postgres import PostgresRuntime

    class Wake:
        def recompute(self):
            pass

    async def hang(job, signal):
        print("claimed", job.job_id, flush=True)
        await asyncio.sleep(3600)
        return Completed()

    async def main():
        pool = AsyncConnectionPool(sys.argv[1], min_size=1, max_size=8, open=False)
        await pool.open(wait=True, timeout=30)
        runtime = PostgresRuntime(pool, execute=hang, wake=Wake(), lease_ms={LEASE_MS},
                                  renew_every_ms=1_000)
        await runtime.drain(concurrency={WIDTH})

    asyncio.run(main())
""")


class Wake:
    def recompute(self) -> None:
        pass


@pytest.mark.parametrize(("recoveries", "outcome"), [(1, "completed"), (0, "interrupted")])
async def test_a_worker_killed_with_jobs_in_flight_has_each_claim_recovered_once(
        postgres_dsn: str, recoveries: int, outcome: str) -> None:  # noqa: F811
    names = [f"job-{n}" for n in range(WIDTH + 2)]
    ran: list[str] = []

    async def complete(job: JobRecord, signal: object) -> Completed:
        ran.append(job.job_id)
        return Completed()

    async with open_pool(postgres_dsn, max_size=4) as pool:
        survivor = PostgresRuntime(pool, execute=complete, wake=Wake(), lease_ms=LEASE_MS,
                                   renew_every_ms=1_000)
        for n, name in enumerate(names):
            # Two jobs share q0, so one of them waits behind the other.
            await survivor.ingest(Job(name, f"q{max(0, n - 1)}", "lane", 0, {},
                                      Recovery(recoveries)))
        child = subprocess.Popen(
            [sys.executable, "-c", HANG_WITH_FOUR_IN_FLIGHT, postgres_dsn],
            stdout=subprocess.PIPE, text=True, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert child.stdout is not None
        claimed = sorted(child.stdout.readline().split()[1] for _ in range(WIDTH))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        assert child.returncode == -signal.SIGKILL
        async with pool.connection() as conn:
            running = await (await conn.execute(
                "SELECT job_id FROM tickwork_jobs WHERE state = 'running' ORDER BY job_id"
            )).fetchall()
        assert [row[0] for row in running] == claimed

        # Nothing is recovered while the leases last; then each claim once.
        before = await survivor.drain(max_ticks=WIDTH + 2)
        assert all(result.job_id not in claimed for result in before)
        await _sleep_past_leases()
        after = await survivor.drain()
        async with pool.connection() as conn:
            rows = await (await conn.execute(
                "SELECT job_id, state, outcome, recoveries FROM tickwork_jobs ORDER BY job_id"
            )).fetchall()
    by_job = {row[0]: row[1:] for row in rows}
    for name in names:
        if name in claimed:
            assert by_job[name] == ("settled", outcome, recoveries), name
        else:
            assert by_job[name] == ("settled", "completed", 0), name
    # Recovered claims ran again only when their budget allowed it; every
    # job ran at most once here, and none twice.
    assert len(ran) == len(set(ran))
    expected_runs = set(names) - (set() if recoveries else set(claimed))
    assert set(ran) == expected_runs
    assert {r.job_id for r in before + after if r.status == "settled"} == set(names)


async def _sleep_past_leases() -> None:
    await asyncio.sleep(LEASE_MS / 1000 + 0.5)
