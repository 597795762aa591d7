"""Fixtures for the shared-runtime suite: every test runs on every shared store."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.support.d1.fixtures import d1_bridge  # noqa: F401

# The PostgreSQL-only files' pool and store (a module may define its own pool).
from tests.support.pg.store_under_test import pool, shared_store  # noqa: F401
from tests.support.pg.with_schema import (  # noqa: F401  (pytest finds fixtures by name)
    postgres_dsn,
    postgres_schema_files,
    postgres_server,
    postgres_templates,
)
from tests.support.shared import STORE_KINDS, SharedHarness
from tests.support.stores import shared_harness


@pytest_asyncio.fixture(params=STORE_KINDS)
async def shared(request: pytest.FixtureRequest) -> AsyncIterator[SharedHarness]:
    async with shared_harness(request.param, request) as harness:
        yield harness
