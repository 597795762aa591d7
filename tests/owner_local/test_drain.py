"""The owner-local drain: one job's settlement and the next job's claim in one
transaction, with every fence, abort and crash rule of a plain tick.

Every test runs on sqlite3 and on the Durable Object storage stand-in (both
SDK shapes): the ``harness`` fixture; the real-Pyodide tier runs them on its
JavaScript ``ctx.storage`` too (suite owner-local).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.support import Harness, job
from tickwork import Completed, OwnerRuntime, QueueTransition, Recovery, TickResult
from tickwork.hosts.ticking import tick_until_idle
from tickwork.model.errors import InvalidArgument


class GatedWake:
    """An async wake that, once armed, holds the tick that awaits it (the
    step after a settlement, with the next claim taken ahead) until opened."""

    def __init__(self) -> None:
        self.armed = False
        self.held = asyncio.Event()
        self.gate = asyncio.Event()

    async def arm(self) -> None:
        """Arm it once the wakes of earlier ingests (tasks) have run."""
        for _ in range(3):
            await asyncio.sleep(0)
        self.armed = True

    async def recompute(self) -> None:
        if self.armed:
            self.armed = False
            self.held.set()
            await self.gate.wait()


async def b_claimed_ahead(harness: Harness, loop: Callable[[OwnerRuntime], Awaitable[Any]],
                          **job_b: Any) -> tuple[OwnerRuntime, asyncio.Task[Any], GatedWake]:
    """A runtime running ``loop`` over jobs a and b, held right after the
    transaction that settled a and claimed b ahead (its gated wake)."""
    wake = GatedWake()
    runtime = harness.runtime(wake=wake)
    runtime.ingest(job("a", queue="q-a"))
    runtime.ingest(job("b", queue="q-b", **job_b))
    await wake.arm()
    task = asyncio.create_task(loop(runtime))
    await asyncio.wait_for(wake.held.wait(), 5)
    return runtime, task, wake


def states(harness: Harness) -> dict[str, tuple[Any, ...]]:
    rows = harness.host_query("SELECT job_id, state, outcome, recoveries, started_at,"
                              " claim_token IS NOT NULL FROM tickwork_jobs")
    return {row[0]: tuple(row[1:]) for row in rows}


async def test_drain_runs_every_job_once_in_queue_order(harness: Harness) -> None:
    runtime = harness.runtime()
    for n in range(6):
        runtime.ingest(job(f"j{n}", queue=f"q{n % 2}"))
    results = await runtime.drain()
    assert [r.job_id for r in results] == [f"j{n}" for n in range(6)]
    assert {r.outcome for r in results} == {"completed"}
    assert sorted(harness.executor.started) == [f"j{n}" for n in range(6)]
    assert harness.executor.max_running == 1
    assert await runtime.drain() == []
    assert {state[:2] for state in states(harness).values()} == {("settled", "completed")}


async def test_drain_budget_leaves_nothing_claimed(harness: Harness) -> None:
    runtime = harness.runtime()
    for n in range(5):
        runtime.ingest(job(f"j{n}", queue=f"q{n}"))
    assert len(await runtime.drain(max_ticks=2)) == 2
    rows = states(harness)
    assert [rows[f"j{n}"][0] for n in range(5)] == ["settled"] * 2 + ["queued"] * 3
    # Nothing claimed ahead is left behind: the queued jobs hold no claim.
    assert all(row[3] is None and not row[4] for row in rows.values() if row[0] == "queued")
    with pytest.raises(InvalidArgument, match="max_ticks"):
        await runtime.drain(max_ticks=0)
    with pytest.raises(InvalidArgument, match="budget_ms"):
        await runtime.drain(budget_ms=-1)
    assert states(harness) == rows  # refused: nothing changed


async def test_a_cancelled_queued_job_is_settled_before_the_next_claim(
        harness: Harness) -> None:
    """The claim taken ahead follows the tick's order: a cancelled job that
    waits is settled first (the claim-if-clear guard claims nothing)."""
    async def execute(record: Any, signal: Any) -> Completed:  # async: it writes through the
        # harness's connection, which a worker thread (where a plain one runs) may not use
        if record.job_id == "a":
            runtime.cancel("c", "stop-c")
        return Completed()

    runtime = harness.runtime(execute=execute)
    for name in "abc":
        runtime.ingest(job(name, queue=f"q-{name}"))
    results = await runtime.drain()
    assert [(r.job_id, r.outcome) for r in results] == [
        ("a", "completed"), ("c", "cancelled"), ("b", "completed")]


async def test_a_suspect_claim_is_recovered_before_the_next_claim(harness: Harness) -> None:
    """A running claim this runtime does not execute appears while a runs
    (another process's, as far as this runtime knows): a's settlement claims
    nothing ahead, and the next step probes it first, as a tick would."""
    async def execute(record: Any, signal: Any) -> Completed:  # async: it writes through the
        # harness's connection, which a worker thread (where a plain one runs) may not use
        if record.job_id == "a":
            harness.host_execute("UPDATE tickwork_jobs SET state = 'running',"
                                 " claim_token = 'elsewhere', started_at = 1 WHERE job_id = 'x'")
        return Completed()

    probed: list[tuple[str, Any]] = []

    def alive(record: Any) -> bool:
        probed.append((record.job_id, states(harness)["b"][0]))
        return False

    harness.alive = alive
    runtime = harness.runtime(execute=execute)
    runtime.ingest(job("a", queue="q-a"))
    runtime.ingest(job("b", queue="q-b"))
    runtime.ingest(job("x", queue="q-x", recovery=Recovery(1)))
    results = await runtime.drain()
    assert [(r.status, r.job_id) for r in results] == [
        ("settled", "a"), ("requeued", "x"), ("settled", "b"), ("settled", "x")]
    assert probed == [("x", "queued")]  # b was not claimed ahead of the probe


async def test_a_claim_taken_ahead_and_lost_to_a_crash_is_recovered(harness: Harness) -> None:
    """The process dies after the transaction that settled a and claimed b:
    b is a running claim nobody executes, recovered like any other."""
    _, task, _ = await b_claimed_ahead(harness, OwnerRuntime.drain, recovery=Recovery(1))
    rows = states(harness)
    assert rows["a"][:2] == ("settled", "completed")
    assert rows["b"][0] == "running" and rows["b"][4]  # claimed in a's transaction
    await harness.crash(task)
    assert harness.executor.started == ["a"]
    survivor = harness.runtime()
    assert await survivor.tick() == TickResult("requeued", job_id="b")
    assert states(harness)["b"][:3] == ("queued", None, 1)
    assert await survivor.drain() == [TickResult("settled", job_id="b", outcome="completed")]
    assert harness.executor.started == ["a", "b"]


async def test_tick_is_busy_while_a_drain_holds_the_ticker(harness: Harness) -> None:
    runtime, task, wake = await b_claimed_ahead(harness, OwnerRuntime.drain)
    assert await runtime.tick() == TickResult("busy")
    assert await runtime.drain() == [TickResult("busy")]
    wake.gate.set()
    assert [r.job_id for r in await task] == ["a", "b"]


@pytest.mark.parametrize("abort", ["cancel", "fail_lane"])
async def test_a_claim_taken_ahead_is_reached_by_cancel_and_fail_lane(
        harness: Harness, abort: str) -> None:
    """A claim taken ahead is registered: cancelled (or its lane failed)
    before it started, it never runs, and its one outcome is the abort's."""
    runtime, task, wake = await b_claimed_ahead(harness, OwnerRuntime.drain, lane="lane-b")
    assert states(harness)["b"][0] == "running"
    if abort == "cancel":
        assert (await _call(runtime.cancel("b", "stop-b"))).status == "recorded"
        expected = ("settled", "cancelled", 0)
    else:
        assert runtime.fail_lane("lane-b", "gone").settled == 1
        expected = ("settled", "failed", 0)
    wake.gate.set()
    results = await task
    assert harness.executor.started == ["a"]
    assert states(harness)["b"][:3] == expected
    assert results[0].job_id == "a"
    if abort == "cancel":
        assert results[1:] == [TickResult("settled", job_id="b", outcome="cancelled")]


async def _call(result: Any) -> Any:
    return result


async def test_stopping_puts_a_claim_taken_ahead_back_unstarted(harness: Harness) -> None:
    runtime = harness.runtime()
    for name in "abc":
        runtime.ingest(job(name, queue=f"q-{name}"))
    stop = [False]
    seen: list[TickResult] = []

    def on_result(result: TickResult) -> None:
        seen.append(result)
        stop[0] = True  # after a settled, with b taken ahead

    carried: list[bool] = []

    def stopping() -> bool:
        carried.append(runtime._slots[0].ahead is not None)
        return stop[0]

    # Claims ahead while stopping() says no; the settle of a asks it first.
    ended = await tick_until_idle(runtime, on_result=on_result, stopping=stopping)
    assert ended.stop == "stopped" and [r.job_id for r in seen] == ["a"]
    # Asked before a, as a settled (no: b is taken ahead), before b (yes).
    assert carried == [False, False, True]
    rows = states(harness)
    assert rows["b"] == ("queued", None, 0, None, 0)  # put back, no recovery counted
    assert harness.executor.started == ["a"]
    # Nor is it counted as started in the history (written after the loop).
    assert started(harness, "q-a") == 1 and started(harness, "q-b") == 0
    assert await runtime.tick() == TickResult("settled", job_id="b", outcome="completed")
    runtime.flush_history()
    assert started(harness, "q-b") == 1


def started(harness: Harness, queue: str) -> int:
    """The attempts the history counted as started in ``queue``, all minutes."""
    rows = harness.host_query(
        "SELECT coalesce(sum(started), 0) FROM tickwork_queue_history WHERE queue = ?", (queue,))
    return int(rows[0][0])


async def test_a_loop_cancelled_between_jobs_puts_the_claim_back(harness: Harness) -> None:
    runtime, task, _ = await b_claimed_ahead(harness, tick_until_idle)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert states(harness)["b"] == ("queued", None, 0, None, 0)
    assert harness.executor.started == ["a"]
    assert not runtime._slots[0].busy and not runtime._slots[0].executions


async def test_the_loop_budget_is_asked_as_each_job_settles(harness: Harness) -> None:
    now = [1_000]

    def slow(record: Any, signal: Any) -> Completed:
        now[0] += 400
        return Completed()

    runtime = harness.runtime(execute=slow, clock=lambda: now[0])
    for n in range(5):
        runtime.ingest(job(f"j{n}", queue=f"q{n}"))
    ended = await tick_until_idle(runtime, deadline_ms=now[0] + 1_000, now_ms=lambda: now[0])
    assert (ended.stop, ended.ticks) == ("budget", 3)  # 400, 800, 1200 ms
    rows = states(harness)
    assert [rows[f"j{n}"][0] for n in range(5)] == ["settled"] * 3 + ["queued"] * 2
    ended = await tick_until_idle(runtime, max_ticks=1)
    assert (ended.stop, ended.ticks) == ("budget", 1)
    assert [states(harness)[f"j{n}"][0] for n in range(5)] == ["settled"] * 4 + ["queued"]


async def test_with_a_projector_the_settlement_and_the_next_claim_project_together(
        harness: Harness) -> None:
    transitions: list[QueueTransition] = []

    def project(transition: QueueTransition) -> None:
        transitions.append(transition)
        if fail_on[0] is not None and transition.queue == fail_on[0]:
            raise RuntimeError("projection refused")

    fail_on: list[str | None] = [None]
    runtime = harness.runtime(project=project)
    runtime.ingest(job("a", queue="q-a", recovery=Recovery(1)))
    runtime.ingest(job("b", queue="q-b"))
    transitions.clear()
    fail_on[0] = "q-b"  # the claim of b (taken ahead in a's transaction) fails to project
    with pytest.raises(RuntimeError, match="projection refused"):
        await runtime.drain()
    # The settlement of a rolled back with the claim: a is a suspect, recovered.
    rows = states(harness)
    assert rows["a"][0] == "running" and rows["b"][0] == "queued"
    fail_on[0] = None
    transitions.clear()
    results = await harness.runtime(project=project).drain()
    assert [(r.status, r.job_id) for r in results] == [
        ("requeued", "a"), ("settled", "a"), ("settled", "b")]
    settled = [(t.queue, t.settled.job_id if t.settled else None) for t in transitions]
    assert ("q-a", "a") in settled and ("q-b", "b") in settled


async def test_a_concurrent_runtime_drains_its_serial_partition_only(harness: Harness) -> None:
    runtime = harness.concurrent_runtime("fast")
    runtime.ingest(job("s1", queue="q1"))
    runtime.ingest(job("f1", queue="q2", lane="fast"))
    runtime.ingest(job("s2", queue="q3"))
    assert [r.job_id for r in await runtime.drain()] == ["s1", "s2"]
    assert states(harness)["f1"][0] == "queued"
    assert (await runtime.tick_concurrent()).job_id == "f1"


async def test_the_sampled_depth_counts_past_unfiled_and_unlisted_rows(
        harness: Harness) -> None:
    """The owner-local sample counts a queue's index entries without reading
    each row: a drain's settlements not filed yet and rows not listed yet
    (tickwork.stores.index_batching) must not change the depth it writes.
    One minute by the clock: a minute turning mid-drain would sample there."""
    runtime = harness.runtime(clock=lambda: 1_796_000_001_000)
    for start in range(0, 600, 100):
        runtime.ingest_many([job(f"j{n}", queue=f"q{n % 3}") for n in range(start, start + 100)])
    await runtime.drain(max_ticks=150)
    for n in range(600, 630):  # fewer than a listing batch: left unlisted
        runtime.ingest(job(f"j{n}", queue="q0"))
    waiting_rows = ("SELECT count(*) FROM tickwork_jobs WHERE filed = 0 AND state = 'settled'",
                    "SELECT count(*) FROM tickwork_jobs WHERE listed = 0")
    assert all(harness.host_query(query)[0][0] > 0 for query in waiting_rows)
    runtime.flush_history()
    exact = dict(harness.host_query(
        "SELECT queue, count(*) FROM tickwork_jobs WHERE state = 'queued' GROUP BY queue"))
    assert dict(harness.host_query(
        "SELECT queue, depth FROM tickwork_queue_history WHERE depth IS NOT NULL")) == exact
    assert exact["q0"] == 200 - 50 + 30
