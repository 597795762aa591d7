"""The tickwork Worker and its ``JobOwner`` objects as the tier deploys them.

``Deployment`` holds what ``wrangler.toml`` binds, as workerd hands it over
(``inside/workerd.py``): an env that is a JavaScript object with
``JOB_OWNERS`` (a JS ``DurableObjectNamespace`` over a ``JobOwner`` subclass
whose executor and clock come from the test), ``DB`` (Miniflare's real D1
as a JS ``D1Database``, ``schema/d1`` applied) and the ``TICKWORK_TOKEN``
secret. The classes come from whichever ``workers`` SDK the case runs under
(``inside/sdk_shapes.py``), and every call is an event of the runtime
stand-in: ``send()`` / ``fetch()`` hand the Worker a real JS Request,
``alarm()`` and ``scheduled()`` deliver those events, and a stub's methods
cross the RPC boundary into the object.
"""

from __future__ import annotations

import json
from typing import Any

import js  # type: ignore[import-not-found]
from pyodide.ffi import jsnull, to_js  # type: ignore[import-not-found]

from tests.pyodide.inside.workerd import Runtime
from tests.support import ScriptedExecutor
from tests.support.shared import ManualNow

TOKEN = "tier-token"
BASE_URL = "https://tickwork.example"


def tier_job_owner(executor: Any, clock: ManualNow) -> type:
    """The reference deployment's ``JobOwner`` with the test's executor and clock."""
    from durable_objects.job_owner import JobOwner

    class TierJobOwner(JobOwner):  # type: ignore[misc, valid-type]
        def _executor(self) -> Any:
            return executor

        def _now_ms(self) -> int:
            return clock()

    return TierJobOwner


class Deployment:
    """The reference deployment with a scripted executor and a manual clock;
    or, given ``job_owner`` and ``default``, a deployment's own classes as
    they are (their executors, the wall clock)."""

    def __init__(self, db: Any, *, job_owner: Any = None, default: Any = None) -> None:
        self.runtime = Runtime()
        self.clock = ManualNow()
        self.executor = ScriptedExecutor()
        self.owner_class = job_owner or tier_job_owner(self.executor, self.clock)
        self.default = default
        self.namespace = self.runtime.durable_objects(self.owner_class)
        self.runtime.bind("JOB_OWNERS", self.namespace.binding)
        self.runtime.bind("DB", self.runtime.d1(db))
        self.runtime.bind("TICKWORK_TOKEN", TOKEN)
        # The drain after a write is off unless a case turns it on (bind
        # TICKWORK_WRITE_DRAIN_MAX_TICKS): cases about anything else find
        # shared jobs where their requests left them.
        self.runtime.bind("TICKWORK_WRITE_DRAIN_MAX_TICKS", "0")
        #: The env as the runtime passes it (a JS object; set variables on it).
        self.env = self.runtime.env
        self.db = db
        self.events = self.runtime.events

    def close(self) -> None:
        self.namespace.close()
        self.runtime.close()

    # -------------------------------------------------------------- owners

    def stub(self, name: str = "tenant") -> Any:
        """The object's JS stub, called as JavaScript would (no SDK between)."""
        return self.namespace.binding.getByName(name)

    def sdk_stub(self, name: str = "tenant") -> Any:
        """The stub as the Worker reads it: through its env, in the SDK's wrappers."""
        return self.worker().env.JOB_OWNERS.getByName(name)

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

    def history_text(self, job_id: str, name: str = "tenant") -> str | None:
        """The job's ``history_json`` as stored."""
        value = self.namespace.storage(name).sql.exec(
            "SELECT history_json FROM tickwork_jobs WHERE job_id = ?", job_id).one().history_json
        return None if value is jsnull else str(value)

    async def alarm(self, name: str = "tenant", retry_count: int = 0) -> None:
        """Deliver the object's alarm, as the runtime does (it clears it first)."""
        await self.namespace.alarm(name, retry_count)

    async def armed(self, name: str = "tenant") -> int | None:
        value = await self.namespace.storage(name).getAlarm()
        return None if value is None or not isinstance(value, (int, float)) else int(value)

    # -------------------------------------------------------------- the Worker

    def worker(self) -> Any:
        """A new instance of the Worker class, built as the runtime builds it."""
        if self.default is None:
            from worker.entry import Default

            return self.runtime.worker(Default)
        return self.runtime.worker(self.default)

    @staticmethod
    def request(method: str, path: str, *, headers: dict[str, str] | None = None,
                body: bytes | None = None) -> Any:
        """A JS Request, as the runtime hands one to the Worker."""
        init: dict[str, Any] = {"method": method, "headers": dict(headers or {})}
        if body is not None:
            init["body"] = to_js(body)
        return js.Request.new(BASE_URL + path, to_js(init, dict_converter=js.Object.fromEntries))

    async def fetch(self, request: Any) -> Any:
        """One fetch event of the Worker; the JS Response."""
        return await self.runtime.fetch(self.worker(), request)

    async def send(self, method: str, path: str, body: Any = None, *,
                   token: str | None = TOKEN, headers: dict[str, str] | None = None,
                   raw: bytes | None = None) -> tuple[int, str]:
        """One request through the Worker's fetch handler; (status, body text)."""
        sent = dict(headers or {})
        if token is not None:
            sent["authorization"] = f"Bearer {token}"
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        if data is not None:
            sent.setdefault("content-type", "application/json")
        response = await self.fetch(self.request(method, path, headers=sent, body=data))
        return int(response.status), str(await response.text())

    async def scheduled(self, scheduled_ms: int) -> None:
        """One cron firing of the Worker's scheduled handler."""
        await self.runtime.scheduled(self.worker(), scheduled_ms)
