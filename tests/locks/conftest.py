"""Fixtures for the job lock suite: every test runs on sqlite3, PostgreSQL and D1.

``locks`` is a :class:`LockHarness` over one real database:

* ``sqlite3``: a file in ``tmp_path``; every ``harness.lock()`` opens its own
  connection to it (one connection per "instance"), and the lock creates its
  own tables;
* ``postgres``: a fresh database built from every file of schema/postgres
  (so 0002_job_locks.sql included), one pool of up to 24 connections;
* ``d1-external`` / ``d1-builtin``: a fresh Miniflare D1 database in either
  Workers SDK shape, with schema/d1 applied statement by statement.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.support.d1.fixtures import d1_binding, d1_bridge  # noqa: F401
from tests.support.pg.fixtures import (  # noqa: F401  (pytest finds fixtures by name)
    POSTGRES_SCHEMA_DIR,
    open_pool,
    postgres_dsn,
    postgres_server,
    postgres_templates,
    schema_files,
)
from tests.support.shared import ManualNow, d1_query, pool_query
from tickwork.locks import JobLock

LOCK_KINDS = ("sqlite3", "postgres", "d1-external", "d1-builtin")

class Notes:
    """Collects on_info / on_error messages."""

    def __init__(self) -> None:
        self.info: list[str] = []
        self.errors: list[str] = []


Query = Callable[[str], Awaitable[list[tuple[Any, ...]]]]


class LockHarness:
    """One database; ``lock()`` opens another instance's JobLock on it."""

    def __init__(self, kind: str, new_store: Callable[[], Any], query: Query,
                 sqlite_path: Path | None = None) -> None:
        self.kind = kind
        self._new_store = new_store
        self.query = query  # raw SQL against the database, for assertions and sabotage
        self.now = ManualNow()
        self.notes = Notes()
        self.sqlite_path = sqlite_path

    def store(self) -> Any:
        """A new handle on the database (a new connection for sqlite3)."""
        return self._new_store()

    def lock(self, *, db_time: bool = False, store: Any = None, **options: Any) -> JobLock:
        """A JobLock on a fresh handle. Unless ``db_time``, the database clock is
        overridden by ``self.now`` (still applied in SQL)."""
        options.setdefault("on_info", self.notes.info.append)
        options.setdefault("on_error", self.notes.errors.append)
        if not db_time:
            options.setdefault("now", self.now)
        return JobLock(self.store() if store is None else store, **options)

    async def lock_row(self, name: str, table: str = "tickwork_job_locks"
                       ) -> tuple[str | None, int] | None:
        """(owner token, fence) of the lock row, or None when there is none."""
        rows = await self.query(f"SELECT owner, fence FROM {table} WHERE name = '{name}'")
        return None if not rows else (rows[0][0], int(rows[0][1]))

    async def table_exists(self, table: str) -> bool:
        if self.kind == "postgres":
            rows = await self.query(f"SELECT to_regclass('{table}') IS NOT NULL")
            return bool(rows[0][0])
        rows = await self.query(
            f"SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '{table}'")
        return bool(rows[0][0])


@pytest.fixture
def postgres_schema_files() -> Sequence[Path]:
    return schema_files(POSTGRES_SCHEMA_DIR)


@pytest_asyncio.fixture(params=LOCK_KINDS)
async def locks(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[LockHarness]:
    kind: str = request.param
    if kind == "sqlite3":
        with SqliteFile(tmp_path / "locks.sqlite3") as harness:
            yield harness
        return
    if kind == "postgres":
        dsn = request.getfixturevalue("postgres_dsn")
        async with open_pool(dsn, max_size=24) as pool:

            yield LockHarness(kind, lambda: pool, pool_query(pool))
        return
    bridge = request.getfixturevalue("d1_bridge")
    shape = kind.removeprefix("d1-")
    with d1_binding(bridge, shape, yield_to_loop=True) as db:
        await apply_d1_schema(db)
        yield LockHarness(kind, lambda: db, d1_query(db))


class SqliteFile:
    """One sqlite3 file; every handle is a new connection, all closed at the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.connections: list[sqlite3.Connection] = []

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        self.connections.append(conn)
        return conn

    def __enter__(self) -> LockHarness:
        observer = self._connect()

        async def query(statement: str) -> list[tuple[Any, ...]]:
            return observer.execute(statement).fetchall()

        return LockHarness("sqlite3", self._connect, query, sqlite_path=self.path)

    def __exit__(self, *exc_info: object) -> None:
        for conn in self.connections:
            conn.close()


async def apply_d1_schema(db: Any) -> None:
    """Apply schema/d1 statement by statement, as a migration tool would."""
    from tickwork.schemas import migrations

    for migration in migrations("d1"):
        for statement in migration.statements():
            await db.prepare(statement).run()
