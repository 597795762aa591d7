"""Model-based test: random interleavings of every OwnerRuntime operation,
checked step by step against a small pure-Python reference model of the spec.

Each hypothesis example is a list of operations (ingest, some of jobs due
later, conflicting and identical replays, the clock moving on, tick, release
of a blocked executor, cancel, fail_lane, purge, crash and rebuild, liveness
changes, and a cancel/fail_lane/purge that lands while a tick awaits its
liveness probe) run in one event loop over a fresh database of one owner kind,
with or without a projector (which moves every transition into an owner
transaction). After every step the runtime's durable view (every job, every
queue head, has_pending_work, the raw table) is compared with the model, and
the invariants are checked: at most one running job per queue, a settled job
never changes again, no claim is executed twice, every operation and tick
reports what the model says, and (with a projector) every settlement and head
change was projected.

Concurrency is made deterministic: at most one tick is in flight (its executor
blocks on a gate until the test releases it, the signal aborts it, or the
"process" crashes), and after every step the loop is spun with
``asyncio.sleep(0)`` until that tick has either finished or is parked on its
gate again. Time is a counter (``clock``), so claim order is started_at order.
The machinery shared with test_concurrent_model.py is in model_support.py.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias

import pytest
from hypothesis import event
from hypothesis import strategies as st

from tests.support import IMMEDIATE_ACTIONS, Harness, immediate_result
from tests.support.models import (
    BLOCKING,
    EPOCH_MS,
    IMMEDIATE_OUTCOMES,
    ORIGIN_MS,
    RELEASES,
    SERIAL,
    Cancel,
    Crash,
    FailLane,
    GatedExecutor,
    Ingest,
    Model,
    ModelJob,
    ModelScenario,
    Purge,
    RecordLedger,
    Release,
    ReplaySpec,
    SetLiveness,
    Spec,
    ingest_answer,
    liveness,
    model_examples,
    owner_model_test,
    redrive_refusal,
    run_model,
    weighted,
)
from tickwork import (
    CancelResult,
    IngestConflict,
    Job,
    JobRecord,
    OwnerRuntime,
    RedriveResult,
    Schedule,
    ScheduledJob,
    TickResult,
)
from tickwork.model.cron import slot_text
from tickwork.model.jobs import MAX_SAFE_INTEGER

# ----------------------------------------------------------------- the world

JOB_IDS = tuple(f"j{index:02}" for index in range(16))
QUEUES = ("qa", "qb", "qc")
LANES = ("la", "lb")
PRIORITIES = (-MAX_SAFE_INTEGER, -1, 0, 1, MAX_SAFE_INTEGER)
# What the executor does, chosen by payload["do"]: IMMEDIATE_ACTIONS (run by
# tests.support.immediate_result; model_support's IMMEDIATE_OUTCOMES says what
# each settles as) or one of BLOCKING. Releases: any of model_support's RELEASES.
ACTIONS: tuple[str, ...] = (*IMMEDIATE_OUTCOMES, *BLOCKING)
RaceKind: TypeAlias = Literal["cancel", "fail_lane", "purge"]
RACE_CANCELLATION = "race"
SCHEDULES = ("s1", "s2")
RACE_REASON = "raced"


def ticker_of(lane: str) -> str:
    """An OwnerRuntime has one ticker: every lane runs in tick()."""
    return SERIAL


# ---------------------------------------------------------------- operations
# Besides model_support's Ingest, Cancel, FailLane, Purge, Crash, SetLiveness.


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
class Advance:
    """The clock moves on by ``epochs`` (see tests.support.models): waiting
    jobs whose time has come are due."""

    epochs: int


@dataclass(frozen=True)
class Redrive:
    """Redrive the job ``index`` (in job_id order; past the end: one that
    never existed) with ``redrive_id``."""

    index: int
    redrive_id: str


@dataclass(frozen=True)
class PutSchedule:
    """Create or replace schedule ``name``: a slot every epoch (at the
    epoch's start), ``catch_up`` missed slots at most, its jobs' payload
    version ``variant``."""

    name: str
    catch_up: int
    variant: int


@dataclass(frozen=True)
class ScheduleAction:
    """Pause, resume or delete schedule ``name``."""

    action: Literal["pause", "resume", "delete"]
    name: str


@dataclass(frozen=True)
class CancelMany:
    """Cancel every existing job, in job_id order (or reversed), with one id."""

    cancellation_id: str
    only_if_queued: bool
    reverse: bool


Operation: TypeAlias = (
    Ingest | Replay | Tick | RacedTick | ReleaseOp | Cancel | CancelMany | FailLane | Purge
    | Crash | SetLiveness | Advance | Redrive | PutSchedule | ScheduleAction
)

specs = st.builds(
    ReplaySpec,
    job_id=st.sampled_from(JOB_IDS),
    queue=st.sampled_from(QUEUES),
    lane=st.sampled_from(LANES),
    priority=st.sampled_from(PRIORITIES),
    # Blocking executors (released later with any result) about half the time:
    # they make the interesting interleavings.
    action=st.sampled_from((*ACTIONS, *BLOCKING, *BLOCKING, *BLOCKING)),
    max_recoveries=st.sampled_from((None, 0, 1, 2)),
    # Due now mostly; else a delay of 0 to 2 epochs, or a run_at in epoch 0
    # to 3 (the clock starts in epoch 0: some are past by the time they come).
    delay=st.sampled_from((None, None, None, None, 0, 1, 2)),
    at=st.sampled_from((None, None, None, None, 0, 1, 3)),
    # A retry policy now and then: 2 or 3 attempts, each retry due at once
    # or an epoch later; outcome_unknown retried or not.
    attempts=st.sampled_from((None, None, 2, 3)),
    retry_delay=st.sampled_from((0, 0, 1)),
    retry_unknown=st.booleans(),
).filter(lambda spec: spec.delay is None or spec.at is None)


# Work-creating steps outweigh the destructive ones (purge, fail_lane, cancel
# everything), or most examples would spend their steps ticking an idle runtime.
operations: st.SearchStrategy[Operation] = weighted(
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
    (2, st.builds(Advance, st.integers(1, 2))),
    (2, st.builds(Redrive, st.integers(0, 8), st.sampled_from(("r1", "r2")))),
    (1, st.builds(PutSchedule, st.sampled_from(SCHEDULES), st.integers(1, 3),
                  st.integers(1, 2))),
    (1, st.builds(ScheduleAction, st.sampled_from(("pause", "resume", "delete")),
                  st.sampled_from(SCHEDULES))),
)


# --------------------------------------------------------------------- model


@dataclass
class ModelSchedule:
    catch_up: int
    variant: int
    next_epoch: int
    paused: bool


@dataclass(frozen=True)
class SlotSpec(ReplaySpec):
    """The job a schedule slot created: due at the slot (the start of epoch
    ``slot``), its payload's version the schedule's ``variant``."""

    slot: int = 0
    variant: int = 1

    def payload(self, *, reverse: bool = False) -> dict[str, Any]:
        items: list[tuple[str, Any]] = [("do", self.action), ("v", self.variant)]
        return dict(reversed(items) if reverse else items)

    def run_at(self) -> int | None:
        return ORIGIN_MS + self.slot * EPOCH_MS


def schedule_of(op: PutSchedule) -> Schedule:
    return Schedule(op.name, ScheduledJob("qc", "la", 0, {"do": "complete", "v": op.variant}),
                    every_ms=EPOCH_MS, catch_up=op.catch_up)


@dataclass
class OwnerModel(Model):
    """model_support's Model with one ticker, ingest conflicts per field, and
    races during the probe."""

    immediate: ClassVar[dict[str, tuple[str, str | None]]] = IMMEDIATE_OUTCOMES

    next_sequence: int = 0
    # Every (job_id, redrive_id) a redrive applied.
    redrives: set[tuple[str, str]] = field(default_factory=set)
    # Schedules by name: (catch_up, variant, the epoch of the next slot
    # without a job, paused).
    schedules: dict[str, ModelSchedule] = field(default_factory=dict)

    def put_schedule(self, op: PutSchedule) -> str:
        existing = self.schedules.get(op.name)
        if existing is not None and (existing.catch_up, existing.variant) == (
                op.catch_up, op.variant):
            return "unchanged"
        paused = existing is not None and existing.paused
        self.schedules[op.name] = ModelSchedule(op.catch_up, op.variant, self.epoch + 1, paused)
        return "created" if existing is None else "replaced"

    def schedule_action(self, op: ScheduleAction) -> bool:
        schedule = self.schedules.get(op.name)
        if schedule is None:
            return False
        if op.action == "delete":
            del self.schedules[op.name]
            return True
        if op.action == "pause":
            changed = not schedule.paused
            schedule.paused = True
            return changed
        if not schedule.paused:
            return False
        schedule.paused, schedule.next_epoch = False, self.epoch + 1
        return True

    def fire(self) -> None:
        """A tick's first step: the jobs of the slots that have come."""
        for name, schedule in sorted(self.schedules.items(),
                                     key=lambda item: (item[1].next_epoch, item[0])):
            if schedule.paused or schedule.next_epoch > self.epoch:
                continue
            first = max(schedule.next_epoch, self.epoch - schedule.catch_up + 1)
            for slot in range(first, self.epoch + 1):
                spec = SlotSpec(f"{name}@{slot_text(ORIGIN_MS + slot * EPOCH_MS)}", "qc", "la", 0,
                                "complete", None, slot=slot, variant=schedule.variant)
                self.jobs[spec.job_id] = ModelJob(spec, self.next_sequence)
                self.next_sequence += 1
            schedule.next_epoch = self.epoch + 1

    def has_pending_work(self) -> bool:
        return super().has_pending_work() or any(
            not schedule.paused and schedule.next_epoch <= self.epoch
            for schedule in self.schedules.values())

    def redrive(self, job_id: str, redrive_id: str) -> RedriveResult:
        job = self.jobs.get(job_id)
        refusal = redrive_refusal(job, job_id, (job_id, redrive_id) in self.redrives)
        if refusal is not None:
            return refusal
        assert job is not None and job.outcome is not None
        job.history = [*job.history, (job.attempt, job.outcome, job.failure_reason)][-20:]
        job.state, job.outcome, job.failure_reason = "queued", None, None
        job.attempt, job.recoveries, job.due_epoch = 1, 0, None
        self.redrives.add((job_id, redrive_id))
        flight = self.flight_of(job_id)
        if flight is not None:  # its lane was failed while it ran, and it still runs
            flight.replaced = True
        return RedriveResult("redriven", job_id)

    def ticker_of(self, lane: str) -> str:
        return ticker_of(lane)

    def ready(self, candidates: list[ModelJob]) -> list[ModelJob]:
        """Every waiting job not cancelled whose queue runs nothing."""
        busy = {j.spec.queue for j in self.jobs.values() if j.state == "running"}
        return [j for j in candidates if j.state == "queued" and j.cancellation_id is None
                and j.spec.queue not in busy and not self.waits(j)]

    def ingest(self, spec: Spec) -> str | tuple[str, ...]:
        existing = self.jobs.get(spec.job_id)
        if existing is None:
            self.jobs[spec.job_id] = ModelJob(spec, self.next_sequence,
                                              due_epoch=spec.due_epoch(self.epoch))
            self.next_sequence += 1
            return "queued"
        return ingest_answer(spec, existing.spec)

    def race(self, kind: RaceKind, job: ModelJob) -> object:
        """What ``kind`` does to ``job`` (and returns) when it lands mid-probe."""
        if kind == "cancel":
            return self.cancel(job.spec.job_id, RACE_CANCELLATION, False)
        if kind == "fail_lane":
            return self.fail_lane(job.spec.lane, RACE_REASON)
        return self.purge(job.spec.queue)

    def raced_tick(
        self, race: RaceKind | None
    ) -> tuple[TickResult | None, list[str], object]:
        """tick() with ``race`` landing during the probe: (the tick's result,
        or None when it leaves an executor in flight; the jobs it probes; what
        ``race`` returned, if it ran)."""
        self.fire()
        self.promote()
        orphan = self.orphan_to_probe(SERIAL)
        raced = None if race is None or orphan is None else self.race(race, orphan)
        probed = [] if orphan is None else [orphan.spec.job_id]
        return self.after_probe(SERIAL, orphan), probed, raced


# ------------------------------------------------------------ the real side


class Scenario(ModelScenario[OwnerModel, OwnerRuntime]):
    tickers = (SERIAL,)
    spins = 200
    crash_ticks = 4
    drain_rounds = 100
    probing = (Tick, RacedTick, Crash)

    def __init__(self, harness: Harness, *, project: bool) -> None:
        executor = GatedExecutor(IMMEDIATE_ACTIONS, immediate_result, ticker_of)
        super().__init__(harness, OwnerModel(), executor, project=project)
        # A race to run inside the next liveness probe, with what it must return.
        self.race: tuple[RaceKind, object] | None = None
        self.raced: tuple[object, object] | None = None  # (what it returned, expected)
        self.ledger = RecordLedger()

    def open_runtime(self, **options: Any) -> OwnerRuntime:
        return self.harness.runtime(**options)

    def call(self, ticker: str) -> Awaitable[TickResult]:
        assert ticker == SERIAL
        return self.runtime.tick()

    def tick_op(self, ticker: str) -> Tick:
        return Tick()

    def release_op(self, ticker: str, result: Release) -> ReleaseOp:
        return ReleaseOp(result)

    def during_probe(self, job: JobRecord) -> None:
        if self.race is None:
            return
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

    # -- operations
    async def step(self, op: Any) -> None:
        """Apply ``op``, then compare everything (and the projections it made)."""
        heads_before = {queue: self.model_head(queue) for queue in QUEUES}
        await super().step(op)
        if not self.project:
            return
        # Every queue whose head changed was projected; the last projection
        # of a queue shows its head as it now stands.
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

    async def apply(self, op: Any) -> None:
        model = self.model
        if isinstance(op, Ingest):
            self.ingest(op.spec.job(), model.ingest(op.spec))
        elif isinstance(op, Replay):
            if not model.jobs:
                return
            existing = sorted(model.jobs)[op.index % len(model.jobs)]
            spec = model.jobs[existing].spec
            assert isinstance(spec, ReplaySpec)
            expected = model.ingest(spec)
            assert expected == "duplicate"
            self.ingest(spec.job(reverse=True), expected)
        elif isinstance(op, Tick):
            await self.tick()
        elif isinstance(op, RacedTick):
            await self.tick(race=op.race)
        elif isinstance(op, ReleaseOp):
            self.release(SERIAL, op.result)
        elif isinstance(op, Cancel):
            self.cancel(self.cancel_target(op.target), op.cancellation_id, op.only_if_queued)
            await self.spin()  # an aborted executor that honours its signal stops now
        elif isinstance(op, Advance):
            model.epoch += op.epochs
            event("the clock moves on")
        elif isinstance(op, Redrive):
            known = sorted(model.jobs)
            job_id = known[op.index] if op.index < len(known) else "ghost"
            expected_redrive = model.redrive(job_id, op.redrive_id)
            assert self.runtime.redrive(job_id, op.redrive_id) == expected_redrive
            if expected_redrive.status == "redriven":
                # Settled once, it may settle again: the ledger forgets it.
                self.ledger.settled.pop(job_id, None)
                event("redriven")
        elif isinstance(op, PutSchedule):
            expected_put = model.put_schedule(op)
            assert self.runtime.put_schedule(schedule_of(op)) == expected_put
            event(f"schedule {expected_put}")
        elif isinstance(op, ScheduleAction):
            expected_change = model.schedule_action(op)
            assert getattr(self.runtime, f"{op.action}_schedule")(op.name) == expected_change
        elif isinstance(op, CancelMany):
            for job_id in sorted(model.jobs, reverse=op.reverse):
                self.cancel(job_id, op.cancellation_id, op.only_if_queued)
                await self.spin()
        else:
            await super().apply(op)

    def ingest(self, job: Job, expected: str | tuple[str, ...]) -> None:
        if isinstance(expected, tuple):
            with pytest.raises(IngestConflict) as caught:
                self.runtime.ingest(job)
            assert caught.value.job_id == job.job_id
            assert caught.value.fields == expected
        else:
            assert self.runtime.ingest(job) == expected

    async def tick(self, ticker: str = SERIAL, race: RaceKind | None = None) -> None:
        self.probed = []
        if ticker in self.tasks:
            await self.tick_busy(ticker)
            return
        orphans = sum(job.state == "running" for job in self.model.jobs.values())
        expected, expected_probes, raced = self.model.raced_tick(race)
        if race is not None and expected_probes:
            self.race = (race, raced)
            event(f"race during the probe: {race}")
        if orphans:
            event(f"tick over {min(orphans, 2)}+ orphan(s), liveness {self.model.liveness}")
        result = await self.start_tick(ticker, expected)
        if result is not None:
            event(f"tick: {result.status} {result.outcome or ''}".strip())
        await self.spin()  # a tick left in flight parks on its gate
        assert self.probed == expected_probes
        assert self.race is None, "the race never ran"
        if self.raced is not None:
            actual, wanted = self.raced
            self.raced = None
            assert actual == wanted, f"{race} during the probe: {actual} != {wanted}"

    # -- the comparison
    def check(self) -> None:
        runtime, model = self.runtime, self.model
        assert self.executor.violations == []
        running_per_queue: dict[str, int] = {}
        # Every id ever ingested (purged ones must read as gone) and one that
        # never was; the raw-table check below covers the rest.
        ledger = self.ledger
        ledger.touched.update(model.jobs)
        for job_id in sorted(ledger.touched):
            record = runtime.read(job_id)
            expected = model.jobs.get(job_id)
            if not ledger.compare(job_id, record, expected, "attempt"):
                continue
            assert record is not None and expected is not None
            assert [(entry.attempt, entry.outcome, entry.failure_reason)
                    for entry in record.history] == expected.history
            # Record consistency.
            assert (record.outcome is not None) == (record.state == "settled")
            assert (record.settled_at is not None) == (record.state == "settled")
            # A reason goes with a failure, or says a cancelled job's executor completed.
            assert record.failure_reason is None or record.outcome == "failed" or (
                record.outcome, record.failure_reason) == ("cancelled", "executor_completed")
            assert (record.started_at is None) == (record.state == "queued") or (
                record.state == "settled")
            if record.state == "running":
                running_per_queue[record.queue] = running_per_queue.get(record.queue, 0) + 1
        assert all(count <= 1 for count in running_per_queue.values()), running_per_queue
        ledger.check_order(model.jobs)
        self.check_heads(QUEUES)
        assert [(r.schedule.name, r.next_at, r.paused, r.schedule.catch_up)
                for r in runtime.schedules()] == [
            (name, ORIGIN_MS + s.next_epoch * EPOCH_MS, s.paused, s.catch_up)
            for name, s in sorted(model.schedules.items())]
        # The raw table: nothing beyond the model, one running job per queue.
        rows = self.harness.host_query("SELECT job_id, state, queue FROM tickwork_jobs")
        assert sorted(row[0] for row in rows) == sorted(model.jobs)
        running_queues = [row[2] for row in rows if row[1] == "running"]
        assert len(running_queues) == len(set(running_queues))
        self.check_executions()


#: Examples per owner kind; raise it for a deeper local search, e.g.
#: TICKWORK_MODEL_EXAMPLES=2000 pytest tests/property
EXAMPLES = model_examples(60)


@owner_model_test(specs, operations, max_ops=50, examples=EXAMPLES)
def test_runtime_matches_the_model(
    kind: str, first: list[Operation], ops: list[Operation], project: bool
) -> None:
    """With ``project``, the runtime has a projector, which moves every
    transition into an owner transaction (a different write path)."""
    run_model(Scenario, kind, first + ops, project=project)
