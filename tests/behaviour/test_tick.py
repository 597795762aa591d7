"""Ticks: selection order, one job at a time per queue and runtime, honest outcomes."""

from __future__ import annotations

import asyncio

import pytest

from tests.support import job
from tests.support.engine import Engine
from tickwork import Completed, TickResult


async def test_idle_when_nothing_is_queued(engine: Engine) -> None:
    assert await engine.runtime().tick() == TickResult("idle")


async def test_highest_priority_oldest_first_across_queues(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("low-old", queue="a", priority=1))
    await runtime.ingest(job("high-old", queue="b", priority=5))
    await runtime.ingest(job("low-new", queue="c", priority=1))
    await runtime.ingest(job("high-new", queue="d", priority=5))
    await runtime.ingest(job("negative", queue="e", priority=-3))
    await runtime.drain()
    assert engine.executor.started == ["high-old", "high-new", "low-old", "low-new", "negative"]


async def test_a_queue_runs_its_head_priority_then_enqueue_order(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("first", queue="q", priority=0))
    await runtime.ingest(job("urgent", queue="q", priority=9))
    await runtime.ingest(job("second", queue="q", priority=0))
    await runtime.drain()
    assert engine.executor.started == ["urgent", "first", "second"]
    assert await runtime.read_queue_head("q") is None


async def test_a_running_job_holds_its_queue(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("blocker", queue="q", payload={"do": "block"}))
    tick = await engine.start(runtime, "blocker")
    await runtime.ingest(job("better", queue="q", priority=100))
    # Another process skips the held queue and runs another queue's head.
    engine.others_are_alive()
    other = engine.another_process()
    await other.ingest(job("elsewhere", queue="other"))
    assert (await other.tick()).job_id == "elsewhere"
    assert (await other.tick()).status == "idle"
    engine.executor.release("blocker")
    assert (await tick).job_id == "blocker"
    assert (await other.tick()).job_id == "better"


async def test_a_second_tick_while_one_runs_is_busy(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("slow", queue="a", payload={"do": "block"}))
    await runtime.ingest(job("other", queue="b"))
    first = await engine.start(runtime, "slow")
    assert await runtime.tick() == TickResult("busy")
    assert engine.executor.started == ["slow"]
    engine.executor.release("slow")
    assert (await first).job_id == "slow"
    assert (await runtime.tick()).job_id == "other"
    assert engine.executor.max_running == 1


async def test_many_concurrent_ticks_of_one_runtime_never_run_in_parallel(
        engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest_many([job(f"j{index}", queue=f"q{index % 4}") for index in range(20)])
    settled: list[str] = []
    while len(settled) < 20:
        results = await asyncio.gather(*(runtime.tick() for _ in range(5)))
        settled += [r.job_id for r in results if r.status == "settled" and r.job_id]
        assert sum(r.status == "settled" for r in results) <= 1
    assert sorted(settled) == sorted(f"j{i}" for i in range(20))
    assert engine.executor.max_running == 1


@pytest.mark.parametrize(
    ("payload", "outcome", "reason"),
    [
        ({"do": "complete"}, "completed", None),
        ({"do": "fail", "reason": "bad_address"}, "failed", "bad_address"),
        ({"do": "fail"}, "failed", None),
        ({"do": "unknown"}, "outcome_unknown", None),
        ({"do": "cancel"}, "cancelled", None),
        ({"do": "raise"}, "failed", "execution_failed"),
        ({"do": "invalid"}, "failed", "invalid_outcome"),
    ],
)
async def test_the_executors_result_becomes_the_outcome_once(
    engine: Engine, payload: dict[str, str], outcome: str, reason: str | None
) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("a", payload=payload))
    result = await runtime.tick()
    assert result == TickResult("settled", job_id="a", outcome=outcome,  # type: ignore[arg-type]
                                failure_reason=reason)
    record = await runtime.read("a")
    assert record is not None
    assert (record.state, record.outcome, record.failure_reason) == ("settled", outcome, reason)
    assert record.started_at is not None and record.settled_at is not None
    assert record.settled_at >= record.started_at >= record.enqueued_at
    assert await runtime.tick() == TickResult("idle")
    assert engine.executor.started == ["a"]


async def test_an_interrupted_tick_settles_failed_interrupted_and_reraises(
        engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("a", payload={"do": "block"}))
    tick = await engine.start(runtime, "a")
    tick.cancel()
    with pytest.raises(asyncio.CancelledError):
        await tick
    record = await runtime.read("a")
    assert record is not None
    assert (record.outcome, record.failure_reason) == ("failed", "execution_interrupted")
    assert engine.executor.signals["a"].reason == "interrupted"
    assert await runtime.tick() == TickResult("idle")


async def test_a_sync_executor_result_is_accepted(engine: Engine) -> None:
    runtime = engine.runtime(execute=lambda job, signal: Completed())
    await runtime.ingest(job("a"))
    assert (await runtime.tick()).outcome == "completed"


async def test_the_wake_hears_of_every_durable_change_and_only_those(engine: Engine) -> None:
    runtime = engine.runtime()
    before = engine.wake.calls
    await runtime.ingest(job("a"))
    assert engine.wake.calls == before + 1
    # A duplicate changes nothing, yet wakes: its first ingest may have stored
    # the job and died before its wake (the host would wait for nothing).
    await runtime.ingest(job("a"))
    assert engine.wake.calls == before + 2
    await runtime.tick()
    assert engine.wake.calls == before + 3
    assert await runtime.tick() == TickResult("idle")
    assert engine.wake.calls == before + 3
