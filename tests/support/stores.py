"""Opening a real store of each kind for a test: the fixtures' shared part."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import Harness
from tests.support.shared import SharedHarness, apply_d1_statements, d1_query, pool_query


@contextlib.contextmanager
def owner_local_harness(kind: str, directory: Path) -> Iterator[Harness]:
    """sqlite3, or the Durable Object storage stand-in answering like the
    built-in SDK (``do-builtin``) or the external one (``do-external``)."""
    if kind == "sqlite3":
        built = Harness(kind, directory)
        try:
            yield built
        finally:
            built.close()
        return
    from tests.support.fakes.pyodide_ffi import fake_pyodide

    with fake_pyodide():
        built = Harness(kind, directory)
        try:
            yield built
        finally:
            built.close()


@contextlib.asynccontextmanager
async def shared_harness(kind: str, request: pytest.FixtureRequest) -> AsyncIterator[SharedHarness]:
    """PostgreSQL, or Miniflare's D1 through the external or the built-in SDK,
    with the package's schema applied (the requesting directory's conftest
    provides ``postgres_dsn`` with schema files, and ``d1_bridge``)."""
    if kind == "postgres":
        from tests.support.pg.fixtures import open_pool

        dsn = request.getfixturevalue("postgres_dsn")
        async with open_pool(dsn, max_size=20) as pool:
            from tickwork import PostgresRuntime

            harness = SharedHarness(kind, lambda **kw: PostgresRuntime(pool, **kw),
                                    pool_query(pool))
            try:
                yield harness
            finally:
                release_blocked(harness)
        return
    from tests.support.d1.fixtures import d1_binding

    bridge = request.getfixturevalue("d1_bridge")
    with d1_binding(bridge, kind.removeprefix("d1-"), yield_to_loop=True) as db:
        from tickwork import D1Runtime

        await apply_d1_schema(db)
        harness = SharedHarness(kind, lambda **kw: D1Runtime(db, **kw), d1_query(db))
        try:
            yield harness
        finally:
            release_blocked(harness)


async def apply_d1_schema(db: Any) -> None:
    """Apply every migration of schema/d1 to a fresh database, in one D1 batch."""
    from tickwork.schemas import migrations

    await apply_d1_statements(
        db, [statement for migration in migrations("d1") for statement in migration.statements()])


def release_blocked(harness: Any) -> None:
    """Release any execution a test left blocked, so no task outlives its loop."""
    for signal in harness.executor.signals.values():
        signal._abort("test_over")
