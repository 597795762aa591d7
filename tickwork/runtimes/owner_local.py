"""OwnerRuntime: the durable job engine over one synchronous SQLite owner.

Every transition writes with one statement from ``statements.py`` (with a
projector, that statement and the projector's writes share one owner
transaction); the decisions come from ``tickwork.lifecycle``. The only state
kept in memory is what cannot be durable, per tick slot: which claims the
slot is executing right now (with their abort signals), its busy guard, and
where its next recovery probe starts.

A runtime has one tick slot. Opened with ``concurrent_lane``, it is a
``ConcurrentOwnerRuntime`` with two: ``tick()`` serves every lane but that
one, ``tick_concurrent()`` serves only that one, and the two can be in
flight at the same time.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import secrets
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, Self, TypeVar, overload

from tickwork import lifecycle
from tickwork.model.errors import IngestConflict, InvalidArgument
from tickwork.model.jobs import (
    MAX_LANE_LENGTH,
    MAX_SAFE_INTEGER,
    Job,
    JobRecord,
    ValidJob,
    cargo_differences,
    check_cancel_args,
    check_id,
    check_reason,
    check_safe_int,
    check_text,
    validate_job,
    validate_jobs,
)
from tickwork.model.outcomes import (
    CancelResult,
    CancelStatus,
    ExecutionResult,
    FailLaneResult,
    IngestStatus,
    QueueStatus,
    QueueTransition,
    TickResult,
    queue_status_from_counts,
    queue_statuses_from_groups,
)
from tickwork.model.signals import AbortSignal
from tickwork.ports.database import SyncDatabase
from tickwork.runtimes.execution import run_executor
from tickwork.stores.owner_local import (
    EVERY_JOB,
    OwnerLocalStore,
    Partition,
    inside_lane,
    outside_lane,
)
from tickwork.stores.owner_schema import ensure_schema

T = TypeVar("T")

#: Lane refusal settles at most this many jobs per call (one transaction).
FAIL_LANE_BATCH = 256

#: read_settled returns at most this many jobs per call.
READ_SETTLED_MAX_LIMIT = 1000

Executor = Callable[[JobRecord, AbortSignal], Awaitable[ExecutionResult]]
LivenessProbe = Callable[[JobRecord], "bool | Awaitable[bool]"]
Projector = Callable[[QueueTransition], None]
Clock = Callable[[], int]


class Wake(Protocol):
    """Arms the host's next timer or alarm; may be sync or async."""

    def recompute(self) -> Any: ...


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True)
class _Execution:
    """A claim this runtime is executing now."""

    job: JobRecord
    token: str
    signal: AbortSignal


class _Slot:
    """One tick slot: the jobs it selects, its busy guard, its executions.

    A slot runs one tick at a time, so it executes at most one claim at a
    time; ``executions`` is keyed by job_id for the abort paths.
    """

    __slots__ = ("busy", "executions", "partition", "probe_after")

    def __init__(self, partition: Partition) -> None:
        self.partition = partition
        self.busy = False
        self.executions: dict[str, _Execution] = {}
        # Where the next recovery probe starts: after the last claim that was
        # found alive or could not be judged (round robin over such claims).
        self.probe_after = _BEFORE_ANY_CLAIM


