"""The tickwork Worker and its ``JobOwner`` objects as the tier deploys them.

``Deployment`` holds what ``wrangler.toml`` binds: ``JOB_OWNERS`` (the
namespace of ``inside/rpc.py`` over a ``JobOwner`` subclass whose executor
and clock come from the test), ``DB`` (Miniflare's real D1, a JS object,
with ``schema/d1`` applied) and the ``TICKWORK_TOKEN`` secret. ``send()``
hands the Worker's ``Default.fetch`` a real JS Request.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from pyodide.ffi import jsnull  # type: ignore[import-not-found]

from tests.pyodide.inside.rpc import Namespace, alarm_info
from tests.support import ScriptedExecutor
from tests.support.shared import ManualNow

TOKEN = "tier-token"
BASE_URL = "https://tickwork.example"


class Deployment:
    """The reference deployment with a scripted executor and a manual clock;
    or, given ``job_owner`` and ``default``, a deployment's own classes as
    they are (their executors, the wall clock)."""

    def __init__(self, db: Any, *, job_owner: Any = None, default: Any = None) -> None:
        from durable_objects.job_owner import JobOwner

        class TierJobOwner(JobOwner):
            def _executor(self) -> Any:
                return self.env.EXECUTOR

            def _now_ms(self) -> int:
                clock: ManualNow = self.env.CLOCK
                return clock()

        self.owner_class = job_owner or TierJobOwner
        self.default = default
        self.clock = ManualNow()
        self.executor = ScriptedExecutor()
        self.env = SimpleNamespace(CLOCK=self.clock, EXECUTOR=self.executor, DB=db,
                                   TICKWORK_TOKEN=TOKEN)
        self.namespace = Namespace(self.owner_class, self.env)
        self.env.JOB_OWNERS = self.namespace
        self.db = db

    # -------------------------------------------------------------- owners

    def stub(self, name: str = "tenant") -> Any:
        return self.namespace.getByName(name)

    def instance(self, name: str = "tenant") -> Any:
        return self.namespace.instance(name)

    def rows(self, name: str = "tenant") -> dict[str, tuple[Any, ...]]:
        """job_id -> (state, outcome, failure_reason, recoveries, cancellation_id),
        read from the object's storage."""
        cursor = self.namespace.storage(name).sql.exec(
            "SELECT job_id, state, outcome, failure_reason, recoveries, cancellation_id "
            "FROM tickwork_jobs ORDER BY sequence")
        rows = [[None if value is jsnull else value for value in values]
                for values in cursor.raw()]
        return {row[0]: tuple(row[1:]) for row in rows}

    async def alarm(self, name: str = "tenant", retry_count: int = 0) -> None:
        """Deliver the object's alarm, as the runtime does (it clears it first)."""
        storage = self.namespace.storage(name)
        await storage.deleteAlarm()
        await self.instance(name).alarm(alarm_info(retry_count))

    async def armed(self, name: str = "tenant") -> int | None:
        value = await self.namespace.storage(name).getAlarm()
        return None if value is None or not isinstance(value, (int, float)) else int(value)

    # -------------------------------------------------------------- the Worker

    def worker(self) -> Any:
        from worker.entry import Default

        return (self.default or Default)(SimpleNamespace(), self.env)

    async def send(self, method: str, path: str, body: Any = None, *,
                   token: str | None = TOKEN, headers: dict[str, str] | None = None,
                   raw: bytes | None = None) -> tuple[int, str]:
        """``Default.fetch`` one request; (status, body text)."""
        import workers  # the tier's SDK module (inside/sdk/workers.py)

        sent = dict(headers or {})
        if token is not None:
            sent["authorization"] = f"Bearer {token}"
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        if data is not None:
            sent.setdefault("content-type", "application/json")
        request = workers.Request.new(BASE_URL + path, method=method, headers=sent, body=data)
        response = await self.worker().fetch(request)
        return response.status, await response.text()
