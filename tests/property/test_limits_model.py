"""Model-based test of concurrency limits in the claims of every store.

Each hypothesis example is a list of operations over a fresh database:
ingest a job (of three queues; in the lane of its queue's name or in one of
two other lanes, which share names with the queues so a lane limit counts
jobs of several queues and of the queue of its name), claim through one of
two claimers (two slots of an owner, or two workers of a shared database,
each its own store object over the database), settle a running job (alone,
or with the next claim in the same transaction or batch: the owner-local
counted claim-if-clear, D1's settle_and_claim), and put or delete a queue
or lane limit at any time, raising or lowering it while jobs run.

A small reference model holds the jobs' states and the limits in force and
picks, for every claim, the job the rule says: the best ready job (priority
desc, then enqueue order) whose queue runs fewer than its limit (1 without
one) and whose lane runs fewer than its lane limit (if it has one); when
that job's queue is wide (a limit above 1), the best such job of the first
lane in the queue's line that has one, the lane then going to the back of
the line (fair turns). After
each claim the store's answer must be that job (or nothing when the model
finds none), and the store's own count of running jobs (``running_jobs``)
in the claimed job's queue and lane must be within the limits in force at
that claim. No job is claimed twice; at the end every job is claimed and
settled, and each settles exactly once (a settlement of a settled job's
claim writes nothing). Independently of the model's line, ``FairTurns``
checks the fairness invariant from the claims alone: in a wide queue no lane
starts twice while another lane was startable at every claim in between.

Store-level on purpose: every interleaving of claims, settlements and limit
changes is chosen by hypothesis, deterministically, and compared step by
step, which a runtime's own scheduling would blur. The runtime-level tests
(tests/owner_local/test_limits.py, tests/shared/test_limits.py) show the
same limits hold with real slots and loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.contract.stores import COMPLETED, T0, valid_job
from tests.support.d1.fixtures import d1_binding, d1_bridge  # noqa: F401  (pytest finds fixtures by name)
from tests.support.models import model_examples
from tests.support.pg.fixtures import (  # noqa: F401  (pytest finds fixtures by name)
    postgres_server,
    postgres_templates,
)
from tickwork import JobRecord
from tickwork.model.jobs import ValidJob
from tickwork.model.limits import ConcurrencyLimit, LimitKind

#: The stores whose claims enforce limits on this branch, and the examples
#: each runs; PostgreSQL joins with one line here once its store has them
#: (its fixture branch is below).
KINDS = {"sqlite3": 300, "d1-external": 60, "postgres": 60}

QUEUES = ("qa", "qb", "qc")
#: The queues most jobs go to: few enough that limits are often reached.
BUSY_QUEUES = ("qa", "qb")
#: None: the lane of the queue's name (what a job that names no lane gets).
LANES = (None, "qa", "la")
LIMIT_KEYS: dict[LimitKind, tuple[str, ...]] = {"queue": QUEUES, "lane": ("qa", "qb", "la")}
LEASE = 10**9  # no lease ever expires in these examples


# ---------------------------------------------------------------- operations


@dataclass(frozen=True)
class Ingest:
    queue: str
    lane: str | None
    priority: int


@dataclass(frozen=True)
class Claim:
    claimer: int


@dataclass(frozen=True)
class Settle:
    """Settle the ``index``-th running job (modulo how many run), and with
    ``claim_next`` claim the next job through the same claimer in the same
    transaction or batch."""

    index: int
    claim_next: bool


@dataclass(frozen=True)
class PutLimit:
    kind: LimitKind
    key: str
    max_running: int


@dataclass(frozen=True)
class DeleteLimit:
    kind: LimitKind
    key: str


Operation: TypeAlias = Ingest | Claim | Settle | PutLimit | DeleteLimit

kinds = st.sampled_from(("queue", "lane"))
operations = st.one_of(
    st.builds(Ingest, st.sampled_from(QUEUES), st.sampled_from(LANES),
              st.sampled_from((0, 0, 1))),
    st.builds(Ingest, st.sampled_from(BUSY_QUEUES), st.sampled_from(LANES), st.just(0)),
    st.builds(Claim, st.sampled_from((0, 1))),
    st.builds(Claim, st.sampled_from((0, 1))),
    st.builds(Settle, st.integers(0, 5), st.booleans()),
    kinds.flatmap(lambda kind: st.builds(PutLimit, st.just(kind),
                                         st.sampled_from(LIMIT_KEYS[kind]),
                                         st.integers(1, 3))),
    st.builds(PutLimit, st.just("lane"), st.sampled_from(("qa", "la")), st.integers(1, 2)),
    kinds.flatmap(lambda kind: st.builds(DeleteLimit, st.just(kind),
                                         st.sampled_from(LIMIT_KEYS[kind]))),
)

#: Fair turns need a wide queue whose lanes each hold several ready jobs
#: while others start: a queue made wide first (``FAIR_START``), then mostly
#: ingests into it across three lanes (one with a higher priority now and
#: then), claims and settlements, and limits that change its width or hold
#: a lane.
FAIR_LANES = (None, "la", "lb")
FAIR_START = st.builds(PutLimit, st.just("queue"), st.just("qa"), st.integers(2, 3))
fair_operations = st.one_of(
    st.builds(Ingest, st.just("qa"), st.sampled_from(FAIR_LANES), st.sampled_from((0, 0, 0, 1))),
    st.builds(Ingest, st.just("qa"), st.sampled_from(FAIR_LANES), st.just(0)),
    st.builds(Ingest, st.sampled_from(("qb", "qc")), st.sampled_from(FAIR_LANES), st.just(0)),
    st.builds(Claim, st.sampled_from((0, 1))),
    st.builds(Claim, st.sampled_from((0, 1))),
    st.builds(Settle, st.integers(0, 5), st.booleans()),
    st.builds(PutLimit, st.just("queue"), st.just("qa"), st.integers(1, 3)),
    st.builds(PutLimit, st.just("lane"), st.sampled_from(("la", "lb")), st.integers(1, 2)),
    st.builds(DeleteLimit, st.just("lane"), st.sampled_from(("la", "lb"))),
)


# --------------------------------------------------------------------- model


@dataclass
class ModelJob:
    job_id: str
    queue: str
    lane: str
    priority: int
    order: int
    state: Literal["queued", "running", "settled"] = "queued"


@dataclass
class Model:
    jobs: list[ModelJob] = field(default_factory=list)
    limits: dict[tuple[LimitKind, str], int] = field(default_factory=dict)
    #: Each wide queue's line of lanes, front first (the fair-turns rule:
    #: docs/explanation/architecture.md, "Which order is kept").
    lines: dict[str, list[str]] = field(default_factory=dict)

    def running_in(self, kind: LimitKind, key: str) -> int:
        return sum(1 for job in self.jobs if job.state == "running"
                   and (job.queue if kind == "queue" else job.lane) == key)

    def queue_limit(self, queue: str) -> int:
        return self.limits.get(("queue", queue), 1)

    def wide(self, queue: str) -> bool:
        return self.queue_limit(queue) > 1

    def startable(self, job: ModelJob, now: int) -> bool:
        """Ready, and its queue and lane have room."""
        if job.state != "queued":
            return False
        if self.running_in("queue", job.queue) >= self.queue_limit(job.queue):
            return False
        lane_limit = self.limits.get(("lane", job.lane))
        return lane_limit is None or self.running_in("lane", job.lane) < lane_limit

    def in_order(self) -> list[ModelJob]:
        return sorted(self.jobs, key=lambda job: (-job.priority, job.order))

    def pick(self, now: int = 0) -> ModelJob | None:
        """The best startable job in global order; when its queue is wide,
        instead the best startable job of the first lane in that queue's
        line that has one."""
        first = next((job for job in self.in_order() if self.startable(job, now)), None)
        if first is None or not self.wide(first.queue):
            return first
        for lane in self.lines.get(first.queue, []):
            for job in self.in_order():
                if job.queue == first.queue and job.lane == lane and self.startable(job, now):
                    return job
        return first  # the stores' fallback, which an exact line never needs

    def ready_lane(self, queue: str, lane: str) -> bool:
        return any(job.state == "queued" and job.queue == queue and job.lane == lane
                   for job in self.jobs)

    def join(self, job: ModelJob) -> None:
        """``job`` is ready again (stored, or put back): in a wide queue its
        lane joins the back of the line unless it is in it."""
        line = self.lines.get(job.queue)
        if self.wide(job.queue) and line is not None and job.lane not in line:
            line.append(job.lane)

    def started(self, job: ModelJob) -> None:
        """``job`` was claimed: its lane goes to the back of its wide
        queue's line, or leaves it with no ready job left."""
        line = self.lines.get(job.queue)
        if line is None:
            return
        if job.lane in line:
            line.remove(job.lane)
        if self.ready_lane(job.queue, job.lane):
            line.append(job.lane)

    def limit_changed(self, queue: str, was_wide: bool) -> None:
        """A queue that becomes wide lines up its lanes with ready jobs, by
        their oldest ready job; one that stops being wide drops its line."""
        if not self.wide(queue):
            self.lines.pop(queue, None)
        elif not was_wide:
            line: list[str] = []
            for job in sorted(self.jobs, key=lambda job: job.order):
                if job.state == "queued" and job.queue == queue and job.lane not in line:
                    line.append(job.lane)
            self.lines[queue] = line


