"""Owner concurrency: a runtime with ``concurrency=N`` runs up to N jobs of
different queues at once, on sqlite3 and both Durable Object storage shapes.

Overlap is proven by the scripted executor's own counters (``running``,
``max_running``) and by jobs that block until the test releases them, never
by sleeping and hoping.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import pytest

from tests.support import Harness, job
from tickwork import Completed, InvalidArgument, OwnerRuntime, Recovery, Retry, TickResult
from tickwork.hosts.ticking import tick_until_idle
from tickwork.model.waiting import Hold

BLOCK = {"do": "block"}


async def until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Let the event loop run until ``predicate()`` holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.002)


def state_of(runtime: OwnerRuntime, job_id: str) -> tuple[str, str | None]:
    record = runtime.read(job_id)
    assert record is not None
    return record.state, record.outcome


# ----------------------------------------------------------- construction


def test_concurrency_is_one_by_default_and_checked(harness: Harness) -> None:
    assert harness.runtime().concurrency == 1
    assert harness.runtime(concurrency=8).concurrency == 8
    for bad in (0, -1, 1_001, True, 2.0):
        with pytest.raises(InvalidArgument) as caught:
            harness.runtime(concurrency=bad)
        assert caught.value.field == "concurrency"


# ------------------------------------------------------------------ overlap


async def test_n_jobs_of_n_queues_run_at_once_in_claim_order(harness: Harness) -> None:
    runtime = harness.runtime(concurrency=3)
    for index, priority in enumerate((1, 5, 3, 0)):
        runtime.ingest(job(f"j{index}", queue=f"q{index}", priority=priority, payload=BLOCK))
    drain = asyncio.ensure_future(runtime.drain())
    await until(lambda: harness.executor.running == 3)
    # The best three by priority run together; the fourth waits for a slot.
    assert harness.executor.started == ["j1", "j2", "j0"]
    assert state_of(runtime, "j3") == ("queued", None)
    harness.executor.release("j2")
    await until(lambda: "j3" in harness.executor.started)
    assert harness.executor.running == 3
    for job_id in ("j0", "j1", "j3"):
        harness.executor.release(job_id)
    results = await drain
    assert sorted(result.job_id or "" for result in results) == ["j0", "j1", "j2", "j3"]
    assert {result.outcome for result in results} == {"completed"}
    assert harness.executor.max_running == 3


async def test_never_more_than_n_run_and_a_queues_jobs_never_overlap(harness: Harness) -> None:
    running_per_queue: dict[str, int] = {}
    worst: dict[str, int] = {}
    in_flight = [0]
    most = [0]

    async def execute(record: Any, signal: Any) -> Completed:
        queue = record.queue
        running_per_queue[queue] = running_per_queue.get(queue, 0) + 1
        worst[queue] = max(worst.get(queue, 0), running_per_queue[queue])
        in_flight[0] += 1
        most[0] = max(most[0], in_flight[0])
        for _ in range(3):  # stay in flight across a few turns of the loop
            await asyncio.sleep(0)
        in_flight[0] -= 1
        running_per_queue[queue] -= 1
        return Completed()

    runtime = harness.runtime(concurrency=4, execute=execute)
    for index in range(40):
        runtime.ingest(job(f"j{index}", queue=f"q{index % 6}"))
    results = await runtime.drain()
    assert len(results) == 40 and {result.outcome for result in results} == {"completed"}
    assert most[0] == 4
    assert max(worst.values()) == 1
    # The history the four slots counted: each job once.
    totals = [0, 0, 0]
    for queue in (f"q{index}" for index in range(6)):
        history = runtime.history(queue)
        assert history is not None
        for point in history.points:
            totals = [totals[0] + point.enqueued, totals[1] + point.started,
                      totals[2] + point.completed]
    assert totals == [40, 40, 40]


async def test_a_second_tick_while_one_is_in_flight_answers_busy(harness: Harness) -> None:
    runtime = harness.runtime(concurrency=3)
    runtime.ingest(job("a", queue="qa", payload=BLOCK))
    runtime.ingest(job("b", queue="qb"))
    first = asyncio.ensure_future(runtime.tick())
    await until(lambda: harness.executor.started == ["a"])
    assert await runtime.tick() == TickResult("busy")
    harness.executor.release("a")
    assert (await first).job_id == "a"
    # While a drain holds the slots, tick() answers busy too.
    runtime.ingest(job("c", queue="qc", payload=BLOCK))
    drain = asyncio.ensure_future(runtime.drain())
    await until(lambda: "c" in harness.executor.started)
    assert await runtime.tick() == TickResult("busy")
    harness.executor.release("c")
    assert sorted(result.job_id or "" for result in await drain) == ["b", "c"]


async def test_a_slot_that_found_nothing_takes_a_job_ingested_while_others_run(
        harness: Harness) -> None:
    runtime = harness.runtime(concurrency=2)
    runtime.ingest(job("long", queue="exports", payload=BLOCK))
    drain = asyncio.ensure_future(runtime.drain())
    await until(lambda: harness.executor.started == ["long"])
    runtime.ingest(job("payment", queue="payments", payload=BLOCK))
    await until(lambda: "payment" in harness.executor.started)
    assert harness.executor.running == 2
    harness.executor.release("payment")
    await until(lambda: state_of(runtime, "payment") == ("settled", "completed"))
    assert state_of(runtime, "long") == ("running", None)
    harness.executor.release("long")
    assert [result.job_id for result in await drain] == ["payment", "long"]


async def test_a_retry_due_later_runs_while_another_slot_still_runs(harness: Harness) -> None:
    runtime = harness.runtime(concurrency=2)
    runtime.ingest(job("long", queue="exports", payload=BLOCK))
    runtime.ingest(job("flaky", queue="webhooks", retry=Retry(attempts=3, base_delay_ms=20),
                       payload={"do": "fail_until", "succeed_on": 2, "retry_after_ms": 20}))
    drain = asyncio.ensure_future(runtime.drain())
    # Its first attempt fails; the slot waits for the retry's due time (the
    # other slot still runs "long") and runs the second attempt.
    await until(lambda: state_of(runtime, "flaky") == ("settled", "completed"))
    assert state_of(runtime, "long") == ("running", None)
    harness.executor.release("long")
    results = await drain
    assert [(result.status, result.job_id) for result in results] == [
        ("retried", "flaky"), ("settled", "flaky"), ("settled", "long")]
    record = runtime.read("flaky")
    assert record is not None and record.attempt == 2


@pytest.mark.skipif(sys.platform == "emscripten", reason="no threads on Pyodide")
async def test_plain_executors_overlap_in_worker_threads(harness: Harness) -> None:
    import threading

    # Each executor waits at the barrier for the other: they pass only if
    # both run at the same time, each in its own worker thread.
    barrier = threading.Barrier(2, timeout=5)

    def plain(record: Any, signal: Any) -> Completed:
        barrier.wait()
        return Completed()

    runtime = harness.runtime(concurrency=2, execute=plain)
    runtime.ingest(job("a", queue="qa"))
    runtime.ingest(job("b", queue="qb"))
    results = await runtime.drain()
    assert sorted((result.job_id or "", result.outcome) for result in results) == [
        ("a", "completed"), ("b", "completed")]


# ------------------------------------------------- cancellation, lane failure


async def test_cancelling_one_of_several_in_flight_aborts_only_that_one(
        harness: Harness) -> None:
    runtime = harness.runtime(concurrency=3)
    for name in ("a", "b", "c"):
        runtime.ingest(job(name, queue=f"q-{name}", payload=BLOCK))
    drain = asyncio.ensure_future(runtime.drain())
    await until(lambda: harness.executor.running == 3)
    assert runtime.cancel("b", "stop-b").status == "recorded"
    await until(lambda: state_of(runtime, "b") == ("settled", "cancelled"))
    assert harness.executor.signals["b"].aborted
    assert not harness.executor.signals["a"].aborted
    assert not harness.executor.signals["c"].aborted
    assert state_of(runtime, "a") == state_of(runtime, "c") == ("running", None)
    harness.executor.release("a")
    harness.executor.release("c")
    results = {result.job_id: result.outcome for result in await drain}
    assert results == {"a": "completed", "b": "cancelled", "c": "completed"}


async def test_failing_a_lane_settles_its_running_jobs_and_spares_the_others(
        harness: Harness) -> None:
    runtime = harness.runtime(concurrency=3)
    runtime.ingest(job("t1", queue="q1", lane="tenant-a", payload=BLOCK))
    runtime.ingest(job("t2", queue="q2", lane="tenant-a", payload=BLOCK))
    runtime.ingest(job("other", queue="q3", lane="tenant-b", payload=BLOCK))
    drain = asyncio.ensure_future(runtime.drain())
    await until(lambda: harness.executor.running == 3)
    assert runtime.fail_lane("tenant-a", "revoked").settled == 2
    await until(lambda: harness.executor.running == 1)
    assert harness.executor.signals["t1"].aborted and harness.executor.signals["t2"].aborted
    harness.executor.release("other")
    await drain
    assert state_of(runtime, "t1") == state_of(runtime, "t2") == ("settled", "failed")
    assert state_of(runtime, "other") == ("settled", "completed")


# ------------------------------------------------------------------ recovery


async def test_a_crash_with_n_claims_in_flight_recovers_each_claim(harness: Harness) -> None:
    runtime = harness.runtime(concurrency=3)
    runtime.ingest(job("again", queue="q1", payload=BLOCK, recovery=Recovery(1)))
    runtime.ingest(job("once", queue="q2", payload=BLOCK))
    runtime.ingest(job("again-too", queue="q3", payload=BLOCK, recovery=Recovery(1)))
    drain = asyncio.ensure_future(runtime.drain())
    await until(lambda: harness.executor.running == 3)
    await harness.crash(drain)
    # The restarted owner: nothing executes the three claims any more, and
    # the jobs it requeues now complete.
    reran: list[str] = []

    async def complete(record: Any, signal: Any) -> Completed:
        reran.append(record.job_id)
        return Completed()

    restarted = harness.runtime(concurrency=3, execute=complete)
    results = await restarted.drain()
    assert sorted((result.status, result.job_id or "") for result in results) == [
        ("requeued", "again"), ("requeued", "again-too"),
        ("settled", "again"), ("settled", "again-too"), ("settled", "once")]
    assert state_of(restarted, "once") == ("settled", "interrupted")
    assert sorted(reran) == ["again", "again-too"]
    for job_id in ("again", "again-too"):
        record = restarted.read(job_id)
        assert record is not None and (record.outcome, record.recoveries) == ("completed", 1)


async def test_a_claim_alive_elsewhere_is_left_while_other_slots_run(
        harness: Harness) -> None:
    first = harness.runtime()
    first.ingest(job("elsewhere", queue="q1", payload=BLOCK))
    orphan = asyncio.ensure_future(first.tick())
    await until(lambda: harness.executor.started == ["elsewhere"])
    harness.alive = lambda record: True
    second = harness.runtime(concurrency=2)
    second.ingest(job("b", queue="q2"))
    second.ingest(job("c", queue="q3"))
    results = await second.drain()
    assert sorted(result.job_id or "" for result in results) == ["b", "c"]
    assert state_of(second, "elsewhere") == ("running", None)
    harness.executor.release("elsewhere")
    await orphan


# ------------------------------------------------------------------ budgets


async def test_max_ticks_bounds_the_claims_of_every_slot_together(harness: Harness) -> None:
    runtime = harness.runtime(concurrency=3)
    for index in range(6):
        runtime.ingest(job(f"j{index}", queue=f"q{index}"))
    ended = await tick_until_idle(runtime, max_ticks=4)
    assert ended.stop == "budget" and ended.ticks == 4
    assert len(harness.executor.started) == 4
    assert sum(state_of(runtime, f"j{index}")[0] == "queued" for index in range(6)) == 2


async def test_stopping_claims_nothing_more_and_the_jobs_in_flight_finish(
        harness: Harness) -> None:
    runtime = harness.runtime(concurrency=2)
    for index in range(4):
        runtime.ingest(job(f"j{index}", queue=f"q{index}", payload=BLOCK))
    stop = [False]
    loop = asyncio.ensure_future(tick_until_idle(runtime, stopping=lambda: stop[0]))
    await until(lambda: harness.executor.running == 2)
    stop[0] = True
    harness.executor.release("j0")
    harness.executor.release("j1")
    ended = await loop
    assert ended.stop == "stopped"
    assert harness.executor.started == ["j0", "j1"]
    assert state_of(runtime, "j0") == state_of(runtime, "j1") == ("settled", "completed")
    # Nothing was left claimed: the next loop runs the rest.
    assert state_of(runtime, "j2") == state_of(runtime, "j3") == ("queued", None)


# ------------------------------------------------------------------- explain


async def test_explain_names_every_running_job_once_all_slots_are_taken(
        harness: Harness) -> None:
    runtime = harness.runtime(concurrency=2)
    runtime.ingest(job("export", queue="exports", payload=BLOCK))
    runtime.ingest(job("waiting", queue="mail"))
    drain = asyncio.ensure_future(tick_until_idle(runtime, max_ticks=1))
    await until(lambda: harness.executor.started == ["export"])
    # One slot free: nothing of the owner's holds the job.
    assert runtime.explain("waiting").holds == ()  # type: ignore[union-attr]
    harness.executor.release("export")
    await drain
    runtime.ingest(job("report", queue="reports", payload=BLOCK, priority=5))
    runtime.ingest(job("export-2", queue="exports", payload=BLOCK, priority=9))
    drain = asyncio.ensure_future(tick_until_idle(runtime, max_ticks=2))
    await until(lambda: harness.executor.running == 2)
    running = tuple(harness.executor.started[1:])
    assert set(running) == {"export-2", "report"}
    holds = runtime.explain("waiting").holds  # type: ignore[union-attr]
    assert holds == (Hold("owner_busy", job_ids=running),)
    assert holds[0].describe() == (
        f"the owner is at its concurrency (2 running): {', '.join(running)}")
    for job_id in running:
        harness.executor.release(job_id)
    await drain


# ------------------------------------------------------ the concurrent lane


async def test_the_concurrent_lane_keeps_its_own_slot_beside_n_others(
        harness: Harness) -> None:
    runtime = harness.concurrent_runtime("fast", concurrency=2)
    assert runtime.concurrency == 2
    runtime.ingest(job("s1", queue="q1", lane="slow", payload=BLOCK))
    runtime.ingest(job("s2", queue="q2", lane="slow", payload=BLOCK))
    runtime.ingest(job("f1", queue="q3", lane="fast", payload=BLOCK))
    drain = asyncio.ensure_future(runtime.drain())
    await until(lambda: harness.executor.running == 2)
    assert sorted(harness.executor.started) == ["s1", "s2"]
    lane_tick = asyncio.ensure_future(runtime.tick_concurrent())
    await until(lambda: harness.executor.running == 3)
    assert harness.executor.started[-1] == "f1"
    assert await runtime.tick_concurrent() == TickResult("busy")
    for job_id in ("s1", "s2", "f1"):
        harness.executor.release(job_id)
    assert sorted(result.job_id or "" for result in await drain) == ["s1", "s2"]
    assert (await lane_tick).job_id == "f1"
