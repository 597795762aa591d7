"""Behaviour 6: durable cancellation."""

from __future__ import annotations

import asyncio

import pytest

from tests.support import Harness, job
from tickwork import CancelResult, Completed, Failed, InvalidArgument, TickResult


async def start(runtime, harness: Harness, job_id: str) -> asyncio.Task[TickResult]:  # type: ignore[no-untyped-def]
    task = asyncio.create_task(runtime.tick())
    await asyncio.sleep(0.01)
    assert harness.executor.started[-1] == job_id
    return task


async def test_queued_job_settles_cancelled_on_next_tick_without_running(
    harness: Harness,
) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("a"))
    assert runtime.cancel("a", "c1") == CancelResult("recorded", "a")
    record = runtime.read("a")
    assert record is not None and (record.state, record.cancellation_id) == ("queued", "c1")
    assert await runtime.tick() == TickResult("settled", job_id="a", outcome="cancelled")
    assert harness.executor.started == []
    assert await runtime.tick() == TickResult("idle")


async def test_a_waiting_cancellation_settles_before_any_runnable_job(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("head", queue="q", payload={"do": "block"}))
    runtime.ingest(job("behind", queue="q"))
    head_tick = await start(runtime, harness, "head")
    runtime.cancel("behind", "c1")
    # The next tick takes the cancellation before any runnable job, even a
    # higher-priority one.
    harness.executor.release("head")
    assert (await head_tick).job_id == "head"
    runtime.ingest(job("other", queue="elsewhere", priority=99))
    assert await runtime.tick() == TickResult("settled", job_id="behind", outcome="cancelled")
    assert harness.executor.started == ["head"]


async def test_cancelled_queued_job_behind_a_running_head_settles(harness: Harness) -> None:
    """The queue's head is running (an orphaned claim nobody can resolve yet);
    a cancelled job behind it still settles."""
    dying = harness.runtime()
    dying.ingest(job("head", queue="q", payload={"do": "block"}))
    dying.ingest(job("behind", queue="q"))
    task = asyncio.create_task(dying.tick())
    await asyncio.sleep(0.01)
    await harness.crash(task)
    harness.alive = lambda job: True  # the head's execution is (said to be) alive
    runtime = harness.runtime()
    runtime.cancel("behind", "c1")
    assert await runtime.tick() == TickResult("settled", job_id="behind", outcome="cancelled")


async def test_running_job_is_aborted_and_settles_cancelled(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("a", payload={"do": "block"}))
    tick = await start(runtime, harness, "a")
    assert runtime.cancel("a", "c1").status == "recorded"
    signal = harness.executor.signals["a"]
    assert signal.aborted and signal.reason == "cancelled"
    assert await tick == TickResult("settled", job_id="a", outcome="cancelled")
    record = runtime.read("a")
    assert record is not None and (record.outcome, record.failure_reason) == ("cancelled", None)


async def test_raise_after_cancellation_still_settles_cancelled(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("a", payload={"do": "block"}))
    tick = await start(runtime, harness, "a")
    runtime.cancel("a", "c1")
    # The abort already won the race inside the executor; settle is cancelled.
    assert (await tick).outcome == "cancelled"


async def test_work_that_completed_despite_cancellation_settles_cancelled_and_says_so(
    harness: Harness,
) -> None:
    """The spec: a job this runtime is executing when it is cancelled settles as
    cancelled. Its executor reporting completion is kept as the reason."""
    async def stubborn(job, signal):  # type: ignore[no-untyped-def]
        await signal.wait()
        return Completed()  # it finished anyway

    runtime = harness.runtime(execute=stubborn)
    runtime.ingest(job("a"))
    tick = asyncio.create_task(runtime.tick())
    await asyncio.sleep(0.01)
    runtime.cancel("a", "c1")
    assert await tick == TickResult("settled", job_id="a", outcome="cancelled",
                                    failure_reason="executor_completed")
    record = runtime.read("a")
    assert record is not None
    assert (record.outcome, record.failure_reason) == ("cancelled", "executor_completed")


