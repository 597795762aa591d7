"""drain(): the worker loop whose settlements carry the next claim."""

from __future__ import annotations

import asyncio

import pytest

from tests.support import job
from tests.support.shared import SharedHarness, until
from tickwork import Completed, InvalidArgument, JobRecord
from tickwork.runtimes.shared import _UNKNOWN as UNKNOWN_SLOT
from tickwork.runtimes.shared import MAX_DRAIN_CONCURRENCY


async def test_drain_runs_every_ready_job_in_pick_order_then_stops(shared: SharedHarness) -> None:
    runtime = shared.runtime()
    for index in range(12):
        await runtime.ingest(job(f"j{index:02}", queue=f"q{index % 3}", priority=index % 2))
    results = await runtime.drain()
    assert [r.status for r in results] == ["settled"] * 12
    expected = sorted((f"j{i:02}" for i in range(12)), key=lambda j: (-(int(j[1:]) % 2), j))
    assert [r.job_id for r in results] == expected
    assert set((await shared.job_states()).values()) == {("settled", "completed")}
    assert await runtime.drain() == []


async def test_drain_never_leaves_a_claim_taken_ahead_unrun(shared: SharedHarness) -> None:
    runtime = shared.runtime()
    for index in range(10):
        await runtime.ingest(job(f"j{index}", queue=f"q{index}"))
    results = await runtime.drain(max_ticks=4)
    assert len(results) == 4
    states = await shared.job_states()
    assert sorted(state for state, _ in states.values()) == ["queued"] * 6 + ["settled"] * 4
    results = await runtime.drain(budget_ms=1)
    assert 1 <= len(results) <= 6
    assert "running" not in {state for state, _ in (await shared.job_states()).values()}


async def test_drain_holds_the_busy_guard_and_reports_every_outcome(
    shared: SharedHarness,
) -> None:
    runtime, admin = shared.runtime(), shared.runtime()
    await admin.ingest(job("block", payload={"do": "block"}))
    await admin.ingest(job("boom", queue="other", payload={"do": "raise"}))
    await admin.ingest(job("gone", queue="third"))
    await admin.cancel("gone", "c")
    task = asyncio.create_task(runtime.drain())
    await until(lambda: "block" in shared.executor.started, while_running=task)
    assert (await runtime.tick()).status == "busy"
    busy = await runtime.drain()
    assert [r.status for r in busy] == ["busy"]
    shared.executor.release("block")
    results = await task
    outcomes = {r.job_id: (r.outcome, r.failure_reason) for r in results}
    assert outcomes == {
        "gone": ("cancelled", None),
        "block": ("completed", None),
        "boom": ("failed", "execution_failed"),
    }


async def test_drain_validates_its_limits(shared: SharedHarness) -> None:
    runtime = shared.runtime()
    with pytest.raises(InvalidArgument):
        await runtime.drain(max_ticks=0)
    with pytest.raises(InvalidArgument):
        await runtime.drain(budget_ms=-1)


async def test_a_drain_with_a_budget_sleeps_until_a_job_due_within_it(
        shared: SharedHarness) -> None:
    """By database time: the drain waits for the job due in 0.3 s (it does not
    spin: about one read per wait), and does not wait for one due after its
    budget."""
    runtime = shared.runtime(db_time=True)
    await runtime.ingest(job("soon", queue="a", delay_ms=300))
    await runtime.ingest(job("much-later", queue="b", delay_ms=60_000))
    loop = asyncio.get_running_loop()
    started = loop.time()
    results = await runtime.drain(budget_ms=5_000)
    waited = loop.time() - started
    assert [(r.job_id, r.outcome) for r in results] == [("soon", "completed")]
    assert 0.25 <= waited < 4.0, waited
    # Due after the budget: no wait. A drain that waited, or spun, would take
    # the whole 2 s budget; one that returns at once takes a few round trips,
    # which under real Pyodide and Miniflare in CI took over 0.4 s.
    started = loop.time()
    assert await runtime.drain(budget_ms=2_000) == []
    assert loop.time() - started < 1.5
    assert (await runtime.read("much-later")).state == "queued"  # type: ignore[union-attr]


async def test_a_drain_without_a_budget_returns_when_nothing_is_due(
        shared: SharedHarness) -> None:
    runtime = shared.runtime(db_time=True)
    await runtime.ingest(job("later", delay_ms=60_000))
    assert await runtime.drain() == []
    assert await runtime.next_tick_at() is not None


async def test_a_budgeted_drain_ends_instead_of_spinning_on_work_it_cannot_take(
        shared: SharedHarness) -> None:
    """Another worker runs the only queue's job: pending work, but none this
    drain can take. It ends at once (a few reads), not after its budget."""
    other, runtime = shared.runtime(db_time=True), shared.runtime(db_time=True)
    await other.ingest(job("held", queue="a", payload={"do": "block"}))
    await other.ingest(job("behind", queue="a"))
    task = asyncio.create_task(other.tick())
    await until(lambda: "held" in shared.executor.started, while_running=task)
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await runtime.drain(budget_ms=3_000) == []
    assert loop.time() - started < 1.0
    shared.executor.release("held")
    assert (await task).outcome == "completed"


# --------------------------------------------------- drain(concurrency=N)


