"""Fixtures for the benchmarks' own checks: a real PostgreSQL server.

    Part of the suite (testpaths); alone: .venv/bin/python -m pytest bench/tests
"""

from tests.support.pg.fixtures import (  # noqa: F401  (pytest finds fixtures by name)
    postgres_dsn,
    postgres_server,
)