class _LocalRuntime:
    """Everything OwnerRuntime does; OwnerRuntime adds only the constructor's
    choice of class (a separate base so that type checkers read that choice
    from ``OwnerRuntime.__new__``)."""

    def __init__(
        self,
        owner: SyncDatabase,
        *,
        execute: Executor,
        is_alive: LivenessProbe,
        wake: Wake,
        project: Projector | None = None,
        clock: Clock | None = None,
        concurrent_lane: str | None = None,
    ) -> None:
        if concurrent_lane is None:
            self._slots: tuple[_Slot, ...] = (_Slot(EVERY_JOB),)
        else:
            check_text("concurrent_lane", concurrent_lane, MAX_LANE_LENGTH, InvalidArgument)
            if not isinstance(self, ConcurrentOwnerRuntime):
                raise TypeError(
                    f"{type(self).__name__} has no concurrent slot; a runtime with a "
                    "concurrent_lane must be a ConcurrentOwnerRuntime (subclass that)"
                )
            self._slots = (_Slot(outside_lane(concurrent_lane)),
                           _Slot(inside_lane(concurrent_lane)))
        self._serial = self._slots[0]
        self._concurrent_lane = concurrent_lane
        self._owner = owner
        self._store = OwnerLocalStore(owner)
        self._execute = execute
        self._is_alive = is_alive
        self._wake = wake
        self._project = project
        self._clock = clock or wall_clock_ms
        # Claim tokens: random per runtime instance, then a counter, so a
        # rebuilt runtime never reuses a token of the one before it.
        self._token_prefix = secrets.token_hex(8)
        self._claim_numbers = itertools.count(1)
        self._background: set[asyncio.Task[Any]] = set()
        ensure_schema(owner)
        self.transactional = TransactionalJobs(self)

    # ------------------------------------------------------------------ reads

    def read(self, job_id: str) -> JobRecord | None:
        return self._store.find(check_id("job_id", job_id))

    def read_queue_head(self, queue: str) -> JobRecord | None:
        return self._store.queue_head(check_id("queue", queue))

    def has_pending_work(self) -> bool:
        """True while any job is queued or running (in either slot's partition)."""
        return self._store.has_pending_work()

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

    def status(self) -> list[QueueStatus]:
        """Job counts of every queue that has any job, sorted by queue name.

        One statement, but it reads every stored job, settled history
        included: use ``queue_status`` for one queue.
        """
        return queue_statuses_from_groups(self._store.status_groups())

    def queue_status(self, queue: str) -> QueueStatus:
        """Job counts of one queue (all zero for a queue without jobs), from its indexes."""
        check_id("queue", queue)
        queued, running, *outcomes = self._store.queue_counts(queue)
        return queue_status_from_counts(queue, queued, running, outcomes)

    # -------------------------------------------------------------- mutations

    def ingest(self, job: Job) -> IngestStatus:
        """Store ``job``: "queued" when new, "duplicate" for an identical replay."""
        valid = validate_job(job)
        status = self._transition(lambda: self._ingest_in_transaction(valid))
        if status == "queued":
            self._wake_soon()
        return status

    def ingest_many(self, jobs: Sequence[Job]) -> list[IngestStatus]:
        """Store up to ``MAX_INGEST_BATCH`` jobs atomically; one status per job, in order.

        Every job is validated before anything is written. All of them commit
        in one transaction, or, when any one conflicts (``IngestConflict``),
        none does. A job_id repeated within the call is a "duplicate" when
        its cargo is identical, else a conflict.
        """
        valid = validate_jobs(jobs)
        statuses = self._owner.atomic(
            lambda: [self._ingest_in_transaction(one) for one in valid])
        if "queued" in statuses:
            self._wake_soon()
        return statuses

    def cancel(
        self, job_id: str, cancellation_id: str, *, only_if_queued: bool = False
    ) -> CancelResult:
        """Record a durable cancellation; a job executing here is aborted after it commits."""
        status = self._record_cancellation(job_id, cancellation_id, only_if_queued)
        if status == "recorded":
            self._abort(job_id, lifecycle.ABORT_CANCELLED)
        return CancelResult(status, job_id)

    def _record_cancellation(
        self, job_id: str, cancellation_id: str, only_if_queued: bool
    ) -> CancelStatus:
        """The cancellation mutation shared by cancel() and the transactional API."""
        check_cancel_args(job_id, cancellation_id, only_if_queued)
        # Read, decide and write in one transaction: the decision depends on
        # the stored state, which another writer must not change in between.
        status = self._owner.atomic(
            lambda: self._cancel_in_transaction(job_id, cancellation_id, only_if_queued)
        )
        if status == "recorded":
            self._wake_soon()
        return status

    def fail_lane(self, lane: str, reason: str) -> FailLaneResult:
        """Settle up to 256 of the lane's queued and running jobs as failed."""
        check_text("lane", lane, MAX_LANE_LENGTH, InvalidArgument)
        check_reason("reason", reason)

        def refuse() -> list[JobRecord]:
            refused = self._store.refuse_lane_batch(lane, reason, FAIL_LANE_BATCH, self._clock())
            for job in refused:
                self._project_queue(job.queue, settled=job)
            return refused

        refused = self._transition(refuse)
        # The refusal is durable now; only then stop local executors. Their
        # ticks find the claim replaced and report the committed failure.
        for job in refused:
            self._abort(job.job_id, lifecycle.ABORT_LANE_REFUSED)
        if refused:
            self._wake_soon()
        return FailLaneResult(len(refused), self._lane_may_have_more(lane, len(refused)))

    def _lane_may_have_more(self, lane: str, refused: int) -> bool:
        """FailLaneResult.more, after the refusal committed: a short batch took
        every unsettled job of the lane; a full one asks the store. Nothing
        after the commit may turn the committed refusal into an error, so a
        failing read answers True: one more call settles 0 and says False."""
        if refused < FAIL_LANE_BATCH:
            return False
        try:
            return self._store.lane_has_pending(lane)
        except Exception:
            return True

    def purge(self, queue: str) -> int:
        """Delete the queue's queued jobs; running and settled jobs stay."""
        check_id("queue", queue)

        def delete() -> int:
            deleted = self._store.purge_queue(queue)
            if deleted:
                self._project_queue(queue)
            return deleted

        deleted = self._transition(delete)
        if deleted:
            self._wake_soon()
        return deleted

    # ------------------------------------------------------------------- tick

    async def tick(self) -> TickResult:
        """Recover, settle a cancelled job, or claim and execute one ready job.

        With a concurrent lane, this is the serial slot: it never selects,
        settles or probes a job of that lane.
        """
        slot = self._serial
        if slot.busy:
            return TickResult("busy")
        slot.busy = True
        try:
            return await self._tick(slot)
        finally:
            slot.busy = False

    async def _tick(self, slot: _Slot) -> TickResult:
        # Claims this runtime executes are never probed (with two slots, the
        # other slot's claim is outside this partition anyway).
        executing = self._executing_tokens()
        token = f"{self._token_prefix}-{next(self._claim_numbers)}"
        partition = slot.partition
        # Fast path: one statement claims when nothing has to come first.
        job = self._transition(lambda: self._claim_next(partition, token, executing))
        if job is not None:
            return await self._run(slot, _Execution(job, token, AbortSignal()))
        orphan, cancelled_waiting = self._store.probe(partition, executing, slot.probe_after)
        # Recovery first. Putting a job back or settling it is this tick's one
        # transition; an unanswered probe is reported only if nothing else runs.
        recovery = None if orphan is None else await self._recover(slot, orphan)
        if recovery is not None and recovery.status != "liveness_unknown":
            return recovery
        if cancelled_waiting:
            cancelled = self._transition(lambda: self._settle_next_cancelled(partition))
            if cancelled is not None:
                await self._wake_now()
                return cancelled
        if orphan is None and not cancelled_waiting:
            return TickResult("idle")  # the fast path already found nothing to claim
        job = self._transition(lambda: self._claim_next(partition, token))
        if job is None:
            return recovery or TickResult("idle")
        return await self._run(slot, _Execution(job, token, AbortSignal()))

    def _executing_tokens(self) -> list[str]:
        slots = self._slots
        if len(slots) == 1:
            return [execution.token for execution in slots[0].executions.values()]
        return [execution.token for slot in slots for execution in slot.executions.values()]

    def _execution_of(self, job_id: str) -> _Execution | None:
        """The local execution of ``job_id``, in whichever slot runs it."""
        for slot in self._slots:
            execution = slot.executions.get(job_id)
            if execution is not None:
                return execution
        return None

    async def _recover(self, slot: _Slot, sequence: int) -> TickResult | None:
        """Ask the liveness probe about a claim nobody here executes; recover it if gone."""
        found = self._store.find_claim(sequence)
        if found is None or found[0].state != "running":
            return None
        job, token = found
        try:
            alive: Any = self._is_alive(job)
            if inspect.isawaitable(alive):
                alive = await alive
            if not isinstance(alive, bool):
                raise TypeError(f"is_alive returned {type(alive).__name__}, expected bool")
        except Exception as error:  # the probe's failure is reported, never guessed at
            slot.probe_after = _claim_order(job)
            return TickResult(
                "liveness_unknown", job_id=job.job_id, reason=f"{type(error).__name__}: {error}"
            )
        if alive:
            slot.probe_after = _claim_order(job)  # the next tick looks at the next claim
            return None
        result = self._transition(lambda: self._recover_in_transaction(job.job_id, token))
        if result is not None:
            await self._wake_now()
        return result

    async def _run(self, slot: _Slot, execution: _Execution) -> TickResult:
        job, signal = execution.job, execution.signal
        executions = slot.executions
        executions[job.job_id] = execution
        try:
            settlement, interruption = await run_executor(self._execute, job, signal)
            outcome = self._transition(lambda: self._settle_in_transaction(execution, settlement))
        finally:
            del executions[job.job_id]
        if interruption is not None:
            self._wake_soon()
            raise interruption
        await self._wake_now()
        return outcome

    # ------------------------------------------- transitions (in a transaction)

    def _ingest_in_transaction(self, valid: ValidJob) -> IngestStatus:
        if self._store.insert(valid, self._clock()):
            self._project_queue(valid.queue)
            return "queued"
        stored = self._store.find_cargo(valid.job_id)
        assert stored is not None  # the insert conflicted on this job_id
        differences = cargo_differences(valid, stored)
        if differences:
            raise IngestConflict(valid.job_id, differences)
        return "duplicate"

    def _cancel_in_transaction(
        self, job_id: str, cancellation_id: str, only_if_queued: bool
    ) -> CancelStatus:
        job = self._store.find(job_id)
        decision = lifecycle.decide_cancel(job, cancellation_id, only_if_queued=only_if_queued)
        if decision.record:
            assert job is not None
            self._store.record_cancellation(job_id, cancellation_id)
            self._project_queue(job.queue)
        return decision.status

    def _settle_next_cancelled(self, partition: Partition) -> TickResult | None:
        job = self._store.settle_next_cancelled(partition, self._clock())
        if job is None:
            return None
        self._project_queue(job.queue, settled=job)
        return _settled(job)

    def _claim_next(
        self, partition: Partition, token: str, if_clear_of: list[str] | None = None
    ) -> JobRecord | None:
        """Claim the partition's next job; with ``if_clear_of``, only if no
        running claim of the partition outside those tokens and no cancelled
        waiting job of the partition needs the tick first."""
        if if_clear_of is None:
            job = self._store.claim_next(partition, token, self._clock())
        else:
            job = self._store.claim_next_if_clear(partition, token, self._clock(), if_clear_of)
        if job is not None:
            self._project_queue(job.queue)
        return job

    def _recover_in_transaction(self, job_id: str, token: str) -> TickResult | None:
        # Decide on a fresh read: a cancellation may have landed while the
        # probe was awaited. The writes are fenced on the token regardless.
        job = self._store.find(job_id)
        if job is None or job.state != "running":
            return None
        action = lifecycle.decide_recovery(job)
        if action == "requeue":
            requeued = self._store.requeue_claim(job.sequence, token)
            if requeued is None:
                return None
            self._project_queue(job.queue)
            return TickResult("requeued", job_id=job_id)
        settlement = lifecycle.recovery_settlement(action)
        settled = self._store.settle_recovered_claim(job.sequence, token, settlement,
                                                     self._clock())
        if settled is None:
            return None
        self._project_queue(job.queue, settled=settled)
        return _settled(settled)

    def _settle_in_transaction(
        self, execution: _Execution, settlement: lifecycle.Settlement
    ) -> TickResult:
        settled = self._write_settlement(execution, settlement, unless_cancelled=True)
        if settled is not None:
            return settled
        # Rare path: read and write again, atomically, so that nothing (not
        # even another process on the same file) moves the job in between.
        return self._owner.atomic(lambda: self._settle_unusual(execution, settlement))

    def _settle_unusual(
        self, execution: _Execution, settlement: lifecycle.Settlement
    ) -> TickResult:
        """The guarded settle matched nothing: find out why and act on it."""
        job = execution.job
        current = self._store.find_claim(job.sequence)
        if current is not None:
            record, token = current
            if record.state == "running" and token == execution.token:
                # A cancellation was recorded while the job ran (through any
                # path: cancel, a host transaction, another runtime); the
                # outcome follows the durable record, not the local signal.
                cancelled = lifecycle.settlement_under_cancellation(settlement)
                settled = self._write_settlement(execution, cancelled, unless_cancelled=False)
                assert settled is not None  # same transaction as the read above
                return settled
            if record.state == "settled" and token == execution.token:
                # Settled under our own claim: a lane refusal, while it ran.
                # Report what is committed; it was projected then. (Recovery
                # elsewhere releases the token: that is claim_replaced.)
                return _settled(record)
        return TickResult("idle", job_id=job.job_id, reason="claim_replaced")

    def _write_settlement(
        self, execution: _Execution, settlement: lifecycle.Settlement, *, unless_cancelled: bool
    ) -> TickResult | None:
        job, now = execution.job, self._clock()
        if self._project is None:
            if self._store.settle_claim(job.sequence, execution.token, settlement, now,
                                        unless_cancelled=unless_cancelled):
                return TickResult("settled", job_id=job.job_id, outcome=settlement.outcome,
                                  failure_reason=settlement.failure_reason)
            return None
        settled = self._store.settle_claim_record(job.sequence, execution.token, settlement, now,
                                                  unless_cancelled=unless_cancelled)
        if settled is None:
            return None
        self._project_queue(job.queue, settled=settled)
        return _settled(settled)

    # ---------------------------------------------------------------- helpers

    def _transition(self, change: Callable[[], T]) -> T:
        """Run one transition.

        Every transition writes with a single statement, which is atomic by
        itself. With a projector, the projector's writes must commit or roll
        back with it, so the two run in one owner transaction.
        """
        if self._project is None:
            return change()
        return self._owner.atomic(change)

    def _project_queue(self, queue: str, settled: JobRecord | None = None) -> None:
        if self._project is None:
            return
        result: Any = self._project(QueueTransition(queue, self._store.queue_head(queue), settled))
        if inspect.isawaitable(result):
            # It would run outside the transaction; refuse, rolling back.
            if inspect.iscoroutine(result):
                result.close()
            raise TypeError("project must be synchronous: it runs inside the transaction")

    def _abort(self, job_id: str, reason: str) -> None:
        # Signals the slot that owns the execution (a job runs in one slot).
        execution = self._execution_of(job_id)
        if execution is not None:
            execution.signal._abort(reason)

    def _abort_if_cancelled(self, job_id: str) -> None:
        # Scheduled after a transactional cancellation: by the time it runs the
        # host's synchronous transaction has committed or rolled back.
        if self._execution_of(job_id) is not None:
            job = self._store.find(job_id)
            if job is not None and job.cancellation_id is not None:
                self._abort(job_id, lifecycle.ABORT_CANCELLED)

    async def _wake_now(self) -> None:
        result = self._wake.recompute()
        if inspect.isawaitable(result):
            await result

    def _wake_soon(self) -> None:
        """Call wake.recompute() from synchronous code; an async one runs as a task."""
        result = self._wake.recompute()
        if inspect.isawaitable(result):
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


