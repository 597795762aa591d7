"""What a lifecycle operation asks of its runtime, and the answers it expects.

An operation (``tickwork.lifecycle.operations``) is a generator: it yields one
request at a time and is sent the answer. It never touches a store, a clock or
an executor itself; the runtime driving it does, each in its own way: the
owner-local runtime answers synchronously from SQLite inside its transactions,
the shared runtimes with ``await`` against D1 or PostgreSQL, fenced on their
leases. A store that cannot answer raises, and the runtime throws that error
into the operation at the ``yield`` that asked.

Each request says below what it answers. Held claims and tickers are the
runtime's own objects: an operation only reads ``held.job`` and
``held.token``, and passes a ticker back unchanged.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeAlias, TypeVar

from tickwork.events import Event, EventKind
from tickwork.lifecycle.rules import Settlement
from tickwork.model.jobs import JobRecord, ValidJob
from tickwork.model.limits import ConcurrencyLimit, LimitKind
from tickwork.model.rate_limits import RateLimit
from tickwork.model.retention import RetentionPolicy
from tickwork.model.schedules import ValidSchedule

T = TypeVar("T")

#: An operation: yields requests, is sent their answers, returns its result.
Plan: TypeAlias = Generator["Request", Any, T]


class Held(Protocol):
    """A claim this runtime holds: the job as claimed and its private token."""

    @property
    def job(self) -> JobRecord: ...

    @property
    def token(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Suspect:
    """A running claim that no execution here holds, which may be dead.

    ``lease_expired``: its lease ran out (shared runtimes), so it is presumed
    dead; otherwise (owner-local) the liveness probe decides.
    """

    job: JobRecord
    token: str
    lease_expired: bool


@dataclass(frozen=True, slots=True)
class Probe:
    """Why the fast claim claimed nothing.

    ``suspect``: a claim to recover first, if any; ``cancelled_waiting``: a
    cancelled job still queued; ``blocked``: the claim was held back for one
    of them (else there was simply nothing to claim).
    """

    suspect: Suspect | None
    cancelled_waiting: bool
    blocked: bool


#: The probe of a tick whose fast claim found nothing at all to do.
NOTHING_TO_DO: Final = Probe(None, False, False)


@dataclass(frozen=True, slots=True)
class ClaimView:
    """A job as one of its claims sees it: the current token, and whether
    that claim is live (running, and its lease, where there is one, unexpired)."""

    job: JobRecord
    token: str | None
    lease_live: bool


class Request:
    """Base of every request (``isinstance`` checks in tests; runtimes
    dispatch on the exact type). Requests are plain slotted dataclasses,
    not frozen ones: a tick makes several, and a frozen one costs a
    ``setattr`` call per field. Nothing changes a request once made."""

    __slots__ = ()


# ----------------------------------------------------------------- reads


@dataclass(slots=True)
class Find(Request):
    """The job ``job_id`` -> ``JobRecord | None``."""

    job_id: str


@dataclass(slots=True)
class FindCargo(Request):
    """The stored identity and cargo of ``job_id``, as ``validate_job`` makes
    them -> ``ValidJob | None``."""

    job_id: str


@dataclass(slots=True)
class QueueHead(Request):
    """The queue's running job (of a queue running several, the one that
    started first), else its best waiting one -> ``JobRecord | None``."""

    queue: str


@dataclass(slots=True)
class HasPendingWork(Request):
    """Whether a tick has work now: a job due (or cancelled) and queued, or
    one running -> ``bool``. A job waiting for its due time is not."""


@dataclass(slots=True)
class NextWork(Request):
    """``(pending, next_due, now)``: whether a tick has work now (as
    ``HasPendingWork``), the earliest due time of a job waiting for it (or
    None), and the store's clock, read together."""


@dataclass(slots=True)
class StatusGroups(Request):
    """``(queue, state, outcome, count)`` of every group of jobs -> rows."""


@dataclass(slots=True)
class QueueCounts(Request):
    """One queue's ``(queued, running, delayed, paused, settled per outcome...)`` -> one row."""

    queue: str


