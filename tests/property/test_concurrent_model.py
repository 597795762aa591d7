"""Model-based test of the concurrent lane: random interleavings of ingest,
tick(), tick_concurrent(), releases of blocked executors, cancel (one job or
all of them), fail_lane, purge, read_settled, crash-and-rebuild and liveness
changes, run against a ConcurrentOwnerRuntime and checked step by step
against a small reference model of the spec.

Both tickers can be in flight at once: an executor whose payload says "block"
(honours its signal) or "stubborn" (ignores it) parks on a gate until the
test releases it, so one tick() and one tick_concurrent() can sit in their
executors while other operations run. After every step the loop is spun
until each in-flight tick has finished or parked again, and then:

* every job's durable state, every queue head and has_pending_work match
  the model (which selects only queue heads across lanes, partitions ticks,
  cancellations, recoveries and refusals as the spec says);
* at most one job executes per ticker, the executing jobs are exactly the
  model's in-flight ones, and no claim is ever executed twice;
* a settled job never changes again (one terminal outcome each), and every
  tick reports what the model says, including which claims it probed;
* read_settled, paged from the start with a small limit and read in one
  large page, is exactly the model's feed: the serial partition's settled
  jobs in enqueue order, up to the first one not yet settled.

Time is a counter (``clock``), so claim order is started_at order. The
machinery shared with test_owner_model.py is in model_support.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeAlias, cast

from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.support import Harness
from tests.support.models import (
    BLOCKING,
    EXECUTOR_REASON,
    GHOST,
    Cancel,
    Crash,
    FailLane,
    GatedExecutor,
    Ingest,
    Model,
    ModelJob,
    ModelScenario,
    Purge,
    Release,
    SetLiveness,
    Spec,
    harness_of,
    liveness,
    model_examples,
    owner_model_test,
    run_model,
    weighted,
)
from tickwork import Cancelled, Completed, Failed, TickResult
from tickwork.model.jobs import MAX_SAFE_INTEGER
from tickwork.runtimes.owner_local import ConcurrentOwnerRuntime

# ----------------------------------------------------------------- the world

FAST = "fast"  # the concurrent lane
LANES = (FAST, "la", "lb")
QUEUES = ("qa", "qb", "qc", "qd")
JOB_IDS = tuple(f"j{index:02}" for index in range(12))
PRIORITIES = (-1, 0, 1)

Ticker: TypeAlias = Literal["serial", "concurrent"]
TICKERS: tuple[Ticker, ...] = ("serial", "concurrent")
# What the executor does, chosen by payload["do"]: one of IMMEDIATE (what it
# settles as) or of BLOCKING.
IMMEDIATE: dict[str, tuple[str, str | None]] = {
    "complete": ("completed", None),
    "fail": ("failed", EXECUTOR_REASON),
    "raise": ("failed", "execution_failed"),
    "cancel": ("cancelled", None),
}
RELEASES: tuple[Release, ...] = ("completed", "failed", "raise", "unknown", "cancelled")


def partition_of(lane: str) -> Ticker:
    return "concurrent" if lane == FAST else "serial"


def immediate(action: str, payload: dict[str, Any]) -> Any:
    """What the executor returns for an immediate action (``raise`` raises)."""
    if action == "raise":
        raise RuntimeError("executor exploded")
    outcome, reason = IMMEDIATE[action]
    return {"completed": Completed(), "failed": Failed(reason), "cancelled": Cancelled()}[outcome]


# ---------------------------------------------------------------- operations
# Besides model_support's Ingest, Cancel, FailLane, Purge, Crash, SetLiveness.


@dataclass(frozen=True)
class Tick:
    ticker: Ticker


@dataclass(frozen=True)
class ReleaseOp:
    ticker: Ticker
    result: Release


@dataclass(frozen=True)
class CancelMany:
    """Cancel every existing job, in job_id order, with one id: cancelled
    queued jobs then wait in both partitions at once."""

    cancellation_id: str
    only_if_queued: bool


@dataclass(frozen=True)
class ReadSettled:
    """One read_settled call: after 0 (pick 0), after everything (pick 1), or
    after the sequence of some job ever ingested (purged ones included)."""

    limit: int
    pick: int


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
    # Now and then a retry policy: a failed attempt goes back, due at once
    # (the next tick of either ticker moves it into the ready set).
    attempts=st.sampled_from((None, None, None, 2, 3)),
)
tickers = st.sampled_from(TICKERS)


operations: st.SearchStrategy[Operation] = weighted(
    (8, st.builds(Tick, tickers)),
    (6, st.builds(Ingest, specs)),
    (2, st.builds(ReleaseOp, tickers, st.sampled_from(RELEASES))),
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
class ConcurrentModel(Model):
    """model_support's Model with a ticker per partition, each picking only
    queue heads across lanes, and the settled feed. A job's sequence is the
    engine's enqueue sequence (read back once, at ingest)."""

    immediate: ClassVar[dict[str, tuple[str, str | None]]] = IMMEDIATE

    def ticker_of(self, lane: str) -> str:
        return partition_of(lane)

    def ready(self, candidates: list[ModelJob]) -> list[ModelJob]:
        """The ticker's waiting jobs that head their queue, whatever its lanes."""
        return [j for j in candidates
                if j.state == "queued" and self.runnable_head(j.spec.queue) is j]

    def runnable_head(self, queue: str) -> ModelJob | None:
        """The job a ticker may run next in ``queue``, whatever its lane: none
        while a job runs; else the best queued job that is not cancelled."""
        if self.in_queue(queue, "running"):
            return None
        waiting = [j for j in self.in_queue(queue, "queued") if j.cancellation_id is None]
        return min(waiting, key=lambda j: (-j.spec.priority, j.sequence), default=None)

    def feed(self, after: int, limit: int) -> list[str]:
        """read_settled: the serial partition in enqueue order after ``after``,
        ``limit`` at most, stopping before the first job not settled yet."""
        page = sorted((j for j in self.jobs.values()
                       if partition_of(j.spec.lane) == "serial" and j.sequence > after),
                      key=lambda j: j.sequence)[:limit]
        settled: list[str] = []
        for job in page:
            if job.state != "settled":
                break
            settled.append(job.spec.job_id)
        return settled

    def ingest(self, spec: Spec) -> str:
        existing = self.jobs.get(spec.job_id)
        if existing is None:
            self.jobs[spec.job_id] = ModelJob(spec, sequence=-1)
            return "queued"
        return "duplicate" if existing.spec == spec else "conflict"


