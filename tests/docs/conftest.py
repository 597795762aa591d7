"""The stores the docs' examples may need (see test_examples.py)."""

from __future__ import annotations

from tests.support.d1.fixtures import d1_bridge  # noqa: F401  (pytest finds fixtures by name)
from tests.support.pg.with_schema import (  # noqa: F401  (pytest finds fixtures by name)
    postgres_dsn,
    postgres_schema_files,
    postgres_server,
    postgres_templates,
)

