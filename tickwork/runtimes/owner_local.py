"""OwnerRuntime: the lifecycle over one owner's synchronous SQLite database.

Every operation is a plan of ``tickwork.lifecycle.operations``; this runtime
answers its requests from the owner-local store (``tickwork.stores.owner_local``),
synchronously. What is owner-local here, and nowhere else:

* a mutation's requests run inside one transaction of the database when a
  projector is set (so the projector's writes commit or roll back with the
  change), and as single atomic statements otherwise; the wake and the
  aborts it asks for happen once it has committed;
* a claim carries no lease: a running claim nobody here executes is a
  suspect, and the host's liveness probe decides whether it is dead (asked
  round robin, so an alive or unanswerable claim cannot hide the others);
* claim tokens are a random prefix per runtime plus a counter.

The only state kept in memory is what cannot be durable, per ticker: the
claim it is executing (with its abort signal), its busy guard, and where its
next liveness probe starts.

Slots: a runtime has ``concurrency`` tickers (1 by default) over the same
jobs, each executing at most one claim at a time, so up to ``concurrency``
jobs run at once; the claim skips a queue whose head runs, so those jobs
are of different queues. ``tick()`` is the first slot's tick; ``drain()``
and the hosts' loop (``draining_slots``) run every slot side by side
(``tickwork.runtimes.draining.drain_slots``). Opened with ``concurrent_lane``,
it is a ``ConcurrentOwnerRuntime`` with one more slot, reserved for that
lane: the other slots never select its jobs, and ``tick_concurrent()`` ticks
that slot, which selects only them.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Self, TypeVar, overload

from tickwork.directory import DEAD_LETTER_COUNT_CAP, OwnerCounts, counts_from_backlog
from tickwork.events import EventHook, check_hook, emit
from tickwork.lifecycle import operations
from tickwork.lifecycle.answers import OwnerLocalAnswers, answer_table
from tickwork.lifecycle.drive import Deferred, drive, drive_async
from tickwork.lifecycle.operations import READ_SETTLED_MAX_LIMIT, ClaimNext
from tickwork.lifecycle.requests import (
    ALIVE,
    DEAD,
    AskLiveness,
    Backlog,
    Claim,
    ClaimOrProbe,
    ClaimView,
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
    LaneHasPending,
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
    Suspect,
    Wake,
    event_of,
)
from tickwork.lifecycle.rules import ABORT_CANCELLED, Settlement, in_lane_failure_order
from tickwork.lifecycle.surface import Declared, RuntimeOperations, SyncSurface
from tickwork.model.errors import InvalidArgument, SchemaError
from tickwork.model.history import HISTORY_KEEP_MS, HISTORY_PRUNE_BATCH
from tickwork.model.jobs import (
    MAX_LANE_LENGTH,
    MAX_SAFE_INTEGER,
    Job,
    JobRecord,
    ValidJob,
    check_id,
    check_safe_int,
    check_text,
)
from tickwork.model.limits import ConcurrencyLimit
from tickwork.model.outcomes import (
    CancelResult,
    IngestStatus,
    QueueTransition,
    TickResult,
)
from tickwork.model.rate_limits import RateLimit
from tickwork.model.retention import PRUNE_BATCH, RetentionPolicy, StorageReport
from tickwork.model.schedules import StoredSchedule
from tickwork.model.signals import AbortSignal
from tickwork.ports.database import SyncDatabase
from tickwork.ports.host import (
    Clock,
    Executor,
    LivenessProbe,
    Projector,
    wall_clock_ms,
)
from tickwork.ports.host import (
    Wake as WakePort,
)
from tickwork.runtimes import pruning
from tickwork.runtimes.draining import Budget, drain_slots
from tickwork.runtimes.execution import nonblocking, run_executor
from tickwork.runtimes.history import HistoryKeeper
from tickwork.runtimes.history import logger as history_logger
from tickwork.runtimes.pruning import MAX_BATCHES_PER_PASS, PruneSchedule
from tickwork.stores.owner_local import (
    EVERY_JOB,
    OwnerLocalStore,
    Partition,
    inside_lane,
    outside_lane,
)
from tickwork.stores.owner_schema import SCHEMA_VERSION, ensure_schema
from tickwork.stores.sql.sqlite import PROMOTE_BATCH

__all__ = [
    "MAX_CONCURRENCY",
    "READ_SETTLED_MAX_LIMIT",
    "ConcurrentOwnerRuntime",
    "DrainSteps",
    "OwnerRuntime",
    "SlotPool",
    "TransactionalJobs",
]

#: The most executions one owner-local runtime runs at once (``concurrency``).
MAX_CONCURRENCY = 1_000

T = TypeVar("T")

logger = logging.getLogger("tickwork.events")

_BUSY = TickResult("busy")


@dataclass(slots=True)
class _Execution:
    """A claim this runtime holds (``Held``), and the ticker executing it."""

    job: JobRecord
    token: str
    signal: AbortSignal
    ticker: _Ticker


class _Ticker:
    """One ticker (a slot): the jobs it selects, its busy guard, its execution.

    A ticker runs one tick at a time, so it executes at most one claim at a
    time; ``executions`` is keyed by job_id for the abort paths.
    """

    __slots__ = ("ahead", "busy", "executions", "partition", "probe_after")

    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.busy = False
        self.executions: dict[str, _Execution] = {}
        # The claim a drain took ahead, in the transaction of the settlement
        # before it, and has not started yet (registered in ``executions``
        # too, so that cancel() and fail_lane() reach it).
        self.ahead: _Execution | None = None
        # Where the next liveness probe starts: after the last claim that was
        # found alive or could not be judged (round robin over such claims).
        self.probe_after = _BEFORE_ANY_CLAIM


class _LocalRuntime(RuntimeOperations, SyncSurface):
    """Everything OwnerRuntime does; OwnerRuntime adds only the constructor's
    choice of class (a separate base so that type checkers read that choice
    from ``OwnerRuntime.__new__``). The operations of ``RuntimeOperations``
    (``read``, ``ingest``, ``cancel``, ``redrive``...) each perform their
    plan, synchronously."""

    def __init__(
        self,
        database: SyncDatabase,
        *,
        execute: Executor,
        is_alive: LivenessProbe,
        wake: WakePort,
        project: Projector | None = None,
        clock: Clock | None = None,
        concurrent_lane: str | None = None,
        on_event: EventHook | None = None,
        concurrency: int = 1,
    ) -> None:
        check_safe_int("concurrency", concurrency, InvalidArgument, 1)
        if concurrency > MAX_CONCURRENCY:
            raise InvalidArgument("concurrency",
                                  f"must be at most {MAX_CONCURRENCY}, got {concurrency}")
        if concurrent_lane is None:
            #: The slots every job but the concurrent lane's runs in.
            self._slots: tuple[_Ticker, ...] = tuple(
                _Ticker(EVERY_JOB) for _ in range(concurrency))
            self._tickers: tuple[_Ticker, ...] = self._slots
        else:
            check_text("concurrent_lane", concurrent_lane, MAX_LANE_LENGTH, InvalidArgument)
            if not isinstance(self, ConcurrentOwnerRuntime):
                raise TypeError(
                    f"{type(self).__name__} has no concurrent ticker; a runtime with a "
                    "concurrent_lane must be a ConcurrentOwnerRuntime (subclass that)"
                )
            outside = outside_lane(concurrent_lane)
            self._slots = tuple(_Ticker(outside) for _ in range(concurrency))
            # One more slot, reserved for the lane (tick_concurrent()).
            self._tickers = (*self._slots, _Ticker(inside_lane(concurrent_lane)))
        self._concurrency = concurrency
        self._concurrent_lane = concurrent_lane
        # Tokens of suspect claims a slot is asking the liveness probe about
        # (another slot then leaves them to it: see _ask_liveness).
        self._probing: set[str] = set()
        # Called after a committed change that may make a job claimable,
        # while a drain of several slots listens (SlotPool.listen).
        self._arrival_listeners: list[Callable[[], None]] = []
        self._database = database
        # A concurrent lane's claims would read past rows waiting for a batch
        # (tickwork.stores.index_batching): such a runtime's store batches nothing.
        self._store = OwnerLocalStore(database, batched=concurrent_lane is None)
        self._execute = nonblocking(execute)
        self._is_alive = is_alive
        self._wake = wake
        self._project = project
        self._clock = clock or wall_clock_ms
        self._on_event = check_hook(on_event)
        # Claim tokens: random per runtime instance, then a counter, so a
        # rebuilt runtime never reuses a token of the one before it.
        self._token_prefix = secrets.token_hex(8)
        self._claim_numbers = itertools.count(1)
        self._background: set[asyncio.Task[Any]] = set()
        # A tick awaits an async wake; a plain one is just called (cheaper).
        self._wake_is_async = inspect.iscoroutinefunction(getattr(wake, "recompute", None))
        self._awaited = _AWAITED if self._wake_is_async else _AWAITED - {Wake}
        self._answers = answer_table(_LocalAnswers(self), OwnerLocalAnswers)
        # Every transition is reported (the history counts each): answered
        # by _report itself, one call less on each job's path.
        self._answers[Report] = self._report
        ensure_schema(database)
        # The earliest due time of a waiting job, as far as this runtime knows
        # (it is the database's only writer): a tick moves due jobs into the
        # ready set only once this has passed, so the common tick pays
        # nothing for due times. Earlier than the truth after a rolled back
        # ingest or a purge (then one tick looks and finds nothing); re-read
        # by every tick that finds nothing to do.
        self._next_due: int | None = self._store.next_due()
        # Likewise the next slot of a running schedule: a tick creates slot
        # jobs only once it has passed (re-read after every schedule change).
        self._next_slot: int | None = self._store.next_slot()
        # When a rate limit next lets a job it holds start (tickwork_rate_limits),
        # as read by the last tick that found nothing to claim: what a parked
        # slot waits for (SlotPool.due_in_ms), besides due times and slots.
        self._next_release: int | None = None
        self._pruning = PruneSchedule()
        # What happened per queue and minute, counted as each transition is
        # reported and written a few rows at a time (tickwork.runtimes.history).
        self._history = HistoryKeeper()
        self.transactional = TransactionalJobs(self)

    # ------------------------------------- the declared operations, and reads

    def _perform_declared(self, declared: Declared[Any, Any], args: tuple[Any, ...],
                          kwargs: dict[str, Any]) -> Any:
        """Every operation of ``RuntimeOperations``: a read's requests each on
        its own, a change's as one transaction (see ``_read``, ``_perform``)."""
        plan = declared.plan(*args, **kwargs)
        if not declared.writes:
            return self._read(plan)
        result = self._perform(plan)
        if self._history.flush_due:  # a producer that never ticks writes its counts too
            self._flush_history(self._clock())
        return result

    def check_ready(self) -> int:
        """Readiness: read the owner's storage (its schema version, which
        this package must understand) and return that version; whatever the
        storage raises propagates, and a wrong version is a SchemaError."""
        stored = self._store.schema_version()
        if stored != SCHEMA_VERSION:
            raise SchemaError(f"the owner's tickwork tables are at schema version {stored}; "
                              f"this runtime needs {SCHEMA_VERSION}")
        return stored

    def owner_counts(self) -> OwnerCounts:
        """The owner's counts for the directory of owners (``tickwork.directory``):
        its queues' backlog (read from the indexes of unsettled jobs) and its
        dead letters, counted up to ``DEAD_LETTER_COUNT_CAP``. Two reads,
        bounded by the unsettled jobs and the cap, never the whole history."""
        dead_letters = self._store.dead_letter_count(DEAD_LETTER_COUNT_CAP)
        return counts_from_backlog(self.backlog(), dead_letters)

    def read_settled(self, limit: int, after_sequence: int = 0) -> list[JobRecord]:
        """The settled feed: settled jobs in enqueue order, after ``after_sequence``.

        At most ``limit`` jobs, stopping before the first job that has not
        settled yet (queued or running): a settlement is withheld until every
        job enqueued before it has settled or been purged. Pass the last
        returned ``sequence`` as ``after_sequence`` to read on. With a
        concurrent lane, only the serial partition is listed: concurrent-lane
        jobs neither appear nor hold the feed back (read them with ``read``).
        """
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise InvalidArgument("limit", f"must be an integer, got {type(limit).__name__}")
        if not 1 <= limit <= READ_SETTLED_MAX_LIMIT:
            raise InvalidArgument(
                "limit", f"must be within 1 and {READ_SETTLED_MAX_LIMIT}, got {limit}")
        check_safe_int("after_sequence", after_sequence, InvalidArgument, 0)
        return self._store.read_settled(after_sequence, limit, self._concurrent_lane)

    # -------------------------------------------------------------- retention

    def prune_if_due(self) -> int:
        """Prune settled history when a pass is due (``tickwork.runtimes.pruning``):
        up to ``MAX_BATCHES_PER_PASS`` prune batches, each one transaction;
        how many jobs were deleted. The host loops call it between ticks. A
        storage failure is logged, not raised: the next pass tries again,
        and the loop that called it goes on."""
        now = self._clock()
        if not self._pruning.due(now):
            return 0
        total = last = 0
        try:
            for _ in range(MAX_BATCHES_PER_PASS):
                last = self.prune()
                total += last
                if last < PRUNE_BATCH:
                    break
        except Exception:
            pruning.logger.exception("tickwork could not prune settled jobs; trying again later")
            last = 0
        try:
            # History past its 7 days: one bounded batch a pass (a runtime
            # writes a row per queue a minute, and a pass runs each minute).
            self._store.prune_history(now, HISTORY_KEEP_MS, HISTORY_PRUNE_BATCH)
        except Exception:
            pruning.logger.exception("tickwork could not prune old history; trying again later")
        self._pruning.ran(now, last)
        return total

    # ---------------------------------------------------------------- history

    @property
    def history_pending(self) -> bool:
        """Whether counts of the history wait in memory to be written."""
        return bool(len(self._history.tally))

    def flush_history(self, *, sample: bool = True) -> None:
        """Write the counts of the history not written yet (one statement),
        and sample the queues' depth and head wait when a minute has turned
        since the last sample (or none was taken; ``sample=False``: counts
        only). The host loops call it after each loop, and on close; a
        storage failure is logged, not raised, and the counts are kept for
        the next flush."""
        self._flush_history(self._clock(), sample=sample)

    def _flush_history(self, now: int, *, sample: bool = True) -> None:
        flush = self._history.begin(now, sample=sample)
        if flush is None:
            return
        store = self._store
        # Each write is one statement, atomic by itself: no transaction.
        if flush.rows:
            try:
                store.add_history(flush.rows)
            except Exception:
                history_logger.exception("tickwork could not write the history's counts; "
                                         "keeping them for the next flush")
                self._history.add_failed(flush, now)
        if flush.sample:
            try:
                store.sample_history(now, flush.since, flush.queues)
            except Exception:
                history_logger.exception("tickwork could not sample the queues' depth")

    # -------------------------------------------------------------- schedules

    def fire_schedules(self) -> int:
        """Create the jobs of the schedule slots that have come (every tick
        does this first); how many were created."""
        self._next_slot = _LOOK
        return self._perform(operations.fire_schedules())

    # ------------------------------------------------------------------- tick

    @property
    def concurrency(self) -> int:
        """How many jobs this runtime executes at once, at most (its slots;
        a concurrent lane's reserved slot not counted)."""
        return self._concurrency

    async def tick(self) -> TickResult:
        """Recover, settle a cancelled job, or claim and execute one ready job.

        This is the first slot's tick: a second ``tick()`` while one is in
        flight (or while a drain holds the slots) answers busy. With a
        concurrent lane it never selects, settles or probes a job of that lane.
        """
        return await self._tick(self._slots[0])

    async def drain(
        self, *, max_ticks: int | None = None, budget_ms: int | None = None
    ) -> list[TickResult]:
        """Tick until nothing is due, ``max_ticks`` ticks ran or ``budget_ms``
        passed (by the runtime's clock); what each tick did (idle ticks
        excluded). A tick that answers busy (another loop holds the ticker)
        or liveness_unknown (the probe could not judge a suspect claim, and
        nothing else was due) ends it, that result last.

        A worker loop: the drain loop of ``tickwork.runtimes.draining`` over
        ``draining()``. When the budget lets it run one more tick as a job
        settles, that settlement and the claim of the next job share one
        transaction (two commits per job instead of three); a claim taken
        ahead is always run by this same call. With ``concurrency`` N > 1 it
        runs every slot side by side (``draining_slots``): up to N jobs of
        different queues at once, results in the order they settle. While it
        runs, ``tick()`` reports busy (with a concurrent lane, it drains the
        other slots, not the lane's). It never sleeps for a waiting job: the
        host's wake is told when one is due.
        """
        budget = Budget.of(max_ticks=max_ticks, budget_ms=budget_ms, now_ms=self._clock)
        results: list[TickResult] = []
        with self.draining_slots() as pool:
            await drain_slots(pool.steps, budget, parking=pool, on_result=results.append,
                              yielding=False)
        return results

    def draining(self) -> DrainSteps:
        """The serial ticker's steps for the drain loop (``drain()``, the
        hosts' ``tick_until_idle``; see ``tickwork.runtimes.draining``), as a
        context manager holding its busy guard.

        ``step(claim_next=True)`` (or a function, asked as the job settles:
        whether the loop will run one more; it must not raise) ticks and,
        when the job it ran settles, claims the next one in the same
        transaction, by the tick's own rule
        (the claim-if-clear statement: when a suspect claim or a cancelled
        job waits, or a schedule slot has come, it claims nothing and the
        next step ticks); the next step runs that claim. Leaving the context
        puts back a claim taken ahead that never started (no recovery is
        counted: nothing ran), as does a step that finds it aborted by
        cancel() or fail_lane() before it started. Steps of a busy ticker
        each answer busy. These are the first slot's steps; ``draining_slots``
        holds every slot's.
        """
        return DrainSteps(self, self._slots[0])

    def draining_slots(self) -> SlotPool:
        """Every slot's steps (a concurrent lane's reserved slot excepted),
        for ``tickwork.runtimes.draining.drain_slots``, as a context manager
        holding each slot's busy guard; see ``draining`` for one slot's."""
        return SlotPool(self, self._slots)

    async def _tick(self, ticker: _Ticker) -> TickResult:
        if ticker.busy:
            return _BUSY
        ticker.busy = True
        try:
            if self._history.flush_due:
                self._flush_history(self._clock())
            plan = operations.tick(ticker, reporting=self._on_event is not None)
            result, _ = await drive_async(plan, self._answers, self._awaited)
            return result
        finally:
            # A ticker executes at most one claim, and only during its tick.
            ticker.executions.clear()
            ticker.busy = False

    # ------------------------------------------------------------ the drivers

    def _read(self, plan: Plan[T]) -> T:
        """A read: every request on its own, no transaction, nothing to wake."""
        return drive(plan, self._answers, transaction=_at_once, after_commit=_nothing_deferred)

    def _perform(self, plan: Plan[T]) -> T:
        """A mutation: its requests in one transaction when projecting; the
        wake and the aborts once it committed."""
        return drive(plan, self._answers, transaction=self._transaction,
                     after_commit=self._after_commit)

    def _transaction(self, step: Callable[[], None]) -> None:
        # Every request writes with a single statement, atomic by itself.
        # With a projector, the projector's writes must commit or roll back
        # with it, so the change runs in one database transaction.
        if self._project is None:
            step()
        else:
            self._database.atomic(step)

    def _transition(self, change: Callable[[], T]) -> T:
        """One tick step's write (with its projection, in one transaction)."""
        if self._project is None:
            return change()
        return self._database.atomic(change)

    def _after_commit(self, deferred: Deferred) -> None:
        for abort in deferred.aborts:
            for job_id in abort.job_ids:
                self._abort(job_id, abort.reason)
        if deferred.wake:
            self._wake_soon()
            self._work_may_have_arrived()
        for report in deferred.reports:
            self._report(report)

    def _report(self, report: Report) -> None:
        """Tell the hook of a durable transition. A tick's steps each commit
        before their answer returns, so a tick's reports come here directly;
        a mutation's come through ``_after_commit``. Never raises."""
        try:
            at = self._clock()
            self._history.count(report, at)
        except Exception:  # a clock that raised: log, go on
            logger.exception("tickwork could not count a %s transition", report.kind)
            return
        hook = self._on_event
        if hook is None:
            return
        try:
            duration = None
            held = report.subject
            if isinstance(held, _Execution) and report.kind != "claimed":
                started = held.job.started_at
                duration = None if started is None else max(0, at - started)
            event = event_of(report, at, duration)
        except Exception:  # building it failed (a clock that raised): log, go on
            logger.exception("tickwork could not build a %s event", report.kind)
            return
        emit(hook, event)

    # ------------------------------------- mutations (inside _transaction)

    def _insert(self, request: Insert) -> bool:
        job = request.job
        if not self._store.insert(job, self._clock()):
            return False
        self._inserted(job)
        return True

    def _insert_many(self, request: InsertMany) -> list[bool]:
        return self._store.insert_many(request.jobs, self._clock(), self._inserted)

    def _inserted(self, job: ValidJob) -> None:
        if job.run_at is not None or job.delay_ms is not None:
            self._next_due = _LOOK  # it may wait: the next tick looks
        self._project_queue(job.queue)

    def _promote_due(self, now: int) -> None:
        """Move the jobs whose time has come into the ready set, once the
        earliest known due time has passed: one statement, and with a
        projector the new heads of the queues it moved, in one transaction."""
        next_due = self._next_due
        if next_due is None or next_due > now:
            return
        store = self._store

        def promote() -> None:
            for queue in sorted(store.promote_due(now, PROMOTE_BATCH)):
                self._project_queue(queue)

        self._transition(promote)
        self._next_due = store.next_due()

    def _record_cancellation(self, request: RecordCancellation) -> bool:
        queue = self._store.record_cancellation(request.job_id, request.cancellation_id,
                                                request.only_if_queued)
        if queue is None:
            return False
        self._project_queue(queue)
        return True

    def _schedules_changed(self, changed: bool) -> bool:
        if changed:
            self._next_slot = _LOOK  # the next tick reads when
        return changed

    def _due_schedules(self, request: DueSchedules) -> tuple[list[StoredSchedule], int | None]:
        next_slot = self._next_slot
        if next_slot is None:
            return _NONE_DUE  # no schedule: every tick asks, none reads the clock
        now = self._clock()
        if next_slot > now:
            return _NONE_DUE
        due = self._store.due_schedules(now)
        if not due:
            self._next_slot = self._store.next_slot()
        return due, now

    def _fire_slots(self, request: FireSlots) -> list[ValidJob]:
        store = self._store

        def fire() -> list[ValidJob]:
            jobs = store.fire_slots(request.schedule, request.slots, request.next_at,
                                    self._clock())
            for queue in sorted({job.queue for job in jobs}):
                self._project_queue(queue)
            return jobs

        created = self._transition(fire)
        self._next_slot = store.next_slot()
        return created

    def _record_redrive(self, request: RecordRedrive) -> JobRecord | None:
        job = self._store.redrive(request.job_id, request.redrive_id, self._clock())
        if job is not None:
            self._project_queue(job.queue)
        return job

    def _executing(self, lane: str) -> list[str]:
        """The jobs the slots that serve ``lane`` execute now (claims taken
        ahead included) when every one of them is taken, so that they hold
        every other job those slots serve; empty while one is free."""
        slots = self._tickers[-1:] if lane == self._concurrent_lane else self._slots
        if not all(slot.executions for slot in slots):
            return []
        return [job_id for slot in slots for job_id in slot.executions]

    def _fail_lane(self, request: FailLane) -> tuple[list[JobRecord], None]:
        failed = in_lane_failure_order(self._store.fail_lane(
            request.lane, request.reason, request.limit, self._clock()))
        for job in failed:
            self._project_queue(job.queue, settled=job)
        return failed, None  # whether more remain: asked after the commit

    def _purge(self, request: Purge) -> int:
        deleted = self._store.purge_queue(request.queue)
        if deleted:
            self._project_queue(request.queue)
        return deleted

    # ------------------------------------------------------------- tick steps

    def _claim_or_probe(self, request: ClaimOrProbe) -> tuple[_Execution | None, Probe | None]:
        ticker: _Ticker = request.ticker
        # Claims this runtime executes are never probed, nor those another
        # slot is asking the probe about (it recovers them if they are dead).
        executing = self._executing_tokens()
        token = self._new_token()
        partition = ticker.partition
        now = self._clock()
        self._promote_due(now)
        # One statement claims when no suspect and no cancelled job of the
        # partition needs the tick first.
        if self._project is None:
            job = self._store.claim_next_if_clear(partition, token, now, executing)
        else:
            job = self._database.atomic(lambda: self._claimed(
                self._store.claim_next_if_clear(partition, token, now, executing)))
        if job is not None:
            return _Execution(job, token, AbortSignal(), ticker), None
        sequence, cancelled_waiting = self._store.probe(partition, executing, ticker.probe_after)
        if sequence is None and not cancelled_waiting:
            # Nothing to do: re-read the earliest due time, so that a job no
            # write of this runtime told it about (another runtime on the
            # same database, which the owner-local contract rules out) waits
            # at most one more tick; and, in the same read, when a rate
            # limit next lets a job it holds start: a slot that parks now
            # wakes then.
            self._next_due, self._next_release = self._store.next_waits(now)
        suspect = None
        if sequence is not None:
            found = self._store.find_claim(sequence)
            if found is not None and found[0].state == "running":
                suspect = Suspect(found[0], found[1], lease_expired=False)
        return None, Probe(suspect, cancelled_waiting,
                           blocked=sequence is not None or cancelled_waiting)

    def _claim(self, request: Claim) -> _Execution | None:
        ticker: _Ticker = request.ticker
        token = self._new_token()
        now = self._clock()
        self._promote_due(now)
        job = self._transition(lambda: self._claimed(
            self._store.claim_next(ticker.partition, token, now)))
        return None if job is None else _Execution(job, token, AbortSignal(), ticker)

    def _claimed(self, job: JobRecord | None) -> JobRecord | None:
        if job is not None:
            self._project_queue(job.queue)
        return job

    async def _ask_liveness(self, request: AskLiveness) -> bool | str:
        job = request.suspect.job
        ticker: _Ticker = request.ticker
        token = request.suspect.token
        self._probing.add(token)
        try:
            alive: Any = self._is_alive(job)
            if inspect.isawaitable(alive):
                alive = await alive
            if not isinstance(alive, bool):
                raise TypeError(f"is_alive returned {type(alive).__name__}, expected bool")
        except Exception as error:  # the probe's failure is reported, never guessed at
            ticker.probe_after = _claim_order(job)
            return f"{type(error).__name__}: {error}"
        finally:
            self._probing.discard(token)
        if alive:
            ticker.probe_after = _claim_order(job)  # the next tick looks at the next claim
            return ALIVE
        return DEAD

    def _requeue(self, request: Requeue) -> bool:
        suspect = request.suspect

        def requeue() -> bool:
            requeued = self._store.requeue_claim(suspect.job.sequence, suspect.token)
            if requeued is None:
                return False
            self._project_queue(requeued.queue)
            return True

        return self._transition(requeue)

    def _settle_recovered(self, request: SettleRecovered) -> JobRecord | None:
        suspect = request.suspect

        def settle() -> JobRecord | None:
            job = self._store.settle_recovered_claim(
                suspect.job.sequence, suspect.token, request.settlement, self._clock())
            if job is not None:
                self._project_queue(job.queue, settled=job)
            return job

        return self._transition(settle)

    def _settle_next_cancelled(self, request: SettleNextCancelled) -> JobRecord | None:
        ticker: _Ticker = request.ticker

        def settle() -> JobRecord | None:
            job = self._store.settle_next_cancelled(ticker.partition, self._clock())
            if job is not None:
                self._project_queue(job.queue, settled=job)
            return job

        return self._transition(settle)

    def _execute_claim(self, request: Execute) -> Awaitable[tuple[Settlement,
                                                                 asyncio.CancelledError | None]]:
        execution: _Execution = request.held  # type: ignore[assignment]
        # Registered until its tick ends (``_tick`` clears the ticker's
        # executions, however it ends): cancel() and fail_lane() find it here.
        execution.ticker.executions[execution.job.job_id] = execution
        return run_executor(self._execute, execution.job, execution.signal)

    def _settle(self, request: Settle) -> tuple[bool, _Execution | None]:
        execution: _Execution = request.held  # type: ignore[assignment]
        job, settlement, now = execution.job, request.settlement, self._clock()
        if request.claim_next:
            next_slot = self._next_slot
            # A schedule slot that has come is filled by a tick before it claims.
            if next_slot is None or next_slot > now:
                return self._settle_and_claim(execution, settlement, now, request.cancelled)
        if self._project is None:
            written = self._store.settle_claim(job.sequence, execution.token, settlement, now,
                                               cancelled=request.cancelled)
        else:
            def settle() -> bool:
                settled = self._store.settle_claim_record(
                    job.sequence, execution.token, settlement, now,
                    cancelled=request.cancelled)
                if settled is None:
                    return False
                self._project_queue(job.queue, settled=settled)
                return True

            written = self._database.atomic(settle)
        if written and self._arrival_listeners:  # see _settle_and_claim
            self._work_may_have_arrived()
        return written, None

    def _settle_and_claim(self, execution: _Execution, settlement: Settlement, now: int,
                          cancelled: bool) -> tuple[bool, _Execution | None]:
        """Settle the claim and, in the same transaction, claim the next job as
        the tick's claim-if-clear would: nothing while a suspect claim or a
        cancelled queued job of the partition waits (the next tick sees to
        it). The claim is fenced and recovered like any other: it is running
        under a fresh token from the moment the transaction commits.

        The settlement leaves its row unfiled (its outcome is as durable and
        every read sees it; only the history indexes wait): the store files a
        batch of them in the transaction of every FILE_EVERY-th (see
        ``tickwork.stores.index_batching``), so the indexes that filing changes
        are written once per batch (a store that batches nothing files it
        at once)."""
        ticker, job, store = execution.ticker, execution.job, self._store
        self._promote_due(now)  # its own transition, so the claim sees due jobs
        token = self._new_token()
        # The claims executing here, but for the one this settles (with one
        # ticker, none: the statement then excludes no token).
        executing = [execution.token for other in self._tickers if other is not ticker
                     for execution in other.executions.values()]

        def settle_and_claim() -> tuple[bool, JobRecord | None]:
            if self._project is None:
                if not store.settle_claim(job.sequence, execution.token, settlement, now,
                                          cancelled=cancelled, file=False):
                    return False, None
            else:
                settled = store.settle_claim_record(job.sequence, execution.token, settlement,
                                                    now, cancelled=cancelled, file=False)
                if settled is None:
                    return False, None
                self._project_queue(job.queue, settled=settled)
            return True, self._claimed(
                store.claim_next_if_clear(ticker.partition, token, now, executing))

        written, claimed = self._database.atomic(settle_and_claim)
        if written and self._arrival_listeners:
            # A settlement frees a place in its queue and one in its lane:
            # with concurrency limits two jobs may become claimable, and the
            # claim above took at most one. A parked slot looks for the other.
            self._work_may_have_arrived()
        if claimed is None:
            return written, None
        ahead = _Execution(claimed, token, AbortSignal(), ticker)
        ticker.executions.pop(job.job_id, None)
        ticker.executions[claimed.job_id] = ahead
        ticker.ahead = ahead
        return True, ahead

    def _release(self, execution: _Execution) -> None:
        """Put back a claim taken ahead that never started (fenced on its token)."""
        store = self._store
        self._transition(lambda: self._claimed(
            store.release_claim(execution.job.sequence, execution.token)))
        self._wake_soon()

    def _requeue_for_retry(self, request: RequeueForRetry) -> JobRecord | None:
        execution: _Execution = request.held  # type: ignore[assignment]
        now = self._clock()

        def retry() -> JobRecord | None:
            job = self._store.retry_claim(execution.job.sequence, execution.token,
                                          request.settlement, request.delay_ms, now)
            if job is not None:
                self._project_queue(job.queue)
            return job

        job = self._transition(retry)
        if job is not None and job.due_at is not None:
            # It waits now: promotion must look once its time comes.
            known = self._next_due
            self._next_due = job.due_at if known is None else min(known, job.due_at)
        return job

    def _put_back_rate_limited(self, request: PutBackRateLimited) -> JobRecord | None:
        execution: _Execution = request.held  # type: ignore[assignment]
        now = self._clock()

        def put_back() -> JobRecord | None:
            job = self._store.put_back_rate_limited(
                execution.job.sequence, execution.token, request.kind, request.key,
                request.until, now)
            if job is not None:
                self._project_queue(job.queue)
            return job

        job = self._transition(put_back)
        # The hold is written either way: a slot that parks looks again once
        # it ends (the next tick that finds nothing reads the same from the
        # store; this covers a slot that parks before that).
        known = self._next_release
        self._next_release = request.until if known is None else min(known, request.until)
        return job

    def _read_claim(self, request: ReadClaim) -> ClaimView | None:
        found = self._store.find_claim(request.held.job.sequence)
        if found is None:
            return None
        job, token = found
        return ClaimView(job, token, lease_live=job.state == "running")

    async def _wake_for_tick(self, request: Wake) -> None:
        if request.now:
            await self._wake_now()
        else:
            self._wake_soon()

    def _wake_at_once(self, request: Wake) -> None:
        """Wake, for a host whose ``recompute`` is a plain function: called
        directly (an awaitable it returns runs as a task)."""
        self._wake_soon()

    # ---------------------------------------------------------------- helpers

    def _new_token(self) -> str:
        return f"{self._token_prefix}-{next(self._claim_numbers)}"

    def _work_may_have_arrived(self) -> None:
        """Tell a drain of several slots that a job may have become claimable."""
        for listener in self._arrival_listeners:
            listener()

    def _executing_tokens(self) -> list[str]:
        tickers = self._tickers
        if len(tickers) == 1:
            executions = tickers[0].executions
            return [execution.token for execution in executions.values()] if executions else []
        tokens = [execution.token for ticker in tickers
                  for execution in ticker.executions.values()]
        if self._probing:
            tokens.extend(self._probing)
        return tokens

    def _execution_of(self, job_id: str) -> _Execution | None:
        """The local execution of ``job_id``, in whichever ticker runs it."""
        for ticker in self._tickers:
            execution = ticker.executions.get(job_id)
            if execution is not None:
                return execution
        return None

    def _project_queue(self, queue: str, settled: JobRecord | None = None) -> None:
        if self._project is None:
            return
        result: Any = self._project(QueueTransition(queue, self._store.queue_head(queue),
                                                    settled))
        if inspect.isawaitable(result):
            # It would run outside the transaction; refuse, rolling back.
            if inspect.iscoroutine(result):
                result.close()
            raise TypeError("project must be synchronous: it runs inside the transaction")

    def _abort(self, job_id: str, reason: str) -> None:
        # Signals the ticker that owns the execution (a job runs in one ticker).
        execution = self._execution_of(job_id)
        if execution is not None:
            execution.signal._abort(reason)

    def _abort_if_cancelled(self, job_id: str) -> None:
        # Scheduled after a transactional cancellation: by the time it runs the
        # host's synchronous transaction has committed or rolled back.
        if self._execution_of(job_id) is not None:
            job = self._store.find(job_id)
            if job is not None and job.cancellation_id is not None:
                self._abort(job_id, ABORT_CANCELLED)

    async def _wake_now(self) -> None:
        result = self._wake.recompute()
        if result is not None and inspect.isawaitable(result):
            await result

    def _wake_soon(self) -> None:
        """Call wake.recompute() from synchronous code; an async one runs as a task."""
        result = self._wake.recompute()
        if result is not None and inspect.isawaitable(result):
            self._spawn(result)

    def _spawn(self, awaitable: Awaitable[Any]) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            raise TypeError(
                "wake.recompute() returned an awaitable outside a running event loop; "
                "use a synchronous wake or call from async code"
            ) from None
        task = loop.create_task(_await(awaitable))
        self._background.add(task)
        task.add_done_callback(self._background.discard)


