"""``tickwork migrate postgres`` against a real PostgreSQL, run as the user runs it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from tests.postgres_cli.conftest import MakeDatabase, without_module
from tests.support.pg.fixtures import POSTGRES_SCHEMA_DIR, open_pool, schema_files
from tickwork import PostgresRuntime
from tickwork.hosts.cpython.migrate_cli import MIGRATE_LOCK_KEY
from tickwork.stores.schema_version import POSTGRES_MIGRATIONS, POSTGRES_SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[2]
LATEST = POSTGRES_SCHEMA_VERSION


def environment(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **extra}
    if "DATABASE_URL" not in extra:
        env.pop("DATABASE_URL", None)
    return env


def migrate(*args: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tickwork", "migrate", "postgres", *args],
                          cwd=ROOT, env=env or environment(), capture_output=True, text=True,
                          timeout=120)


def start_migrate(dsn: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "tickwork", "migrate", "postgres",
                             "--dsn", dsn], cwd=ROOT, env=environment(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stored_version(dsn: str) -> int | None:
    """schema_version in tickwork_meta; None when the table does not exist."""
    with psycopg.connect(dsn, autocommit=True) as connection:
        row = connection.execute("SELECT to_regclass('tickwork_meta') IS NOT NULL").fetchone()
        assert row is not None
        if not row[0]:
            return None
        value = connection.execute(
            "SELECT value FROM tickwork_meta WHERE key = 'schema_version'").fetchone()
        return None if value is None else int(value[0])


def applied(stdout: str) -> list[str]:
    return [line.removeprefix("applied ") for line in stdout.splitlines()
            if line.startswith("applied ")]


async def runtime_version(dsn: str) -> int:
    """What a PostgresRuntime over the database says: its check passes only at LATEST."""

    async def never(job: object, signal: object) -> object:
        raise AssertionError("nothing runs here")

    class Wake:
        def recompute(self) -> None:
            pass

    async with open_pool(dsn, max_size=2) as pool:
        return await PostgresRuntime(pool, execute=never, wake=Wake()).check_ready()


def test_an_empty_database_reaches_the_latest_version(make_database: MakeDatabase) -> None:
    dsn = make_database(0)
    result = migrate("--dsn", dsn)
    assert result.returncode == 0, result.stderr
    assert applied(result.stdout) == list(POSTGRES_MIGRATIONS)
    assert result.stdout.splitlines()[-1] == (
        f"PostgreSQL schema at version {LATEST}, this package's latest "
        f"({len(POSTGRES_MIGRATIONS)} migrations applied)")
    assert result.stderr == ""
    assert stored_version(dsn) == LATEST
    assert asyncio.run(runtime_version(dsn)) == LATEST


def test_a_second_run_applies_nothing_and_says_so(make_database: MakeDatabase) -> None:
    dsn = make_database(0)
    assert migrate("--dsn", dsn).returncode == 0
    # The second run finds the DSN in $DATABASE_URL, as the help says.
    again = migrate(env=environment(DATABASE_URL=dsn))
    assert again.returncode == 0, again.stderr
    assert again.stdout == (f"PostgreSQL schema at version {LATEST}, this package's latest "
                            "(up to date: nothing to apply)\n")
    assert stored_version(dsn) == LATEST


def test_a_database_migrated_by_hand_gets_only_the_rest(make_database: MakeDatabase) -> None:
    dsn = make_database(5)  # psql -f 0001 ... 0005, as a user would have
    assert stored_version(dsn) == 5
    result = migrate("--dsn", dsn)
    assert result.returncode == 0, result.stderr
    assert applied(result.stdout) == list(POSTGRES_MIGRATIONS[5:])
    assert f"({len(POSTGRES_MIGRATIONS) - 5} migrations applied)" in result.stdout
    assert asyncio.run(runtime_version(dsn)) == LATEST
    # Up to date by hand: nothing at all.
    complete = make_database(None)
    result = migrate("--dsn", complete)
    assert (result.returncode, applied(result.stdout)) == (0, [])
    assert "nothing to apply" in result.stdout


def test_two_concurrent_migrates_apply_the_schema_once(make_database: MakeDatabase) -> None:
    dsn = make_database(0)
    # Hold the migrate lock until both processes wait for it, so they truly
    # overlap; then let them race.
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT pg_advisory_xact_lock(%s)", [MIGRATE_LOCK_KEY])
        processes = [start_migrate(dsn), start_migrate(dsn)]
        deadline = time.monotonic() + 60
        with psycopg.connect(dsn, autocommit=True) as watcher:
            while True:
                row = watcher.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT "
                    "granted AND database = (SELECT oid FROM pg_database WHERE datname = "
                    "current_database())").fetchone()
                assert row is not None
                if row[0] == 2:
                    break
                assert time.monotonic() < deadline, "the migrates never waited for the lock"
                assert all(process.poll() is None for process in processes)
                time.sleep(0.02)
        holder.rollback()
    outputs = [process.communicate(timeout=120) for process in processes]
    assert [process.returncode for process in processes] == [0, 0], outputs
    counts = sorted(len(applied(stdout)) for stdout, _ in outputs)
    assert counts == [0, len(POSTGRES_MIGRATIONS)], outputs
    for stdout, stderr in outputs:
        assert stdout.splitlines()[-1].startswith(f"PostgreSQL schema at version {LATEST},")
        assert stderr == ("tickwork migrate: another tickwork migrate is running on this "
                          "database; waiting for it to finish\n")
    assert stored_version(dsn) == LATEST


def test_a_failing_migration_applies_nothing(make_database: MakeDatabase) -> None:
    dsn = make_database(0)
    with psycopg.connect(dsn, autocommit=True) as connection:
        # A table of the user's in the way of 0007_schedules.sql.
        connection.execute("CREATE TABLE tickwork_schedules (name text)")
    result = migrate("--dsn", dsn)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("tickwork migrate: 0007_schedules.sql failed: ")
    assert "already exists" in lines[0] and "nothing was applied" in lines[0]
    assert result.stdout == ""
    # One transaction: 0001-0006 went back with 0007.
    assert stored_version(dsn) is None


def test_a_newer_schema_is_refused(make_database: MakeDatabase) -> None:
    dsn = make_database(None)
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("UPDATE tickwork_meta SET value = %s WHERE key = 'schema_version'",
                           [str(LATEST + 1)])
    for extra in ((), ("--sql",)):
        result = migrate("--dsn", dsn, *extra)
        assert result.returncode == 1
        assert result.stdout == ""
        assert result.stderr == (
            f"tickwork migrate: the database has tickwork schema version {LATEST + 1}, newer "
            f"than this package knows (up to {LATEST}): upgrade tickwork; nothing was "
            "changed\n")
    assert stored_version(dsn) == LATEST + 1


def headers(sql: str) -> list[str]:
    return [line.removeprefix("-- tickwork migration ") for line in sql.splitlines()
            if line.startswith("-- tickwork migration ")]


def test_sql_prints_every_migration_without_a_database() -> None:
    result = migrate("--sql")
    assert result.returncode == 0, result.stderr
    assert headers(result.stdout) == list(POSTGRES_MIGRATIONS)
    for path in schema_files(POSTGRES_SCHEMA_DIR):
        assert path.read_text().rstrip() in result.stdout


def test_sql_prints_the_pending_migrations_for_your_own_tool(
        make_database: MakeDatabase) -> None:
    dsn = make_database(5)
    result = migrate("--sql", env=environment(DATABASE_URL=dsn))
    assert result.returncode == 0, result.stderr
    assert headers(result.stdout) == list(POSTGRES_MIGRATIONS[5:])
    assert "0005_paused_queues.sql" not in result.stdout
    assert stored_version(dsn) == 5  # printed, not applied
    # What it printed is what a migration tool runs: afterwards the database is current.
    with psycopg.connect(dsn) as connection:
        connection.execute(result.stdout)  # type: ignore[arg-type]  (a whole script)
    assert stored_version(dsn) == LATEST
    assert migrate("--sql", "--dsn", dsn).stdout == ""
    assert "nothing to apply" in migrate("--dsn", dsn).stdout


@pytest.mark.parametrize(("args", "env", "expected"), [
    (["--dsn", "this is not a dsn"], {}, "tickwork migrate: invalid DSN: "),
    (["--dsn", "postgresql://user:hunter2@127.0.0.1:1/db?connect_timeout=2"], {},
     "tickwork migrate: cannot connect to PostgreSQL (postgresql://user@127.0.0.1:1/"
     "db?connect_timeout=2): "),
    ([], {}, "tickwork migrate: no database: pass --dsn DSN or set $DATABASE_URL"),
], ids=["bad-dsn", "unreachable", "no-dsn"])
def test_bad_input_is_one_clear_line(args: list[str], env: dict[str, str],
                                     expected: str) -> None:
    result = migrate(*args, env=environment(**env))
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), result.stderr
    assert "hunter2" not in result.stderr


def test_missing_psycopg_names_the_extra(tmp_path: Path) -> None:
    shadow = without_module(tmp_path, "psycopg")
    result = migrate("--dsn", "postgresql://nowhere/db",
                     env=environment(PYTHONPATH=f"{shadow}:{ROOT}"))
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "tickwork migrate: needs psycopg 3: pip install 'tickwork[postgres]' "
        "(No module named 'psycopg')"]