class FairTurns:
    """The fairness invariant, checked from the claims alone (not from the
    model's line): in a wide queue, no lane starts twice while another lane
    was startable at every claim of that queue in between (both starts
    included) and did not start. Tracking restarts for a queue whose width
    changes."""

    def __init__(self) -> None:
        self.claims: dict[str, int] = {}  # queue -> claims counted while wide
        self.last_start: dict[tuple[str, str], int] = {}
        self.waiting_since: dict[tuple[str, str], int] = {}

    def reset(self, queue: str) -> None:
        for table in (self.last_start, self.waiting_since):
            for key in [key for key in table if key[0] == queue]:
                del table[key]

    def claimed(self, model: Model, job: ModelJob, now: int) -> None:
        """Called with the model as it was just before ``job`` started."""
        queue = job.queue
        if not model.wide(queue):
            return
        index = self.claims[queue] = self.claims.get(queue, 0) + 1
        startable = {other.lane for other in model.jobs
                     if other.queue == queue and model.startable(other, now)}
        for key in [key for key in self.waiting_since if key[0] == queue]:
            if key[1] not in startable:
                del self.waiting_since[key]
        for lane in startable:
            self.waiting_since.setdefault((queue, lane), index)
        previous = self.last_start.get((queue, job.lane))
        if previous is not None:
            passed = sorted(lane for (key_queue, lane), since in self.waiting_since.items()
                            if key_queue == queue and lane != job.lane and since <= previous)
            assert not passed, (f"lane {job.lane} of {queue} starts again while {passed} "
                                f"waited through both of its starts")
        self.last_start[(queue, job.lane)] = index
        self.waiting_since.pop((queue, job.lane), None)


