"""The Worker's modules load under Workers' rules: no sqlite3/ssl/threads, no
randomness at import time, and ``js`` only inside functions (it exists only on
Pyodide; ``workers`` may be imported at the top of worker/ modules)."""

from __future__ import annotations

from tests.support.workers_rules import (
    FORBIDDEN,
    REPO,
    absolute_imports,
    assert_imports_under_workers_rules,
    module_names,
    parse,
)

WORKER_MODULES = sorted((REPO / "worker").glob("*.py"))


def test_worker_modules_import_nothing_pyodide_lacks_and_js_only_lazily() -> None:
    assert WORKER_MODULES
    offenders = []
    for path in WORKER_MODULES:
        tree = parse(path)
        top_level = set(map(id, tree.body))
        for node, name in absolute_imports(tree):
            root = name.split(".")[0]
            if root in FORBIDDEN | {"socket"}:
                offenders.append(f"{path.name}: imports {name}")
            if root == "js" and id(node) in top_level:
                offenders.append(f"{path.name}: imports js at module level")
    assert offenders == []


def test_worker_modules_load_without_sqlite3_ssl_js_or_entropy() -> None:
    assert_imports_under_workers_rules(module_names(WORKER_MODULES), block_js=True)
