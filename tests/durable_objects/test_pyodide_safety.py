"""durable_objects/ is loaded by the Worker: it must run unchanged on Pyodide
(no sqlite3, ssl or threads; no randomness at import time)."""

from __future__ import annotations

from tests.support.workers_rules import (
    FORBIDDEN,
    REPO,
    assert_imports_under_workers_rules,
    forbidden_imports,
    module_names,
)

MODULES = sorted((REPO / "durable_objects").glob("*.py"))


def test_no_module_imports_what_pyodide_lacks() -> None:
    assert MODULES
    assert forbidden_imports(MODULES, FORBIDDEN | {"random"}) == []


def test_the_package_imports_under_workers_rules() -> None:
    assert_imports_under_workers_rules(module_names(MODULES))