# ------------------------------------------------------------------- stores


class Claims:
    """One store kind's claims, settlements and limits, awaited alike."""

    async def insert(self, job: ValidJob, now: int) -> None:
        raise NotImplementedError

    async def claim(self, claimer: int, token: str, now: int) -> JobRecord | None:
        raise NotImplementedError

    async def settle(self, job: JobRecord, token: str, now: int, claimer: int,
                     next_token: str | None) -> tuple[bool, JobRecord | None]:
        raise NotImplementedError

    async def put_limit(self, limit: ConcurrencyLimit, now: int) -> None:
        raise NotImplementedError

    async def delete_limit(self, kind: LimitKind, key: str) -> None:
        raise NotImplementedError

    async def running_jobs(self, kind: LimitKind, key: str) -> list[str]:
        raise NotImplementedError


class OwnerLocalClaims(Claims):
    """The owner-local store on sqlite3: the two claimers are two slots of
    one owner (one writer); a settlement with the next claim runs the
    counted claim-if-clear, excluding the claims the slots execute."""

    def __init__(self) -> None:
        from tickwork.stores import Sqlite3Database
        from tickwork.stores.owner_local import OwnerLocalStore
        from tickwork.stores.owner_schema import ensure_schema

        database = Sqlite3Database(sqlite3.connect(":memory:", isolation_level=None))
        ensure_schema(database)
        self.store = OwnerLocalStore(database)
        self.tokens: dict[str, str] = {}  # job_id -> its claim's token

    async def insert(self, job: ValidJob, now: int) -> None:
        assert self.store.insert(job, now)

    async def claim(self, claimer: int, token: str, now: int) -> JobRecord | None:
        from tickwork.stores.owner_local import EVERY_JOB

        job = self.store.claim_next(EVERY_JOB, token, now)
        if job is not None:
            self.tokens[job.job_id] = token
        return job

    async def settle(self, job: JobRecord, token: str, now: int, claimer: int,
                     next_token: str | None) -> tuple[bool, JobRecord | None]:
        from tickwork.stores.owner_local import EVERY_JOB

        def settle_then_claim() -> tuple[bool, JobRecord | None]:
            settled = self.store.settle_claim(job.sequence, token, COMPLETED, now,
                                              cancelled=False)
            if next_token is None:
                return settled, None
            del self.tokens[job.job_id]
            claimed = self.store.claim_next_if_clear(EVERY_JOB, next_token, now,
                                                     list(self.tokens.values()))
            if claimed is not None:
                self.tokens[claimed.job_id] = next_token
            return settled, claimed

        settled, claimed = self.store.database.atomic(settle_then_claim)
        self.tokens.pop(job.job_id, None)
        return settled, claimed

    async def put_limit(self, limit: ConcurrencyLimit, now: int) -> None:
        self.store.put_limit(limit, now)

    async def delete_limit(self, kind: LimitKind, key: str) -> None:
        self.store.delete_limit(kind, key)

    async def running_jobs(self, kind: LimitKind, key: str) -> list[str]:
        return self.store.running_jobs(kind, key, 10_000)


