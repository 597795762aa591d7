"""The PostgreSQL fixtures give a real, durable, non-root server and a fresh
database per test."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import psycopg
import pytest

from tests.support.pg.fixtures import Pool, open_pool
from tests.support.pg.server import ExternalPostgres, PostgresNotFound, PostgresServer, find_bindir

LOCAL_ONLY = pytest.mark.skipif(bool(os.environ.get("TICKWORK_PG_DSN")),
                                reason="checks the locally started server")


async def test_psycopg_async_connection_reaches_a_real_server(postgres_dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as connection:
        cursor = await connection.execute("SELECT current_database(), version()")
        row = await cursor.fetchone()
    assert row is not None
    database, version = row
    assert database.startswith("tickwork_test_")
    assert version.startswith("PostgreSQL ")


async def test_commits_are_durable_fsync_is_on(postgres_dsn: str) -> None:
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as connection:
        settings = {}
        for name in ("fsync", "synchronous_commit", "full_page_writes", "wal_level"):
            cursor = await connection.execute("SELECT current_setting(%s)", (name,))
            row = await cursor.fetchone()
            assert row is not None
            settings[name] = row[0]
    assert settings["fsync"] == "on"
    assert settings["synchronous_commit"] == "on"
    assert settings["full_page_writes"] == "on"


@LOCAL_ONLY
async def test_server_runs_as_a_non_root_user(
    postgres_server: PostgresServer | ExternalPostgres, postgres_dsn: str
) -> None:
    assert isinstance(postgres_server, PostgresServer)
    async with await psycopg.AsyncConnection.connect(postgres_dsn) as connection:
        cursor = await connection.execute("SELECT pg_backend_pid()")
        row = await cursor.fetchone()
        assert row is not None
        # The backend serving this very connection (looked at while the
        # connection is open: the backend exits with it), and the postmaster.
        for pid in (row[0], postgres_server.pid):
            assert os.stat(f"/proc/{pid}").st_uid != 0, pid
    assert postgres_server.os_user != "root"
    assert postgres_server.host == "127.0.0.1"


async def test_skip_locked_between_two_connections(postgres_pool: Pool) -> None:
    async with postgres_pool.connection() as setup:
        await setup.execute("CREATE TABLE jobs (id int PRIMARY KEY, state text NOT NULL)")
        await setup.execute(
            "INSERT INTO jobs SELECT g, 'queued' FROM generate_series(1, 3) g")
    claim = ("SELECT id FROM jobs WHERE state = 'queued' ORDER BY id"
             " LIMIT 1 FOR UPDATE SKIP LOCKED")
    async with postgres_pool.connection() as first, postgres_pool.connection() as second:
        async with first.transaction():
            one = await (await first.execute(claim)).fetchone()
            async with second.transaction():
                two = await (await second.execute(claim)).fetchone()
                # Without SKIP LOCKED the second connection would have to wait.
                with pytest.raises(psycopg.errors.LockNotAvailable):
                    async with second.transaction():
                        await second.execute(
                            "SELECT id FROM jobs WHERE id = 1 FOR UPDATE NOWAIT")
        assert one == (1,)
        assert two == (2,)
        # Both locks released: the head is claimable again.
        assert await (await second.execute(claim)).fetchone() == (1,)


SEEN_DATABASES: list[str] = []


@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_each_test_gets_its_own_empty_database(postgres_dsn: str, attempt: int) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as connection:
        row = connection.execute(
            "SELECT current_database(), to_regclass('public.marker') IS NULL").fetchone()
        assert row is not None
        database, fresh = row
        # Any earlier test left its own marker behind in its own database.
        assert fresh, f"{database} already has a marker table"
        connection.execute("CREATE TABLE marker (attempt int)")
        connection.execute("INSERT INTO marker VALUES (%s)", (attempt,))
    assert database not in SEEN_DATABASES
    SEEN_DATABASES.append(database)


def test_databases_of_earlier_tests_are_dropped(
    postgres_server: PostgresServer | ExternalPostgres, postgres_dsn: str
) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as connection:
        (mine,) = connection.execute("SELECT current_database()").fetchone() or ("",)
        rows = connection.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'tickwork\\_test\\_%'"
        ).fetchall()
    assert rows == [(mine,)]


async def test_pool_fixture_is_open_and_usable_concurrently(postgres_pool: Pool) -> None:
    import asyncio

    async def backend_pid() -> int:
        async with postgres_pool.connection() as connection:
            cursor = await connection.execute("SELECT pg_backend_pid(), pg_sleep(0.05)")
            row = await cursor.fetchone()
            assert row is not None
            return int(row[0])

    pids = await asyncio.gather(*(backend_pid() for _ in range(4)))
    assert len(set(pids)) == 4  # four connections at once


async def test_open_pool_takes_connection_options(postgres_dsn: str) -> None:
    autocommit_pool = open_pool(postgres_dsn, max_size=2, kwargs={"autocommit": True})
    async with autocommit_pool as pool, pool.connection() as connection:
        assert connection.autocommit


class TestSchemaFilesBuildTheTemplate:
    """Overriding ``postgres_schema_files`` builds every test database from them."""

    @pytest.fixture
    def postgres_schema_files(self, tmp_path: Path) -> Sequence[Path]:
        (tmp_path / "0001_init.sql").write_text(
            "CREATE TABLE widgets (id bigserial PRIMARY KEY, name text NOT NULL);\n"
            "CREATE FUNCTION widget_count() RETURNS bigint LANGUAGE sql"
            " AS $$ SELECT count(*) FROM widgets WHERE name LIKE '%' $$;\n")
        (tmp_path / "0002_seed.sql").write_text(
            "INSERT INTO widgets (name) VALUES ('first');\n"
            "DO $$ BEGIN RAISE NOTICE 'seeded'; END $$;\n")
        return sorted(tmp_path.glob("*.sql"))

    @pytest.mark.parametrize("attempt", [1, 2])
    def test_database_has_the_schema(self, postgres_dsn: str, attempt: int) -> None:
        with psycopg.connect(postgres_dsn, autocommit=True) as connection:
            assert connection.execute("SELECT widget_count()").fetchone() == (1,)
            connection.execute("INSERT INTO widgets (name) VALUES ('mine')")
            assert connection.execute("SELECT widget_count()").fetchone() == (2,)


def test_missing_binaries_fail_loudly(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import glob

    monkeypatch.setenv("TICKWORK_PG_BINDIR", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(glob, "glob", lambda pattern: [])
    with pytest.raises(PostgresNotFound, match=r"apt-get install -y postgresql"):
        find_bindir()
