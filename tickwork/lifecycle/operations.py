"""Every lifecycle operation, written once, as a plan (sans-I/O).

Each function here validates its arguments, then yields requests
(``tickwork.lifecycle.requests``) and decides from the answers by the rules
of ``tickwork.lifecycle.rules``. The owner-local runtime drives a plan
synchronously inside its SQLite transactions; the D1 and PostgreSQL runtimes
drive the same plan with ``await``. What differs between them (how a claim is
fenced, whether liveness is asked or read from a lease, what commits
together) lives in the runtime's answers, never here.

Arguments are validated before the first request, so bad input is refused
before any store is touched.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Final, TypeAlias, get_args

from tickwork.lifecycle.requests import (
    ALIVE,
    DEAD,
    Abort,
    AskLiveness,
    Backlog,
    Claim,
    ClaimOrProbe,
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
    Held,
    HistoryBuckets,
    Insert,
    InsertMany,
    JobListing,
    JobsByIdPrefix,
    LaneHasPending,
    Limits,
    ListJobs,
    ListSchedules,
    NextWork,
    PauseQueue,
    PauseSchedule,
    Plan,
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
)
from tickwork.lifecycle.rules import (
    ABORT_CANCELLED,
    ABORT_LANE_FAILED,
    CLAIM_REPLACED,
    FAIL_LANE_BATCH,
    LEASE_EXPIRED,
    RATE_LIMITED,
    Settlement,
    decide_cancel,
    decide_holds,
    decide_recovery,
    decide_redrive,
    decide_retry,
    in_lane_failure_order,
    rate_hold_of,
    recovery_settlement,
    settlement_under_cancellation,
)
from tickwork.model.errors import IngestConflict, InvalidArgument
from tickwork.model.history import DEPTH_CAP, HISTORY_BUCKETS, HISTORY_KEEP_MS
from tickwork.model.jobs import (
    MAX_LANE_LENGTH,
    MAX_SAFE_INTEGER,
    Job,
    JobRecord,
    JobState,
    Outcome,
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
from tickwork.model.limits import (
    ConcurrencyLimit,
    LimitKind,
    check_limit_key,
    check_limit_kind,
    in_order,
    limits_for,
    validate_limit,
)
from tickwork.model.outcomes import (
    OUTCOMES,
    CancelResult,
    CancelStatus,
    DeadLetters,
    DeadLettersRedriven,
    FailLaneResult,
    IngestStatus,
    JobPage,
    LaneCancelled,
    ListOrder,
    QueueBacklog,
    QueueHistory,
    QueueStatus,
    RedriveResult,
    TickResult,
    history_from_rows,
    queue_backlogs_from_rows,
    queue_status_from_counts,
    queue_statuses_from_groups,
    ran_result,
)
from tickwork.model.rate_limits import (
    RateLimit,
    rate_limits_for,
    validate_rate_limit,
)
from tickwork.model.retention import (
    MAX_PRUNE_BATCH,
    PRUNE_BATCH,
    RetentionPolicy,
    StorageReport,
    check_policy_queue,
    policy_for,
    validate_policy,
    with_default,
)
from tickwork.model.schedules import (
    MAX_SCHEDULE_NAME,
    Schedule,
    ScheduleRecord,
    ScheduleStatus,
    StoredSchedule,
    schedule_from_json,
    validate_schedule,
)
from tickwork.model.waiting import JobWait

#: A tick that found nothing to do.
IDLE: Final = TickResult("idle")

# Requests are never changed once made: the two wakes are made once.
_WAKE: Final = Wake()
_WAKE_SOON: Final = Wake(now=False)
# Every tick asks it first: made once, like the wakes.
_DUE_SCHEDULES: Final = DueSchedules()

#: How often a plan re-reads after a fenced write matched nothing because a
#: concurrent change moved the job first. States only move forward, so a few
#: rounds always settle it; more means a store that does not keep its fences.
MAX_ROUNDS = 8

#: A tick's answer: what it did, and the claim it took for the next tick (a
#: worker loop's ``claim_next``), if any.
TickAnswer = tuple[TickResult, "Held | None"]

#: Whether a tick claims the next job as its job settles: a worker loop's
#: answer, or the function it asks then (``tickwork.runtimes.draining``:
#: whether its budget lets it run one more tick; it must not raise).
ClaimNext: TypeAlias = bool | Callable[[], bool]


def settled(job: JobRecord) -> TickResult:
    """The tick result reporting ``job``'s stored settlement."""
    return ran_result("settled", job.job_id, job.outcome, job.failure_reason)


def _written(job: JobRecord, settlement: Settlement) -> TickResult:
    return ran_result("settled", job.job_id, settlement.outcome, settlement.failure_reason)


def _retried(job: JobRecord, settlement: Settlement) -> TickResult:
    return ran_result("retried", job.job_id, settlement.outcome, settlement.failure_reason,
                          job.due_at)


#: The ``reason`` of a ``requeued`` event: crash recovery put a claim back,
#: or a redrive queued a dead letter again.
REQUEUED_BY_RECOVERY: Final = "recovery"
REQUEUED_BY_REDRIVE: Final = "redrive"

#: dead_letters returns at most this many jobs per page.
MAX_DEAD_LETTER_PAGE = 100
_CURSOR = re.compile(r"-?[0-9]{1,16}\.[0-9]{1,16}", re.ASCII)


# ------------------------------------------------------------------ reads


def read(job_id: str) -> Plan[JobRecord | None]:
    """The job ``job_id`` as stored now, or None when there is none."""
    check_id("job_id", job_id)
    job: JobRecord | None = yield Find(job_id)
    return job