# ------------------------------------------------------------ the real side


class Scenario(ModelScenario[ConcurrentModel, ConcurrentOwnerRuntime]):
    tickers = TICKERS
    spins = 300
    crash_ticks = 3
    drain_rounds = 200
    probing = (Tick, Crash)

    def __init__(self, harness: Harness, *, project: bool) -> None:
        executor = GatedExecutor(IMMEDIATE, immediate, partition_of)
        super().__init__(harness, ConcurrentModel(), executor, project=project)
        self.settled: dict[str, tuple[Any, ...]] = {}
        self.sequences: dict[str, int] = {}  # every job ever ingested, purged ones too
        self.last_sequence = 0

    def open_runtime(self, **options: Any) -> ConcurrentOwnerRuntime:
        return self.harness.concurrent_runtime(FAST, **options)

    def call(self, ticker: str) -> Awaitable[TickResult]:
        return self.runtime.tick() if ticker == "serial" else self.runtime.tick_concurrent()

    def tick_op(self, ticker: str) -> Tick:
        return Tick(cast(Ticker, ticker))

    def release_op(self, ticker: str, result: Release) -> ReleaseOp:
        return ReleaseOp(cast(Ticker, ticker), result)

    async def apply(self, op: Any) -> None:
        model = self.model
        if isinstance(op, Ingest):
            await self.ingest(op.spec)
        elif isinstance(op, Tick):
            await self.tick(op.ticker)
        elif isinstance(op, ReleaseOp):
            self.release(op.ticker, op.result)
        elif isinstance(op, Cancel):
            self.cancel(self.cancel_target(op.target), op.cancellation_id, op.only_if_queued)
        elif isinstance(op, CancelMany):
            for job_id in sorted(model.jobs):
                self.cancel(job_id, op.cancellation_id, op.only_if_queued)
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
        else:
            await super().apply(op)

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

    async def tick(self, ticker: str) -> None:
        self.probed = []
        if ticker in self.tasks:
            await self.tick_busy(ticker)
            event(f"{ticker} tick: busy")
            return
        expected, expected_probes = self.model.tick(ticker)
        result = await self.start_tick(ticker, expected)
        if result is None:
            event(f"{ticker} tick: in flight (other ticker busy: {len(self.tasks) == 2})")
        else:
            event(f"{ticker} tick: {result.status}")
        await self.spin()
        assert self.probed == expected_probes, ticker

    # -- the comparison
    def check(self) -> None:
        runtime, model = self.runtime, self.model
        assert self.executor.violations == []
        # The durable state, every row in one read.
        rows = self.harness.host_query(
            "SELECT job_id, state, outcome, failure_reason, recoveries, cancellation_id,"
            " sequence, queue, started_at, settled_at, claim_token, attempt,"
            " (SELECT group_concat(json_extract(entry.value, '$.attempt') || ':'"
            "  || json_extract(entry.value, '$.outcome'), ',')"
            "  FROM json_each(tickwork_jobs.history_json) AS entry) FROM tickwork_jobs")
        stored = {row[0]: row for row in rows}
        assert sorted(stored) == sorted(model.jobs)
        for job_id, expected in model.jobs.items():
            row = stored[job_id]
            wanted = (job_id, expected.state, expected.outcome, expected.failure_reason,
                      expected.recoveries, expected.cancellation_id, expected.sequence)
            assert row[:7] == wanted, f"{job_id}: engine {row[:7]} != model {wanted}"
            history = ",".join(f"{attempt}:{outcome}" for attempt, outcome, _ in expected.history)
            assert (row[11], row[12] or "") == (expected.attempt, history), job_id
            if expected.state == "settled":
                # One terminal outcome: a settled job never changes again.
                before = self.settled.setdefault(job_id, row)
                assert row == before, f"settled {job_id} changed: {before} -> {row}"
        for job_id in sorted(set(self.sequences) - set(model.jobs) | {GHOST}):
            assert runtime.read(job_id) is None, f"{job_id} should not exist"
        running_queues = [row[7] for row in rows if row[1] == "running"]
        assert len(running_queues) == len(set(running_queues))
        self.check_heads(QUEUES)
        self.check_executions()
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

    def drained(self) -> None:
        serial_jobs = sorted((j for j in self.model.jobs.values()
                              if partition_of(j.spec.lane) == "serial"), key=lambda j: j.sequence)
        feed = [r.job_id for r in self.runtime.read_settled(1000)]
        assert feed == [j.spec.job_id for j in serial_jobs]


