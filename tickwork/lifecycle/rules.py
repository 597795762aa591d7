"""The lifecycle's rules, as plain functions with no I/O.

queued -> running -> settled. The operations (``operations.py``) ask these
functions what to do; no runtime decides anything itself, so the rules live
in one place.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from tickwork.model.failures import (
    MAX_ERROR_MESSAGE,
    ErrorSummary,
    clean_text,
    summarize_exception,
    summary_to_json,
)
from tickwork.model.jobs import JobRecord, Outcome, Retry
from tickwork.model.limits import LimitKind
from tickwork.model.outcomes import (
    Cancelled,
    CancelStatus,
    Completed,
    Failed,
    OutcomeUnknown,
    RateLimited,
    RedriveStatus,
)
from tickwork.model.rate_limits import RateLimit, released_at
from tickwork.model.waiting import Hold

# Reason codes the engine itself writes as failure_reason.
EXECUTION_FAILED = "execution_failed"
EXECUTION_INTERRUPTED = "execution_interrupted"
INVALID_OUTCOME = "invalid_outcome"
#: Why a job went back to its queue without using an attempt (its
#: executor returned ``RateLimited``): the ``requeued`` event's and the
#: tick result's reason, and the failure reason should such an attempt end
#: up settled instead (its claim was lost, or a cancellation arrived).
RATE_LIMITED = "rate_limited"
#: On a ``cancelled`` job: the executor reported completion (its effects may
#: have happened) after the cancellation was durably recorded.
EXECUTOR_COMPLETED = "executor_completed"

# Reasons an AbortSignal carries.
ABORT_CANCELLED = "cancelled"
ABORT_LANE_FAILED = "lane_failed"
ABORT_INTERRUPTED = "interrupted"

#: Why a tick wrote no settlement (TickResult.reason with status "idle"): the
#: claim is no longer the job's (recovered, or the job was purged), or its
#: lease expired before the settlement arrived.
CLAIM_REPLACED = "claim_replaced"
LEASE_EXPIRED = "lease_expired"

#: fail_lane settles at most this many jobs per call (one transaction or batch).
FAIL_LANE_BATCH = 256


@dataclass(frozen=True, slots=True)
class Settlement:
    """The terminal outcome a runtime is about to write."""

    outcome: Outcome
    failure_reason: str | None = None
    #: The executor's own delay before a retry (``Failed.retry_after_ms``).
    retry_after_ms: int | None = None
    #: What the executor raised (or, for ``invalid_outcome``, what it
    #: returned instead of an outcome); None when it reported an outcome.
    error: ErrorSummary | None = None
    #: The executor returned ``RateLimited``: the job goes back to its
    #: queue without using an attempt, and this holds its lane or queue.
    rate_limited: RateLimited | None = None

    @property
    def error_json(self) -> str | None:
        """``error`` as the ``error_json`` column stores it."""
        return None if self.error is None else summary_to_json(self.error)

    @property
    def error_line(self) -> str | None:
        """``error`` as the history entry of this attempt keeps it."""
        return None if self.error is None else self.error.line


#: The settlements of the outcomes that carry nothing (a Settlement is
#: immutable, so one of each serves every job: built once, not per tick).
_COMPLETED = Settlement("completed")
_CANCELLED = Settlement("cancelled")
_OUTCOME_UNKNOWN = Settlement("outcome_unknown")


def settlement_for_result(result: object) -> Settlement:
    """Map what an executor returned to the outcome to record."""
    if isinstance(result, Completed):
        return _COMPLETED
    if isinstance(result, Failed):
        return Settlement("failed", result.reason, result.retry_after_ms)
    if isinstance(result, Cancelled):
        return _CANCELLED
    if isinstance(result, OutcomeUnknown):
        return _OUTCOME_UNKNOWN
    if isinstance(result, RateLimited):
        return Settlement("failed", RATE_LIMITED, rate_limited=result)
    # Anything else is an executor bug; recording "completed" would be a lie.
    return Settlement("failed", INVALID_OUTCOME, error=invalid_outcome_error(result))


def invalid_outcome_error(result: object) -> ErrorSummary:
    """The error an ``invalid_outcome`` records: a TypeError naming what the
    executor returned, with no traceback (nothing was raised)."""
    returned = type(result)
    name = returned.__qualname__
    if returned.__module__ not in ("builtins", "__main__"):
        name = f"{returned.__module__}.{name}"
    message = (f"the executor returned {name}, not an outcome (Completed, Failed, "
               "Cancelled, OutcomeUnknown or RateLimited)")
    return ErrorSummary("TypeError", clean_text(message)[:MAX_ERROR_MESSAGE], "")


def settlement_for_exception(error: BaseException) -> Settlement:
    """Map an executor that raised (or was interrupted) to the outcome to record.

    A raise keeps its summary (``summarize_exception``); an interruption
    (the host cancelled the tick) is no executor error, and keeps none.
    """
    if isinstance(error, asyncio.CancelledError):
        return Settlement("failed", EXECUTION_INTERRUPTED)
    return Settlement("failed", EXECUTION_FAILED, error=summarize_exception(error))


def settlement_under_cancellation(settlement: Settlement) -> Settlement:
    """A job whose cancellation was durably recorded while it ran settles ``cancelled``.

    The spec's rule: a job the runtime is executing when it is cancelled is
    interrupted and settles as cancelled, whatever its executor then reports
    (a raise, an interruption, a failure, or a completion). The record keeps
    the truth where it matters: when the executor reported completion, the
    reason is ``executor_completed``, since its effects may have happened.
    """
    if settlement.outcome == "completed":
        return Settlement("cancelled", EXECUTOR_COMPLETED)
    # An executor that raised keeps its error: the attempt ended that way.
    return Settlement("cancelled", error=settlement.error)


def rate_hold_of(job: JobRecord, rate_limited: RateLimited) -> tuple[LimitKind, str]:
    """What an executor's ``RateLimited`` holds: the key it names
    (``hold``), else the job's lane when the job names one of its own, else
    its queue."""
    hold = rate_limited.hold
    if hold is None:
        hold = "lane" if job.lane != job.queue else "queue"
    return hold, job.lane if hold == "lane" else job.queue


def backoff_ms(policy: Retry, attempt: int, draw: Callable[[], float] = random.random) -> int:
    """How long after failed attempt ``attempt`` (1-based) the next one is due:
    the policy's exponential delay, capped, less up to ``jitter`` of it."""
    try:
        raw = policy.base_delay_ms * policy.factor ** (attempt - 1)
    except OverflowError:  # far past any cap
        raw = math.inf
    delay = policy.max_delay_ms if raw >= policy.max_delay_ms else int(raw)
    if policy.jitter:
        delay -= int(delay * policy.jitter * draw())
    return max(delay, 0)


