"""What an executor returns, and what the runtime's operations report."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from tickwork.model.errors import InvalidArgument
from tickwork.model.jobs import MAX_DELAY_MS, JobRecord, Outcome, check_reason, check_safe_int


@dataclass(frozen=True, slots=True)
class Completed:
    """The job did its work."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The job failed; ``reason`` is an optional short code (1 to 256 characters).

    ``retry_after_ms`` asks for the next attempt after that delay instead
    of the policy's backoff (say, from a ``Retry-After`` header); it is
    granted only while the job's retry policy has attempts left, and a job
    without a policy settles ``failed`` as always.

    A bad reason or delay raises ``InvalidArgument`` (a ``ValueError``) here,
    inside the executor, which then settles as ``execution_failed``.
    """

    reason: str | None = None
    retry_after_ms: int | None = None

    def __post_init__(self) -> None:
        if self.reason is not None:
            check_reason("Failed.reason", self.reason)
        if self.retry_after_ms is not None:
            check_safe_int("Failed.retry_after_ms", self.retry_after_ms, InvalidArgument, 0,
                           MAX_DELAY_MS)


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The job stopped because it was asked to."""


@dataclass(frozen=True, slots=True)
class OutcomeUnknown:
    """The job may or may not have had its effect (for example a timed-out request)."""


@dataclass(frozen=True, slots=True)
class RateLimited:
    """The job could not start its work yet because someone else's rate
    limit refused it (an API answering 429 with ``Retry-After``): it goes
    back to its queue without using an attempt, and its lane (or its queue)
    starts no job for ``retry_after_ms``.

    ``hold``: what to hold, ``"lane"`` or ``"queue"``; by default the job's
    lane when it names one of its own, else its queue (a job that names no
    lane is in the lane of its queue's name, so the default holds what the
    job was grouped by). A bad delay or hold raises ``InvalidArgument``
    here, inside the executor, which then settles as ``execution_failed``.
    """

    retry_after_ms: int
    hold: Literal["queue", "lane"] | None = None

    def __post_init__(self) -> None:
        check_safe_int("RateLimited.retry_after_ms", self.retry_after_ms, InvalidArgument, 0,
                       MAX_DELAY_MS)
        if self.hold not in (None, "queue", "lane"):
            raise InvalidArgument("RateLimited.hold",
                                  f"must be 'queue', 'lane' or None, got {self.hold!r}")


ExecutionResult: TypeAlias = Completed | Failed | Cancelled | OutcomeUnknown | RateLimited

TickStatus: TypeAlias = Literal[
    "idle", "busy", "settled", "retried", "requeued", "liveness_unknown"]
CancelStatus: TypeAlias = Literal[
    "recorded", "replayed", "conflict", "refused", "not_found", "already_settled"
]
RedriveStatus: TypeAlias = Literal["redriven", "replayed", "refused", "not_found"]
IngestStatus: TypeAlias = Literal["queued", "duplicate"]
#: How a browse orders its page: ``newest`` first or ``oldest`` first.
ListOrder: TypeAlias = Literal["newest", "oldest"]


@dataclass(frozen=True, slots=True)
class TickResult:
    """What one tick did.

    ``status``: ``idle`` (nothing to do), ``busy`` (a tick of this kind is in
    flight), ``settled`` (this tick settled ``job_id``), ``retried`` (the
    attempt ended with ``outcome`` and the job waits for its next attempt,
    due at ``retry_at``), ``requeued`` (recovery put ``job_id`` back and
    nothing else ran; or, with ``reason`` ``rate_limited``, its executor
    returned ``RateLimited`` and its key is held until ``retry_at``) or
    ``liveness_unknown`` (the liveness probe for ``job_id`` raised;
    ``reason`` says why).
    """

    status: TickStatus
    job_id: str | None = None
    outcome: Outcome | None = None
    failure_reason: str | None = None
    reason: str | None = None
    retry_at: int | None = None


# The slots' own setters: what TickResult's generated __init__ reaches
# through object.__setattr__, one generic call per field (a frozen
# dataclass), here called directly.
_SET_STATUS, _SET_JOB_ID, _SET_OUTCOME, _SET_FAILURE_REASON, _SET_REASON, _SET_RETRY_AT = (
    TickResult.__dict__[name].__set__
    for name in ("status", "job_id", "outcome", "failure_reason", "reason", "retry_at"))
_new = object.__new__


def ran_result(status: TickStatus, job_id: str, outcome: Outcome | None,
               failure_reason: str | None, retry_at: int | None = None) -> TickResult:
    """The result of a tick that settled a job or queued its retry
    (``settled``, ``retried``): ``TickResult(status, job_id=..., outcome=...,
    failure_reason=..., retry_at=...)``, the same object at half the cost."""
    result: TickResult = _new(TickResult)
    _SET_STATUS(result, status)
    _SET_JOB_ID(result, job_id)
    _SET_OUTCOME(result, outcome)
    _SET_FAILURE_REASON(result, failure_reason)
    _SET_REASON(result, None)
    _SET_RETRY_AT(result, retry_at)
    return result


