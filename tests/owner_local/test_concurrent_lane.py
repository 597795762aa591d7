"""Concurrent owner-local delivery: one concurrent lane, two tick slots, and
the fenced settled feed (read_settled)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.support import Harness, job
from tickwork import Completed, Failed, InvalidArgument, JobRecord, OwnerRuntime, TickResult
from tickwork.model.jobs import MAX_SAFE_INTEGER
from tickwork.runtimes.owner_local import READ_SETTLED_MAX_LIMIT, ConcurrentOwnerRuntime

FAST = "fast"  # the concurrent lane in these tests
SLOW = "slow"  # an ordinary (serial) lane


def serial(job_id: str, queue: str = "q", **fields: Any) -> Any:
    return job(job_id, queue=queue, lane=SLOW, **fields)


def concurrent(job_id: str, queue: str = "q", **fields: Any) -> Any:
    return job(job_id, queue=queue, lane=FAST, **fields)


BLOCK = {"do": "block"}


async def begin(
    harness: Harness, tick: Callable[[], Awaitable[TickResult]], job_id: str
) -> asyncio.Task[TickResult]:
    """Start a tick that must claim ``job_id`` and park in its executor."""
    task = asyncio.ensure_future(tick())
    for _ in range(100):
        if job_id in harness.executor.started or task.done():
            break
        await asyncio.sleep(0.001)
    assert not task.done(), f"the tick finished instead of running {job_id}: {task.result()}"
    assert harness.executor.started[-1] == job_id
    return task


async def drain(runtime: ConcurrentOwnerRuntime) -> None:
    for _ in range(100):
        serial_result = await runtime.tick()
        concurrent_result = await runtime.tick_concurrent()
        if serial_result.status == concurrent_result.status == "idle":
            return
    raise AssertionError("never went idle")


# ------------------------------------------------------------ construction


def test_a_runtime_without_the_option_has_no_tick_concurrent(harness: Harness) -> None:
    runtime = harness.runtime()
    assert type(runtime) is OwnerRuntime
    assert not hasattr(runtime, "tick_concurrent")
    assert not isinstance(runtime, ConcurrentOwnerRuntime)


def test_the_option_opens_a_concurrent_runtime(harness: Harness) -> None:
    runtime = harness.runtime(concurrent_lane=FAST)
    assert type(runtime) is ConcurrentOwnerRuntime
    assert isinstance(runtime, OwnerRuntime)
    assert callable(runtime.tick_concurrent)
    assert runtime.concurrent_lane == FAST
    direct = ConcurrentOwnerRuntime(harness.database(), execute=harness.executor,
                                    is_alive=lambda job: False, wake=harness.wake,
                                    concurrent_lane="x" * 512)
    assert direct.concurrent_lane == "x" * 512


@pytest.mark.parametrize("lane", ["", "x" * 513, 7, b"fast", "\ud800"])
def test_a_bad_concurrent_lane_is_refused_before_anything_is_written(
    harness: Harness, lane: object
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        harness.runtime(concurrent_lane=lane)
    assert caught.value.field == "concurrent_lane"
    tables = harness.host_query("SELECT name FROM sqlite_master WHERE name LIKE 'tickwork%'")
    assert tables == []


def test_a_concurrent_runtime_needs_its_lane(harness: Harness) -> None:
    with pytest.raises(TypeError, match="concurrent_lane"):
        ConcurrentOwnerRuntime(harness.database(), execute=harness.executor,  # type: ignore[call-arg]
                               is_alive=lambda job: False, wake=harness.wake)
    with pytest.raises(InvalidArgument) as caught:
        ConcurrentOwnerRuntime(harness.database(), execute=harness.executor,
                               is_alive=lambda job: False, wake=harness.wake,
                               concurrent_lane=None)  # type: ignore[arg-type]
    assert caught.value.field == "concurrent_lane"


def test_a_subclass_without_the_concurrent_slot_cannot_take_the_option(
    harness: Harness,
) -> None:
    class Custom(OwnerRuntime):
        pass

    assert type(harness.runtime()) is OwnerRuntime
    with pytest.raises(TypeError, match="ConcurrentOwnerRuntime"):
        Custom(harness.database(), execute=harness.executor, is_alive=lambda job: False,
               wake=harness.wake, concurrent_lane=FAST)


# --------------------------------------------------------------- partitions


async def test_each_slot_selects_only_its_partition(harness: Harness) -> None:
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(concurrent("c1", queue="a", priority=9))
    runtime.ingest(concurrent("c2", queue="b"))
    assert await runtime.tick() == TickResult("idle")
    assert harness.executor.started == []
    runtime.ingest(serial("s1", queue="c", priority=-5))
    assert (await runtime.tick()).job_id == "s1"
    assert await runtime.tick() == TickResult("idle")
    assert (await runtime.tick_concurrent()).job_id == "c1"
    assert (await runtime.tick_concurrent()).job_id == "c2"
    assert await runtime.tick_concurrent() == TickResult("idle")
    assert harness.executor.started == ["s1", "c1", "c2"]


async def test_without_the_option_every_lane_is_serial(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(concurrent("c1", queue="a"))
    runtime.ingest(serial("s1", queue="b"))
    assert (await runtime.tick()).job_id == "c1"
    assert (await runtime.tick()).job_id == "s1"


async def test_a_higher_priority_head_in_the_other_lane_holds_the_queue(
    harness: Harness,
) -> None:
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(serial("s-low", queue="q", priority=1))
    runtime.ingest(concurrent("c-high", queue="q", priority=5))
    head = runtime.read_queue_head("q")
    assert head is not None and head.job_id == "c-high"
    # The serial job is not its queue's head: the serial slot must wait.
    assert await runtime.tick() == TickResult("idle")
    assert (await runtime.tick_concurrent()).job_id == "c-high"
    assert (await runtime.tick()).job_id == "s-low"

    runtime.ingest(concurrent("c-low", queue="r", priority=1))
    runtime.ingest(serial("s-high", queue="r", priority=5))
    assert await runtime.tick_concurrent() == TickResult("idle")
    assert (await runtime.tick()).job_id == "s-high"
    assert (await runtime.tick_concurrent()).job_id == "c-low"


async def test_equal_priority_heads_go_by_enqueue_order_across_lanes(harness: Harness) -> None:
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(concurrent("c-first", queue="q"))
    runtime.ingest(serial("s-second", queue="q"))
    runtime.ingest(concurrent("c-third", queue="q"))
    assert await runtime.tick() == TickResult("idle")
    assert (await runtime.tick_concurrent()).job_id == "c-first"
    # c-third is the best concurrent-lane job but not the head: s-second is.
    assert await runtime.tick_concurrent() == TickResult("idle")
    assert (await runtime.tick()).job_id == "s-second"
    assert (await runtime.tick_concurrent()).job_id == "c-third"


async def test_a_running_job_holds_its_queue_for_the_other_slot(harness: Harness) -> None:
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(serial("s-running", queue="q", payload=BLOCK))
    serial_tick = await begin(harness, runtime.tick, "s-running")
    runtime.ingest(concurrent("c-urgent", queue="q", priority=100))
    runtime.ingest(concurrent("c-elsewhere", queue="other", priority=-100))
    head = runtime.read_queue_head("q")
    assert head is not None and (head.job_id, head.state) == ("s-running", "running")
    # The running serial job is q's head: the concurrent slot runs elsewhere.
    assert (await runtime.tick_concurrent()).job_id == "c-elsewhere"
    assert await runtime.tick_concurrent() == TickResult("idle")
    harness.executor.release("s-running")
    assert (await serial_tick).job_id == "s-running"
    assert (await runtime.tick_concurrent()).job_id == "c-urgent"

    # And the reverse: a running concurrent-lane job holds its queue.
    runtime.ingest(concurrent("c-running", queue="p", payload=BLOCK))
    concurrent_tick = await begin(harness, runtime.tick_concurrent, "c-running")
    runtime.ingest(serial("s-urgent", queue="p", priority=100))
    assert await runtime.tick() == TickResult("idle")
    harness.executor.release("c-running")
    assert (await concurrent_tick).job_id == "c-running"
    assert (await runtime.tick()).job_id == "s-urgent"


async def test_heads_are_found_behind_a_deep_backlog_of_the_other_partition(
    harness: Harness,
) -> None:
    """More runnable jobs than the concurrent slot's first look covers (64):
    it still picks its best job that heads its queue, in head order."""
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(concurrent("c-first", queue="cz", priority=-1))
    runtime.ingest(serial("s-top", queue="t", priority=9))
    runtime.ingest(concurrent("c-top-held", queue="t", priority=9))  # behind s-top
    for index in range(80):
        runtime.ingest(serial(f"s{index:02}", queue=f"s{index:02}", priority=5))
    runtime.ingest(concurrent("c-held", queue="s00", priority=2))  # behind s00
    runtime.ingest(concurrent("c-low", queue="ca", priority=0))
    runtime.ingest(concurrent("c-high", queue="cb", priority=1))
    runtime.ingest(concurrent("c-late-high", queue="cy", priority=7))
    # c-late-high is among the first 64 jobs in pick order, the others not.
    assert (await runtime.tick_concurrent()).job_id == "c-late-high"
    assert (await runtime.tick_concurrent()).job_id == "c-high"
    assert (await runtime.tick_concurrent()).job_id == "c-low"
    assert (await runtime.tick_concurrent()).job_id == "c-first"
    assert await runtime.tick_concurrent() == TickResult("idle")
    assert (await runtime.tick()).job_id == "s-top"
    assert (await runtime.tick_concurrent()).job_id == "c-top-held"
    assert (await runtime.tick()).job_id == "s00"
    assert (await runtime.tick_concurrent()).job_id == "c-held"
    assert await runtime.tick_concurrent() == TickResult("idle")
    for index in range(1, 80):
        assert (await runtime.tick()).job_id == f"s{index:02}"
    assert await runtime.tick() == TickResult("idle")


# ------------------------------------------------------------------ the slots


async def test_a_slow_concurrent_job_does_not_stall_the_serial_slot(harness: Harness) -> None:
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(concurrent("c-slow", queue="c", payload=BLOCK))
    for index in range(5):
        runtime.ingest(serial(f"s{index}", queue=f"s{index % 2}"))
    concurrent_tick = await begin(harness, runtime.tick_concurrent, "c-slow")
    for index in range(5):
        assert await runtime.tick() == TickResult("settled", job_id=f"s{index}",
                                                  outcome="completed")
    assert not concurrent_tick.done()
    harness.executor.release("c-slow")
    assert (await concurrent_tick).job_id == "c-slow"


async def test_a_slow_serial_job_does_not_stall_the_concurrent_slot(harness: Harness) -> None:
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(serial("s-slow", queue="s", payload=BLOCK))
    for index in range(5):
        runtime.ingest(concurrent(f"c{index}", queue=f"c{index % 2}"))
    serial_tick = await begin(harness, runtime.tick, "s-slow")
    for index in range(5):
        assert await runtime.tick_concurrent() == TickResult(
            "settled", job_id=f"c{index}", outcome="completed")
    assert not serial_tick.done()
    harness.executor.release("s-slow")
    assert (await serial_tick).job_id == "s-slow"


async def test_one_of_each_slot_runs_at_once_never_two_of_one(harness: Harness) -> None:
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(serial("s-slow", queue="s", payload=BLOCK))
    runtime.ingest(concurrent("c-slow", queue="c", payload=BLOCK))
    runtime.ingest(serial("s-next", queue="s2"))
    runtime.ingest(concurrent("c-next", queue="c2"))
    serial_tick = await begin(harness, runtime.tick, "s-slow")
    concurrent_tick = await begin(harness, runtime.tick_concurrent, "c-slow")
    assert harness.executor.running == 2
    assert await runtime.tick() == TickResult("busy")
    assert await runtime.tick_concurrent() == TickResult("busy")
    assert harness.executor.started == ["s-slow", "c-slow"]
    harness.executor.release("c-slow")
    assert (await concurrent_tick).job_id == "c-slow"
    # The serial slot is still busy; the concurrent one is free again.
    assert await runtime.tick() == TickResult("busy")
    assert (await runtime.tick_concurrent()).job_id == "c-next"
    harness.executor.release("s-slow")
    assert (await serial_tick).job_id == "s-slow"
    assert (await runtime.tick()).job_id == "s-next"


async def test_many_concurrent_calls_run_at_most_one_job_per_slot(harness: Harness) -> None:
    runtime = harness.concurrent_runtime(FAST)
    expected = []
    for index in range(12):
        maker = concurrent if index % 3 == 0 else serial
        runtime.ingest(maker(f"j{index}", queue=f"q{index % 4}"))
        expected.append(f"j{index}")
    settled: list[str] = []
    for _ in range(40):
        calls = [runtime.tick() for _ in range(3)] + [runtime.tick_concurrent() for _ in range(3)]
        results = await asyncio.gather(*calls)
        serial_settled = [r for r in results[:3] if r.status == "settled"]
        concurrent_settled = [r for r in results[3:] if r.status == "settled"]
        assert len(serial_settled) <= 1 and len(concurrent_settled) <= 1
        for result in serial_settled + concurrent_settled:
            assert result.job_id is not None
            settled.append(result.job_id)
        for result in serial_settled:
            record = runtime.read(result.job_id or "")
            assert record is not None and record.lane == SLOW
        for result in concurrent_settled:
            record = runtime.read(result.job_id or "")
            assert record is not None and record.lane == FAST
        if len(settled) == len(expected):
            break
    assert sorted(settled) == sorted(expected)
    assert harness.executor.max_running <= 2


async def test_both_slots_share_the_projection_and_wake(harness: Harness) -> None:
    runtime = harness.concurrent_runtime(FAST, project=harness.recording_projector())
    runtime.ingest(serial("s", queue="a", payload=BLOCK))
    runtime.ingest(concurrent("c", queue="b"))
    serial_tick = await begin(harness, runtime.tick, "s")
    harness.projections.clear()
    wakes = harness.wake.calls
    assert (await runtime.tick_concurrent()).job_id == "c"
    settled = [t.settled.job_id for t in harness.projections if t.settled is not None]
    assert settled == ["c"]
    assert harness.wake.calls > wakes
    harness.executor.release("s")
    assert (await serial_tick).job_id == "s"
    settled = [t.settled.job_id for t in harness.projections if t.settled is not None]
    assert settled == ["c", "s"]


# ------------------------------------------------------------- cancellation


async def test_cancellation_signals_only_the_slot_that_runs_the_job(harness: Harness) -> None:
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(serial("s", queue="a", payload=BLOCK))
    runtime.ingest(concurrent("c", queue="b", payload=BLOCK))
    serial_tick = await begin(harness, runtime.tick, "s")
    concurrent_tick = await begin(harness, runtime.tick_concurrent, "c")
    signals = harness.executor.signals

    assert runtime.cancel("c", "stop-c").status == "recorded"
    assert signals["c"].aborted and signals["c"].reason == "cancelled"
    assert not signals["s"].aborted
    assert await concurrent_tick == TickResult("settled", job_id="c", outcome="cancelled")
    assert not serial_tick.done()

    assert runtime.cancel("s", "stop-s").status == "recorded"
    assert signals["s"].aborted
    assert await serial_tick == TickResult("settled", job_id="s", outcome="cancelled")


async def test_transactional_cancellation_reaches_the_concurrent_slot(harness: Harness) -> None:
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(concurrent("c", queue="b", payload=BLOCK))
    concurrent_tick = await begin(harness, runtime.tick_concurrent, "c")

    def cancel() -> str:
        return runtime.transactional.cancel("c", "stop").status

    assert harness.host_transaction(cancel) == "recorded"
    assert await concurrent_tick == TickResult("settled", job_id="c", outcome="cancelled")


async def test_refusing_the_concurrent_lane_stops_only_its_slot(harness: Harness) -> None:
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(serial("s", queue="a", payload=BLOCK))
    runtime.ingest(concurrent("c", queue="b", payload=BLOCK))
    runtime.ingest(concurrent("c-waiting", queue="b"))
    serial_tick = await begin(harness, runtime.tick, "s")
    concurrent_tick = await begin(harness, runtime.tick_concurrent, "c")
    result = runtime.fail_lane(FAST, "lane_closed")
    assert (result.settled, result.more) == (2, False)
    assert harness.executor.signals["c"].reason == "lane_failed"
    assert not harness.executor.signals["s"].aborted
    assert await concurrent_tick == TickResult("settled", job_id="c", outcome="failed",
                                               failure_reason="lane_closed")
    harness.executor.release("s")
    assert (await serial_tick).outcome == "completed"


async def test_cancelled_queued_jobs_settle_past_a_busy_queue_in_their_own_slot(
    harness: Harness,
) -> None:
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(serial("s-running", queue="q", payload=BLOCK))
    runtime.ingest(concurrent("c-behind", queue="q"))
    serial_tick = await begin(harness, runtime.tick, "s-running")
    assert runtime.cancel("c-behind", "x").status == "recorded"
    # The serial slot is busy, and q's head is running: the concurrent slot
    # still settles the cancelled job, without executing it.
    assert await runtime.tick_concurrent() == TickResult("settled", job_id="c-behind",
                                                         outcome="cancelled")
    harness.executor.release("s-running")
    await serial_tick

    runtime.ingest(concurrent("c-running", queue="p", payload=BLOCK))
    runtime.ingest(serial("s-behind", queue="p"))
    concurrent_tick = await begin(harness, runtime.tick_concurrent, "c-running")
    runtime.cancel("s-behind", "y")
    assert await runtime.tick() == TickResult("settled", job_id="s-behind", outcome="cancelled")
    harness.executor.release("c-running")
    await concurrent_tick
    assert harness.executor.started == ["s-running", "c-running"]


async def test_a_cancelled_job_is_settled_by_its_own_slot_only(harness: Harness) -> None:
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(concurrent("c", queue="a"))
    runtime.ingest(serial("s", queue="b"))
    runtime.cancel("c", "x")
    runtime.cancel("s", "y")
    assert await runtime.tick() == TickResult("settled", job_id="s", outcome="cancelled")
    assert await runtime.tick() == TickResult("idle")
    assert await runtime.tick_concurrent() == TickResult("settled", job_id="c",
                                                         outcome="cancelled")
    assert harness.executor.started == []


async def test_a_cancelled_head_in_the_other_lane_does_not_hold_its_queue(
    harness: Harness,
) -> None:
    """A cancelled queued job never runs, so it is not the head a slot waits
    for: the job behind it runs while the other slot is busy elsewhere."""
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(concurrent("c-busy", queue="elsewhere", payload=BLOCK))
    concurrent_tick = await begin(harness, runtime.tick_concurrent, "c-busy")
    runtime.ingest(concurrent("c-cancelled", queue="q", priority=9))
    runtime.ingest(serial("s-behind", queue="q"))
    runtime.cancel("c-cancelled", "x")
    assert (await runtime.tick()).job_id == "s-behind"
    harness.executor.release("c-busy")
    await concurrent_tick
    assert await runtime.tick_concurrent() == TickResult("settled", job_id="c-cancelled",
                                                         outcome="cancelled")


# ------------------------------------------------------------------ recovery


async def orphan(harness: Harness, record: Any) -> None:
    """Leave ``record`` running with no live executor, as a crashed process would.

    Earlier orphans are reported alive meanwhile, so the dying runtime leaves
    them alone."""
    harness.alive = lambda job: True
    dying = harness.runtime()  # no concurrent lane: it runs any job
    dying.ingest(record)
    task = asyncio.create_task(dying.tick())
    for _ in range(100):
        if record.job_id in harness.executor.started:
            break
        await asyncio.sleep(0.001)
    await harness.crash(task)
    stored = harness.runtime().read(record.job_id)
    assert stored is not None and stored.state == "running"


async def test_recovery_probes_only_the_ticking_slots_partition(harness: Harness) -> None:
    await orphan(harness, serial("s-orphan", queue="a", payload=BLOCK))
    await orphan(harness, concurrent("c-orphan", queue="b", payload=BLOCK))
    probed: list[str] = []

    def alive(job: JobRecord) -> bool:
        probed.append(job.job_id)
        raise ConnectionError("no answer")

    runtime = harness.concurrent_runtime(FAST, is_alive=alive)
    result = await runtime.tick()
    assert (result.status, result.job_id) == ("liveness_unknown", "s-orphan")
    result = await runtime.tick()
    assert (result.status, result.job_id) == ("liveness_unknown", "s-orphan")
    assert probed == ["s-orphan", "s-orphan"]
    result = await runtime.tick_concurrent()
    assert (result.status, result.job_id) == ("liveness_unknown", "c-orphan")
    assert probed == ["s-orphan", "s-orphan", "c-orphan"]

    probed.clear()
    harness.alive = lambda job: probed.append(job.job_id) is not None  # False: gone
    runtime = harness.concurrent_runtime(FAST)
    assert await runtime.tick_concurrent() == TickResult("settled", job_id="c-orphan",
                                                         outcome="interrupted")
    assert await runtime.tick_concurrent() == TickResult("idle")
    assert probed == ["c-orphan"]
    record = runtime.read("s-orphan")
    assert record is not None and record.state == "running"
    assert await runtime.tick() == TickResult("settled", job_id="s-orphan",
                                              outcome="interrupted")
    assert probed == ["c-orphan", "s-orphan"]


async def test_a_busy_slots_claim_is_never_probed_by_the_other(harness: Harness) -> None:
    probed: list[str] = []

    def alive(job: JobRecord) -> bool:
        probed.append(job.job_id)
        return False

    runtime = harness.concurrent_runtime(FAST, is_alive=alive)
    runtime.ingest(serial("s", queue="a", payload=BLOCK))
    serial_tick = await begin(harness, runtime.tick, "s")
    for _ in range(3):
        assert await runtime.tick_concurrent() == TickResult("idle")
    runtime.ingest(concurrent("c", queue="b", payload=BLOCK))
    concurrent_tick = await begin(harness, runtime.tick_concurrent, "c")
    harness.executor.release("s")
    assert (await serial_tick).outcome == "completed"
    for _ in range(3):
        assert await runtime.tick() == TickResult("idle")
    harness.executor.release("c")
    assert (await concurrent_tick).outcome == "completed"
    assert probed == []


async def test_the_idle_slot_recovers_its_partition_while_the_other_runs(
    harness: Harness,
) -> None:
    await orphan(harness, concurrent("c-orphan", queue="b", payload=BLOCK))
    harness.alive = lambda job: False
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(serial("s-slow", queue="a", payload=BLOCK))
    serial_tick = await begin(harness, runtime.tick, "s-slow")
    assert await runtime.tick_concurrent() == TickResult("settled", job_id="c-orphan",
                                                         outcome="interrupted")
    harness.executor.release("s-slow")
    assert (await serial_tick).outcome == "completed"


# ---------------------------------------------------------------- has_pending


async def test_has_pending_work_covers_both_partitions(harness: Harness) -> None:
    runtime = harness.concurrent_runtime(FAST)
    assert not runtime.has_pending_work()
    runtime.ingest(concurrent("c", queue="a", payload=BLOCK))
    assert runtime.has_pending_work()
    assert await runtime.tick() == TickResult("idle")
    assert runtime.has_pending_work()
    concurrent_tick = await begin(harness, runtime.tick_concurrent, "c")
    assert runtime.has_pending_work()  # running counts
    harness.executor.release("c")
    await concurrent_tick
    assert not runtime.has_pending_work()
    runtime.ingest(serial("s", queue="a"))
    assert runtime.has_pending_work()
    assert await runtime.tick_concurrent() == TickResult("idle")
    assert runtime.has_pending_work()
    await runtime.tick()
    assert not runtime.has_pending_work()


# -------------------------------------------------------------- read_settled


def ids(records: list[JobRecord]) -> list[str]:
    return [record.job_id for record in records]


async def test_read_settled_pages_through_settlements_in_enqueue_order(
    harness: Harness,
) -> None:
    runtime = harness.runtime()
    assert runtime.read_settled(10) == []
    for index in range(7):
        # Higher priorities later: the jobs settle in reverse enqueue order.
        runtime.ingest(job(f"j{index}", queue=f"q{index}", priority=index))
    for _ in range(7):
        await runtime.tick()
    everything = runtime.read_settled(10)
    assert ids(everything) == [f"j{index}" for index in range(7)]
    assert [record.sequence for record in everything] == sorted(
        record.sequence for record in everything)
    assert all(record.state == "settled" for record in everything)
    pages, after = [], 0
    while page := runtime.read_settled(3, after_sequence=after):
        assert len(page) <= 3
        pages.append(ids(page))
        after = page[-1].sequence
    assert pages == [["j0", "j1", "j2"], ["j3", "j4", "j5"], ["j6"]]
    assert runtime.read_settled(5, after_sequence=everything[-1].sequence) == []
    assert runtime.read_settled(5, after_sequence=MAX_SAFE_INTEGER) == []


async def test_the_prefix_fence_withholds_later_settlements(harness: Harness) -> None:
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(serial("early", queue="a", priority=0))
    runtime.ingest(serial("late", queue="b", priority=5))  # runs first
    assert (await runtime.tick()).job_id == "late"
    assert runtime.read_settled(10) == []  # "early" has not settled yet
    late = runtime.read("late")
    assert late is not None and late.state == "settled"  # still readable by id
    assert (await runtime.tick()).job_id == "early"
    assert ids(runtime.read_settled(10)) == ["early", "late"]


async def test_a_running_serial_job_fences_the_feed(harness: Harness) -> None:
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(serial("first", queue="a"))
    runtime.ingest(serial("running", queue="b", payload=BLOCK))
    runtime.ingest(serial("after", queue="c"))
    assert (await runtime.tick()).job_id == "first"
    serial_tick = await begin(harness, runtime.tick, "running")
    assert ids(runtime.read_settled(10)) == ["first"]
    harness.executor.release("running")
    await serial_tick
    assert ids(runtime.read_settled(10)) == ["first", "running"]
    await runtime.tick()
    assert ids(runtime.read_settled(10)) == ["first", "running", "after"]


async def test_purging_the_unsettled_jobs_releases_the_fence(harness: Harness) -> None:
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(serial("doomed-1", queue="purged", priority=0))
    runtime.ingest(serial("doomed-2", queue="purged", priority=0))
    runtime.ingest(serial("done", queue="kept", priority=5))
    assert (await runtime.tick()).job_id == "done"
    assert runtime.read_settled(10) == []
    assert runtime.purge("purged") == 2
    assert ids(runtime.read_settled(10)) == ["done"]


async def test_concurrent_receipts_never_take_a_page_slot(harness: Harness) -> None:
    runtime = harness.concurrent_runtime(FAST)
    for index in range(4):
        runtime.ingest(concurrent(f"c{index}a", queue=f"cq{index}"))
        runtime.ingest(serial(f"s{index}", queue=f"sq{index}"))
        runtime.ingest(concurrent(f"c{index}b", queue=f"cq{index}"))
    # Unsettled concurrent-lane jobs do not hold the serial feed back.
    for _ in range(4):
        await runtime.tick()
    assert ids(runtime.read_settled(2)) == ["s0", "s1"]
    first = runtime.read_settled(2)
    assert ids(runtime.read_settled(2, after_sequence=first[-1].sequence)) == ["s2", "s3"]
    assert ids(runtime.read_settled(100)) == ["s0", "s1", "s2", "s3"]
    await drain(runtime)
    assert ids(runtime.read_settled(100)) == ["s0", "s1", "s2", "s3"]
    receipt = runtime.read("c2b")
    assert receipt is not None and (receipt.state, receipt.outcome) == ("settled", "completed")


async def test_every_outcome_counts_as_settled_in_the_feed(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("cancelled", queue="a"))
    runtime.ingest(job("failed", queue="b", payload={"do": "raise"}))
    runtime.ingest(job("refused", queue="c", lane="closed"))
    runtime.cancel("cancelled", "x")
    runtime.fail_lane("closed", "nope")
    await runtime.tick()
    await runtime.tick()
    records = runtime.read_settled(10)
    assert ids(records) == ["cancelled", "failed", "refused"]
    assert [r.outcome for r in records] == ["cancelled", "failed", "failed"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((0,), "limit"),
        ((-1,), "limit"),
        ((READ_SETTLED_MAX_LIMIT + 1,), "limit"),
        ((True,), "limit"),
        ((2.0,), "limit"),
        (("10",), "limit"),
        ((None,), "limit"),
        ((10, -1), "after_sequence"),
        ((10, MAX_SAFE_INTEGER + 1), "after_sequence"),
        ((10, False), "after_sequence"),
        ((10, 1.5), "after_sequence"),
        ((10, None), "after_sequence"),
    ],
)
def test_read_settled_validates_its_arguments(
    harness: Harness, args: tuple[Any, ...], field: str
) -> None:
    runtime = harness.concurrent_runtime(FAST)
    with pytest.raises(InvalidArgument) as caught:
        runtime.read_settled(*args)
    assert caught.value.field == field


def test_read_settled_accepts_its_bounds(harness: Harness) -> None:
    runtime = harness.runtime()
    assert runtime.read_settled(READ_SETTLED_MAX_LIMIT, after_sequence=MAX_SAFE_INTEGER) == []
    assert runtime.read_settled(1, 0) == []


async def test_a_completed_receipt_and_a_failure_settle_in_parallel(harness: Harness) -> None:
    """Both slots settle through the same fenced settle statement."""
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(serial("s", queue="a", payload=BLOCK))
    runtime.ingest(concurrent("c", queue="b", payload=BLOCK))
    serial_tick = await begin(harness, runtime.tick, "s")
    concurrent_tick = await begin(harness, runtime.tick_concurrent, "c")
    harness.executor.release("s", Failed("nope"))
    harness.executor.release("c", Completed())
    serial_result, concurrent_result = await asyncio.gather(serial_tick, concurrent_tick)
    assert serial_result == TickResult("settled", job_id="s", outcome="failed",
                                       failure_reason="nope")
    assert concurrent_result == TickResult("settled", job_id="c", outcome="completed")


async def test_neither_ticker_claims_a_job_of_a_paused_queue(harness: Harness) -> None:
    runtime = harness.concurrent_runtime(FAST)
    runtime.ingest(concurrent("fast-a", queue="a"))
    runtime.ingest(serial("slow-a", queue="a"))
    runtime.ingest(concurrent("fast-b", queue="b"))
    runtime.ingest(serial("slow-c", queue="c"))
    assert runtime.pause("a") is True
    assert (await runtime.tick_concurrent()).job_id == "fast-b"
    assert (await runtime.tick_concurrent()).status == "idle"
    assert (await runtime.tick()).job_id == "slow-c"
    assert (await runtime.tick()).status == "idle"
    assert runtime.has_pending_work() is False
    assert runtime.resume("a") is True
    assert (await runtime.tick_concurrent()).job_id == "fast-a"
    assert (await runtime.tick()).job_id == "slow-a"


async def test_waiting_jobs_hold_no_queue_in_either_ticker(harness: Harness) -> None:
    """A job waiting for its due time, in either partition, is claimed by
    neither ticker and holds its queue for neither; once due, its own ticker
    claims it, as the queue's head across lanes."""
    from tests.support.shared import ManualNow

    now = ManualNow()
    runtime = harness.concurrent_runtime(FAST, clock=now)
    runtime.ingest(concurrent("fast-later", priority=9, delay_ms=1_000))
    runtime.ingest(serial("slow-later", queue="s", priority=9, delay_ms=2_000))
    runtime.ingest(serial("slow-now"))
    runtime.ingest(concurrent("fast-now", queue="f"))
    assert (await runtime.tick_concurrent()).job_id == "fast-now"
    assert (await runtime.tick_concurrent()).status == "idle"
    assert (await runtime.tick()).job_id == "slow-now"
    assert (await runtime.tick()).status == "idle"
    assert runtime.next_tick_at() == now() + 1_000
    now.advance(1_000)
    assert (await runtime.tick()).status == "idle"  # not the serial ticker's job
    assert (await runtime.tick_concurrent()).job_id == "fast-later"
    assert runtime.next_tick_at() == now() + 1_000
    now.advance(1_000)
    assert (await runtime.tick_concurrent()).status == "idle"
    assert (await runtime.tick()).job_id == "slow-later"
    assert runtime.next_tick_at() is None


