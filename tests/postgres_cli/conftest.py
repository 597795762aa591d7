"""Fixtures of the PostgreSQL command-line tests: real databases, empty or migrated."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.support.pg.fixtures import (  # noqa: F401  (pytest finds fixtures by name)
    POSTGRES_SCHEMA_DIR,
    postgres_server,
    postgres_templates,
    schema_files,
)
from tests.support.pg.server import PostgresCluster, TemplateRegistry, unique_database_name


def without_module(directory: Path, module: str) -> str:
    """A PYTHONPATH entry under ``directory`` where importing ``module``
    fails as if it were not installed (put it first on the path)."""
    shadow = directory / "shadow"
    shadow.mkdir(exist_ok=True)
    (shadow / f"{module}.py").write_text(f"raise ImportError(\"No module named '{module}'\")\n")
    return str(shadow)


#: A fresh database built from the first ``n`` migrations (all of them for None).
MakeDatabase = Callable[[int | None], str]


@pytest.fixture
def make_database(postgres_server: PostgresCluster,  # noqa: F811  (the fixtures above)
                  postgres_templates: TemplateRegistry,  # noqa: F811
                  ) -> Iterator[MakeDatabase]:
    """Fresh databases migrated by hand (psql-style, file by file) up to a version."""
    names: list[str] = []

    def make(up_to: int | None) -> str:
        files: Sequence[Path] = schema_files(POSTGRES_SCHEMA_DIR)[:up_to]
        name = unique_database_name("tickwork_cli")
        dsn = postgres_server.create_database(name, postgres_templates.template_for(files))
        names.append(name)
        return dsn

    yield make
    for name in names:
        postgres_server.drop_database(name)