@dataclass(frozen=True, slots=True)
class CancelResult:
    status: CancelStatus
    job_id: str


@dataclass(frozen=True, slots=True)
class RedriveResult:
    """What ``redrive`` did: ``redriven`` (the job is queued again, a new
    attempt chain), ``replayed`` (this redrive id was applied already),
    ``refused`` (``reason``: ``not_settled``, ``not_dead`` for a completed or
    cancelled job, or ``cancellation_recorded``) or ``not_found``."""

    status: RedriveStatus
    job_id: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class DeadLettersRedriven:
    """What ``redrive_dead_letters`` did to one page of ``queue``'s dead
    letters: how many it ``redriven``, how many its id had been applied to
    before (``replayed``: nothing done) and how many it could not redrive
    (``refused``: one with a recorded cancellation, or one that changed
    meanwhile). ``cursor`` goes on to the next page; None after the last."""

    queue: str
    redriven: int
    replayed: int
    refused: int
    cursor: str | None


@dataclass(frozen=True, slots=True)
class LaneCancelled:
    """What ``cancel_lane`` did to one page of ``lane``'s queued jobs: how
    many it ``cancelled``, how many carried its id already (``replayed``:
    nothing done) and how many it left alone (``skipped``: started
    meanwhile, settled, or cancelled under another id). ``cursor`` goes on
    to the next page; None after the last."""

    lane: str
    cancelled: int
    replayed: int
    skipped: int
    cursor: str | None


