"""Durable cancellation, on every store."""

from __future__ import annotations

import asyncio

import pytest

from tests.support import job
from tests.support.engine import Engine
from tickwork import CancelResult, Completed, Failed, InvalidArgument, TickResult


async def test_a_queued_job_settles_cancelled_on_the_next_tick_without_running(
    engine: Engine,
) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("a"))
    assert await runtime.cancel("a", "c1") == CancelResult("recorded", "a")
    record = await runtime.read("a")
    assert record is not None and (record.state, record.cancellation_id) == ("queued", "c1")
    assert await runtime.tick() == TickResult("settled", job_id="a", outcome="cancelled")
    assert engine.executor.started == []
    assert await runtime.tick() == TickResult("idle")


async def test_a_waiting_cancellation_settles_before_any_runnable_job(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("head", queue="q", payload={"do": "block"}))
    await runtime.ingest(job("behind", queue="q"))
    head_tick = await engine.start(runtime, "head")
    await runtime.cancel("behind", "c1")
    engine.executor.release("head")
    assert (await head_tick).job_id == "head"
    await runtime.ingest(job("other", queue="elsewhere", priority=99))
    # Before any runnable job, even a higher-priority one.
    assert await runtime.tick() == TickResult("settled", job_id="behind", outcome="cancelled")
    assert engine.executor.started == ["head"]


async def test_a_cancelled_job_behind_a_running_head_settles_without_waiting(
        engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("head", payload={"do": "block"}))
    await runtime.ingest(job("behind"))
    task = await engine.start(runtime, "head")
    engine.others_are_alive()
    other = engine.another_process()
    await other.cancel("behind", "stop")
    assert await other.tick() == TickResult("settled", job_id="behind", outcome="cancelled")
    assert "behind" not in engine.executor.started
    engine.executor.release("head")
    assert (await task).outcome == "completed"


async def test_a_running_job_is_aborted_and_settles_cancelled(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("a", payload={"do": "block"}))
    tick = await engine.start(runtime, "a")
    assert (await runtime.cancel("a", "c1")).status == "recorded"
    signal = engine.executor.signals["a"]
    assert signal.aborted and signal.reason == "cancelled"
    assert await tick == TickResult("settled", job_id="a", outcome="cancelled")
    record = await runtime.read("a")
    assert record is not None and (record.outcome, record.failure_reason) == ("cancelled", None)


async def test_work_that_completed_despite_the_cancellation_settles_cancelled_and_says_so(
    engine: Engine,
) -> None:
    """A job executing when it is cancelled settles as cancelled; its
    executor reporting completion is kept as the reason."""
    async def stubborn(job, signal):  # type: ignore[no-untyped-def]
        engine.executor.started.append(job.job_id)
        await signal.wait()
        return Completed()  # it finished anyway

    runtime = engine.runtime(execute=stubborn)
    await runtime.ingest(job("a"))
    tick = await engine.start(runtime, "a")
    await runtime.cancel("a", "c1")
    assert await tick == TickResult("settled", job_id="a", outcome="cancelled",
                                    failure_reason="executor_completed")
    record = await runtime.read("a")
    assert record is not None
    assert (record.outcome, record.failure_reason) == ("cancelled", "executor_completed")


async def test_a_cancellation_recorded_elsewhere_still_decides_the_outcome(
    engine: Engine,
) -> None:
    """The settlement follows the durable cancellation, whatever path recorded
    it: here another process, which cannot tell our executor to stop."""
    runtime = engine.runtime()
    await runtime.ingest(job("failing", queue="a", payload={"do": "block"}))
    await runtime.ingest(job("finishing", queue="b", payload={"do": "block"}))
    engine.others_are_alive()
    other = engine.another_process()
    for job_id in ("failing", "finishing"):
        tick = await engine.start(runtime, job_id)
        assert (await other.cancel(job_id, "c1")).status == "recorded"
        assert not engine.executor.signals[job_id].aborted  # nobody told the executor
        result = Failed("boom") if job_id == "failing" else Completed()
        engine.executor.release(job_id, result)
        reason = None if job_id == "failing" else "executor_completed"
        settled = await tick
        assert (settled.outcome, settled.failure_reason) == ("cancelled", reason)
        record = await runtime.read(job_id)
        assert record is not None and (record.outcome, record.failure_reason) == (
            "cancelled", reason)


async def test_replay_conflict_and_not_found(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("a"))
    assert (await runtime.cancel("a", "c1")).status == "recorded"
    wakes = engine.wake.calls
    assert (await runtime.cancel("a", "c1")).status == "replayed"
    assert (await runtime.cancel("a", "c2")).status == "conflict"
    assert engine.wake.calls == wakes  # nothing changed
    assert await runtime.cancel("missing", "c1") == CancelResult("not_found", "missing")
    await runtime.tick()
    # Replays stay replays after settlement; the stored id never changes.
    assert (await runtime.cancel("a", "c1")).status == "replayed"
    assert (await runtime.cancel("a", "c2")).status == "conflict"
    record = await runtime.read("a")
    assert record is not None and record.cancellation_id == "c1"


async def test_already_settled(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("a"))
    await runtime.tick()
    assert (await runtime.cancel("a", "c1")).status == "already_settled"
    record = await runtime.read("a")
    assert record is not None and record.cancellation_id is None


async def test_only_if_queued(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("waiting", queue="w"))
    await runtime.ingest(job("a", queue="r", priority=5, payload={"do": "block"}))
    tick = await engine.start(runtime, "a")
    assert (await runtime.cancel("a", "c1", only_if_queued=True)).status == "refused"
    assert not engine.executor.signals["a"].aborted
    record = await runtime.read("a")
    assert record is not None and record.cancellation_id is None
    assert (await runtime.cancel("waiting", "c2", only_if_queued=True)).status == "recorded"
    engine.executor.release("a")
    assert (await tick).outcome == "completed"


async def test_a_cancellation_is_durable_for_every_later_process(engine: Engine) -> None:
    await engine.runtime().ingest(job("a"))
    await engine.runtime().cancel("a", "c1")
    assert (await engine.another_process().tick()).outcome == "cancelled"


@pytest.mark.parametrize(
    ("args", "field"),
    [(("", "c"), "job_id"), (("a", ""), "cancellation_id"), (("a", "c" * 257), "cancellation_id")],
)
async def test_bad_cancel_arguments_change_nothing(engine: Engine, args: tuple[str, str],
                                                   field: str) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("a"))
    with pytest.raises(InvalidArgument) as caught:
        await runtime.cancel(*args)
    assert caught.value.field == field
    record = await runtime.read("a")
    assert record is not None and record.cancellation_id is None


async def test_concurrent_cancellations_of_one_job_record_exactly_one(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("a"))
    others = [engine.runtime() for _ in range(4)]
    results = await asyncio.gather(*(other.cancel("a", f"c{n}")
                                     for n, other in enumerate(others)))
    assert sorted(result.status for result in results).count("recorded") == 1
    record = await runtime.read("a")
    assert record is not None
    winner = next(f"c{n}" for n, r in enumerate(results) if r.status == "recorded")
    assert record.cancellation_id == winner
