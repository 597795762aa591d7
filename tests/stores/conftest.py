"""Fixtures for the tests of the Miniflare D1 bridge itself."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.d1.fixtures import d1_binding, d1_bridge, d1_database  # noqa: F401
from tests.support.d1.miniflare import D1Bridge
from tests.support.pg.fixtures import (  # noqa: F401  (pytest finds fixtures by name)
    postgres_dsn,
    postgres_pool,
    postgres_schema_files,
    postgres_server,
    postgres_templates,
)


@pytest.fixture
def external_db(d1_bridge: D1Bridge) -> Iterator[Any]:  # noqa: F811
    """A fresh database seen through the external SDK (workers-runtime-sdk)."""
    with d1_binding(d1_bridge, "external") as binding:
        yield binding


@pytest.fixture
def builtin_db(d1_bridge: D1Bridge) -> Iterator[Any]:  # noqa: F811
    """A fresh database seen through the built-in SDK (raw JsProxy), fake pyodide installed."""
    with d1_binding(d1_bridge, "builtin") as binding:
        yield binding
