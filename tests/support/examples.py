"""The example project a user copies (examples/cloudflare-worker), loaded as
its Worker would load it: ``src/entry.py`` as the main module ``entry``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cloudflare-worker"


def load_example_entry() -> ModuleType:
    """A fresh import of the example's ``src/entry.py`` (the ``workers``
    module, real or stand-in, must be importable)."""
    sys.modules.pop("entry", None)
    spec = importlib.util.spec_from_file_location("entry", EXAMPLE / "src" / "entry.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["entry"] = module
    spec.loader.exec_module(module)
    return module
