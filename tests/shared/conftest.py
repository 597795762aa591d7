"""Fixtures for the shared-runtime suite: every test runs on every shared store."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
import pytest_asyncio

from tests.support.d1.fixtures import d1_bridge  # noqa: F401
from tests.support.pg.fixtures import (  # noqa: F401  (pytest finds fixtures by name)
    POSTGRES_SCHEMA_DIR,
    postgres_dsn,
    postgres_server,
    postgres_templates,
    schema_files,
)
from tests.support.shared import STORE_KINDS, SharedHarness
from tests.support.stores import shared_harness


@pytest.fixture
def postgres_schema_files() -> Sequence[Path]:
    return schema_files(POSTGRES_SCHEMA_DIR)


@pytest_asyncio.fixture(params=STORE_KINDS)
async def shared(request: pytest.FixtureRequest) -> AsyncIterator[SharedHarness]:
    async with shared_harness(request.param, request) as harness:
        yield harness
