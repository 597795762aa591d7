"""The rate limit's rule in Python (``tickwork.model.rate_limits``): the GCRA
bucket every store writes in SQL, its arguments, and what ``RateLimited``
holds. The stores are held to the same rule by their own tests."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork import InvalidArgument, JobRecord, RateLimit, RateLimited
from tickwork.lifecycle.rules import (
    RATE_LIMITED,
    decide_holds,
    rate_hold_of,
    settlement_for_result,
)
from tickwork.model.rate_limits import (
    MAX_RATE_PERIOD_MS,
    MAX_RATE_STARTS,
    allows_start,
    next_start_after,
    released_at,
    validate_rate_limit,
)

T0 = 1_800_000_000_000


def starts_at_once(starts: int, period_ms: int, burst: int, times: list[int]) -> list[int]:
    """Replay claims wanted at ``times`` (ms, ascending) against a full
    bucket: the times a start was allowed."""
    next_start, allowed = 0, []
    for now in times:
        if allows_start(next_start, starts, now):
            next_start = next_start_after(next_start, starts, period_ms, burst, now)
            allowed.append(now)
    return allowed


def test_a_full_bucket_allows_its_burst_then_one_start_per_interval() -> None:
    # 3 per second, burst 3: three at once, then every 333 1/3 ms, exactly.
    wanted = [T0] * 5 + [T0 + 333, T0 + 334, T0 + 666, T0 + 667, T0 + 1000]
    assert starts_at_once(3, 1000, 3, wanted) == [T0, T0, T0, T0 + 334, T0 + 667, T0 + 1000]


def test_a_quiet_bucket_refills_to_its_burst_and_no_further() -> None:
    wanted = [T0, T0 + 60_000, T0 + 60_000, T0 + 60_000]
    assert starts_at_once(10, 1000, 2, wanted) == [T0, T0 + 60_000, T0 + 60_000]


@settings(max_examples=300, deadline=None)
@given(starts=st.integers(1, 50), period_ms=st.integers(1, 5_000), burst=st.integers(1, 20),
       gaps=st.lists(st.integers(0, 700), min_size=1, max_size=80))
def test_no_window_starts_more_than_the_burst_and_the_rate(
        starts: int, period_ms: int, burst: int, gaps: list[int]) -> None:
    """Over any stretch of T ms a key starts at most burst + T * starts /
    period_ms jobs, however the claims come."""
    times, now = [], T0
    for gap in gaps:
        now += gap
        times.append(now)
    allowed = starts_at_once(starts, period_ms, burst, times)
    for first, begin in enumerate(allowed):
        for last in range(first, len(allowed)):
            span = allowed[last] - begin
            assert (last - first + 1) * period_ms <= burst * period_ms + span * starts


def test_released_at_is_the_later_of_the_hold_and_the_bucket() -> None:
    limit = RateLimit("lane", "a", 1, 1000, 1, next_start_at=T0 + 500, held_until=T0 + 900)
    assert released_at(limit, T0) == T0 + 900
    assert released_at(limit, T0 + 600) == T0 + 900
    assert released_at(limit, T0 + 900) is None
    bucket_only = RateLimit("queue", "q", 1, 1000, 1, next_start_at=T0 + 500)
    assert released_at(bucket_only, T0) == T0 + 500
    assert released_at(RateLimit("queue", "q", None, None, None), T0) is None


@pytest.mark.parametrize(("args", "field"), [
    (("q", "x", 1, 1), "kind"),
    (("queue", "", 1, 1), "queue"),
    (("lane", "", 1, 1), "lane"),
    (("queue", "x", 0, 1), "starts"),
    (("queue", "x", MAX_RATE_STARTS + 1, 1), "starts"),
    (("queue", "x", 1.0, 1), "starts"),
    (("queue", "x", False, 1), "starts"),
    (("queue", "x", 1, 0), "period_ms"),
    (("queue", "x", 1, MAX_RATE_PERIOD_MS + 1), "period_ms"),
    (("queue", "x", 1, 1, 0), "burst"),
    (("queue", "x", 1, 1, MAX_RATE_STARTS + 1), "burst"),
])
def test_bad_arguments_are_refused_by_name(args: tuple[Any, ...], field: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        validate_rate_limit(*args)
    assert caught.value.field == field


def test_the_burst_defaults_to_the_starts() -> None:
    assert validate_rate_limit("lane", "t", 7, 1000) == RateLimit("lane", "t", 7, 1000, 7)


def job(queue: str, lane: str) -> JobRecord:
    return JobRecord("j", queue, lane, 0, {}, None, "queued", None, None, 1, 0, 0, 0, None)


@pytest.mark.parametrize(("queue", "lane", "hold", "expected"), [
    ("q", "tenant", None, ("lane", "tenant")),
    ("q", "q", None, ("queue", "q")),  # a job that names no lane holds its queue
    ("q", "tenant", "queue", ("queue", "q")),
    ("q", "q", "lane", ("lane", "q")),
])
def test_what_rate_limited_holds(queue: str, lane: str, hold: Any,
                                 expected: tuple[str, str]) -> None:
    assert rate_hold_of(job(queue, lane), RateLimited(1000, hold)) == expected


def test_rate_limited_is_no_outcome_and_is_checked_where_it_is_made() -> None:
    settlement = settlement_for_result(RateLimited(5000))
    assert (settlement.rate_limited, settlement.failure_reason) == (
        RateLimited(5000), RATE_LIMITED)
    for bad in (-1, 1.5, True, 2**53):
        with pytest.raises(InvalidArgument):
            RateLimited(bad)
    with pytest.raises(InvalidArgument):
        RateLimited(10, "tenant")  # type: ignore[arg-type]


def test_holds_name_the_rate_limits_that_wait() -> None:
    queue_rate = RateLimit("queue", "q", 1, 1000, 1, next_start_at=T0 + 400)
    lane_rate = RateLimit("lane", "t", None, None, None, held_until=T0 + 9000)
    holds = decide_holds(job("q", "t"), T0, paused=False, queue_limit=1, queue_running=(),
                         ahead=(), queue_rate=queue_rate, lane_rate=lane_rate)
    assert [(hold.kind, hold.until) for hold in holds] == [
        ("queue_rate_limited", T0 + 400), ("lane_rate_limited", T0 + 9000)]
    assert holds[1].describe().startswith("its lane is rate-limited until ")
    assert decide_holds(job("q", "t"), T0 + 9000, paused=False, queue_limit=1,
                        queue_running=(), ahead=(), queue_rate=queue_rate,
                        lane_rate=lane_rate) == ()
