"""Stand-ins for the Worker's bindings and requests, in both Workers SDK shapes.

* ``make_env``: ``env.JOB_OWNERS`` is ``tests.support.fakes.do_namespace``'s
  namespace over the real ``JobOwner`` (Workers RPC rules applied to every
  argument and reply), ``env.DB`` the test's D1 binding.
* ``request(...)``: the incoming request as ``Default.fetch`` sees it, the
  SDK's ``workers.Request`` wrapper (the same in both SDK shapes).
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping
from typing import Any

from tests.support.fakes.do_namespace import FakeDurableObjectNamespace

BASE_URL = "https://tickwork.example"
TOKEN = "s3cret-token"


def make_env(db: Any, sdk: str, *, token: str | None = TOKEN,
             write_drain: bool = False, pump: bool = False) -> types.SimpleNamespace:
    """The Worker's env: DB (D1), JOB_OWNERS (real ``JobOwner`` objects behind the
    namespace stand-in, storage in the same SDK shape) and the token secret.

    ``write_drain`` False sets ``TICKWORK_WRITE_DRAIN_MAX_TICKS = "0"`` (as a
    deployment may), so a test that is not about when shared jobs start
    finds them where its requests left them; ``pump`` adds the
    ``TICKWORK_PUMP`` namespace over the real ``SharedPump``."""
    from durable_objects.job_owner import JobOwner

    env = types.SimpleNamespace(DB=db)
    if token is not None:
        env.TICKWORK_TOKEN = token
    if not write_drain:
        env.TICKWORK_WRITE_DRAIN_MAX_TICKS = "0"
    env.JOB_OWNERS = FakeDurableObjectNamespace(JobOwner, env, sdk=sdk)  # type: ignore[arg-type]
    if pump:
        from durable_objects.pump import SharedPump

        env.TICKWORK_PUMP = FakeDurableObjectNamespace(SharedPump, env, sdk=sdk)  # type: ignore[arg-type]
    return env


class ExecutionContext:
    """The Worker's ``ctx``: ``waitUntil`` keeps what it is given, as the
    runtime keeps the invocation open for it; ``settle()`` waits for all of
    it (what the runtime would have let finish after the answer)."""

    def __init__(self) -> None:
        self.kept: list[Any] = []

    def waitUntil(self, promise: Any) -> None:
        # Under the fake pyodide (the built-in SDK shape) a Python awaitable
        # reaches JS as a proxy, which JS awaits as a thenable: the awaitable.
        unwrap = getattr(promise, "unwrap", None)
        self.kept.append(unwrap() if callable(unwrap) else promise)

    def passThroughOnException(self) -> None:
        return None

    async def settle(self) -> None:
        import asyncio

        while self.kept:
            kept, self.kept = self.kept, []
            await asyncio.gather(*kept)


def request(
    shape: str,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str | None = TOKEN,
    headers: Mapping[str, str] | None = None,
    raw: bytes | None = None,
) -> Any:
    """A request as ``Default.fetch`` receives it: the SDK's ``workers.Request``
    (the stand-in module's), which both SDK shapes hand over alike (measured:
    an ``http.HTTPMethod`` method, ``headers.get`` None for a missing header,
    dot segments already resolved). ``body`` is JSON-encoded unless ``raw``
    bytes are given. ``shape`` only picks the bindings (see ``make_env``)."""
    import workers  # the stand-in module, installed by the test

    del shape
    all_headers = dict(headers or {})
    if token is not None:
        all_headers.setdefault("authorization", f"Bearer {token}")
    data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
    if data:
        all_headers.setdefault("content-type", "application/json")
    return workers.Request(BASE_URL + path, method=method, headers=all_headers, body=data)


def body_state(request: Any) -> str:
    """What the Worker did with the body of a request made by ``request()``:
    ``"none"`` (no body), ``"unread"``, ``"drained"`` or ``"cancelled"``."""
    stream = request.body
    return "none" if stream is None else str(stream.state)


async def send(worker: Any, shape: str, method: str, path: str, body: Any = None,
               **options: Any) -> tuple[int, Any]:
    """``Default.fetch`` one request; (status, decoded JSON body)."""
    response = await worker.fetch(request(shape, method, path, body, **options))
    return response.status, json.loads(response.body.decode()) if response.body else None


def job(job_id: str, queue: str = "q", **fields: Any) -> dict[str, Any]:
    return {"job_id": job_id, "queue": queue, **fields}


#: The deployment's hooks, and the attribute of the Worker class holding each.
_HOOKS = {"build_registry": "_executors", "domain_statements": "_domain_statements"}


def use_deployment_hook(monkeypatch: Any, name: str, function: Any) -> None:
    """Replace one hook of ``worker/executors.py`` for a test: in the module
    (what code calling it by name sees) and in the Worker and pump classes
    made from it (``worker_class`` and ``pump_class`` keep the function they
    were given)."""
    from durable_objects.pump import SharedPump
    from worker import executors
    from worker.entry import Default

    monkeypatch.setattr(executors, name, function)
    monkeypatch.setattr(Default, _HOOKS[name], staticmethod(function))
    if name == "build_registry":  # the pump runs the Worker's shared jobs too
        monkeypatch.setattr(SharedPump, "_executors", staticmethod(function))