@dataclass(slots=True)
class Backlog(Request):
    """Every queue's unsettled counts, from the indexes of unsettled jobs ->
    rows of ``(queue, ready, delayed, running, ready_since)``."""


@dataclass(slots=True)
class HistoryBuckets(Request):
    """The queue's history rows in [since, until) summed per ``bucket_ms`` ->
    rows of ``(bucket, enqueued, started, completed, failed, cancelled,
    retried, depth, oldest_age_ms)`` oldest first, or None when the queue
    has no history at all."""

    queue: str
    since: int
    until: int
    bucket_ms: int


@dataclass(slots=True)
class DeadLetterPage(Request):
    """Up to ``limit`` of the queue's dead letters settled before ``before``
    (``(settled_at, sequence)``, exclusive), newest first -> ``list[JobRecord]``."""

    queue: str
    before: tuple[int, int]
    limit: int


@dataclass(frozen=True, slots=True)
class JobListing:
    """Which jobs a browse lists, in which order: the jobs of one queue
    (``by`` "queue") or one lane (``by`` "lane") named ``value``, in
    ``state``, settled ones optionally of one ``outcome``; ``newest`` first
    or oldest first. Queued and running jobs go by enqueue order
    (``sequence``), settled ones by settlement (``settled_at``, ``sequence``)."""

    by: str
    value: str
    state: str
    outcome: str | None
    newest: bool

    @property
    def shape(self) -> tuple[str, str, bool, bool]:
        """What picks a store's statement: (by, state, outcome given, newest)."""
        return self.by, self.state, self.outcome is not None, self.newest


@dataclass(slots=True)
class ListJobs(Request):
    """Up to ``limit`` jobs of ``listing`` strictly past ``after`` (its
    ``(settled_at, sequence)`` position for settled jobs, ``(0, sequence)``
    otherwise) in the listing's order -> ``list[JobRecord]``."""

    listing: JobListing
    after: tuple[int, int]
    limit: int


@dataclass(slots=True)
class JobsByIdPrefix(Request):
    """Up to ``limit`` jobs whose id starts with ``prefix``, in id order (by
    code point), from the first such id, or strictly after ``after`` (the
    last id of the previous page) -> ``list[JobRecord]``."""

    prefix: str
    after: str | None
    limit: int


@dataclass(slots=True)
class RedriveApplied(Request):
    """Whether ``redrive_id`` was applied to the job before -> ``bool``."""

    job_id: str
    redrive_id: str


@dataclass(slots=True)
class LaneHasPending(Request):
    """Whether the lane still has a queued or running job -> ``bool``."""

    lane: str


# ------------------------------------------------------------- mutations


@dataclass(slots=True)
class Insert(Request):
    """Insert a new queued job -> ``bool``: False (nothing written) when the
    job_id exists."""

    job: ValidJob


@dataclass(slots=True)
class InsertMany(Request):
    """Insert the new jobs of ``jobs`` in order, all or nothing -> per job
    True (inserted) or False (an identical replay); raises IngestConflict
    with nothing written; None, with nothing written, when a concurrent
    change kept the store from deciding (ask again)."""

    jobs: Sequence[ValidJob]


@dataclass(slots=True)
class RecordCancellation(Request):
    """Write the job's first cancellation -> ``bool``: False (nothing
    written) when it no longer applies: the job settled, has a cancellation,
    or (``only_if_queued``) started."""

    job_id: str
    cancellation_id: str
    only_if_queued: bool


@dataclass(slots=True)
class RecordRedrive(Request):
    """Put a dead letter back to queued as a new attempt chain, remembering
    ``redrive_id`` -> the job as queued again, or None (nothing written) when
    it no longer applies: the job is not a dead letter now, or the id was
    applied meanwhile."""

    job_id: str
    redrive_id: str


@dataclass(slots=True)
class FailLane(Request):
    """Settle up to ``limit`` of the lane's queued and running jobs as failed
    with ``reason``, running ones first -> ``(failed jobs, more)``, where
    ``more`` is whether any remain, or None when the store did not look."""

    lane: str
    reason: str
    limit: int