def explain(job_id: str) -> Plan[JobWait | None]:
    """Why the job is not running yet: its state and, while it is queued,
    every hold that applies (not due until T, its queue paused, its queue at
    its limit naming its running jobs, the jobs ahead of it in its queue,
    its lane at its limit, its queue or lane rate-limited until T, the
    owner busy with other jobs); no holds means
    the next tick may claim it. None when there is no such job. Key lookups
    and index walks bounded by the limits (the job, its queue's pause, the
    stored limits, the running and waiting jobs that hold it; never the
    settled history), for a page or a terminal, not a hot path."""
    check_id("job_id", job_id)
    job: JobRecord | None = yield Find(job_id)
    if job is None:
        return None
    now: int = yield StoreNow()
    if job.state != "queued":
        return JobWait(job_id, job.state, (), now)
    paused: bool = yield QueuePaused(job.queue)
    queue_limit, lane_limit = limits_for(job.queue, job.lane, (yield Limits()))
    queue_running: list[str] = yield RunningJobs("queue", job.queue, queue_limit)
    ahead: list[str] = []
    if len(queue_running) < queue_limit:
        ahead = yield ReadyAhead(job.queue, job.priority, job.sequence,
                                 queue_limit - len(queue_running))
    lane_running: list[str] = []
    if lane_limit is not None:
        lane_running = yield RunningJobs("lane", job.lane, lane_limit)
    queue_rate, lane_rate = rate_limits_for(job.queue, job.lane, (yield RateLimits()))
    executing: list[str] = yield Executing(job.lane)
    holds = decide_holds(job, now, paused=paused, queue_limit=queue_limit,
                         queue_running=queue_running, ahead=ahead, lane_limit=lane_limit,
                         lane_running=lane_running, queue_rate=queue_rate,
                         lane_rate=lane_rate, executing=executing)
    return JobWait(job_id, "queued", holds, now)


def read_queue_head(queue: str) -> Plan[JobRecord | None]:
    """The queue's running job, else the job a tick would claim from it
    next (or None): what the queue is busy with, or waits on."""
    check_id("queue", queue)
    job: JobRecord | None = yield QueueHead(queue)
    return job


def has_pending_work() -> Plan[bool]:
    """True while a job is due (or cancelled) and queued, or running; a job
    waiting for its due time is not (``next_tick_at`` says when it is)."""
    pending: bool = yield HasPendingWork()
    return pending


def next_work() -> Plan[tuple[bool, int | None, int]]:
    """Whether a tick has work now, the earliest due time of a waiting job
    (or None), and the store's clock (epoch ms), read together."""
    pending, next_due, now = yield NextWork()
    return bool(pending), None if next_due is None else int(next_due), int(now)


def next_tick_at() -> Plan[int | None]:
    """When a tick next has work, by the store's clock (epoch ms): now while
    a job is due or running, else the earliest due time of a waiting job,
    else None (nothing to do until a job arrives)."""
    pending, next_due, now = yield from next_work()
    return now if pending else next_due


def status() -> Plan[list[QueueStatus]]:
    """Job counts of every queue that has any job, sorted by queue name.

    One statement, but it reads every stored job, settled history included:
    use ``queue_status`` for one queue and ``backlog`` for a metrics scrape.
    """
    groups = yield StatusGroups()
    return queue_statuses_from_groups(groups)


def queue_status(queue: str) -> Plan[QueueStatus]:
    """Job counts of one queue (all zero for a queue without jobs), from its indexes."""
    check_id("queue", queue)
    queued, running, delayed, paused, *outcomes = yield QueueCounts(queue)
    return queue_status_from_counts(queue, queued, running, outcomes, delayed, paused)


def backlog() -> Plan[list[QueueBacklog]]:
    """Every queue's ready, delayed and running jobs and how long its oldest
    ready job has waited, sorted by queue name: read from the indexes of
    unsettled jobs only, so cheap enough for every metrics scrape."""
    rows = yield Backlog()
    read_at: int = yield StoreNow()
    return queue_backlogs_from_rows(rows, read_at)


#: A history answer holds at most this many buckets: the 7 days kept in
#: 5-minute buckets, and the one now is in (a day of minutes fits too). Ask
#: for a larger bucket to look further back.
MAX_HISTORY_POINTS: Final = HISTORY_KEEP_MS // 300_000 + 1
#: How far back a history looks when ``since`` is not given: an hour.
DEFAULT_HISTORY_MS: Final = 3_600_000


def check_history_args(since: object, bucket: object) -> None:
    """Refuse a ``since`` that is no epoch-ms integer, or a bucket size not
    in HISTORY_BUCKETS (before any store is read)."""
    if since is not None:
        check_safe_int("since", since, InvalidArgument, 0)
    if isinstance(bucket, bool) or bucket not in HISTORY_BUCKETS:
        raise InvalidArgument("bucket", "must be one of "
                              f"{', '.join(map(str, HISTORY_BUCKETS))} (seconds), got {bucket!r}")


def history(queue: str, *, since: int | None = None, bucket: int = 60
            ) -> Plan[QueueHistory | None]:
    """What happened to the queue's jobs over time, one point per ``bucket``
    seconds (60, 300, 900 or 3600) from ``since`` (epoch ms; an hour ago when
    not given) to now by the store's clock: jobs enqueued, started,
    completed, failed, cancelled and retried, as the runtimes counted and
    wrote them (``HistoryPoint`` says what a count may miss), and the queue
    depth and head wait sampled at most once a minute. None when the queue
    has no history (nothing counted or sampled it in the 7 days kept)."""
    check_id("queue", queue)
    check_history_args(since, bucket)
    now: int = yield StoreNow()
    step = bucket * 1000
    if since is None:
        since = now - DEFAULT_HISTORY_MS
    elif since > now:
        raise InvalidArgument("since", f"is in the future: {since} is after the store's "
                                       f"clock, {now} (epoch ms)")
    start = since - since % step
    end = now - now % step + step
    if (end - start) // step > MAX_HISTORY_POINTS:
        raise InvalidArgument(
            "since", f"asks for {(end - start) // step} buckets of {bucket} s, more than "
                     f"{MAX_HISTORY_POINTS}: give a later since or a larger bucket")
    rows = yield HistoryBuckets(queue, start, end, step)
    if rows is None:
        return None
    return history_from_rows(queue, bucket, start, end, now, rows, DEPTH_CAP)


