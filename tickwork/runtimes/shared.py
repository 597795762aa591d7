"""SharedRuntime: the lifecycle over a job table many workers share.

Every operation is a plan of ``tickwork.lifecycle.operations``; this runtime
answers its requests from a ``SharedStore`` (D1 or PostgreSQL), with
``await``. What is shared-store specific here, and nowhere else:

* liveness comes from the claim's lease instead of a probe: a claim carries a
  private random token and a lease in database time, which the executing
  worker renews through ``tickwork.leases`` (single flight, one watchdog);
  every transition out of ``running`` is one statement fenced on the token
  and the lease, and any worker's next tick recovers a claim whose lease
  expired;
* every write commits on its own (D1 has no interactive transactions), so
  the plans' fenced writes and re-reads are what keep concurrent workers
  apart;
* ``drain()``, a worker loop, settles one job and claims the next in one
  commit or batch.

What stays in memory is only what cannot be durable: the executions running
here (with their abort signals and lease keepers) and the busy guard.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from tickwork.events import EventHook, check_hook, emit
from tickwork.leases import (
    DEFAULT_LEASE_MS,
    DEFAULT_RENEW_EVERY_MS,
    Clock,
    LeaseKeeper,
    LoopClock,
    StaleLease,
    StaleReason,
    watchdog_delay_ms,
)
from tickwork.lifecycle import operations
from tickwork.lifecycle.answers import AnswerTable, SharedAnswers, answer_table
from tickwork.lifecycle.drive import drive_async
from tickwork.lifecycle.requests import (
    Abort,
    Backlog,
    Claim,
    ClaimOrProbe,
    ClaimView,
    Commit,
    CreateSchedule,
    DeadLetterPage,
    DeleteLimit,
    DeleteRateLimit,
    DeleteRetention,
    DeleteSchedule,
    DueSchedules,
    Execute,
    Executing,
    FailLane,
    Find,
    FindCargo,
    FindSchedule,
    FireSlots,
    HasPendingWork,
    HistoryBuckets,
    Insert,
    InsertMany,
    JobsByIdPrefix,
    Limits,
    ListJobs,
    ListSchedules,
    NextWork,
    PauseQueue,
    PauseSchedule,
    Plan,
    Probe,
    PruneSettled,
    Purge,
    PutBackRateLimited,
    PutLimit,
    PutRateLimit,
    PutRetention,
    QueueCounts,
    QueueHead,
    QueuePaused,
    RateLimits,
    ReadClaim,
    ReadyAhead,
    RecordCancellation,
    RecordRedrive,
    RedriveApplied,
    ReplaceSchedule,
    Report,
    Requeue,
    RequeueForRetry,
    ResumeQueue,
    ResumeSchedule,
    RetentionPolicies,
    RunningJobs,
    Settle,
    SettledQueues,
    SettleNextCancelled,
    SettleRecovered,
    StatusGroups,
    StorageUsage,
    StoreNow,
    Wake,
    event_of,
)
from tickwork.lifecycle.rules import ABORT_CANCELLED, Settlement
from tickwork.lifecycle.surface import AsyncSurface, Declared, RuntimeOperations
from tickwork.model.errors import InvalidArgument
from tickwork.model.history import HISTORY_KEEP_MS, HISTORY_PRUNE_BATCH
from tickwork.model.jobs import (
    MAX_SAFE_INTEGER,
    JobRecord,
    ValidJob,
    check_safe_int,
)
from tickwork.model.limits import ConcurrencyLimit
from tickwork.model.outcomes import (
    TickResult,
)
from tickwork.model.rate_limits import RateLimit
from tickwork.model.retention import PRUNE_BATCH, RetentionPolicy, StorageReport
from tickwork.model.schedules import StoredSchedule
from tickwork.model.signals import AbortSignal, LeasedSignal
from tickwork.ports.host import SharedExecutor
from tickwork.ports.host import Wake as WakePort
from tickwork.ports.shared_store import SharedStore
from tickwork.runtimes import pruning
from tickwork.runtimes.draining import Budget, drain_slots
from tickwork.runtimes.execution import nonblocking, run_executor
from tickwork.runtimes.history import HistoryKeeper
from tickwork.runtimes.history import logger as history_logger
from tickwork.runtimes.pruning import MAX_BATCHES_PER_PASS, PruneSchedule

__all__ = ["MAX_DRAIN_CONCURRENCY", "LeasedSignal", "Now", "SharedRuntime"]

T = TypeVar("T")

logger = logging.getLogger("tickwork.events")

#: ``now()``: the test clock replacing database time (epoch ms), or None.
Now = Callable[[], int]

_BUSY = TickResult("busy")

#: The most loops one ``drain(concurrency=...)`` runs at once. Each holds at
#: most one job (and the claim it took ahead) and uses the store's
#: connections one statement at a time; beyond a few dozen, more jobs at once
#: is a matter for more workers, not a wider drain.
MAX_DRAIN_CONCURRENCY: Final = 64
#: "This runtime does not know when the next schedule slot is": look.
_UNKNOWN: Final = object()
#: How often (ms) a runtime looks for schedule slots it was not told of.
SCHEDULE_LOOK_MS = 60_000


@dataclass(slots=True)
class _Claim:
    """One claim of this runtime (``Held``; what the lease keeper renews).

    ``token`` is private and random; ``started_ms`` is the local clock just
    before the claim was written, so a lease measured from it ends no later
    than the durable one.
    """

    token: str
    started_ms: float
    job: JobRecord = None  # type: ignore[assignment]  # set by holding()
    signal: LeasedSignal = None  # type: ignore[assignment]

    @classmethod
    def fresh(cls, clock: Clock) -> _Claim:
        return cls(secrets.token_hex(16), clock.now_ms())

    def holding(self, job: JobRecord) -> _Claim:
        self.job, self.signal = job, LeasedSignal()
        return self


class SharedRuntime(RuntimeOperations, AsyncSurface):
    """Same operations and results as ``OwnerRuntime``, all of them async
    (each operation of ``RuntimeOperations`` drives its plan with ``await``);
    ``on_event`` likewise (``tickwork.events``)."""

    def __init__(
        self,
        store: SharedStore,
        *,
        execute: SharedExecutor,
        wake: WakePort,
        now: Now | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        renew_every_ms: int = DEFAULT_RENEW_EVERY_MS,
        clock: Clock | None = None,
        on_event: EventHook | None = None,
    ) -> None:
        lease_ms = check_safe_int("lease_ms", lease_ms, InvalidArgument, 1)
        renew_every_ms = check_safe_int("renew_every_ms", renew_every_ms, InvalidArgument, 1)
        if renew_every_ms >= lease_ms:
            raise InvalidArgument(
                "renew_every_ms",
                f"must be shorter than lease_ms ({lease_ms}), or leases lapse between renewals",
            )
        if now is not None and not callable(now):
            raise InvalidArgument("now", "must be a callable returning epoch milliseconds")
        self._store = store
        self._execute = nonblocking(execute)
        self._wake = wake
        self._now = now
        self._lease_ms = lease_ms
        self._renew_every_ms = renew_every_ms
        self._clock: Clock = clock if clock is not None else LoopClock()
        self._on_event = check_hook(on_event)
        self._executions: dict[str, _Claim] = {}
        self._busy = False
        self._schema_checked = False
        self._schema_lock: asyncio.Lock | None = None
        # The next slot of a running schedule as far as this runtime knows
        # (_UNKNOWN: look at the next tick), and when it last looked (the
        # monotonic clock): ticks look for slots only when one has come, or
        # every SCHEDULE_LOOK_MS for schedules other workers created.
        self._next_slot: int | object | None = _UNKNOWN
        self._slots_read_at = 0.0
        self._pruning = PruneSchedule()
        # A drain's loops waiting for work (drain_slots' Parking): told of
        # every claim and every change that may have made a job claimable.
        self._arrival_listeners: list[Callable[[], None]] = []
        # What happened per queue and minute, counted as each transition is
        # reported and written a few rows at a time (tickwork.runtimes.history).
        self._history = HistoryKeeper()
        self._answers = answer_table(_SharedRuntimeAnswers(self), SharedAnswers)

    # ------------------------------------- the declared operations, and reads

    def _perform_declared(self, declared: Declared[Any, Any], args: tuple[Any, ...],
                          kwargs: dict[str, Any]) -> Coroutine[Any, Any, Any]:
        """Every operation of ``RuntimeOperations``: its plan, driven with
        ``await`` (a write's then writes the history's counts once their
        minute has turned: a producer that never ticks writes them too)."""
        if not declared.writes:
            return self._drive(declared.plan(*args, **kwargs))
        return self._write(declared.plan(*args, **kwargs))

    async def _write(self, plan: Plan[T]) -> T:
        result = await self._drive(plan)
        if self._history.flush_due:
            await self._flush_history(self._wall_ms())
        return result

    async def check_ready(self) -> int:
        """Readiness: read the shared database (its schema version, one
        round trip, every call) and return the version; whatever the
        database raises propagates, and a missing migration is a SchemaError."""
        await self._store.check_schema()
        self._schema_checked = True
        return self._store.schema_version

    # -------------------------------------------------------------- retention

    async def prune_if_due(self) -> int:
        """Prune settled history when a pass is due (``tickwork.runtimes.pruning``,
        by this machine's clock, or the test clock): up to
        ``MAX_BATCHES_PER_PASS`` prune batches, each queue's part one
        transaction; how many jobs were deleted. The shared drain and
        ``tickwork worker`` call it between their loops; any number of
        workers may prune at once (each delete is fenced). A database
        failure is logged, not raised: the next pass tries again."""
        now = self._wall_ms()
        if not self._pruning.due(now):
            return 0
        total = last = 0
        try:
            for _ in range(MAX_BATCHES_PER_PASS):
                last = await self.prune()
                total += last
                if last < PRUNE_BATCH:
                    break
        except Exception:
            pruning.logger.exception("tickwork could not prune settled jobs; trying again later")
            last = 0
        try:
            # History past its 7 days: one bounded batch a pass.
            await self._store.prune_history(self._db_now(), HISTORY_KEEP_MS,
                                            HISTORY_PRUNE_BATCH)
        except Exception:
            pruning.logger.exception("tickwork could not prune old history; trying again later")
        self._pruning.ran(now, last)
        return total

    # ---------------------------------------------------------------- history

    @property
    def history_pending(self) -> bool:
        """Whether counts of the history wait in memory to be written."""
        return bool(len(self._history.tally))

    async def flush_history(self, *, sample: bool = True) -> None:
        """Write the counts of the history not written yet (one statement),
        and sample the queues' depth and head wait when a minute has turned
        since this runtime's last sample (or none was taken; ``sample=False``:
        counts only). The shared
        drain, ``tickwork worker`` and the Worker's API call it after each
        loop or request, and on close; a database failure is logged, not
        raised, and the counts are kept for the next flush. It holds one
        connection at a time, and only while nothing else of this runtime's
        caller holds one."""
        await self._flush_history(self._wall_ms(), sample=sample)

    async def _flush_history(self, now: int, *, sample: bool = True) -> None:
        flush = self._history.begin(now, sample=sample)
        if flush is None:
            return
        store = self._store
        if flush.rows:
            try:
                await store.add_history(flush.rows)
            except Exception:
                history_logger.exception("tickwork could not write the history's counts; "
                                         "keeping them for the next flush")
                self._history.add_failed(flush, now)
        if flush.sample:
            try:
                await store.sample_history(self._db_now(), flush.since, flush.queues)
            except Exception:
                history_logger.exception("tickwork could not sample the queues' depth")

    # -------------------------------------------------------------- schedules

    async def fire_schedules(self) -> int:
        """Create the jobs of the schedule slots that have come (ticks do
        this when a slot has come); how many were created. Safe on any
        number of workers at once: each slot gets one job."""
        self._next_slot = _UNKNOWN
        return await self._drive(operations.fire_schedules())

    async def next_work(self) -> tuple[bool, int | None, int]:
        """``(pending, next_due, now)`` in one read: whether any work is due
        or running, the earliest due time of waiting work (a delay, a
        backoff, a rate limit's release, a schedule slot; None: nothing
        waits) and the database's clock. For a host deciding when to drain
        next (``tickwork.cloudflare.shared_drains``)."""
        pending, next_due, now = await self._drive(operations.next_work())
        return bool(pending), next_due, now

    # ------------------------------------------------------------------- tick

    async def tick(self) -> TickResult:
        """Recover an expired claim, settle a cancelled job, or claim and run one."""
        if self._busy:
            return _BUSY
        self._busy = True
        try:
            if self._history.flush_due:
                await self._flush_history(self._wall_ms())
            reporting = self._on_event is not None  # the claim's report: the hook's only
            result, _ = await self._drive(operations.tick(None, reporting=reporting))
            return result
        finally:
            self._busy = False

    async def drain(
        self, *, max_ticks: int | None = None, budget_ms: int | None = None,
        concurrency: int = 1,
    ) -> list[TickResult]:
        """Tick until there is nothing to do, ``max_ticks`` ticks ran or
        ``budget_ms`` passed (by the runtime's monotonic clock); returns what
        each tick did (idle ticks excluded). A tick that answers busy ends it.

        With a budget, a drain that runs out of due work while a waiting job
        falls due within the budget sleeps until it is due (by database
        time, re-read after the sleep) and goes on, instead of returning or
        spinning; without a budget it returns as soon as nothing is due.

        A worker loop: the drain loop of ``tickwork.runtimes.draining``. When
        the budget lets it run one more tick as a job settles, that
        settlement and the claim of the next job share one commit
        (PostgreSQL) or one batch (D1), halving the commits per job; a claim
        taken ahead is always run by this same call, or put back unstarted
        when the drain raises or is cancelled first (one fenced statement;
        should that fail too, the claim stays running under its lease, which
        any worker recovers once it expires). Between carried claims it
        fills the schedule slots that have come. While it runs, ``tick()``
        on this runtime reports busy.

        ``concurrency`` (1 to ``MAX_DRAIN_CONCURRENCY``) runs that many such
        loops at once, as slots (``drain_slots``), so up to that many jobs
        execute together, each under its own lease; as on many workers, a
        queue's jobs still run one at a time, so the loops overlap jobs of
        different queues. ``max_ticks`` counts every loop's ticks and the
        results come in the order the loops produced them. A loop that finds
        nothing while others run jobs waits until one of them claims a job
        or this runtime stores one. When one loop raises, the others claim
        nothing more, finish the jobs they hold, and the first failure
        propagates.
        """
        concurrency = check_safe_int("concurrency", concurrency, InvalidArgument, 1)
        if concurrency > MAX_DRAIN_CONCURRENCY:
            raise InvalidArgument("concurrency", f"must be at most {MAX_DRAIN_CONCURRENCY}")
        clock = self._clock
        budget = Budget.of(max_ticks=max_ticks, budget_ms=budget_ms, now_ms=clock.now_ms)
        deadline = budget.deadline_ms
        look_again = None if deadline is None else lambda: self._sleep_until_due(deadline)
        results: list[TickResult] = []
        with self._ticker() as held:
            if not held:
                return [_BUSY]
            steps = [_SharedSteps(self) for _ in range(concurrency)]
            try:
                await drain_slots(steps, budget, parking=_SharedParking(self),
                                  on_result=results.append, yielding=False,
                                  look_again=look_again)
            finally:
                # Only a loop that raised or was cancelled ends carrying.
                for loop_steps in steps:
                    await loop_steps.put_back()
        return results

    @contextmanager
    def _ticker(self) -> Iterator[bool]:
        """Hold the runtime's busy guard for a drain: True when it was free
        (and is now held until the block ends), False when a tick or another
        drain holds it."""
        if self._busy:
            yield False
            return
        self._busy = True
        try:
            yield True
        finally:
            self._busy = False

    async def _sleep_until_due(self, deadline: float) -> bool:
        """Sleep until the next waiting job is due, if that is before ``deadline``
        (the runtime's monotonic clock); False when there is none in time.

        Only a waiting job counts: other pending work the idle tick could not
        take (a queue whose job runs on another worker) ends the drain, as
        ticking again at once would spin. A job already due but not yet in
        the ready set means one more tick (which moves it), never a loop:
        once moved it no longer waits."""
        clock = self._clock
        _, next_due, now = await self._drive(operations.next_work())
        if next_due is None:
            return False
        wait_ms = max(0, next_due - now)
        if clock.now_ms() + wait_ms >= deadline:
            return False
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake_up() -> None:
            if not done.done():
                done.set_result(None)

        handle = clock.call_later(wait_ms, wake_up)
        try:
            await done
        finally:
            handle.cancel()
        return True

    # ------------------------------------------------------------ the driver

    async def _drive(self, plan: Plan[T], answers: AnswerTable | None = None) -> T:
        """Run ``plan``; the schema is checked once per runtime, before its
        first request is answered (after the plan validated its arguments)."""
        before = None if self._schema_checked else self._check_schema
        return await drive_async(plan, self._answers if answers is None else answers,
                                 _AWAITED, before_first=before)

    def _report(self, report: Report) -> None:
        """Tell the hook of a transition: every write here committed on its
        own before its answer returned, so it is durable. Never raises."""
        try:
            at = self._wall_ms()
            self._history.count(report, at)
        except Exception:  # a test clock that raised: log, go on
            logger.exception("tickwork could not count a %s transition", report.kind)
            return
        hook = self._on_event
        if hook is None:
            return
        try:
            duration = None
            claim = report.subject
            if isinstance(claim, _Claim) and report.kind != "claimed":
                # This machine's monotonic clock, from just before the claim:
                # database time and this clock may disagree.
                duration = max(0, int(self._clock.now_ms() - claim.started_ms))
            event = event_of(report, at, duration)
        except Exception:
            logger.exception("tickwork could not build a %s event", report.kind)
            return
        emit(hook, event)

    # ------------------------------------------------------------- tick steps

    async def _claim_or_probe(self, request: ClaimOrProbe) -> tuple[_Claim | None,
                                                                     Probe | None]:
        claim = _Claim.fresh(self._clock)
        # One round trip where the store allows: the guarded claim, and the
        # probe when it claimed nothing.
        job, (expired, cancelled_waiting) = await self._store.claim_or_probe(
            claim.token, self._lease_ms, self._db_now())
        if job is not None:
            self._work_may_have_arrived()  # one claimed: there may be more
            return claim.holding(job), None
        return None, Probe(expired, cancelled_waiting,
                           blocked=expired is not None or cancelled_waiting)

    async def _claim(self, request: Claim) -> _Claim | None:
        claim = _Claim.fresh(self._clock)
        job = await self._store.claim(claim.token, self._lease_ms, self._db_now(),
                                      guarded=False)
        return None if job is None else claim.holding(job)

    async def _execute_claim(self, request: Execute) -> tuple[Settlement,
                                                               asyncio.CancelledError | None]:
        claim: _Claim = request.held  # type: ignore[assignment]
        job, signal = claim.job, claim.signal
        clock = self._clock
        keeper: LeaseKeeper[_Claim] = LeaseKeeper(
            claim,
            self._renew,
            on_stale=lambda stale: _abort_stale(signal, stale),
            clock=clock,
            lease_ms=self._lease_ms,
        )
        # The claim's lease started after claim.started_ms (database time
        # may differ; only durations matter), so the local watchdog never
        # outlives the durable lease.
        deadline_ms = claim.started_ms + self._lease_ms
        started_ms = clock.now_ms()
        if watchdog_delay_ms(deadline_ms, started_ms) <= 0:
            keeper.watch(deadline_ms)  # already lost: the signal is aborted before it runs
        renew_every_ms = self._renew_every_ms

        def keep_lease() -> None:
            # Armed once the executor first waits: no timer can fire before
            # the loop runs, and most jobs of a worker loop finish without
            # waiting, so their timers would only be set and cancelled. The
            # watchdog's deadline and the first renewal's time are the ones
            # arming at the start would have given.
            keeper.watch(deadline_ms)
            keeper.start_periodic(every_ms=renew_every_ms, since_ms=started_ms)

        signal.heartbeat = keeper.heartbeat()
        self._executions[job.job_id] = claim
        try:
            return await run_executor(self._execute, job, signal, on_suspend=keep_lease)
        except BaseException:
            self._release(claim)
            raise
        finally:
            # No renewal may run once the settlement is written: stop first.
            keeper.clear()

    async def _settle(self, request: Settle) -> tuple[bool, _Claim | None]:
        claim: _Claim = request.held  # type: ignore[assignment]
        job, settlement = claim.job, request.settlement
        try:
            if not request.claim_next:
                written = await self._store.settle(job.sequence, claim.token, settlement,
                                                   self._db_now(), cancelled=request.cancelled)
                return written, None
            carried = _Claim.fresh(self._clock)
            written, next_job = await self._store.settle_and_claim(
                job.sequence, claim.token, settlement, self._db_now(),
                next_token=carried.token, lease_ms=self._lease_ms)
            return written, None if next_job is None else carried.holding(next_job)
        finally:
            self._release(claim)

    async def _requeue_for_retry(self, request: RequeueForRetry) -> JobRecord | None:
        claim: _Claim = request.held  # type: ignore[assignment]
        try:
            return await self._store.retry(claim.job.sequence, claim.token, request.settlement,
                                           request.delay_ms, self._db_now())
        finally:
            self._release(claim)

    async def _put_back_rate_limited(self, request: PutBackRateLimited) -> JobRecord | None:
        claim: _Claim = request.held  # type: ignore[assignment]
        try:
            return await self._store.put_back_rate_limited(
                claim.job.sequence, claim.token, request.kind, request.key, request.until,
                self._db_now())
        finally:
            self._release(claim)

    # --------------------------------------------------------- schedules

    def _slot_may_be_due(self) -> bool:
        """Whether the next tick should look for schedule slots: this runtime
        knows one has come, or does not know (it has not read yet, or not for
        SCHEDULE_LOOK_MS: another worker may have created a schedule)."""
        next_slot = self._next_slot
        if next_slot is _UNKNOWN or self._slots_stale():
            return True
        return next_slot is not None and next_slot <= self._wall_ms()  # type: ignore[operator]

    def _slots_stale(self) -> bool:
        return self._clock.now_ms() - self._slots_read_at >= SCHEDULE_LOOK_MS

    def _wall_ms(self) -> int:
        """Epoch ms: the test clock, else this machine's (database time judges
        the slots; this only decides when to ask)."""
        return self._now() if self._now is not None else int(time.time() * 1000)

    async def _due_schedules(self, request: DueSchedules) -> tuple[
            list[StoredSchedule], int | None]:
        if not self._slot_may_be_due():
            return [], None
        looked = self._next_slot is _UNKNOWN or self._slots_stale()
        if looked:
            # One read says when the next slot comes; only a slot that has
            # come costs the read of the due schedules.
            await self._read_next_slot()
            if not self._slot_may_be_due():
                return [], None
        due, now = await self._store.due_schedules(self._db_now())
        if not due and not looked:
            await self._read_next_slot()  # this machine's clock ran ahead of the database's
        return due, now

    async def _fire_slots(self, request: FireSlots) -> list[ValidJob]:
        created, next_slot = await self._store.fire_slots(
            request.schedule, request.slots, request.next_at, self._db_now())
        self._learn_next_slot(next_slot)
        return created

    async def _read_next_slot(self) -> None:
        self._learn_next_slot(await self._store.next_slot())

    def _learn_next_slot(self, next_slot: int | None) -> None:
        """What a read of the database said of the next schedule slot, now."""
        self._next_slot = next_slot
        self._slots_read_at = self._clock.now_ms()

    async def _schedules_changed(self, changed: Awaitable[bool]) -> bool:
        if await changed:
            self._next_slot = _UNKNOWN
            return True
        return False

    async def _next_work(self, answer: Awaitable[Sequence[Any]]) -> Sequence[Any]:
        # The same read says when the next schedule slot comes: kept, so a
        # drain that waits for it fills it when it wakes.
        pending, next_due, now, next_slot = await answer
        self._learn_next_slot(None if next_slot is None else int(next_slot))
        return pending, next_due, now

    async def _read_claim(self, request: ReadClaim) -> ClaimView | None:
        return await self._store.read_claim(request.held.job.sequence, self._db_now())

    async def _renew(self, claim: _Claim, extra_ms: int) -> bool:
        """The lease keeper's renew port: one fenced statement."""
        answer = await self._store.renew(claim.job.sequence, claim.token, extra_ms,
                                         self._db_now())
        if answer == "cancelled":
            claim.signal._abort(ABORT_CANCELLED)
        return answer != "lost"

    # ---------------------------------------------------------------- helpers

    async def _check_schema(self) -> None:
        """Check the schema once per runtime, before its first operation:
        once, too, when a drain's loops all start at the same moment (the
        others wait for the first one's check)."""
        if self._schema_checked:
            return
        if self._schema_lock is None:
            self._schema_lock = asyncio.Lock()
        async with self._schema_lock:
            if not self._schema_checked:
                await self._store.check_schema()
                self._schema_checked = True

    def _db_now(self) -> int | None:
        if self._now is None:
            return None
        value = self._now()
        return check_safe_int("now()", value, InvalidArgument, -MAX_SAFE_INTEGER)

    def executing(self) -> list[JobRecord]:
        """The jobs this runtime is executing right now (as claimed)."""
        return [claim.job for claim in self._executions.values()]

    async def recheck_executing(self) -> int:
        """Read the stored state of every job this runtime executes and abort
        the ones another runtime cancelled (reason ``cancelled``) or settled
        (``lease_lost``, what the next renewal would report), now instead of
        at that renewal. For hosts that run several
        runtimes in one process and take cancellations through one of them.
        Returns how many executions were told to stop.
        """
        stopped = 0
        for job in self.executing():
            current = await self._store.find(job.job_id)
            if current is None:
                continue  # erased by a purge: the next renewal finds the claim gone
            if current.state == "settled":
                # Settled by someone else (a failed lane, or a recovery after
                # the lease lapsed): the claim is gone, as a renewal would say.
                reason = str(StaleReason.LOST)
            elif current.cancellation_id is not None:
                reason = ABORT_CANCELLED
            else:
                continue
            claim = self._executions.get(job.job_id)
            if claim is not None and claim.signal._abort(reason):
                stopped += 1
        return stopped

    def _release(self, claim: _Claim) -> None:
        if self._executions.get(claim.job.job_id) is claim:
            del self._executions[claim.job.job_id]

    def _abort_all(self, request: Abort) -> None:
        for job_id in request.job_ids:
            claim = self._executions.get(job_id)
            if claim is not None:
                claim.signal._abort(request.reason)

    def _work_may_have_arrived(self) -> None:
        """Tell a drain's waiting loops that a job may have become claimable."""
        for listener in self._arrival_listeners:
            listener()

    async def _wake_now(self) -> None:
        self._work_may_have_arrived()
        result = self._wake.recompute()
        if inspect.isawaitable(result):
            await result


class _SharedParking:
    """What ``drain_slots`` asks of a shared runtime while a loop waits: it
    knows no due time without a read (the loop that finds nothing last
    sleeps until one, in ``drain``'s ``look_again``), and it tells of each
    claim and each change it made that may free a job."""

    __slots__ = ("_runtime",)

    def __init__(self, runtime: SharedRuntime) -> None:
        self._runtime = runtime

    def due_in_ms(self) -> float | None:
        return None

    def listen(self, arrived: Callable[[], None]) -> Callable[[], None]:
        listeners = self._runtime._arrival_listeners
        listeners.append(arrived)
        return lambda: listeners.remove(arrived)


class _SharedSteps:
    """One drain loop of a shared runtime (the ``Steps`` of
    ``tickwork.runtimes.draining``), run while ``drain`` holds the
    runtime's busy guard: each ``step`` ticks, or runs the claim the step
    before it carried (after filling the schedule slots that have come, as
    a tick would first)."""

    __slots__ = ("_carried", "_runtime")

    def __init__(self, runtime: SharedRuntime) -> None:
        self._runtime = runtime
        self._carried: _Claim | None = None

    @property
    def carrying(self) -> bool:
        return self._carried is not None

    @property
    def running(self) -> bool:
        """A claim taken ahead. (A fresh claim's round trip ends after the
        step's first await: it is announced to the waiting loops by the
        runtime's listeners as it lands instead.)"""
        return self._carried is not None

    async def put_back(self) -> None:
        """Put back the claim this loop took ahead and did not run (its loop
        raised or was cancelled): fenced on its token, so a claim recovered
        or settled meanwhile is left alone. A failure here is logged: the
        claim then stays running until its lease expires and a tick
        recovers it."""
        carried, self._carried = self._carried, None
        if carried is None:
            return
        runtime = self._runtime
        try:
            if await runtime._store.release_claim(carried.job.sequence, carried.token):
                await runtime._wake_now()
        except Exception:
            logger.exception("tickwork could not put back the claim of job %s taken ahead",
                             carried.job.job_id)

    async def step(self, *, claim_next: operations.ClaimNext = False) -> TickResult:
        runtime, carried = self._runtime, self._carried
        # Between two steps no connection is held (a carried claim is a row
        # under its lease, not a transaction): the history's counts are
        # written here once their minute has turned.
        if runtime._history.flush_due:
            await runtime._flush_history(runtime._wall_ms())
        reporting = runtime._on_event is not None  # the claim's report: the hook's only
        if carried is None:
            plan = operations.tick(None, claim_next=claim_next, reporting=reporting)
        else:
            if runtime._slot_may_be_due():
                # A long run of carried claims still fills schedule slots
                # (should that fail, the claim is still carried: put back).
                await runtime._drive(operations.fire_schedules())
            self._carried = None  # the run is now the plan's to settle
            plan = operations.run(carried, claim_next=claim_next, reporting=reporting)
        result, held = await runtime._drive(plan)
        self._carried = held if isinstance(held, _Claim) else None
        return result


class _SharedRuntimeAnswers(SharedAnswers):
    """How a shared runtime answers each request: one awaited statement (or
    batch) of its store, in database time (``now`` None) unless the runtime
    was given a clock, or the runtime's own steps (claims under leases,
    executions, settlements; see ``SharedRuntime``)."""

    __slots__ = ("_db_now", "_runtime", "_store")

    def __init__(self, runtime: SharedRuntime) -> None:
        self._runtime = runtime
        self._store = runtime._store
        self._db_now = runtime._db_now

    # reads
    def find(self, request: Find) -> Awaitable[JobRecord | None]:
        return self._store.find(request.job_id)

    def find_cargo(self, request: FindCargo) -> Awaitable[ValidJob | None]:
        return self._store.find_cargo(request.job_id)

    def queue_head(self, request: QueueHead) -> Awaitable[JobRecord | None]:
        return self._store.queue_head(request.queue)

    def has_pending_work(self, request: HasPendingWork) -> Awaitable[bool]:
        return self._store.has_pending_work(self._db_now())

    def next_work(self, request: NextWork) -> Awaitable[Sequence[Any]]:
        return self._runtime._next_work(self._store.next_work(self._db_now()))

    def status_groups(self, request: StatusGroups) -> Awaitable[Sequence[Sequence[Any]]]:
        return self._store.status_groups()

    def queue_counts(self, request: QueueCounts) -> Awaitable[Sequence[Any]]:
        return self._store.queue_counts(request.queue)

    def backlog(self, request: Backlog) -> Awaitable[Sequence[Sequence[Any]]]:
        return self._store.backlog()

    def dead_letter_page(self, request: DeadLetterPage) -> Awaitable[list[JobRecord]]:
        return self._store.dead_letters(request.queue, request.before, request.limit)

    def history_buckets(self, request: HistoryBuckets
                        ) -> Awaitable[Sequence[Sequence[Any]] | None]:
        return self._history_buckets(request)

    async def _history_buckets(self, request: HistoryBuckets
                               ) -> Sequence[Sequence[Any]] | None:
        # This runtime's counts first, so its caller reads them.
        await self._runtime.flush_history()
        return await self._store.history(request.queue, request.since, request.until,
                                         request.bucket_ms)

    def list_jobs(self, request: ListJobs) -> Awaitable[list[JobRecord]]:
        return self._store.list_jobs(request.listing, request.after, request.limit)

    def jobs_by_id_prefix(self, request: JobsByIdPrefix) -> Awaitable[list[JobRecord]]:
        return self._store.jobs_by_id_prefix(request.prefix, request.after, request.limit)

    def redrive_applied(self, request: RedriveApplied) -> Awaitable[bool]:
        return self._store.redrive_applied(request.job_id, request.redrive_id)

    def store_now(self, request: StoreNow) -> Awaitable[int]:
        return self._store.store_now(self._db_now())

    def queue_paused(self, request: QueuePaused) -> Awaitable[bool]:
        return self._store.queue_paused(request.queue)

    def executing(self, request: Executing) -> list[str]:
        # No owner-wide limit: each worker runs its own claims.
        return []

    # changes
    def insert(self, request: Insert) -> Awaitable[bool]:
        return self._store.insert(request.job, self._db_now())

    def insert_many(self, request: InsertMany) -> Awaitable[list[bool] | None]:
        return self._store.insert_many(list(request.jobs), self._db_now())

    def record_cancellation(self, request: RecordCancellation) -> Awaitable[bool]:
        return self._store.record_cancellation(
            request.job_id, request.cancellation_id,
            "only_if_queued" if request.only_if_queued else "any")

    def record_redrive(self, request: RecordRedrive) -> Awaitable[JobRecord | None]:
        return self._store.redrive(request.job_id, request.redrive_id, self._db_now())

    def fail_lane(self, request: FailLane) -> Awaitable[tuple[list[JobRecord], bool]]:
        return self._store.fail_lane(request.lane, request.reason, request.limit,
                                     self._db_now())

    def purge(self, request: Purge) -> Awaitable[int]:
        return self._store.purge(request.queue)

    def pause_queue(self, request: PauseQueue) -> Awaitable[bool]:
        return self._store.pause_queue(request.queue, self._db_now())

    def resume_queue(self, request: ResumeQueue) -> Awaitable[bool]:
        return self._store.resume_queue(request.queue)

    # limits
    def limits(self, request: Limits) -> Awaitable[list[ConcurrencyLimit]]:
        return self._store.limits()

    def put_limit(self, request: PutLimit) -> Awaitable[bool]:
        return self._store.put_limit(request.limit, self._db_now())

    def delete_limit(self, request: DeleteLimit) -> Awaitable[bool]:
        return self._store.delete_limit(request.kind, request.key)

    def running_jobs(self, request: RunningJobs) -> Awaitable[list[str]]:
        return self._store.running_jobs(request.kind, request.key, request.limit)

    def ready_ahead(self, request: ReadyAhead) -> Awaitable[list[str]]:
        return self._store.ready_ahead(request.queue, request.priority, request.sequence,
                                       request.limit)

    # rate limits
    def rate_limits(self, request: RateLimits) -> Awaitable[list[RateLimit]]:
        return self._store.rate_limits(self._db_now())

    def put_rate_limit(self, request: PutRateLimit) -> Awaitable[bool]:
        return self._store.put_rate_limit(request.limit, self._db_now())

    def delete_rate_limit(self, request: DeleteRateLimit) -> Awaitable[bool]:
        return self._store.delete_rate_limit(request.kind, request.key, self._db_now())

    # retention
    def retention_policies(self, request: RetentionPolicies
                           ) -> Awaitable[list[RetentionPolicy]]:
        return self._store.retention_policies()

    def put_retention(self, request: PutRetention) -> Awaitable[bool]:
        return self._store.put_retention(request.policy, self._db_now())

    def delete_retention(self, request: DeleteRetention) -> Awaitable[bool]:
        return self._store.delete_retention(request.queue)

    def settled_queues(self, request: SettledQueues) -> Awaitable[list[str]]:
        return self._store.settled_queues()

    def prune_settled(self, request: PruneSettled) -> Awaitable[int]:
        return self._store.prune_settled(request.queue, request.completed_before,
                                         request.failed_before, request.limit)

    def storage_usage(self, request: StorageUsage) -> Awaitable[StorageReport]:
        return self._store.storage_usage()

    # schedules
    def find_schedule(self, request: FindSchedule) -> Awaitable[StoredSchedule | None]:
        return self._store.find_schedule(request.name)

    def list_schedules(self, request: ListSchedules) -> Awaitable[list[StoredSchedule]]:
        return self._store.list_schedules()

    def create_schedule(self, request: CreateSchedule) -> Awaitable[bool]:
        return self._runtime._schedules_changed(self._store.create_schedule(
            request.schedule, request.next_at, self._db_now()))

    def replace_schedule(self, request: ReplaceSchedule) -> Awaitable[bool]:
        return self._runtime._schedules_changed(self._store.replace_schedule(
            request.schedule, request.old_spec_json, request.next_at, self._db_now()))

    def pause_schedule(self, request: PauseSchedule) -> Awaitable[bool]:
        return self._runtime._schedules_changed(
            self._store.pause_schedule(request.name, self._db_now()))

    def resume_schedule(self, request: ResumeSchedule) -> Awaitable[bool]:
        return self._runtime._schedules_changed(self._store.resume_schedule(
            request.name, request.spec_json, request.next_at, self._db_now()))

    def delete_schedule(self, request: DeleteSchedule) -> Awaitable[bool]:
        return self._runtime._schedules_changed(self._store.delete_schedule(request.name))

    def due_schedules(self, request: DueSchedules
                      ) -> Awaitable[tuple[list[StoredSchedule], int | None]]:
        return self._runtime._due_schedules(request)

    def fire_slots(self, request: FireSlots) -> Awaitable[list[ValidJob]]:
        return self._runtime._fire_slots(request)

    # ticks
    def claim_or_probe(self, request: ClaimOrProbe
                       ) -> Awaitable[tuple[_Claim | None, Probe | None]]:
        return self._runtime._claim_or_probe(request)

    def claim(self, request: Claim) -> Awaitable[_Claim | None]:
        return self._runtime._claim(request)

    def requeue(self, request: Requeue) -> Awaitable[bool]:
        suspect = request.suspect
        return self._store.requeue_expired(suspect.job.sequence, suspect.token,
                                           self._db_now())

    def settle_recovered(self, request: SettleRecovered) -> Awaitable[JobRecord | None]:
        suspect = request.suspect
        return self._store.settle_expired(suspect.job.sequence, suspect.token,
                                          request.settlement, self._db_now())

    def settle_next_cancelled(self, request: SettleNextCancelled
                              ) -> Awaitable[JobRecord | None]:
        return self._store.settle_next_cancelled(self._db_now())

    def execute(self, request: Execute
                ) -> Awaitable[tuple[Settlement, asyncio.CancelledError | None]]:
        return self._runtime._execute_claim(request)

    def settle(self, request: Settle) -> Awaitable[tuple[bool, _Claim | None]]:
        return self._runtime._settle(request)

    def requeue_for_retry(self, request: RequeueForRetry) -> Awaitable[JobRecord | None]:
        return self._runtime._requeue_for_retry(request)

    def put_back_rate_limited(self, request: PutBackRateLimited
                              ) -> Awaitable[JobRecord | None]:
        return self._runtime._put_back_rate_limited(request)

    def read_claim(self, request: ReadClaim) -> Awaitable[ClaimView | None]:
        return self._runtime._read_claim(request)

    # effects
    def commit(self, request: Commit) -> None:
        """Every write committed on its own already: nothing is pending."""

    def abort(self, request: Abort) -> None:
        self._runtime._abort_all(request)

    def wake(self, request: Wake) -> Awaitable[None]:
        return self._runtime._wake_now()

    def report(self, request: Report) -> None:
        self._runtime._report(request)


#: The requests whose answers are awaited: all but Commit, Abort and Report,
#: answered in memory (tests/unit/test_answers.py holds this to the answers'
#: annotations).
_AWAITED = frozenset({
    Find, FindCargo, QueueHead, HasPendingWork, NextWork, StatusGroups, QueueCounts, Insert,
    InsertMany, RecordCancellation, FailLane, Purge, PauseQueue, ResumeQueue, Wake,
    ClaimOrProbe, Claim, Requeue, SettleRecovered, SettleNextCancelled, Execute, Settle,
    ReadClaim, DeadLetterPage, RedriveApplied, RecordRedrive, RequeueForRetry,
    StoreNow, QueuePaused, FindSchedule, ListSchedules, CreateSchedule, ReplaceSchedule,
    PauseSchedule,
    ResumeSchedule, DeleteSchedule, DueSchedules, FireSlots, ListJobs, Backlog,
    HistoryBuckets,
    JobsByIdPrefix,
    RetentionPolicies, PutRetention, DeleteRetention, SettledQueues, PruneSettled,
    StorageUsage, Limits, PutLimit, DeleteLimit, RunningJobs, ReadyAhead,
    RateLimits, PutRateLimit, DeleteRateLimit, PutBackRateLimited,
})


def _abort_stale(signal: AbortSignal, stale: StaleLease) -> None:
    signal._abort(str(stale.reason))