def decide_retry(job: JobRecord, settlement: Settlement,
                 draw: Callable[[], float] = random.random) -> int | None:
    """The delay (ms) after which the attempt that ended with ``settlement``
    is retried, or None when the job settles: no policy, no attempts left, or
    an outcome the policy does not retry (``outcome_unknown`` only with
    ``retry_unknown``; never ``completed`` or ``cancelled``)."""
    policy = job.retry
    if policy is None or job.attempt >= policy.attempts:
        return None
    if settlement.outcome == "failed":
        pass
    elif settlement.outcome != "outcome_unknown" or not policy.retry_unknown:
        return None
    if settlement.retry_after_ms is not None:
        return settlement.retry_after_ms
    return backoff_ms(policy, job.attempt, draw)


#: Outcomes a job may settle with and be redriven from (its dead letters).
DEAD_OUTCOMES: tuple[Outcome, ...] = ("failed", "outcome_unknown", "interrupted")
#: Why a redrive was refused (RedriveResult.reason).
NOT_SETTLED = "not_settled"
NOT_DEAD = "not_dead"
CANCELLATION_RECORDED = "cancellation_recorded"


@dataclass(frozen=True, slots=True)
class RedriveDecision:
    status: RedriveStatus
    record: bool  # write the redrive?
    reason: str | None = None


def decide_redrive(job: JobRecord | None, already_applied: bool) -> RedriveDecision:
    """What a redrive request does to ``job`` (None when it does not exist),
    given whether its redrive id was applied to the job before."""
    if job is None:
        return RedriveDecision("not_found", record=False)
    if already_applied:
        return RedriveDecision("replayed", record=False)
    if job.state != "settled":
        return RedriveDecision("refused", record=False, reason=NOT_SETTLED)
    if job.cancellation_id is not None:
        # Its cancellation id answers replays of that cancellation; a new
        # chain under it would be cancelled at once, or contradict it.
        return RedriveDecision("refused", record=False, reason=CANCELLATION_RECORDED)
    if job.outcome not in DEAD_OUTCOMES:
        return RedriveDecision("refused", record=False, reason=NOT_DEAD)
    return RedriveDecision("redriven", record=True)