@dataclass(frozen=True, slots=True)
class DeadLetters:
    """One page of a queue's dead letters (jobs settled ``failed``,
    ``outcome_unknown`` or ``interrupted``), newest settlement first.
    ``cursor`` asks for the next page; None when this page is the last."""

    jobs: list[JobRecord]
    cursor: str | None


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of a browse (``list_jobs``). ``cursor`` asks for the next
    page; None when this page is the last."""

    jobs: list[JobRecord]
    cursor: str | None


@dataclass(frozen=True, slots=True)
class FailLaneResult:
    """``settled`` jobs were failed by this call; ``more`` says whether to call again."""

    settled: int
    more: bool


@dataclass(frozen=True, slots=True)
class QueueTransition:
    """Handed to ``project`` inside the transaction of every change to a queue.

    ``head`` is the queue's head after the change (None when the queue is
    empty); ``settled`` is the job the change settled, if any.
    """

    queue: str
    head: JobRecord | None
    settled: JobRecord | None = None


#: Every outcome a settled job can have, in the order QueueStatus.outcomes lists them.
OUTCOMES: tuple[Outcome, ...] = (
    "completed", "failed", "cancelled", "outcome_unknown", "interrupted")


@dataclass(frozen=True, slots=True)
class QueueStatus:
    """Job counts of one queue: by state, and settled jobs by outcome.

    ``outcomes`` always has all five outcomes as keys, in ``OUTCOMES`` order
    (0 when none); the runtimes report ``settled`` as their sum. It is a plain dict built
    fresh for this instance (a copy of what was passed in), so no two
    statuses share one and nothing stored changes through it; it stays a
    dict so that ``dataclasses.asdict`` and ``json.dumps`` work. Like any
    dataclass holding a dict, a QueueStatus is not hashable.
    """

    queue: str
    queued: int
    running: int
    settled: int
    outcomes: Mapping[str, int]
    #: Jobs waiting for their due time (not counted in ``queued``, which
    #: counts the jobs in the ready set).
    delayed: int = 0
    #: Whether the queue is paused (no tick claims its jobs).
    paused: bool = False

    def __post_init__(self) -> None:
        given = self.outcomes
        unknown = set(given) - set(OUTCOMES)
        if unknown:
            raise ValueError(f"outcomes: unknown outcome(s) {sorted(unknown)}")
        object.__setattr__(self, "outcomes", {name: given.get(name, 0) for name in OUTCOMES})


@dataclass(frozen=True, slots=True)
class QueueBacklog:
    """One queue's unsettled jobs, as a store reads them cheaply (from its
    indexes of unsettled jobs, never its settled history): for gauges.

    ``ready`` jobs are in the ready set (due, not cancelled), ``delayed`` ones
    wait for their time (a run_at, a delay or a retry's back-off), ``running``
    ones are claimed. ``oldest_ready_at`` (epoch ms, None without a ready job)
    is when the longest-waiting ready job became ready: when it was first
    due, or when its latest retry back-off ended or its latest redrive was
    made. ``read_at`` is the store's clock when it was read.
    """

    queue: str
    ready: int
    delayed: int
    running: int
    oldest_ready_at: int | None
    read_at: int

    @property
    def oldest_ready_age_ms(self) -> int:
        """How long the oldest ready job has waited (0 without one)."""
        if self.oldest_ready_at is None:
            return 0
        return max(0, self.read_at - self.oldest_ready_at)


def queue_backlogs_from_rows(rows: Iterable[Sequence[Any]], read_at: int) -> list[QueueBacklog]:
    """QueueBacklog of every ``(queue, ready, delayed, running, ready_since)``
    row, sorted by queue name; queues with nothing unsettled left out."""
    backlogs = [QueueBacklog(str(queue), int(ready or 0), int(delayed or 0), int(running or 0),
                             None if since is None else int(since), read_at)
                for queue, ready, delayed, running, since in rows]
    return sorted((backlog for backlog in backlogs
                   if backlog.ready or backlog.delayed or backlog.running),
                  key=lambda backlog: backlog.queue)


@dataclass(frozen=True, slots=True)
class HistoryPoint:
    """One bucket of a queue's history: what happened to its jobs from
    ``at`` (epoch ms) for one bucket's length.

    The counts are what the runtimes counted, each transition once after it
    committed: jobs ``enqueued`` (stored, or redriven), attempts
    ``started`` (counted in the minute each began, once it ended: settled
    or retried), jobs settled ``completed``, ``failed`` (failed,
    outcome_unknown or interrupted) or ``cancelled``, and failed attempts
    ``retried``. A redrive adds to ``enqueued`` and takes nothing off the
    failure it redrives. A runtime keeps its counts in memory for up to a
    minute before it writes them, so the current minute may be missing
    some, and a process that dies loses the counts it had not written.

    ``depth`` (waiting jobs, due or not) and ``oldest_age_ms`` (how long the
    job at the head of the queue, the next to run, has been ready) are the
    highest sampled in the bucket, at most once a minute per runtime; None
    when nothing sampled the queue in it. A sample counts at most
    ``DEPTH_CAP`` (10,000) jobs: ``depth_capped`` says the queue held more
    (``depth`` is then the cap).
    """

    at: int
    enqueued: int = 0
    started: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    retried: int = 0
    depth: int | None = None
    oldest_age_ms: int | None = None
    depth_capped: bool = False


@dataclass(frozen=True, slots=True)
class QueueHistory:
    """A queue's history: one point per bucket of ``bucket`` seconds, from
    the bucket ``since`` falls in through the one of ``read_at`` (the
    store's clock when read), oldest first, none missing (a bucket in
    which nothing happened has zero counts)."""

    queue: str
    bucket: int
    since: int
    read_at: int
    points: list[HistoryPoint]


def history_from_rows(queue: str, bucket: int, start: int, end: int, read_at: int,
                      rows: Iterable[Sequence[Any]], depth_cap: int) -> QueueHistory:
    """A QueueHistory of the buckets from ``start`` to ``end`` (exclusive,
    epoch ms), from the store's rows (bucket start, enqueued, started,
    completed, failed, cancelled, retried, depth, oldest_age_ms) of the
    buckets that have any; a stored depth above ``depth_cap`` is a capped
    count."""
    found = {int(row[0]): row for row in rows}
    step = bucket * 1000
    points = []
    for at in range(start, end, step):
        row = found.get(at)
        if row is None:
            points.append(HistoryPoint(at))
            continue
        enqueued, started, completed, failed, cancelled, retried = (
            int(value or 0) for value in row[1:7])
        depth = None if row[7] is None else int(row[7])
        age = None if row[8] is None else max(0, int(row[8]))
        capped = depth is not None and depth > depth_cap
        points.append(HistoryPoint(at, enqueued, started, completed, failed, cancelled,
                                   retried, depth_cap if capped else depth, age, capped))
    return QueueHistory(queue, bucket, start, read_at, points)


def queue_status_from_counts(queue: str, queued: int, running: int,
                             outcome_counts: Iterable[Any], delayed: int = 0,
                             paused: bool = False) -> QueueStatus:
    """A QueueStatus from per-outcome counts given in ``OUTCOMES`` order."""
    counts: dict[str, int] = {
        name: int(count or 0) for name, count in zip(OUTCOMES, outcome_counts, strict=True)}
    return QueueStatus(queue, int(queued or 0), int(running or 0), sum(counts.values()), counts,
                       int(delayed or 0), bool(paused))


def queue_statuses_from_groups(groups: Iterable[Sequence[Any]]) -> list[QueueStatus]:
    """QueueStatus of every queue in ``(queue, state, outcome, count)`` rows, sorted
    by queue name (code point order, whatever the database's collation)."""
    tallies: dict[str, dict[str, int]] = {}
    for queue, state, outcome, count in groups:
        tally = tallies.setdefault(queue, {})
        key = outcome if state == "settled" else state
        tally[key] = tally.get(key, 0) + int(count)
    return [
        queue_status_from_counts(queue, tally.get("queued", 0), tally.get("running", 0),
                                 [tally.get(name, 0) for name in OUTCOMES],
                                 tally.get("delayed", 0), bool(tally.get("paused", 0)))
        for queue, tally in sorted(tallies.items())
    ]
