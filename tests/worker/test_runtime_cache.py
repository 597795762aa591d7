"""The API's D1Runtime lives as long as the isolate: only the first shared
request pays the schema check (round trips counted by the Miniflare bridge)."""

from __future__ import annotations

import types
from typing import Any

import pytest

from tests.support.worker import TOKEN, job, send

pytestmark = pytest.mark.usefixtures("js_module")


async def round_trips(db: Any, call: Any) -> tuple[Any, int]:
    before = db.stats.snapshot()
    result = await call()
    return result, db.stats.since(before).round_trips


async def test_only_the_first_shared_request_checks_the_schema(
        worker: Any, shape: str, db: Any) -> None:
    (status, _), first = await round_trips(
        db, lambda: send(worker, shape, "GET", "/v1/shared/queues"))
    assert status == 200
    assert first == 2  # the schema check, then the status query
    # No schema query any more. A request that stored a job also writes the
    # history it counted (one upsert, after the batch): a replay counts
    # nothing and writes nothing.
    for method, path, body, expected in [("GET", "/v1/shared/queues", None, 1),
                                         ("POST", "/v1/shared/jobs", job("a"), 2),
                                         ("POST", "/v1/shared/jobs", job("a"), 1),
                                         ("GET", "/v1/shared/jobs/a", None, 1)]:
        (status, _), cost = await round_trips(
            db, lambda m=method, p=path, b=body: send(worker, shape, m, p, b))
        assert status in (200, 201)
        assert cost == expected, (method, path)
    status, history = await send(worker, shape, "GET", "/v1/shared/history?queue=q")
    assert status == 200 and sum(point["enqueued"] for point in history["points"]) == 1


async def test_a_new_worker_instance_reuses_the_isolates_runtime(
        env: Any, shape: str, db: Any) -> None:
    """Workers make an entrypoint object per request; the runtime outlives it."""
    from tickwork.cloudflare import app
    from worker.entry import Default

    await send(Default(types.SimpleNamespace(), env), shape, "GET", "/v1/shared/queues")
    again = Default(types.SimpleNamespace(), types.SimpleNamespace(**vars(env)))
    (status, _), cost = await round_trips(
        db, lambda: send(again, shape, "GET", "/v1/shared/queues"))
    assert (status, cost) == (200, 1)
    assert len(app._API_RUNTIMES) == 1


async def test_each_d1_binding_gets_its_own_runtime(
        workers_module: Any, shape: str, db: Any, d1_bridge: Any) -> None:
    from tests.support.d1.fixtures import d1_binding
    from tests.support.stores import apply_d1_schema
    from tickwork.cloudflare import app
    from worker.executors import build_registry

    with d1_binding(d1_bridge, shape, yield_to_loop=True) as other:  # type: ignore[arg-type]
        await apply_d1_schema(other)
        first = app.api_runtime(types.SimpleNamespace(), db, build_registry)
        second = app.api_runtime(types.SimpleNamespace(), other, build_registry)
        assert first is not second
        assert app.api_runtime(types.SimpleNamespace(), db, build_registry) is first
        assert app.api_runtime(types.SimpleNamespace(), other, build_registry) is second


def test_the_cache_is_bounded(workers_module: Any) -> None:
    from tickwork.cloudflare import app
    from worker.executors import build_registry

    bindings = [object() for _ in range(app._MAX_API_RUNTIMES + 3)]
    runtimes = [app.api_runtime(types.SimpleNamespace(), db, build_registry) for db in bindings]
    assert len(app._API_RUNTIMES) == app._MAX_API_RUNTIMES
    # the most recently used stay
    assert app.api_runtime(types.SimpleNamespace(), bindings[-1], build_registry) is runtimes[-1]
    assert app.api_runtime(types.SimpleNamespace(), bindings[0], build_registry) is not runtimes[0]


async def test_a_failed_schema_check_is_tried_again(
        workers_module: Any, shape: str, db: Any, d1_bridge: Any) -> None:
    """A runtime remembered before the migrations were applied checks again."""
    from tests.support.d1.fixtures import d1_binding
    from tests.support.stores import apply_d1_schema
    from worker.entry import Default

    with d1_binding(d1_bridge, shape, yield_to_loop=True) as bare:  # type: ignore[arg-type]
        worker = Default(types.SimpleNamespace(),
                         types.SimpleNamespace(DB=bare, TICKWORK_TOKEN=TOKEN))
        assert (await send(worker, shape, "GET", "/v1/shared/queues"))[0] == 500
        await apply_d1_schema(bare)
        assert (await send(worker, shape, "GET", "/v1/shared/queues")) == (200, {"queues": []})
