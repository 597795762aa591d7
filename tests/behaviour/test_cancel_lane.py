"""Cancelling a lane's queued jobs, a page at a time, on every store.

``cancel_lane`` records one cancellation id on each queued job of the lane,
as ``cancel(..., only_if_queued=True)`` would: a job already running keeps
running, and the next ticks settle the cancelled ones without running them.
"""

from __future__ import annotations

import pytest

from tests.support import job
from tests.support.engine import Engine
from tickwork import InvalidArgument, LaneCancelled, TickResult


async def test_a_lanes_queued_jobs_are_cancelled_oldest_first_a_page_at_a_time(
        engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("done", queue="q0", lane="bad"))
    assert (await runtime.tick()).job_id == "done"  # settled history: left alone
    await runtime.ingest(job("running", queue="q1", lane="bad", payload={"do": "block"}))
    await runtime.ingest_many([job(f"j{index}", queue=f"q{index % 3 + 2}", lane="bad")
                               for index in range(5)])
    await runtime.ingest(job("other", queue="q2", lane="good"))
    tick = await engine.start(runtime, "running")
    wakes = engine.wake.calls

    first = await runtime.cancel_lane("bad", "tenant-gone", limit=2)
    assert (first.lane, first.cancelled, first.replayed, first.skipped) == ("bad", 2, 0, 0)
    assert first.cursor is not None  # a full page: there may be more
    assert engine.wake.calls > wakes
    cancelled = {job_id: (await runtime.read(job_id)).cancellation_id  # type: ignore[union-attr]
                 for job_id in ("j0", "j1", "j2")}
    assert cancelled == {"j0": "tenant-gone", "j1": "tenant-gone", "j2": None}
    rest = await runtime.cancel_lane("bad", "tenant-gone", limit=2, cursor=first.cursor)
    assert (rest.cancelled, rest.replayed, rest.skipped) == (2, 0, 0)
    last = await runtime.cancel_lane("bad", "tenant-gone", limit=2, cursor=rest.cursor)
    assert last == LaneCancelled("bad", 1, 0, 0, None)

    # The running job keeps running, the other lane keeps its job, and the
    # cancelled ones settle without their executor ever starting.
    engine.executor.release("running")
    assert (await tick).outcome == "completed"
    results = await runtime.drain()
    assert sorted((result.job_id, result.outcome) for result in results) == [
        *[(f"j{index}", "cancelled") for index in range(5)], ("other", "completed")]
    assert engine.executor.started == ["done", "running", "other"]


async def test_a_cancel_lane_sent_again_replays_and_changes_nothing(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest_many([job(f"j{index}", queue=f"q{index}", lane="bad")
                               for index in range(3)])
    assert (await runtime.cancel_lane("bad", "c-1")).cancelled == 3
    before = await engine.table()
    again = await runtime.cancel_lane("bad", "c-1")
    assert again == LaneCancelled("bad", 0, 3, 0, None)
    assert await engine.table() == before
    # Another id finds each job cancelled already (one cancellation per job).
    other = await runtime.cancel_lane("bad", "c-2")
    assert (other.cancelled, other.replayed, other.skipped) == (0, 0, 3)
    assert await engine.table() == before


async def test_a_job_that_started_is_not_cancelled_and_is_not_listed(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("head", queue="q", lane="bad", payload={"do": "block"}))
    await runtime.ingest(job("behind", queue="q", lane="bad"))
    tick = await engine.start(runtime, "head")
    result = await runtime.cancel_lane("bad", "c-1")
    assert result == LaneCancelled("bad", 1, 0, 0, None)
    head = await runtime.read("head")
    assert head is not None and (head.state, head.cancellation_id) == ("running", None)
    assert not engine.executor.signals["head"].aborted  # never told to stop
    engine.executor.release("head")
    assert await tick == TickResult("settled", job_id="head", outcome="completed")
    assert await runtime.tick() == TickResult("settled", job_id="behind", outcome="cancelled")


async def test_an_empty_or_unknown_lane_answers_zero_and_wakes_nothing(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("a", lane="kept"))
    wakes = engine.wake.calls
    assert await runtime.cancel_lane("nobody", "c-1") == LaneCancelled("nobody", 0, 0, 0, None)
    assert engine.wake.calls == wakes
    record = await runtime.read("a")
    assert record is not None and record.cancellation_id is None


@pytest.mark.parametrize(("call", "field"), [
    ({"lane": "", "cancellation_id": "c"}, "lane"),
    ({"lane": "l" * 513, "cancellation_id": "c"}, "lane"),
    ({"lane": "bad", "cancellation_id": ""}, "cancellation_id"),
    ({"lane": "bad", "cancellation_id": "c", "limit": 0}, "limit"),
    ({"lane": "bad", "cancellation_id": "c", "limit": 101}, "limit"),
    ({"lane": "bad", "cancellation_id": "c", "limit": True}, "limit"),
    ({"lane": "bad", "cancellation_id": "c", "cursor": "nonsense"}, "cursor"),
    ({"lane": "bad", "cancellation_id": "c", "cursor": f"0.{2**53}"}, "cursor"),
])
async def test_bad_arguments_are_refused_by_name_and_change_nothing(
        engine: Engine, call: dict[str, object], field: str) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("a", lane="bad"))
    before = await engine.table()
    with pytest.raises(InvalidArgument) as raised:
        await runtime.cancel_lane(**call)  # type: ignore[arg-type]
    assert raised.value.field == field
    assert await engine.table() == before