async def test_a_concurrent_drain_runs_jobs_of_different_queues_at_once(
        shared: SharedHarness) -> None:
    """Four loops hold four blocked jobs at once, each under its lease; the
    fifth job shares a queue with a running one and waits for it."""
    runtime, admin = shared.runtime(), shared.runtime()
    for index in range(4):
        await admin.ingest(job(f"j{index}", queue=f"q{index}", payload={"do": "block"}))
    await admin.ingest(job("after-j0", queue="q0"))
    task = asyncio.create_task(runtime.drain(concurrency=4))
    await until(lambda: len(shared.executor.started) == 4, while_running=task)
    assert sorted(shared.executor.started) == ["j0", "j1", "j2", "j3"]
    states = await shared.job_states()
    assert sorted(j for j, (state, _) in states.items() if state == "running") == [
        "j0", "j1", "j2", "j3"]
    assert states["after-j0"] == ("queued", None)
    assert (await runtime.tick()).status == "busy"
    assert [r.status for r in await runtime.drain(concurrency=2)] == ["busy"]
    for index in (2, 0, 3, 1):
        shared.executor.release(f"j{index}")
    results = await task
    assert sorted(r.job_id or "" for r in results) == ["after-j0", "j0", "j1", "j2", "j3"]
    assert {r.status for r in results} == {"settled"}
    assert shared.executor.started.count("after-j0") == 1
    assert set((await shared.job_states()).values()) == {("settled", "completed")}


async def test_a_concurrent_drain_shares_max_ticks_and_leaves_nothing_running(
        shared: SharedHarness) -> None:
    runtime = shared.runtime()
    for index in range(10):
        await runtime.ingest(job(f"j{index}", queue=f"q{index}"))
    results = await runtime.drain(max_ticks=4, concurrency=3)
    assert len(results) == 4 and {r.status for r in results} == {"settled"}
    # More loops than ticks: only as many loops as there are ticks run.
    assert len(await runtime.drain(max_ticks=2, concurrency=8)) == 2
    states = await shared.job_states()
    assert sorted(state for state, _ in states.values()) == ["queued"] * 4 + ["settled"] * 6
    rest = await runtime.drain(concurrency=8)
    assert sorted(r.job_id or "" for r in rest) == sorted(
        j for j, (state, _) in states.items() if state == "queued")
    assert set((await shared.job_states()).values()) == {("settled", "completed")}


async def test_concurrent_drains_on_several_workers_settle_each_job_once(
        shared: SharedHarness) -> None:
    """Three workers draining four loops each over one table: every job is
    claimed once and settled once (the claims are fenced, not serialised)."""
    runtimes = [shared.runtime() for _ in range(3)]
    await runtimes[0].ingest_many([job(f"j{index:02}", queue=f"q{index % 6}")
                                   for index in range(30)])
    drained = await asyncio.gather(*(r.drain(concurrency=4) for r in runtimes))
    settled = sorted(r.job_id or "" for results in drained for r in results)
    assert settled == [f"j{index:02}" for index in range(30)]
    assert sorted(shared.executor.started) == settled
    assert set((await shared.job_states()).values()) == {("settled", "completed")}
    # The history the twelve loops counted adds up: each job once.
    for runtime in runtimes:
        await runtime.flush_history()
    enqueued = started = completed = 0
    for queue in (f"q{index}" for index in range(6)):
        history = await runtimes[0].history(queue, since=shared.now() - 7_200_000, bucket=3600)
        assert history is not None
        enqueued += sum(point.enqueued for point in history.points)
        started += sum(point.started for point in history.points)
        completed += sum(point.completed for point in history.points)
    assert (enqueued, started, completed) == (30, 30, 30)


async def test_drain_validates_its_concurrency(shared: SharedHarness) -> None:
    runtime = shared.runtime()
    await runtime.ingest(job("kept"))
    for bad in (0, -1, MAX_DRAIN_CONCURRENCY + 1, True, 1.5, "2"):
        with pytest.raises(InvalidArgument) as refused:
            await runtime.drain(concurrency=bad)  # type: ignore[arg-type]
        assert refused.value.field == "concurrency"
    assert await shared.job_states() == {"kept": ("queued", None)}


@pytest.mark.parametrize("concurrency", [1, 2])
async def test_a_drain_failing_between_jobs_puts_its_claim_taken_ahead_back(
        shared: SharedHarness, concurrency: int) -> None:
    """The store fails once the first jobs run, after the last job was
    claimed ahead in a settlement's batch (the failure comes from reading
    the schedules, which a drain does before running a claim it carried):
    the drain raises, and the last job goes back to its queue unstarted
    instead of waiting out its lease."""
    runtime = shared.runtime()
    names = [f"j{index}" for index in range(concurrency + 1)]
    for name in names:
        await runtime.ingest(job(name, queue=f"q-{name}"))
    store = runtime._store
    real_next_slot = store.next_slot
    ran: list[str] = []

    async def unreachable(*args: object, **kwargs: object) -> object:
        raise ConnectionError("the database went away")

    async def execute(record: JobRecord, signal: object) -> Completed:
        ran.append(record.job_id)
        if len(ran) <= concurrency:
            # From now on the store fails; a carried claim reads schedules first.
            store.next_slot = unreachable  # type: ignore[method-assign]
            runtime._next_slot = UNKNOWN_SLOT
        return Completed()

    runtime._execute = execute  # type: ignore[assignment]
    with pytest.raises(ConnectionError, match="went away"):
        await runtime.drain(concurrency=concurrency)
    # Which job the loops took ahead is theirs to decide; the others ran.
    rows = await shared.query("SELECT job_id, state, claim_token, lease_expires_at, recoveries "
                              "FROM tickwork_jobs WHERE state <> 'settled'")
    assert len(rows) == 1 and tuple(rows[0][1:]) == ("queued", None, None, 0)
    put_back = rows[0][0]
    assert sorted(ran) == sorted(set(names) - {put_back})
    store.next_slot = real_next_slot  # type: ignore[method-assign]
    assert [r.job_id for r in await runtime.drain()] == [put_back]
    assert sorted(ran) == names