@dataclass(frozen=True, slots=True)
class CancelDecision:
    status: CancelStatus
    record: bool  # write the cancellation id?


def decide_holds(job: JobRecord, now: int, *, paused: bool, queue_limit: int,
                 queue_running: Sequence[str], ahead: Sequence[str],
                 lane_limit: int | None = None, lane_running: Sequence[str] = (),
                 queue_rate: RateLimit | None = None, lane_rate: RateLimit | None = None,
                 executing: Sequence[str] = ()) -> tuple[Hold, ...]:
    """What holds the queued ``job`` at ``now``, every hold that applies, in
    the order they clear (see ``tickwork.model.waiting``): ``paused`` is its
    queue's pause; ``queue_limit`` its queue's ``max_running`` and
    ``queue_running`` that queue's running jobs (up to the limit);
    ``ahead`` the queue's ready jobs a claim takes before it (up to the
    queue's free places); ``lane_limit`` its lane's limit (None: none) and
    ``lane_running`` that lane's running jobs; ``queue_rate`` and
    ``lane_rate`` their rate limits and holds (None: none); ``executing`` the jobs the
    owner's slots run when every slot it could run on is taken (empty while
    one is free, and where there is no owner-wide limit)."""
    if job.cancellation_id is not None:
        return (Hold("cancelled"),)
    holds: list[Hold] = []
    if job.due_at is not None and job.due_at > now:
        holds.append(Hold("not_due", until=job.due_at))
    if paused:
        holds.append(Hold("queue_paused"))
    named: set[str] = set()
    if len(queue_running) >= queue_limit:
        named.update(queue_running)
        holds.append(Hold("queue_busy", job_ids=tuple(queue_running), limit=queue_limit))
    elif ahead and len(ahead) >= queue_limit - len(queue_running):
        named.update(ahead)
        holds.append(Hold("behind_head", job_ids=tuple(ahead)))
    if lane_limit is not None and len(lane_running) >= lane_limit:
        named.update(lane_running)
        holds.append(Hold("lane_busy", job_ids=tuple(lane_running), limit=lane_limit))
    for kind, rate in (("queue_rate_limited", queue_rate), ("lane_rate_limited", lane_rate)):
        until = None if rate is None else released_at(rate, now)
        if until is not None:
            holds.append(Hold(kind, until=until))  # type: ignore[arg-type]
    # ``executing`` is empty unless every slot runs a job. Named by a hold
    # already, an owner's busy slots add nothing: its jobs are those.
    if any(job_id not in named for job_id in executing):
        holds.append(Hold("owner_busy", job_ids=tuple(executing)))
    return tuple(holds)


def decide_cancel(
    job: JobRecord | None, cancellation_id: str, *, only_if_queued: bool
) -> CancelDecision:
    """What a cancellation request does to ``job`` (None when it does not exist)."""
    if job is None:
        return CancelDecision("not_found", record=False)
    if job.cancellation_id is not None:
        # One cancellation per job; its id makes the request replay-safe.
        if job.cancellation_id == cancellation_id:
            return CancelDecision("replayed", record=False)
        return CancelDecision("conflict", record=False)
    if job.state == "settled":
        return CancelDecision("already_settled", record=False)
    if only_if_queued and job.state == "running":
        return CancelDecision("refused", record=False)
    return CancelDecision("recorded", record=True)


RecoveryAction: TypeAlias = Literal["requeue", "interrupt", "cancel"]


def decide_recovery(job: JobRecord) -> RecoveryAction:
    """What to do with a running job whose execution is known to be gone."""
    if job.cancellation_id is not None:
        # Requeueing would only settle it as cancelled on the next tick.
        return "cancel"
    if job.recovery is not None and job.recoveries < job.recovery.max_recoveries:
        return "requeue"
    return "interrupt"


def recovery_settlement(action: RecoveryAction) -> Settlement:
    if action == "cancel":
        return Settlement("cancelled")
    return Settlement("interrupted")


def in_lane_failure_order(jobs: list[JobRecord]) -> list[JobRecord]:
    """The jobs one failing of a lane settled, as it chose them: running ones
    first (``started_at`` is set exactly while a job runs), then in enqueue
    order. A store returns them in RETURNING's order, which no dialect defines;
    the events (and an owner-local projector) see them in this one."""
    return sorted(jobs, key=lambda job: (job.started_at is None, job.sequence))