class OwnerRuntime(_LocalRuntime):
    """The owner-local runtime. See the README for the full contract.

    ``execute(job, signal)`` runs one claimed job; ``is_alive(job)`` answers
    whether a running claim that this runtime does not own still has a live
    execution; ``wake.recompute()`` is called after every durable change that
    can alter when the next tick should run; ``project(transition)`` (optional)
    runs inside the transaction of every change to a queue.

    ``concurrent_lane`` (optional) reserves one lane for a second tick slot:
    the constructor then returns a ``ConcurrentOwnerRuntime``, which has
    ``tick_concurrent()``. A runtime opened without it has no such method.
    """

    @overload
    def __new__(
        cls,
        owner: SyncDatabase,
        *,
        execute: Executor,
        is_alive: LivenessProbe,
        wake: Wake,
        project: Projector | None = None,
        clock: Clock | None = None,
        concurrent_lane: None = None,
    ) -> Self: ...

    @overload
    def __new__(
        cls,
        owner: SyncDatabase,
        *,
        execute: Executor,
        is_alive: LivenessProbe,
        wake: Wake,
        project: Projector | None = None,
        clock: Clock | None = None,
        concurrent_lane: str,
    ) -> ConcurrentOwnerRuntime: ...

    def __new__(
        cls,
        owner: SyncDatabase,
        *,
        execute: Executor,
        is_alive: LivenessProbe,
        wake: Wake,
        project: Projector | None = None,
        clock: Clock | None = None,
        concurrent_lane: str | None = None,
    ) -> OwnerRuntime:
        # Only the class is chosen here; __init__ (of the class chosen)
        # validates every argument, concurrent_lane included.
        if concurrent_lane is not None and cls is OwnerRuntime:
            return object.__new__(ConcurrentOwnerRuntime)
        return object.__new__(cls)