@dataclass(slots=True)
class Purge(Request):
    """Delete the queue's queued jobs -> how many."""

    queue: str


@dataclass(slots=True)
class PauseQueue(Request):
    """Mark the queue paused -> ``bool``: False (nothing written) when it is already."""

    queue: str


@dataclass(slots=True)
class ResumeQueue(Request):
    """Unmark the queue -> ``bool``: False (nothing written) when it was not paused."""

    queue: str


@dataclass(slots=True)
class Limits(Request):
    """Every stored concurrency limit, queues first then lanes, each by key
    -> ``list[ConcurrencyLimit]``."""


@dataclass(slots=True)
class PutLimit(Request):
    """Store ``limit``, replacing its kind and key's -> ``bool``: False
    (nothing written) when the same ``max_running`` is stored already."""

    limit: ConcurrencyLimit


@dataclass(slots=True)
class DeleteLimit(Request):
    """Remove the limit of ``kind`` on ``key`` -> ``bool``: whether there was one."""

    kind: LimitKind
    key: str


@dataclass(slots=True)
class RunningJobs(Request):
    """The ids of up to ``limit`` running jobs of the queue or lane ``key``,
    oldest start first -> ``list[str]``."""

    kind: LimitKind
    key: str
    limit: int


@dataclass(slots=True)
class ReadyAhead(Request):
    """The ids of up to ``limit`` jobs of ``queue`` a claim would take
    before the job at (``priority``, ``sequence``): queued, due, not
    cancelled, and earlier in pick order -> ``list[str]``, in pick order."""

    queue: str
    priority: int
    sequence: int
    limit: int


@dataclass(slots=True)
class RateLimits(Request):
    """Every key with a rate limit or a hold in force, queues first then
    lanes, each by key -> ``list[RateLimit]``."""


@dataclass(slots=True)
class PutRateLimit(Request):
    """Store the bucket of ``limit`` on its kind and key, keeping the key's
    hold -> ``bool``: False (nothing written) when the same bucket is stored."""

    limit: RateLimit


@dataclass(slots=True)
class DeleteRateLimit(Request):
    """Remove the bucket and the hold of ``kind`` on ``key`` -> ``bool``:
    whether either was there."""

    kind: LimitKind
    key: str


@dataclass(slots=True)
class RetentionPolicies(Request):
    """Every stored retention policy -> ``list[RetentionPolicy]`` (the
    scope's default, if stored, with ``queue`` None)."""


@dataclass(slots=True)
class PutRetention(Request):
    """Store ``policy``, replacing its queue's (or the scope's default) ->
    ``bool``: False (nothing written) when the same times are stored already."""

    policy: RetentionPolicy


@dataclass(slots=True)
class DeleteRetention(Request):
    """Remove the policy of ``queue`` (None: the scope's default) -> ``bool``:
    whether there was one."""

    queue: str | None


@dataclass(slots=True)
class StorageUsage(Request):
    """The store's size and its tables' row counts -> ``StorageReport``."""


@dataclass(slots=True)
class SettledQueues(Request):
    """Every queue that has settled jobs, by name -> ``list[str]``."""


@dataclass(slots=True)
class PruneSettled(Request):
    """Delete up to ``limit`` of ``queue``'s settled jobs (and their rows in
    side tables): completed and cancelled ones settled before
    ``completed_before``, the others before ``failed_before`` (None: none of
    that kind) -> how many were deleted. Never a queued or running job."""

    queue: str
    completed_before: int | None
    failed_before: int | None
    limit: int


@dataclass(slots=True)
class Commit(Request):
    """What came before is one durable change: commit it now (the owner-local
    runtime ends its transaction here; elsewhere every write committed on its
    own already) -> None."""


@dataclass(slots=True)
class Abort(Request):
    """Once the change is committed, stop the local executions of these jobs,
    telling them ``reason`` -> None."""

    job_ids: tuple[str, ...]
    reason: str


