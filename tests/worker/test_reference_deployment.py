"""The reference deployment (worker/, durable_objects/) is built from the
package's public API only, as a user's own Worker would be."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from tickwork import InvalidArgument

REPO = Path(__file__).resolve().parents[2]
#: What a deployment may import from tickwork.
PUBLIC = {"tickwork", "tickwork.cloudflare", "tickwork.executors", "tickwork.client"}


def imported_tickwork_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found |= {name for name in names if name.split(".")[0] == "tickwork"}
    return found


def test_the_reference_deployment_uses_only_the_public_api() -> None:
    files = sorted([*(REPO / "worker").glob("*.py"), *(REPO / "durable_objects").glob("*.py")])
    assert files
    used = {path.relative_to(REPO).as_posix(): imported_tickwork_modules(path) - PUBLIC
            for path in files}
    assert {path: modules for path, modules in used.items() if modules} == {}


def test_the_main_module_is_a_few_statements() -> None:
    # Its docstring, then the imports, __all__ and the Worker class: nothing of
    # tickwork's own logic lives in a deployment.
    tree = ast.parse((REPO / "worker" / "entry.py").read_text(encoding="utf-8"))
    statements = tree.body[1:] if ast.get_docstring(tree) else tree.body
    assert len(statements) <= 7
    assert not any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                   for node in statements)


def test_the_class_factories_refuse_what_is_not_a_function(workers_module: Any) -> None:
    from tickwork.cloudflare import job_owner_class, worker_class

    for make in (job_owner_class, worker_class):
        with pytest.raises(InvalidArgument, match="executors"):
            make("build_registry")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="domain_statements"):
        worker_class(lambda env: None, domain_statements=[])  # type: ignore[arg-type]
