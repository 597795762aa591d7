"""Model-based test: random interleavings of every OwnerRuntime operation,
checked step by step against a small pure-Python reference model of the spec.

Each hypothesis example is a list of operations (ingest, conflicting and
identical replays, tick, release of a blocked executor, cancel, fail_lane,
purge, crash and rebuild, liveness changes, and a cancel/fail_lane/purge that
lands while a tick awaits its liveness probe) run in one event loop over a
fresh database of one owner kind, with or without a projector (which moves
every transition into an owner transaction). After every step the runtime's
durable view (every job, every queue head, has_pending_work, the raw table)
is compared with the model, and the invariants are checked: at most one
running job per queue, a settled job never changes again, no claim is
executed twice, every operation and tick reports what the model says, and
(with a projector) every settlement and head change was projected.

Concurrency is made deterministic: at most one tick is in flight (its
executor blocks on a gate until the test releases it, the signal aborts it,
or the "process" crashes), and after every step the loop is spun with
``asyncio.sleep(0)`` until that tick has either finished or is parked on its
gate again. Time is a counter (``clock``), so claim order is started_at order.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeAlias

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.support import IMMEDIATE_ACTIONS, OWNER_KINDS, Harness, immediate_result
from tickwork import (
    AbortSignal,
    Cancelled,
    CancelResult,
    Completed,
    Failed,
    FailLaneResult,
    IngestConflict,
    Job,
    JobRecord,
    OutcomeUnknown,
    OwnerRuntime,
    QueueTransition,
    Recovery,
    TickResult,
)
from tickwork.jobs import MAX_SAFE_INTEGER

# ----------------------------------------------------------------- the world

JOB_IDS = tuple(f"j{index:02}" for index in range(16))
GHOST = "ghost"  # never ingested
QUEUES = ("qa", "qb", "qc")
LANES = ("la", "lb")
PRIORITIES = (-MAX_SAFE_INTEGER, -1, 0, 1, MAX_SAFE_INTEGER)
# What the executor does, chosen by payload["do"]. "block" parks on a gate and
# honours its signal (returns Failed("stopped") when aborted); "stubborn"
# parks on a gate and ignores its signal.
Action: TypeAlias = Literal[
    "complete", "fail", "fail_reason", "raise", "unknown", "cancel", "invalid",
    "block", "stubborn",
]
ACTIONS: tuple[Action, ...] = (
    "complete", "fail", "fail_reason", "raise", "unknown", "cancel", "invalid",
    "block", "stubborn",
)
BLOCKING = ("block", "stubborn")
Release: TypeAlias = Literal["completed", "failed", "raise", "unknown", "cancelled", "invalid"]
RELEASES: tuple[Release, ...] = ("completed", "failed", "raise", "unknown", "cancelled", "invalid")
RaceKind: TypeAlias = Literal["cancel", "fail_lane", "purge"]
Liveness: TypeAlias = Literal["dead", "alive", "raise"]
LIVENESS: tuple[Liveness, ...] = ("dead", "alive", "raise")
PROBE_ERROR = ConnectionError("liveness registry unreachable")
PROBE_REASON = f"ConnectionError: {PROBE_ERROR}"
EXECUTOR_REASON = "exec_reason"
RELEASE_REASON = "late_reason"
STOPPED = "stopped"
RACE_CANCELLATION = "race"
RACE_REASON = "raced"


@dataclass(frozen=True)
class Spec:
    """A job as the test ingests it."""

    job_id: str
    queue: str
    lane: str
    priority: int
    action: Action
    max_recoveries: int | None

    def payload(self, *, reverse: bool = False) -> dict[str, Any]:
        items: list[tuple[str, Any]] = [("do", self.action), ("v", 1)]
        if self.action == "fail_reason":
            items.append(("reason", EXECUTOR_REASON))
        if reverse:
            items.reverse()
        return dict(items)

    def job(self, *, reverse: bool = False) -> Job:
        recovery = None if self.max_recoveries is None else Recovery(self.max_recoveries)
        return Job(self.job_id, self.queue, self.lane, self.priority,
                   self.payload(reverse=reverse), recovery)


# ---------------------------------------------------------------- operations


@dataclass(frozen=True)
class Ingest:
    spec: Spec


@dataclass(frozen=True)
class Replay:
    """Ingest an existing job again with identical cargo (payload keys reordered)."""

    index: int


@dataclass(frozen=True)
class Tick:
    pass


@dataclass(frozen=True)
class RacedTick:
    """A tick during whose liveness probe ``race`` hits the probed job: it is
    cancelled, its lane refused or its queue purged. The recovery must decide
    on the job as it is after the race, not as it was probed."""

    race: RaceKind


@dataclass(frozen=True)
class ReleaseOp:
    """Let the in-flight executor return ``result`` (no-op when nothing is in flight)."""

    result: Release


@dataclass(frozen=True)
class Cancel:
    """Cancel a job picked by ``target``: 0 a job that never existed, 1-2 the
    running job (if any), else an existing job by index."""

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
    """Kill the process (its in-flight tick and DB handle); rebuild the runtime.

    With ``tick_first``, first tick (up to 4 times) until a blocking job is
    in flight, so that it is left running with no live executor.
    """

    liveness: Liveness
    probe_async: bool
    tick_first: bool


@dataclass(frozen=True)
class CancelMany:
    """Cancel every existing job, in job_id order (or reversed), with one id."""

    cancellation_id: str
    only_if_queued: bool
    reverse: bool


@dataclass(frozen=True)
class SetLiveness:
    liveness: Liveness
    probe_async: bool


Operation: TypeAlias = (
    Ingest | Replay | Tick | RacedTick | ReleaseOp | Cancel | CancelMany | FailLane | Purge
    | Crash | SetLiveness
)

specs = st.builds(
    Spec,
    job_id=st.sampled_from(JOB_IDS),
    queue=st.sampled_from(QUEUES),
    lane=st.sampled_from(LANES),
    priority=st.sampled_from(PRIORITIES),
    # Blocking executors (released later with any result) about half the time:
    # they make the interesting interleavings.
    action=st.sampled_from((*ACTIONS, *BLOCKING, *BLOCKING, *BLOCKING)),
    max_recoveries=st.sampled_from((None, 0, 1, 2)),
)
liveness = st.sampled_from(LIVENESS)


def weighted(*choices: tuple[int, st.SearchStrategy[Operation]]) -> st.SearchStrategy[Operation]:
    """one_of with weights (one_of itself draws its distinct branches about evenly)."""
    pool = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.sampled_from(pool).flatmap(lambda strategy: strategy)


# Work-creating steps outweigh the destructive ones (purge, fail_lane, cancel
# everything), or most examples would spend their steps ticking an idle runtime.
operations = weighted(
    (4, st.just(Tick())),
    (6, st.builds(Ingest, specs)),
    (1, st.builds(Replay, st.integers(0, 7))),
    (2, st.builds(ReleaseOp, st.sampled_from(RELEASES))),
    (3, st.builds(Cancel, st.integers(0, 9), st.sampled_from(("c1", "c2")), st.booleans())),
    # Cancel whatever runs (the in-flight job first): the abort paths.
    (1, st.builds(Cancel, st.just(1), st.sampled_from(("c1", "c2")), st.just(False))),
    (1, st.builds(CancelMany, st.sampled_from(("c1", "c2")), st.booleans(), st.booleans())),
    (1, st.builds(FailLane, st.sampled_from(LANES), st.sampled_from(("r1", "r2")))),
    (1, st.builds(Purge, st.sampled_from(QUEUES))),
    (1, st.builds(Crash, liveness, st.booleans(), st.booleans())),
    (2, st.builds(Crash, liveness, st.booleans(), st.just(True))),
    (1, st.builds(SetLiveness, liveness, st.booleans())),
    (1, st.builds(RacedTick, st.sampled_from(("cancel", "fail_lane", "purge")))),
)


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

    def queue_is(self, queue: str) -> bool:
        return self.spec.queue == queue


def claim_order(job: ModelJob) -> tuple[int, int]:
    """The engine's (started_at, sequence) order: the clock is a counter."""
    return job.claimed_at, job.sequence


