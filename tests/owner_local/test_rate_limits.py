"""Rate limits on an owner-local runtime, on sqlite3 and both Durable Object
storage shapes (and, in the real-Pyodide tier, the JavaScript ctx.storage).

Buckets and holds are set through the runtime's store here (the operations
that set them are the lead's, on every surface). The clock is the test's:
a tick that finds nothing says when the next start is allowed
(``next_tick_at``), and the test moves the clock there, so every start
time below is an exact integer the GCRA rule of
``tickwork.model.rate_limits`` gives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tests.support import Harness, job
from tickwork import OwnerRuntime
from tickwork.model.limits import ConcurrencyLimit, LimitKind
from tickwork.model.rate_limits import RateLimit, allows_start, next_start_after
from tickwork.stores.owner_local import EVERY_JOB

T = 1_800_000_000_000
BLOCK = {"do": "block"}


class Clock:
    """The runtime's clock, moved by the test."""

    def __init__(self, now: int = T) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def set_rate(runtime: OwnerRuntime, kind: LimitKind, key: str, starts: int, period_ms: int,
             burst: int | None = None) -> None:
    limit = RateLimit(kind, key, starts, period_ms, starts if burst is None else burst)
    assert runtime._store.put_rate_limit(limit, runtime._clock())


async def start_times(runtime: OwnerRuntime, clock: Clock, count: int) -> list[tuple[str, int]]:
    """Tick until ``count`` jobs settled, moving the clock to ``next_tick_at``
    whenever a tick finds nothing; (job, start time) in start order. Before
    each move, a tick one ms early must find nothing either."""
    started: list[tuple[str, int]] = []
    while len(started) < count:
        result = await runtime.tick()
        if result.status == "settled":
            record = runtime.read(result.job_id or "")
            assert record is not None and record.started_at == clock.now
            started.append((record.job_id, clock.now))
            continue
        assert result.status == "idle", result
        assert not runtime.has_pending_work()
        at = runtime.next_tick_at()
        assert at is not None and at > clock.now
        clock.now = at - 1
        assert (await runtime.tick()).status == "idle"
        clock.now = at
    return started


