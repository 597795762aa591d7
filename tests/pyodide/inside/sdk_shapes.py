"""Which ``workers`` module the tier's Worker and Durable Object import.

Two shapes, both run for every Worker and ``JobOwner`` case:

* ``external``: the real ``workers-runtime-sdk`` from the package index
  (pinned in ``tests/pyodide/external-sdk.txt``; ``scripts/test`` installs
  it into ``.venv/workers-runtime-sdk``), the ``workers`` module of
  compatibility dates from 2026-04-21, with its real entrypoint classes and
  binding wrappers. It needs two modules only workerd provides; the tier's
  stand-ins are in ``inside/runtime_modules``.
* ``builtin``: ``inside/sdk/workers.py``, the built-in SDK's shape as
  measured in workerd 1.20260426.1 (its env wrapper applied once per
  subclass, and not idempotent).

``use(shape)`` puts that shape's directory first on ``sys.path`` and forgets
every module that imported ``workers``, so the next import binds afresh.
"""

from __future__ import annotations

import importlib
import sys

SHAPES = ("external", "builtin")

_DIRECTORIES = {
    "external": "/repo/.venv/workers-runtime-sdk",
    "builtin": "/repo/tests/pyodide/inside/sdk",
}
_RUNTIME_MODULES = "/repo/tests/pyodide/inside/runtime_modules"

#: Modules that import ``workers`` (or hold classes made from it).
_DEPENDENTS = ("workers", "asgi", "tickwork.cloudflare", "worker", "durable_objects", "entry",
               "tests.pyodide.inside.deployment")

_current: list[str] = ["builtin"]  # what pyodide_host.mjs puts on the path


def current() -> str:
    return _current[0]


def use(shape: str) -> None:
    """Make ``import workers`` give ``shape``'s module from now on."""
    if shape not in SHAPES:
        raise ValueError(f"SDK shape must be one of {SHAPES}, not {shape!r}")
    if shape == _current[0] and _DIRECTORIES[shape] in sys.path:
        return
    for directory in (*_DIRECTORIES.values(), _RUNTIME_MODULES):
        while directory in sys.path:
            sys.path.remove(directory)
    sys.path.insert(0, _DIRECTORIES[shape])
    if shape == "external":
        sys.path.insert(1, _RUNTIME_MODULES)
    for name in list(sys.modules):
        if any(name == root or name.startswith(root + ".") for root in _DEPENDENTS):
            del sys.modules[name]
    importlib.invalidate_caches()
    _current[0] = shape
    module = importlib.import_module("workers")
    expected = _DIRECTORIES[shape]
    if not (module.__file__ or "").startswith(expected):
        raise RuntimeError(f"import workers gave {module.__file__}, not the {shape} SDK "
                           f"from {expected} (is it installed? see scripts/test)")