@dataclass
class ModelInFlight:
    job_id: str
    honours_signal: bool
    finished: bool = False  # the tick should have returned by the end of this step


@dataclass
class Model:
    """The spec, as plain Python over a dict of jobs."""

    jobs: dict[str, ModelJob] = field(default_factory=dict)
    next_sequence: int = 0
    next_claim: int = 0
    liveness: Liveness = "dead"
    in_flight: ModelInFlight | None = None
    executions: dict[str, int] = field(default_factory=dict)  # per job_id, all incarnations
    probe_after: tuple[int, int] | None = None  # claim order of the last spared orphan

    # -- helpers
    def settle(self, job: ModelJob, outcome: str, reason: str | None = None) -> None:
        assert job.state != "settled"
        job.state, job.outcome, job.failure_reason = "settled", outcome, reason

    def queue_head(self, queue: str) -> ModelJob | None:
        running = [j for j in self.jobs.values() if j.queue_is(queue) and j.state == "running"]
        assert len(running) <= 1
        if running:
            return running[0]
        waiting = [j for j in self.jobs.values() if j.queue_is(queue) and j.state == "queued"]
        return min(waiting, key=lambda j: (-j.spec.priority, j.sequence), default=None)

    def has_pending_work(self) -> bool:
        return any(job.state != "settled" for job in self.jobs.values())

    # -- operations
    def ingest(self, spec: Spec) -> str | tuple[str, ...]:
        existing = self.jobs.get(spec.job_id)
        if existing is None:
            self.jobs[spec.job_id] = ModelJob(spec, self.next_sequence)
            self.next_sequence += 1
            return "queued"
        old, differences = existing.spec, []
        if spec.queue != old.queue:
            differences.append("queue")
        if spec.lane != old.lane:
            differences.append("lane")
        if spec.priority != old.priority:
            differences.append("priority")
        if spec.payload() != old.payload():
            differences.append("payload")
        if spec.max_recoveries != old.max_recoveries:
            differences.append("recovery")
        return tuple(differences) if differences else "duplicate"

    def cancel(self, job_id: str, cancellation_id: str, only_if_queued: bool) -> str:
        job = self.jobs.get(job_id)
        if job is None:
            return "not_found"
        if job.cancellation_id is not None:
            return "replayed" if job.cancellation_id == cancellation_id else "conflict"
        if job.state == "settled":
            return "already_settled"
        if only_if_queued and job.state == "running":
            return "refused"
        job.cancellation_id = cancellation_id
        flight = self.in_flight
        if flight is not None and flight.job_id == job_id and flight.honours_signal:
            # Aborted: the executor returns Failed("stopped"), which a
            # cancellation turns into "cancelled".
            self.settle(job, "cancelled")
            flight.finished = True
        return "recorded"

    def fail_lane(self, lane: str, reason: str) -> FailLaneResult:
        pending = [j for j in self.jobs.values() if j.spec.lane == lane and j.state != "settled"]
        running = sorted((j for j in pending if j.state == "running"), key=lambda j: j.sequence)
        queued = sorted((j for j in pending if j.state == "queued"), key=lambda j: j.sequence)
        refused = (running + queued)[:256]
        for job in refused:
            self.settle(job, "failed", reason)
            flight = self.in_flight
            if flight is not None and flight.job_id == job.spec.job_id and flight.honours_signal:
                flight.finished = True  # it stops and reports the committed refusal
        more = len(running) + len(queued) > 256
        return FailLaneResult(len(refused), more)

    def purge(self, queue: str) -> int:
        doomed = [i for i, j in self.jobs.items() if j.queue_is(queue) and j.state == "queued"]
        for job_id in doomed:
            del self.jobs[job_id]
        return len(doomed)

    def release(self, result: Release) -> None:
        flight = self.in_flight
        assert flight is not None
        flight.finished = True
        job = self.jobs[flight.job_id]
        if job.state == "settled":
            return  # refused while it ran: the committed failure is reported
        outcome, reason = {
            "completed": ("completed", None),
            "failed": ("failed", RELEASE_REASON),
            "raise": ("failed", "execution_failed"),
            "unknown": ("outcome_unknown", None),
            "cancelled": ("cancelled", None),
            "invalid": ("failed", "invalid_outcome"),
        }[result]
        if job.cancellation_id is not None and outcome != "completed":
            outcome, reason = "cancelled", None
        self.settle(job, outcome, reason)

    def race(self, kind: RaceKind, job: ModelJob) -> object:
        """What ``kind`` does to ``job`` (and returns) when it lands mid-probe."""
        if kind == "cancel":
            return self.cancel(job.spec.job_id, RACE_CANCELLATION, False)
        if kind == "fail_lane":
            return self.fail_lane(job.spec.lane, RACE_REASON)
        return self.purge(job.spec.queue)

    def tick(
        self, race: RaceKind | None = None
    ) -> tuple[TickResult | None, list[str], object]:
        """(the tick's result, or None when it leaves an executor in flight; the
        jobs it probes; what ``race`` returned, if it ran)."""
        assert self.in_flight is None
        probed: list[str] = []
        raced: object = None
        unknown: ModelJob | None = None
        orphans = sorted((job for job in self.jobs.values() if job.state == "running"),
                         key=claim_order)
        if orphans:
            # Recovery first (nothing runs here between ticks): the first claim
            # after the last one found alive or unjudgeable, wrapping round.
            after = self.probe_after
            orphan = next((job for job in orphans
                           if after is not None and claim_order(job) > after), orphans[0])
            probed.append(orphan.spec.job_id)
            if race is not None:
                raced = self.race(race, orphan)
            if self.liveness in ("raise", "alive"):
                self.probe_after = claim_order(orphan)
            if self.liveness == "raise":
                unknown = orphan
            elif self.liveness == "dead" and orphan.state == "running":
                return self.recover(orphan), probed, raced
        return self.settle_or_claim(unknown), probed, raced

    def recover(self, orphan: ModelJob) -> TickResult:
        job_id = orphan.spec.job_id
        if orphan.cancellation_id is not None:
            self.settle(orphan, "cancelled")
            return TickResult("settled", job_id=job_id, outcome="cancelled")
        budget = orphan.spec.max_recoveries
        if budget is not None and orphan.recoveries < budget:
            orphan.state = "queued"
            orphan.recoveries += 1
            return TickResult("requeued", job_id=job_id)
        self.settle(orphan, "interrupted")
        return TickResult("settled", job_id=job_id, outcome="interrupted")

    def settle_or_claim(self, unknown: ModelJob | None) -> TickResult | None:
        """Settle the oldest cancelled waiting job, else claim and run the best
        ready queue head; None when its executor is left in flight."""
        cancelled = [j for j in self.jobs.values()
                     if j.state == "queued" and j.cancellation_id is not None]
        if cancelled:
            job = min(cancelled, key=lambda j: j.sequence)
            self.settle(job, "cancelled")
            return TickResult("settled", job_id=job.spec.job_id, outcome="cancelled")
        busy = {j.spec.queue for j in self.jobs.values() if j.state == "running"}
        ready = [j for j in self.jobs.values()
                 if j.state == "queued" and j.cancellation_id is None and j.spec.queue not in busy]
        if ready:
            job = min(ready, key=lambda j: (-j.spec.priority, j.sequence))
            job.state = "running"
            job.claimed_at = self.next_claim
            self.next_claim += 1
            job_id = job.spec.job_id
            self.executions[job_id] = self.executions.get(job_id, 0) + 1
            action = job.spec.action
            if action in BLOCKING:
                self.in_flight = ModelInFlight(job_id, honours_signal=action == "block")
                return None
            outcome, reason = {
                "complete": ("completed", None),
                "fail": ("failed", None),
                "fail_reason": ("failed", EXECUTOR_REASON),
                "raise": ("failed", "execution_failed"),
                "unknown": ("outcome_unknown", None),
                "cancel": ("cancelled", None),
                "invalid": ("failed", "invalid_outcome"),
            }[action]
            self.settle(job, outcome, reason)
            return TickResult("settled", job_id=job_id, outcome=outcome,  # type: ignore[arg-type]
                              failure_reason=reason)
        if unknown is not None:
            return TickResult("liveness_unknown", job_id=unknown.spec.job_id,
                              reason=PROBE_REASON)
        return TickResult("idle")

    def crash(self) -> None:
        # Whatever was in flight keeps its durable state (running, or already
        # settled by a refusal); nobody executes it any more. The rebuilt
        # runtime starts probing from the oldest claim again.
        self.in_flight = None
        self.probe_after = None