class SharedClaims(Claims):
    """A shared store: the two claimers are two workers, each with its own
    store object over the database; a settlement with the next claim is the
    store's settle_and_claim (D1: one batch)."""

    def __init__(self, stores: list[Any]) -> None:
        self.stores = stores

    async def insert(self, job: ValidJob, now: int) -> None:
        assert await self.stores[0].insert(job, now)

    async def claim(self, claimer: int, token: str, now: int) -> JobRecord | None:
        job: JobRecord | None = await self.stores[claimer].claim(token, LEASE, now,
                                                                 guarded=False)
        return job

    async def settle(self, job: JobRecord, token: str, now: int, claimer: int,
                     next_token: str | None) -> tuple[bool, JobRecord | None]:
        store = self.stores[claimer]
        if next_token is None:
            return await store.settle(job.sequence, token, COMPLETED, now, cancelled=False), None
        settled, claimed = await store.settle_and_claim(
            job.sequence, token, COMPLETED, now, next_token=next_token, lease_ms=LEASE)
        return bool(settled), claimed

    async def put_limit(self, limit: ConcurrencyLimit, now: int) -> None:
        await self.stores[1].put_limit(limit, now)

    async def delete_limit(self, kind: LimitKind, key: str) -> None:
        await self.stores[0].delete_limit(kind, key)

    async def running_jobs(self, kind: LimitKind, key: str) -> list[str]:
        found: list[str] = await self.stores[1].running_jobs(kind, key, 10_000)
        return found


#: Opens a fresh database for one example, inside the example's event loop.
Fresh = Callable[[], contextlib.AbstractAsyncContextManager[Claims]]


