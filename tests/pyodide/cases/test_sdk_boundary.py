"""What crosses between the ``workers`` SDK and tickwork, under each SDK shape
(runs inside Pyodide, under the runtime stand-in of inside/workerd.py).

The suite runs once under the real ``workers-runtime-sdk`` and once under
the built-in-shaped stand-in, whose env wrapper is applied once per
subclass and is not idempotent (measured in workerd: ``worker_class()``'s
class got its env wrapped twice, and every owner route answered 500).
"""

from __future__ import annotations

import json
from typing import Any

import pytest


def _deeper(cls: type, depth: int) -> type:
    """``cls`` subclassed ``depth`` more times, as a deployment might."""
    for level in range(depth):
        cls = type(f"{cls.__name__}Sub{level}", (cls,), {"__module__": cls.__module__})
    return cls


def _env_layers(env: Any) -> int:
    """How many SDK env wrappers ``env`` is (0: the runtime's JS object)."""
    from pyodide.ffi import JsProxy  # type: ignore[import-not-found]

    layers = 0
    while not isinstance(env, JsProxy):
        env = vars(env)["_env"]
        layers += 1
    return layers


async def test_the_worker_and_the_object_see_their_env_wrapped_once(deployment: Any) -> None:
    worker = deployment.worker()
    instance = deployment.instance()
    assert _env_layers(worker.env) == 1
    assert _env_layers(instance.env) == 1
    assert worker.env.TICKWORK_TOKEN == "tier-token"
    # A stub read through the Worker's env answers with the reply itself.
    reply = await worker.env.JOB_OWNERS.getByName("tenant").read("nothing")
    assert isinstance(reply, str) and json.loads(reply)["ok"] is True


@pytest.mark.parametrize("depth", [1, 3])
async def test_owner_routes_work_from_classes_subclassed_further(
    deployment: Any, depth: int,
) -> None:
    from worker.entry import Default

    deployment.default = _deeper(Default, depth)
    deeper_owner = _deeper(deployment.owner_class, depth)
    deployment.namespace.cls = deeper_owner
    status, text = await deployment.send("POST", "/v1/owners/tenant/jobs",
                                         {"job_id": "a", "queue": "q"})
    assert status == 201, text
    status, text = await deployment.send("GET", "/v1/owners/tenant/jobs/a")
    assert status == 200 and json.loads(text)["job"]["state"] == "queued", text
    assert _env_layers(deployment.worker().env) == 1
    assert _env_layers(deployment.instance().env) == 1
    await deployment.alarm()
    assert deployment.rows()["a"][:2] == ("settled", "completed")


async def test_the_handlers_get_the_runtimes_objects(deployment: Any) -> None:
    import sys

    from tickwork.cloudflare.alarm_wake import alarm_retry_count
    from tickwork.cloudflare.app import cron_slot

    bindings = sys.modules["tickwork_tier"].bindings
    controller = bindings.ScheduledController.new("*/5 * * * *", 1_796_000_000_000)
    assert cron_slot(controller) == "*/5 * * * *@1796000000000"
    assert alarm_retry_count(bindings.AlarmInvocationInfo.new(4)) == 4
    assert alarm_retry_count(bindings.AlarmInvocationInfo.new(0)) == 0