# ------------------------------------------------------------ the real side


class GatedExecutor:
    """Deterministic executor driven by payload["do"]; records every claim it runs."""

    def __init__(self) -> None:
        self.claims: list[tuple[str, int | None]] = []  # (job_id, started_at)
        self.waiting: str | None = None  # job parked on its gate
        self.gate: asyncio.Future[Release] | None = None
        self.signal: AbortSignal | None = None
        self.honours = False

    async def __call__(self, job: JobRecord, signal: AbortSignal) -> Any:
        claim = (job.job_id, job.started_at)
        assert claim not in self.claims, f"claim {claim} executed twice"
        self.claims.append(claim)
        action = job.payload["do"]
        await asyncio.sleep(0)
        if action in IMMEDIATE_ACTIONS:
            return immediate_result(action, job.payload)
        assert action in BLOCKING, action
        gate: asyncio.Future[Release] = asyncio.get_running_loop().create_future()
        self.gate, self.signal, self.honours = gate, signal, action == "block"
        self.waiting = job.job_id
        aborted: asyncio.Future[Any] = asyncio.ensure_future(signal.wait())
        try:
            if self.honours:
                either: set[asyncio.Future[Any]] = {gate, aborted}
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                if not gate.done():
                    return Failed(STOPPED)
            else:
                await gate
        finally:
            aborted.cancel()
            self.waiting = None
            self.gate = None
        return released(gate.result())

    def parked(self, job_id: str) -> bool:
        """The executor of ``job_id`` is waiting and nothing will wake it by itself."""
        if self.waiting != job_id or self.gate is None or self.gate.done():
            return False
        return not (self.honours and self.signal is not None and self.signal.aborted)


