"""The example project's tests use the Worker tests' fixtures (Miniflare's D1
in both SDK shapes, the workers and js stand-ins)."""

from tests.support.d1.fixtures import d1_bridge  # noqa: F401  (pytest finds fixtures by name)
from tests.worker.conftest import db, js_module, shape, workers_module  # noqa: F401