def dead_letters(queue: str, *, limit: int = 50, cursor: str | None = None
                 ) -> Plan[DeadLetters]:
    """One page of the queue's dead letters (jobs settled failed,
    outcome_unknown or interrupted), newest settlement first: up to
    ``limit`` (1 to 100) jobs after ``cursor`` (from the previous page)."""
    check_id("queue", queue)
    _check_page_limit(limit, MAX_DEAD_LETTER_PAGE)
    before = ((MAX_SAFE_INTEGER, MAX_SAFE_INTEGER) if cursor is None
              else _parse_position(cursor, "a dead_letters page"))
    jobs: list[JobRecord] = yield DeadLetterPage(queue, before, limit)
    last = jobs[-1] if len(jobs) == limit else None
    return DeadLetters(jobs, None if last is None else f"{last.settled_at}.{last.sequence}")


def _check_page_limit(limit: object, maximum: int) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= maximum:
        raise InvalidArgument("limit", f"must be an integer from 1 to {maximum}, got {limit!r}")
    return limit


def _parse_position(cursor: object, source: str) -> tuple[int, int]:
    # A cursor is "<settled_at>.<sequence>" of the last job of a page (the
    # first part 0 for a listing in enqueue order).
    # Both parts are bound as SQL values: beyond +-(2**53 - 1) a D1 or Durable
    # Object binding would refuse them (no stored value is), so they are
    # refused here by name.
    if isinstance(cursor, str) and _CURSOR.fullmatch(cursor):
        settled, _, sequence = cursor.partition(".")
        settled_at, after = int(settled), int(sequence)
        if abs(settled_at) <= MAX_SAFE_INTEGER and after <= MAX_SAFE_INTEGER:
            return settled_at, after
    raise InvalidArgument("cursor", f"is not a cursor {source} returned: {cursor!r}")


#: list_jobs returns at most this many jobs per page.
MAX_JOB_PAGE = 100
#: An owner's read_settled returns at most this many jobs per call.
READ_SETTLED_MAX_LIMIT = 1000
_JOB_STATES = ("queued", "running", "settled")
_ORDERS = ("newest", "oldest")


def list_jobs(queue: str | None = None, *, lane: str | None = None,
              state: JobState = "queued", outcome: Outcome | None = None,
              order: ListOrder = "newest", limit: int = 50,
              cursor: str | None = None) -> Plan[JobPage]:
    """One page of the jobs of one queue or one lane (exactly one of the
    two) in ``state``, settled ones optionally of one ``outcome``: queued
    and running jobs in enqueue order, settled ones in settlement order,
    ``newest`` or ``oldest`` first; up to ``limit`` (1 to 100) jobs after
    ``cursor`` (from the previous page of the same listing). Each page is
    one indexed statement: O(log n + page) however many jobs are stored."""
    request = list_jobs_request(queue, lane, state, outcome, order, limit, cursor)
    jobs: list[JobRecord] = yield request
    if len(jobs) < limit:
        return JobPage(jobs, None)
    last = jobs[-1]
    position = last.settled_at if state == "settled" else 0
    return JobPage(jobs, f"{position}.{last.sequence}")


def list_jobs_request(queue: object, lane: object, state: object, outcome: object,
                      order: object, limit: object, cursor: object) -> ListJobs:
    """The store request of a ``list_jobs`` call, every argument checked
    (InvalidArgument naming the first bad one); the HTTP API validates a
    request with it before touching any store."""
    listing = _job_listing(queue, lane, state, outcome, order)
    page_size = _check_page_limit(limit, MAX_JOB_PAGE)
    edge = MAX_SAFE_INTEGER if listing.newest else -MAX_SAFE_INTEGER
    after = (edge, edge) if cursor is None else _parse_position(cursor, "a list_jobs page")
    return ListJobs(listing, after, page_size)


def _job_listing(queue: object, lane: object, state: object, outcome: object,
                 order: object) -> JobListing:
    if (queue is None) == (lane is None):
        raise InvalidArgument("queue", "give exactly one of queue and lane")
    if queue is not None:
        by, value = "queue", check_id("queue", queue)
    else:
        by, value = "lane", check_text("lane", lane, MAX_LANE_LENGTH, InvalidArgument)
    if state not in _JOB_STATES:
        raise InvalidArgument("state", f"must be one of {', '.join(_JOB_STATES)}, got {state!r}")
    if outcome is not None:
        if outcome not in OUTCOMES:
            raise InvalidArgument("outcome", f"must be one of {', '.join(OUTCOMES)}, "
                                             f"got {outcome!r}")
        if state != "settled":
            raise InvalidArgument("outcome", f"only settled jobs have an outcome; "
                                             f"state is {state!r}")
    if order not in _ORDERS:
        raise InvalidArgument("order", f"must be newest or oldest, got {order!r}")
    return JobListing(by, value, str(state), None if outcome is None else str(outcome),
                      order == "newest")


def find_jobs(id_prefix: str, *, limit: int = 50, cursor: str | None = None
              ) -> Plan[JobPage]:
    """One page of the jobs whose id starts with ``id_prefix``, whatever
    their queue or state, in id order (by code point): up to ``limit`` (1 to
    100) jobs after ``cursor`` (from the previous page). Each page is one
    range of the job id index: O(log n + page) however many jobs are stored."""
    request = find_jobs_request(id_prefix, limit, cursor)
    jobs: list[JobRecord] = yield request
    if len(jobs) < request.limit:
        return JobPage(jobs, None)
    return JobPage(jobs, jobs[-1].job_id)