#: The answer to DueSchedules when no slot has come (never changed by its reader).
_NONE_DUE: tuple[list[StoredSchedule], None] = ([], None)

class _LocalAnswers(OwnerLocalAnswers):
    """How the owner-local runtime answers each request: from its store, at
    once (reads and single-statement writes), or by the runtime's own steps
    (claims, executions, settlements; see ``_LocalRuntime``). Only the
    execution, the liveness probe and an async wake are awaited (``_AWAITED``)."""

    __slots__ = ("_clock", "_runtime", "_store", "_wake")

    def __init__(self, runtime: _LocalRuntime) -> None:
        self._runtime = runtime
        self._store = runtime._store
        self._clock = runtime._clock
        # A tick awaits an async wake; a plain one is just called.
        self._wake = runtime._wake_for_tick if runtime._wake_is_async else runtime._wake_at_once

    # reads
    def find(self, request: Find) -> JobRecord | None:
        return self._store.find(request.job_id)

    def find_cargo(self, request: FindCargo) -> ValidJob | None:
        return self._store.find_cargo(request.job_id)

    def queue_head(self, request: QueueHead) -> JobRecord | None:
        return self._store.queue_head(request.queue)

    def has_pending_work(self, request: HasPendingWork) -> bool:
        return self._store.has_pending_work(self._clock())

    def next_work(self, request: NextWork) -> tuple[bool, int | None, int]:
        return self._store.next_work(self._clock())

    def status_groups(self, request: StatusGroups) -> list[tuple[str, str, str | None, int]]:
        return self._store.status_groups()

    def queue_counts(self, request: QueueCounts) -> Sequence[Any]:
        return self._store.queue_counts(request.queue)

    def backlog(self, request: Backlog) -> list[tuple[Any, ...]]:
        return self._store.backlog()

    def dead_letter_page(self, request: DeadLetterPage) -> list[JobRecord]:
        return self._store.dead_letters(request.queue, request.before, request.limit)

    def history_buckets(self, request: HistoryBuckets) -> list[tuple[Any, ...]] | None:
        # This runtime's counts first, so its caller reads them.
        self._runtime.flush_history()
        return self._store.history(request.queue, request.since, request.until,
                                   request.bucket_ms)

    def list_jobs(self, request: ListJobs) -> list[JobRecord]:
        return self._store.list_jobs(request.listing, request.after, request.limit)

    def jobs_by_id_prefix(self, request: JobsByIdPrefix) -> list[JobRecord]:
        return self._store.jobs_by_id_prefix(request.prefix, request.after, request.limit)

    def redrive_applied(self, request: RedriveApplied) -> bool:
        return self._store.redrive_applied(request.job_id, request.redrive_id)

    def lane_has_pending(self, request: LaneHasPending) -> bool:
        return self._store.lane_has_pending(request.lane)

    def store_now(self, request: StoreNow) -> int:
        return self._clock()

    def queue_paused(self, request: QueuePaused) -> bool:
        return self._store.queue_paused(request.queue)

    def executing(self, request: Executing) -> list[str]:
        return self._runtime._executing(request.lane)

    # changes
    def insert(self, request: Insert) -> bool:
        return self._runtime._insert(request)

    def insert_many(self, request: InsertMany) -> list[bool]:
        return self._runtime._insert_many(request)

    def record_cancellation(self, request: RecordCancellation) -> bool:
        return self._runtime._record_cancellation(request)

    def record_redrive(self, request: RecordRedrive) -> JobRecord | None:
        return self._runtime._record_redrive(request)

    def fail_lane(self, request: FailLane) -> tuple[list[JobRecord], None]:
        return self._runtime._fail_lane(request)

    def purge(self, request: Purge) -> int:
        return self._runtime._purge(request)

    def pause_queue(self, request: PauseQueue) -> bool:
        return self._store.pause_queue(request.queue, self._clock())

    def resume_queue(self, request: ResumeQueue) -> bool:
        return self._store.resume_queue(request.queue)

    # limits
    def limits(self, request: Limits) -> list[ConcurrencyLimit]:
        return self._store.limits()

    def put_limit(self, request: PutLimit) -> bool:
        return self._store.put_limit(request.limit, self._clock())

    def delete_limit(self, request: DeleteLimit) -> bool:
        return self._store.delete_limit(request.kind, request.key)

    def running_jobs(self, request: RunningJobs) -> list[str]:
        return self._store.running_jobs(request.kind, request.key, request.limit)

    def ready_ahead(self, request: ReadyAhead) -> list[str]:
        return self._store.ready_ahead(request.queue, request.priority, request.sequence,
                                       request.limit)

    # rate limits
    def rate_limits(self, request: RateLimits) -> list[RateLimit]:
        return self._store.rate_limits(self._clock())

    def put_rate_limit(self, request: PutRateLimit) -> bool:
        return self._store.put_rate_limit(request.limit, self._clock())

    def delete_rate_limit(self, request: DeleteRateLimit) -> bool:
        return self._store.delete_rate_limit(request.kind, request.key, self._clock())

    # retention
    def retention_policies(self, request: RetentionPolicies) -> list[RetentionPolicy]:
        return self._store.retention_policies()

    def put_retention(self, request: PutRetention) -> bool:
        return self._store.put_retention(request.policy, self._clock())

    def delete_retention(self, request: DeleteRetention) -> bool:
        return self._store.delete_retention(request.queue)

    def settled_queues(self, request: SettledQueues) -> list[str]:
        # Only a prune asks, inside its transaction: the settlements a drain
        # left for its next filing batch (fewer than FILE_EVERY) are filed
        # first, so the batch's reads of the history indexes find them too.
        self._store.file_settled()
        return self._store.settled_queues()

    def prune_settled(self, request: PruneSettled) -> int:
        return self._store.prune_settled(request.queue, request.completed_before,
                                         request.failed_before, request.limit)

    def storage_usage(self, request: StorageUsage) -> StorageReport:
        return self._store.storage_usage()

    # schedules
    def find_schedule(self, request: FindSchedule) -> StoredSchedule | None:
        return self._store.find_schedule(request.name)

    def list_schedules(self, request: ListSchedules) -> list[StoredSchedule]:
        return self._store.list_schedules()

    def create_schedule(self, request: CreateSchedule) -> bool:
        return self._runtime._schedules_changed(
            self._store.create_schedule(request.schedule, request.next_at, self._clock()))

    def replace_schedule(self, request: ReplaceSchedule) -> bool:
        return self._runtime._schedules_changed(self._store.replace_schedule(
            request.schedule, request.old_spec_json, request.next_at, self._clock()))

    def pause_schedule(self, request: PauseSchedule) -> bool:
        return self._runtime._schedules_changed(
            self._store.pause_schedule(request.name, self._clock()))

    def resume_schedule(self, request: ResumeSchedule) -> bool:
        return self._runtime._schedules_changed(self._store.resume_schedule(
            request.name, request.spec_json, request.next_at, self._clock()))

    def delete_schedule(self, request: DeleteSchedule) -> bool:
        return self._runtime._schedules_changed(self._store.delete_schedule(request.name))

    def due_schedules(self, request: DueSchedules) -> tuple[list[StoredSchedule], int | None]:
        return self._runtime._due_schedules(request)

    def fire_slots(self, request: FireSlots) -> list[ValidJob]:
        return self._runtime._fire_slots(request)

    # ticks
    def claim_or_probe(self, request: ClaimOrProbe) -> tuple[_Execution | None, Probe | None]:
        return self._runtime._claim_or_probe(request)

    def claim(self, request: Claim) -> _Execution | None:
        return self._runtime._claim(request)

    def ask_liveness(self, request: AskLiveness) -> Awaitable[bool | str]:
        return self._runtime._ask_liveness(request)

    def requeue(self, request: Requeue) -> bool:
        return self._runtime._requeue(request)

    def settle_recovered(self, request: SettleRecovered) -> JobRecord | None:
        return self._runtime._settle_recovered(request)

    def settle_next_cancelled(self, request: SettleNextCancelled) -> JobRecord | None:
        return self._runtime._settle_next_cancelled(request)

    def execute(self, request: Execute) -> Awaitable[tuple[Settlement,
                                                           asyncio.CancelledError | None]]:
        return self._runtime._execute_claim(request)

    def settle(self, request: Settle) -> tuple[bool, _Execution | None]:
        return self._runtime._settle(request)

    def requeue_for_retry(self, request: RequeueForRetry) -> JobRecord | None:
        return self._runtime._requeue_for_retry(request)

    def put_back_rate_limited(self, request: PutBackRateLimited) -> JobRecord | None:
        return self._runtime._put_back_rate_limited(request)

    def read_claim(self, request: ReadClaim) -> ClaimView | None:
        return self._runtime._read_claim(request)

    # effects
    def wake(self, request: Wake) -> Awaitable[None] | None:
        return self._wake(request)

    def report(self, request: Report) -> None:
        self._runtime._report(request)