class ConcurrentOwnerRuntime(OwnerRuntime):
    """An OwnerRuntime with a concurrent lane: two tick slots over one store.

    ``tick()`` (the serial slot) never selects a job of the concurrent lane;
    ``tick_concurrent()`` selects only those. Each slot has its own busy
    guard and executions, so one of each can be in flight at once; both
    share the store, the projector and the wake. Either slot runs a job only
    while it is its queue's head across lanes.
    """

    def __init__(
        self,
        owner: SyncDatabase,
        *,
        execute: Executor,
        is_alive: LivenessProbe,
        wake: Wake,
        project: Projector | None = None,
        clock: Clock | None = None,
        concurrent_lane: str,
    ) -> None:
        # Checked here too: the base class would take None for "no lane".
        check_text("concurrent_lane", concurrent_lane, MAX_LANE_LENGTH, InvalidArgument)
        super().__init__(owner, execute=execute, is_alive=is_alive, wake=wake, project=project,
                         clock=clock, concurrent_lane=concurrent_lane)
        self._concurrent = self._slots[1]

    @property
    def concurrent_lane(self) -> str:
        lane = self._concurrent_lane
        assert lane is not None
        return lane

    async def tick_concurrent(self) -> TickResult:
        """tick(), for the concurrent lane's slot: recover one of its
        disappeared claims, settle one of its cancelled queued jobs, or claim
        and execute its best job that heads its queue."""
        slot = self._concurrent
        if slot.busy:
            return TickResult("busy")
        slot.busy = True
        try:
            return await self._tick(slot)
        finally:
            slot.busy = False


