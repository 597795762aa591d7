"""pytest fixtures giving tests a real D1 database (Miniflare), for any test directory.

Use them from another directory's ``conftest.py`` (import both names: the
second depends on the first)::

    from tests.support.d1.fixtures import d1_bridge, d1_database  # noqa: F401

then request ``d1_database`` in a test (it runs once per SDK shape, ids
``d1-external`` and ``d1-builtin``)::

    async def test_something(d1_database: Any) -> None:
        await d1_database.exec("CREATE TABLE t (a)")

For one shape, or several bindings over one database, use :func:`d1_binding`::

    from tests.support.d1.fixtures import d1_binding, d1_bridge  # noqa: F401
    from tests.support.d1.miniflare import D1Bridge

    @pytest.fixture
    def db(d1_bridge: D1Bridge) -> Iterator[Any]:
        with d1_binding(d1_bridge, "builtin", yield_to_loop=True) as binding:
            yield binding

Importing ``d1_bridge`` into several conftests is fine: however many times it
is imported, one Node process serves the whole session (it is shared through
this module and closed when the last user's session fixture ends).

The bridge needs ``npm ci`` at the repository root. If Node or the pinned
miniflare is missing, every test that uses these fixtures ERRORS with a
message saying so; nothing is skipped.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.d1.miniflare import SHAPES, D1Bridge, D1DatabaseHandle, Shape
from tests.support.fakes.pyodide_ffi import fake_pyodide

#: pytest ids of the two shapes, in the order of ``SHAPES``.
SHAPE_IDS = tuple(f"d1-{shape}" for shape in SHAPES)

_lock = threading.Lock()
_shared: D1Bridge | None = None
_users = 0


def acquire_shared_bridge() -> D1Bridge:
    """The process-wide bridge, started on first use (and restarted if it died)."""
    global _shared, _users
    with _lock:
        if _shared is None or not _shared.alive:
            _shared = D1Bridge.start()
        _users += 1
        return _shared


def release_shared_bridge() -> None:
    """Drop one user; the last one closes the bridge."""
    global _shared, _users
    with _lock:
        _users -= 1
        if _users <= 0 and _shared is not None:
            _shared.close()
            _shared = None
            _users = 0


@contextlib.contextmanager
def d1_binding(
    bridge: D1Bridge,
    shape: Shape = "external",
    *,
    database: D1DatabaseHandle | None = None,
    yield_to_loop: bool = False,
) -> Iterator[Any]:
    """A D1 binding of ``shape`` for the ``with`` block.

    Without ``database`` the binding gets a fresh, empty database, which is
    retired when the block ends (a leftover task using it then raises
    ``StaleD1Binding`` instead of writing into a later test's database).
    With ``database`` (e.g. ``other.database``) it shares that one and
    retires nothing. For ``"builtin"`` the fake ``pyodide`` is installed in
    ``sys.modules`` for the block, so code under test can import
    ``pyodide.ffi`` (``jsnull``, ``to_js``, ``JsProxy``).
    """
    handle = database if database is not None else bridge.new_database()
    try:
        if shape == "builtin":
            with fake_pyodide():
                yield bridge.binding(shape, database=handle, yield_to_loop=yield_to_loop)
        else:
            yield bridge.binding(shape, database=handle, yield_to_loop=yield_to_loop)
    finally:
        if database is None:
            bridge.retire(handle)


@pytest.fixture(scope="session")
def d1_bridge() -> Iterator[D1Bridge]:
    """The Miniflare D1 bridge, one per test session."""
    bridge = acquire_shared_bridge()
    try:
        yield bridge
    finally:
        release_shared_bridge()


@pytest.fixture(params=SHAPES, ids=SHAPE_IDS)
def d1_database(request: pytest.FixtureRequest, d1_bridge: D1Bridge) -> Iterator[Any]:
    """A D1 binding over a fresh, empty database, once per SDK shape."""
    shape: Shape = request.param
    with d1_binding(d1_bridge, shape) as binding:
        yield binding


__all__ = [
    "SHAPE_IDS",
    "acquire_shared_bridge",
    "d1_binding",
    "d1_bridge",
    "d1_database",
    "release_shared_bridge",
]
