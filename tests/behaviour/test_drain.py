"""The drain loop (``tickwork.runtimes.draining``) on every store: its one
budget rule, the claim taken ahead, and the ticks that end it.

``drain()`` of either runtime is that loop over the runtime's steps; the
tests that need to stand between two ticks run the loop itself over the
same steps.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest

from tests.support import job
from tests.support.engine import Engine, Jobs
from tests.support.shared import ManualNow
from tickwork import Completed, JobRecord, TickResult
from tickwork.lifecycle.operations import ClaimNext
from tickwork.model.signals import AbortSignal
from tickwork.runtimes.draining import Budget, Steps, drain_loop
from tickwork.runtimes.shared import SharedRuntime, _SharedSteps


class BudgetClock(ManualNow):
    """A clock the test moves by hand, in the shape each runtime takes: the
    owner-local runtime calls it (its clock), the shared one reads
    ``now_ms()`` and times its waits with ``call_later`` (in real time)."""

    def now_ms(self) -> float:
        return float(self.ms)

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(delay_ms / 1000, callback)


def steps_of(jobs: Jobs) -> AbstractContextManager[Steps]:
    """The steps ``drain()`` runs the loop over, for the loop itself."""
    runtime = jobs.runtime
    if isinstance(runtime, SharedRuntime):
        return shared_steps(runtime)
    steps: AbstractContextManager[Steps] = runtime.draining()
    return steps


class BusySteps:
    """The steps of a runtime whose ticker another loop holds."""

    carrying = False

    async def step(self, *, claim_next: ClaimNext = False) -> TickResult:
        return TickResult("busy")


@contextmanager
def shared_steps(runtime: SharedRuntime) -> Iterator[Steps]:
    """One loop's steps, under the busy guard ``drain()`` holds for them
    (each answering busy when that guard is taken, as ``drain()`` does)."""
    with runtime._ticker() as held:
        yield _SharedSteps(runtime) if held else BusySteps()


async def states(engine: Engine) -> dict[str, str]:
    """Every job's state: a job claimed ahead and never run would be running."""
    return {row[0]: row[1] for row in await engine.rows("SELECT job_id, state FROM tickwork_jobs")}


async def ingest_apart(jobs: Jobs, count: int) -> None:
    """``count`` jobs j0.. in queues of their own (any of them may be claimed next)."""
    for n in range(count):
        await jobs.ingest(job(f"j{n}", queue=f"q{n}"))


async def test_max_ticks_bounds_the_drain_and_leaves_nothing_claimed(engine: Engine) -> None:
    jobs = engine.runtime()
    await ingest_apart(jobs, 5)
    results = await jobs.runtime.drain(max_ticks=2)
    assert [r.job_id for r in results] == ["j0", "j1"]
    rows = await states(engine)
    assert [rows[f"j{n}"] for n in range(5)] == ["settled"] * 2 + ["queued"] * 3
    assert [r.job_id for r in await jobs.runtime.drain()] == ["j2", "j3", "j4"]


async def test_the_budget_is_asked_as_each_job_settles(engine: Engine) -> None:
    """Each job takes 400 ms of a 1,000 ms budget: the third one's settlement
    finds the budget spent, so it claims nothing ahead and the drain ends."""
    clock = BudgetClock()

    async def slow(record: JobRecord, signal: AbortSignal) -> Completed:
        clock.advance(400)
        return Completed()

    jobs = engine.runtime(execute=slow, clock=clock)
    await ingest_apart(jobs, 5)
    results = await jobs.runtime.drain(budget_ms=1_000)
    assert [r.job_id for r in results] == ["j0", "j1", "j2"]  # settled at 400, 800, 1,200
    rows = await states(engine)
    assert [rows[f"j{n}"] for n in range(5)] == ["settled"] * 3 + ["queued"] * 2


async def test_a_claim_taken_ahead_runs_though_the_budget_ran_out_after_its_claim(
        engine: Engine) -> None:
    """j0's settlement claims j1 ahead (the budget allows one more then); the
    deadline passes before the next tick: j1 runs all the same, and its
    settlement, finding the budget spent, claims nothing."""
    clock = BudgetClock()
    jobs = engine.runtime()
    await ingest_apart(jobs, 3)
    seen: list[TickResult] = []

    def on_result(result: TickResult) -> None:
        seen.append(result)
        clock.advance(1_000)

    with steps_of(jobs) as steps:
        ended = await drain_loop(steps, Budget(deadline_ms=clock.ms + 500, now_ms=clock),
                                 on_result=on_result)
    assert (ended.stop, ended.ticks) == ("budget", 2)
    assert [(r.status, r.job_id) for r in seen] == [("settled", "j0"), ("settled", "j1")]
    assert (await states(engine))["j2"] == "queued"


async def test_max_ticks_counts_as_each_job_settles(engine: Engine) -> None:
    """With max_ticks=2, the first settlement claims ahead, the second does not."""
    jobs = engine.runtime()
    await ingest_apart(jobs, 3)
    carrying: list[bool] = []

    with steps_of(jobs) as steps:
        ended = await drain_loop(steps, Budget(max_ticks=2),
                                 on_result=lambda result: carrying.append(steps.carrying))
    assert (ended.stop, ended.ticks) == ("budget", 2)
    assert carrying == [True, False]
    assert (await states(engine))["j2"] == "queued"


