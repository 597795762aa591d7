"""The PostgreSQL baselines run, and every contender settles every job exactly once.

Figures are not asserted: they are read by people (``python -m bench.postgres_baselines``).
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from bench.postgres_baselines import (
    BenchmarkError,
    Contender,
    SkipLockedLoop,
    asyncpg_available,
    baseline_contenders,
    measure,
    print_table,
    run_baselines,
)
from tests.support.pg.server import ExternalPostgres, PostgresServer

ROOT = Path(__file__).resolve().parents[2]


def test_every_baseline_processes_every_job_exactly_once(
    postgres_server: PostgresServer | ExternalPostgres,
) -> None:
    results = run_baselines(postgres_server, worker_counts=(1, 2), jobs=300)
    systems = {result.system for result in results}
    assert len(results) == 2 * len(baseline_contenders())
    assert any(system.startswith("PgQueuer") and "psycopg" in system for system in systems)
    assert any(system.startswith("SKIP LOCKED loop") for system in systems)
    assert any("asyncpg" in system for system in systems) == asyncpg_available()
    for result in results:
        assert (result.jobs, result.executed, result.distinct) == (300, 300, 300), result
        assert result.seconds > 0


def test_the_one_transaction_loop_too(postgres_server: PostgresServer | ExternalPostgres) -> None:
    result = measure(postgres_server, lambda: SkipLockedLoop(one_transaction=True), 2, 200)
    assert (result.executed, result.distinct) == (200, 200)


class _LosesAJob(SkipLockedLoop):
    async def execute(self, number: int) -> None:
        if number != 7:
            await super().execute(number)


class _RunsAJobTwice(SkipLockedLoop):
    async def execute(self, number: int) -> None:
        await super().execute(number)
        if number == 3:
            await super().execute(number)


def test_a_lost_or_repeated_job_fails_the_measurement(
    postgres_server: PostgresServer | ExternalPostgres,
) -> None:
    factories: list[type[Contender]] = [_LosesAJob, _RunsAJobTwice]
    for factory, message in zip(factories, ["19 of 20 jobs executed", "not exactly once: {3: 2}"],
                                strict=True):
        with pytest.raises(BenchmarkError, match=re.escape(message)):
            measure(postgres_server, factory, 1, 20)
    # Each measurement dropped its database, even the failed ones.
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as connection:
        left = connection.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'bench\\_%'").fetchall()
    assert left == []


def test_print_table_puts_systems_in_rows_and_worker_counts_in_columns(
    postgres_server: PostgresServer | ExternalPostgres,
) -> None:
    results = [measure(postgres_server, SkipLockedLoop, workers, 50) for workers in (1, 3)]
    out = io.StringIO()
    print_table(results, file=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "jobs/s, no-op executor, 50 jobs"
    assert lines[1].split()[-4:] == ["1", "worker", "3", "workers"]
    assert lines[2].startswith("SKIP LOCKED loop, 1 job/txn")


def test_command_line_runs_and_prints_the_table() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.postgres_baselines", "--jobs", "200", "--workers", "2"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fsync=on synchronous_commit=on" in result.stdout
    assert "jobs/s, no-op executor, 200 jobs" in result.stdout
    for label in ("PgQueuer", "/ psycopg (batch 10)", "SKIP LOCKED loop, 1 job/txn"):
        assert label in result.stdout, label
