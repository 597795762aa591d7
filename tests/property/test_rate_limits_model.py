"""Model-based test of rate limits in the claims of every store.

The machinery of ``test_limits_model`` (its stores, claimers, reference
model of concurrency limits and scenario), with rate limits added: buckets
put and deleted on queues and lanes at any time (a new bucket starts full,
a changed one keeps its next start's time), an executor's RateLimited put
back through ``put_back_rate_limited`` (the job queued again without using
an attempt, its queue or lane held until a random time), and a clock that
moves on by random steps between operations.

The reference model keeps each key's bucket exactly as the stores must, in
GCRA units, replayed with ``tickwork.model.rate_limits`` (``allows_start``,
``next_start_after``), and its holds. Every claim must take the job the rule
picks: the best ready job whose queue and lane have room under their
concurrency limits and are not rate-held at that claim's time; and every
claim spends a start of its queue's and its lane's buckets. After each
claim the store's own listing (``rate_limits``) must say the model's next
start and holds. At the end the clock moves on until every job has run,
and each settles exactly once.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.property.test_limits_model import (  # noqa: F401  (pytest finds fixtures by name)
    KINDS,
    LIMIT_KEYS,
    SETTINGS,
    Claim,
    Claims,
    DeleteLimit,
    Fresh,
    Ingest,
    Model,
    ModelJob,
    OwnerLocalClaims,
    PutLimit,
    Scenario,
    Settle,
    d1_bridge,
    fresh,
    postgres_server,
    postgres_templates,
)
from tests.property.test_limits_model import operations as limit_operations
from tests.support.models import model_examples
from tickwork import JobRecord
from tickwork.model.limits import LimitKind
from tickwork.model.rate_limits import RateLimit, allows_start, next_start_after

# ---------------------------------------------------------------- operations


@dataclass(frozen=True)
class PutRate:
    kind: LimitKind
    key: str
    starts: int
    period_ms: int
    burst: int


@dataclass(frozen=True)
class DeleteRate:
    kind: LimitKind
    key: str


@dataclass(frozen=True)
class PutBack:
    """The ``index``-th running job's executor was rate-limited: hold its
    queue (or lane) for ``hold_ms``, and put the job back."""

    index: int
    kind: LimitKind
    hold_ms: int


@dataclass(frozen=True)
class Advance:
    ms: int


RateOperation: TypeAlias = PutRate | DeleteRate | PutBack | Advance

rate_kinds = st.sampled_from(("queue", "lane"))
operations = st.one_of(
    limit_operations,
    limit_operations,
    rate_kinds.flatmap(lambda kind: st.builds(
        PutRate, st.just(kind), st.sampled_from(LIMIT_KEYS[kind]), st.integers(1, 4),
        st.sampled_from((100, 250, 1000, 3000)), st.integers(1, 4))),
    rate_kinds.flatmap(lambda kind: st.builds(
        DeleteRate, st.just(kind), st.sampled_from(LIMIT_KEYS[kind]))),
    st.builds(PutBack, st.integers(0, 5), rate_kinds, st.integers(1, 2000)),
    st.builds(Advance, st.sampled_from((0, 1, 37, 100, 333, 1000, 2500))),
    st.builds(Advance, st.integers(0, 1500)),
)


# --------------------------------------------------------------------- model


@dataclass
class Bucket:
    """One key's row: its bucket (None: a hold alone) and its hold."""

    rate: tuple[int, int, int] | None  # starts, period_ms, burst
    next_start: int = 0
    held_until: int = 0

    def held(self, now: int) -> bool:
        if self.held_until > now:
            return True
        return self.rate is not None and not allows_start(self.next_start, self.rate[0], now)


