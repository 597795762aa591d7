"""JobOwner: the Durable Object that hosts one owner-local tickwork runtime.

One object per owner (``env.JOB_OWNERS.getByName(owner)``). Its SQLite
storage holds the jobs; its RPC methods (one per operation of
``tickwork.api.OPERATIONS``: ingest, read, cancel, fail_lane, purge, the
status reads) serve the Worker; its alarm runs the ticks.

The constructor runs again every time the object wakes up (after an
eviction, a restart, a deploy), so it holds no state that is not in storage
except the executions in flight, which die with the instance.

Alarm policy (class attributes, override in a subclass):

* ``concurrency`` (1): how many jobs the alarm runs at once, of different
  queues; the alarm handler claims a new job whenever one of its slots is
  free, so one slow job no longer holds every other queue of the owner.
* ``alarm()`` ticks until the engine is idle, or ``alarm_budget_ms`` (30 s)
  of wall time or ``alarm_max_ticks`` (1000) ticks are spent, then re-arms
  the alarm for "now" if work is left, for the earliest due time if jobs
  only wait for theirs, or deletes it: well inside the 15-minute limit of
  an alarm invocation, and other events get a turn between deliveries. The
  budget is checked between ticks: one job may run longer than it, and the
  jobs in flight when it is spent finish before the handler returns.
* A tick records a job's failure as its outcome; it raises only when storage
  (or the host) fails. Then ``alarm()`` raises on tries 0 to 2, and the
  runtime retries it with backoff (2 s, 4 s, ...). From retry 3 on it
  re-arms the alarm ``alarm_late_retry_delay_ms`` (60 s) ahead and returns,
  so the runtime's 6 retries do not run out while storage stays down. (If
  even that ``setAlarm`` fails it raises; should the runtime give up, the
  next RPC call of any kind, a read or a replayed mutation included,
  re-arms the alarm.)
* ``liveness_unknown`` (a probe that raised) ends the handler and re-arms
  ``alarm_liveness_retry_ms`` (5 s) ahead instead of "now", so an unanswerable
  probe cannot spin the alarm. ``busy`` ends it as well (another handler is
  ticking and will recompute when it ends).
* Delivering the same alarm twice is harmless: the second one finds the work
  done (idle) and recomputes.

What an RPC reply guarantees about the alarm: every RPC method brings the
alarm in step before it replies (``_after_call``). Unless an ``alarm()``
handler of this instance is running, a successful reply means the alarm is
armed if the owner has pending work (due now, or at the back-off an
unanswerable liveness probe set), armed for the earliest due time if its
jobs only wait for theirs, and deleted if it has none. While a
handler runs it holds the wake: the RPC's flush writes nothing, and the
handler brings the alarm in step when it ends (or, if that fails, the
runtime's retry of the handler or its late re-arm covers it, as above).

The directory of owners (``tickwork.cloudflare.owner_directory``): with a
``DB`` binding the object registers itself in D1's ``tickwork_owners``
after it first stores a job, and rewrites its summary at most once a
minute while it changes. Every RPC call that may write, and every alarm
whose ticks did something, notes a change; the alarm is armed for the
write owed (``_next_tick_at``), which it makes after its ticks and after
the alarm is in step. A failed write is logged and tried again a minute
later; it never fails or holds up a call or a tick.

Hooks for subclasses (underscored, so they are not RPC methods):
``_executors`` (the deployment's ``(env) -> Executor``, set by
``tickwork.cloudflare.job_owner_class``), or ``_executor()`` itself,
``_now_ms()``, ``_is_alive(job)`` and ``_event_hook()``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, ClassVar

from workers import DurableObject  # type: ignore[import-not-found, unused-ignore]

from tickwork import JobRecord, OwnerRuntime
from tickwork._pyodide import js_number
from tickwork.api import JobOwnerRpc, JobService, Operation, RuntimeService, rpc_methods
from tickwork.cloudflare.alarm_wake import AlarmWake, alarm_retry_count
from tickwork.cloudflare.bindings import binding, event_log, log_error
from tickwork.cloudflare.owner_directory import OwnerRegistration, object_name
from tickwork.cloudflare.runtime_env import RuntimeEnv
from tickwork.events import EventHook
from tickwork.hosts.ticking import tick_until_idle
from tickwork.ports.host import Executor, wall_clock_ms
from tickwork.stores import DurableObjectDatabase
from tickwork.stores.d1.owner_directory import D1OwnerDirectory

logger = logging.getLogger(__name__)


@rpc_methods
class JobOwner(JobOwnerRpc, RuntimeEnv, DurableObject):  # type: ignore[misc, unused-ignore]
    """A SQLite-backed Durable Object running ``OwnerRuntime`` on its alarm."""

    #: Wall-clock budget of one alarm() delivery, checked between ticks.
    alarm_budget_ms: ClassVar[int] = 30_000
    #: At most this many ticks per delivery.
    alarm_max_ticks: ClassVar[int] = 1_000
    #: alarm() raises (the runtime retries) while retryCount is below this...
    alarm_raise_below_retry: ClassVar[int] = 3
    #: ...and from then on re-arms the alarm this far ahead and returns.
    alarm_late_retry_delay_ms: ClassVar[int] = 60_000
    #: After a liveness probe raised, the next delivery comes no sooner than this.
    alarm_liveness_retry_ms: ClassVar[int] = 5_000
    #: How many jobs the alarm runs at once, of different queues (each queue
    #: still runs one at a time): the runtime's ``concurrency``.
    concurrency: ClassVar[int] = 1
    #: The deployment's ``(env) -> Executor`` (underscored: never an RPC method).
    _executors: ClassVar[Callable[[Any], Executor] | None] = None

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)  # self.env: one SDK wrapper, however many were applied
        storage = self.ctx.storage
        self._wake = AlarmWake(storage, next_at=self._next_tick_at, clock=self._now_ms)
        # Set before the runtime, whose start may ask _next_tick_at.
        self._registration: OwnerRegistration | None = None
        database = DurableObjectDatabase(storage)
        self.runtime = OwnerRuntime(
            database,
            execute=self._executor(),
            is_alive=self._is_alive,
            wake=self._wake,
            clock=self._now_ms,
            on_event=self._event_hook(),
            concurrency=self.concurrency,
        )
        self._jobs = RuntimeService(self.runtime)
        db = binding(self.env, "DB")
        if db is not None:
            self._registration = OwnerRegistration(database, self.runtime, D1OwnerDirectory(db),
                                                   log_error=log_error)

    # ------------------------------------------------------------ hooks
    # Underscored: the Python Workers runtime lists only public functions of
    # the class as RPC methods.

    def _executor(self) -> Executor:
        """The executor of this object's jobs: ``_executors(env)``."""
        executors = type(self)._executors
        if executors is None:
            raise TypeError(f"{type(self).__name__} has no executors: make the class with "
                            "tickwork.cloudflare.job_owner_class(executors), or set "
                            "_executors on a subclass")
        return executors(self.env)

    def _now_ms(self) -> int:
        return wall_clock_ms()

    def _event_hook(self) -> EventHook | None:
        """The runtime's event hook: a JSON line per transition on stdout at
        ``TICKWORK_LOG_LEVEL`` ("info" by default, "off" for none; see
        ``tickwork.logs``). Override to add your own (``tickwork.events.fan_out``)."""
        return event_log(self.env)

    def _is_alive(self, job: JobRecord) -> bool:
        # OwnerRuntime never probes a claim it is executing itself: it hands
        # the tokens of its own in-flight executions to the store and probes
        # only the other running claims. In a Durable Object the only
        # executions are this instance's, held in memory. So a claim the
        # runtime asks about was made by an earlier incarnation (the object
        # was evicted, crashed or redeployed, and its executions died with
        # it) or by a tick of this instance that ended without settling (a
        # storage error aborted it): nothing executes it any more. Not alive,
        # so the engine recovers it (requeue within its recovery budget,
        # else ``interrupted``; ``cancelled`` if a cancellation is recorded).
        return False

    def _job_service(self) -> JobService:
        return self._jobs

    def _next_tick_at(self) -> int | None:
        """When the alarm is owed: the runtime's next tick, or the directory's
        next write, whichever comes first."""
        at = self.runtime.next_tick_at()
        registration = self._registration
        owed = None if registration is None else registration.due_at()
        if owed is None:
            return at
        return owed if at is None else min(at, owed)

    # ------------------------------------------------------------ RPC
    # The RPC methods (one per operation of tickwork.api.OPERATIONS) are
    # defined on this class itself by @rpc_methods, in its own __dict__: some
    # workerd versions list only those, not inherited ones. Each decodes its
    # text arguments, calls this object's service and, through _after_call,
    # brings the alarm in step before it replies (see the module doc for what
    # that guarantees while an alarm handler runs). Every call does, reads and
    # calls that changed nothing (a replayed ingest or cancel) included:
    # whatever a caller does, even only polling, also repairs an alarm that
    # was lost (the runtime gave up retrying it, or the object died between
    # a commit and its setAlarm).

    async def _after_call(self, operation: Operation) -> None:
        registration = self._registration
        if registration is not None:
            try:
                registration.learn_key(object_name(self.ctx))
                if operation.writes:
                    registration.note_change(self._now_ms())
            except Exception as error:  # the directory never fails a call
                log_error(f"owner directory: noting {operation.name} failed: "
                          f"{type(error).__name__}: {error}")
        self._wake.mark_stale()
        await self._wake.flush()

    def _ticked(self, result: Any) -> None:
        """A tick did something (tick_until_idle reports no idle tick)."""
        assert self._registration is not None
        try:
            self._registration.note_change(self._now_ms())
        except Exception as error:  # the directory never fails a tick
            log_error(f"owner directory: noting a tick failed: "
                      f"{type(error).__name__}: {error}")

    # ------------------------------------------------------------ alarm

    async def alarm(self, alarm_info: Any = None) -> None:
        retry = alarm_retry_count(alarm_info)
        wake = self._wake
        try:
            wake.delay_until(None)
            wake.hold()
            registration = self._registration
            try:
                ended = await tick_until_idle(
                    self.runtime, max_ticks=self.alarm_max_ticks,
                    deadline_ms=self._now_ms() + self.alarm_budget_ms, now_ms=self._now_ms,
                    on_result=None if registration is None else self._ticked)
            finally:
                wake.release()
            if ended.stop == "liveness_unknown":
                wake.delay_until(self._now_ms() + self.alarm_liveness_retry_ms)
            wake.recompute()
            await wake.flush()
            # The directory's write comes after the alarm is in step, so a
            # slow or failing D1 holds up no job; it never raises.
            if registration is not None:
                owed = registration.due_at()
                await registration.publish_if_due(self._now_ms())
                if registration.due_at() != owed:  # written, or owed again later
                    wake.recompute()
                    await wake.flush()
        except Exception as error:
            if retry < self.alarm_raise_below_retry:
                raise  # the runtime retries alarm() with backoff
            when = self._now_ms() + self.alarm_late_retry_delay_ms
            logger.warning("tickwork alarm failed on retry %d (%s: %s); re-armed for %d",
                           retry, type(error).__name__, error, when)
            await self.ctx.storage.setAlarm(js_number(when, "alarm time"))
