"""Only ``test_real_pyodide.py`` is a pytest module here: ``cases/`` and
``inside/`` run inside Pyodide (they import ``js`` and the tier's JS objects).

The tier's Node process starts as soon as collection has finished, when any
of its tests was collected, so it runs on the other core while the rest of
the suite runs (tests/conftest.py orders its tests last); they then wait for
its results.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

collect_ignore_glob = ["cases/*", "inside/*"]


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(item.nodeid.startswith("tests/pyodide/test_real_pyodide.py")
           for item in session.items):
        from tests.pyodide.test_real_pyodide import Tier

        Tier.start(Path(tempfile.mkdtemp(prefix="pyodide-tier-")))