#: The tick requests whose answers are awaited.
_AWAITED = frozenset({Execute, AskLiveness, Wake})


def _at_once(step: Callable[[], None]) -> None:
    step()


def _nothing_deferred(deferred: Deferred) -> None:
    pass


class DrainSteps:
    """One drain of a ticker (``OwnerRuntime.draining``; the ``Steps`` of
    ``tickwork.runtimes.draining``): each ``step`` ticks, or runs the claim
    the step before it took ahead."""

    __slots__ = ("_held", "_runtime", "_ticker")

    def __init__(self, runtime: _LocalRuntime, ticker: _Ticker) -> None:
        self._runtime = runtime
        self._ticker = ticker
        self._held = False

    def __enter__(self) -> Self:
        ticker = self._ticker
        if not ticker.busy:
            ticker.busy = self._held = True
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self._held:
            return
        ticker = self._ticker
        try:
            ahead, ticker.ahead = ticker.ahead, None
            if ahead is not None:
                self._put_back(ahead)
        finally:
            ticker.executions.clear()
            ticker.busy = self._held = False

    @property
    def carrying(self) -> bool:
        """Whether the last step took a claim ahead (the next step runs it)."""
        return self._ticker.ahead is not None

    @property
    def running(self) -> bool:
        """Whether this slot holds a claim now (executing, or taken ahead)."""
        return bool(self._ticker.executions)

    async def step(self, *, claim_next: ClaimNext = False) -> TickResult:
        if not self._held:
            return _BUSY
        runtime, ticker = self._runtime, self._ticker
        ahead, ticker.ahead = ticker.ahead, None
        if ahead is not None and ahead.signal.aborted:
            # cancel() or fail_lane() reached it before it started: it never
            # runs; put back, a cancelled job is settled by this step's tick.
            self._put_back(ahead)
            ahead = None
        # Between two steps no transaction is open: the history's counts are
        # written here once their minute has turned.
        if runtime._history.flush_due:
            runtime._flush_history(runtime._clock())
        reporting = runtime._on_event is not None  # the claim's report: the hook's only
        plan = (operations.tick(ticker, claim_next=claim_next, reporting=reporting)
                if ahead is None
                else operations.run(ahead, claim_next=claim_next, reporting=reporting))
        try:
            result, _ = await drive_async(plan, runtime._answers, runtime._awaited)
        finally:
            # The claim this step ran is over; the one it took ahead (if any)
            # stays registered until the next step runs it.
            ticker.executions.clear()
            taken = ticker.ahead
            if taken is not None:
                ticker.executions[taken.job.job_id] = taken
        return result

    def _put_back(self, ahead: _Execution) -> None:
        self._ticker.executions.pop(ahead.job.job_id, None)
        try:
            self._runtime._release(ahead)
        except Exception:  # storage failed: the claim stays, and recovery takes it
            logger.exception("tickwork could not put back the claim of job %s taken ahead",
                             ahead.job.job_id)


