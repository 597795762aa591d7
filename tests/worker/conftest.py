"""Fixtures for the Worker's tests: a real D1 (Miniflare, both SDK shapes),
the ``workers`` and ``js`` stand-ins, and ``Default`` over a fake env."""

from __future__ import annotations

import types
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from tests.support.d1.fixtures import SHAPE_IDS, d1_binding, d1_bridge  # noqa: F401
from tests.support.d1.miniflare import SHAPES, D1Bridge
from tests.support.fake_js import installed_js_module
from tests.support.fakes.workers_module import installed_workers_module
from tests.support.stores import apply_d1_schema
from tests.support.worker import ExecutionContext, make_env


@pytest.fixture(params=SHAPES, ids=SHAPE_IDS)
def shape(request: pytest.FixtureRequest) -> str:
    value: str = request.param
    return value


@pytest_asyncio.fixture
async def db(shape: str, d1_bridge: D1Bridge) -> AsyncIterator[Any]:  # noqa: F811
    with d1_binding(d1_bridge, shape, yield_to_loop=True) as binding:  # type: ignore[arg-type]
        await apply_d1_schema(binding)
        yield binding


@pytest.fixture
def workers_module() -> Iterator[types.ModuleType]:
    with installed_workers_module() as module:
        yield module


@pytest.fixture
def js_module() -> Iterator[types.ModuleType]:
    with installed_js_module() as module:
        yield module


@pytest.fixture
def env(db: Any, shape: str,
        workers_module: types.ModuleType) -> Iterator[types.SimpleNamespace]:
    built = make_env(db, shape)
    yield built
    built.JOB_OWNERS.close()


@pytest.fixture
def worker(env: types.SimpleNamespace, workers_module: types.ModuleType) -> Any:
    from worker.entry import Default

    return Default(ExecutionContext(), env)


@pytest.fixture
def query(db: Any) -> Any:
    """Raw SQL against the test's D1 database (rows as tuples)."""
    from tickwork.stores.d1.binding import D1Binding

    return D1Binding(db).query
