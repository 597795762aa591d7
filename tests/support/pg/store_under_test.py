"""The PostgreSQL store under test of the PostgreSQL-only files in
``tests/shared`` (limits, rate limits, fair turns): a pool on the session's
server, the store over it, and the store itself from the test's handle.

``tests/shared/conftest.py`` imports the two fixtures (pytest finds them by
name there); a test module imports ``postgres``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from tests.contract.under_test import SharedStoreUnderTest
from tests.support.pg.fixtures import Pool, open_pool
from tests.support.shared import pool_query
from tickwork.stores.postgres.store import PostgresStore

__all__ = ["pool", "postgres", "shared_store"]


@pytest_asyncio.fixture
async def pool(postgres_dsn: str) -> AsyncIterator[Pool]:
    """A pool on the test's database, room for the claims a test races."""
    async with open_pool(postgres_dsn, max_size=12) as opened:
        yield opened


@pytest_asyncio.fixture
async def shared_store(pool: Pool) -> SharedStoreUnderTest:
    return SharedStoreUnderTest("postgres", PostgresStore(pool), pool_query(pool))


def postgres(shared: SharedStoreUnderTest) -> PostgresStore:
    """The ``PostgresStore`` of ``shared``."""
    assert isinstance(shared.store, PostgresStore)
    return shared.store