class TransactionalJobs:
    """Job mutations and reads for code already inside its own SQLite transaction.

    The mutations are the ones ``ingest`` and ``cancel`` use, so the host's own
    write and the job commit or roll back together.
    """

    def __init__(self, runtime: _LocalRuntime) -> None:
        self._runtime = runtime

    def enqueue_accepted_job(self, job: Job) -> IngestStatus:
        # ingest's single statement joins the open transaction as it is.
        return self._runtime.ingest(job)

    def record_cancellation_intent(
        self, job_id: str, cancellation_id: str, only_if_queued: bool = False
    ) -> CancelResult:
        runtime = self._runtime
        status = runtime._record_cancellation(job_id, cancellation_id, only_if_queued)
        if status == "recorded" and runtime._execution_of(job_id) is not None:
            # Abort only once the host's transaction has committed (checked then).
            asyncio.get_running_loop().call_soon(runtime._abort_if_cancelled, job_id)
        return CancelResult(status, job_id)

    def read_queue_head(self, queue: str) -> JobRecord | None:
        return self._runtime.read_queue_head(queue)

    def read_latest_settled_job(self, queue: str) -> JobRecord | None:
        return self._runtime._store.latest_settled(check_id("queue", queue))


async def _await(awaitable: Awaitable[T]) -> T:
    return await awaitable


_BEFORE_ANY_CLAIM = (-MAX_SAFE_INTEGER, 0)


def _claim_order(job: JobRecord) -> tuple[int, int]:
    assert job.started_at is not None  # a running claim always has one
    return job.started_at, job.sequence


def _settled(job: JobRecord) -> TickResult:
    return TickResult(
        "settled", job_id=job.job_id, outcome=job.outcome, failure_reason=job.failure_reason
    )
