"""SharedRuntime: the job lifecycle over a database shared by many workers.

The D1 and PostgreSQL runtimes are this class with their own store. Liveness
comes from the claim's lease instead of a probe: a claim carries a private
random token and a lease in database time; the executing worker renews it
through ``tickwork.leases`` (single flight, one watchdog) and every transition
out of ``running`` is one statement fenced on the token and the lease. Any
worker's next tick recovers a claim whose lease expired.

What stays in memory is only what cannot be durable: the executions running
here (with their abort signals and lease keepers) and the busy guard.
"""

from __future__ import annotations

import inspect
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tickwork import lifecycle
from tickwork.leases import (
    DEFAULT_LEASE_MS,
    DEFAULT_RENEW_EVERY_MS,
    Clock,
    Heartbeat,
    LeaseKeeper,
    LoopClock,
    StaleLease,
    StaleReason,
)
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
    ExecutionResult,
    FailLaneResult,
    IngestStatus,
    QueueStatus,
    TickResult,
    queue_status_from_counts,
    queue_statuses_from_groups,
)
from tickwork.model.signals import AbortSignal
from tickwork.ports.shared_store import CancelWrite, SharedStore
from tickwork.runtimes.execution import run_executor

#: Lane refusal settles at most this many jobs per call.
FAIL_LANE_BATCH = 256

#: Why a settlement was not written (TickResult.reason with status "idle").
CLAIM_REPLACED = "claim_replaced"
LEASE_EXPIRED = "lease_expired"

Now = Callable[[], int]


class Wake(Protocol):
    def recompute(self) -> Any: ...


class LeasedSignal(AbortSignal):
    """The AbortSignal a shared runtime hands its executor, with the lease's heartbeat.

    ``signal.heartbeat`` extends the claim's lease (``await beat()`` or
    ``pulse()``); the runtime also renews it every ``renew_every_ms`` by itself.
    """

    __slots__ = ("heartbeat",)

    def __init__(self) -> None:
        super().__init__()
        self.heartbeat: Heartbeat | None = None


SharedExecutor = Callable[[JobRecord, LeasedSignal], Awaitable[ExecutionResult]]

#: ``SharedStore.insert_many`` (see port.py).
InsertMany = Callable[[list[ValidJob], int | None], Awaitable[list[bool] | None]]