def find_jobs_request(id_prefix: object, limit: object, cursor: object) -> JobsByIdPrefix:
    """The store request of a ``find_jobs`` call, every argument checked
    (InvalidArgument naming the first bad one)."""
    prefix = check_id("id_prefix", id_prefix)
    page_size = _check_page_limit(limit, MAX_JOB_PAGE)
    if cursor is not None:
        # A page's cursor is its last job's id, so it starts with the prefix.
        if not isinstance(cursor, str) or not cursor.startswith(prefix):
            raise InvalidArgument("cursor", f"is not a cursor a find_jobs page for this "
                                            f"id_prefix returned: {cursor!r}")
        check_id("cursor", cursor)
    return JobsByIdPrefix(prefix, cursor, page_size)


# -------------------------------------------------------------- mutations


def ingest(job: Job) -> Plan[IngestStatus]:
    """Store ``job``: "queued" when new, "duplicate" for an identical replay,
    IngestConflict (nothing stored) when the job_id holds other cargo."""
    valid = validate_job(job)
    while True:
        if (yield Insert(valid)):
            yield Report("ingested", valid)
            yield _WAKE_SOON
            return "queued"
        stored = yield FindCargo(valid.job_id)
        if stored is None:
            continue  # purged between the two: store it now
        differences = cargo_differences(valid, stored)
        if differences:
            raise IngestConflict(valid.job_id, differences)
        # A replay wakes the host too: the first ingest may have stored the
        # job and died before its wake (the host would wait for something
        # else to come). Cheap, and idempotent.
        yield _WAKE_SOON
        return "duplicate"


def ingest_many(jobs: Sequence[Job]) -> Plan[list[IngestStatus]]:
    """Store up to ``MAX_INGEST_BATCH`` jobs atomically; one status per job.

    Every job is validated before anything is written; all commit together,
    or, when one conflicts (IngestConflict), none does. A job_id repeated
    within the call is a "duplicate" when its cargo is identical, else a
    conflict.
    """
    valid = validate_jobs(jobs)
    for _ in range(MAX_ROUNDS):
        inserted: list[bool] | None = yield InsertMany(valid)
        if inserted is not None:
            break
    else:
        raise RuntimeError("ingest_many did not converge under concurrent changes")
    for job, new in zip(valid, inserted, strict=True):
        if new:
            yield Report("ingested", job)
    yield _WAKE_SOON  # a replay too (see ingest)
    return ["queued" if new else "duplicate" for new in inserted]


def cancel(job_id: str, cancellation_id: str, *, only_if_queued: bool = False
           ) -> Plan[CancelResult]:
    """Record a durable cancellation (``only_if_queued``: only while the job
    has not started). An execution in this process is told to stop once it
    is recorded; on a shared runtime, one on another worker learns of it at
    that worker's next lease renewal."""
    check_cancel_args(job_id, cancellation_id, only_if_queued)
    result = yield from _cancel_one(job_id, cancellation_id, only_if_queued)
    if result.status == "recorded":
        yield Abort((job_id,), ABORT_CANCELLED)
        yield _WAKE_SOON
    return result


def cancel_lane(lane: str, cancellation_id: str, *, limit: int = 100,
                cursor: str | None = None) -> Plan[LaneCancelled]:
    """Cancel one page of the lane's queued jobs (up to ``limit``, 1 to 100,
    oldest first, after ``cursor``), each as ``cancel(job_id,
    cancellation_id, only_if_queued=True)`` would: a job that started
    meanwhile keeps running, and one this id was recorded on before is
    replayed, so the same call may be sent again. Pass the answer's
    ``cursor`` to go on (None after the last page). Each cancelled job is
    settled ``cancelled`` by the next tick without running."""
    check_text("lane", lane, MAX_LANE_LENGTH, InvalidArgument)
    check_id("cancellation_id", cancellation_id)
    _check_page_limit(limit, MAX_JOB_PAGE)
    after = ((-MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER) if cursor is None
             else _parse_position(cursor, "a cancel_lane answer"))
    listing = JobListing("lane", lane, "queued", None, newest=False)
    jobs: list[JobRecord] = yield ListJobs(listing, after, limit)
    counts = dict.fromkeys(get_args(CancelStatus), 0)
    for job in jobs:
        result = yield from _cancel_one(job.job_id, cancellation_id, True, job)
        counts[result.status] += 1
    if counts["recorded"]:
        yield _WAKE_SOON
    # Nothing to abort: a queued-only cancellation never stops an execution.
    last = jobs[-1] if len(jobs) == limit else None
    return LaneCancelled(lane, counts["recorded"], counts["replayed"],
                         len(jobs) - counts["recorded"] - counts["replayed"],
                         None if last is None else f"0.{last.sequence}")


def _cancel_one(job_id: str, cancellation_id: str, only_if_queued: bool,
                read: JobRecord | None = None) -> Plan[CancelResult]:
    """``cancel`` of one job, without the abort and the wake (the caller's).
    ``read``: the job as the caller just read it, decided on in the first
    round instead of reading it again."""
    # Decide on what is stored, then write fenced on that decision still
    # holding: a concurrent change makes the write match nothing, and the
    # next round decides again (states only move forward).
    for _ in range(MAX_ROUNDS):
        job = read if read is not None else (yield Find(job_id))
        read = None
        decision = decide_cancel(job, cancellation_id, only_if_queued=only_if_queued)
        if not decision.record:
            return CancelResult(decision.status, job_id)
        if (yield RecordCancellation(job_id, cancellation_id, only_if_queued)):
            yield Report("cancelled", job)
            return CancelResult("recorded", job_id)
    raise RuntimeError(f"cancellation of job {job_id!r} did not converge")