@dataclass(slots=True)
class Wake(Request):
    """A durable change may move the next tick: tell the host's wake -> None.

    ``now``: during a tick, the runtime awaits the wake before going on;
    otherwise (and after an interruption) it may only start it.
    """

    now: bool = True


# -------------------------------------------------------------- schedules


@dataclass(slots=True)
class QueuePaused(Request):
    """Whether the queue is paused -> ``bool`` (one key lookup)."""

    queue: str


@dataclass(slots=True)
class Executing(Request):
    """The jobs the slots a job of ``lane`` could run on execute, in this
    process, when every one of those slots is taken -> ``list[str]`` (empty
    while one is free, and where the runtime has no owner-wide limit: a
    shared runtime's workers each run their own)."""

    lane: str


@dataclass(slots=True)
class StoreNow(Request):
    """The store's clock (epoch ms; database time on D1 and PostgreSQL) -> ``int``."""


@dataclass(slots=True)
class FindSchedule(Request):
    """The schedule ``name`` -> ``StoredSchedule | None``."""

    name: str


@dataclass(slots=True)
class ListSchedules(Request):
    """Every schedule, by name -> ``list[StoredSchedule]``."""


@dataclass(slots=True)
class CreateSchedule(Request):
    """Store a new schedule whose first slot is ``next_at`` -> ``bool``:
    False (nothing written) when the name exists."""

    schedule: ValidSchedule
    next_at: int


@dataclass(slots=True)
class ReplaceSchedule(Request):
    """Replace the definition ``old_spec_json`` of the schedule with
    ``schedule``, its next slot ``next_at`` -> ``bool``: False (nothing
    written) when the stored definition is another one (or gone)."""

    schedule: ValidSchedule
    old_spec_json: str
    next_at: int


@dataclass(slots=True)
class PauseSchedule(Request):
    """Pause the schedule -> ``bool``: False when it is paused already, or gone."""

    name: str


@dataclass(slots=True)
class ResumeSchedule(Request):
    """Resume the paused schedule (still ``spec_json``) from ``next_at`` ->
    ``bool``: False when it is not paused, or was replaced meanwhile."""

    name: str
    spec_json: str
    next_at: int


@dataclass(slots=True)
class DeleteSchedule(Request):
    """Delete the schedule -> ``bool``: False when there was none."""

    name: str


@dataclass(slots=True)
class DueSchedules(Request):
    """The running schedules with a slot that has come, and the store's clock
    they were judged by -> ``(list[StoredSchedule], now)``. A runtime that
    knows no slot has come answers ``([], None)`` without reading."""


@dataclass(slots=True)
class FireSlots(Request):
    """Create the jobs of ``slots`` (each fenced on the schedule still being
    as read, and created once) and move the schedule's next slot to
    ``next_at``, in one transaction or batch -> the jobs created
    (``ValidJob``), in slot order."""

    schedule: ValidSchedule
    slots: Sequence[int]
    next_at: int


# ----------------------------------------------------------------- ticks


@dataclass(slots=True)
class ClaimOrProbe(Request):
    """The tick's first step: claim the ticker's best ready job under a fresh
    token, but only when nothing must come first -> ``(Held, None)``; else
    ``(None, Probe)`` saying what must (a suspect claim, a cancelled job)."""

    ticker: Any


@dataclass(slots=True)
class Claim(Request):
    """Claim the ticker's best ready job under a fresh token, unguarded ->
    ``Held | None``."""

    ticker: Any


@dataclass(slots=True)
class AskLiveness(Request):
    """Ask the host whether the suspect's execution still runs somewhere ->
    ``ALIVE``, ``DEAD``, or the text of the probe's failure (owner-local
    only: a shared runtime's suspects have expired leases)."""

    suspect: Suspect
    ticker: Any


#: AskLiveness answers.
ALIVE: Final = True
DEAD: Final = False


@dataclass(slots=True)
class Requeue(Request):
    """Put the suspect back in its queue, counting the recovery -> ``bool``;
    fenced on its token (and, shared, on its lease still being expired)."""

    suspect: Suspect