class SlotPool:
    """Every slot's ``DrainSteps`` (``OwnerRuntime.draining_slots``) and what
    ``drain_slots`` asks of the runtime while a slot parks (``Parking``): the
    next known due time, and the changes that may make a job claimable."""

    __slots__ = ("_runtime", "_stack", "steps")

    def __init__(self, runtime: _LocalRuntime, slots: Sequence[_Ticker]) -> None:
        self._runtime = runtime
        self.steps = tuple(DrainSteps(runtime, slot) for slot in slots)
        self._stack = ExitStack()

    def __enter__(self) -> Self:
        with ExitStack() as stack:
            for steps in self.steps:
                stack.enter_context(steps)
            self._stack = stack.pop_all()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stack.close()

    def due_in_ms(self) -> float | None:
        runtime = self._runtime
        now = runtime._clock()
        release = runtime._next_release
        if release is not None and release <= now:
            # Passed: the slot looks now, once; the tick that finds nothing
            # reads the next one (a slot that parks for another reason, a
            # liveness probe's unknown, must not wake again and again for it).
            runtime._next_release = None
        known = [at for at in (runtime._next_due, runtime._next_slot, release)
                 if at is not None]
        if not known:
            return None
        return max(0, min(known) - now)

    def listen(self, arrived: Callable[[], None]) -> Callable[[], None]:
        listeners = self._runtime._arrival_listeners
        listeners.append(arrived)
        return lambda: listeners.remove(arrived)


