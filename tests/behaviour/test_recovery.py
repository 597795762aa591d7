"""Recovering the claims of a process that died, on every store.

Owner-local, the next tick asks the host's liveness probe; shared, the
claim's lease must expire first. Either way the outcome is the same.
"""

from __future__ import annotations

from tests.support import job
from tests.support.engine import Engine
from tickwork import Completed, Recovery, TickResult


async def lost(engine: Engine, recovery: Recovery | None, job_id: str = "a") -> None:
    """Leave ``job_id`` running with no live execution, as a crashed process would."""
    dying = engine.runtime()
    await dying.ingest(job(job_id, queue=f"queue-{job_id}", payload={"do": "block"},
                           recovery=recovery))
    await engine.lose(dying, await engine.start(dying, job_id))
    record = await engine.runtime().read(job_id)
    assert record is not None and record.state == "running"
    engine.make_recoverable()


async def test_a_lost_job_with_budget_is_requeued_counted_and_runs_again(engine: Engine) -> None:
    await lost(engine, Recovery(2))
    runtime = engine.runtime()
    assert await runtime.tick() == TickResult("requeued", job_id="a")
    record = await runtime.read("a")
    assert record is not None
    assert (record.state, record.recoveries, record.started_at) == ("queued", 1, None)
    engine.executor.release("a")  # the next execution completes at once
    assert await runtime.tick() == TickResult("settled", job_id="a", outcome="completed")
    assert engine.executor.started == ["a", "a"]


async def test_budget_exhausted_settles_interrupted(engine: Engine) -> None:
    await lost(engine, Recovery(0))
    runtime = engine.runtime()
    assert await runtime.tick() == TickResult("settled", job_id="a", outcome="interrupted")
    record = await runtime.read("a")
    assert record is not None and (record.state, record.recoveries) == ("settled", 0)
    assert engine.executor.started == ["a"]  # never executed again


async def test_no_recovery_policy_settles_interrupted(engine: Engine) -> None:
    await lost(engine, None)
    assert (await engine.runtime().tick()).outcome == "interrupted"


async def test_recoveries_stop_at_the_budget(engine: Engine) -> None:
    await lost(engine, Recovery(1))
    first = engine.runtime()
    assert (await first.tick()).status == "requeued"
    await engine.lose(first, await engine.start(first, "a"))  # runs again, dies again
    engine.make_recoverable()
    survivor = engine.runtime()
    assert await survivor.tick() == TickResult("settled", job_id="a", outcome="interrupted")
    record = await survivor.read("a")
    assert record is not None and record.recoveries == 1


async def test_a_lost_job_with_a_cancellation_settles_cancelled(engine: Engine) -> None:
    await lost(engine, Recovery(5))
    runtime = engine.runtime()
    assert (await runtime.cancel("a", "c1")).status == "recorded"
    assert await runtime.tick() == TickResult("settled", job_id="a", outcome="cancelled")
    record = await runtime.read("a")
    assert record is not None and record.recoveries == 0


async def test_a_recovered_claim_can_never_settle(engine: Engine) -> None:
    """The stale execution finishes after another process recovered its claim:
    nothing is written, its tick says so, and the job runs under its new claim."""
    first = engine.runtime()
    await first.ingest(job("a", payload={"do": "block"}, recovery=Recovery(1)))
    tick = await engine.start(first, "a")
    engine.make_recoverable()
    second = engine.another_process()
    assert await second.tick() == TickResult("requeued", job_id="a")
    engine.executor.release("a", Completed())
    assert await tick == TickResult("idle", job_id="a", reason="claim_replaced")
    record = await second.read("a")
    assert record is not None and (record.state, record.recoveries) == ("queued", 1)
    assert (await second.tick()).outcome == "completed"


async def test_an_interrupted_claim_can_never_settle(engine: Engine) -> None:
    first = engine.runtime()
    await first.ingest(job("a", payload={"do": "block"}))
    tick = await engine.start(first, "a")
    engine.make_recoverable()
    second = engine.another_process()
    assert (await second.tick()).outcome == "interrupted"
    engine.executor.release("a", Completed())
    assert await tick == TickResult("idle", job_id="a", reason="claim_replaced")
    record = await second.read("a")
    assert record is not None and record.outcome == "interrupted"