@dataclass(slots=True)
class SettleRecovered(Request):
    """Settle the suspect with ``settlement``, releasing its token ->
    ``JobRecord | None``; fenced like ``Requeue``."""

    suspect: Suspect
    settlement: Settlement


@dataclass(slots=True)
class SettleNextCancelled(Request):
    """Settle the ticker's oldest cancelled queued job, without running it ->
    ``JobRecord | None``."""

    ticker: Any


@dataclass(slots=True)
class Execute(Request):
    """Run the executor on a held claim (renewing its lease, where it has
    one) -> ``(Settlement, interruption)``: what to record, and the
    ``CancelledError`` to re-raise once it is recorded (or None)."""

    held: Held


@dataclass(slots=True)
class Settle(Request):
    """Settle a held claim; its execution here is over -> ``(written, next)``.

    Fenced on the claim's token and running state (and a live lease), and on
    the cancellation being absent (``cancelled=False``) or recorded (True):
    ``written`` is False when the fence matched nothing. ``claim_next``:
    also claim the next job in the same commit or batch; ``next`` is that
    ``Held`` (or None).
    """

    held: Held
    settlement: Settlement
    cancelled: bool = False
    claim_next: bool = False


@dataclass(slots=True)
class RequeueForRetry(Request):
    """Put a held claim's job back to queued as its next attempt, due
    ``delay_ms`` from now by the store's clock, with the attempt that ended
    (``settlement``) in its history -> the job as queued, or None when the
    fence (as ``Settle``'s, with no cancellation) matched nothing."""

    held: Held
    settlement: Settlement
    delay_ms: int


@dataclass(slots=True)
class PutBackRateLimited(Request):
    """The held claim's executor was rate-limited: hold ``kind`` on ``key``
    until ``until`` (epoch ms, the store's clock) and put the job back to
    queued without using an attempt -> the job as put back, or None when
    the fence (as ``RequeueForRetry``'s) matched nothing (the hold is
    written either way)."""

    held: Held
    kind: LimitKind
    key: str
    until: int


@dataclass(slots=True)
class ReadClaim(Request):
    """The held claim's job as stored now -> ``ClaimView | None``."""

    held: Held


# ---------------------------------------------------------------- events


@dataclass(slots=True)
class Report(Request):
    """A transition to report to the runtime's event hook once it is durable
    -> None. A runtime without a hook ignores it (no ``Event`` is built); the
    synchronous driver holds it until the commit, like ``Wake``.

    The plan hands over what it has; the runtime builds the ``Event`` (it
    knows its clock and how long an execution ran): ``subject`` is a
    ``JobRecord``, a ``ValidJob`` or a ``Held`` claim (or None for a queue's
    or a lane's event, named by ``queue`` / ``lane``).
    """

    kind: EventKind
    subject: Any = None
    settlement: Settlement | None = None
    reason: str | None = None
    count: int | None = None
    queue: str | None = None
    lane: str | None = None
    retry_at: int | None = None


def event_of(report: Report, at: int, duration_ms: int | None = None) -> Event:
    """The event a ``Report`` stands for, at ``at`` (the runtime's clock)."""
    subject = report.subject
    settlement = report.settlement
    job = getattr(subject, "job", subject)  # a Held claim carries its job
    attempt = outcome = None
    reason = report.reason
    if settlement is not None:
        outcome, reason = settlement.outcome, settlement.failure_reason
    elif isinstance(job, JobRecord) and job.state == "settled":
        outcome, reason = job.outcome, job.failure_reason if reason is None else reason
    if isinstance(job, JobRecord):
        attempt = job.attempt
    if job is None:
        return Event(report.kind, None, report.queue, report.lane, at, reason=reason,
                     count=report.count)
    return Event(report.kind, job.job_id, job.queue, job.lane, at, outcome=outcome,
                 reason=reason, attempt=attempt, duration_ms=duration_ms,
                 count=report.count, retry_at=report.retry_at,
                 error=None if settlement is None else settlement.error_line)
