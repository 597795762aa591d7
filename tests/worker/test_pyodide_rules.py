"""The Worker's modules load under Workers' rules: no sqlite3/ssl/threads, no
randomness at import time, and ``js`` only inside functions (it exists only on
Pyodide; ``workers`` may be imported at the top of worker/ modules)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORKER_MODULES = sorted((REPO / "worker").glob("*.py"))
FORBIDDEN = {"sqlite3", "_sqlite3", "ssl", "_ssl", "threading", "_thread", "multiprocessing",
             "concurrent", "subprocess", "socket"}


def imported_names(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    found: list[tuple[ast.AST, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node, node.module))
    return found


def test_worker_modules_import_nothing_pyodide_lacks_and_js_only_lazily() -> None:
    assert WORKER_MODULES
    offenders = []
    for path in WORKER_MODULES:
        tree = ast.parse(path.read_text(), str(path))
        top_level = set(map(id, tree.body))
        for node, name in imported_names(tree):
            root = name.split(".")[0]
            if root in FORBIDDEN:
                offenders.append(f"{path.name}: imports {name}")
            if root == "js" and id(node) in top_level:
                offenders.append(f"{path.name}: imports js at module level")
    assert offenders == []


LOAD_UNDER_WORKERS_RULES = """
import builtins, importlib, os, random, sys
from tests.fakes.workers_module import build_module
sys.modules["workers"] = build_module()
blocked = {"sqlite3", "_sqlite3", "ssl", "_ssl", "js"}
real_import = builtins.__import__
def guarded_import(name, *args, **kwargs):
    if name.split(".")[0] in blocked:
        raise ImportError(f"{name} is not available here")
    return real_import(name, *args, **kwargs)
builtins.__import__ = guarded_import
def no_entropy(*args, **kwargs):
    raise RuntimeError("randomness at import time")
os.urandom = no_entropy
random.random = random.getrandbits = random.randrange = no_entropy
for name in sys.argv[1:]:
    importlib.import_module(name)
print("imported", len(sys.argv) - 1)
"""


def test_worker_modules_load_without_sqlite3_ssl_js_or_entropy() -> None:
    names = [f"worker.{path.stem}" if path.stem != "__init__" else "worker"
             for path in WORKER_MODULES]
    result = subprocess.run(
        [sys.executable, "-c", LOAD_UNDER_WORKERS_RULES, *names],
        capture_output=True, text=True, cwd=REPO, timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"imported {len(names)}"
