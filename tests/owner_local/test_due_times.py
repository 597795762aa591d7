"""What only the owner-local runtime does with due times: its cached earliest
due time, and the projection of the queues a tick moves jobs into."""

from __future__ import annotations

from tests.support import Harness, job
from tests.support.shared import ManualNow


async def test_a_job_another_runtime_stored_waits_at_most_one_more_tick(
        harness: Harness) -> None:
    now = ManualNow()
    late = harness.runtime(clock=now)  # knows of no waiting job
    harness.runtime(clock=now).ingest(job("later", delay_ms=1_000))
    now.advance(1_000)
    assert (await late.tick()).status == "idle"  # its cache said nothing waits...
    result = await late.tick()  # ...and the idle tick re-read it
    assert (result.status, result.job_id) == ("settled", "later")


async def test_the_tick_that_moves_a_job_into_the_ready_set_projects_its_queue(
        harness: Harness) -> None:
    now = ManualNow()
    runtime = harness.runtime(clock=now, project=harness.recording_projector())
    runtime.ingest(job("later", queue="a", delay_ms=1_000))
    runtime.ingest(job("busy", queue="b", payload={"do": "fail"}))
    harness.projections.clear()
    now.advance(1_000)
    assert (await runtime.tick()).job_id == "later"  # priority 0, enqueued first
    heads = [(t.queue, None if t.head is None else (t.head.job_id, t.head.state))
             for t in harness.projections]
    # Moved into the ready set (the head of "a" is now "later", queued), then
    # claimed (running), then settled (no head).
    assert heads[:3] == [("a", ("later", "queued")), ("a", ("later", "running")), ("a", None)]
    assert runtime.read_queue_head("a") is None
