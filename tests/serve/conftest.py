"""Fixtures of the local host tests: a running ``tickwork serve`` and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.pg.with_schema import (  # noqa: F401  (pytest finds fixtures by name)
    postgres_dsn,
    postgres_schema_files,
    postgres_server,
    postgres_templates,
)
from tests.support.serve import Serve, shared_serve  # noqa: F401


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """One server per test module (tests use distinct owner keys)."""
    serve = Serve(tmp_path_factory.mktemp("serve") / "data").start()
    try:
        yield serve
    finally:
        serve.stop()