def released(result: Release) -> Any:
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


class Scenario:
    """Runs operations on the real runtime and on the model, comparing after each."""

    def __init__(self, harness: Harness, *, project: bool) -> None:
        self.harness = harness
        self.project = project
        self.transitions: list[QueueTransition] = []
        self.model = Model()
        self.executor = GatedExecutor()
        self.now = 0
        self.probe_async = False
        self.probed: list[str] = []
        # A race to run inside the next liveness probe, with what it must return.
        self.race: tuple[RaceKind, object] | None = None
        self.raced: tuple[object, object] | None = None  # (what it returned, expected)
        self.task: asyncio.Task[TickResult] | None = None
        self.settled: dict[str, JobRecord] = {}
        self.sequences: dict[str, int] = {}
        self.touched: set[str] = {GHOST}
        self.runtime = self.build()

    def clock(self) -> int:
        self.now += 1
        return self.now

    def build(self) -> OwnerRuntime:
        options: dict[str, Any] = {}
        if self.project:
            options["project"] = self.transitions.append
        return self.harness.runtime(
            execute=self.executor, is_alive=self.probe, clock=self.clock, **options)

    def probe(self, job: JobRecord) -> bool | Awaitable[bool]:
        self.probed.append(job.job_id)
        if self.probe_async:
            return self._answer_later(job)
        return self._answer(job)

    def _answer(self, job: JobRecord) -> bool:
        if self.race is not None:
            (kind, expected), self.race = self.race, None
            if kind == "cancel":
                actual: object = self.runtime.cancel(job.job_id, RACE_CANCELLATION)
                expected = CancelResult(expected, job.job_id)  # type: ignore[arg-type]
            elif kind == "fail_lane":
                actual = self.runtime.fail_lane(job.lane, RACE_REASON)
            else:
                actual = self.runtime.purge(job.queue)
            # Compared after the tick: an assertion raised in here would be
            # taken for the probe's own failure.
            self.raced = (actual, expected)
        if self.model.liveness == "raise":
            raise PROBE_ERROR
        return self.model.liveness == "alive"

    async def _answer_later(self, job: JobRecord) -> bool:
        await asyncio.sleep(0)
        return self._answer(job)

    # -- driving the loop
    async def spin(self) -> None:
        """Let the in-flight tick run until it finishes or parks on its gate."""
        flight = self.model.in_flight
        if self.task is None:
            assert flight is None
            return
        assert flight is not None
        for _ in range(200):
            if self.task.done() or self.executor.parked(flight.job_id):
                break
            await asyncio.sleep(0)
        else:
            raise AssertionError("the in-flight tick neither finished nor parked")
        if not flight.finished:
            assert not self.task.done(), f"tick finished early: {self.task.result()!r}"
            return
        assert self.task.done(), f"the tick of {flight.job_id} should have finished"
        event(f"in-flight tick finished: {self.model.jobs[flight.job_id].outcome}")
        job = self.model.jobs[flight.job_id]
        assert job.state == "settled"
        expected = TickResult("settled", job_id=flight.job_id, outcome=job.outcome,  # type: ignore[arg-type]
                              failure_reason=job.failure_reason)
        assert self.task.result() == expected
        self.task = None
        self.model.in_flight = None

    # -- operations
    async def step(self, op: Operation) -> None:
        """Apply ``op``, then compare everything (and the projections it made)."""
        model = self.model
        settled_before = {i for i, job in model.jobs.items() if job.state == "settled"}
        heads_before = {queue: self.model_head(queue) for queue in QUEUES}
        self.transitions.clear()
        await self.apply(op)
        self.check()
        if not self.project:
            return
        # Every job settled by this step was handed to the projector exactly
        # once, and every queue whose head changed was projected; the last
        # projection of a queue shows its head as it now stands.
        newly_settled = sorted(i for i, job in model.jobs.items()
                               if job.state == "settled" and i not in settled_before)
        projected_settled = sorted(t.settled.job_id for t in self.transitions if t.settled)
        assert projected_settled == newly_settled
        last = {transition.queue: transition.head for transition in self.transitions}
        for queue in QUEUES:
            if self.model_head(queue) != heads_before[queue]:
                assert queue in last, f"the head of {queue} changed unprojected"
        for queue, head in last.items():
            assert head == self.runtime.read_queue_head(queue), queue
        for transition in self.transitions:
            if transition.settled is not None:
                assert transition.settled.queue == transition.queue
                assert transition.settled == self.runtime.read(transition.settled.job_id)

    def model_head(self, queue: str) -> tuple[str, str] | None:
        head = self.model.queue_head(queue)
        return None if head is None else (head.spec.job_id, head.state)

    async def apply(self, op: Operation) -> None:
        self.probed = []
        model = self.model
        if isinstance(op, Ingest):
            self.ingest(op.spec.job(), model.ingest(op.spec))
        elif isinstance(op, Replay):
            if not model.jobs:
                return
            existing = sorted(model.jobs)[op.index % len(model.jobs)]
            spec = model.jobs[existing].spec
            expected = model.ingest(spec)
            assert expected == "duplicate"
            self.ingest(spec.job(reverse=True), expected)
        elif isinstance(op, Tick):
            await self.tick()
        elif isinstance(op, RacedTick):
            await self.tick(op.race)
        elif isinstance(op, ReleaseOp):
            if model.in_flight is None:
                return
            assert self.executor.gate is not None
            model.release(op.result)
            self.executor.gate.set_result(op.result)
        elif isinstance(op, Cancel):
            await self.cancel(self.cancel_target(op.target), op.cancellation_id,
                              op.only_if_queued)
        elif isinstance(op, CancelMany):
            for job_id in sorted(model.jobs, reverse=op.reverse):
                await self.cancel(job_id, op.cancellation_id, op.only_if_queued)
        elif isinstance(op, FailLane):
            expected_refusal = model.fail_lane(op.lane, op.reason)
            assert self.runtime.fail_lane(op.lane, op.reason) == expected_refusal
        elif isinstance(op, Purge):
            expected_count = model.purge(op.queue)
            assert self.runtime.purge(op.queue) == expected_count
        elif isinstance(op, Crash):
            for _ in range(4 if op.tick_first else 0):
                if self.task is not None:
                    break
                await self.tick()
                self.check()
            event(f"crash with a tick in flight: {self.task is not None}")
            # With nothing in flight the process dies idle (a finished task).
            dying: asyncio.Task[Any] = self.task or asyncio.create_task(asyncio.sleep(0))
            await self.harness.crash(dying)
            if self.task is not None:
                assert self.task.done()
            self.task = None
            model.crash()
            model.liveness, self.probe_async = op.liveness, op.probe_async
            self.runtime = self.build()
        else:
            assert isinstance(op, SetLiveness)
            model.liveness, self.probe_async = op.liveness, op.probe_async
        await self.spin()
        if not isinstance(op, Tick | RacedTick | Crash):
            assert self.probed == [], "only a tick may probe liveness"

    async def cancel(self, job_id: str, cancellation_id: str, only_if_queued: bool) -> None:
        expected = self.model.cancel(job_id, cancellation_id, only_if_queued)
        result = self.runtime.cancel(job_id, cancellation_id, only_if_queued=only_if_queued)
        assert result == CancelResult(expected, job_id)  # type: ignore[arg-type]
        event(f"cancel: {expected}")
        await self.spin()  # an aborted executor that honours its signal stops now

    def cancel_target(self, target: int) -> str:
        jobs = self.model.jobs
        if target == 0 or not jobs:
            return GHOST
        if target <= 2:
            if self.model.in_flight is not None:
                return self.model.in_flight.job_id
            running = sorted(i for i, job in jobs.items() if job.state == "running")
            if running:
                return running[0]
        ids = sorted(jobs)
        return ids[target % len(ids)]

    def ingest(self, job: Job, expected: str | tuple[str, ...]) -> None:
        if isinstance(expected, tuple):
            with pytest.raises(IngestConflict) as caught:
                self.runtime.ingest(job)
            assert caught.value.job_id == job.job_id
            assert caught.value.fields == expected
        else:
            assert self.runtime.ingest(job) == expected

    async def tick(self, race: RaceKind | None = None) -> None:
        self.probed = []
        if self.task is not None:
            assert await self.runtime.tick() == TickResult("busy")
            assert self.probed == []
            return
        orphans = sum(job.state == "running" for job in self.model.jobs.values())
        expected, expected_probes, raced = self.model.tick(race)
        if race is not None and expected_probes:
            self.race = (race, raced)
            event(f"race during the probe: {race}")
        if orphans:
            event(f"tick over {min(orphans, 2)}+ orphan(s), liveness {self.model.liveness}")
        self.task = asyncio.create_task(self.runtime.tick())
        if expected is None:
            await self.spin()  # parks on the gate
            assert self.task is not None and not self.task.done()
        else:
            for _ in range(200):
                if self.task.done():
                    break
                await asyncio.sleep(0)
            assert self.task.done(), "a tick with nothing to wait for did not finish"
            result = self.task.result()
            self.task = None
            assert result == expected
            event(f"tick: {result.status} {result.outcome or ''}".strip())
        assert self.probed == expected_probes
        assert self.race is None, "the race never ran"
        if self.raced is not None:
            actual, wanted = self.raced
            self.raced = None
            assert actual == wanted, f"{race} during the probe: {actual} != {wanted}"

    # -- the comparison
    def check(self) -> None:
        runtime, model = self.runtime, self.model
        running_per_queue: dict[str, int] = {}
        # Every id ever ingested (purged ones must read as gone) and one that
        # never was; the raw-table check below covers the rest.
        self.touched.update(model.jobs)
        for job_id in sorted(self.touched):
            record = runtime.read(job_id)
            expected = model.jobs.get(job_id)
            if expected is None:
                assert record is None, f"{job_id} should not exist: {record}"
                self.sequences.pop(job_id, None)
                continue
            assert record is not None, f"{job_id} is missing"
            spec = expected.spec
            assert (record.queue, record.lane, record.priority, record.payload) == (
                spec.queue, spec.lane, spec.priority, spec.payload())
            assert record.recovery == (
                None if spec.max_recoveries is None else Recovery(spec.max_recoveries))
            actual = (record.state, record.outcome, record.failure_reason, record.recoveries,
                      record.cancellation_id)
            wanted = (expected.state, expected.outcome, expected.failure_reason,
                      expected.recoveries, expected.cancellation_id)
            assert actual == wanted, f"{job_id}: engine {actual} != model {wanted}"
            # Record consistency.
            assert (record.outcome is not None) == (record.state == "settled")
            assert (record.settled_at is not None) == (record.state == "settled")
            assert record.failure_reason is None or record.outcome == "failed"
            assert (record.started_at is None) == (record.state == "queued") or (
                record.state == "settled")
            if record.state == "running":
                running_per_queue[record.queue] = running_per_queue.get(record.queue, 0) + 1
            # A settled job never changes again.
            if record.state == "settled":
                before = self.settled.setdefault(job_id, record)
                assert record == before, f"settled {job_id} changed: {before} -> {record}"
            # Enqueue sequence is stable for the job's life.
            assert self.sequences.setdefault(job_id, record.sequence) == record.sequence
        assert all(count <= 1 for count in running_per_queue.values()), running_per_queue
        # Enqueue sequences follow ingest order.
        by_model = sorted(model.jobs, key=lambda i: model.jobs[i].sequence)
        assert by_model == sorted(model.jobs, key=lambda i: self.sequences[i])
        for queue in QUEUES:
            head = runtime.read_queue_head(queue)
            wanted_head = model.queue_head(queue)
            assert (None if head is None else head.job_id) == (
                None if wanted_head is None else wanted_head.spec.job_id), queue
        assert runtime.has_pending_work() == model.has_pending_work()
        # The raw table: nothing beyond the model, one running job per queue.
        rows = self.harness.host_query("SELECT job_id, state, queue FROM tickwork_jobs")
        assert sorted(row[0] for row in rows) == sorted(model.jobs)
        running_queues = [row[2] for row in rows if row[1] == "running"]
        assert len(running_queues) == len(set(running_queues))
        # Executions: every claim ran at most once, and exactly the claims the
        # model made were executed.
        executed: dict[str, int] = {}
        for job_id, _started_at in self.executor.claims:
            executed[job_id] = executed.get(job_id, 0) + 1
        assert executed == model.executions
        assert len(set(self.executor.claims)) == len(self.executor.claims)