def fail_lane(lane: str, reason: str) -> Plan[FailLaneResult]:
    """Settle up to ``FAIL_LANE_BATCH`` (256) of the lane's queued and
    running jobs as failed, running ones first; ``more`` says whether any
    remain. Executions in this process stop at once; on a shared runtime,
    other workers lose their claims at their next renewal."""
    check_text("lane", lane, MAX_LANE_LENGTH, InvalidArgument)
    check_reason("reason", reason)
    failed, more = yield FailLane(lane, reason, FAIL_LANE_BATCH)
    failed = in_lane_failure_order(failed)
    yield Commit()
    # Durable now: only now stop the executions here. Their ticks find the
    # claim settled under their token and report the committed failure.
    if failed:
        # One refusal, then each job it settled (the settled event of a
        # running one is this, not its tick's: that tick reports nothing).
        yield Report("refused", None, reason=reason, count=len(failed), lane=lane)
        for job in failed:
            yield Report("settled", job)
        yield Abort(tuple(job.job_id for job in failed), ABORT_LANE_FAILED)
        yield _WAKE_SOON
    if more is None:
        # A short batch took every unsettled job of the lane; a full one
        # asks. Nothing after the commit may turn the committed failure into
        # an error: a read that fails says True, and one more call says False.
        more = False
        if len(failed) >= FAIL_LANE_BATCH:
            try:
                more = yield LaneHasPending(lane)
            except Exception:
                more = True
    return FailLaneResult(len(failed), bool(more))


def purge(queue: str) -> Plan[int]:
    """Delete the queue's queued jobs; running and settled jobs stay."""
    check_id("queue", queue)
    deleted: int = yield Purge(queue)
    if deleted:
        yield Report("purged", None, count=deleted, queue=queue)
        yield _WAKE_SOON
    return deleted


def pause(queue: str) -> Plan[bool]:
    """Pause the queue: no tick claims its jobs until it is resumed. Its
    running job finishes; cancellations and lane failures still settle its
    jobs. True when this call paused it, False when it was paused already."""
    check_id("queue", queue)
    paused: bool = yield PauseQueue(queue)
    return paused


def resume(queue: str) -> Plan[bool]:
    """Resume a paused queue; True when it was paused, False when it was not."""
    check_id("queue", queue)
    resumed: bool = yield ResumeQueue(queue)
    if resumed:
        yield _WAKE_SOON
    return resumed


def redrive(job_id: str, redrive_id: str) -> Plan[RedriveResult]:
    """Put a dead letter (a job settled failed, outcome_unknown or
    interrupted) back to queued, due at once, as a new attempt chain; its
    last attempt stays in its history. ``redrive_id`` makes it replay-safe:
    a repeated request with any id already applied to the job is
    ``replayed`` and changes nothing."""
    check_id("job_id", job_id)
    check_id("redrive_id", redrive_id)
    result = yield from _redrive_one(job_id, redrive_id)
    if result.status == "redriven":
        yield _WAKE_SOON
    return result


def redrive_dead_letters(queue: str, redrive_id: str, *, limit: int = 100,
                         cursor: str | None = None) -> Plan[DeadLettersRedriven]:
    """Redrive one page of the queue's dead letters (up to ``limit``, 1 to
    100, newest settlement first, after ``cursor``), each as ``redrive``
    would under ``redrive_id``: a job this id was applied to before is
    replayed, never redriven twice, so the same call may be sent again. Pass
    the answer's ``cursor`` to go on to older ones (None after the last)."""
    check_id("queue", queue)
    check_id("redrive_id", redrive_id)
    _check_page_limit(limit, MAX_DEAD_LETTER_PAGE)
    before = ((MAX_SAFE_INTEGER, MAX_SAFE_INTEGER) if cursor is None
              else _parse_position(cursor, "a redrive_dead_letters answer"))
    jobs: list[JobRecord] = yield DeadLetterPage(queue, before, limit)
    counts = {"redriven": 0, "replayed": 0, "refused": 0, "not_found": 0}
    for job in jobs:
        result = yield from _redrive_one(job.job_id, redrive_id, job)
        counts[result.status] += 1
    if counts["redriven"]:
        yield _WAKE_SOON
    last = jobs[-1] if len(jobs) == limit else None
    # A job deleted meanwhile has nothing left to redrive: counted as refused.
    return DeadLettersRedriven(queue, counts["redriven"], counts["replayed"],
                               counts["refused"] + counts["not_found"],
                               None if last is None else f"{last.settled_at}.{last.sequence}")


def _redrive_one(job_id: str, redrive_id: str,
                 read: JobRecord | None = None) -> Plan[RedriveResult]:
    """``redrive`` of one job, without the wake (the caller's). ``read``: the
    job as the caller just read it, decided on in the first round instead of
    reading it again (the write is fenced on that decision all the same)."""
    for _ in range(MAX_ROUNDS):
        job = read if read is not None else (yield Find(job_id))
        read = None
        applied = False if job is None else (yield RedriveApplied(job_id, redrive_id))
        decision = decide_redrive(job, applied)
        if not decision.record:
            return RedriveResult(decision.status, job_id, decision.reason)
        # Fenced on that decision still holding; else decide again.
        redriven = yield RecordRedrive(job_id, redrive_id)
        if redriven is not None:
            yield Report("requeued", redriven, reason=REQUEUED_BY_REDRIVE)
            return RedriveResult("redriven", job_id)
    raise RuntimeError(f"redrive of job {job_id!r} did not converge")


# -------------------------------------------------------------- schedules


