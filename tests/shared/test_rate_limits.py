"""Rate limits on a shared store: a worker's ticks start a bucket's jobs
exactly when the GCRA rule allows, by the test's clock; and several workers,
each draining several loops over one database by its clock, never start
more of a queue's or a lane's jobs in any stretch of time than the rule
allows (their start times, replayed through ``tickwork.model.rate_limits``),
and settle every job exactly once.

Buckets are set through a runtime's store (the operations that set them are
the lead's).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.support import job
from tests.support.limits import RunningCounts
from tests.support.shared import EPOCH_MS, SharedHarness
from tests.support.stores import shared_harness
from tickwork import Completed, JobRecord
from tickwork.model.limits import ConcurrencyLimit
from tickwork.model.rate_limits import RateLimit, allows_start, next_start_after

#: The shared stores whose claims enforce rate limits on this branch;
#: PostgreSQL joins with one more name once its store has them.
RATED_KINDS = ("d1-external", "d1-builtin")
T = EPOCH_MS


@pytest_asyncio.fixture(params=RATED_KINDS)
async def rated(request: pytest.FixtureRequest) -> AsyncIterator[SharedHarness]:
    async with shared_harness(request.param, request) as harness:
        yield harness


def conforms(limit: RateLimit, times: list[int]) -> bool:
    """Whether starts at ``times`` (in order) are all allowed by ``limit``'s
    bucket, starting full: the model's rule, replayed."""
    assert limit.starts is not None and limit.period_ms is not None
    assert limit.burst is not None
    next_start = 0
    for at in times:
        if not allows_start(next_start, limit.starts, at):
            return False
        next_start = next_start_after(next_start, limit.starts, limit.period_ms, limit.burst, at)
    return True


async def test_a_workers_ticks_start_a_buckets_jobs_when_the_rule_allows(
        rated: SharedHarness) -> None:
    runtime = rated.runtime()
    store = runtime._store
    await store.put_limit(ConcurrencyLimit("queue", "api", 10), None)
    await store.put_rate_limit(RateLimit("queue", "api", 3, 1000, 3), None)
    await runtime.ingest_many([job(f"a{index}", queue="api") for index in range(6)]
                              + [job("other", queue="other")])
    started: list[tuple[str, int]] = []
    while len(started) < 7:
        result = await runtime.tick()
        if result.status == "settled":
            started.append((result.job_id or "", rated.now.ms - T))
            continue
        assert result.status == "idle", result
        assert not await runtime.has_pending_work()
        at = await runtime.next_tick_at()
        assert at is not None and at > rated.now.ms
        rated.now.ms = at - 1
        assert (await runtime.tick()).status == "idle"
        rated.now.ms = at
    # Three at once, the claim passing over api's held jobs to "other", then
    # one every 333.33.. ms, on whole ms: 334, 667, 1000.
    assert started == [("a0", 0), ("a1", 0), ("a2", 0), ("other", 0), ("a3", 334),
                       ("a4", 667), ("a5", 1000)]
    [limit] = await store.rate_limits(rated.now.ms)
    assert limit.next_start_at == T + 1334


async def test_a_put_back_holds_its_lane_on_every_worker(rated: SharedHarness) -> None:
    first, second = rated.runtime(), rated.runtime()
    await first.ingest_many([job("x", queue="q1", lane="tenant"),
                             job("y", queue="q2", lane="tenant"),
                             job("z", queue="q3", lane="other")])
    claim = await first._store.claim("token", 30_000, T, guarded=False)
    assert claim is not None and claim.job_id == "x"
    back = await first._store.put_back_rate_limited(claim.sequence, "token", "lane", "tenant",
                                                      T + 2000, T)
    assert back is not None and (back.state, back.attempt) == ("queued", 1)
    assert [result.job_id for result in await second.drain()] == ["z"]
    assert await second.next_tick_at() == T + 2000
    rated.now.ms = T + 2000
    assert sorted(result.job_id or "" for result in await second.drain()) == ["x", "y"]


async def test_workers_draining_several_loops_never_start_more_than_a_bucket_allows(
        rated: SharedHarness) -> None:
    """Three workers, each draining three loops by database time (their
    budgets let them sleep until a bucket's next start), over one queue with
    a bucket and a lane with another across queues; every start is
    recorded by the database (started_at), and each key's starts, in order,
    are replayed through the model's rule."""
    counts = RunningCounts(_complete)
    workers = [rated.runtime(db_time=True, execute=counts) for _ in range(3)]
    store = workers[0]._store
    api = RateLimit("queue", "api", 10, 1000, 3)
    tenant = RateLimit("lane", "tenant", 5, 1000, 2)
    await store.put_limit(ConcurrencyLimit("queue", "api", 10), None)
    await store.put_rate_limit(api, None)
    await store.put_rate_limit(tenant, None)
    jobs = [job(f"a{index:02}", queue="api", lane=f"l{index % 3}") for index in range(12)]
    jobs += [job(f"t{index:02}", queue=f"t{index % 4}", lane="tenant") for index in range(7)]
    jobs += [job(f"f{index}", queue=f"free{index}") for index in range(4)]
    await workers[0].ingest_many(jobs)
    await asyncio.gather(*(worker.drain(concurrency=3, budget_ms=6000) for worker in workers))
    assert set(counts.starts.values()) == {1}  # each job ran once
    assert set((await rated.job_states()).values()) == {("settled", "completed")}
    starts: dict[str, list[int]] = defaultdict(list)
    for job_id, queue, lane, started_at in await rated.query(
            "SELECT job_id, queue, lane, started_at FROM tickwork_jobs"):
        assert started_at is not None, job_id
        if queue == "api":
            starts["api"].append(int(started_at))
        if lane == "tenant":
            starts["tenant"].append(int(started_at))
    assert len(starts["api"]) == 12 and len(starts["tenant"]) == 7
    assert conforms(api, sorted(starts["api"]))
    assert conforms(tenant, sorted(starts["tenant"]))
    # The buckets were the limit: starts were spread, not all at once.
    assert max(starts["api"]) - min(starts["api"]) >= 800  # 9 after the burst, 100 ms apart
    assert max(starts["tenant"]) - min(starts["tenant"]) >= 1000  # 5 after it, 200 ms apart


async def _complete(job: JobRecord, signal: object) -> Completed:
    return Completed()
