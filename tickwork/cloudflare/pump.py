"""``SharedPump``: a Durable Object whose alarm drains the shared D1 queues
when their next waiting job falls due.

A Worker cannot wake itself at a time of its choosing, and the cron fires
once a minute at best; a Durable Object alarm fires at the millisecond it
was set for, survives eviction and restarts, and is retried when it fails.
So the pump holds one alarm per D1 binding (object name ``"DB"``), armed
for the earliest time a drain asked for (``arm``). At the alarm it drains
within ``PUMP_DRAIN`` and re-arms from what the drain left
(``shared_drains.pump_time``): "now" when it stopped on its budget, the
earliest waiting job's due time, or nothing. Every other drain (after a
write, a Queues batch, the cron) re-arms it the same way, so it needs no
state of its own beyond the alarm.

The pump holds no lock: its drain is fenced claim by claim, like any other.
Its only guard is against polling: an alarm that settled nothing never
re-arms sooner than ``PUMP_IDLE_GAP_MS`` later. A drain that raises is
logged and retried ``PUMP_RETRY_MS`` later (the cron drains meanwhile).

Binding (``wrangler.toml``): ``TICKWORK_PUMP``, class ``SharedPump``
(``tickwork.cloudflare.pump_class(executors)``), a SQLite-backed class.
Without the binding, shared jobs that wait for a due time start at the
cron's next firing instead.
"""

from __future__ import annotations

import time
import traceback
from typing import Any, ClassVar

from workers import DurableObject  # type: ignore[import-not-found, unused-ignore]

from tickwork._pyodide import js_number, load_jsnull
from tickwork.cloudflare import shared_drains
from tickwork.cloudflare.app import ExecutorFactory
from tickwork.cloudflare.bindings import event_log, log, log_error
from tickwork.cloudflare.runtime_env import RuntimeEnv
from tickwork.model.errors import InvalidArgument
from tickwork.model.jobs import MAX_SAFE_INTEGER

__all__ = ["PUMP_IDLE_GAP_MS", "PUMP_RETRY_MS", "SharedPump"]

#: An alarm that settled nothing re-arms no sooner than this (no polling).
PUMP_IDLE_GAP_MS = 1_000
#: After a drain that raised, the pump tries again this much later.
PUMP_RETRY_MS = 30_000


class SharedPump(RuntimeEnv, DurableObject):  # type: ignore[misc, unused-ignore]
    """The pump of one D1 binding's shared queues (see the module doc).
    Make the class with ``tickwork.cloudflare.pump_class(executors)``."""

    #: The deployment's ``(env) -> Executor`` (underscored: never an RPC method).
    _executors: ClassVar[ExecutorFactory | None] = None

    async def arm(self, at_ms: Any) -> int:
        """Drain at ``at_ms`` (epoch ms) unless an earlier alarm is already
        set; returns the alarm time now set. Both storage calls run without
        another event in between (the object's input gate)."""
        if isinstance(at_ms, float) and at_ms.is_integer():
            at_ms = int(at_ms)
        if not isinstance(at_ms, int) or isinstance(at_ms, bool) \
                or not 0 <= at_ms <= MAX_SAFE_INTEGER:
            raise InvalidArgument("at_ms", f"must be epoch milliseconds, got {at_ms!r}")
        return await self._arm_no_later_than(at_ms)

    async def alarm(self, alarm_info: Any = None) -> None:
        del alarm_info  # a retry drains like a first delivery
        try:
            executors = type(self)._executors
            if executors is None:
                raise TypeError(f"{type(self).__name__} has no executors: make the class "
                                "with tickwork.cloudflare.pump_class(executors)")
            budget = shared_drains.PUMP_DRAIN.from_env(self.env)
            if budget.max_ticks == 0:
                log("pump: off (TICKWORK_PUMP_MAX_TICKS is 0); the cron drains instead")
                return
            # Re-arming is drain_shared's last step, through the method
            # below, as every drain's is; only the idle guard is the pump's.
            drained = await shared_drains.drain_shared(
                self.env, executors(self.env), budget, on_event=event_log(self.env),
                arm=self._arm_after_own_drain)
            if drained is not None:
                log(f"pump: {len(drained.ticks)} tick(s), {drained.settled} job(s) settled")
        except Exception:
            log_error("pump: the drain failed:\n" + traceback.format_exc())
            await self._arm_no_later_than(self._now_ms() + PUMP_RETRY_MS)

    async def _arm_after_own_drain(self, drained: shared_drains.SharedDrain,
                                   at_ms: int | None) -> None:
        if at_ms is None:
            return
        if drained.settled == 0:
            at_ms = max(at_ms, drained.now + PUMP_IDLE_GAP_MS)
        await self._arm_no_later_than(at_ms)

    async def _arm_no_later_than(self, at_ms: int) -> int:
        storage = self.ctx.storage
        current = await storage.getAlarm()
        if current is None or current is load_jsnull() or at_ms < int(current):
            await storage.setAlarm(js_number(at_ms, "alarm time"))
            return at_ms
        return int(current)

    def _now_ms(self) -> int:
        return int(time.time() * 1000)
