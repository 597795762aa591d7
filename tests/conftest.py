from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import OWNER_KINDS, Harness


@pytest.fixture(params=OWNER_KINDS)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    """A real store of every owner kind: sqlite3, and the DO storage stand-in
    answering like the built-in SDK and like the external SDK."""
    kind: str = request.param
    if kind == "sqlite3":
        built = Harness(kind, tmp_path)
        yield built
        built.close()
        return
    from tests.fakes.pyodide_ffi import fake_pyodide

    with fake_pyodide():
        built = Harness(kind, tmp_path)
        yield built
        built.close()