@dataclass
class RateModel(Model):
    rates: dict[tuple[LimitKind, str], Bucket] = field(default_factory=dict)

    def rate_held(self, job: ModelJob, now: int) -> bool:
        return any(bucket is not None and bucket.held(now) for bucket in (
            self.rates.get(("queue", job.queue)), self.rates.get(("lane", job.lane))))

    def startable(self, job: ModelJob, now: int) -> bool:
        """Ready, its queue and lane have room, and neither is rate-held."""
        return super().startable(job, now) and not self.rate_held(job, now)

    def spend(self, job: ModelJob, now: int) -> None:
        for key in (("queue", job.queue), ("lane", job.lane)):
            bucket = self.rates.get(key)  # type: ignore[arg-type]
            if bucket is not None and bucket.rate is not None:
                starts, period_ms, burst = bucket.rate
                bucket.next_start = next_start_after(bucket.next_start, starts, period_ms,
                                                     burst, now)

    def put_rate(self, kind: LimitKind, key: str, rate: tuple[int, int, int]) -> None:
        bucket = self.rates.get((kind, key))
        if bucket is None:
            self.rates[(kind, key)] = Bucket(rate)
        elif bucket.rate is None:
            bucket.rate, bucket.next_start = rate, 0
        elif bucket.rate != rate:
            # The next start's time, in ms rounded up, in the new units.
            bucket.next_start = -(-bucket.next_start // bucket.rate[0]) * rate[0]
            bucket.rate = rate

    def hold(self, kind: LimitKind, key: str, until: int) -> None:
        bucket = self.rates.setdefault((kind, key), Bucket(None))
        bucket.held_until = max(bucket.held_until, until)

    def listed(self, now: int) -> list[tuple[LimitKind, str, int | None, int | None]]:
        """What ``rate_limits(now)`` lists: (kind, key, next start in ms, hold in force)."""
        rows = []
        for (kind, key), bucket in self.rates.items():
            hold = bucket.held_until if bucket.held_until > now else None
            if bucket.rate is None and hold is None:
                continue
            next_at = None if bucket.rate is None else -(-bucket.next_start // bucket.rate[0])
            rows.append((kind, key, next_at, hold))
        return sorted(rows, key=lambda row: (row[0] != "queue", row[1]))


# ------------------------------------------------------------------- stores


async def put_rate(claims: Claims, limit: RateLimit, now: int) -> None:
    if isinstance(claims, OwnerLocalClaims):
        claims.store.put_rate_limit(limit, now)
    else:
        await claims.stores[1].put_rate_limit(limit, now)  # type: ignore[attr-defined]


async def delete_rate(claims: Claims, kind: LimitKind, key: str, now: int) -> None:
    if isinstance(claims, OwnerLocalClaims):
        claims.store.delete_rate_limit(kind, key, now)
    else:
        await claims.stores[0].delete_rate_limit(kind, key, now)  # type: ignore[attr-defined]


async def put_back(claims: Claims, claimer: int, job: JobRecord, token: str, kind: LimitKind,
                   key: str, until: int, now: int) -> JobRecord | None:
    if isinstance(claims, OwnerLocalClaims):
        back = claims.store.put_back_rate_limited(job.sequence, token, kind, key, until, now)
        claims.tokens.pop(job.job_id, None)
        return back
    store = claims.stores[claimer]  # type: ignore[attr-defined]
    found: JobRecord | None = await store.put_back_rate_limited(
        job.sequence, token, kind, key, until, now)
    return found


async def listed(claims: Claims, now: int) -> list[RateLimit]:
    if isinstance(claims, OwnerLocalClaims):
        return claims.store.rate_limits(now)
    found: list[RateLimit] = await claims.stores[0].rate_limits(now)  # type: ignore[attr-defined]
    return found


# ------------------------------------------------------------------ scenario


class RateScenario(Scenario):
    def __init__(self, claims: Claims) -> None:
        super().__init__(claims)
        self.model: RateModel = RateModel()

    async def apply(self, operation: Any) -> None:
        model = self.model
        if isinstance(operation, Advance):
            self.now += operation.ms
        elif isinstance(operation, PutRate):
            rate = (operation.starts, operation.period_ms, operation.burst)
            model.put_rate(operation.kind, operation.key, rate)
            await put_rate(self.claims, RateLimit(operation.kind, operation.key, *rate),
                           self.tick_clock())
        elif isinstance(operation, DeleteRate):
            model.rates.pop((operation.kind, operation.key), None)
            await delete_rate(self.claims, operation.kind, operation.key, self.tick_clock())
        elif isinstance(operation, PutBack):
            running = sorted(self.records)
            if not running:
                return
            job_id = running[operation.index % len(running)]
            record, token, claimer = self.records.pop(job_id)
            key = record.queue if operation.kind == "queue" else record.lane
            now = self.tick_clock()
            until = now + operation.hold_ms
            back = await put_back(self.claims, claimer, record, token, operation.kind, key,
                                  until, now)
            assert back is not None and (back.state, back.attempt, back.history) == (
                "queued", 1, ()), back
            model.hold(operation.kind, key, until)
            self.model_job(job_id).state = "queued"
            model.join(self.model_job(job_id))
            self.claimed.discard(job_id)  # it may be claimed again
        else:
            await super().apply(operation)

    async def settle(self, job_id: str, claim_next: bool) -> None:
        """As the limits scenario settles, with the next claim checked at
        the time it was taken (the settlement's)."""
        record, token, claimer = self.records.pop(job_id)
        next_token = self.token() if claim_next else None
        now = self.tick_clock()
        settled, claimed = await self.claims.settle(record, token, now, claimer, next_token)
        assert settled, f"{job_id}'s live claim did not settle"
        self.settlements[job_id] = self.settlements.get(job_id, 0) + 1
        self.model_job(job_id).state = "settled"
        if next_token is not None:
            await self.claimed_check(claimed, next_token, claimer, now)
        again, _ = await self.claims.settle(record, token, self.tick_clock(), claimer, None)
        assert not again, f"{job_id} settled twice"

    async def claimed_check(self, job: JobRecord | None, token: str, claimer: int,
                            at: int | None = None) -> None:
        model, now = self.model, self.now if at is None else at
        expected = model.pick(now)
        assert (job.job_id if job else None) == (expected.job_id if expected else None), (
            f"at {now} claimed {job.job_id if job else None}, the rule picks "
            f"{expected.job_id if expected else None} (limits {model.limits}, "
            f"rates {model.rates})")
        if job is None or expected is None:
            return
        assert job.job_id not in self.claimed, f"{job.job_id} claimed twice"
        assert job.started_at == now
        self.claimed.add(job.job_id)
        self.started(expected, now)
        model.spend(expected, now)
        self.records[job.job_id] = (job, token, claimer)
        in_queue = await self.claims.running_jobs("queue", job.queue)
        assert job.job_id in in_queue
        assert len(in_queue) <= model.queue_limit(job.queue), (job.queue, in_queue)
        lane_limit = model.limits.get(("lane", job.lane))
        if lane_limit is not None:
            in_lane = await self.claims.running_jobs("lane", job.lane)
            assert job.job_id in in_lane and len(in_lane) <= lane_limit, (job.lane, in_lane)
        # The store's buckets and holds, as listed, are the model's.
        rows = [(limit.kind, limit.key, limit.next_start_at, limit.held_until)
                for limit in await listed(self.claims, now)]
        assert rows == model.listed(now), (rows, model.listed(now))

    async def finish(self) -> None:
        """Claim and settle until every job has run once, moving the clock
        on (past every hold and period) whenever nothing may start."""
        for _ in range(6 * len(self.model.jobs) + 6):
            if not self.records:
                await self.apply(Claim(0))
                if not self.records:
                    if all(job.state == "settled" for job in self.model.jobs):
                        break
                    self.now += 10**6
                    continue
            await self.settle(sorted(self.records)[0], claim_next=True)
        assert {job.state for job in self.model.jobs} <= {"settled"}
        assert self.claimed == {job.job_id for job in self.model.jobs}
        assert set(self.settlements.values()) <= {1}
        assert len(self.settlements) == len(self.model.jobs)


@pytest.mark.parametrize("fresh", list(KINDS), indirect=True)
def test_every_claim_takes_the_job_the_rate_and_limits_rule_picks(
        fresh: Fresh, request: Any) -> None:  # noqa: F811  (the fixture imported above)
    kind = request.node.callspec.params["fresh"]

    @settings(max_examples=model_examples(KINDS[kind]), **SETTINGS)
    @given(ops=st.lists(operations, min_size=5, max_size=50))
    def example(ops: list[Any]) -> None:
        async def main() -> None:
            async with fresh() as claims:
                scenario = RateScenario(claims)
                for operation in ops:
                    await scenario.apply(operation)
                await scenario.finish()

        asyncio.run(main())

    example()


def test_the_operations_cover_every_kind() -> None:
    """The strategy draws every operation of both models (a guard against a
    strategy that silently stopped drawing one)."""
    drawn: set[type] = set()

    @settings(max_examples=300, database=None)
    @given(operations)
    def draw(operation: Any) -> None:
        drawn.add(type(operation))

    draw()
    assert drawn == {Ingest, Claim, Settle, PutLimit, DeleteLimit, PutRate, DeleteRate,
                     PutBack, Advance}
