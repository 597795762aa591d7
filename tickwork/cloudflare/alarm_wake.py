"""AlarmWake: ``wake.recompute()`` implemented with a Durable Object's one alarm.

The alarm is armed for ``next_at()``, the runtime's ``next_tick_at``: "now"
while a job is due or running, the earliest due time while jobs only wait
for theirs (a Durable Object whose one job is due in three days has one
alarm, for that moment: nothing polls), and deleted when there is nothing
at all. The runtime calls ``recompute()`` from
synchronous code (ingest, cancel, ...) and from its ticks, so ``recompute``
itself is synchronous: it marks the alarm state stale and, when an event
loop is running, starts one background drain. ``flush()`` waits for the
drain (and runs it if none could start); the host awaits it before it
answers a request, so once the caller has its reply the alarm matches the
pending work, except while the wake is held (below): then ``flush()``
writes nothing and the holder recomputes when it releases.

One drain at a time, and each one re-reads the state when it starts, so the
last recompute always wins: no interleaving of "arm" and "delete" can leave
pending work without an alarm.

``hold()`` / ``release()`` bracket an ``alarm()`` handler: while held,
recomputes only mark the state stale, and the handler recomputes once at the
end (holds nest, for overlapping deliveries; the last one out recomputes).

Runs on Pyodide: asyncio only, no threads.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Mapping
from typing import Any

from tickwork._pyodide import js_number, load_jsnull


class AlarmWake:
    """Keeps ``storage``'s alarm in step with ``next_at()`` (epoch ms, or None
    for no work); ``clock()`` is epoch ms."""

    def __init__(self, storage: Any, *, next_at: Callable[[], int | None],
                 clock: Callable[[], int]) -> None:
        self._storage = storage
        self._next_at = next_at
        self._clock = clock
        self._jsnull = load_jsnull()
        self._stale = False
        self._holds = 0
        self._not_before: int | None = None
        self._worker: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------ the wake API

    def recompute(self) -> None:
        """The runtime's hook: the alarm may have to change (applied in the background)."""
        self._stale = True
        if self._holds == 0:
            self._start_worker()

    def mark_stale(self) -> None:
        """Recompute at the next ``flush()`` without starting anything now."""
        self._stale = True

    async def flush(self) -> None:
        """Bring the alarm in step now (unless held); storage errors propagate."""
        worker = self._worker
        if worker is not None:
            await asyncio.wait([worker])
            self._retire(worker)
        await self._drain()

    # ---------------------------------------------------------- alarm handler

    def hold(self) -> None:
        self._holds += 1

    def release(self) -> None:
        if self._holds <= 0:
            raise RuntimeError("AlarmWake.release() without hold()")
        self._holds -= 1

    def delay_until(self, epoch_ms: int | None) -> None:
        """Arm no earlier than ``epoch_ms`` while it is in the future (None: no floor)."""
        self._not_before = epoch_ms

    # -------------------------------------------------------------- internals

    def _start_worker(self) -> None:
        if self._worker is not None and not self._worker.done():
            return  # the running drain loops until nothing is stale
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a constructor): the next flush() applies it
        worker = loop.create_task(self._drain())
        worker.add_done_callback(self._retire)
        self._worker = worker

    def _retire(self, worker: asyncio.Task[None]) -> None:
        if self._worker is worker:
            self._worker = None
        if not worker.cancelled():
            # Retrieve a failure so it is not logged as unhandled; the drain left
            # the state stale, so the next flush() retries and raises it there.
            worker.exception()

    async def _drain(self) -> None:
        async with self._lock:
            while self._stale and self._holds == 0:
                self._stale = False
                try:
                    await self._apply()
                except BaseException:
                    self._stale = True
                    raise

    async def _apply(self) -> None:
        storage = self._storage
        now = self._clock()
        next_at = self._next_at()
        if next_at is None:
            if await self._armed() is not None:
                await storage.deleteAlarm()
            return
        target = max(now, next_at)
        floor = self._not_before
        if floor is not None and floor > target:
            target = floor
        armed = await self._armed()
        if armed is not None and (armed <= now if target == now else armed == target):
            return  # already fires when it should: skip the write
        await storage.setAlarm(js_number(target, "alarm time"))

    async def _armed(self) -> int | None:
        """The alarm's epoch ms, or None when unset (JS null, None, or no number)."""
        value = await self._storage.getAlarm()
        if value is None or value is self._jsnull:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None  # unreadable: treat as unarmed, so the alarm gets (re)armed
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return int(value)


def alarm_retry_count(alarm_info: Any) -> int:
    """``alarm_info.retryCount`` read defensively: 0 when absent or unreadable.

    ``alarm_info`` may be None, a JS object proxy (attribute access), a
    mapping, or anything else. Without a usable ``retryCount``, ``isRetry``
    True counts as 1.
    """
    if alarm_info is None:
        return 0
    count = _field(alarm_info, "retryCount")
    if isinstance(count, (int, float)) and not isinstance(count, bool) \
            and math.isfinite(count) and count >= 0:
        return int(count)
    return 1 if _field(alarm_info, "isRetry") is True else 0


def _field(info: Any, name: str) -> Any:
    try:
        if isinstance(info, Mapping):
            return info.get(name)
        return getattr(info, name, None)
    except Exception:  # a JS proxy may throw on access; the count is only advisory
        return None
