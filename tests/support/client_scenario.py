"""One scenario of every API operation through ``tickwork.client``, run
against every host (tests/client, and the real-Pyodide tier's Worker case).
Each answer is what the runtime itself returns for the same call."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from tests.support import unchecked_job
from tickwork import (
    CancelResult,
    DeadLetters,
    DeadLettersRedriven,
    FailLaneResult,
    Job,
    JobRecord,
    LaneCancelled,
    QueueBacklog,
    QueueHistory,
    QueueStatus,
    RedriveResult,
    Retry,
    Schedule,
    ScheduledJob,
)
from tickwork.client import AsyncJobs
from tickwork.model.errors import IngestConflict, InvalidArgument, InvalidJob
from tickwork.model.jobs import MIN_RUN_AT_MS

names = itertools.count()


def job(job_id: str, queue: str, *, lane: str | None = None, priority: int = 0,
        payload: Any = None) -> Job:
    return Job(job_id, queue, lane or queue, priority, payload)


#: Executors of the serve tests: "slow" holds its job running until aborted.
SLOW = {"kind": "slow"}


async def scenario(jobs: AsyncJobs, *, runs_beside: bool) -> None:
    """Every operation once. ``runs_beside``: the host runs another queue's job
    while one is running (shared workers); an owner runs one job at a time, and
    the Worker's tests run none (alarms and the cron drain are driven by hand)."""
    n = next(names)
    q1, q2, q3, lane = f"q1-{n}", f"q2-{n}", f"q3-{n}", f"lane-{n}"
    a = job(f"a-{n}", q1, priority=3, payload={**SLOW, "f": 1.0, "text": "é"})

    assert await jobs.ingest(a) == "queued"
    assert await jobs.ingest(a) == "duplicate"
    with pytest.raises(IngestConflict) as conflict:
        await jobs.ingest(job(a.job_id, q1, priority=3, payload={**SLOW, "f": 2.0}))
    assert (conflict.value.job_id, conflict.value.fields) == (a.job_id, ("payload",))
    assert await jobs.ingest_many([job(f"b-{n}", q1, payload=SLOW),
                                   job(f"c-{n}", q2, lane=lane, payload=SLOW)]) == [
        "queued", "queued"]
    # a conflict within one call stores nothing
    with pytest.raises(IngestConflict):
        await jobs.ingest_many([job(f"d-{n}", q2), job(f"d-{n}", q2, priority=1)])
    assert await jobs.read(f"d-{n}") is None
    with pytest.raises(InvalidJob) as invalid:
        job(f"e-{n}", q1, payload=float("nan"))
    assert invalid.value.field == "payload"
    with pytest.raises(InvalidJob) as invalid:  # a job made around Job()'s checks
        await jobs.ingest(unchecked_job(f"e-{n}", q1, q1, 0, float("nan")))
    assert invalid.value.field == "payload"

    record = await jobs.read(a.job_id)
    assert isinstance(record, JobRecord)
    assert (record.job_id, record.queue, record.lane, record.priority) == (a.job_id, q1, q1, 3)
    assert record.payload == {"kind": "slow", "f": 1.0, "text": "é"}
    assert type(record.payload["f"]) is float  # byte for byte, as stored
    assert record.state in ("queued", "running")
    assert await jobs.read(f"nothing-{n}") is None
    head = await jobs.read_queue_head(q1)
    assert head is not None and head.job_id == a.job_id
    assert await jobs.read_queue_head(f"empty-{n}") is None

    counts = await jobs.queue_status(q1)
    assert isinstance(counts, QueueStatus)
    assert (counts.queue, counts.queued + counts.running, counts.settled) == (q1, 2, 0)
    assert {q1, q2} <= {status.queue for status in await jobs.status()}

    assert await jobs.cancel(f"b-{n}", "cancel-1") == CancelResult("recorded", f"b-{n}")
    assert await jobs.cancel(f"b-{n}", "cancel-1") == CancelResult("replayed", f"b-{n}")
    assert (await jobs.cancel(f"b-{n}", "cancel-2")).status == "conflict"
    assert await jobs.cancel(f"nothing-{n}", "cancel-1") == CancelResult(
        "not_found", f"nothing-{n}")

    assert await jobs.fail_lane(lane, "lane_down") == FailLaneResult(1, False)
    failed = await jobs.read(f"c-{n}")
    assert failed is not None and (failed.state, failed.outcome) == ("settled", "failed")

    await jobs.ingest_many([job(f"f-{n}", q3, payload=SLOW), job(f"g-{n}", q3, payload=SLOW)])
    if runs_beside:  # a worker claims the head first; only g stays queued
        for _ in range(200):
            if (await jobs.queue_status(q3)).running == 1:
                break
            await asyncio.sleep(0.05)
        assert await jobs.purge(q3) == 1
        assert (await jobs.queue_status(q3)).running == 1
    else:
        assert await jobs.purge(q3) == 2
    assert await jobs.read(f"g-{n}") is None

    # The failed job is a dead letter of its queue, read a page at a time,
    # and redriven once whatever the replays.
    page = await jobs.dead_letters(q2, limit=1)
    assert isinstance(page, DeadLetters)
    assert [(r.job_id, r.failure_reason) for r in page.jobs] == [(f"c-{n}", "lane_down")]
    assert page.cursor is not None
    assert await jobs.dead_letters(q2, limit=1, cursor=page.cursor) == DeadLetters([], None)
    with pytest.raises(InvalidArgument) as bad_page:
        await jobs.dead_letters(q2, limit=0)
    assert bad_page.value.field == "limit"
    assert await jobs.redrive(f"c-{n}", "redrive-1") == RedriveResult("redriven", f"c-{n}")
    assert await jobs.redrive(f"c-{n}", "redrive-1") == RedriveResult("replayed", f"c-{n}")
    assert await jobs.redrive(a.job_id, "redrive-1") == RedriveResult(
        "refused", a.job_id, "not_settled")
    assert (await jobs.redrive(f"nothing-{n}", "redrive-1")).status == "not_found"
    redriven = await jobs.read(f"c-{n}")
    assert redriven is not None and redriven.state in ("queued", "running")
    assert [(entry.outcome, entry.redrive_id) for entry in redriven.history] == [
        ("failed", "redrive-1")]
    assert (await jobs.dead_letters(q2)).jobs == []
    # A queue's dead letters, redriven by the page under one id: a second
    # call with that id replays a job it redrove, even one that died again.
    lost = f"lost-{n}"
    await jobs.ingest(job(f"h-{n}", q2, lane=lost, payload=SLOW))
    assert (await jobs.fail_lane(lost, "lane_down")).settled == 1
    assert await jobs.redrive_dead_letters(q2, "bulk-1") == DeadLettersRedriven(
        q2, 1, 0, 0, None)
    assert (await jobs.fail_lane(lost, "lane_down")).settled == 1  # dead again
    assert await jobs.redrive_dead_letters(q2, "bulk-1", limit=1) == DeadLettersRedriven(
        q2, 0, 1, 0, (await jobs.dead_letters(q2, limit=1)).cursor)
    with pytest.raises(InvalidArgument) as bad_bulk:
        await jobs.redrive_dead_letters(q2, "bulk-1", cursor="nonsense")
    assert bad_bulk.value.field == "cursor"

    # A lane's queued jobs, cancelled by the page under one id: a second call
    # replays, and the next ticks settle them without running them.
    # They wait behind a slow head of another lane, so no host starts them.
    gone, q5 = f"gone-{n}", f"q5-{n}"
    await jobs.ingest(job(f"head5-{n}", q5, payload=SLOW))
    await jobs.ingest_many([job(f"g{index}-{n}", q5, lane=gone) for index in range(3)])
    # Why g0 waits: its queue's slow head (running on a host that runs it,
    # else ahead of it), and nothing else of its own.
    wait = await jobs.explain(f"g0-{n}")
    assert wait is not None and wait.state == "queued"
    assert {(hold.kind, hold.job_ids) for hold in wait.holds} - {
        ("owner_busy", (a.job_id,))} in ({("queue_busy", (f"head5-{n}",))},
                                         {("behind_head", (f"head5-{n}",))})
    assert await jobs.explain(f"nothing-{n}") is None
    first = await jobs.cancel_lane(gone, "stop-1", limit=2)
    assert (first.lane, first.cancelled, first.replayed, first.skipped) == (gone, 2, 0, 0)
    assert first.cursor is not None
    assert await jobs.cancel_lane(gone, "stop-1", cursor=first.cursor) == LaneCancelled(
        gone, 1, 0, 0, None)
    assert await jobs.cancel_lane(gone, "stop-1") == LaneCancelled(gone, 0, 3, 0, None)
    with pytest.raises(InvalidArgument) as bad_lane_page:
        await jobs.cancel_lane(gone, "stop-1", limit=0)
    assert bad_lane_page.value.field == "limit"
    assert (await jobs.cancel(f"head5-{n}", "stop-1")).status == "recorded"

    # A job due in a day: stored with its delay and due time, counted as
    # delayed, compared on replay as asked, and never run by this scenario.
    q4, day = f"q4-{n}", 86_400_000
    later = Job(f"later-{n}", q4, q4, 0, {"remind": "é"}, delay_ms=day)
    assert await jobs.ingest(later) == "queued"
    assert await jobs.ingest(later) == "duplicate"
    with pytest.raises(IngestConflict) as other_delay:
        await jobs.ingest(Job(later.job_id, q4, q4, 0, {"remind": "é"}, delay_ms=day + 1))
    assert other_delay.value.fields == ("delay_ms",)
    # Refused where it is built, and by the client (before any request) when
    # a job got around the constructor.
    with pytest.raises(InvalidJob) as both:
        Job(f"both-{n}", q4, q4, 0, None, run_at=MIN_RUN_AT_MS, delay_ms=1)
    assert both.value.field == "delay_ms"
    with pytest.raises(InvalidJob) as both:
        await jobs.ingest(unchecked_job(f"both-{n}", q4, q4, 0, None, run_at=MIN_RUN_AT_MS,
                                        delay_ms=1))
    assert both.value.field == "delay_ms"
    stored = await jobs.read(later.job_id)
    assert stored is not None and (stored.state, stored.delay_ms, stored.run_at) == (
        "queued", day, None)
    # A retry policy travels and is compared like any cargo.
    policy = Retry(5, base_delay_ms=250, factor=1.5, max_delay_ms=60_000, jitter=0.1)
    retried = Job(f"retried-{n}", q4, q4, 0, None, delay_ms=day, retry=policy)
    assert await jobs.ingest(retried) == "queued"
    assert await jobs.ingest(retried) == "duplicate"
    with pytest.raises(IngestConflict) as other_policy:
        await jobs.ingest(Job(retried.job_id, q4, q4, 0, None, delay_ms=day, retry=Retry(6)))
    assert other_policy.value.fields == ("retry",)
    with pytest.raises(InvalidJob) as bad_policy:
        Job(f"bad-policy-{n}", q4, q4, 0, None, retry=Retry(3, factor=0.5))
    assert bad_policy.value.field == "retry.factor"
    with pytest.raises(InvalidJob) as bad_policy:
        await jobs.ingest(unchecked_job(f"bad-policy-{n}", q4, q4, 0, None,
                                        retry=Retry(3, factor=0.5)))
    assert bad_policy.value.field == "retry.factor"
    read_back = await jobs.read(retried.job_id)
    assert read_back is not None and (read_back.retry, read_back.attempt, read_back.history) == (
        policy, 1, ())
    assert stored.due_at is not None and stored.due_at >= stored.enqueued_at + day
    delayed = await jobs.queue_status(q4)
    assert (delayed.queued, delayed.delayed) == (0, 2)
    assert await jobs.read_queue_head(q4) is None
    # The backlog reads the unsettled jobs only: q4's two wait, none is ready.
    backlog = {entry.queue: entry for entry in await jobs.backlog()}
    assert isinstance(backlog[q4], QueueBacklog)
    assert (backlog[q4].ready, backlog[q4].delayed, backlog[q4].running) == (0, 2, 0)
    assert (backlog[q4].oldest_ready_at, backlog[q4].oldest_ready_age_ms) == (None, 0)
    assert backlog[q4].read_at >= stored.enqueued_at
    if runs_beside:  # q3's head still runs on a worker; the rest was purged
        assert (backlog[q3].ready, backlog[q3].delayed, backlog[q3].running) == (0, 0, 1)
    else:
        assert q3 not in backlog  # purged: nothing unsettled left
    # The history counted q4's two jobs in the last hour; a queue never seen has none.
    history = await jobs.history(q4, bucket=300)
    assert isinstance(history, QueueHistory)
    assert (history.queue, history.bucket) == (q4, 300)
    assert sum(point.enqueued for point in history.points) == 2
    assert await jobs.history(f"never-{n}") is None
    with pytest.raises(InvalidArgument) as bad_bucket:
        await jobs.history(q4, bucket=7)
    assert bad_bucket.value.field == "bucket"

    # A schedule: created once, replaced, listed, paused, resumed, deleted.
    # Its yearly slot is far off: no job comes of it here.
    yearly = Schedule(f"yearly-{n}", ScheduledJob(q4, q4, 1, {"report": "é"}, retry=Retry(2)),
                      cron="0 0 1 1 *", catch_up=2)
    assert await jobs.put_schedule(yearly) == "created"
    assert await jobs.put_schedule(yearly) == "unchanged"
    monthly = Schedule(yearly.name, yearly.job, cron="0 0 1 * *")
    assert await jobs.put_schedule(monthly) == "replaced"
    [listed] = [r for r in await jobs.schedules() if r.schedule.name == yearly.name]
    assert listed.schedule == monthly and listed.paused is False
    assert listed.next_at > listed.updated_at
    assert await jobs.pause_schedule(yearly.name) is True
    assert await jobs.pause_schedule(yearly.name) is False
    assert await jobs.resume_schedule(yearly.name) is True
    with pytest.raises(InvalidArgument) as bad_cron:
        await jobs.put_schedule(Schedule(f"bad-{n}", yearly.job, cron="0 0 30 2 *"))
    assert bad_cron.value.field == "cron"
    assert await jobs.delete_schedule(yearly.name) is True
    assert await jobs.delete_schedule(yearly.name) is False

    # Pause and resume: idempotent, and the status says so.
    assert await jobs.pause(q4) is True
    assert await jobs.pause(q4) is False
    assert (await jobs.queue_status(q4)).paused is True
    assert await jobs.resume(q4) is True
    assert await jobs.resume(q4) is False
    assert (await jobs.queue_status(q4)).paused is False