@pytest.fixture
def fresh(request: pytest.FixtureRequest) -> Iterator[Fresh]:
    """Function scoped but stateless: every example opens its own database
    through it (hence HealthCheck.function_scoped_fixture is suppressed)."""
    kind: str = request.param

    @contextlib.asynccontextmanager
    async def open_claims() -> AsyncIterator[Claims]:
        if kind == "sqlite3":
            yield OwnerLocalClaims()
            return
        if kind == "postgres":
            from tests.support.pg.fixtures import POSTGRES_SCHEMA_DIR, open_pool, schema_files
            from tests.support.pg.server import unique_database_name
            from tickwork.stores.postgres.store import PostgresStore

            server = request.getfixturevalue("postgres_server")
            templates = request.getfixturevalue("postgres_templates")
            name = unique_database_name("tickwork_limits_model")
            template = templates.template_for(schema_files(POSTGRES_SCHEMA_DIR))
            dsn = server.create_database(name, template)
            try:
                async with open_pool(dsn, max_size=4) as pool:
                    yield SharedClaims([PostgresStore(pool), PostgresStore(pool)])
            finally:
                server.drop_database(name)
            return
        from tests.support.stores import apply_d1_schema
        from tickwork.stores.d1.store import D1Store

        bridge = request.getfixturevalue("d1_bridge")
        with d1_binding(bridge, kind.removeprefix("d1-"), yield_to_loop=True) as db:
            await apply_d1_schema(db)
            yield SharedClaims([D1Store(db), D1Store(db)])

    yield open_claims


# ------------------------------------------------------------------ scenario


class Scenario:
    def __init__(self, claims: Claims) -> None:
        self.claims = claims
        self.model = Model()
        self.fairness = FairTurns()
        self.records: dict[str, tuple[JobRecord, str, int]] = {}  # running: record, token, claimer
        self.claimed: set[str] = set()
        self.settlements: dict[str, int] = {}
        self.now = T0
        self.tokens = 0

    def tick_clock(self) -> int:
        self.now += 1
        return self.now

    def token(self) -> str:
        self.tokens += 1
        return f"t{self.tokens}"

    async def apply(self, operation: Operation) -> None:
        if isinstance(operation, Ingest):
            job_id = f"j{len(self.model.jobs)}"
            lane = operation.lane or operation.queue
            self.model.jobs.append(ModelJob(job_id, operation.queue, lane, operation.priority,
                                            len(self.model.jobs)))
            self.model.join(self.model.jobs[-1])
            await self.claims.insert(valid_job(job_id, operation.queue, lane=operation.lane,
                                               priority=operation.priority), self.tick_clock())
        elif isinstance(operation, Claim):
            token = self.token()
            job = await self.claims.claim(operation.claimer, token, self.tick_clock())
            await self.claimed_check(job, token, operation.claimer)
        elif isinstance(operation, Settle):
            running = sorted(self.records)
            if not running:
                return
            job_id = running[operation.index % len(running)]
            await self.settle(job_id, operation.claim_next)
        elif isinstance(operation, PutLimit):
            with self.limit_change(operation.kind, operation.key):
                self.model.limits[(operation.kind, operation.key)] = operation.max_running
            await self.claims.put_limit(ConcurrencyLimit(operation.kind, operation.key,
                                                         operation.max_running),
                                        self.tick_clock())
        else:
            with self.limit_change(operation.kind, operation.key):
                self.model.limits.pop((operation.kind, operation.key), None)
            await self.claims.delete_limit(operation.kind, operation.key)

    @contextlib.contextmanager
    def limit_change(self, kind: LimitKind, key: str) -> Iterator[None]:
        """Around a change of a limit in the model: a queue's line follows
        its width, and the fairness check restarts for a queue whose width
        changed."""
        was_wide = kind == "queue" and self.model.wide(key)
        yield
        if kind == "queue":
            self.model.limit_changed(key, was_wide)
            if self.model.wide(key) != was_wide:
                self.fairness.reset(key)

    def started(self, expected: ModelJob, now: int) -> None:
        """The model's job ``expected`` was claimed at ``now``."""
        self.fairness.claimed(self.model, expected, now)
        expected.state = "running"
        self.model.started(expected)

    async def settle(self, job_id: str, claim_next: bool) -> None:
        record, token, claimer = self.records.pop(job_id)
        next_token = self.token() if claim_next else None
        settled, claimed = await self.claims.settle(record, token, self.tick_clock(), claimer,
                                                    next_token)
        assert settled, f"{job_id}'s live claim did not settle"
        self.settlements[job_id] = self.settlements.get(job_id, 0) + 1
        self.model_job(job_id).state = "settled"
        # The same claim again writes nothing: exactly one terminal outcome.
        again, _ = await self.claims.settle(record, token, self.tick_clock(), claimer, None)
        assert not again, f"{job_id} settled twice"
        if next_token is not None:
            await self.claimed_check(claimed, next_token, claimer)

    def model_job(self, job_id: str) -> ModelJob:
        return next(job for job in self.model.jobs if job.job_id == job_id)

    async def claimed_check(self, job: JobRecord | None, token: str, claimer: int) -> None:
        expected = self.model.pick()
        assert (job.job_id if job else None) == (expected.job_id if expected else None), (
            f"claimed {job.job_id if job else None}, the rule picks "
            f"{expected.job_id if expected else None} (limits {self.model.limits})")
        if job is None or expected is None:
            return
        assert job.job_id not in self.claimed, f"{job.job_id} claimed twice"
        self.claimed.add(job.job_id)
        self.started(expected, self.now)
        self.records[job.job_id] = (job, token, claimer)
        # The store's own count, against the limits in force at this claim.
        in_queue = await self.claims.running_jobs("queue", job.queue)
        assert job.job_id in in_queue
        assert len(in_queue) <= self.model.queue_limit(job.queue), (job.queue, in_queue)
        lane_limit = self.model.limits.get(("lane", job.lane))
        if lane_limit is not None:
            in_lane = await self.claims.running_jobs("lane", job.lane)
            assert job.job_id in in_lane and len(in_lane) <= lane_limit, (job.lane, in_lane)

    async def finish(self) -> None:
        """Claim and settle until every job has run once."""
        for _ in range(4 * len(self.model.jobs) + 4):
            if not self.records:
                await self.apply(Claim(0))
                if not self.records:
                    break
            await self.settle(sorted(self.records)[0], claim_next=True)
        assert {job.state for job in self.model.jobs} <= {"settled"}
        assert self.claimed == {job.job_id for job in self.model.jobs}
        assert set(self.settlements.values()) <= {1}
        assert len(self.settlements) == len(self.model.jobs)


