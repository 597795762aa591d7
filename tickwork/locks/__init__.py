"""JobLock: run a scheduled job once across every instance that schedules it.

Register the same job on every instance (every Worker's cron trigger, every
process of a cluster) and wrap it in ``lock.run``: the first caller takes
the lock and runs it, everyone else gets ``ran=False`` and moves on.

    lock = JobLock(env.DB)                       # or a sqlite3 connection, or a psycopg pool
    run = await lock.run("nightly-report", 30 * 60_000, send_reports,
                         renew_every_ms=60_000, slot=scheduled_time)
    if not run.ran:
        ...                                      # another instance has it (run.reason)

What it guarantees, and how:

* **One holder.** Acquisition is one atomic statement that takes the lock
  when no row exists or the row was released or has expired, judged by the
  *database* clock. The caller's clock is never compared with anything, so a
  skewed instance can neither steal a live lock nor keep a dead one.
  Contention is a normal ``ran=False`` (``on_info`` is told); it never raises.
* **Fencing.** ``lease.fence`` grows by one every time the lock is taken, and
  never goes back (the lock row is never deleted). Pass it with the job's
  own writes and refuse writes carrying a smaller fence than one already
  seen, and a holder that lost its lock cannot overwrite its successor.
* **Renewal.** With ``renew_every_ms`` the lease is extended by ``ttl_ms``
  from database time every ``renew_every_ms`` through ``tickwork.leases``
  (one write in flight, one watchdog); ``lease.heartbeat`` extends it on
  demand. When a renewal finds the lock gone, a renewal fails, or the local
  watchdog sees the lease run out, ``lease.signal`` is aborted (with
  ``lease_lost``, ``lease_renew_failed`` or ``lease_expired``) and
  ``on_error`` is told.
* **Owner-only release.** The release frees the lock only while our private
  token still holds it, so a holder whose lock expired and was taken cannot
  free its successor's lock. Release is best effort: a failure goes to
  ``on_error`` and is never raised (the lock then lapses at its TTL).
* **Slots.** With ``slot`` (a cron trigger's scheduled time, a date), a run
  that returns records (name, slot) in the same atomic step as its release;
  later runs for that slot get ``ran=False`` with reason ``slot_done``. A
  run that raised records nothing, so the slot may run again. A run that
  returned after losing its lock still records its slot: the work happened.
  ``prune_slots`` deletes old records.

The lock table ships in ``schema/d1/0002_job_locks.sql`` and
``schema/postgres/0002_job_locks.sql``; over sqlite3 the lock creates it
itself. ``table_ddl`` gives the statements for a table of another name.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from tickwork.leases import Clock, Heartbeat, LeaseKeeper, LoopClock, StaleLease
from tickwork.locks.statements import DEFAULT_TABLE, SLOTS_SUFFIX, check_table, table_ddl
from tickwork.locks.stores import LockStore, lock_store_for
from tickwork.model.errors import InvalidArgument, SchemaError
from tickwork.model.jobs import MAX_ID_LENGTH, MAX_SAFE_INTEGER, check_safe_int, check_text
from tickwork.model.signals import AbortSignal

__all__ = [
    "DEFAULT_TABLE",
    "MAX_NAME_LENGTH",
    "MAX_SLOT_LENGTH",
    "JobLock",
    "LockLease",
    "LockRun",
    "table_ddl",
]

MAX_NAME_LENGTH = MAX_ID_LENGTH  # 256
MAX_SLOT_LENGTH = 256

#: Abort reason of ``lease.signal`` when the task running ``fn`` is cancelled.
INTERRUPTED = "interrupted"

T = TypeVar("T")
Notify = Callable[[str], object]
Now = Callable[[], int]


@dataclass(frozen=True, slots=True)
class LockRun(Generic[T]):
    """What ``JobLock.run`` did.

    * ``ran``: ``fn`` was called (and returned; had it raised, ``run`` would
      have re-raised).
    * ``result``: what ``fn`` returned (None when it did not run).
    * ``fence``: the lock's fence for this run (None when it did not run).
    * ``reason``: why it did not run: ``"held"`` (another holder's lease is
      live) or ``"slot_done"`` (this slot already ran successfully).
    * ``lost``: set when the lock was lost while ``fn`` ran (the lease's
      stale reason, e.g. ``"lease_lost"``); ``fn``'s writes may then overlap
      with a successor's, which its fence lets the job's store refuse.
    """

    ran: bool
    result: T | None = None
    fence: int | None = None
    reason: Literal["held", "slot_done"] | None = None
    lost: str | None = None


class LockLease:
    """What ``fn`` receives while it holds the lock."""

    __slots__ = ("_keeper", "fence", "heartbeat", "name", "signal", "slot")

    def __init__(self, name: str, fence: int, slot: str | None, signal: AbortSignal,
                 keeper: LeaseKeeper[Any], ttl_ms: int) -> None:
        self.name = name
        #: Grows by one every time the lock changes hands; never goes back.
        self.fence = fence
        #: The slot as stored (ints as decimal text), or None.
        self.slot = slot
        #: Aborted when the lock is lost (or the task is cancelled).
        self.signal = signal
        #: ``await lease.heartbeat.beat()`` extends the lease by the TTL now.
        self.heartbeat: Heartbeat = keeper.heartbeat(ttl_ms)
        self._keeper = keeper

    @property
    def held(self) -> bool:
        """False once the lock was lost (or the run finished)."""
        return self._keeper.active

    def __repr__(self) -> str:
        return f"LockLease(name={self.name!r}, fence={self.fence}, slot={self.slot!r})"


@dataclass(frozen=True, slots=True)
class _Hold:
    """One acquisition: what the lease keeper renews."""

    name: str
    owner: str  # private random token: only this run can renew or release
    fence: int


class JobLock:
    """An advisory lock per job name over a sqlite3 connection, D1 or PostgreSQL.

    ``store``: a ``sqlite3.Connection`` (the lock creates its tables), a D1
    binding (``env.DB``, either Workers SDK) or a psycopg 3
    ``AsyncConnectionPool`` (both from the ``0002_job_locks`` migrations).
    ``on_info(message)`` hears about skipped runs, ``on_error(message)``
    about failed releases and lost locks; both are synchronous and must not
    raise (if they do, the error goes to the event loop's exception handler).
    ``now`` overrides database time with a callable returning epoch
    milliseconds (for tests); it is still applied in SQL, never compared in
    Python. ``clock`` drives the local watchdog and renewals (default: the
    event loop).
    """

    def __init__(
        self,
        store: Any,
        *,
        table: str = DEFAULT_TABLE,
        on_info: Notify | None = None,
        on_error: Notify | None = None,
        now: Now | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.table = check_table(table)
        for field, callback in (("on_info", on_info), ("on_error", on_error), ("now", now)):
            if callback is not None and not callable(callback):
                raise InvalidArgument(field, "must be callable or None")
        self._store: LockStore = lock_store_for(store, self.table)
        self._on_info = on_info
        self._on_error = on_error
        self._now = now
        self._clock = clock

    @property
    def slot_table(self) -> str:
        return self.table + SLOTS_SUFFIX

    async def run(
        self,
        name: str,
        ttl_ms: int,
        fn: Callable[[LockLease], Awaitable[T]],
        *,
        renew_every_ms: int | None = None,
        slot: str | int | float | None = None,
    ) -> LockRun[T]:
        """Run ``await fn(lease)`` if the lock ``name`` can be taken; see the module doc.

        ``ttl_ms``: the lease length (1 to 2**53 - 1 ms); without renewal it
        should comfortably exceed the job's longest run. ``renew_every_ms``
        (shorter than ``ttl_ms``) renews it while ``fn`` runs. ``slot``: a
        string of 1 to 256 characters or an integer within +-(2**53 - 1)
        (an integral float, such as a JS timestamp, counts as that integer).
        Bad arguments raise ``InvalidArgument`` before any row is touched.
        """
        name = check_text("name", name, MAX_NAME_LENGTH, InvalidArgument)
        ttl_ms = check_safe_int("ttl_ms", ttl_ms, InvalidArgument, 1)
        if renew_every_ms is not None:
            renew_every_ms = check_safe_int("renew_every_ms", renew_every_ms,
                                            InvalidArgument, 1)
            if renew_every_ms >= ttl_ms:
                raise InvalidArgument(
                    "renew_every_ms",
                    f"must be shorter than ttl_ms ({ttl_ms}), or the lock lapses "
                    "between renewals")
        slot_key = _slot_key(slot)
        if not callable(fn):
            raise InvalidArgument("fn", "must be an async callable taking the lease")
        now = self._db_now()

        clock = self._clock if self._clock is not None else LoopClock()
        owner = secrets.token_hex(16)
        await self._store.ensure_tables()
        # Before the write: the durable lease starts later than this, so a
        # local deadline measured from here never outlives it.
        started_ms = clock.now_ms()
        fence = await self._acquire(name, owner, ttl_ms, slot_key, now)
        if fence is None:
            return await self._skipped(name, slot_key)

        hold = _Hold(name, owner, fence)
        signal = AbortSignal()
        keeper: LeaseKeeper[_Hold] = LeaseKeeper(
            hold, self._renew,
            on_stale=lambda stale: self._lost(hold, signal, stale),
            clock=clock, lease_ms=ttl_ms, deadline_ms=started_ms + ttl_ms,
        )
        lease = LockLease(name, fence, slot_key, signal, keeper, ttl_ms)
        if renew_every_ms is not None:
            keeper.start_periodic(every_ms=renew_every_ms)
        try:
            result: Any = fn(lease)
            if inspect.isawaitable(result):
                result = await result
        except BaseException as error:
            if isinstance(error, asyncio.CancelledError):
                signal._abort(INTERRUPTED)
            keeper.clear()
            # A failed run records no slot: that slot may run again.
            await self._release(hold, keeper, None)
            raise
        keeper.clear()
        released = await self._release(hold, keeper, slot_key)
        stale = keeper.stale
        lost = (str(stale.reason) if stale is not None
                else "lease_lost" if released is False else None)
        return LockRun(True, result, fence, lost=lost)

    async def prune_slots(self, older_than_ms: int, *, name: str | None = None) -> int:
        """Delete slot records completed at least ``older_than_ms`` ago (database
        time), for ``name`` or every name; returns how many. A pruned slot may
        run again, so keep records longer than a slot can be retried."""
        older_than_ms = check_safe_int("older_than_ms", older_than_ms, InvalidArgument, 0)
        if name is not None:
            name = check_text("name", name, MAX_NAME_LENGTH, InvalidArgument)
        now = self._db_now()
        await self._store.ensure_tables()
        return await self._store.prune_slots(older_than_ms, name, now)

    # ------------------------------------------------------------- internals

    async def _acquire(
        self, name: str, owner: str, ttl_ms: int, slot: str | None, now: int | None
    ) -> int | None:
        try:
            return await self._store.acquire(name, owner, ttl_ms, slot, now)
        except Exception as error:
            if _missing_table(error):
                raise SchemaError(
                    f"the job lock table {self.table!r} (or {self.slot_table!r}) does not "
                    f"exist: apply {self._store.migration or 'the lock migration'} "
                    "(or create it with tickwork.locks.table_ddl)") from error
            raise

    async def _skipped(self, name: str, slot: str | None) -> LockRun[Any]:
        if slot is not None and (await self._store.why_not(name, slot, self._db_now()))[0]:
            self._notify(self._on_info, f"job lock {name!r}: slot {slot!r} already ran "
                                        "successfully; skipped")
            return LockRun(False, reason="slot_done")
        self._notify(self._on_info, f"job lock {name!r} is held by another instance; skipped")
        return LockRun(False, reason="held")

    async def _renew(self, hold: _Hold, extra_ms: int) -> bool:
        """The lease keeper's renew port: one statement fenced on our token."""
        return await self._store.renew(hold.name, hold.owner, extra_ms, self._db_now())

    def _lost(self, hold: _Hold, signal: AbortSignal, stale: StaleLease) -> None:
        signal._abort(str(stale.reason))
        self._notify(self._on_error,
                     f"job lock {hold.name!r} (fence {hold.fence}) was lost while its job "
                     f"ran: {stale}")

    async def _release(
        self, hold: _Hold, keeper: LeaseKeeper[Any], slot: str | None
    ) -> bool | None:
        """Best effort: True released, False no longer ours, None failed (reported)."""
        try:
            released = await self._store.release(hold.name, hold.owner, hold.fence, slot,
                                                 self._db_now())
        except Exception as error:
            recorded = "" if slot is None else f" (slot {slot!r} was not recorded)"
            self._notify(self._on_error,
                         f"job lock {hold.name!r} (fence {hold.fence}): release failed{recorded}"
                         f", the lock lapses at its TTL: {type(error).__name__}: {error}")
            return None
        if not released and keeper.stale is None:
            self._notify(self._on_error,
                         f"job lock {hold.name!r} (fence {hold.fence}) was no longer held at "
                         "release: it expired and passed to another holder")
        return released

    def _db_now(self) -> int | None:
        if self._now is None:
            return None
        return check_safe_int("now()", self._now(), InvalidArgument, -MAX_SAFE_INTEGER)

    @staticmethod
    def _notify(callback: Notify | None, message: str) -> None:
        if callback is None:
            return
        try:
            callback(message)
        except Exception as error:
            asyncio.get_running_loop().call_exception_handler(
                {"message": "tickwork.locks: on_info/on_error callback raised",
                 "exception": error})


def _slot_key(slot: object) -> str | None:
    """The slot as stored: text; integers (and integral floats) as decimal text."""
    if slot is None:
        return None
    if isinstance(slot, float) and math.isfinite(slot) and slot.is_integer():
        slot = int(slot)
    if isinstance(slot, int) and not isinstance(slot, bool):
        return str(check_safe_int("slot", slot, InvalidArgument, -MAX_SAFE_INTEGER))
    if isinstance(slot, str):
        return check_text("slot", slot, MAX_SLOT_LENGTH, InvalidArgument)
    raise InvalidArgument(
        "slot", f"must be a string, an integer or None, got {type(slot).__name__}")


def _missing_table(error: BaseException) -> bool:
    if getattr(error, "sqlstate", None) == "42P01":  # PostgreSQL undefined_table
        return True
    return "no such table" in str(error)
