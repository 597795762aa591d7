"""The PostgreSQL fixtures with the package's schema applied to every test
database. A conftest imports them by name::

    from tests.support.pg.with_schema import (  # noqa: F401
        postgres_dsn, postgres_schema_files, postgres_server, postgres_templates)
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support.pg.fixtures import (  # noqa: F401  (pytest finds fixtures by name)
    POSTGRES_SCHEMA_DIR,
    postgres_dsn,
    postgres_server,
    postgres_templates,
    schema_files,
)


@pytest.fixture
def postgres_schema_files() -> Sequence[Path]:
    """schema/postgres, applied to every test database."""
    return schema_files(POSTGRES_SCHEMA_DIR)