#: Examples per owner kind. TICKWORK_MODEL_EXAMPLES sets it for this test and
#: test_owner_model.py alike; raise it for a deeper local search, e.g.
#: TICKWORK_MODEL_EXAMPLES=2000 pytest tests/property. The default keeps this
#: file near 20 s (the Durable Object stand-in is the slow part).
EXAMPLES = model_examples(40)


@dataclass(frozen=True)
class Backlog:
    """Many jobs at once, some cancelled: more runnable jobs than the
    concurrent ticker's first look at the pick order covers (64)."""

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


async def drain_backlog(harness: Harness, backlog: Backlog, order: list[Ticker]) -> None:
    model = ConcurrentModel()
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
    for ticker in order * len(backlog.specs):
        if not model.has_pending_work():
            break
        expected, probed = model.tick(ticker)
        assert expected is not None and probed == []
        assert await (runtime.tick() if ticker == "serial" else runtime.tick_concurrent()) \
            == expected, ticker
    assert not model.has_pending_work()
    assert [r.job_id for r in runtime.read_settled(1000)] == model.feed(0, 1000)


@settings(max_examples=max(EXAMPLES // 4, 5), deadline=None)
@given(backlog=backlogs,
       order=st.lists(tickers, max_size=4).map(lambda order: [*order, "serial", "concurrent"]))
def test_deep_backlogs_pick_the_same_heads_as_the_model(
    backlog: Backlog, order: list[Ticker]
) -> None:
    """Each ticker's pick, over backlogs deeper than its first look (sqlite3)."""
    with harness_of("sqlite3") as harness:
        asyncio.run(drain_backlog(harness, backlog, order))


@owner_model_test(specs, operations, max_ops=60, examples=EXAMPLES)
def test_concurrent_runtime_matches_the_model(
    kind: str, first: list[Operation], ops: list[Operation], project: bool
) -> None:
    run_model(Scenario, kind, first + ops, project=project)