async def run_scenario(harness: Harness, ops: list[Operation], *, project: bool) -> None:
    scenario = Scenario(harness, project=project)
    try:
        scenario.check()
        for op in ops:
            await scenario.step(op)
        # Finally drain: release whatever is parked, recover everything, and
        # tick until idle; the model must agree all the way down.
        await scenario.step(SetLiveness("dead", False))
        for _ in range(100):
            if scenario.task is not None:
                await scenario.step(ReleaseOp("completed"))
            else:
                await scenario.step(Tick())
            if scenario.task is None and not scenario.model.has_pending_work():
                break
        else:
            raise AssertionError("never drained")
        assert not scenario.runtime.has_pending_work()
        assert await scenario.runtime.tick() == TickResult("idle")
    finally:
        if scenario.task is not None:
            scenario.task.cancel()
            await asyncio.gather(scenario.task, return_exceptions=True)


#: Examples per owner kind; raise it for a deeper local search, e.g.
#: TICKWORK_MODEL_EXAMPLES=2000 pytest tests/property
EXAMPLES = int(os.environ.get("TICKWORK_MODEL_EXAMPLES", "60"))


@contextlib.contextmanager
def harness_of(kind: str) -> Iterator[Harness]:
    with tempfile.TemporaryDirectory() as directory:
        if kind == "sqlite3":
            built = Harness(kind, Path(directory))
            try:
                yield built
            finally:
                built.close()
            return
        from tests.fakes.pyodide_ffi import fake_pyodide

        with fake_pyodide():
            built = Harness(kind, Path(directory))
            try:
                yield built
            finally:
                built.close()


@pytest.mark.parametrize("kind", OWNER_KINDS)
@settings(max_examples=EXAMPLES, deadline=None)
@given(
    first=st.lists(st.builds(Ingest, specs), min_size=1, max_size=6),
    ops=st.lists(operations, min_size=20, max_size=50),
    project=st.booleans(),
)
def test_runtime_matches_the_model(
    kind: str, first: list[Operation], ops: list[Operation], project: bool
) -> None:
    """With ``project``, the runtime has a projector, which moves every
    transition into an owner transaction (a different write path)."""
    with harness_of(kind) as harness:
        asyncio.run(run_scenario(harness, first + ops, project=project))
