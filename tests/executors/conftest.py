"""The executors' engine runs use the shared-runtime harness (PostgreSQL and D1)."""

from __future__ import annotations

from tests.shared.conftest import postgres_schema_files, shared  # noqa: F401
from tests.support.d1.fixtures import d1_binding, d1_bridge  # noqa: F401
from tests.support.pg.fixtures import (  # noqa: F401  (pytest finds fixtures by name)
    postgres_dsn,
    postgres_server,
    postgres_templates,
)
