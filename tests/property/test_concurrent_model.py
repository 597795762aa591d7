"""Model-based test of the concurrent lane: random interleavings of ingest,
tick(), tick_concurrent(), releases of blocked executors, cancel (one job or
all of them), fail_lane, purge, read_settled, crash-and-rebuild and liveness
changes, run against a ConcurrentOwnerRuntime and checked step by step
against a small reference model of the spec.

Both slots can be in flight at once: an executor whose payload says "block"
(honours its signal) or "stubborn" (ignores it) parks on a gate until the
test releases it, so one tick() and one tick_concurrent() can sit in their
executors while other operations run. After every step the loop is spun
until each in-flight tick has finished or parked again, and then:

* every job's durable state, every queue head and has_pending_work match
  the model (which selects only queue heads across lanes, partitions ticks,
  cancellations, recoveries and refusals as the spec says);
* at most one job executes per slot, the executing jobs are exactly the
  model's in-flight ones, and no claim is ever executed twice;
* a settled job never changes again (one terminal outcome each), and every
  tick reports what the model says, including which claims it probed;
* read_settled, paged from the start with a small limit and read in one
  large page, is exactly the model's feed: the serial partition's settled
  jobs in enqueue order, up to the first one not yet settled.

Time is a counter (``clock``), so claim order is started_at order.
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

from tests.support import OWNER_KINDS, Harness
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
    QueueTransition,
    Recovery,
    TickResult,
)
from tickwork.jobs import MAX_SAFE_INTEGER
from tickwork.local import ConcurrentOwnerRuntime

# ----------------------------------------------------------------- the world

FAST = "fast"  # the concurrent lane
LANES = (FAST, "la", "lb")
QUEUES = ("qa", "qb", "qc", "qd")
JOB_IDS = tuple(f"j{index:02}" for index in range(12))
GHOST = "ghost"
PRIORITIES = (-1, 0, 1)

Slot: TypeAlias = Literal["serial", "concurrent"]
SLOTS: tuple[Slot, ...] = ("serial", "concurrent")
Action: TypeAlias = Literal["complete", "fail", "raise", "cancel", "block", "stubborn"]
BLOCKING = ("block", "stubborn")
Release: TypeAlias = Literal["completed", "failed", "raise", "unknown", "cancelled"]
RELEASES: tuple[Release, ...] = ("completed", "failed", "raise", "unknown", "cancelled")
Liveness: TypeAlias = Literal["dead", "alive", "raise"]
LIVENESS: tuple[Liveness, ...] = ("dead", "alive", "raise")
PROBE_ERROR = ConnectionError("liveness registry unreachable")
PROBE_REASON = f"ConnectionError: {PROBE_ERROR}"
EXECUTOR_REASON = "exec_reason"
RELEASE_REASON = "late_reason"
STOPPED = "stopped"

IMMEDIATE: dict[str, tuple[str, str | None]] = {
    "complete": ("completed", None),
    "fail": ("failed", EXECUTOR_REASON),
    "raise": ("failed", "execution_failed"),
    "cancel": ("cancelled", None),
}
RELEASED: dict[str, tuple[str, str | None]] = {
    "completed": ("completed", None),
    "failed": ("failed", RELEASE_REASON),
    "raise": ("failed", "execution_failed"),
    "unknown": ("outcome_unknown", None),
    "cancelled": ("cancelled", None),
}


def partition_of(lane: str) -> Slot:
    return "concurrent" if lane == FAST else "serial"


@dataclass(frozen=True)
class Spec:
    job_id: str
    queue: str
    lane: str
    priority: int
    action: Action
    max_recoveries: int | None

    def job(self) -> Job:
        recovery = None if self.max_recoveries is None else Recovery(self.max_recoveries)
        return Job(self.job_id, self.queue, self.lane, self.priority, {"do": self.action},
                   recovery)


# ---------------------------------------------------------------- operations


@dataclass(frozen=True)
class Ingest:
    spec: Spec


@dataclass(frozen=True)
class Tick:
    slot: Slot


@dataclass(frozen=True)
class ReleaseOp:
    slot: Slot
    result: Release


@dataclass(frozen=True)
class Cancel:
    """0: a job that never existed; 1/2: the serial/concurrent slot's job in
    flight (else any running job); otherwise an existing job by index."""

    target: int
    cancellation_id: str
    only_if_queued: bool


@dataclass(frozen=True)
class CancelMany:
    """Cancel every existing job, in job_id order, with one id: cancelled
    queued jobs then wait in both partitions at once."""

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
class ReadSettled:
    """One read_settled call: after 0 (pick 0), after everything (pick 1), or
    after the sequence of some job ever ingested (purged ones included)."""

    limit: int
    pick: int


@dataclass(frozen=True)
class Crash:
    """Kill the process (both slots' ticks and the DB handle); rebuild the
    runtime. With ``tick_first``, first tick each slot (up to 3 times) until
    it has a job in flight, so that claims are left behind in both
    partitions for the rebuilt runtime to recover."""

    liveness: Liveness
    probe_async: bool
    tick_first: bool


@dataclass(frozen=True)
class SetLiveness:
    liveness: Liveness
    probe_async: bool


Operation: TypeAlias = (
    Ingest | Tick | ReleaseOp | Cancel | CancelMany | FailLane | Purge | ReadSettled | Crash
    | SetLiveness
)

specs = st.builds(
    Spec,
    job_id=st.sampled_from(JOB_IDS),
    queue=st.sampled_from(QUEUES),
    lane=st.sampled_from((FAST, FAST, "la", "lb")),
    priority=st.sampled_from(PRIORITIES),
    action=st.sampled_from(("complete", "fail", "raise", "cancel", *BLOCKING, *BLOCKING)),
    max_recoveries=st.sampled_from((None, 0, 1)),
)
slots = st.sampled_from(SLOTS)
liveness = st.sampled_from(LIVENESS)


def weighted(*choices: tuple[int, st.SearchStrategy[Operation]]) -> st.SearchStrategy[Operation]:
    pool = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.sampled_from(pool).flatmap(lambda strategy: strategy)


operations = weighted(
    (8, st.builds(Tick, slots)),
    (6, st.builds(Ingest, specs)),
    (2, st.builds(ReleaseOp, slots, st.sampled_from(RELEASES))),
    (2, st.builds(Cancel, st.integers(0, 9), st.sampled_from(("c1", "c2")), st.booleans())),
    (1, st.builds(CancelMany, st.sampled_from(("c1", "c2")), st.booleans())),
    (1, st.builds(FailLane, st.sampled_from(LANES), st.sampled_from(("r1", "r2")))),
    (1, st.builds(Purge, st.sampled_from(QUEUES))),
    (1, st.builds(ReadSettled, st.sampled_from((1, 2, 3, 1000)), st.integers(0, 12))),
    (2, st.builds(Crash, liveness, st.booleans(), st.booleans())),
    (1, st.builds(SetLiveness, liveness, st.booleans())),
)


# --------------------------------------------------------------------- model


@dataclass
class ModelJob:
    spec: Spec
    sequence: int  # the engine's enqueue sequence (read back once, at ingest)
    state: Literal["queued", "running", "settled"] = "queued"
    outcome: str | None = None
    failure_reason: str | None = None
    recoveries: int = 0
    cancellation_id: str | None = None
    claimed_at: int = 0

    @property
    def partition(self) -> Slot:
        return partition_of(self.spec.lane)


def claim_order(job: ModelJob) -> tuple[int, int]:
    return job.claimed_at, job.sequence


@dataclass
class Flight:
    job_id: str
    honours_signal: bool
    finished: bool = False


@dataclass
class Model:
    jobs: dict[str, ModelJob] = field(default_factory=dict)
    next_claim: int = 0
    liveness: Liveness = "dead"
    flights: dict[Slot, Flight] = field(default_factory=dict)
    executions: dict[str, int] = field(default_factory=dict)
    probe_after: dict[Slot, tuple[int, int]] = field(default_factory=dict)

    def settle(self, job: ModelJob, outcome: str, reason: str | None = None) -> None:
        assert job.state != "settled"
        job.state, job.outcome, job.failure_reason = "settled", outcome, reason

    def in_queue(self, queue: str, state: str) -> list[ModelJob]:
        return [j for j in self.jobs.values() if j.spec.queue == queue and j.state == state]

    def queue_head(self, queue: str) -> ModelJob | None:
        """What read_queue_head reports: running first, then priority, then age."""
        running = self.in_queue(queue, "running")
        assert len(running) <= 1
        if running:
            return running[0]
        return min(self.in_queue(queue, "queued"),
                   key=lambda j: (-j.spec.priority, j.sequence), default=None)

    def runnable_head(self, queue: str) -> ModelJob | None:
        """The job a slot may run next in ``queue``, whatever its lane: none
        while a job runs; else the best queued job that is not cancelled."""
        if self.in_queue(queue, "running"):
            return None
        waiting = [j for j in self.in_queue(queue, "queued") if j.cancellation_id is None]
        return min(waiting, key=lambda j: (-j.spec.priority, j.sequence), default=None)

    def has_pending_work(self) -> bool:
        return any(job.state != "settled" for job in self.jobs.values())

    def feed(self, after: int, limit: int) -> list[str]:
        """read_settled: the serial partition in enqueue order after ``after``,
        ``limit`` at most, stopping before the first job not settled yet."""
        page = sorted((j for j in self.jobs.values()
                       if j.partition == "serial" and j.sequence > after),
                      key=lambda j: j.sequence)[:limit]
        settled: list[str] = []
        for job in page:
            if job.state != "settled":
                break
            settled.append(job.spec.job_id)
        return settled

    # -- operations
    def ingest(self, spec: Spec) -> str:
        existing = self.jobs.get(spec.job_id)
        if existing is None:
            self.jobs[spec.job_id] = ModelJob(spec, sequence=-1)
            return "queued"
        return "duplicate" if existing.spec == spec else "conflict"

    def flight_of(self, job_id: str) -> Flight | None:
        return next((f for f in self.flights.values() if f.job_id == job_id), None)

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
        flight = self.flight_of(job_id)
        if flight is not None and flight.honours_signal:
            self.settle(job, "cancelled")  # Failed("stopped") under a cancellation
            flight.finished = True
        return "recorded"

    def fail_lane(self, lane: str, reason: str) -> FailLaneResult:
        pending = [j for j in self.jobs.values() if j.spec.lane == lane and j.state != "settled"]
        running = sorted((j for j in pending if j.state == "running"), key=lambda j: j.sequence)
        queued = sorted((j for j in pending if j.state == "queued"), key=lambda j: j.sequence)
        refused = (running + queued)[:256]
        for job in refused:
            self.settle(job, "failed", reason)
            flight = self.flight_of(job.spec.job_id)
            if flight is not None and flight.honours_signal:
                flight.finished = True
        return FailLaneResult(len(refused), len(pending) > 256)

    def purge(self, queue: str) -> int:
        doomed = [i for i, j in self.jobs.items() if j.spec.queue == queue and j.state == "queued"]
        for job_id in doomed:
            del self.jobs[job_id]
        return len(doomed)

    def release(self, slot: Slot, result: Release) -> None:
        flight = self.flights[slot]
        flight.finished = True
        job = self.jobs[flight.job_id]
        if job.state == "settled":
            return  # refused while it ran: the committed failure is reported
        outcome, reason = RELEASED[result]
        if job.cancellation_id is not None and outcome != "completed":
            outcome, reason = "cancelled", None
        self.settle(job, outcome, reason)

    def tick(self, slot: Slot) -> tuple[TickResult | None, list[str]]:
        """(the tick's result, or None when it leaves an executor in flight;
        the claims it probed). Only ``slot``'s partition is looked at."""
        assert slot not in self.flights
        probed: list[str] = []
        unknown: ModelJob | None = None
        orphans = sorted((j for j in self.jobs.values()
                          if j.state == "running" and j.partition == slot), key=claim_order)
        if orphans:
            after = self.probe_after.get(slot)
            orphan = next((j for j in orphans if after is not None and claim_order(j) > after),
                          orphans[0])
            probed.append(orphan.spec.job_id)
            if self.liveness in ("raise", "alive"):
                self.probe_after[slot] = claim_order(orphan)
            if self.liveness == "raise":
                unknown = orphan
            elif self.liveness == "dead":
                return self.recover(orphan), probed
        return self.settle_or_claim(slot, unknown), probed

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

    def settle_or_claim(self, slot: Slot, unknown: ModelJob | None) -> TickResult | None:
        cancelled = [j for j in self.jobs.values() if j.partition == slot
                     and j.state == "queued" and j.cancellation_id is not None]
        if cancelled:
            job = min(cancelled, key=lambda j: j.sequence)
            self.settle(job, "cancelled")
            return TickResult("settled", job_id=job.spec.job_id, outcome="cancelled")
        ready = [j for j in self.jobs.values() if j.partition == slot and j.state == "queued"
                 and self.runnable_head(j.spec.queue) is j]
        if ready:
            job = min(ready, key=lambda j: (-j.spec.priority, j.sequence))
            job.state = "running"
            job.claimed_at = self.next_claim
            self.next_claim += 1
            job_id = job.spec.job_id
            self.executions[job_id] = self.executions.get(job_id, 0) + 1
            if job.spec.action in BLOCKING:
                self.flights[slot] = Flight(job_id, honours_signal=job.spec.action == "block")
                return None
            outcome, reason = IMMEDIATE[job.spec.action]
            self.settle(job, outcome, reason)
            return TickResult("settled", job_id=job_id, outcome=outcome,  # type: ignore[arg-type]
                              failure_reason=reason)
        if unknown is not None:
            return TickResult("liveness_unknown", job_id=unknown.spec.job_id, reason=PROBE_REASON)
        return TickResult("idle")

    def crash(self) -> None:
        self.flights.clear()
        self.probe_after.clear()


# ------------------------------------------------------------ the real side


class GatedExecutor:
    """Runs jobs by payload["do"]; blocking ones park on a gate per job.

    Violations are recorded, not raised: the runtime would take an assertion
    raised in here for the executor's own failure.
    """

    def __init__(self) -> None:
        self.claims: list[tuple[str, int | None]] = []
        self.active: dict[str, str] = {}  # job_id -> lane, while executing
        self.gates: dict[str, asyncio.Future[Release]] = {}
        self.signals: dict[str, AbortSignal] = {}
        self.honours: dict[str, bool] = {}
        self.violations: list[str] = []

    async def __call__(self, job: JobRecord, signal: AbortSignal) -> Any:
        claim = (job.job_id, job.started_at)
        if claim in self.claims:
            self.violations.append(f"claim {claim} executed twice")
        self.claims.append(claim)
        partition = partition_of(job.lane)
        if any(partition_of(lane) == partition for lane in self.active.values()):
            self.violations.append(f"two executions in the {partition} slot: "
                                   f"{sorted(self.active)} and {job.job_id}")
        self.active[job.job_id] = job.lane
        try:
            action = job.payload["do"]
            await asyncio.sleep(0)
            if action in IMMEDIATE:
                if action == "raise":
                    raise RuntimeError("executor exploded")
                outcome, reason = IMMEDIATE[action]
                return {"completed": Completed(), "failed": Failed(reason),
                        "cancelled": Cancelled()}[outcome]
            gate: asyncio.Future[Release] = asyncio.get_running_loop().create_future()
            self.gates[job.job_id], self.signals[job.job_id] = gate, signal
            self.honours[job.job_id] = action == "block"
            aborted: asyncio.Future[Any] = asyncio.ensure_future(signal.wait())
            try:
                if action == "block":
                    await asyncio.wait({gate, aborted}, return_when=asyncio.FIRST_COMPLETED)
                    if not gate.done():
                        return Failed(STOPPED)
                else:
                    await gate
            finally:
                aborted.cancel()
                del self.gates[job.job_id]
            return released(gate.result())
        finally:
            del self.active[job.job_id]

    def parked(self, job_id: str) -> bool:
        gate = self.gates.get(job_id)
        if gate is None or gate.done():
            return False
        return not (self.honours[job_id] and self.signals[job_id].aborted)


def released(result: Release) -> Any:
    if result == "completed":
        return Completed()
    if result == "failed":
        return Failed(RELEASE_REASON)
    if result == "raise":
        raise RuntimeError("released into an explosion")
    if result == "unknown":
        return OutcomeUnknown()
    return Cancelled()


class Scenario:
    def __init__(self, harness: Harness, *, project: bool) -> None:
        self.harness = harness
        self.project = project
        self.transitions: list[QueueTransition] = []
        self.model = Model()
        self.executor = GatedExecutor()
        self.now = 0
        self.probe_async = False
        self.probed: list[str] = []
        self.tasks: dict[Slot, asyncio.Task[TickResult]] = {}
        self.settled: dict[str, JobRecord] = {}
        self.sequences: dict[str, int] = {}  # every job ever ingested, purged ones too
        self.last_sequence = 0
        self.runtime = self.build()

    def clock(self) -> int:
        self.now += 1
        return self.now

    def build(self) -> ConcurrentOwnerRuntime:
        options: dict[str, Any] = {}
        if self.project:
            options["project"] = self.transitions.append
        return self.harness.concurrent_runtime(
            FAST, execute=self.executor, is_alive=self.probe, clock=self.clock, **options)

    def probe(self, job: JobRecord) -> bool | Awaitable[bool]:
        self.probed.append(job.job_id)
        if self.probe_async:
            return self._answer_later()
        return self._answer()

    def _answer(self) -> bool:
        if self.model.liveness == "raise":
            raise PROBE_ERROR
        return self.model.liveness == "alive"

    async def _answer_later(self) -> bool:
        await asyncio.sleep(0)
        return self._answer()

    def call(self, slot: Slot) -> Awaitable[TickResult]:
        return self.runtime.tick() if slot == "serial" else self.runtime.tick_concurrent()

    # -- driving the loop
    async def spin(self) -> None:
        """Let every in-flight tick run until it finishes or parks on its gate."""
        for _ in range(300):
            if all(task.done() or self.executor.parked(self.model.flights[slot].job_id)
                   for slot, task in self.tasks.items()):
                break
            await asyncio.sleep(0)
        else:
            raise AssertionError("an in-flight tick neither finished nor parked")
        for slot, task in list(self.tasks.items()):
            flight = self.model.flights[slot]
            if not flight.finished:
                assert not task.done(), f"{slot} tick finished early: {task.result()!r}"
                continue
            assert task.done(), f"the {slot} tick of {flight.job_id} should have finished"
            job = self.model.jobs[flight.job_id]
            assert job.state == "settled"
            expected = TickResult("settled", job_id=flight.job_id, outcome=job.outcome,  # type: ignore[arg-type]
                                  failure_reason=job.failure_reason)
            assert task.result() == expected, slot
            event(f"in-flight {slot} tick finished: {job.outcome}")
            del self.tasks[slot]
            del self.model.flights[slot]

    async def step(self, op: Operation) -> None:
        model = self.model
        settled_before = {i for i, job in model.jobs.items() if job.state == "settled"}
        self.transitions.clear()
        self.probed = []
        await self.apply(op)
        await self.spin()
        if not isinstance(op, Tick | Crash):
            assert self.probed == [], "only a tick may probe liveness"
        self.check()
        if self.project:
            newly_settled = sorted(i for i, job in model.jobs.items()
                                   if job.state == "settled" and i not in settled_before)
            projected = sorted(t.settled.job_id for t in self.transitions if t.settled)
            assert projected == newly_settled

    async def apply(self, op: Operation) -> None:
        model = self.model
        if isinstance(op, Ingest):
            await self.ingest(op.spec)
        elif isinstance(op, Tick):
            await self.tick(op.slot)
        elif isinstance(op, ReleaseOp):
            flight = model.flights.get(op.slot)
            if flight is None or flight.finished:
                return
            model.release(op.slot, op.result)
            self.executor.gates[flight.job_id].set_result(op.result)
        elif isinstance(op, Cancel):
            self.cancel(self.cancel_target(op.target), op.cancellation_id, op.only_if_queued)
        elif isinstance(op, CancelMany):
            for job_id in sorted(model.jobs):
                self.cancel(job_id, op.cancellation_id, op.only_if_queued)
        elif isinstance(op, FailLane):
            expected_refusal = model.fail_lane(op.lane, op.reason)
            assert self.runtime.fail_lane(op.lane, op.reason) == expected_refusal
        elif isinstance(op, Purge):
            expected_count = model.purge(op.queue)
            assert self.runtime.purge(op.queue) == expected_count
        elif isinstance(op, ReadSettled):
            if op.pick == 0 or not self.sequences:
                after = 0
            elif op.pick == 1:
                after = MAX_SAFE_INTEGER
            else:
                known = sorted(self.sequences.values())
                after = known[op.pick % len(known)]
            page = self.runtime.read_settled(op.limit, after_sequence=after)
            assert [r.job_id for r in page] == model.feed(after, op.limit)
            event(f"read_settled page of {min(len(page), 3)}+")
        elif isinstance(op, Crash):
            for slot in SLOTS if op.tick_first else ():
                for _ in range(3):
                    if slot in self.tasks:
                        break
                    await self.tick(slot)
                    self.check()
            event(f"crash with {len(self.tasks)} tick(s) in flight")
            tasks = list(self.tasks.values())
            if not tasks:
                tasks = [asyncio.create_task(asyncio.sleep(0))]
            await self.harness.crash(*tasks)
            assert all(task.done() for task in tasks)
            self.tasks.clear()
            model.crash()
            model.liveness, self.probe_async = op.liveness, op.probe_async
            self.runtime = self.build()
        else:
            assert isinstance(op, SetLiveness)
            model.liveness, self.probe_async = op.liveness, op.probe_async

    def cancel(self, job_id: str, cancellation_id: str, only_if_queued: bool) -> None:
        expected = self.model.cancel(job_id, cancellation_id, only_if_queued)
        result = self.runtime.cancel(job_id, cancellation_id, only_if_queued=only_if_queued)
        assert result == CancelResult(expected, job_id)  # type: ignore[arg-type]
        event(f"cancel: {expected}")

    async def ingest(self, spec: Spec) -> None:
        expected = self.model.ingest(spec)
        if expected == "conflict":
            return  # conflicts are the core model test's business
        assert self.runtime.ingest(spec.job()) == expected
        if expected == "queued":
            record = self.runtime.read(spec.job_id)
            assert record is not None
            # Enqueue order, never reused (not even after a purge).
            assert record.sequence > self.last_sequence
            self.last_sequence = record.sequence
            self.model.jobs[spec.job_id].sequence = record.sequence
            self.sequences[spec.job_id] = record.sequence

    async def tick(self, slot: Slot) -> None:
        self.probed = []
        if slot in self.tasks:
            assert await self.call(slot) == TickResult("busy")
            assert self.probed == []
            event(f"{slot} tick: busy")
            return
        expected, expected_probes = self.model.tick(slot)
        task = asyncio.ensure_future(self.call(slot))
        if expected is None:
            self.tasks[slot] = task
            event(f"{slot} tick: in flight (other slot busy: {len(self.tasks) == 2})")
        else:
            for _ in range(300):
                if task.done():
                    break
                await asyncio.sleep(0)
            assert task.done(), "a tick with nothing to wait for did not finish"
            assert task.result() == expected, slot
            event(f"{slot} tick: {expected.status}")
        await self.spin()
        assert self.probed == expected_probes, slot

    def cancel_target(self, target: int) -> str:
        jobs = self.model.jobs
        if target == 0 or not jobs:
            return GHOST
        if target <= 2:
            flight = self.model.flights.get(SLOTS[target - 1])
            if flight is not None:
                return flight.job_id
            running = sorted(i for i, job in jobs.items() if job.state == "running")
            if running:
                return running[0]
        ids = sorted(jobs)
        return ids[target % len(ids)]

    # -- the comparison
    def check(self) -> None:
        runtime, model = self.runtime, self.model
        assert self.executor.violations == []
        # The durable state, every row in one read.
        rows = self.harness.host_query(
            "SELECT job_id, state, outcome, failure_reason, recoveries, cancellation_id,"
            " sequence, queue, started_at, settled_at, claim_token FROM tickwork_jobs")
        stored = {row[0]: row for row in rows}
        assert sorted(stored) == sorted(model.jobs)
        for job_id, expected in model.jobs.items():
            row = stored[job_id]
            wanted = (job_id, expected.state, expected.outcome, expected.failure_reason,
                      expected.recoveries, expected.cancellation_id, expected.sequence)
            assert row[:7] == wanted, f"{job_id}: engine {row[:7]} != model {wanted}"
            if expected.state == "settled":
                # One terminal outcome: a settled job never changes again.
                before = self.settled.setdefault(job_id, row)
                assert row == before, f"settled {job_id} changed: {before} -> {row}"
        for job_id in sorted(set(self.sequences) - set(model.jobs) | {GHOST}):
            assert runtime.read(job_id) is None, f"{job_id} should not exist"
        running_queues = [row[7] for row in rows if row[1] == "running"]
        assert len(running_queues) == len(set(running_queues))
        for queue in QUEUES:
            head = runtime.read_queue_head(queue)
            wanted_head = model.queue_head(queue)
            assert (None if head is None else head.job_id) == (
                None if wanted_head is None else wanted_head.spec.job_id), queue
        assert runtime.has_pending_work() == model.has_pending_work()
        # At most one execution per slot, and exactly the model's in-flight ones.
        active = self.executor.active
        assert sorted(active) == sorted(f.job_id for f in model.flights.values())
        for slot in SLOTS:
            assert sum(partition_of(lane) == slot for lane in active.values()) <= 1
        executed: dict[str, int] = {}
        for job_id, _started_at in self.executor.claims:
            executed[job_id] = executed.get(job_id, 0) + 1
        assert executed == model.executions
        # The settled feed: paged from the start it is the model's whole feed
        # (a gap-free enqueue-order prefix of the serial partition).
        expected_feed = model.feed(0, len(model.jobs) + 1)
        whole = runtime.read_settled(1000)
        assert [r.job_id for r in whole] == expected_feed
        for record in whole:
            assert record.state == "settled" and record.lane != FAST
            assert record == runtime.read(record.job_id)
        paged: list[str] = []
        after = 0
        while page := runtime.read_settled(3, after_sequence=after):
            assert len(page) <= 3
            paged += [r.job_id for r in page]
            after = page[-1].sequence
        assert paged == expected_feed


async def run_scenario(harness: Harness, ops: list[Operation], *, project: bool) -> None:
    scenario = Scenario(harness, project=project)
    try:
        scenario.check()
        for op in ops:
            await scenario.step(op)
        # Drain: release whatever is parked, recover everything, tick both
        # slots until idle; the model must agree all the way down.
        await scenario.step(SetLiveness("dead", False))
        for _ in range(200):
            for slot in SLOTS:
                if slot in scenario.tasks:
                    await scenario.step(ReleaseOp(slot, "completed"))
                else:
                    await scenario.step(Tick(slot))
            if not scenario.tasks and not scenario.model.has_pending_work():
                break
        else:
            raise AssertionError("never drained")
        assert not scenario.runtime.has_pending_work()
        assert await scenario.runtime.tick() == TickResult("idle")
        assert await scenario.runtime.tick_concurrent() == TickResult("idle")
        serial_jobs = sorted((j for j in scenario.model.jobs.values()
                              if j.partition == "serial"), key=lambda j: j.sequence)
        feed = [r.job_id for r in scenario.runtime.read_settled(1000)]
        assert feed == [j.spec.job_id for j in serial_jobs]
    finally:
        for task in scenario.tasks.values():
            task.cancel()
        await asyncio.gather(*scenario.tasks.values(), return_exceptions=True)


#: Examples per owner kind. TICKWORK_MODEL_EXAMPLES sets it for this test and
#: test_owner_model.py alike; raise it for a deeper local search, e.g.
#: TICKWORK_MODEL_EXAMPLES=2000 pytest tests/property. The default keeps this
#: file near 20 s (the Durable Object stand-in is the slow part).
EXAMPLES = int(os.environ.get("TICKWORK_MODEL_EXAMPLES", "40"))


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


@dataclass(frozen=True)
class Backlog:
    """Many jobs at once, some cancelled: more runnable jobs than the
    concurrent slot's first look at the pick order covers (64)."""

    specs: tuple[Spec, ...]
    cancelled: frozenset[int]


def backlog_specs(
    lanes: tuple[str, ...], queues: tuple[str, ...], priorities: tuple[int, int]
) -> st.SearchStrategy[Spec]:
    return st.builds(Spec, job_id=st.just(""), queue=st.sampled_from(queues),
                     lane=st.sampled_from(lanes), priority=st.integers(*priorities),
                     action=st.just("complete"), max_recoveries=st.none())


SHARED_QUEUES = ("m0", "m1", "m2")
SERIAL_BACKLOG = backlog_specs(("la", "lb"), (*(f"s{i}" for i in range(10)), *SHARED_QUEUES),
                               (2, 4))
CONCURRENT_BACKLOG = backlog_specs((FAST,), (*(f"c{i}" for i in range(10)), *SHARED_QUEUES),
                                   (-3, 1))
# Serial jobs outrank the concurrent lane's and mostly sit in queues of their
# own, so the concurrent lane's heads often lie beyond the first 64 jobs in
# pick order and the full read of its lane has to find (and order) them.
backlogs = st.builds(
    Backlog,
    specs=st.lists(st.one_of(SERIAL_BACKLOG, SERIAL_BACKLOG, CONCURRENT_BACKLOG),
                   min_size=90, max_size=160).map(tuple),
    cancelled=st.frozensets(st.integers(0, 159), max_size=20),
)


async def drain_backlog(harness: Harness, backlog: Backlog, order: list[Slot]) -> None:
    model = Model()
    runtime = harness.concurrent_runtime(FAST, is_alive=lambda job: False)
    for index, spec in enumerate(backlog.specs):
        spec = Spec(f"b{index:03}", spec.queue, spec.lane, spec.priority, spec.action, None)
        assert runtime.ingest(spec.job()) == model.ingest(spec) == "queued"
        record = runtime.read(spec.job_id)
        assert record is not None
        model.jobs[spec.job_id].sequence = record.sequence
    for index in sorted(backlog.cancelled):
        if index < len(backlog.specs):
            job_id = f"b{index:03}"
            assert runtime.cancel(job_id, "x").status == model.cancel(job_id, "x", False)
    for slot in order * len(backlog.specs):
        if not model.has_pending_work():
            break
        expected, probed = model.tick(slot)
        assert expected is not None and probed == []
        assert await (runtime.tick() if slot == "serial" else runtime.tick_concurrent()) \
            == expected, slot
    assert not model.has_pending_work()
    assert [r.job_id for r in runtime.read_settled(1000)] == model.feed(0, 1000)


@settings(max_examples=max(EXAMPLES // 4, 5), deadline=None)
@given(backlog=backlogs,
       order=st.lists(slots, max_size=4).map(lambda order: [*order, "serial", "concurrent"]))
def test_deep_backlogs_pick_the_same_heads_as_the_model(
    backlog: Backlog, order: list[Slot]
) -> None:
    """Each slot's pick, over backlogs deeper than its first look (sqlite3)."""
    with harness_of("sqlite3") as harness:
        asyncio.run(drain_backlog(harness, backlog, order))


@pytest.mark.parametrize("kind", OWNER_KINDS)
@settings(max_examples=EXAMPLES, deadline=None)
@given(
    first=st.lists(st.builds(Ingest, specs), min_size=1, max_size=6),
    ops=st.lists(operations, min_size=20, max_size=60),
    project=st.booleans(),
)
def test_concurrent_runtime_matches_the_model(
    kind: str, first: list[Operation], ops: list[Operation], project: bool
) -> None:
    with harness_of(kind) as harness:
        asyncio.run(run_scenario(harness, first + ops, project=project))
