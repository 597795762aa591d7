"""The backlog read behind the queue gauges, on every store.

``backlog()`` counts each queue's ready, delayed and running jobs and says
when its oldest ready job became ready, from the indexes of unsettled jobs
only (so every metrics scrape can afford it). Each test moves a manual
clock, so every time it states is exact.
"""

from __future__ import annotations

from tests.support import job
from tests.support.engine import Engine
from tickwork import QueueBacklog, Retry

SECOND = 1_000


def shape(backlogs: list[QueueBacklog]) -> dict[str, tuple[int, int, int, int | None]]:
    return {b.queue: (b.ready, b.delayed, b.running, b.oldest_ready_at) for b in backlogs}


async def test_counts_every_unsettled_state_and_nothing_settled(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    assert await jobs.backlog() == []
    start = now()
    await jobs.ingest_many([
        job("block", queue="busy", payload={"do": "block"}),
        job("behind", queue="busy"),
        job("later", queue="busy", delay_ms=60 * SECOND),
        job("at", queue="other", run_at=start + 30 * SECOND),
        job("done", queue="finished"),
        job("dropped", queue="other"),
    ])
    assert (await jobs.cancel("dropped", "c1")).status == "recorded"
    # The cancelled job is settled by the next tick without running: it is
    # none of ready, delayed or running, before or after.
    assert shape(await jobs.backlog()) == {
        "busy": (2, 1, 0, start), "other": (0, 1, 0, None), "finished": (1, 0, 0, start)}

    assert (await jobs.tick()).job_id == "dropped"
    now.advance(SECOND)
    task = await engine.start(jobs, "block")
    backlog = await jobs.backlog()  # while the claim runs
    assert shape(backlog)["busy"] == (1, 1, 1, start)
    busy = next(b for b in backlog if b.queue == "busy")
    assert busy.read_at == now() and busy.oldest_ready_age_ms == SECOND
    engine.executor.release("block")
    assert (await task).status == "settled"
    for _ in range(2):  # "behind", "done"
        assert (await jobs.tick()).status == "settled"
    assert shape(await jobs.backlog()) == {"busy": (0, 1, 0, None), "other": (0, 1, 0, None)}
    # A paused queue's ready jobs still wait: they count.
    await jobs.ingest(job("held", queue="paused"))
    assert await jobs.pause("paused") is True
    assert shape(await jobs.backlog())["paused"] == (1, 0, 0, now())


async def test_a_job_that_asked_to_wait_is_ready_from_its_due_time(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    start = now()
    await jobs.ingest_many([job("delayed", queue="d", delay_ms=10 * SECOND),
                            job("at", queue="a", run_at=start + 20 * SECOND)])
    now.advance(25 * SECOND)
    # Due but not yet moved into the ready set by a tick: still delayed.
    assert shape(await jobs.backlog()) == {"d": (0, 1, 0, None), "a": (0, 1, 0, None)}
    await jobs.pause("d")
    await jobs.pause("a")
    assert (await jobs.tick()).status == "idle"  # moves them, claims nothing
    backlog = {b.queue: b for b in await jobs.backlog()}
    assert shape(list(backlog.values())) == {
        "d": (1, 0, 0, start + 10 * SECOND), "a": (1, 0, 0, start + 20 * SECOND)}
    assert backlog["d"].oldest_ready_age_ms == 15 * SECOND
    assert backlog["a"].oldest_ready_age_ms == 5 * SECOND


async def test_a_retried_job_is_ready_from_the_end_of_its_back_off(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    start = now()
    await jobs.ingest(job("flaky", queue="r", payload={"do": "fail_until", "succeed_on": 9},
                          retry=Retry(attempts=5, base_delay_ms=4 * SECOND)))
    assert (await jobs.tick()).status == "retried"
    assert shape(await jobs.backlog()) == {"r": (0, 1, 0, None)}
    now.advance(10 * SECOND)
    await jobs.pause("r")
    assert (await jobs.tick()).status == "idle"
    # Ready since its back-off ended (start + 4 s), not since it was enqueued.
    assert shape(await jobs.backlog()) == {"r": (1, 0, 0, start + 4 * SECOND)}


async def test_a_redriven_job_is_ready_from_its_redrive(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.ingest(job("dead", queue="x", payload={"do": "fail"}))
    assert (await jobs.tick()).outcome == "failed"
    assert await jobs.backlog() == []
    now.advance(3_600 * SECOND)
    await jobs.pause("x")
    assert (await jobs.redrive("dead", "r1")).status == "redriven"
    assert shape(await jobs.backlog()) == {"x": (1, 0, 0, now())}
