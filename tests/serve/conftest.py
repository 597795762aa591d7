"""Fixtures of the local host tests: a running ``tickwork serve`` and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.support.pg.fixtures import (  # noqa: F401  (pytest finds fixtures by name)
    POSTGRES_SCHEMA_DIR,
    postgres_dsn,
    postgres_server,
    postgres_templates,
    schema_files,
)
from tests.support.serve import Serve


@pytest.fixture
def postgres_schema_files() -> Sequence[Path]:
    return schema_files(POSTGRES_SCHEMA_DIR)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """One server per test module (tests use distinct owner keys)."""
    serve = Serve(tmp_path_factory.mktemp("serve") / "data").start()
    try:
        yield serve
    finally:
        serve.stop()
