"""Rate limits per queue and per lane, and an executor's ``RateLimited``, on every store.

A rate limit is a token bucket every claim checks and spends: ``starts``
per ``period_ms``, ``burst`` at once. An executor that meets someone
else's limit returns ``RateLimited``: its job goes back without using an
attempt and its lane (or queue) starts nothing until the hold ends. Each
test moves a manual clock (database time is overridden by it on the shared
stores), so every expected time is exact.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import job
from tests.support.engine import Engine
from tickwork import InvalidArgument, RateLimit, RateLimited, TickResult
from tickwork.events import Event

SECOND = 1_000


async def claims(jobs: Any, count: int) -> list[TickResult]:
    """Tick ``count`` times: each either runs a job or finds nothing."""
    return [await jobs.tick() for _ in range(count)]


def ran(results: list[TickResult]) -> list[str | None]:
    return [result.job_id for result in results if result.status != "idle"]


# ----------------------------------------------------------- the operations


async def test_rate_limits_are_set_listed_replaced_and_cleared(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    assert await jobs.rate_limits() == []
    assert await jobs.set_rate_limit("queue", "emails", 10, SECOND) is True
    assert await jobs.set_rate_limit("lane", "tenant-a", 100, 60 * SECOND, burst=5) is True
    # The same bucket again changes nothing; another one replaces it.
    assert await jobs.set_rate_limit("queue", "emails", 10, SECOND, burst=10) is False
    assert await jobs.set_rate_limit("queue", "emails", 20, SECOND) is True
    listed = await jobs.rate_limits()
    assert listed == [
        RateLimit("queue", "emails", 20, SECOND, 20, next_start_at=listed[0].next_start_at,
                  held_until=None, updated_at=now()),
        RateLimit("lane", "tenant-a", 100, 60 * SECOND, 5,
                  next_start_at=listed[1].next_start_at, held_until=None, updated_at=now())]
    # A full bucket allows a start now.
    assert all(limit.next_start_at is not None and limit.next_start_at <= now()
               for limit in listed)
    assert await jobs.clear_rate_limit("queue", "emails") is True
    assert await jobs.clear_rate_limit("queue", "emails") is False
    assert await jobs.clear_rate_limit("lane", "nobody") is False
    assert [(limit.kind, limit.key) for limit in await jobs.rate_limits()] == [
        ("lane", "tenant-a")]
    other = engine.another_process()
    assert [(limit.kind, limit.key, limit.starts) for limit in await other.rate_limits()] == [
        ("lane", "tenant-a", 100)]


@pytest.mark.parametrize(("args", "field"), [
    (("tenant", "q", 1, SECOND), "kind"),
    (("queue", "", 1, SECOND), "queue"),
    (("lane", "", 1, SECOND), "lane"),
    (("queue", "q", 0, SECOND), "starts"),
    (("queue", "q", 100_001, SECOND), "starts"),
    (("queue", "q", True, SECOND), "starts"),
    (("queue", "q", 1, 0), "period_ms"),
    (("queue", "q", 1, 31 * 86_400_000 + 1), "period_ms"),
    (("queue", "q", 1, "1000"), "period_ms"),
    (("queue", "q", 1, SECOND, 0), "burst"),
])
async def test_a_bad_rate_limit_is_refused_by_name_and_nothing_changes(
        engine: Engine, args: tuple[Any, ...], field: str) -> None:
    jobs = engine.runtime()
    await jobs.set_rate_limit("queue", "kept", 2, SECOND)
    before = await jobs.rate_limits()
    with pytest.raises(InvalidArgument) as caught:
        await jobs.set_rate_limit(*args)
    assert caught.value.field == field
    if field in ("kind", "queue", "lane"):
        with pytest.raises(InvalidArgument):
            await jobs.clear_rate_limit(*args[:2])
    assert await jobs.rate_limits() == before


# ------------------------------------------------------------- the bucket


async def test_a_queue_starts_its_burst_then_one_job_per_interval(engine: Engine) -> None:
    """2 starts per second, burst 2, on a queue that may run 10 at once:
    two start at once, then one every 500 ms, to the millisecond."""
    jobs, now = engine.timed_runtime()
    await jobs.set_limit("queue", "api", 10)
    await jobs.set_rate_limit("queue", "api", 2, SECOND)
    for index in range(5):
        await jobs.ingest(job(f"a{index}", queue="api"))
    assert ran(await claims(jobs, 3)) == ["a0", "a1"]
    assert await jobs.next_tick_at() == now() + 500
    now.advance(499)
    assert ran(await claims(jobs, 2)) == []
    now.advance(1)
    assert ran(await claims(jobs, 2)) == ["a2"]
    now.advance(500)
    assert ran(await claims(jobs, 2)) == ["a3"]
    # A quiet spell refills the bucket up to its burst, no further.
    now.advance(10 * SECOND)
    await jobs.ingest(job("a5", queue="api"))
    await jobs.ingest(job("a6", queue="api"))
    assert ran(await claims(jobs, 4)) == ["a4", "a5"]
    assert await jobs.next_tick_at() == now() + 500


async def test_a_burst_below_the_rate_spreads_the_starts(engine: Engine) -> None:
    """3 starts per 3 seconds with a burst of 1: one start per second."""
    jobs, now = engine.timed_runtime()
    await jobs.set_limit("queue", "api", 10)
    await jobs.set_rate_limit("queue", "api", 3, 3 * SECOND, burst=1)
    for index in range(3):
        await jobs.ingest(job(f"a{index}", queue="api"))
    assert ran(await claims(jobs, 2)) == ["a0"]
    now.advance(SECOND - 1)
    assert ran(await claims(jobs, 1)) == []
    now.advance(1)
    assert ran(await claims(jobs, 2)) == ["a1"]


async def test_a_lane_bucket_spans_queues_and_holds_no_other_lane(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.set_rate_limit("lane", "tenant-a", 1, SECOND)
    await jobs.ingest(job("a-email", queue="emails", lane="tenant-a"))
    await jobs.ingest(job("a-export", queue="exports", lane="tenant-a"))
    await jobs.ingest(job("b-export", queue="exports", lane="tenant-b"))
    # tenant-a's second job waits for its bucket; the claim passes over it
    # to tenant-b's, though it came first in its queue.
    assert ran(await claims(jobs, 4)) == ["a-email", "b-export"]
    wait = await jobs.explain("a-export")
    assert wait is not None
    assert [(hold.kind, hold.until) for hold in wait.holds] == [
        ("lane_rate_limited", now() + SECOND)]
    now.advance(SECOND)
    assert ran(await claims(jobs, 2)) == ["a-export"]


async def test_clearing_a_rate_limit_lets_its_jobs_start_at_once(engine: Engine) -> None:
    jobs, _ = engine.timed_runtime()
    await jobs.set_limit("queue", "api", 10)
    await jobs.set_rate_limit("queue", "api", 1, 60 * SECOND)
    for index in range(3):
        await jobs.ingest(job(f"a{index}", queue="api"))
    assert ran(await claims(jobs, 2)) == ["a0"]
    assert await jobs.clear_rate_limit("queue", "api") is True
    assert ran(await claims(jobs, 3)) == ["a1", "a2"]


# ------------------------------------------------------- RateLimited holds


async def test_a_rate_limited_job_goes_back_without_using_an_attempt(engine: Engine) -> None:
    events: list[Event] = []
    jobs, now = engine.timed_runtime(on_event=events.append)
    await jobs.ingest(job("hook", queue="webhooks", lane="example.com",
                          payload={"do": "rate_limited", "retry_after_ms": 30 * SECOND}))
    await jobs.ingest(job("other", queue="webhooks", lane="example.org"))
    await jobs.ingest(job("later", queue="webhooks", lane="example.com"))
    held_at = now()

    result = await jobs.tick()
    assert (result.status, result.job_id, result.reason, result.retry_at) == (
        "requeued", "hook", "rate_limited", held_at + 30 * SECOND)
    record = await jobs.read("hook")
    assert record is not None
    assert (record.state, record.attempt, record.history, record.due_at, record.outcome) == (
        "queued", 1, (), None, None)
    [hold] = await jobs.rate_limits()
    assert (hold.kind, hold.key, hold.starts, hold.held_until) == (
        "lane", "example.com", None, held_at + 30 * SECOND)
    # Its lane holds; another lane of the queue runs.
    assert ran(await claims(jobs, 3)) == ["other"]
    # "later" is held by its lane, and behind "hook" in its serial queue.
    wait = await jobs.explain("later")
    assert wait is not None
    assert [(h.kind, h.until, h.job_ids) for h in wait.holds] == [
        ("behind_head", None, ("hook",)), ("lane_rate_limited", held_at + 30 * SECOND, ())]
    assert await jobs.next_tick_at() == held_at + 30 * SECOND
    now.advance(30 * SECOND)
    assert ran(await claims(jobs, 3)) == ["hook", "later"]
    record = await jobs.read("hook")
    assert record is not None
    assert (record.outcome, record.attempt) == ("completed", 1)
    assert [(event.kind, event.job_id, event.reason, event.retry_at) for event in events
            if event.job_id == "hook" and event.kind in ("requeued", "settled")] == [
        ("requeued", "hook", "rate_limited", held_at + 30 * SECOND),
        ("settled", "hook", None, None)]
    # A hold that has ended is no longer listed.
    assert await jobs.rate_limits() == []


async def test_a_job_that_names_no_lane_holds_its_queue(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.ingest(job("a", queue="api", lane="api",
                          payload={"do": "rate_limited", "retry_after_ms": SECOND}))
    await jobs.ingest(job("b", queue="api", lane="tenant-b"))
    await jobs.ingest(job("c", queue="elsewhere", lane="api"))
    assert (await jobs.tick()).reason == "rate_limited"
    # The queue holds (b too); the lane named like the queue holds nothing.
    assert ran(await claims(jobs, 3)) == ["c"]
    now.advance(SECOND)
    assert ran(await claims(jobs, 3)) == ["a", "b"]


async def test_an_executor_may_name_what_to_hold(engine: Engine) -> None:
    jobs, _ = engine.timed_runtime()
    await jobs.ingest(job("a", queue="api", lane="tenant-a",
                          payload={"do": "rate_limited", "retry_after_ms": SECOND,
                                   "hold": "queue"}))
    await jobs.ingest(job("b", queue="api", lane="tenant-b"))
    assert (await jobs.tick()).reason == "rate_limited"
    [hold] = await jobs.rate_limits()
    assert (hold.kind, hold.key) == ("queue", "api")
    assert ran(await claims(jobs, 2)) == []


async def test_clearing_a_rate_limit_ends_its_hold(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.set_limit("queue", "api", 2)
    await jobs.ingest(job("long", queue="api", lane="api",
                          payload={"do": "rate_limited", "retry_after_ms": 60 * SECOND}))
    assert (await jobs.tick()).reason == "rate_limited"
    await jobs.ingest(job("next", queue="api", lane="api"))
    assert ran(await claims(jobs, 2)) == []
    [hold] = await jobs.rate_limits()
    assert hold.held_until == now() + 60 * SECOND
    assert await jobs.clear_rate_limit("queue", "api") is True
    assert ran(await claims(jobs, 3)) == ["long", "next"]


async def test_a_cancellation_recorded_while_it_ran_settles_it_cancelled(
        engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.ingest(job("a", payload={"do": "block"}))
    running = await engine.start(jobs, "a")
    # Recorded by another process: the execution is not told, and comes
    # back rate-limited; the put-back finds the cancellation and settles.
    assert (await engine.another_process().cancel("a", "c1")).status == "recorded"
    engine.executor.release("a", RateLimited(SECOND))
    result = await running
    assert (result.status, result.outcome) == ("settled", "cancelled")
    record = await jobs.read("a")
    assert record is not None and record.outcome == "cancelled"