@dataclass(slots=True)
class _Claim:
    """One claim of this runtime (what the lease keeper renews).

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


class SharedRuntime:
    """Same operations and results as ``OwnerRuntime``, all of them async."""

    def __init__(
        self,
        store: SharedStore,
        *,
        execute: SharedExecutor,
        wake: Wake,
        now: Now | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        renew_every_ms: int = DEFAULT_RENEW_EVERY_MS,
        clock: Clock | None = None,
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
        self._execute = execute
        self._wake = wake
        self._now = now
        self._lease_ms = lease_ms
        self._renew_every_ms = renew_every_ms
        self._clock: Clock = clock if clock is not None else LoopClock()
        self._executions: dict[str, _Claim] = {}
        self._busy = False
        self._schema_checked = False

    # ------------------------------------------------------------------ reads

    async def read(self, job_id: str) -> JobRecord | None:
        check_id("job_id", job_id)
        await self._ready()
        return await self._store.find(job_id)

    async def read_queue_head(self, queue: str) -> JobRecord | None:
        check_id("queue", queue)
        await self._ready()
        return await self._store.queue_head(queue)

    async def has_pending_work(self) -> bool:
        await self._ready()
        return await self._store.has_pending_work()

    async def status(self) -> list[QueueStatus]:
        """Job counts of every queue that has any job, sorted by queue name.

        One statement, but it reads every stored job, settled history
        included: use ``queue_status`` for one queue.
        """
        await self._ready()
        return queue_statuses_from_groups(await self._store.status_groups())

    async def queue_status(self, queue: str) -> QueueStatus:
        """Job counts of one queue (all zero for a queue without jobs), in one statement."""
        check_id("queue", queue)
        await self._ready()
        queued, running, *outcomes = await self._store.queue_counts(queue)
        return queue_status_from_counts(queue, queued, running, outcomes)

    # -------------------------------------------------------------- mutations

    async def ingest(self, job: Job) -> IngestStatus:
        """Store ``job``: "queued" when new, "duplicate" for an identical replay."""
        valid = validate_job(job)
        await self._ready()
        if await self._store.insert(valid, self._db_now()):
            await self._wake_now()
            return "queued"
        stored = await self._store.find_cargo(valid.job_id)
        if stored is None:  # purged between the two statements: store it now
            return await self.ingest(job)
        differences = cargo_differences(valid, stored)
        if differences:
            raise IngestConflict(valid.job_id, differences)
        return "duplicate"

    async def ingest_many(self, jobs: Sequence[Job]) -> list[IngestStatus]:
        """Store up to ``MAX_INGEST_BATCH`` jobs atomically; one status per job, in order.

        Every job is validated before anything is written. All of them commit
        in one transaction (PostgreSQL) or one batch (D1), or, when any one
        conflicts (``IngestConflict``), none does. A job_id repeated within
        the call is a "duplicate" when its cargo is identical, else a conflict.
        """
        return await self._ingest_many(jobs, self._store.insert_many)

    async def _ingest_many(self, jobs: Sequence[Job], insert: InsertMany) -> list[IngestStatus]:
        """``ingest_many`` over ``insert``: the store's ``insert_many``, or a
        runtime's own call of it with extra arguments (D1's ``before``)."""
        valid = validate_jobs(jobs)
        await self._ready()
        # The store answers None only when a concurrent change (a purge, a
        # racing insert) kept it from deciding; it wrote nothing then.
        for _ in range(8):
            inserted = await insert(valid, self._db_now())
            if inserted is not None:
                break
        else:
            raise RuntimeError("ingest_many did not converge under concurrent changes")
        if any(inserted):
            await self._wake_now()
        return ["queued" if new else "duplicate" for new in inserted]

    async def cancel(
        self, job_id: str, cancellation_id: str, *, only_if_queued: bool = False
    ) -> CancelResult:
        """Record a durable cancellation.

        A job executing here is aborted at once; a job another worker executes
        learns of it at that worker's next lease renewal.
        """
        check_cancel_args(job_id, cancellation_id, only_if_queued)
        await self._ready()
        mode: CancelWrite = "only_if_queued" if only_if_queued else "any"
        # Decide on what is stored, then write fenced on that decision still
        # holding. Without interactive transactions (D1) a concurrent change
        # makes the write match nothing; states only move forward, so reading
        # again converges in a few rounds.
        while True:
            job = await self._store.find(job_id)
            decision = lifecycle.decide_cancel(job, cancellation_id, only_if_queued=only_if_queued)
            if not decision.record:
                return CancelResult(decision.status, job_id)
            if await self._store.record_cancellation(job_id, cancellation_id, mode):
                break
        self._abort(job_id, lifecycle.ABORT_CANCELLED)
        await self._wake_now()
        return CancelResult("recorded", job_id)

    async def fail_lane(self, lane: str, reason: str) -> FailLaneResult:
        """Settle up to 256 of the lane's queued and running jobs as failed."""
        check_text("lane", lane, MAX_LANE_LENGTH, InvalidArgument)
        check_reason("reason", reason)
        await self._ready()
        refused, more = await self._store.refuse_lane(
            lane, reason, FAIL_LANE_BATCH, self._db_now()
        )
        # Durable now: stop executions here. Workers elsewhere lose the claim
        # at their next renewal (the fenced renewal matches nothing).
        for job in refused:
            self._abort(job.job_id, lifecycle.ABORT_LANE_REFUSED)
        if refused:
            await self._wake_now()
        return FailLaneResult(len(refused), more)

    async def purge(self, queue: str) -> int:
        """Delete the queue's queued jobs; running and settled jobs stay."""
        check_id("queue", queue)
        await self._ready()
        deleted = await self._store.purge(queue)
        if deleted:
            await self._wake_now()
        return deleted

    # ------------------------------------------------------------------- tick

    async def tick(self) -> TickResult:
        """Recover an expired claim, settle a cancelled job, or claim and run one."""
        if self._busy:
            return TickResult("busy")
        self._busy = True
        try:
            await self._ready()
            result, _ = await self._tick(claim_next=False)
            return result
        finally:
            self._busy = False

    async def drain(
        self, *, max_ticks: int | None = None, budget_ms: int | None = None
    ) -> list[TickResult]:
        """Tick until there is nothing to do, ``max_ticks`` ticks ran or
        ``budget_ms`` passed; returns what each tick did (idle ticks excluded).

        A worker loop: because the next tick is certain, the settlement of
        one job and the claim of the next share one commit (PostgreSQL) or one
        batch (D1), halving the commits per job. A claim taken ahead is always
        run by this same call, even when the budget has run out meanwhile.
        While it runs, ``tick()`` on this runtime reports busy.
        """
        if max_ticks is not None:
            check_safe_int("max_ticks", max_ticks, InvalidArgument, 1)
        if budget_ms is not None:
            check_safe_int("budget_ms", budget_ms, InvalidArgument, 1)
        if self._busy:
            return [TickResult("busy")]
        self._busy = True
        try:
            await self._ready()
            clock = self._clock
            deadline = None if budget_ms is None else clock.now_ms() + budget_ms
            results: list[TickResult] = []
            carried: _Claim | None = None
            while True:
                more = ((max_ticks is None or len(results) + 1 < max_ticks)
                        and (deadline is None or clock.now_ms() < deadline))
                if carried is not None:
                    result, carried = await self._run(carried, clock, claim_next=more)
                else:
                    result, carried = await self._tick(claim_next=more)
                if result.status == "idle" and result.job_id is None:
                    return results
                results.append(result)
                if not more and carried is None:
                    return results
        finally:
            self._busy = False

    async def _tick(self, *, claim_next: bool) -> tuple[TickResult, _Claim | None]:
        clock = self._clock
        claim = _Claim.fresh(clock)
        # Fast path: one statement claims when no expired lease and no
        # cancelled job needs this tick first; otherwise the probe says which.
        job, (expired, cancelled_waiting) = await self._store.claim_or_probe(
            claim.token, self._lease_ms, self._db_now())
        if job is not None:
            return await self._run(claim.holding(job), clock, claim_next=claim_next)
        if expired is not None:
            recovered = await self._recover(expired.job, expired.token)
            if recovered is not None:
                return recovered, None
        if cancelled_waiting:
            settled = await self._store.settle_next_cancelled(self._db_now())
            if settled is not None:
                await self._wake_now()
                return _settled(settled), None
        if expired is None and not cancelled_waiting:
            return TickResult("idle"), None
        claim = _Claim.fresh(clock)
        job = await self._store.claim(claim.token, self._lease_ms, self._db_now(), guarded=False)
        if job is None:
            return TickResult("idle"), None
        return await self._run(claim.holding(job), clock, claim_next=claim_next)

    async def _recover(self, job: JobRecord, token: str) -> TickResult | None:
        """The claim's lease expired: its execution is presumed gone."""
        action = lifecycle.decide_recovery(job)
        now = self._db_now()
        if action == "requeue":
            if not await self._store.requeue_expired(job.sequence, token, now):
                return None  # renewed, settled or recovered by someone else meanwhile
            await self._wake_now()
            return TickResult("requeued", job_id=job.job_id)
        settled = await self._store.settle_expired(
            job.sequence, token, lifecycle.recovery_settlement(action), now
        )
        if settled is None:
            return None
        await self._wake_now()
        return _settled(settled)

    async def _run(
        self, claim: _Claim, clock: Clock, *, claim_next: bool
    ) -> tuple[TickResult, _Claim | None]:
        """Execute a held claim and settle it; with ``claim_next``, the settlement
        also claims the job for the caller's next tick."""
        job, signal = claim.job, claim.signal
        keeper: LeaseKeeper[_Claim] = LeaseKeeper(
            claim,
            self._renew,
            on_stale=lambda stale: _abort_stale(signal, stale),
            clock=clock,
            lease_ms=self._lease_ms,
            # The claim's lease started after claim.started_ms (database time
            # may differ; only durations matter), so the local watchdog never
            # outlives the durable lease.
            deadline_ms=claim.started_ms + self._lease_ms,
        )
        signal.heartbeat = keeper.heartbeat()
        keeper.start_periodic(every_ms=self._renew_every_ms)
        self._executions[job.job_id] = claim
        carried: _Claim | None = None
        try:
            settlement, interruption = await run_executor(self._execute, job, signal)
            # No renewal may run once we settle: stop the keeper first.
            keeper.clear()
            if claim_next and interruption is None:
                carried = _Claim.fresh(clock)
            outcome, next_job = await self._settle(claim, settlement, carried)
            carried = None if next_job is None or carried is None else carried.holding(next_job)
        finally:
            keeper.clear()
            del self._executions[job.job_id]
        await self._wake_now()
        if interruption is not None:
            raise interruption
        return outcome, carried

    async def _settle(
        self, claim: _Claim, settlement: lifecycle.Settlement, next_claim: _Claim | None
    ) -> tuple[TickResult, JobRecord | None]:
        job, token = claim.job, claim.token
        if next_claim is None:
            written = await self._store.settle(job.sequence, token, settlement,
                                               self._db_now(), cancelled=False)
            next_job = None
        else:
            written, next_job = await self._store.settle_and_claim(
                job.sequence, token, settlement, self._db_now(),
                next_token=next_claim.token, lease_ms=self._lease_ms)
        if written:
            return TickResult("settled", job_id=job.job_id, outcome=settlement.outcome,
                              failure_reason=settlement.failure_reason), next_job
        return await self._settle_unusual(claim, settlement), next_job

    async def _settle_unusual(
        self, claim: _Claim, settlement: lifecycle.Settlement
    ) -> TickResult:
        job, token = claim.job, claim.token
        # Rare path: find out why the fenced write matched nothing. Each round
        # reads, then writes fenced on what it read; states only move forward.
        for _ in range(8):
            view = await self._store.read_claim(job.sequence, self._db_now())
            if view is None or view.token != token:
                return TickResult("idle", job_id=job.job_id, reason=CLAIM_REPLACED)
            record = view.job
            if record.state == "settled":
                # Settled under our claim by someone else: a lane refusal.
                return _settled(record)
            if record.state != "running":
                return TickResult("idle", job_id=job.job_id, reason=CLAIM_REPLACED)
            if not view.lease_live:
                # Rejected, never written: the next tick anywhere recovers it.
                return TickResult("idle", job_id=job.job_id, reason=LEASE_EXPIRED)
            if record.cancellation_id is not None:
                cancelled = lifecycle.settlement_under_cancellation(settlement)
                if await self._store.settle(job.sequence, token, cancelled, self._db_now(),
                                            cancelled=True):
                    return TickResult("settled", job_id=job.job_id, outcome=cancelled.outcome,
                                      failure_reason=cancelled.failure_reason)
                continue
            if await self._store.settle(job.sequence, token, settlement, self._db_now(),
                                        cancelled=False):
                return TickResult("settled", job_id=job.job_id, outcome=settlement.outcome,
                                  failure_reason=settlement.failure_reason)
        raise RuntimeError(f"settlement of job {job.job_id!r} did not converge")

    async def _renew(self, claim: _Claim, extra_ms: int) -> bool:
        """The lease keeper's renew port: one fenced statement."""
        answer = await self._store.renew(claim.job.sequence, claim.token, extra_ms,
                                         self._db_now())
        if answer == "cancelled":
            claim.signal._abort(lifecycle.ABORT_CANCELLED)
        return answer != "lost"

    # ---------------------------------------------------------------- helpers

    async def _ready(self) -> None:
        """Check the schema once per runtime, before its first operation."""
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
                # Settled by someone else (a lane refusal, or a recovery after
                # the lease lapsed): the claim is gone, as a renewal would say.
                reason = str(StaleReason.LOST)
            elif current.cancellation_id is not None:
                reason = lifecycle.ABORT_CANCELLED
            else:
                continue
            claim = self._executions.get(job.job_id)
            if claim is not None and claim.signal._abort(reason):
                stopped += 1
        return stopped

    def _abort(self, job_id: str, reason: str) -> None:
        claim = self._executions.get(job_id)
        if claim is not None:
            claim.signal._abort(reason)

    async def _wake_now(self) -> None:
        result = self._wake.recompute()
        if inspect.isawaitable(result):
            await result


def _abort_stale(signal: AbortSignal, stale: StaleLease) -> None:
    signal._abort(str(stale.reason))


def _settled(job: JobRecord) -> TickResult:
    return TickResult(
        "settled", job_id=job.job_id, outcome=job.outcome, failure_reason=job.failure_reason
    )
