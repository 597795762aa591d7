"""Only ``test_real_pyodide.py`` is a pytest module here: ``cases/`` and
``inside/`` run inside Pyodide (they import ``js`` and the tier's JS objects).

The tier's Node processes start as soon as collection has finished, when any
of its tests was collected, so they run on the other core while the rest of
the suite runs (tests/conftest.py orders its tests last); they then wait for
their results.

Under pytest-xdist every worker collects every test, so collection starts
nothing there: the one worker given this file (``--dist loadfile``, as
scripts/test runs it, sends a file's tests to one worker, the biggest files
first, and this is by far the biggest) starts the tier when its first test
asks for the results, while the other worker runs the rest of the suite.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

collect_ignore_glob = ["cases/*", "inside/*"]


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return  # nothing will run: an orphaned Node process would outlive pytest
    if hasattr(session.config, "workerinput"):
        return  # an xdist worker: the fixture starts the tier, in one worker only
    if any(item.nodeid.startswith("tests/pyodide/test_real_pyodide.py")
           for item in session.items):
        from tests.pyodide.test_real_pyodide import Tier

        Tier.start(Path(tempfile.mkdtemp(prefix="pyodide-tier-")))
