"""Why a job is waiting (``explain``), on every store.

A queued job's holds are every one that applies, read from the store (and,
for the owner's executor, from the runtime running it): its due time, its
queue's pause, its queue's running job or the job ahead of it, the owner
busy with another job. A shared runtime has no owner-wide limit.
"""

from __future__ import annotations

import pytest

from tests.support import job
from tests.support.engine import Engine
from tickwork import Hold, InvalidArgument, JobWait


async def test_a_job_alone_in_a_free_queue_is_held_by_nothing(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.ingest(job("a"))
    wait = await jobs.explain("a")
    assert wait is not None
    assert (wait.job_id, wait.state, wait.holds, wait.waiting) == ("a", "queued", (), False)
    assert wait.read_at == now()
    assert await jobs.explain("nobody") is None


async def test_a_delayed_job_is_held_until_its_due_time(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.ingest(job("later", delay_ms=60_000))
    wait = await jobs.explain("later")
    assert wait is not None and wait.holds == (Hold("not_due", until=now() + 60_000),)
    assert wait.waiting
    now.advance(60_000)  # type: ignore[attr-defined]
    assert (await jobs.explain("later")).holds == ()  # type: ignore[union-attr]


async def test_a_job_behind_its_queues_head_and_then_behind_its_running_job(
        engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.ingest(job("head", queue="q", payload={"do": "block"}))
    await jobs.ingest(job("next", queue="q"))
    assert (await jobs.explain("next")).holds == (  # type: ignore[union-attr]
        Hold("behind_head", job_ids=("head",)),)
    tick = await engine.start(jobs, "head")
    running = await jobs.explain("head")
    assert running is not None and (running.state, running.holds) == ("running", ())
    assert (await jobs.explain("next")).holds == (  # type: ignore[union-attr]
        Hold("queue_busy", job_ids=("head",), limit=1),)
    engine.executor.release("head")
    await tick
    assert (await jobs.explain("next")).holds == ()  # type: ignore[union-attr]
    assert (await jobs.tick()).job_id == "next"
    settled = await jobs.explain("next")
    assert settled is not None and (settled.state, settled.holds) == ("settled", ())


async def test_every_hold_that_applies_is_listed_in_the_order_they_clear(
        engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.ingest(job("head", queue="q", priority=5))
    await jobs.ingest(job("held", queue="q", delay_ms=1_000))
    await jobs.pause("q")
    assert (await jobs.explain("held")).holds == (  # type: ignore[union-attr]
        Hold("not_due", until=now() + 1_000), Hold("queue_paused"),
        Hold("behind_head", job_ids=("head",)))


async def test_a_cancelled_job_is_held_only_by_its_cancellation(engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.pause("q")
    await jobs.ingest(job("gone", queue="q", delay_ms=60_000))
    await jobs.cancel("gone", "c-1")
    wait = await jobs.explain("gone")
    assert isinstance(wait, JobWait)
    # Not due, paused: neither matters any more; it settles at the next tick.
    assert (wait.state, wait.holds) == ("queued", (Hold("cancelled"),))


async def test_the_owner_busy_with_another_queues_job_holds_it_on_an_owner_only(
        engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.ingest(job("export", queue="exports", payload={"do": "block"}))
    await jobs.ingest(job("payment", queue="payments"))
    tick = await engine.start(jobs, "export")
    holds = (await jobs.explain("payment")).holds  # type: ignore[union-attr]
    if engine.local:
        # One slot (concurrency 1), taken: the owner holds every other queue.
        assert holds == (Hold("owner_busy", job_ids=("export",)),)
        assert holds[0].describe() == "the owner is at its concurrency (1 running): export"
    else:
        # A shared runtime's workers each run their own: nothing holds it.
        assert holds == ()
    engine.executor.release("export")
    await tick
    assert (await jobs.explain("payment")).holds == ()  # type: ignore[union-attr]


@pytest.mark.parametrize("job_id", ["", "x" * 257, 7])
async def test_a_bad_job_id_is_refused_by_name(engine: Engine, job_id: object) -> None:
    jobs = engine.runtime()
    with pytest.raises(InvalidArgument) as raised:
        await jobs.explain(job_id)  # type: ignore[arg-type]
    assert raised.value.field == "job_id"