def gcra_starts(starts: int, period_ms: int, burst: int, times: list[int]) -> list[int]:
    """The model's rule replayed: each time, the earliest a start is allowed
    at or after it (one start per entry)."""
    next_start, allowed = 0, []
    for at in times:
        while not allows_start(next_start, starts, at):
            at = -(-next_start // starts)  # the next start, rounded up to a ms
        allowed.append(at)
        next_start = next_start_after(next_start, starts, period_ms, burst, at)
    return allowed


async def test_a_bucket_of_3_per_second_starts_3_at_once_then_one_every_third_of_a_second(
        harness: Harness) -> None:
    clock = Clock()
    runtime = harness.runtime(clock=clock)
    runtime._store.put_limit(ConcurrencyLimit("queue", "api", 10), T)
    set_rate(runtime, "queue", "api", 3, 1000)
    runtime.ingest_many([job(f"a{index}", queue="api") for index in range(10)])
    started = await start_times(runtime, clock, 10)
    # Three at once (the burst), then one per 333.33.. ms: the bucket keeps
    # the thirds, so the starts fall on 334, 667, 1000, 1334, ...
    assert [at - T for _, at in started] == [0, 0, 0, 334, 667, 1000, 1334, 1667, 2000, 2334]
    assert [job_id for job_id, _ in started] == [f"a{index}" for index in range(10)]
    assert [at for _, at in started] == gcra_starts(3, 1000, 3, [T] * 10)
    # Idle again: the bucket's next start is listed, in ms rounded up.
    [limit] = runtime._store.rate_limits(clock.now)
    assert limit.next_start_at == T + 2667
    assert runtime.next_tick_at() is None  # no job left to hold


async def test_a_burst_smaller_than_the_rate_starts_that_many_at_once(
        harness: Harness) -> None:
    clock = Clock()
    runtime = harness.runtime(clock=clock)
    runtime._store.put_limit(ConcurrencyLimit("queue", "api", 10), T)
    set_rate(runtime, "queue", "api", 4, 1000, burst=2)
    runtime.ingest_many([job(f"a{index}", queue="api") for index in range(5)])
    started = await start_times(runtime, clock, 5)
    assert [at - T for _, at in started] == [0, 0, 250, 500, 750]
    # After a quiet spell the bucket has refilled to its burst, never more.
    clock.now = T + 60_000
    runtime.ingest_many([job(f"b{index}", queue="api") for index in range(4)])
    later = await start_times(runtime, clock, 4)
    assert [at - T for _, at in later] == [60_000, 60_000, 60_250, 60_500]
    assert [at for _, at in started + later] == gcra_starts(
        4, 1000, 2, [T] * 5 + [T + 60_000] * 4)


async def test_a_lane_bucket_counts_the_lanes_starts_across_queues(harness: Harness) -> None:
    clock = Clock()
    runtime = harness.runtime(clock=clock)
    set_rate(runtime, "lane", "tenant", 2, 1000)
    runtime.ingest_many([job("t1", queue="q1", lane="tenant"), job("t2", queue="q2", lane="tenant"),
                         job("t3", queue="q3", lane="tenant"), job("o", queue="q4", lane="other")])
    started = await start_times(runtime, clock, 4)
    # Two of the lane at once, then the other lane's job (the claim passes
    # over t3, held by its lane's bucket), then t3 once a start is allowed.
    assert [(job_id, at - T) for job_id, at in started] == [
        ("t1", 0), ("t2", 0), ("o", 0), ("t3", 500)]


async def test_a_rate_limited_put_back_holds_its_queue_until_then_and_nothing_else(
        harness: Harness) -> None:
    clock = Clock()
    runtime = harness.runtime(clock=clock)
    store = runtime._store
    runtime.ingest_many([job("first", queue="api", priority=10),
                         job("second", queue="api", priority=10),
                         job("mail", queue="mail", lane="api"),  # a lane named like the queue
                         job("other", queue="other")])
    claim = store.claim_next(EVERY_JOB, "token", T)
    assert claim is not None and claim.job_id == "first"
    back = store.put_back_rate_limited(claim.sequence, "token", "queue", "api", T + 5000, T)
    assert back is not None and (back.state, back.attempt) == ("queued", 1)
    # The best jobs are api's (priority 10): the claims pass over them.
    started = await start_times(runtime, clock, 4)
    assert [(job_id, at - T) for job_id, at in started] == [
        ("mail", 0), ("other", 0), ("first", 5000), ("second", 5000)]


async def test_a_drain_held_only_by_a_rate_limit_ends_and_says_when_to_wake(
        harness: Harness) -> None:
    clock = Clock()
    runtime = harness.runtime(clock=clock)
    set_rate(runtime, "queue", "api", 1, 60_000)
    runtime.ingest_many([job("a", queue="api", lane="tenant"),
                         job("b", queue="api", lane="tenant")])
    assert [result.job_id for result in await runtime.drain()] == ["a"]
    assert not runtime.has_pending_work()
    pending, next_due, now = runtime._store.next_work(clock.now)
    assert (bool(pending), next_due, now) == (False, T + 60_000, T)
    # What the Durable Object's alarm and the host's timer are armed for.
    assert runtime.next_tick_at() == T + 60_000
    # A hold on the queue later than its bucket's next start is its release.
    store = runtime._store
    store.put_back_rate_limited(0, "none", "queue", "api", T + 70_000, clock.now)
    assert runtime.next_tick_at() == T + 70_000
    # Held by its lane too, until later: the queue's release comes first,
    # a tick then finds the job still held, and says the lane's.
    store.put_back_rate_limited(0, "none", "lane", "tenant", T + 90_000, clock.now)
    assert runtime.next_tick_at() == T + 70_000
    clock.now = T + 70_000
    assert (await runtime.tick()).status == "idle"
    assert runtime.next_tick_at() == T + 90_000
    # A paused queue's held jobs wake nothing.
    runtime.pause("api")
    assert runtime.next_tick_at() is None
    runtime.resume("api")
    clock.now = T + 90_000
    assert runtime.next_tick_at() == T + 90_000
    assert [result.job_id for result in await runtime.drain()] == ["b"]


async def test_a_parked_slot_wakes_when_the_bucket_allows_while_another_runs_a_long_job(
        harness: Harness) -> None:
    """With two slots, one executing a long job, the other finds the next job
    rate-held and parks: it must wake at the release by itself (no arrival,
    no settlement, no poll). The clock follows the event loop's, so the
    park's timeout is the release's distance."""
    loop = asyncio.get_running_loop()
    base = loop.time()

    def now() -> int:
        return T + int((loop.time() - base) * 1000)

    runtime = harness.runtime(clock=now, concurrency=2)
    set_rate(runtime, "queue", "api", 1, 300)
    runtime.ingest_many([job("long", queue="slow", payload=BLOCK),
                         job("api1", queue="api"), job("api2", queue="api")])
    drain = asyncio.ensure_future(runtime.drain())
    await until(lambda: "api2" in harness.executor.started, timeout_s=3.0)
    assert harness.executor.running >= 1 and "long" in harness.executor.signals
    first, second = (runtime.read(job_id) for job_id in ("api1", "api2"))
    assert first is not None and second is not None
    assert first.started_at is not None and second.started_at is not None
    assert second.started_at - first.started_at >= 300
    harness.executor.release("long")
    results = await drain
    assert sorted(result.job_id or "" for result in results) == ["api1", "api2", "long"]


async def until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Let the event loop run until ``predicate()`` holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.002)


async def test_the_concurrent_lane_and_the_serial_slot_spend_the_same_buckets(
        harness: Harness) -> None:
    clock = Clock()
    runtime = harness.concurrent_runtime(lane="fast", clock=clock)
    runtime._store.put_limit(ConcurrencyLimit("queue", "shared", 2), T)
    set_rate(runtime, "queue", "shared", 1, 1000)
    set_rate(runtime, "lane", "fast", 1, 500)
    runtime.ingest_many([job("serial", queue="shared", lane="slow"),
                         job("fast1", queue="shared", lane="fast"),
                         job("fast2", queue="elsewhere", lane="fast"),
                         job("fast3", queue="elsewhere", lane="fast")])
    # The serial slot's claim spends the queue's only start: the lane's slot
    # passes over fast1 (its queue is held) to fast2, which spends the lane's.
    assert (await runtime.tick()).job_id == "serial"
    assert (await runtime.tick_concurrent()).job_id == "fast2"
    assert (await runtime.tick_concurrent()).status == "idle"
    assert runtime.next_tick_at() == T + 500
    clock.now = T + 500  # the lane's next start; fast1's queue is held still
    assert (await runtime.tick_concurrent()).job_id == "fast3"
    assert runtime.next_tick_at() == T + 1000
    clock.now = T + 1000
    assert (await runtime.tick_concurrent()).job_id == "fast1"
