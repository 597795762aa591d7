"""What the model-based tests share.

test_owner_model.py (an OwnerRuntime: one ticker) and
test_concurrent_model.py (a ConcurrentOwnerRuntime: a serial and a
concurrent ticker) drive a real runtime and a small pure-Python model of the
spec with the same operations and compare them after every step.
test_shared_model.py does the same for the shared runtimes (D1, PostgreSQL)
with two workers, leases and kills; its model, executor and scenario differ
too much to subclass these (see the comments there), so it takes only the
pieces marked "(all three)" below. This module holds:

* the world's constants, the job ``Spec`` (and ``ReplaySpec``, whose payload
  replays reorder: the owner and the shared model), the operations the owner
  tests both draw and the strategy helpers (``weighted``: all three);
* the spec's rules over any model's jobs (all three): ``queue_head``,
  ``has_pending``, ``cancel_refusal``, ``lane_refusal``, ``purge_queue``,
  ``ingest_answer`` and ``recovery_of``;
* the owner models' shared part (``Model``): settling, cancel, fail_lane,
  purge, releases, the probe of an orphan and its recovery, and the
  settle-or-claim step of a tick. A subclass says which ticker a lane's jobs
  run in (``ticker_of``), which of a ticker's queued jobs it may claim
  (``ready``) and what an immediate action settles as (``immediate``);
* the ``GatedExecutor`` (blocking executors park on a gate per job until the
  test releases them, the signal aborts them or the "process" crashes),
  ``park()`` and ``released()`` (all three);
* ``ModelScenario``: the runtime's construction, the liveness probe, the loop
  spinning that keeps concurrency deterministic (after every step each
  in-flight tick has either finished or parked on its gate again), the step
  and drain machinery, crash-and-rebuild and the invariant checks both make.
  A subclass names its tickers and loop budgets and adds its own operations
  and checks;
* the comparisons (all three, or the owner and the shared model):
  ``RecordLedger`` (every job's record against the model, step after step),
  ``compare_heads`` and ``check_runs``;
* ``harness_of``, ``owner_model_test`` (the owner tests' draws),
  ``run_model`` and the example count (TICKWORK_MODEL_EXAMPLES, all three).

Time is a counter (``clock``), so claim order is started_at order, plus
whole *epochs* of ``EPOCH_MS`` that an operation moves forward (the owner
model's ``Advance``): a job may be due ``delay`` epochs after its ingest, or
once the clock passes the middle of epoch ``at``. An epoch is far longer
than any example's ticking, so "due" depends on epochs alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Awaitable, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeAlias, TypeVar

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.support import IMMEDIATE_ACTIONS, OWNER_KINDS, Harness
from tickwork import (
    AbortSignal,
    Cancelled,
    CancelResult,
    Completed,
    Failed,
    FailLaneResult,
    Job,
    JobRecord,
    OutcomeUnknown,
    OwnerRuntime,
    QueueTransition,
    Recovery,
    RedriveResult,
    Retry,
    TickResult,
)

# ----------------------------------------------------------------- the world

GHOST = "ghost"  # never ingested
SERIAL = "serial"  # the ticker tick() runs in (an OwnerRuntime's only one)
# What the executor does, chosen by payload["do"], besides the immediate
# actions each test lists: "block" parks on a gate and honours its signal
# (returns Failed("stopped") when aborted); "stubborn" parks on a gate and
# ignores its signal.
BLOCKING = ("block", "stubborn")
# What a test may release a parked executor with (each test draws from its
# own RELEASES: "invalid" is the owner model's alone).
Release: TypeAlias = Literal["completed", "failed", "raise", "unknown", "cancelled", "invalid"]
Liveness: TypeAlias = Literal["dead", "alive", "raise"]
LIVENESS: tuple[Liveness, ...] = ("dead", "alive", "raise")
PROBE_ERROR = ConnectionError("liveness registry unreachable")
PROBE_REASON = f"ConnectionError: {PROBE_ERROR}"
EXECUTOR_REASON = "exec_reason"
RELEASE_REASON = "late_reason"
STOPPED = "stopped"

# What a released executor's result settles as (before a cancellation).
RELEASED: dict[Release, tuple[str, str | None]] = {
    "completed": ("completed", None),
    "failed": ("failed", RELEASE_REASON),
    "raise": ("failed", "execution_failed"),
    "unknown": ("outcome_unknown", None),
    "cancelled": ("cancelled", None),
    "invalid": ("failed", "invalid_outcome"),
}
#: Every release, in RELEASED's order (the owner and the shared model draw
#: them all, the concurrent model its own few).
RELEASES: tuple[Release, ...] = tuple(RELEASED)
#: What each of tests.support's IMMEDIATE_ACTIONS (run by immediate_result)
#: settles as: the owner and the shared model's executors script these (the
#: concurrent model's its own few).
IMMEDIATE_OUTCOMES: dict[str, tuple[str, str | None]] = {
    "complete": ("completed", None),
    "fail": ("failed", None),
    "fail_reason": ("failed", EXECUTOR_REASON),
    "raise": ("failed", "execution_failed"),
    "unknown": ("outcome_unknown", None),
    "cancel": ("cancelled", None),
    "invalid": ("failed", "invalid_outcome"),
}
assert set(IMMEDIATE_OUTCOMES) == set(IMMEDIATE_ACTIONS)


#: One epoch of the models' clock, in ms (see the module doc).
EPOCH_MS = 10**9
#: Where epoch 0 starts: a whole number of epochs after 1970, in 2026 (a
#: run_at before 2001 is refused as likely seconds).
ORIGIN_MS = 1796 * EPOCH_MS


@dataclass(frozen=True)
class Spec:
    """A job as the test ingests it; its payload is the executor's script.
    ``delay`` (epochs after ingest) or ``at`` (an epoch) say when it is due."""

    job_id: str
    queue: str
    lane: str
    priority: int
    action: str
    max_recoveries: int | None
    delay: int | None = None
    at: int | None = None
    #: A retry policy: ``attempts`` in all, each retry due ``retry_delay``
    #: epochs after the failed attempt; None: no policy.
    attempts: int | None = None
    retry_delay: int = 0
    retry_unknown: bool = False

    def payload(self) -> dict[str, Any]:
        return {"do": self.action}

    def retry(self) -> Retry | None:
        if self.attempts is None:
            return None
        delay = self.retry_delay * EPOCH_MS
        return Retry(self.attempts, base_delay_ms=delay, factor=1.0, max_delay_ms=delay,
                     retry_unknown=self.retry_unknown)

    def recovery(self) -> Recovery | None:
        return None if self.max_recoveries is None else Recovery(self.max_recoveries)

    def run_at(self) -> int | None:
        return None if self.at is None else ORIGIN_MS + self.at * EPOCH_MS + EPOCH_MS // 2

    def delay_ms(self) -> int | None:
        return None if self.delay is None else self.delay * EPOCH_MS

    def due_epoch(self, now_epoch: int) -> int | None:
        """The epoch from which a job ingested in ``now_epoch`` is due; None: at once."""
        if self.delay:
            return now_epoch + self.delay
        if self.at is not None and self.at >= now_epoch:
            return self.at + 1  # run_at is the middle of epoch ``at``
        return None

    def job(self) -> Job:
        return self.job_with(self.payload())

    def job_with(self, payload: dict[str, Any]) -> Job:
        return Job(self.job_id, self.queue, self.lane, self.priority, payload, self.recovery(),
                   run_at=self.run_at(), delay_ms=self.delay_ms(), retry=self.retry())


@dataclass(frozen=True)
class ReplaySpec(Spec):
    """A job whose payload carries a version key (and the executor's reason
    for "fail_reason"), in either key order: replays reorder it."""

    def payload(self, *, reverse: bool = False) -> dict[str, Any]:
        items: list[tuple[str, Any]] = [("do", self.action), ("v", 1)]
        if self.action == "fail_reason":
            items.append(("reason", EXECUTOR_REASON))
        if reverse:
            items.reverse()
        return dict(items)

    def job(self, *, reverse: bool = False) -> Job:
        return self.job_with(self.payload(reverse=reverse))


# ---------------------------------------------------------------- operations
# The operations both tests draw; each adds its own (its Tick and ReleaseOp
# among them: the concurrent test's name a ticker).


@dataclass(frozen=True)
class Ingest:
    spec: Spec


@dataclass(frozen=True)
class Cancel:
    """Cancel a job picked by ``target``: 0 a job that never existed; 1 and 2
    the job in flight in the first and the second ticker (an OwnerRuntime's
    one ticker for both), else any running job; otherwise an existing job by
    index."""

    target: int
    cancellation_id: str
    only_if_queued: bool


@dataclass(frozen=True)
class FailLane:
    lane: str
    reason: str


@dataclass(frozen=True)
class Purge:
    queue: str


@dataclass(frozen=True)
class Crash:
    """Kill the process (every ticker's in-flight tick and the DB handle);
    rebuild the runtime, with ``liveness`` and ``probe_async`` from then on.

    With ``tick_first``, first tick each ticker (a few times) until it has a
    job in flight, so that claims are left running with no live executor
    for the rebuilt runtime to recover.
    """

    liveness: Liveness
    probe_async: bool
    tick_first: bool


@dataclass(frozen=True)
class SetLiveness:
    liveness: Liveness
    probe_async: bool


liveness = st.sampled_from(LIVENESS)
OperationT = TypeVar("OperationT")


def weighted(
    *choices: tuple[int, st.SearchStrategy[OperationT]]
) -> st.SearchStrategy[OperationT]:
    """one_of with weights (one_of itself draws its distinct branches about evenly)."""
    pool = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.sampled_from(pool).flatmap(lambda strategy: strategy)


# ---------------------------------------------------------- the spec's rules
# Over any model's jobs: the owner models' ModelJob and the shared model's
# MJob alike.


class SpecJob(Protocol):
    """A model's job, as the rules below read it."""

    @property
    def spec(self) -> Spec: ...
    @property
    def sequence(self) -> int: ...  # enqueue order
    @property
    def state(self) -> Literal["queued", "running", "settled"]: ...
    @property
    def recoveries(self) -> int: ...
    @property
    def cancellation_id(self) -> str | None: ...
    @property
    def outcome(self) -> str | None: ...


J = TypeVar("J", bound=SpecJob)


def _always_due(job: Any) -> bool:
    return True


def _never_waits(job: Any) -> bool:
    return False


def queue_head(jobs: Iterable[J], queue: str,
               waits: Callable[[J], bool] = _never_waits) -> J | None:
    """What read_queue_head reports: running first, then priority, then age,
    among jobs in the ready set (one still waiting for its time, ``waits``,
    holds no queue: a tick moves it into the ready set once it is due)."""
    mine = [j for j in jobs if j.spec.queue == queue]
    running = [j for j in mine if j.state == "running"]
    assert len(running) <= 1
    if running:
        return running[0]
    return min((j for j in mine if j.state == "queued" and not waits(j)),
               key=lambda j: (-j.spec.priority, j.sequence), default=None)


def has_pending(jobs: Iterable[SpecJob],
                is_due: Callable[[Any], bool] = _always_due) -> bool:
    """Work for a tick now: a running job, or a queued one that is due or
    cancelled (a cancelled job settles without waiting for its time)."""
    return any(job.state == "running" or (job.state == "queued" and (
        job.cancellation_id is not None or is_due(job))) for job in jobs)


def cancel_refusal(
    job: SpecJob | None, cancellation_id: str, only_if_queued: bool
) -> str | None:
    """What cancel answers without recording anything; None when it records
    ``cancellation_id`` (and answers "recorded")."""
    if job is None:
        return "not_found"
    if job.cancellation_id is not None:
        return "replayed" if job.cancellation_id == cancellation_id else "conflict"
    if job.state == "settled":
        return "already_settled"
    if only_if_queued and job.state == "running":
        return "refused"
    return None


def redrive_refusal(job: SpecJob | None, job_id: str, applied: bool) -> RedriveResult | None:
    """What redrive answers without writing anything (``applied``: this
    redrive id was applied to the job before); None when it redrives."""
    if job is None:
        return RedriveResult("not_found", job_id)
    if applied:
        return RedriveResult("replayed", job_id)
    if job.state != "settled":
        return RedriveResult("refused", job_id, "not_settled")
    if job.cancellation_id is not None:
        return RedriveResult("refused", job_id, "cancellation_recorded")
    if job.outcome not in ("failed", "outcome_unknown", "interrupted"):
        return RedriveResult("refused", job_id, "not_dead")
    return None


def lane_refusal(jobs: Iterable[J], lane: str) -> tuple[list[J], bool]:
    """What fail_lane settles: the lane's running jobs, then its waiting
    ones, each oldest first, 256 at most; and whether any stay unsettled."""
    pending = [j for j in jobs if j.spec.lane == lane and j.state != "settled"]
    running = sorted((j for j in pending if j.state == "running"), key=lambda j: j.sequence)
    queued = sorted((j for j in pending if j.state == "queued"), key=lambda j: j.sequence)
    return (running + queued)[:256], len(pending) > 256


def purge_queue(jobs: dict[str, J], queue: str) -> int:
    """Delete ``queue``'s waiting jobs; how many."""
    doomed = [i for i, j in jobs.items() if j.spec.queue == queue and j.state == "queued"]
    for job_id in doomed:
        del jobs[job_id]
    return len(doomed)


def ingest_answer(spec: Spec, old: Spec) -> str | tuple[str, ...]:
    """Ingest of ``spec`` over an existing job ``old``: "duplicate", or the
    fields in conflict."""
    differences = [name for name, new_value, old_value in (
        ("queue", spec.queue, old.queue),
        ("lane", spec.lane, old.lane),
        ("priority", spec.priority, old.priority),
        ("payload", spec.payload(), old.payload()),
        ("recovery", spec.max_recoveries, old.max_recoveries),
        ("run_at", spec.run_at(), old.run_at()),
        ("delay_ms", spec.delay_ms(), old.delay_ms()),
        ("retry", spec.retry(), old.retry()),
    ) if new_value != old_value]
    return tuple(differences) if differences else "duplicate"


def recovery_of(job: SpecJob) -> Literal["cancelled", "requeued", "interrupted"]:
    """How the recovery of a running ``job`` nobody executes ends: settled
    cancelled once a cancellation is recorded, requeued while its recovery
    budget lasts, else settled interrupted."""
    if job.cancellation_id is not None:
        return "cancelled"
    budget = job.spec.max_recoveries
    if budget is not None and job.recoveries < budget:
        return "requeued"
    return "interrupted"


# --------------------------------------------------------------------- model


@dataclass
class ModelJob:
    spec: Spec
    sequence: int  # enqueue order
    state: Literal["queued", "running", "settled"] = "queued"
    outcome: str | None = None
    failure_reason: str | None = None
    recoveries: int = 0
    cancellation_id: str | None = None
    claimed_at: int = 0  # claim order (the engine orders orphans by started_at)
    # Waits until this epoch (None: in the ready set); a tick clears it once due.
    due_epoch: int | None = None
    attempt: int = 1
    # The attempts before this one: (attempt, outcome, reason).
    history: list[tuple[int, str, str | None]] = field(default_factory=list)


def retried_result(job: ModelJob, outcome: str, reason: str | None) -> TickResult:
    """The tick result of an attempt of ``job`` that ended in a retry; its
    ``retry_at`` is the epoch the job is due in (``in_epochs`` turns the
    runtime's into that)."""
    return TickResult("retried", job_id=job.spec.job_id, outcome=outcome,  # type: ignore[arg-type]
                      failure_reason=reason, retry_at=job.due_epoch)


def in_epochs(result: TickResult) -> TickResult:
    """``result`` with its ``retry_at`` as the epoch it falls in."""
    if result.retry_at is None:
        return result
    return replace(result, retry_at=(result.retry_at - ORIGIN_MS) // EPOCH_MS)


def claim_order(job: ModelJob) -> tuple[int, int]:
    """The engine's (started_at, sequence) order: the clock is a counter."""
    return job.claimed_at, job.sequence


@dataclass
class Flight:
    """An executor a tick left parked on its gate."""

    job_id: str
    honours_signal: bool
    finished: bool = False  # the tick should have returned by the end of this step
    # The attempt's (outcome, reason) when it ended in a retry, not a settlement.
    retried: tuple[str, str | None] | None = None
    # The job was redriven while this execution (of its settled claim) ran:
    # the claim is no longer the job's.
    replaced: bool = False


@dataclass
class Model:
    """The spec, as plain Python over a dict of jobs (ingest is each test's)."""

    #: What an immediate action (one not in BLOCKING) settles as.
    immediate: ClassVar[Mapping[str, tuple[str, str | None]]]

    jobs: dict[str, ModelJob] = field(default_factory=dict)
    next_claim: int = 0
    liveness: Liveness = "dead"
    flights: dict[str, Flight] = field(default_factory=dict)  # per ticker
    executions: dict[str, int] = field(default_factory=dict)  # per job_id, all incarnations
    # Per ticker: the claim order of the last orphan it spared.
    probe_after: dict[str, tuple[int, int]] = field(default_factory=dict)
    epoch: int = 0  # the clock's current epoch (see the module doc)

    # -- what a subclass says
    def ticker_of(self, lane: str) -> str:
        """The ticker that runs (and recovers) the jobs of ``lane``."""
        raise NotImplementedError

    def ready(self, candidates: list[ModelJob]) -> list[ModelJob]:
        """Which of a ticker's jobs (``candidates``) its tick may claim."""
        raise NotImplementedError

    # -- helpers
    def settle(self, job: ModelJob, outcome: str, reason: str | None = None) -> None:
        assert job.state != "settled"
        job.state, job.outcome, job.failure_reason = "settled", outcome, reason

    def end_attempt(self, job: ModelJob, outcome: str, reason: str | None) -> bool:
        """The attempt of a running ``job`` ended with ``outcome``: retried
        (True: queued again, due ``retry_delay`` epochs from now, as its next
        attempt) while its policy has attempts left for that outcome, else
        settled."""
        spec = job.spec
        retried = (spec.attempts is not None and job.attempt < spec.attempts
                   and job.cancellation_id is None
                   and (outcome == "failed"
                        or (outcome == "outcome_unknown" and spec.retry_unknown)))
        if not retried:
            self.settle(job, outcome, reason)
            return False
        job.history = [*job.history, (job.attempt, outcome, reason)][-20:]
        job.state, job.attempt = "queued", job.attempt + 1
        job.due_epoch = self.epoch + spec.retry_delay
        return True

    def in_queue(self, queue: str, state: str) -> list[ModelJob]:
        return [j for j in self.jobs.values() if j.spec.queue == queue and j.state == state]

    def is_due(self, job: ModelJob) -> bool:
        return job.due_epoch is None or self.epoch >= job.due_epoch

    @staticmethod
    def waits(job: ModelJob) -> bool:
        return job.due_epoch is not None

    def promote(self) -> None:
        """A tick's first step: every waiting job whose time has come joins
        the ready set."""
        for job in self.jobs.values():
            if job.state == "queued" and job.due_epoch is not None and self.is_due(job):
                job.due_epoch = None

    def queue_head(self, queue: str) -> ModelJob | None:
        return queue_head(self.jobs.values(), queue, self.waits)

    def has_pending_work(self) -> bool:
        return has_pending(self.jobs.values(), self.is_due)

    def flight_of(self, job_id: str) -> Flight | None:
        return next((f for f in self.flights.values() if f.job_id == job_id), None)

    # -- operations
    def cancel(self, job_id: str, cancellation_id: str, only_if_queued: bool) -> str:
        job = self.jobs.get(job_id)
        refusal = cancel_refusal(job, cancellation_id, only_if_queued)
        if refusal is not None:
            return refusal
        assert job is not None
        job.cancellation_id = cancellation_id
        flight = self.flight_of(job_id)
        if flight is not None and flight.honours_signal:
            # Aborted: the executor returns Failed("stopped"), which a
            # cancellation turns into "cancelled".
            self.settle(job, "cancelled")
            flight.finished = True
        return "recorded"

    def fail_lane(self, lane: str, reason: str) -> FailLaneResult:
        refused, more = lane_refusal(self.jobs.values(), lane)
        for job in refused:
            self.settle(job, "failed", reason)
            flight = self.flight_of(job.spec.job_id)
            if flight is not None and flight.honours_signal:
                flight.finished = True  # it stops and reports the committed refusal
        return FailLaneResult(len(refused), more)

    def purge(self, queue: str) -> int:
        return purge_queue(self.jobs, queue)

    def release(self, ticker: str, result: Release) -> None:
        flight = self.flights[ticker]
        flight.finished = True
        if flight.replaced:
            return  # redriven meanwhile: the new chain is not this claim's
        job = self.jobs[flight.job_id]
        if job.state == "settled":
            return  # refused while it ran: the committed failure is reported
        outcome, reason = RELEASED[result]
        if job.cancellation_id is not None:
            # The spec: cancelled while it ran settles cancelled, whatever the
            # executor says; a completion is kept as the reason.
            outcome, reason = "cancelled", ("executor_completed" if outcome == "completed"
                                            else None)
        if self.end_attempt(job, outcome, reason):
            flight.retried = (outcome, reason)

    # -- a tick of ``ticker``: probe one orphan, then recover it or go on
    def tick(self, ticker: str) -> tuple[TickResult | None, list[str]]:
        """(the tick's result, or None when it leaves an executor in flight;
        the claims it probed). Only ``ticker``'s jobs are looked at."""
        self.promote()
        orphan = self.orphan_to_probe(ticker)
        return self.after_probe(ticker, orphan), [] if orphan is None else [orphan.spec.job_id]

    def orphan_to_probe(self, ticker: str) -> ModelJob | None:
        """Recovery first (nothing of ``ticker`` runs here between its ticks):
        the first claim after the last one found alive or unjudgeable,
        wrapping round."""
        assert ticker not in self.flights
        orphans = sorted((j for j in self.jobs.values()
                          if j.state == "running" and self.ticker_of(j.spec.lane) == ticker),
                         key=claim_order)
        if not orphans:
            return None
        after = self.probe_after.get(ticker)
        return next((j for j in orphans if after is not None and claim_order(j) > after),
                    orphans[0])

    def after_probe(self, ticker: str, orphan: ModelJob | None) -> TickResult | None:
        """The rest of the tick once ``orphan`` (if any) has been probed."""
        unknown: ModelJob | None = None
        if orphan is not None:
            if self.liveness in ("raise", "alive"):
                self.probe_after[ticker] = claim_order(orphan)
            if self.liveness == "raise":
                unknown = orphan
            # (A race during the probe may have settled it meanwhile.)
            elif self.liveness == "dead" and orphan.state == "running":
                return self.recover(orphan)
        return self.settle_or_claim(ticker, unknown)

    def recover(self, orphan: ModelJob) -> TickResult:
        job_id = orphan.spec.job_id
        ending = recovery_of(orphan)
        if ending == "requeued":
            orphan.state = "queued"
            orphan.recoveries += 1
            return TickResult("requeued", job_id=job_id)
        self.settle(orphan, ending)
        return TickResult("settled", job_id=job_id, outcome=ending)

    def settle_or_claim(self, ticker: str, unknown: ModelJob | None) -> TickResult | None:
        """Settle the ticker's oldest cancelled waiting job, else claim and run
        its best ready job; None when its executor is left in flight."""
        mine = [j for j in self.jobs.values() if self.ticker_of(j.spec.lane) == ticker]
        cancelled = [j for j in mine if j.state == "queued" and j.cancellation_id is not None]
        if cancelled:
            job = min(cancelled, key=lambda j: j.sequence)
            self.settle(job, "cancelled")
            return TickResult("settled", job_id=job.spec.job_id, outcome="cancelled")
        ready = self.ready(mine)
        if ready:
            job = min(ready, key=lambda j: (-j.spec.priority, j.sequence))
            job.state = "running"
            job.claimed_at = self.next_claim
            self.next_claim += 1
            job_id = job.spec.job_id
            self.executions[job_id] = self.executions.get(job_id, 0) + 1
            action = job.spec.action
            if action in BLOCKING:
                self.flights[ticker] = Flight(job_id, honours_signal=action == "block")
                return None
            outcome, reason = self.immediate[action]
            if self.end_attempt(job, outcome, reason):
                return retried_result(job, outcome, reason)
            return TickResult("settled", job_id=job_id, outcome=outcome,  # type: ignore[arg-type]
                              failure_reason=reason)
        if unknown is not None:
            return TickResult("liveness_unknown", job_id=unknown.spec.job_id, reason=PROBE_REASON)
        return TickResult("idle")

    def crash(self) -> None:
        # Whatever was in flight keeps its durable state (running, or already
        # settled by a refusal); nobody executes it any more. The rebuilt
        # runtime starts probing from the oldest claim again.
        self.flights.clear()
        self.probe_after.clear()


# ------------------------------------------------------------ the real side


class GatedExecutor:
    """Deterministic executor driven by payload["do"]: an immediate action
    returns ``immediate(action, payload)`` at once; a blocking one parks on a
    gate of its own until released. Records every claim it runs and which
    jobs execute right now.

    Violations (a claim executed twice, two executions in one ticker) are
    recorded, not raised: the runtime would take an assertion raised in here
    for the executor's own failure.
    """

    def __init__(
        self,
        immediate_actions: Collection[str],
        immediate: Callable[[str, dict[str, Any]], Any],
        ticker_of: Callable[[str], str],
    ) -> None:
        self.immediate_actions = immediate_actions
        self.immediate = immediate
        self.ticker_of = ticker_of
        self.claims: list[tuple[str, int | None]] = []  # (job_id, started_at)
        self.active: dict[str, str] = {}  # job_id -> lane, while executing
        self.gates: dict[str, asyncio.Future[Release]] = {}  # jobs parked on their gate
        self.signals: dict[str, AbortSignal] = {}
        self.honours: dict[str, bool] = {}
        self.violations: list[str] = []

    async def __call__(self, job: JobRecord, signal: AbortSignal) -> Any:
        claim = (job.job_id, job.started_at)
        if claim in self.claims:
            self.violations.append(f"claim {claim} executed twice")
        self.claims.append(claim)
        ticker = self.ticker_of(job.lane)
        if any(self.ticker_of(lane) == ticker for lane in self.active.values()):
            self.violations.append(f"two executions in the {ticker} ticker: "
                                   f"{sorted(self.active)} and {job.job_id}")
        self.active[job.job_id] = job.lane
        try:
            action = job.payload["do"]
            await asyncio.sleep(0)
            if action in self.immediate_actions:
                return self.immediate(action, job.payload)
            assert action in BLOCKING, action
            gate: asyncio.Future[Release] = asyncio.get_running_loop().create_future()
            self.gates[job.job_id], self.signals[job.job_id] = gate, signal
            self.honours[job.job_id] = action == "block"
            try:
                return await park(gate, signal, honours=action == "block")
            finally:
                del self.gates[job.job_id]
        finally:
            del self.active[job.job_id]

    def parked(self, job_id: str) -> bool:
        """The executor of ``job_id`` is waiting and nothing will wake it by itself."""
        gate = self.gates.get(job_id)
        if gate is None or gate.done():
            return False
        return not (self.honours[job_id] and self.signals[job_id].aborted)


async def park(gate: asyncio.Future[Release], signal: AbortSignal, *, honours: bool) -> Any:
    """Wait on ``gate`` until the test releases it (an executor that
    ``honours`` its signal also until the signal aborts it): what the
    executor then returns (or raises), Failed(STOPPED) once aborted."""
    aborted: asyncio.Future[Any] = asyncio.ensure_future(signal.wait())
    try:
        if honours:
            await asyncio.wait({gate, aborted}, return_when=asyncio.FIRST_COMPLETED)
            if not gate.done():
                return Failed(STOPPED)
        else:
            await gate
    finally:
        aborted.cancel()
    return released(gate.result())


def released(result: Release) -> Any:
    """What a parked executor returns (or raises) when released with ``result``."""
    if result == "completed":
        return Completed()
    if result == "failed":
        return Failed(RELEASE_REASON)
    if result == "raise":
        raise RuntimeError("released into an explosion")
    if result == "unknown":
        return OutcomeUnknown()
    if result == "cancelled":
        return Cancelled()
    return {"not": "an outcome"}


M = TypeVar("M", bound=Model)
R = TypeVar("R", bound=OwnerRuntime)


class ModelScenario(Generic[M, R]):
    """Runs operations on the real runtime and on the model, comparing after
    each. At most one tick per ticker is in flight (its executor parked on its
    gate); after every step the loop is spun until each has finished or
    parked again."""

    #: The runtime's tickers, in the order the drain ticks them.
    tickers: ClassVar[tuple[str, ...]]
    #: How many sleep(0)s a tick may take to finish or park.
    spins: ClassVar[int]
    #: With Crash(tick_first=True): ticks per ticker, at most, to get a job in flight.
    crash_ticks: ClassVar[int]
    #: Rounds (a step per ticker each) the final drain may take.
    drain_rounds: ClassVar[int]
    #: The operations that may probe liveness.
    probing: ClassVar[tuple[type, ...]]

    def __init__(
        self, harness: Harness, model: M, executor: GatedExecutor, *, project: bool
    ) -> None:
        self.harness = harness
        self.project = project
        self.transitions: list[QueueTransition] = []
        self.model = model
        self.executor = executor
        self.now = 0
        self.probe_async = False
        self.probed: list[str] = []
        self.tasks: dict[str, asyncio.Task[TickResult]] = {}  # per ticker, while in flight
        self.runtime = self.build()

    # -- what a subclass says
    def open_runtime(self, **options: Any) -> R:
        raise NotImplementedError

    def call(self, ticker: str) -> Awaitable[TickResult]:
        """The runtime's tick of ``ticker``."""
        raise NotImplementedError

    async def apply(self, op: Any) -> None:
        """Apply ``op`` to both sides (a subclass handles its own operations
        and hands the shared ones to this)."""
        model = self.model
        if isinstance(op, FailLane):
            expected_refusal = model.fail_lane(op.lane, op.reason)
            assert self.runtime.fail_lane(op.lane, op.reason) == expected_refusal
        elif isinstance(op, Purge):
            expected_count = model.purge(op.queue)
            assert self.runtime.purge(op.queue) == expected_count
        elif isinstance(op, Crash):
            await self.crash(op)
        else:
            assert isinstance(op, SetLiveness), op
            model.liveness, self.probe_async = op.liveness, op.probe_async

    async def tick(self, ticker: str) -> None:
        raise NotImplementedError

    def check(self) -> None:
        """Compare everything (run after every step)."""
        raise NotImplementedError

    def tick_op(self, ticker: str) -> Any:
        raise NotImplementedError

    def release_op(self, ticker: str, result: Release) -> Any:
        raise NotImplementedError

    def drained(self) -> None:
        """Further checks once everything has drained."""

    def during_probe(self, job: JobRecord) -> None:
        """Runs inside every liveness probe, before it answers."""

    # -- the runtime
    def clock(self) -> int:
        self.now += 1
        return ORIGIN_MS + self.model.epoch * EPOCH_MS + self.now

    def build(self) -> R:
        options: dict[str, Any] = {}
        if self.project:
            options["project"] = self.transitions.append
        return self.open_runtime(
            execute=self.executor, is_alive=self.probe, clock=self.clock, **options)

    def probe(self, job: JobRecord) -> bool | Awaitable[bool]:
        self.probed.append(job.job_id)
        if self.probe_async:
            return self._answer_later(job)
        return self._answer(job)

    def _answer(self, job: JobRecord) -> bool:
        self.during_probe(job)
        if self.model.liveness == "raise":
            raise PROBE_ERROR
        return self.model.liveness == "alive"

    async def _answer_later(self, job: JobRecord) -> bool:
        await asyncio.sleep(0)
        return self._answer(job)

    def named(self, ticker: str) -> str:
        """``ticker``'s tick, as the events name it."""
        return "tick" if len(self.tickers) == 1 else f"{ticker} tick"

    # -- driving the loop
    async def spin(self) -> None:
        """Let every in-flight tick run until it finishes or parks on its gate."""
        flights = self.model.flights
        assert sorted(self.tasks) == sorted(flights), "a tick in flight the model has not"
        for _ in range(self.spins):
            if all(task.done() or self.executor.parked(flights[ticker].job_id)
                   for ticker, task in self.tasks.items()):
                break
            await asyncio.sleep(0)
        else:
            raise AssertionError("an in-flight tick neither finished nor parked")
        for ticker, task in list(self.tasks.items()):
            flight = flights[ticker]
            if not flight.finished:
                assert not task.done(), f"{ticker} tick finished early: {task.result()!r}"
                continue
            assert task.done(), f"the {ticker} tick of {flight.job_id} should have finished"
            job = self.model.jobs[flight.job_id]
            if flight.replaced:
                expected = TickResult("idle", job_id=flight.job_id, reason="claim_replaced")
                event(f"in-flight {self.named(ticker)} finished: claim replaced")
            elif flight.retried is not None:
                expected = retried_result(job, *flight.retried)
                event(f"in-flight {self.named(ticker)} finished: retried")
            else:
                assert job.state == "settled"
                expected = TickResult("settled", job_id=flight.job_id,
                                      outcome=job.outcome,  # type: ignore[arg-type]
                                      failure_reason=job.failure_reason)
                event(f"in-flight {self.named(ticker)} finished: {job.outcome}")
            assert in_epochs(task.result()) == expected, ticker
            del self.tasks[ticker]
            del flights[ticker]

    async def step(self, op: Any) -> None:
        """Apply ``op``, spin, then compare everything (and the settlements it
        projected)."""
        model = self.model
        settled_before = {i for i, job in model.jobs.items() if job.state == "settled"}
        self.transitions.clear()
        self.probed = []
        await self.apply(op)
        await self.spin()
        if not isinstance(op, self.probing):
            assert self.probed == [], "only a tick may probe liveness"
        self.check()
        if self.project:
            # Every job settled by this step was handed to the projector
            # exactly once.
            newly_settled = sorted(i for i, job in model.jobs.items()
                                   if job.state == "settled" and i not in settled_before)
            projected = sorted(t.settled.job_id for t in self.transitions if t.settled)
            assert projected == newly_settled

    async def start_tick(self, ticker: str, expected: TickResult | None) -> TickResult | None:
        """Start ``ticker``'s tick. When the model says it leaves an executor in
        flight (``expected`` is None) leave it running; else wait for it and
        compare its result (returned)."""
        task = asyncio.ensure_future(self.call(ticker))
        if expected is None:
            self.tasks[ticker] = task
            return None
        for _ in range(self.spins):
            if task.done():
                break
            await asyncio.sleep(0)
        assert task.done(), "a tick with nothing to wait for did not finish"
        result = task.result()
        assert in_epochs(result) == expected, ticker
        return result

    async def tick_busy(self, ticker: str) -> None:
        """A tick of a ticker with a tick in flight: busy, and probes nothing."""
        assert await self.call(ticker) == TickResult("busy")
        assert self.probed == []

    def release(self, ticker: str, result: Release) -> None:
        """Let ``ticker``'s parked executor return ``result`` (no-op when nothing
        is in flight there)."""
        flight = self.model.flights.get(ticker)
        if flight is None or flight.finished:
            return
        self.model.release(ticker, result)
        self.executor.gates[flight.job_id].set_result(result)

    def cancel(self, job_id: str, cancellation_id: str, only_if_queued: bool) -> None:
        expected = self.model.cancel(job_id, cancellation_id, only_if_queued)
        result = self.runtime.cancel(job_id, cancellation_id, only_if_queued=only_if_queued)
        assert result == CancelResult(expected, job_id)  # type: ignore[arg-type]
        event(f"cancel: {expected}")

    def cancel_target(self, target: int) -> str:
        """See Cancel: 1 and 2 name the first and the second ticker."""
        jobs = self.model.jobs
        if target == 0 or not jobs:
            return GHOST
        if target <= 2:
            flight = self.model.flights.get(self.tickers[(target - 1) % len(self.tickers)])
            if flight is not None:
                return flight.job_id
            running = sorted(i for i, job in jobs.items() if job.state == "running")
            if running:
                return running[0]
        ids = sorted(jobs)
        return ids[target % len(ids)]

    async def crash(self, op: Crash) -> None:
        for ticker in self.tickers if op.tick_first else ():
            for _ in range(self.crash_ticks):
                if ticker in self.tasks:
                    break
                await self.tick(ticker)
                self.check()
        event(f"crash with {len(self.tasks)} tick(s) in flight")
        # With nothing in flight the process dies idle (a finished task).
        tasks: list[asyncio.Task[Any]] = [*self.tasks.values()]
        if not tasks:
            tasks = [asyncio.create_task(asyncio.sleep(0))]
        await self.harness.crash(*tasks)
        assert all(task.done() for task in tasks)
        self.tasks.clear()
        self.model.crash()
        self.model.liveness, self.probe_async = op.liveness, op.probe_async
        self.runtime = self.build()

    # -- the comparisons both tests make
    def check_heads(self, queues: Collection[str]) -> None:
        runtime = self.runtime
        compare_heads({queue: runtime.read_queue_head(queue) for queue in queues},
                      runtime.has_pending_work(), self.model.jobs.values(), self.model.waits,
                      self.model.is_due, self.model.has_pending_work())

    def check_executions(self) -> None:
        """At most one execution per ticker, and exactly the model's in-flight
        ones; every claim ran at most once, and exactly the claims the model
        made were executed."""
        executor, model = self.executor, self.model
        active = executor.active
        assert sorted(active) == sorted(f.job_id for f in model.flights.values())
        for ticker in self.tickers:
            assert sum(model.ticker_of(lane) == ticker for lane in active.values()) <= 1
        check_runs(executor.claims, model.executions)

    # -- a whole example
    async def run(self, ops: list[Any]) -> None:
        try:
            self.check()
            for op in ops:
                await self.step(op)
            # Finally drain: release whatever is parked, recover everything,
            # and tick every ticker until idle; the model must agree all the way
            # down.
            await self.step(SetLiveness("dead", False))
            for _ in range(self.drain_rounds):
                for ticker in self.tickers:
                    if ticker in self.tasks:
                        await self.step(self.release_op(ticker, "completed"))
                    else:
                        await self.step(self.tick_op(ticker))
                if not self.tasks and not self.model.has_pending_work():
                    break
            else:
                raise AssertionError("never drained")
            assert not self.runtime.has_pending_work()
            for ticker in self.tickers:
                assert await self.call(ticker) == TickResult("idle"), ticker
            self.drained()
        finally:
            for task in self.tasks.values():
                task.cancel()
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)


# ------------------------------------------------------------- comparisons
# Each reads nothing itself: the owner runtimes answer at once, the shared
# ones are awaited (and read in a batch), so the caller reads and hands over.


class RecordLedger:
    """Every job's record against the model, after every step (the owner and
    the shared model), and what that remembers from step to step: every id
    ever ingested (``touched``: purged ones must read as gone) and one that
    never was, each job's enqueue sequence and each settled job's record."""

    def __init__(self) -> None:
        self.touched: set[str] = {GHOST}
        self.settled: dict[str, JobRecord] = {}
        self.sequences: dict[str, int] = {}

    def compare(
        self, job_id: str, record: JobRecord | None, expected: SpecJob | None, *also: str
    ) -> bool:
        """Compare ``record`` (what ``read`` says of ``job_id``) with the
        model's ``expected`` job: the cargo, and the state, outcome, reason,
        recoveries, cancellation and the fields named ``also``. A settled job
        never changes again, and its enqueue sequence is stable for the
        job's life. Whether the job exists."""
        if expected is None:
            assert record is None, f"{job_id} should not exist: {record}"
            self.sequences.pop(job_id, None)
            return False
        assert record is not None, f"{job_id} is missing"
        spec = expected.spec
        assert (record.queue, record.lane, record.priority, record.payload) == (
            spec.queue, spec.lane, spec.priority, spec.payload())
        assert record.recovery == spec.recovery()
        assert (record.run_at, record.delay_ms) == (spec.run_at(), spec.delay_ms())
        assert record.retry == spec.retry()
        names = ("state", "outcome", "failure_reason", "recoveries", "cancellation_id", *also)
        actual = tuple(getattr(record, name) for name in names)
        wanted = tuple(getattr(expected, name) for name in names)
        assert actual == wanted, f"{job_id}: engine {actual} != model {wanted}"
        if record.state == "settled":
            before = self.settled.setdefault(job_id, record)
            assert record == before, f"settled {job_id} changed: {before} -> {record}"
        assert self.sequences.setdefault(job_id, record.sequence) == record.sequence
        return True

    def check_order(self, jobs: Mapping[str, SpecJob]) -> None:
        """Enqueue sequences follow ingest order."""
        by_model = sorted(jobs, key=lambda i: jobs[i].sequence)
        assert by_model == sorted(jobs, key=lambda i: self.sequences[i])


def compare_heads(
    heads: Mapping[str, JobRecord | None], pending: bool, jobs: Collection[SpecJob],
    waits: Callable[[Any], bool] = _never_waits, is_due: Callable[[Any], bool] = _always_due,
    expected_pending: bool | None = None,
) -> None:
    """Each queue's head (what read_queue_head said of it) and
    has_pending_work (``pending``) as the model's ``jobs`` have them (or as
    ``expected_pending`` says, for a model with more than jobs)."""
    for queue, head in heads.items():
        wanted_head = queue_head(jobs, queue, waits)
        assert (None if head is None else head.job_id) == (
            None if wanted_head is None else wanted_head.spec.job_id), queue
    assert pending == (has_pending(jobs, is_due) if expected_pending is None
                       else expected_pending)


def check_runs(runs: Sequence[tuple[str, object]], executions: Mapping[str, int]) -> None:
    """``runs``, every execution's (job_id, when: its started_at, or what else
    tells its claims apart): exactly the claims
    the model made (``executions``, per job) were executed, each once."""
    executed: dict[str, int] = {}
    for job_id, _started_at in runs:
        executed[job_id] = executed.get(job_id, 0) + 1
    assert executed == executions
    assert len(set(runs)) == len(runs), "a claim was executed twice"


# ----------------------------------------------------------------- plumbing


def model_examples(default: int) -> int:
    """Examples per owner kind or store: TICKWORK_MODEL_EXAMPLES if set (and
    not empty), else ``default``."""
    return int(os.environ.get("TICKWORK_MODEL_EXAMPLES") or default)


@contextlib.contextmanager
def harness_of(kind: str) -> Iterator[Harness]:
    """A fresh store of owner kind ``kind`` (the Durable Object stand-ins
    inside a fake Pyodide), closed afterwards."""
    with tempfile.TemporaryDirectory() as directory, contextlib.ExitStack() as stack:
        if kind != "sqlite3":
            from tests.support.fakes.pyodide_ffi import fake_pyodide

            stack.enter_context(fake_pyodide())
        built = Harness(kind, Path(directory))
        try:
            yield built
        finally:
            built.close()


Test = TypeVar("Test", bound=Callable[..., None])


def owner_model_test(
    specs: st.SearchStrategy[Spec], operations: st.SearchStrategy[Any], *, max_ops: int,
    examples: int,
) -> Callable[[Test], Test]:
    """A model test over every owner kind (``kind``), ``examples`` times:
    ``first``, one to six Ingests of ``specs``; ``ops``, 20 to ``max_ops``
    ``operations``; ``project``, with or without a projector."""

    def decorate(test: Test) -> Test:
        kinds = pytest.mark.parametrize("kind", OWNER_KINDS)
        examples_of = settings(max_examples=examples, deadline=None)
        drawn = given(
            first=st.lists(st.builds(Ingest, specs), min_size=1, max_size=6),
            ops=st.lists(operations, min_size=20, max_size=max_ops),
            project=st.booleans(),
        )
        return kinds(examples_of(drawn(test)))  # type: ignore[no-any-return]

    return decorate


def run_model(
    scenario: Callable[..., ModelScenario[Any, Any]], kind: str, ops: list[Any], *, project: bool
) -> None:
    """One example: ``ops`` through ``scenario(harness, project=project)``
    over a fresh store of owner kind ``kind``."""
    with harness_of(kind) as harness:
        asyncio.run(scenario(harness, project=project).run(ops))
