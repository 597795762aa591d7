"""The contract suite's stores: each port's stores, opened empty with their schema.

``local_store``: the owner-local store on sqlite3 and on a Durable Object's
storage (the stand-in answering like either SDK); in the real-Pyodide tier,
on the JavaScript ctx.storage (tests/pyodide/inside/fixtures.py).
``shared_store``: D1 on Miniflare (through either SDK) and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.contract.under_test import LocalStoreUnderTest, SharedStoreUnderTest
from tests.support.d1.fixtures import d1_bridge  # noqa: F401  (pytest finds fixtures by name)
from tests.support.d1.miniflare import Shape
from tests.support.engine import OWNER_LOCAL_KINDS, SHARED_KINDS
from tests.support.pg.fixtures import (  # noqa: F401  (pytest finds fixtures by name)
    postgres_dsn,
    postgres_server,
    postgres_templates,
)
from tests.support.pg.with_schema import postgres_schema_files  # noqa: F401
from tests.support.stores import owner_local_harness


@pytest.fixture(params=OWNER_LOCAL_KINDS)
def local_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LocalStoreUnderTest]:
    with owner_local_harness(request.param, tmp_path) as harness:
        yield LocalStoreUnderTest(harness)


@pytest_asyncio.fixture(params=SHARED_KINDS)
async def shared_store(request: pytest.FixtureRequest) -> AsyncIterator[SharedStoreUnderTest]:
    kind: str = request.param
    if kind == "postgres":
        from tests.support.pg.fixtures import open_pool
        from tests.support.shared import pool_query
        from tickwork.stores.postgres.store import PostgresStore

        async with open_pool(request.getfixturevalue("postgres_dsn"), max_size=4) as pool:
            yield SharedStoreUnderTest(kind, PostgresStore(pool), pool_query(pool))
        return
    from tests.support.d1.fixtures import d1_binding
    from tests.support.shared import d1_query
    from tests.support.stores import apply_d1_schema
    from tickwork.stores.d1.store import D1Store

    shape: Shape = "builtin" if kind == "d1-builtin" else "external"
    bridge = request.getfixturevalue("d1_bridge")
    with d1_binding(bridge, shape, yield_to_loop=True) as db:
        await apply_d1_schema(db)
        yield SharedStoreUnderTest(kind, D1Store(db), d1_query(db))
