"""Behaviour 5: disappearance recovery through the liveness probe."""

from __future__ import annotations

import asyncio

from tests.support import Harness, job
from tickwork import JobRecord, Recovery, TickResult


async def orphan(harness: Harness, recovery: Recovery | None, job_id: str = "a") -> None:
    """Leave ``job_id`` running with no live executor, as a crashed process would."""
    dying = harness.runtime()
    dying.ingest(job(job_id, queue=f"queue-{job_id}", payload={"do": "block"},
                     recovery=recovery))
    task = asyncio.create_task(dying.tick())
    await asyncio.sleep(0.01)
    await harness.crash(task)
    record = harness.runtime().read(job_id)
    assert record is not None and record.state == "running"


async def test_disappeared_job_with_budget_is_requeued_and_counted(harness: Harness) -> None:
    await orphan(harness, Recovery(2))
    runtime = harness.runtime()
    probed: list[JobRecord] = []

    def probe(job: JobRecord) -> bool:
        probed.append(job)
        return False

    harness.alive = probe
    assert await runtime.tick() == TickResult("requeued", job_id="a")
    assert [job.job_id for job in probed] == ["a"]
    record = runtime.read("a")
    assert record is not None
    assert (record.state, record.recoveries, record.started_at) == ("queued", 1, None)
    harness.executor.release("a")  # the next execution completes at once
    assert await runtime.tick() == TickResult("settled", job_id="a", outcome="completed")
    assert harness.executor.started == ["a", "a"]


async def test_alive_claim_is_left_alone(harness: Harness) -> None:
    await orphan(harness, Recovery(3))
    harness.alive = lambda job: True
    runtime = harness.runtime()
    assert await runtime.tick() == TickResult("idle")
    record = runtime.read("a")
    assert record is not None and (record.state, record.recoveries) == ("running", 0)


async def test_async_probe_is_awaited(harness: Harness) -> None:
    await orphan(harness, None)

    async def probe(job: JobRecord) -> bool:
        await asyncio.sleep(0)
        return False

    assert (await harness.runtime(is_alive=probe).tick()).outcome == "interrupted"


async def test_probe_raising_leaves_the_claim_and_reports_liveness_unknown(
    harness: Harness,
) -> None:
    await orphan(harness, Recovery(3))

    def probe(job: JobRecord) -> bool:
        raise ConnectionError("registry unreachable")

    runtime = harness.runtime(is_alive=probe)
    before = harness.host_query("SELECT * FROM tickwork_jobs")
    result = await runtime.tick()
    assert result.status == "liveness_unknown"
    assert result.job_id == "a"
    assert result.reason is not None and "registry unreachable" in result.reason
    assert harness.host_query("SELECT * FROM tickwork_jobs") == before


async def test_probe_returning_a_non_bool_is_liveness_unknown(harness: Harness) -> None:
    await orphan(harness, None)
    result = await harness.runtime(is_alive=lambda job: None).tick()
    assert result.status == "liveness_unknown" and "NoneType" in (result.reason or "")


async def test_unknown_liveness_does_not_stop_other_queues(harness: Harness) -> None:
    await orphan(harness, None)

    def probe(job: JobRecord) -> bool:
        raise TimeoutError("no answer")

    runtime = harness.runtime(is_alive=probe)
    runtime.ingest(job("same-queue", queue="queue-a"))
    runtime.ingest(job("elsewhere", queue="other"))
    assert (await runtime.tick()).job_id == "elsewhere"
    # The orphan's own queue stays blocked behind its unresolved claim.
    result = await runtime.tick()
    assert (result.status, result.job_id) == ("liveness_unknown", "a")
    record = runtime.read("same-queue")
    assert record is not None and record.state == "queued"


async def test_recovery_is_projected_and_wakes(harness: Harness) -> None:
    await orphan(harness, Recovery(1))
    runtime = harness.runtime(project=harness.recording_projector())
    wakes = harness.wake.calls
    assert await runtime.tick() == TickResult("requeued", job_id="a")
    [transition] = harness.projections
    assert transition.queue == "queue-a" and transition.settled is None
    assert transition.head is not None
    assert (transition.head.job_id, transition.head.state) == ("a", "queued")
    assert harness.wake.calls == wakes + 1


async def test_a_claim_alive_elsewhere_does_not_hide_the_claims_behind_it(
    harness: Harness,
) -> None:
    """Probing goes round the orphaned claims: one that is alive (or cannot be
    judged) is looked at again later, but the next tick probes the next one."""
    harness.alive = lambda job: True  # the second dying runtime must leave "old" alone
    await orphan(harness, None, job_id="old")
    await orphan(harness, None, job_id="young")
    probed: list[str] = []

    def alive(job: JobRecord) -> bool:
        probed.append(job.job_id)
        return job.job_id == "old"

    runtime = harness.runtime(is_alive=alive)
    assert await runtime.tick() == TickResult("idle")
    assert await runtime.tick() == TickResult("settled", job_id="young", outcome="interrupted")
    assert probed == ["old", "young"]
    assert await runtime.tick() == TickResult("idle")
    assert probed == ["old", "young", "old"]
    record = runtime.read("old")
    assert record is not None and record.state == "running"