def put_schedule(schedule: Schedule) -> Plan[ScheduleStatus]:
    """Create the schedule, or replace the one of its name: ``created``,
    ``replaced`` (it starts afresh from the next slot after now; jobs of
    earlier slots stay), or ``unchanged`` (the same definition: nothing
    written, its next slot kept)."""
    valid = validate_schedule(schedule)
    for _ in range(MAX_ROUNDS):
        stored: StoredSchedule | None = yield FindSchedule(valid.name)
        if stored is not None and stored.spec_json == valid.spec_json:
            return "unchanged"
        now: int = yield StoreNow()
        next_at = valid.next_after(now)
        if stored is None:
            if (yield CreateSchedule(valid, next_at)):
                status: ScheduleStatus = "created"
                break
        elif (yield ReplaceSchedule(valid, stored.spec_json, next_at)):
            status = "replaced"
            break
    else:
        raise RuntimeError(f"put_schedule of {valid.name!r} did not converge")
    yield _WAKE_SOON
    return status


def _check_schedule_name(name: object) -> str:
    return check_text("name", name, MAX_SCHEDULE_NAME, InvalidArgument)


def schedules() -> Plan[list[ScheduleRecord]]:
    """Every schedule, by name."""
    rows: list[StoredSchedule] = yield ListSchedules()
    return [row.record() for row in rows]


def pause_schedule(name: str) -> Plan[bool]:
    """Stop creating the schedule's jobs until it is resumed; True when this
    call paused it."""
    _check_schedule_name(name)
    paused: bool = yield PauseSchedule(name)
    return paused


def resume_schedule(name: str) -> Plan[bool]:
    """Resume a paused schedule from its next slot after now (the slots of
    the pause get no job); True when it was paused."""
    _check_schedule_name(name)
    for _ in range(MAX_ROUNDS):
        stored: StoredSchedule | None = yield FindSchedule(name)
        if stored is None or not stored.paused:
            return False
        now: int = yield StoreNow()
        next_at = schedule_from_json(name, stored.spec_json).next_after(now)
        if (yield ResumeSchedule(name, stored.spec_json, next_at)):
            yield _WAKE_SOON
            return True
    raise RuntimeError(f"resume_schedule of {name!r} did not converge")


def delete_schedule(name: str) -> Plan[bool]:
    """Delete the schedule (the jobs it created stay); True when there was one."""
    _check_schedule_name(name)
    deleted: bool = yield DeleteSchedule(name)
    return deleted


#: Most schedule slots one tick (or ``fire_schedules`` call) turns into jobs.
#: After an outage, 100 schedules catching up 1,000 slots each were 100,000
#: jobs in one transaction (1.6 s of a host's loop, or of a Durable Object's
#: alarm); now a tick creates at most this many, oldest first, and the next
#: tick goes on where it stopped. Each slot still gets exactly one job.
MAX_SLOTS_PER_TICK: Final = 1_000


def fire_schedules() -> Plan[int]:
    """Create the jobs of schedule slots that have come: per schedule, the
    latest ``catch_up`` slots since its last, each once, and move it past
    now; at most ``MAX_SLOTS_PER_TICK`` slots a call (the oldest first: a
    schedule cut short keeps its first slot without a job as its next, so
    the next call goes on from there). How many jobs were created."""
    due, now = yield _DUE_SCHEDULES
    return (yield from _fire_due(due, now)) if due else 0


def _fire_due(due: list[StoredSchedule], now: int) -> Plan[int]:
    """fire_schedules once the due schedules are known (``due`` not empty)."""
    created = 0
    budget = MAX_SLOTS_PER_TICK
    for row in due:
        if budget <= 0:
            break  # the rest stay due: the next tick fires them
        schedule = schedule_from_json(row.name, row.spec_json)
        slots, next_at = schedule.due_slots(row.next_at, now)
        if len(slots) > budget:
            slots, next_at = slots[:budget], slots[budget]
        budget -= len(slots)
        jobs: list[ValidJob] = yield FireSlots(schedule, slots, next_at)
        for job in jobs:
            yield Report("ingested", job)
        created += len(jobs)
    return created


# ----------------------------------------------------------------- limits


def limits() -> Plan[list[ConcurrencyLimit]]:
    """Every concurrency limit stored: queues first, then lanes, each by key.
    A queue not listed runs one job at a time; a lane not listed has no
    limit of its own."""
    stored: list[ConcurrencyLimit] = yield Limits()
    return in_order(stored)


def set_limit(kind: LimitKind, key: str, max_running: int) -> Plan[bool]:
    """Let at most ``max_running`` (1 to 10,000) jobs of the queue (``kind``
    "queue") or of the lane (``kind`` "lane", across every queue) named
    ``key`` run at once. The next claim obeys it; running jobs are never
    stopped, so a lowered limit holds new claims until enough settle. True
    when this changed the stored limit, False when it was already so."""
    limit = validate_limit(kind, key, max_running)
    changed: bool = yield PutLimit(limit)
    if changed:
        yield _WAKE_SOON
    return changed


def clear_limit(kind: LimitKind, key: str) -> Plan[bool]:
    """Remove the limit of ``kind`` on ``key``: the queue runs one job at a
    time again, the lane has no limit of its own. True when there was one."""
    checked = check_limit_kind(kind)
    removed: bool = yield DeleteLimit(checked, check_limit_key(checked, key))
    if removed:
        yield _WAKE_SOON
    return removed


# ------------------------------------------------------------ rate limits


def rate_limits() -> Plan[list[RateLimit]]:
    """Every rate limit, and every hold an executor's ``RateLimited`` put in
    force: queues first, then lanes, each by key, with when each next lets
    a job start."""
    stored: list[RateLimit] = yield RateLimits()  # in that order (the store's contract)
    return stored