# ------------------------------------- rows another runtime left unlisted


async def test_a_head_another_runtime_left_unlisted_holds_its_queue(harness: Harness) -> None:
    # A runtime with a concurrent lane lists each row as it inserts it; a
    # runtime without one lists every 100 (schema 0009). Here such a runtime
    # on the same database leaves the best job of queue q, in the serial
    # lane, unlisted: the concurrent ticker must still see it head q.
    lists_later = harness.runtime()
    assert lists_later.ingest(concurrent("listed", queue="q")) == "queued"  # a first insert lists
    assert lists_later.ingest(serial("best", queue="q", priority=5)) == "queued"
    assert lists_later.ingest(concurrent("other", queue="r", priority=1)) == "queued"
    unlisted = harness.host_query(
        "SELECT job_id FROM tickwork_jobs WHERE listed = 0 ORDER BY sequence")
    assert [row[0] for row in unlisted] == ["best", "other"]
    runtime = harness.runtime(concurrent_lane=FAST)
    result = await runtime.tick_concurrent()
    assert (result.status, result.job_id) == ("settled", "other")
    # q's head runs on the serial ticker; then q's concurrent job.
    assert (await runtime.tick()).job_id == "best"
    assert (await runtime.tick_concurrent()).job_id == "listed"


async def test_a_runtime_with_a_concurrent_lane_lists_and_files_at_once(
        harness: Harness) -> None:
    runtime = harness.runtime(concurrent_lane=FAST)
    for n in range(5):
        runtime.ingest(serial(f"s{n}", queue=f"q{n}"))
    runtime.ingest_many([concurrent(f"c{n}", queue=f"q{n}") for n in range(5)])
    assert harness.host_query("SELECT count(*) FROM tickwork_jobs WHERE listed = 0") == [(0,)]
    assert len(await runtime.drain()) == 5
    assert harness.host_query(
        "SELECT count(*) FROM tickwork_jobs WHERE state = 'settled' AND filed = 0") == [(0,)]