async def test_replay_conflict_and_not_found(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("a"))
    assert runtime.cancel("a", "c1").status == "recorded"
    assert runtime.cancel("a", "c1").status == "replayed"
    assert runtime.cancel("a", "c2").status == "conflict"
    assert runtime.cancel("missing", "c1") == CancelResult("not_found", "missing")
    await runtime.tick()
    # Replays stay replays after settlement; the stored id never changes.
    assert runtime.cancel("a", "c1").status == "replayed"
    assert runtime.cancel("a", "c2").status == "conflict"
    record = runtime.read("a")
    assert record is not None and record.cancellation_id == "c1"


async def test_already_settled(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("a"))
    await runtime.tick()
    assert runtime.cancel("a", "c1").status == "already_settled"
    record = runtime.read("a")
    assert record is not None and record.cancellation_id is None


async def test_only_if_queued(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("waiting", queue="w"))
    runtime.ingest(job("a", queue="r", priority=5, payload={"do": "block"}))
    tick = await start(runtime, harness, "a")
    assert runtime.cancel("a", "c1", only_if_queued=True).status == "refused"
    assert not harness.executor.signals["a"].aborted
    record = runtime.read("a")
    assert record is not None and record.cancellation_id is None
    assert runtime.cancel("waiting", "c2", only_if_queued=True).status == "recorded"
    harness.executor.release("a")
    assert (await tick).outcome == "completed"


async def test_cancellation_survives_a_restart(harness: Harness) -> None:
    harness.runtime().ingest(job("a"))
    harness.runtime().cancel("a", "c1")
    harness.open()
    assert (await harness.runtime().tick()).outcome == "cancelled"


@pytest.mark.parametrize(
    ("args", "field"),
    [(("", "c"), "job_id"), (("a", ""), "cancellation_id"), (("a", "c" * 257), "cancellation_id")],
)
def test_bad_cancel_arguments(harness: Harness, args: tuple[str, str], field: str) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("a"))
    with pytest.raises(InvalidArgument) as caught:
        runtime.cancel(*args)
    assert caught.value.field == field
    record = runtime.read("a")
    assert record is not None and record.cancellation_id is None


async def test_cancellation_recorded_elsewhere_still_decides_the_outcome(
    harness: Harness,
) -> None:
    """The settlement follows the durable cancellation, whatever path recorded
    it: here another runtime over the same database, which cannot abort us."""
    runtime = harness.runtime()
    runtime.ingest(job("failing", queue="a", payload={"do": "block"}))
    runtime.ingest(job("finishing", queue="b", payload={"do": "block"}))
    harness.open()
    other = harness.runtime()
    for job_id in ("failing", "finishing"):
        tick = await start(runtime, harness, job_id)
        assert other.cancel(job_id, "c1").status == "recorded"
        assert not harness.executor.signals[job_id].aborted  # nobody told the executor
        result = Failed("boom") if job_id == "failing" else Completed()
        harness.executor.release(job_id, result)
        reason = None if job_id == "failing" else "executor_completed"
        settled = await tick
        assert (settled.outcome, settled.failure_reason) == ("cancelled", reason)
        record = runtime.read(job_id)
        assert record is not None and (record.outcome, record.failure_reason) == (
            "cancelled", reason)


async def test_transactional_cancellation_racing_the_executors_return(harness: Harness) -> None:
    """The executor has already returned a failure when the host records the
    cancellation; the settlement that follows is still cancelled."""
    runtime = harness.runtime()
    runtime.ingest(job("a", payload={"do": "block"}))
    tick = await start(runtime, harness, "a")
    harness.executor.release("a", Failed("boom"))

    def cancel() -> str:
        return runtime.transactional.cancel("a", "c1").status

    assert harness.host_transaction(cancel) == "recorded"
    assert await tick == TickResult("settled", job_id="a", outcome="cancelled")