async def test_stopping_asked_as_a_job_settles_claims_nothing_ahead(engine: Engine) -> None:
    """The host asks the loop to stop while j0 runs: j0 settles, nothing is
    claimed ahead, and the loop ends before another tick."""
    stop = [False]

    async def execute(record: JobRecord, signal: AbortSignal) -> Completed:
        stop[0] = True
        return Completed()

    jobs = engine.runtime(execute=execute)
    await ingest_apart(jobs, 2)
    with steps_of(jobs) as steps:
        ended = await drain_loop(steps, Budget(stopping=lambda: stop[0]))
    assert (ended.stop, ended.ticks) == ("stopped", 1)
    assert ended.last == TickResult("settled", job_id="j0", outcome="completed")
    assert await states(engine) == {"j0": "settled", "j1": "queued"}


async def test_a_budget_check_that_raises_claims_nothing_ahead(engine: Engine) -> None:
    """A host's stopping() that fails as a job settles: the job's settlement
    stands, nothing is claimed ahead, and the failure reaches the host at
    the next tick."""
    calls = [0]

    def stopping() -> bool:
        calls[0] += 1
        if calls[0] > 1:  # the first call is before the first tick
            raise RuntimeError("stopping() failed")
        return False

    jobs = engine.runtime()
    await ingest_apart(jobs, 2)
    with steps_of(jobs) as steps, pytest.raises(RuntimeError, match="stopping"):
        await drain_loop(steps, Budget(stopping=stopping))
    assert await states(engine) == {"j0": "settled", "j1": "queued"}


async def test_a_busy_runtime_answers_busy_once(engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.ingest(job("held", queue="a", payload={"do": "block"}))
    await jobs.ingest(job("other", queue="b"))
    task = await engine.start(jobs, "held")
    assert await jobs.runtime.drain() == [TickResult("busy")]
    with steps_of(jobs) as steps:
        ended = await drain_loop(steps)
    assert (ended.stop, ended.last, ended.ticks) == ("busy", TickResult("busy"), 1)
    engine.executor.release("held")
    assert (await task).job_id == "held"
    assert [r.job_id for r in await jobs.runtime.drain()] == ["other"]


async def test_unknown_liveness_ends_the_drain_instead_of_asking_again(engine: Engine) -> None:
    """A claim left running whose liveness the probe cannot judge: the drain
    runs what else it can, reports the claim once and ends, instead of
    asking the probe again at once until its budget runs out (or forever)."""
    if not engine.local:
        pytest.skip("a shared store judges liveness by the claim's lease: no probe to fail")
    dying = engine.runtime()
    await dying.ingest(job("lost", queue="a", payload={"do": "block"}))
    await engine.lose(dying, await engine.start(dying, "lost"))
    asked: list[str] = []

    def unreachable(record: JobRecord) -> Any:
        asked.append(record.job_id)
        raise ConnectionError("registry unreachable")

    jobs = engine.runtime(is_alive=unreachable)
    await jobs.ingest(job("elsewhere", queue="b"))
    results = await jobs.runtime.drain(max_ticks=10)
    assert [(r.status, r.job_id) for r in results] == [
        ("settled", "elsewhere"), ("liveness_unknown", "lost")]
    # Once by each tick: the one that then ran "elsewhere", and the last.
    assert asked == ["lost", "lost"]
    assert (await states(engine))["lost"] == "running"


async def test_a_budgeted_drain_waits_for_a_job_due_within_its_budget(engine: Engine) -> None:
    """A shared drain with a budget sleeps until a waiting job is due (if that
    is before its deadline) and runs it; the owner-local drain never sleeps
    (its host's wake is told when the job is due)."""
    jobs = Jobs(engine.harness.runtime() if engine.local
                else engine.harness.runtime(db_time=True))
    await jobs.ingest(job("soon", queue="a", delay_ms=300))
    loop = asyncio.get_running_loop()
    started = loop.time()
    results = await jobs.runtime.drain(budget_ms=10_000)
    waited = loop.time() - started
    if engine.local:
        assert results == [] and waited < 0.25
        return
    assert [(r.job_id, r.outcome) for r in results] == [("soon", "completed")]
    assert 0.25 <= waited < 9, waited


async def test_a_drain_whose_ticks_are_spent_does_not_wait(engine: Engine) -> None:
    """max_ticks counts the tick that found nothing: with none left, the
    drain ends instead of waiting for the job due later."""
    jobs = Jobs(engine.harness.runtime() if engine.local
                else engine.harness.runtime(db_time=True))
    await jobs.ingest(job("later", queue="a", delay_ms=1_000))
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await jobs.runtime.drain(max_ticks=1, budget_ms=10_000) == []
    assert loop.time() - started < 0.9
    assert (await states(engine))["later"] == "queued"