def set_rate_limit(kind: LimitKind, key: str, starts: int, period_ms: int,
                   burst: int | None = None) -> Plan[bool]:
    """Let the queue (``kind`` "queue") or the lane (``kind`` "lane", across
    every queue) named ``key`` start at most ``starts`` (1 to 100,000) jobs
    per ``period_ms`` (1 ms to 31 days), ``burst`` (1 to 100,000; by default
    ``starts``) of them at once after a quiet spell: a token bucket checked
    and spent by every claim. A new limit starts full; a changed one keeps
    the time of its next allowed start; a hold on the key stays. True when
    this changed the stored limit, False when it was already so."""
    limit = validate_rate_limit(kind, key, starts, period_ms, burst)
    changed: bool = yield PutRateLimit(limit)
    if changed:
        yield _WAKE_SOON
    return changed


def clear_rate_limit(kind: LimitKind, key: str) -> Plan[bool]:
    """Remove the rate limit of ``kind`` on ``key`` and any hold on it: its
    jobs start as fast as the claims take them. True when either was there."""
    checked = check_limit_kind(kind)
    removed: bool = yield DeleteRateLimit(checked, check_limit_key(checked, key))
    if removed:
        yield _WAKE_SOON
    return removed


# -------------------------------------------------------------- retention


def retention() -> Plan[list[RetentionPolicy]]:
    """Every retention policy in force: the scope's default first (the
    built-in one, ``updated_at`` None, while none is stored), then each
    queue's own, by queue name."""
    stored: list[RetentionPolicy] = yield RetentionPolicies()
    return with_default(stored)


def set_retention(queue: str | None, *, keep_completed_ms: int | None,
                  keep_failed_ms: int | None) -> Plan[bool]:
    """Keep ``queue``'s settled jobs (None: the scope's default, for every
    queue without a policy of its own) this long after they settle:
    completed and cancelled ones ``keep_completed_ms``, failed,
    outcome_unknown and interrupted ones ``keep_failed_ms`` (each None to
    keep them forever, else 1 minute to 100 years in ms). A queue's policy
    replaces the default for it, both times. True when this changed the
    stored policy, False when it was already so."""
    policy = validate_policy(queue, keep_completed_ms, keep_failed_ms)
    changed: bool = yield PutRetention(policy)
    return changed


def clear_retention(queue: str | None) -> Plan[bool]:
    """Remove ``queue``'s policy (it follows the scope's default again), or
    with None the scope's default (the built-in one applies again). True
    when there was one."""
    removed: bool = yield DeleteRetention(check_policy_queue(queue))
    return removed


def storage() -> Plan[StorageReport]:
    """What the scope's store holds: its size in bytes (None on D1) and each
    tickwork table's row count. The size costs no row read; the counts read
    every row of each table (billed as rows read on a Durable Object and on
    D1): for an operator or a dashboard, not for a probe polled every few
    seconds (``ready`` is that)."""
    report: StorageReport = yield StorageUsage()
    return report


def prune(*, limit: int = PRUNE_BATCH) -> Plan[int]:
    """One prune batch: delete up to ``limit`` (1 to 1,000) settled jobs
    that their queue's retention policy keeps no longer, with their rows in
    side tables, queue by queue in name order; a ``pruned`` event per queue
    that lost any. Queued and running jobs are never deleted. How many were
    deleted (``limit``: more may be left; call again).

    Each queue's part is one indexed range per outcome, O(log n + batch),
    however much history is kept; the hosts call it between their ticks
    (``tickwork.runtimes.pruning``). A later table with a history of its own
    adds its step here, after the jobs', from the same budget.
    """
    _check_page_limit(limit, MAX_PRUNE_BATCH)
    policies = with_default((yield RetentionPolicies()))
    now: int = yield StoreNow()
    queues: list[str] = yield SettledQueues()
    pruned = 0
    for queue in queues:
        policy = policy_for(queue, policies)
        if policy.keeps_everything:
            continue
        completed_before, failed_before = policy.cutoffs(now)
        count: int = yield PruneSettled(queue, completed_before, failed_before, limit - pruned)
        if count:
            yield Report("pruned", None, count=count, queue=queue)
            pruned += count
            if pruned >= limit:
                break
    return pruned


# ------------------------------------------------------------------ ticks


def tick(ticker: object, *, claim_next: ClaimNext = False,
         reporting: bool = True) -> Plan[TickAnswer]:
    """Recover a dead claim, settle a cancelled job, or claim and run one job.

    The common tick is one request before the executor runs: the claim only
    happens when nothing must come first, and otherwise the same answer says
    what must (in that order: recovery, then cancelled jobs). Before it, the
    jobs of schedule slots that have come are created (a runtime that knows
    none has come answers that without reading). ``reporting``: see ``run``.
    """
    # fire_schedules(), with its request asked here: the common tick (no
    # slot has come) runs no generator of its own for it.
    due, now = yield _DUE_SCHEDULES
    if due:
        yield from _fire_due(due, now)
    held, probe = yield ClaimOrProbe(ticker)
    if held is not None:
        return (yield from run(held, claim_next=claim_next, reporting=reporting))
    if not probe.blocked:
        return IDLE, None
    # Recovery first. Putting a job back or settling it is this tick's one
    # transition; a probe that could not answer is reported only if nothing
    # else runs.
    recovery = None
    if probe.suspect is not None:
        recovery = yield from recover(probe.suspect, ticker)
        if recovery is not None and recovery.status != "liveness_unknown":
            return recovery, None
    if probe.cancelled_waiting:
        cancelled = yield SettleNextCancelled(ticker)
        if cancelled is not None:
            yield Report("settled", cancelled)
            yield _WAKE
            return settled(cancelled), None
    held = yield Claim(ticker)
    if held is None:
        return recovery or IDLE, None
    return (yield from run(held, claim_next=claim_next, reporting=reporting))


