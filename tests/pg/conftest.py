"""A real PostgreSQL server for the tests in this directory (see fixtures.py)."""

from tests.pg.fixtures import (  # noqa: F401  (pytest finds fixtures by name)
    postgres_dsn,
    postgres_pool,
    postgres_schema_files,
    postgres_server,
    postgres_templates,
)
