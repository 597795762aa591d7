"""Fixtures of the real-Pyodide tier, by the argument name tests use.

Each is an async context manager factory. The stores are JavaScript objects
from ``runner.mjs`` (the ``tickwork_tier`` module): a Durable Object's
``ctx.storage`` (``js/do_storage.mjs``) and Miniflare's real D1.
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, NamedTuple

import tickwork_tier  # type: ignore[import-not-found]  # registered by runner.mjs

from tests.support import Harness
from tests.support.engine import Engine
from tests.support.shared import SharedHarness, apply_d1_statements, d1_query
from tickwork.schemas import split_statements

Factory = Callable[[], contextlib.AbstractAsyncContextManager[Any]]
FIXTURES: dict[str, Factory] = {}

#: The D1 migrations, read from the repository (the bundle ships no SQL files).
D1_SCHEMA_DIR = Path("/repo/schema/d1")


def fixture(name: str) -> Callable[[Callable[[], AsyncIterator[Any]]], Factory]:
    def register(function: Callable[[], AsyncIterator[Any]]) -> Factory:
        factory = contextlib.asynccontextmanager(function)
        FIXTURES[name] = factory
        return factory
    return register


# ------------------------------------------------------------------ owner-local


class JsDurableObjectHarness(Harness):
    """``tests.support.Harness`` over the JavaScript ``ctx.storage`` stand-in.

    ``open()`` gives a new storage object over the same database (a restarted
    process); ``crash`` evicts the old one first, so nothing the dying runtime
    does afterwards reaches the database.
    """

    def __init__(self, directory: Path) -> None:
        self._js_storage: Any = None
        super().__init__("do-js", directory)

    def open(self) -> None:
        if self._js_storage is None:
            self._js_storage = tickwork_tier.newStorage()
        else:
            self._js_storage = tickwork_tier.reopenStorage(self._js_storage)
        self._storage = self._js_storage

    async def crash(self, task: Any, *more: Any) -> None:
        self._js_storage.evicted = True
        for dying in (task, *more):
            dying.cancel()
        import asyncio

        await asyncio.gather(task, *more, return_exceptions=True)
        self.open()

    def close(self) -> None:
        if self._js_storage is not None:
            self._js_storage.evicted = True


@fixture("harness")
async def harness() -> AsyncIterator[JsDurableObjectHarness]:
    built = JsDurableObjectHarness(Path(tempfile.mkdtemp()))
    try:
        yield built
    finally:
        built.close()


@fixture("local_store_do")
async def local_store_do() -> AsyncIterator[Any]:
    """The owner-local store over the JavaScript ``ctx.storage``, for its contract suite."""
    from tests.contract.under_test import LocalStoreUnderTest

    built = JsDurableObjectHarness(Path(tempfile.mkdtemp()))
    try:
        yield LocalStoreUnderTest(built)
    finally:
        built.close()


@fixture("do_storage")
async def do_storage() -> AsyncIterator[Any]:
    """A fresh Durable Object ``ctx.storage`` (a JS object)."""
    storage = tickwork_tier.newStorage()
    try:
        yield storage
    finally:
        storage.evicted = True


# ------------------------------------------------------------------ D1


async def fresh_d1() -> Any:
    """The next D1 database of Miniflare's pool, emptied (a JS object)."""
    db = tickwork_tier.nextD1()
    listing = await db.prepare(
        "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'view', 'trigger') "
        "AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_cf_%'").raw()
    drops = [f'DROP {kind.upper()} IF EXISTS "{name}"' for kind, name in listing.to_py()
             if kind == "table" or kind == "view"]
    if drops:  # one round trip; foreign keys are checked at its commit, when all are gone
        await apply_d1_statements(db, ["PRAGMA defer_foreign_keys = ON", *drops])
    return db


async def apply_d1_schema(db: Any) -> None:
    await apply_d1_statements(db, [
        statement for path in sorted(D1_SCHEMA_DIR.glob("*.sql"))
        for statement in split_statements(path.read_text(encoding="utf-8"))])


@fixture("d1")
async def d1() -> AsyncIterator[Any]:
    """An empty D1 database (Miniflare's, a JS object), no schema."""
    yield await fresh_d1()


@fixture("shared")
async def shared() -> AsyncIterator[SharedHarness]:
    from tickwork.runtimes.d1 import D1Runtime

    db = await fresh_d1()
    await apply_d1_schema(db)
    built = SharedHarness("d1-builtin", lambda **kw: D1Runtime(db, **kw), d1_query(db))
    try:
        yield built
    finally:
        for signal in built.executor.signals.values():
            signal._abort("test_over")


@fixture("engine_do")
async def engine_do() -> AsyncIterator[Engine]:
    """The behaviour suite's engine over the JavaScript ``ctx.storage``."""
    built = JsDurableObjectHarness(Path(tempfile.mkdtemp()))
    try:
        yield Engine("do-js", built)
    finally:
        built.close()


@fixture("engine_d1")
async def engine_d1() -> AsyncIterator[Engine]:
    """The behaviour suite's engine over Miniflare's D1 (a JS object)."""
    async with shared() as built:
        yield Engine("d1-builtin", built)


@fixture("deployment")
async def deployment() -> AsyncIterator[Any]:
    """The Worker and its JobOwner objects over a fresh D1 (``inside/deployment.py``)."""
    from tests.pyodide.inside.deployment import Deployment

    db = await fresh_d1()
    await apply_d1_schema(db)
    built = Deployment(db)
    try:
        yield built
    finally:
        for signal in built.executor.signals.values():
            signal._abort("test_over")
        built.close()


# ------------------------------------------------------------------ misc


class Captured(NamedTuple):
    out: str
    err: str


class CaptureOutput:
    """``capsys``: what the test printed to stdout and stderr."""

    def __init__(self) -> None:
        self._out, self._err = io.StringIO(), io.StringIO()

    def readouterr(self) -> Captured:
        captured = Captured(self._out.getvalue(), self._err.getvalue())
        for stream in (self._out, self._err):
            stream.seek(0)
            stream.truncate()
        return captured


@fixture("capsys")
async def capsys() -> AsyncIterator[CaptureOutput]:
    capture = CaptureOutput()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = capture._out, capture._err
    try:
        yield capture
    finally:
        sys.stdout, sys.stderr = saved


@fixture("monkeypatch")
async def monkeypatch() -> AsyncIterator[Any]:
    """pytest's ``monkeypatch``: every change undone when the case ends."""
    from _pytest.monkeypatch import MonkeyPatch

    patcher = MonkeyPatch()
    try:
        yield patcher
    finally:
        patcher.undo()


@fixture("tmp_path")
async def tmp_path() -> AsyncIterator[Path]:
    yield Path(tempfile.mkdtemp())


@fixture("example_deployment")
async def example_deployment() -> AsyncIterator[Any]:
    """examples/cloudflare-worker's own classes over a fresh D1."""
    from tests.pyodide.inside.deployment import Deployment
    from tests.support.examples import load_example_entry

    entry = load_example_entry()
    db = await fresh_d1()
    await apply_d1_schema(db)
    built = Deployment(db, job_owner=entry.JobOwner, default=entry.Default)
    try:
        yield built
    finally:
        built.close()