def recover(suspect: Suspect, ticker: object) -> Plan[TickResult | None]:
    """Recover a claim whose execution is gone: requeue it while its recovery
    budget lasts, else settle it interrupted (cancelled, if a cancellation is
    recorded). None when it turns out alive, or moved meanwhile."""
    job = suspect.job
    if not suspect.lease_expired:
        answer = yield AskLiveness(suspect, ticker)
        if answer is ALIVE:
            return None
        if answer is not DEAD:
            return TickResult("liveness_unknown", job_id=job.job_id, reason=str(answer))
        # The probe was awaited: decide on a fresh read, since a cancellation
        # may have landed meanwhile. The write is fenced on the token anyway.
        current = yield Find(job.job_id)
        if current is None or current.state != "running":
            return None
        job = current
    action = decide_recovery(job)
    if action == "requeue":
        if not (yield Requeue(suspect)):
            return None  # renewed, settled or recovered by someone else meanwhile
        yield Report("requeued", job, reason=REQUEUED_BY_RECOVERY)
        yield _WAKE
        return TickResult("requeued", job_id=job.job_id)
    recovered = yield SettleRecovered(suspect, recovery_settlement(action))
    if recovered is None:
        return None
    yield Report("settled", recovered)
    yield _WAKE
    return settled(recovered)


def run(held: Held, *, claim_next: ClaimNext = False,
        reporting: bool = True) -> Plan[TickAnswer]:
    """Execute a held claim and record exactly one outcome for it: its
    settlement, or, when its retry policy retries this attempt, its return
    to the queue as the next attempt (the job's one outcome comes later).

    ``claim_next``: claim the next job in the settlement's transaction (see
    ``ClaimNext``); a function is asked as the job settles, not before it runs.

    ``reporting=False`` (a runtime with no event hook, which would ignore
    it) leaves out the claim's ``Report``: the history counts an attempt as
    started from the report of its end (``tickwork.model.history``), which
    is always made."""
    if reporting:
        yield Report("claimed", held)
    settlement, interruption = yield Execute(held)
    next_held = None
    rate_limited = settlement.rate_limited is not None
    retry_in = None if rate_limited else decide_retry(held.job, settlement)
    if rate_limited:
        result = yield from put_back_rate_limited(held, settlement)
    elif retry_in is not None:
        retried = yield RequeueForRetry(held, settlement, retry_in)
        if retried is not None:
            yield Report("retried", held, settlement, retry_at=retried.due_at)
            result = _retried(retried, settlement)
        else:
            result = yield from settle_unusual(held, settlement, retry_in)
    else:
        ahead = interruption is None and (claim_next() if callable(claim_next) else claim_next)
        written, next_held = yield Settle(held, settlement, claim_next=ahead)
        if written:
            yield Report("settled", held, settlement)
            result = _written(held.job, settlement)
        else:
            result = yield from settle_unusual(held, settlement)
    if interruption is not None:
        yield _WAKE_SOON
        raise interruption
    yield _WAKE
    return result, next_held


def put_back_rate_limited(held: Held, settlement: Settlement) -> Plan[TickResult]:
    """The executor returned ``RateLimited``: hold its key (``rate_hold_of``)
    until the delay has passed, by the store's clock, and put the job back
    to its queue without using an attempt: the tick reports it ``requeued``
    with reason ``rate_limited`` and ``retry_at`` the hold's end. Should the
    fenced put-back match nothing, ``settle_unusual`` finds out why (a
    cancellation recorded meanwhile settles it ``cancelled``)."""
    rate_limited = settlement.rate_limited
    assert rate_limited is not None
    kind, key = rate_hold_of(held.job, rate_limited)
    now: int = yield StoreNow()
    put_back = PutBackRateLimited(held, kind, key, now + rate_limited.retry_after_ms)
    job = yield put_back
    if job is None:
        return (yield from settle_unusual(held, settlement, put_back=put_back))
    return (yield from _rate_limited(held, put_back))


def _rate_limited(held: Held, put_back: PutBackRateLimited) -> Plan[TickResult]:
    yield Report("requeued", held, reason=RATE_LIMITED, retry_at=put_back.until)
    return TickResult("requeued", job_id=held.job.job_id, reason=RATE_LIMITED,
                      retry_at=put_back.until)


def settle_unusual(held: Held, settlement: Settlement, retry_in: int | None = None,
                   *, put_back: PutBackRateLimited | None = None) -> Plan[TickResult]:
    """The fenced settlement (or retry, ``retry_in`` ms later, or the
    rate-limited ``put_back``) matched nothing: find out why and act on it.

    Each round reads, then writes fenced on what it read.
    """
    job = held.job
    for _ in range(MAX_ROUNDS):
        view = yield ReadClaim(held)
        if view is None or view.token != held.token:
            # Recovered (which releases the token) or purged: no longer ours.
            return TickResult("idle", job_id=job.job_id, reason=CLAIM_REPLACED)
        record = view.job
        if record.state == "settled":
            # Settled under our own claim: its lane failed while it ran.
            # Report what is committed.
            return settled(record)
        if record.state != "running":
            return TickResult("idle", job_id=job.job_id, reason=CLAIM_REPLACED)
        if not view.lease_live:
            # Rejected, never written: the next tick anywhere recovers it.
            return TickResult("idle", job_id=job.job_id, reason=LEASE_EXPIRED)
        cancelled = record.cancellation_id is not None
        # A cancellation recorded while the job ran (through any path) decides
        # the outcome: the durable record, not the local signal.
        final = settlement_under_cancellation(settlement) if cancelled else settlement
        if retry_in is not None and not cancelled:
            retried = yield RequeueForRetry(held, settlement, retry_in)
            if retried is not None:
                yield Report("retried", held, settlement, retry_at=retried.due_at)
                return _retried(retried, settlement)
            continue
        if put_back is not None and not cancelled:
            if (yield put_back) is not None:
                return (yield from _rate_limited(held, put_back))
            continue
        written, _ = yield Settle(held, final, cancelled=cancelled)
        if written:
            yield Report("settled", held, final)
            return _written(job, final)
    raise RuntimeError(f"settlement of job {job.job_id!r} did not converge")
