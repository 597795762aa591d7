"""Fixtures for the shared-runtime suite: every test runs on every shared store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.d1.fixtures import d1_binding, d1_bridge  # noqa: F401
from tests.pg.fixtures import (  # noqa: F401  (pytest finds fixtures by name)
    POSTGRES_SCHEMA_DIR,
    open_pool,
    postgres_dsn,
    postgres_server,
    postgres_templates,
    schema_files,
)
from tests.shared.support import STORE_KINDS, SharedHarness, d1_query, pool_query


@pytest.fixture
def postgres_schema_files() -> Sequence[Path]:
    return schema_files(POSTGRES_SCHEMA_DIR)


@pytest_asyncio.fixture(params=STORE_KINDS)
async def shared(request: pytest.FixtureRequest) -> AsyncIterator[SharedHarness]:
    kind: str = request.param
    if kind == "postgres":
        dsn = request.getfixturevalue("postgres_dsn")
        async with open_pool(dsn, max_size=20) as pool:
            from tickwork.runtimes.postgres import PostgresRuntime

            harness = SharedHarness(kind, lambda **kw: PostgresRuntime(pool, **kw),
                                    pool_query(pool))
            yield harness
            await _stop(harness)
        return
    bridge = request.getfixturevalue("d1_bridge")
    shape = kind.removeprefix("d1-")
    with d1_binding(bridge, shape, yield_to_loop=True) as db:
        from tickwork.runtimes.d1 import D1Runtime

        await apply_d1_schema(db)
        harness = SharedHarness(kind, lambda **kw: D1Runtime(db, **kw), d1_query(db))
        yield harness
        await _stop(harness)


async def apply_d1_schema(db: Any) -> None:
    """Apply schema/d1 statement by statement, as a migration tool would."""
    from tickwork.schemas import migrations

    for migration in migrations("d1"):
        for statement in migration.statements():
            await db.prepare(statement).run()


async def _stop(harness: SharedHarness) -> None:
    """Release any execution a test left blocked, so no task outlives its loop."""
    for signal in harness.executor.signals.values():
        signal._abort("test_over")
