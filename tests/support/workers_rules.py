"""What "runs unchanged on Pyodide" means for the modules a Worker uploads,
checked once here for tickwork/, worker/ and durable_objects/ alike.

* No import of what Pyodide lacks or never runs (sqlite3, ssl, threads,
  subprocesses), found by reading the source.
* Importing the modules works with sqlite3/ssl blocked and with randomness
  refused (Workers snapshot memory after import and refuse random() during
  it), in a fresh interpreter with the ``workers`` stand-in installed.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: Top-level modules no Worker-loaded module may import.
FORBIDDEN = frozenset({"sqlite3", "_sqlite3", "ssl", "_ssl", "threading", "_thread",
                       "multiprocessing", "concurrent", "subprocess"})


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def absolute_imports(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    """Every ``import x`` / ``from x import ...`` (absolute ones) in a parsed file."""
    found: list[tuple[ast.AST, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node, node.module))
    return found


def forbidden_imports(paths: list[Path], forbidden: frozenset[str] = FORBIDDEN) -> list[str]:
    return [f"{path.relative_to(REPO)}: imports {name}"
            for path in paths for _, name in absolute_imports(parse(path))
            if name.split(".")[0] in forbidden]


def module_names(paths: list[Path]) -> list[str]:
    return [".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            for path in paths]


_IMPORT_UNDER_WORKERS_RULES = """
import builtins, importlib, os, random, sys
from tests.support.fakes.workers_module import build_module
sys.modules["workers"] = build_module()
blocked = set(sys.argv[1].split(","))
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
for name in sys.argv[2:]:
    importlib.import_module(name)
print("imported", len(sys.argv) - 2)
"""


def assert_imports_under_workers_rules(modules: list[str], *, block_js: bool = False) -> None:
    """Import ``modules`` in a fresh interpreter under the rules above.

    ``threading`` is not blocked: it imports on Pyodide (it just never runs),
    and the source check above already keeps it out. With ``block_js``, the
    ``js`` module (Pyodide only) must not be needed at import time either.
    """
    blocked = ["sqlite3", "_sqlite3", "ssl", "_ssl", *(["js"] if block_js else [])]
    result = subprocess.run(
        [sys.executable, "-c", _IMPORT_UNDER_WORKERS_RULES, ",".join(blocked), *modules],
        capture_output=True, text=True, cwd=REPO, timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"imported {len(modules)}"
