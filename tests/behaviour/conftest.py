"""The behaviour suite's one fixture: ``engine``, a real store of each family
(``BEHAVIOUR_KINDS``: sqlite3, D1 on Miniflare, PostgreSQL)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.support.d1.fixtures import d1_bridge  # noqa: F401  (pytest finds fixtures by name)
from tests.support.engine import BEHAVIOUR_KINDS, OWNER_LOCAL_KINDS, Engine
from tests.support.pg.with_schema import (  # noqa: F401  (pytest finds fixtures by name)
    postgres_dsn,
    postgres_schema_files,
    postgres_server,
    postgres_templates,
)
from tests.support.stores import owner_local_harness, shared_harness


@pytest_asyncio.fixture(params=BEHAVIOUR_KINDS)
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Engine]:
    kind: str = request.param
    if kind in OWNER_LOCAL_KINDS:
        with owner_local_harness(kind, tmp_path) as harness:
            yield Engine(kind, harness)
        return
    async with shared_harness(kind, request) as shared:
        yield Engine(kind, shared)