class OwnerRuntime(_LocalRuntime):
    """The owner-local runtime (see docs/reference/python-api.md).

    ``execute(job, signal)`` runs one claimed job; ``is_alive(job)`` answers
    whether a running claim that this runtime does not own still has a live
    execution; ``wake.recompute()`` is called after every durable change that
    can alter when the next tick should run; ``project(transition)`` (optional)
    runs inside the transaction of every change to a queue; ``on_event(event)``
    (optional) is told of every transition once it committed
    (``tickwork.events``: a hook that raises is logged, never raised).

    ``concurrency`` (1 by default, at most ``MAX_CONCURRENCY``) is how many
    jobs it runs at once: its slots, which ``drain()`` and the hosts' loop
    (``draining_slots``) run side by side; a queue still runs one job at a
    time. ``concurrent_lane`` (optional) reserves one more slot for one
    lane: the constructor then returns a ``ConcurrentOwnerRuntime``, which
    has ``tick_concurrent()``. A runtime opened without it has no such method.
    """

    @overload
    def __new__(
        cls,
        database: SyncDatabase,
        *,
        execute: Executor,
        is_alive: LivenessProbe,
        wake: WakePort,
        project: Projector | None = None,
        clock: Clock | None = None,
        concurrent_lane: None = None,
        on_event: EventHook | None = None,
        concurrency: int = 1,
    ) -> Self: ...

    @overload
    def __new__(
        cls,
        database: SyncDatabase,
        *,
        execute: Executor,
        is_alive: LivenessProbe,
        wake: WakePort,
        project: Projector | None = None,
        clock: Clock | None = None,
        concurrent_lane: str,
        on_event: EventHook | None = None,
        concurrency: int = 1,
    ) -> ConcurrentOwnerRuntime: ...

    def __new__(
        cls,
        database: SyncDatabase,
        *,
        execute: Executor,
        is_alive: LivenessProbe,
        wake: WakePort,
        project: Projector | None = None,
        clock: Clock | None = None,
        concurrent_lane: str | None = None,
        on_event: EventHook | None = None,
        concurrency: int = 1,
    ) -> OwnerRuntime:
        # Only the class is chosen here; __init__ (of the class chosen)
        # validates every argument, concurrent_lane included.
        if concurrent_lane is not None and cls is OwnerRuntime:
            return object.__new__(ConcurrentOwnerRuntime)
        return object.__new__(cls)


