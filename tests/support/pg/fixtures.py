"""pytest fixtures for a real PostgreSQL server; import them into any conftest.py.

    # tests/<dir>/conftest.py
    from pathlib import Path

    import pytest

    from tests.support.pg.fixtures import (  # noqa: F401  (pytest finds fixtures by name)
        postgres_dsn,
        postgres_pool,
        postgres_server,
        postgres_templates,
    )
    from tests.support.pg.fixtures import POSTGRES_SCHEMA_DIR, schema_files

    @pytest.fixture
    def postgres_schema_files() -> list[Path]:
        return schema_files(POSTGRES_SCHEMA_DIR)  # schema/postgres/*.sql, in name order

(or import ``postgres_schema_files`` too, for empty databases). Tests then ask
for ``postgres_dsn: str`` or ``postgres_pool: Pool``.

Fixtures:

``postgres_server`` (session)
    The running server (``tests.support.pg.server.PostgresServer``; an
    ``ExternalPostgres`` when ``TICKWORK_PG_DSN`` is set). Started once per
    test process (about 0.7 s, initdb included) however many conftests import
    it, stopped and deleted at the end of the session.
``postgres_schema_files`` (function, default ``[]``)
    The SQL files the per-test database is built from. Override it (a fixture
    of the same name in a conftest, module or class) to apply the package
    schema, e.g. ``return schema_files(POSTGRES_SCHEMA_DIR)``. It is function
    scoped on purpose: a session fixture that depends on an overridden fixture
    would be computed once for the first override and reused for all.
``postgres_templates`` (session)
    ``TemplateRegistry``: one template database per distinct list of file
    contents, built the first time it is asked for, then copied per test.
``postgres_dsn`` (function)
    The DSN of a fresh database, created for this test from the template for
    ``postgres_schema_files`` (``template1`` when there are none) and dropped
    after it, along with any connection the test left open. Costs about 50 ms
    (``CREATE DATABASE`` about 45 ms with PostgreSQL 15's WAL_LOG copy of a
    7.5 MB template, ``DROP DATABASE`` about 7 ms) with fsync on.
``postgres_pool`` (async, function)
    A ``psycopg_pool.AsyncConnectionPool`` over ``postgres_dsn`` (min 1, max 16
    connections, psycopg defaults otherwise: not autocommit), opened on the
    test's own event loop and closed before that loop ends. For other sizes or
    connection options use ``async with open_pool(postgres_dsn, ...)``.

Missing server binaries fail the requesting tests with an error that says to
``apt-get install -y postgresql``; they are never skipped.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from tests.support.pg.server import (
    ExternalPostgres,
    PostgresServer,
    TemplateRegistry,
    schema_files,
    start_postgres,
    unique_database_name,
)

ROOT = Path(__file__).resolve().parents[3]
POSTGRES_SCHEMA_DIR = ROOT / "schema" / "postgres"

__all__ = [
    "POSTGRES_SCHEMA_DIR",
    "Pool",
    "open_pool",
    "postgres_dsn",
    "postgres_pool",
    "postgres_schema_files",
    "postgres_server",
    "postgres_templates",
    "schema_files",
]

Pool = AsyncConnectionPool[AsyncConnection[TupleRow]]


class _Shared:
    """One server per test process, however many conftests import the fixtures.

    Each conftest that imports a session fixture gets its own fixture definition,
    so pytest would set it up once per conftest; the fixtures share this object
    instead, counting users and stopping the server when the last one lets go
    (at the end of the session)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0
        self.server: PostgresServer | ExternalPostgres | None = None
        self.templates: TemplateRegistry | None = None

    def acquire(self) -> tuple[PostgresServer | ExternalPostgres, TemplateRegistry]:
        with self.lock:
            if self.server is None:
                self.server = start_postgres()
                self.templates = TemplateRegistry(self.server)
            assert self.templates is not None
            self.users += 1
            return self.server, self.templates

    def release(self) -> None:
        with self.lock:
            self.users -= 1
            if self.users > 0 or self.server is None:
                return
            server, templates = self.server, self.templates
            self.server = self.templates = None
        if templates is not None:
            templates.close()
        server.stop()


_shared = _Shared()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer | ExternalPostgres]:
    server, _ = _shared.acquire()
    try:
        yield server
    finally:
        _shared.release()


@pytest.fixture(scope="session")
def postgres_templates(
    postgres_server: PostgresServer | ExternalPostgres,
) -> Iterator[TemplateRegistry]:
    _, templates = _shared.acquire()
    try:
        yield templates
    finally:
        _shared.release()


@pytest.fixture
def postgres_schema_files() -> Sequence[Path]:
    """Override to build the per-test database from SQL files (applied in order)."""
    return []


@pytest.fixture
def postgres_dsn(
    postgres_server: PostgresServer | ExternalPostgres,
    postgres_templates: TemplateRegistry,
    postgres_schema_files: Sequence[Path],
) -> Iterator[str]:
    template = postgres_templates.template_for(postgres_schema_files)
    name = unique_database_name("tickwork_test")
    dsn = postgres_server.create_database(name, template)
    try:
        yield dsn
    finally:
        postgres_server.drop_database(name)


@contextlib.asynccontextmanager
async def open_pool(dsn: str, *, min_size: int = 1, max_size: int = 16,
                    **options: Any) -> AsyncIterator[Pool]:
    """An opened ``AsyncConnectionPool`` (``options`` go to its constructor, e.g.
    ``kwargs={"autocommit": True}``), closed on exit. Open it on the event loop
    that will use it."""
    pool: Pool = AsyncConnectionPool(dsn, min_size=min_size, max_size=max_size, open=False,
                                     **options)
    await pool.open(wait=True, timeout=30)
    try:
        yield pool
    finally:
        await pool.close()


@pytest_asyncio.fixture(loop_scope="function")
async def postgres_pool(postgres_dsn: str) -> AsyncIterator[Pool]:
    async with open_pool(postgres_dsn) as pool:
        yield pool