SETTINGS: dict[str, Any] = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]}


@pytest.mark.parametrize("fresh", list(KINDS), indirect=True)
def test_every_claim_takes_the_job_the_limits_rule_picks(fresh: Fresh, request: Any) -> None:
    kind = request.node.callspec.params["fresh"]

    @settings(max_examples=model_examples(KINDS[kind]), **SETTINGS)
    @given(ops=st.lists(operations, min_size=5, max_size=40))
    def example(ops: list[Operation]) -> None:
        async def main() -> None:
            async with fresh() as claims:
                scenario = Scenario(claims)
                for operation in ops:
                    await scenario.apply(operation)
                await scenario.finish()

        asyncio.run(main())

    example()


@pytest.mark.parametrize("fresh", list(KINDS), indirect=True)
def test_every_claim_in_a_wide_queue_takes_its_lanes_turns(fresh: Fresh, request: Any) -> None:
    """The same scenario, drawn to keep a wide queue busy with several lanes
    (``fair_operations``): every claim must take the model's fair pick, and
    the fairness invariant (``FairTurns``) must hold."""
    kind = request.node.callspec.params["fresh"]

    @settings(max_examples=model_examples(KINDS[kind]), **SETTINGS)
    @given(start=FAIR_START, ops=st.lists(fair_operations, min_size=5, max_size=40))
    def example(start: PutLimit, ops: list[Operation]) -> None:
        async def main() -> None:
            async with fresh() as claims:
                scenario = Scenario(claims)
                for operation in [start, *ops]:
                    await scenario.apply(operation)
                await scenario.finish()

        asyncio.run(main())

    example()