class ConcurrentOwnerRuntime(OwnerRuntime):
    """An OwnerRuntime with a concurrent lane: one more slot, reserved for it.

    ``tick()`` (and every other slot) never selects a job of the concurrent
    lane; ``tick_concurrent()`` ticks the reserved slot, which selects only
    those. Each slot has its own busy guard and execution, so the lane's job
    and the others' can be in flight at once; all share the store, the
    projector and the wake. Any slot runs a job only while it is its queue's
    head across lanes.
    """

    def __init__(
        self,
        database: SyncDatabase,
        *,
        execute: Executor,
        is_alive: LivenessProbe,
        wake: WakePort,
        project: Projector | None = None,
        clock: Clock | None = None,
        concurrent_lane: str,
        on_event: EventHook | None = None,
        concurrency: int = 1,
    ) -> None:
        # Checked here too: the base class would take None for "no lane".
        check_text("concurrent_lane", concurrent_lane, MAX_LANE_LENGTH, InvalidArgument)
        super().__init__(database, execute=execute, is_alive=is_alive, wake=wake, project=project,
                         clock=clock, concurrent_lane=concurrent_lane, on_event=on_event,
                         concurrency=concurrency)
        self._concurrent = self._tickers[-1]

    @property
    def concurrent_lane(self) -> str:
        lane = self._concurrent_lane
        assert lane is not None
        return lane

    async def tick_concurrent(self) -> TickResult:
        """tick(), for the concurrent lane's ticker: recover one of its
        disappeared claims, settle one of its cancelled queued jobs, or claim
        and execute its best job that heads its queue."""
        return await self._tick(self._concurrent)


