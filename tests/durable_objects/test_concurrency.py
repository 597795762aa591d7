"""JobOwner with ``concurrency`` > 1: one alarm delivery runs several jobs of
different queues at once, settles each as before, and leaves the alarm armed
for the earliest next work. Both storage shapes (``host``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from tests.durable_objects.conftest import Host, job

DAY_MS = 86_400_000


async def until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.002)


def running(host: Host) -> set[str]:
    return {job_id for job_id, row in host.rows().items() if row[0] == "running"}


async def test_one_delivery_runs_up_to_concurrency_jobs_at_once(host: Host) -> None:
    host.owner_class.concurrency = 3
    await host.stub().ingest([job(f"slow-{n}", f"q{n}", payload={"do": "block"})
                              for n in range(4)])
    delivering = asyncio.create_task(host.scheduler.run_due())
    await until(lambda: len(host.executor.started) == 3)
    assert running(host) == {"slow-0", "slow-1", "slow-2"}
    assert host.instance().runtime.concurrency == 3
    # A cancellation aborts that one job only; its slot takes the fourth.
    reply = await host.stub().cancel("slow-1", "c1", False)
    assert reply["value"]["status"] == "recorded"
    await until(lambda: "slow-3" in host.executor.started)
    assert not host.executor.signals["slow-0"].aborted
    assert running(host) == {"slow-0", "slow-2", "slow-3"}
    for job_id in ("slow-0", "slow-2", "slow-3"):
        host.executor.release(job_id)
    [delivery] = await delivering
    assert delivery.outcome == "ok"
    assert {job_id: row[:2] for job_id, row in host.rows().items()} == {
        "slow-0": ("settled", "completed"), "slow-1": ("settled", "cancelled"),
        "slow-2": ("settled", "completed"), "slow-3": ("settled", "completed")}
    assert await host.alarm() is None


async def test_a_queue_still_runs_one_job_at_a_time(host: Host) -> None:
    host.owner_class.concurrency = 4
    await host.stub().ingest([job("head", "same", payload={"do": "block"}),
                              job("behind", "same"), job("other", "elsewhere")])
    delivering = asyncio.create_task(host.scheduler.run_due())
    await until(lambda: host.rows()["other"][0] == "settled")
    assert host.executor.started == ["head", "other"]
    assert host.rows()["behind"][0] == "queued"
    host.executor.release("head")
    [delivery] = await delivering
    assert delivery.outcome == "ok"
    assert host.executor.started == ["head", "other", "behind"]


async def test_the_alarm_is_re_armed_for_the_earliest_next_work(host: Host) -> None:
    host.owner_class.concurrency = 2
    start = host.clock()
    await host.stub().ingest([job("a", "qa", payload={"do": "block"}), job("b", "qb"),
                              job("later", "qc", delay_ms=DAY_MS)])
    delivering = asyncio.create_task(host.scheduler.run_due())
    await until(lambda: host.rows()["b"][0] == "settled")
    host.executor.release("a")
    [delivery] = await delivering
    assert delivery.outcome == "ok"
    assert await host.alarm() == start + DAY_MS
    assert host.rows()["later"][0] == "queued"


async def test_a_spent_tick_budget_lets_the_jobs_in_flight_finish_and_re_arms_now(
        host: Host) -> None:
    host.owner_class.concurrency = 3
    host.owner_class.alarm_max_ticks = 2
    await host.stub().ingest([job(f"j{n}", f"q{n}", payload={"do": "block"})
                              for n in range(4)])
    delivering = asyncio.create_task(host.scheduler.run_due())
    await until(lambda: len(host.executor.started) == 2)
    host.executor.release("j0")
    host.executor.release("j1")
    [delivery] = await delivering
    assert delivery.outcome == "ok"
    assert host.executor.started == ["j0", "j1"]  # no third claim: the budget was spent
    assert await host.alarm() == host.clock()  # work left: re-armed for now
    host.executor.release("j2")
    host.executor.release("j3")
    await host.scheduler.run_until_idle()
    assert {row[1] for row in host.rows().values()} == {"completed"}


async def test_an_eviction_with_several_jobs_in_flight_recovers_each(host: Host) -> None:
    host.owner_class.concurrency = 3
    await host.stub().ingest([
        job("again", "q1", payload={"do": "block_first"}, recovery={"max_recoveries": 1}),
        job("once", "q2", payload={"do": "block"}),
        job("again-too", "q3", payload={"do": "block_first"},
            recovery={"max_recoveries": 1})])
    delivering = asyncio.create_task(host.scheduler.run_due())
    await until(lambda: len(host.executor.started) == 3)
    await host.scheduler.evict("tenant-1")
    [evicted] = await delivering
    assert evicted.outcome == "evicted" and evicted.retry_at is not None
    assert running(host) == {"again", "once", "again-too"}
    [retried] = await host.scheduler.run_due(evicted.retry_at)
    assert retried.outcome == "ok"
    assert {job_id: row[:2] for job_id, row in host.rows().items()} == {
        "again": ("settled", "completed"), "once": ("settled", "interrupted"),
        "again-too": ("settled", "completed")}
    assert host.executor.attempts["again"] == host.executor.attempts["again-too"] == 2
    assert await host.alarm() is None
