"""Durable Object alarm delivery on a simulated clock, for a ``FakeDurableObjectNamespace``.

Each object's alarm lives in its storage (``setAlarm`` / ``getAlarm`` /
``deleteAlarm`` of ``FakeDurableObjectStorage``). ``await run_due()``
delivers every alarm that is due at ``clock()``: it wakes the object if it
has no instance, clears the alarm and awaits ``alarm(alarm_info)``.

Rules reproduced (C = confirmed in docs/facts file, M = measured in real workerd,
O = observed by others and reported in public, A = assumption):

* C One alarm per object; ``setAlarm`` replaces it. During the handler
  ``getAlarm()`` is null unless the handler set a new one (docs: alarms API).
  A: modelled by deleting the alarm when the delivery starts.
* C At-least-once delivery: ``deliver_twice=True`` runs every successful
  delivery a second time with the same ``alarm_info`` (the runtime lost the
  acknowledgement). A: the second run does not clear an alarm the first one set.
* M When ``alarm()`` keeps raising it is delivered 7 times (``retryCount``
  0 to 6, ``isRetry`` from the second), at about +0, 2.2, 7.1, 15.8, 34.9,
  71.9 and 136.5 s after the first delivery (measured in real workerd), then
  never again: :data:`RETRY_OFFSETS_MS`. A: a retry is the stored alarm moved
  to the retry time, so a ``setAlarm`` by anyone before it fires replaces it
  (and its count starts again at 0).
* M Storage writes the handler made before it raised are kept, not rolled
  back; a persisted alarm fires again after the runtime restarts (it lives in
  the object's storage).
* C The constructor runs again on every wake-up.
* O An instance the alarm wakes has no ``ctx.id.name`` (undefined) for its
  whole life (observed by cloudflare/partykit#391, see
  ``FakeDurableObjectNamespace.instance``).
* A An eviction while ``alarm()`` runs (``evict(name)``: the isolate dies,
  the instance's storage handle stops working, its coroutine is cancelled)
  counts as a failed try and is retried like one.
* C An invocation has 15 minutes of wall time: ``Delivery.over_time_limit``
  flags a handler that took longer on the simulated clock (not enforced).
* A ``alarm_info`` is a plain JS object (attribute access), for both SDKs:
  the runtime calls the handler directly, not through the RPC wrapper.
* A One handler runs at a time per object: an object whose alarm is being
  delivered is skipped by a concurrent ``run_due``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal

from .do_namespace import FakeDurableObjectNamespace
from .pyodide_ffi import JsObject, jsnull

MAX_RETRIES = 6
#: When retry n (1 to 6) of a failing alarm is delivered, after the first
#: delivery (measured in real workerd: about 2.2, 7.1, 15.8, 34.9, 71.9, 136.5 s).
RETRY_OFFSETS_MS = (2_200, 7_100, 15_800, 34_900, 71_900, 136_500)
#: Wall time of one alarm invocation.
ALARM_TIME_LIMIT_MS = 15 * 60_000

Outcome = Literal["ok", "raised", "evicted"]


class SimClock:
    """Epoch milliseconds that move only when a test moves them."""

    def __init__(self, start_ms: int = 1_750_000_000_000) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError("the clock does not go back")
        self.now_ms += ms
        return self.now_ms

    def set(self, now_ms: int) -> None:
        if now_ms < self.now_ms:
            raise ValueError("the clock does not go back")
        self.now_ms = now_ms


@dataclass(frozen=True)
class Delivery:
    """One ``alarm()`` invocation and how it ended."""

    name: str
    retry_count: int
    outcome: Outcome
    error: BaseException | None = None
    duplicate: bool = False
    elapsed_ms: int = 0
    retry_at: int | None = None  # when a failed try is retried (None: not retried)

    @property
    def over_time_limit(self) -> bool:
        return self.elapsed_ms > ALARM_TIME_LIMIT_MS


class AlarmScheduler:
    """Delivers the alarms of ``namespace``'s objects on ``clock``."""

    def __init__(self, namespace: FakeDurableObjectNamespace, clock: SimClock, *,
                 deliver_twice: bool = False) -> None:
        self.namespace = namespace
        self.clock = clock
        self.deliver_twice = deliver_twice
        self.deliveries: list[Delivery] = []
        # name -> (alarm time, retry count, when the first try of the chain ran)
        self._retries: dict[str, tuple[int, int, int]] = {}
        self._inflight: dict[str, asyncio.Task[Any]] = {}

    async def alarm_of(self, name: str) -> int | None:
        """The object's stored alarm (epoch ms), or None."""
        value = await self.namespace.storage(name).getAlarm()
        return None if value is None or value is jsnull else int(value)

    async def next_due(self) -> int | None:
        """The earliest stored alarm among objects not being delivered, or None."""
        times = [when for name in self.namespace.names() if name not in self._inflight
                 if (when := await self.alarm_of(name)) is not None]
        return min(times, default=None)

    async def run_due(self, now: int | None = None) -> list[Delivery]:
        """Deliver (concurrently) every alarm due at ``now`` (default: ``clock()``)."""
        if now is not None:
            self.clock.set(now)
        due: list[tuple[str, int, int]] = []
        for name in self.namespace.names():
            if name in self._inflight:
                continue
            when = await self.alarm_of(name)
            if when is None or when > self.clock():
                continue
            retry_time, count, first = self._retries.pop(name, (None, 0, 0))
            if retry_time != when:  # a fresh alarm (set by anyone), not our retry
                count, first = 0, self.clock()
            due.append((name, count, first))
        batches = await asyncio.gather(*(self._deliver(name, count, first)
                                         for name, count, first in due))
        return [delivery for batch in batches for delivery in batch]

    async def run_until_idle(self, max_deliveries: int = 100) -> list[Delivery]:
        """Advance the clock from alarm to alarm and deliver, until none is set."""
        delivered: list[Delivery] = []
        while (when := await self.next_due()) is not None:
            if len(delivered) >= max_deliveries:
                raise AssertionError(f"alarms still firing after {max_deliveries} deliveries")
            self.clock.set(max(when, self.clock()))
            delivered += await self.run_due()
        return delivered

    async def evict(self, name: str) -> None:
        """Evict the object; a delivery in flight dies with it (and is retried)."""
        task = self._inflight.get(name)
        self.namespace.evict(name)
        if task is not None:
            task.cancel()
            await asyncio.wait([task])

    # -- internals --------------------------------------------------------------------
    async def _deliver(self, name: str, count: int, chain_start: int) -> list[Delivery]:
        storage = self.namespace.storage(name)
        await storage.deleteAlarm()
        first = await self._invoke(name, count, chain_start, duplicate=False)
        deliveries = [first]
        if first.outcome == "ok" and self.deliver_twice:
            deliveries.append(await self._invoke(name, count, chain_start, duplicate=True))
        self.deliveries += deliveries
        return deliveries

    async def _invoke(self, name: str, count: int, chain_start: int, *,
                      duplicate: bool) -> Delivery:
        namespace = self.namespace
        instance = namespace.instance(name, by_alarm=True)
        info = JsObject([("retryCount", float(count)), ("isRetry", count > 0)])
        started = self.clock()
        task = asyncio.ensure_future(instance.alarm(info))
        self._inflight[name] = task
        try:
            await asyncio.wait([task])
        finally:
            del self._inflight[name]
        elapsed = self.clock() - started
        error = None if task.cancelled() else task.exception()
        evicted = namespace.live_instance(name) is not instance
        if not evicted and not task.cancelled() and error is None:
            return Delivery(name, count, "ok", duplicate=duplicate, elapsed_ms=elapsed)
        retry_at = None
        if count < MAX_RETRIES:
            retry_at = max(self.clock(), chain_start + RETRY_OFFSETS_MS[count])
            await namespace.storage(name).setAlarm(retry_at)
            self._retries[name] = (retry_at, count + 1, chain_start)
        return Delivery(name, count, "evicted" if evicted else "raised", error, duplicate,
                        elapsed, retry_at)