class TransactionalJobs:
    """Job mutations and reads for code already inside its own SQLite transaction.

    The mutations are the very plans ``ingest`` and ``cancel`` run, so the
    host's own write and the job commit or roll back together. An execution
    a cancellation stops is told so only once the host's transaction has
    committed.
    """

    def __init__(self, runtime: _LocalRuntime) -> None:
        self._runtime = runtime

    def enqueue(self, job: Job) -> IngestStatus:
        """Store ``job`` in the open transaction (``ingest``'s plan)."""
        runtime = self._runtime

        def after_commit(deferred: Deferred) -> None:
            if deferred.wake:
                runtime._wake_soon()
                runtime._work_may_have_arrived()
            self._report_after_host_commit(deferred.reports, lambda found: found is not None)

        return drive(operations.ingest(job), runtime._answers,
                     transaction=runtime._transaction, after_commit=after_commit)

    def cancel(
        self, job_id: str, cancellation_id: str, only_if_queued: bool = False
    ) -> CancelResult:
        """Record a cancellation in the open transaction (``cancel``'s plan)."""
        runtime = self._runtime

        def after_commit(deferred: Deferred) -> None:
            if deferred.aborts and runtime._execution_of(job_id) is not None:
                # Abort only once the host's transaction has committed (checked then).
                asyncio.get_running_loop().call_soon(runtime._abort_if_cancelled, job_id)
            if deferred.wake:
                runtime._wake_soon()
            self._report_after_host_commit(
                deferred.reports,
                lambda found: found is not None and found.cancellation_id == cancellation_id)

        return drive(operations.cancel(job_id, cancellation_id, only_if_queued=only_if_queued),
                     runtime._answers, transaction=runtime._transaction,
                     after_commit=after_commit)

    def _report_after_host_commit(self, reports: list[Report],
                                  durable: Callable[[JobRecord | None], bool]) -> None:
        """Report once the host's transaction has ended, and only what it
        committed: the host's transaction is synchronous, so it is over when
        the event loop runs the next callback, which re-reads the job (as
        the cancellation's abort does)."""
        runtime = self._runtime
        if not reports:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            # Without a loop nothing runs after the host's commit: reporting
            # now could report a change that then rolls back (nor is it
            # counted in the history).
            if runtime._on_event is None:
                return
            logger.warning("tickwork: %d transactional event(s) not reported: no event loop "
                           "runs to report them once the host's transaction has committed",
                           len(reports))
            return

        def confirm() -> None:
            for report in reports:
                try:
                    found = runtime._store.find(report.subject.job_id)
                except Exception:
                    logger.exception("tickwork could not confirm a transactional %s event",
                                     report.kind)
                    continue
                if durable(found):
                    runtime._report(report)

        loop.call_soon(confirm)

    def read_queue_head(self, queue: str) -> JobRecord | None:
        return self._runtime.read_queue_head(queue)

    def read_latest_settled_job(self, queue: str) -> JobRecord | None:
        return self._runtime._store.latest_settled(check_id("queue", queue))


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


_BEFORE_ANY_CLAIM = (-MAX_SAFE_INTEGER, 0)

#: ``_next_due`` when a job that may wait was just stored: look at the next tick.
_LOOK = -MAX_SAFE_INTEGER


def _claim_order(job: JobRecord) -> tuple[int, int]:
    assert job.started_at is not None  # a running claim always has one
    return job.started_at, job.sequence
