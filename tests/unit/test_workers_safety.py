"""The package code that Workers load must run unchanged on Pyodide.

No sqlite3, ssl or threads there, and no randomness at import time (Workers
snapshot memory after import and refuse random() during it).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tickwork"
# CPython-only entry points, never imported by the Worker or the DO.
CPYTHON_ONLY = {"demo.py", "__main__.py"}
FORBIDDEN = {"sqlite3", "_sqlite3", "ssl", "threading", "_thread", "multiprocessing",
             "concurrent", "subprocess"}


def worker_modules() -> list[Path]:
    return [path for path in sorted(PACKAGE.rglob("*.py")) if path.name not in CPYTHON_ONLY]


def test_worker_modules_import_nothing_pyodide_lacks() -> None:
    offenders = []
    for path in worker_modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path.relative_to(PACKAGE)}: {name}" for name in names
                          if name.split(".")[0] in FORBIDDEN]
    assert worker_modules(), "no modules found"
    assert offenders == []


IMPORT_UNDER_WORKERS_RULES = """
import builtins, importlib, os, random, sys
blocked = {"sqlite3", "_sqlite3", "ssl", "_ssl"}
real_import = builtins.__import__
def guarded_import(name, *args, **kwargs):
    if name.split(".")[0] in blocked:
        raise ImportError(f"{name} is not available on Workers")
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


def test_worker_modules_import_without_sqlite3_ssl_or_entropy() -> None:
    root = PACKAGE.parent
    names = [
        ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        for path in worker_modules()
    ]
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_UNDER_WORKERS_RULES, *names],
        capture_output=True, text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"imported {len(names)}"
