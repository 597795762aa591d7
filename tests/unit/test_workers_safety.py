"""The package code that Workers load must run unchanged on Pyodide.

No sqlite3, ssl or threads there, and no randomness at import time (Workers
snapshot memory after import and refuse random() during it).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

from tests.support.workers_rules import (
    assert_imports_under_workers_rules,
    forbidden_imports,
    module_names,
)

PACKAGE = Path(__file__).resolve().parents[2] / "tickwork"
# CPython-only code, never imported by the Worker or the DO: the command line
# entry points and the local host package (``tickwork serve`` / ``inspect``).
# Paths relative to the package; a directory covers everything under it. The
# one list is worker/bundle-exclude.json (what the Worker bundle leaves out).
CPYTHON_ONLY = {
    rule.removeprefix("tickwork/").rstrip("/")
    for rule in json.loads(
        (PACKAGE.parent / "worker" / "bundle-exclude.json").read_text())["excluded"]
}


def is_cpython_only(path: Path) -> bool:
    relative = path.relative_to(PACKAGE).as_posix()
    return any(relative == rule or relative.startswith(rule + "/") for rule in CPYTHON_ONLY)


def worker_modules() -> list[Path]:
    return [path for path in sorted(PACKAGE.rglob("*.py")) if not is_cpython_only(path)]


def test_the_exemptions_are_exactly_the_cpython_entry_points() -> None:
    exempt = sorted(path.relative_to(PACKAGE).as_posix()
                    for path in PACKAGE.rglob("*.py") if is_cpython_only(path))
    assert "demo.py" in exempt and "__main__.py" in exempt
    assert "hosts/cpython/__init__.py" in exempt and "hosts/cpython/serve.py" in exempt
    # Nothing else is exempt: a __main__.py or demo.py inside a subpackage is checked.
    assert all(name in ("demo.py", "__main__.py") or name.startswith("hosts/cpython/")
               for name in exempt)
    assert "stores/sqlite3_database.py" not in exempt
    assert "hosts/__init__.py" not in exempt


def test_worker_modules_never_import_the_cpython_only_code() -> None:
    """A Worker module importing tickwork.hosts.cpython (or demo/__main__) would pull
    sqlite3 and ssl into the bundle; none may."""
    offenders = []
    for path in worker_modules():
        package = path.relative_to(PACKAGE.parent).parent.parts
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            modules: list[str] = []
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = list(package[:len(package) - node.level + 1]) if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                modules = [target] + [f"{target}.{alias.name}" for alias in node.names]
            for module in modules:
                parts = module.split(".")
                if parts[:3] == ["tickwork", "hosts", "cpython"] or (
                        parts[:1] == ["tickwork"] and parts[1:2] in (["demo"], ["__main__"])):
                    offenders.append(f"{path.relative_to(PACKAGE)}: {module}")
    assert offenders == []


def test_worker_modules_import_nothing_pyodide_lacks() -> None:
    assert worker_modules(), "no modules found"
    assert forbidden_imports(worker_modules()) == []


def test_worker_modules_import_without_sqlite3_ssl_or_entropy() -> None:
    assert_imports_under_workers_rules(module_names(worker_modules()))
