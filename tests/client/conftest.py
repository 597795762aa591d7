"""Fixtures of the client tests: PostgreSQL for ``tickwork serve --postgres``,
and the Worker over Miniflare's D1 (both SDK shapes), as the Worker tests use."""

from tests.support.d1.fixtures import d1_bridge  # noqa: F401  (pytest finds fixtures by name)
from tests.support.pg.with_schema import (  # noqa: F401
    postgres_dsn,
    postgres_schema_files,
    postgres_server,
    postgres_templates,
)
from tests.support.serve import shared_serve  # noqa: F401
from tests.worker.conftest import db, env, js_module, shape, worker, workers_module  # noqa: F401
