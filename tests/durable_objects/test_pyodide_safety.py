"""durable_objects/ is loaded by the Worker: it must run unchanged on Pyodide
(no sqlite3, ssl or threads; no randomness at import time)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "durable_objects"
FORBIDDEN = {"sqlite3", "_sqlite3", "ssl", "threading", "_thread", "multiprocessing",
             "concurrent", "subprocess", "random"}

IMPORT_UNDER_WORKERS_RULES = """
import builtins, importlib, os, random, sys, types
workers = types.ModuleType("workers")
class DurableObject:
    def __init__(self, ctx, env):
        self.ctx, self.env = ctx, env
workers.DurableObject = DurableObject
sys.modules["workers"] = workers
blocked = {"sqlite3", "_sqlite3", "ssl", "_ssl"}  # threading imports on Pyodide (never runs)
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


def test_no_module_imports_what_pyodide_lacks() -> None:
    offenders = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {name}" for name in names
                          if name.split(".")[0] in FORBIDDEN]
    assert offenders == []


def test_the_package_imports_under_workers_rules() -> None:
    names = ["durable_objects", "durable_objects.job_owner", "durable_objects.alarm_wake"]
    result = subprocess.run(
        [sys.executable, "-c", IMPORT_UNDER_WORKERS_RULES, *names],
        capture_output=True, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"imported {len(names)}"
