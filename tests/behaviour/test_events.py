"""Lifecycle events (``on_event``), on every store.

Each transition is reported once, after it is durable, in the order of the
job's life; a hook that raises is logged and changes nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

import pytest

from tests.support import job
from tests.support.engine import Engine
from tickwork import Recovery, Retry, TickResult
from tickwork.events import Event

SECOND = 1_000


def recorder() -> tuple[list[Event], Any]:
    events: list[Event] = []
    return events, events.append


def summary(events: list[Event]) -> list[tuple[Any, ...]]:
    return [(event.kind, event.job_id, event.outcome, event.reason, event.attempt)
            for event in events]


async def test_one_jobs_life_is_reported_in_order_each_transition_once(engine: Engine) -> None:
    events, hook = recorder()
    jobs, now = engine.timed_runtime(on_event=hook)
    policy = Retry(attempts=3, base_delay_ms=SECOND)
    assert await jobs.ingest(job("a", payload={"do": "fail_until", "succeed_on": 2},
                                 retry=policy)) == "queued"
    # A duplicate replay is no transition.
    assert await jobs.ingest(job("a", payload={"do": "fail_until", "succeed_on": 2},
                                 retry=policy)) == "duplicate"
    ingested_at = now()
    assert (await jobs.tick()).status == "retried"
    now.advance(SECOND)
    assert (await jobs.tick()).outcome == "completed"
    assert (await jobs.tick()).status == "idle"

    assert summary(events) == [
        ("ingested", "a", None, None, None),
        ("claimed", "a", None, None, 1),
        ("retried", "a", "failed", "attempt-1", 1),
        ("claimed", "a", None, None, 2),
        ("settled", "a", "completed", None, 2),
    ]
    assert all((event.queue, event.lane) == ("q", "lane") for event in events)
    assert [event.at for event in events] == [ingested_at] * 3 + [ingested_at + SECOND] * 2
    retried, settled = events[2], events[4]
    assert retried.retry_at == ingested_at + SECOND
    for ended in (retried, settled):
        assert isinstance(ended.duration_ms, int) and ended.duration_ms >= 0
    assert events[0].duration_ms is None and events[1].duration_ms is None


async def test_every_outcome_is_reported_settled_with_its_reason(engine: Engine) -> None:
    events, hook = recorder()
    jobs = engine.runtime(on_event=hook)
    for job_id, action in (("c", "complete"), ("f", "fail"), ("r", "raise"), ("u", "unknown")):
        await jobs.ingest(job(job_id, queue=job_id, payload={"do": action}))
        await jobs.tick()
    settled = {event.job_id: (event.outcome, event.reason) for event in events
               if event.kind == "settled"}
    stored = {}
    for job_id in "cfru":
        record = await jobs.read(job_id)
        assert record is not None
        stored[job_id] = (record.outcome, record.failure_reason)
    assert settled == stored
    assert settled["c"] == ("completed", None) and settled["f"][0] == "failed"
    # The executor that raised: its error's short line, as the record keeps it.
    errors = {event.job_id: event.error for event in events if event.kind == "settled"}
    raised = await jobs.read("r")
    assert raised is not None and raised.error is not None
    assert errors == {"c": None, "f": None, "u": None, "r": raised.error.line}
    assert raised.error.line.startswith(raised.error.type + ": ")


async def test_the_duration_runs_from_the_claim_to_the_settlement(engine: Engine) -> None:
    events, hook = recorder()
    jobs, now = engine.timed_runtime(on_event=hook)
    started = time.monotonic()
    await jobs.ingest(job("slow", payload={"do": "block"}))
    tick = await engine.start(jobs, "slow")
    now.advance(250)
    engine.executor.release("slow")
    assert (await tick).outcome == "completed"
    elapsed_ms = (time.monotonic() - started) * 1000
    (settled,) = [event for event in events if event.kind == "settled"]
    assert settled.duration_ms is not None
    if engine.local:
        assert settled.duration_ms == 250  # the runtime's clock, claim to settlement
    else:
        # This machine's monotonic clock (database time may disagree with it):
        # the manual clock does not move it, so it is within the real time
        # the test took (under 250 ms unless the machine is loaded).
        assert 0 <= settled.duration_ms <= elapsed_ms + 2


async def test_a_batch_reports_its_new_jobs_only(engine: Engine) -> None:
    events, hook = recorder()
    jobs = engine.runtime(on_event=hook)
    await jobs.ingest(job("old"))
    events.clear()
    assert await jobs.ingest_many([job("old"), job("n1"), job("n2", queue="other")]) == [
        "duplicate", "queued", "queued"]
    assert [(event.kind, event.job_id, event.queue) for event in events] == [
        ("ingested", "n1", "q"), ("ingested", "n2", "other")]


async def test_a_cancelled_queued_job_is_reported_cancelled_then_settled(engine: Engine) -> None:
    events, hook = recorder()
    jobs = engine.runtime(on_event=hook)
    await jobs.ingest(job("a"))
    assert (await jobs.cancel("a", "c1")).status == "recorded"
    assert (await jobs.cancel("a", "c1")).status == "replayed"  # no transition
    assert (await jobs.tick()).outcome == "cancelled"
    assert summary(events) == [
        ("ingested", "a", None, None, None),
        ("cancelled", "a", None, None, 1),
        ("settled", "a", "cancelled", None, 1),
    ]
    assert events[2].duration_ms is None  # it never ran


async def test_a_cancelled_running_job_is_settled_once_by_its_execution(engine: Engine) -> None:
    events, hook = recorder()
    jobs = engine.runtime(on_event=hook)
    await jobs.ingest(job("a", payload={"do": "block"}))
    tick = await engine.start(jobs, "a")
    assert (await jobs.cancel("a", "c1")).status == "recorded"
    assert (await tick).outcome == "cancelled"
    assert [event.kind for event in events] == ["ingested", "claimed", "cancelled", "settled"]
    assert events[-1].outcome == "cancelled" and events[-1].duration_ms is not None


async def test_a_lane_refusal_is_reported_once_and_each_job_settled_once(engine: Engine) -> None:
    events, hook = recorder()
    jobs = engine.runtime(on_event=hook)
    await jobs.ingest(job("running", queue="q1", lane="bad", payload={"do": "block"}))
    await jobs.ingest(job("queued", queue="q2", lane="bad"))
    await jobs.ingest(job("other", queue="q3", lane="good"))
    tick = await engine.start(jobs, "running")
    events.clear()
    assert (await jobs.fail_lane("bad", "tenant_suspended")).settled == 2
    # The running job's tick reports the committed failure, but it was
    # already reported settled: no second event.
    assert (await tick).outcome == "failed"
    assert (await jobs.fail_lane("bad", "tenant_suspended")).settled == 0  # nothing: no event
    refused, *settled = events
    assert (refused.kind, refused.job_id, refused.lane, refused.reason, refused.count) == (
        "refused", None, "bad", "tenant_suspended", 2)
    assert sorted((event.kind, event.job_id, event.outcome, event.reason) for event in settled) == [
        ("settled", "queued", "failed", "tenant_suspended"),
        ("settled", "running", "failed", "tenant_suspended")]


async def test_a_purge_is_reported_with_its_count(engine: Engine) -> None:
    events, hook = recorder()
    jobs = engine.runtime(on_event=hook)
    await jobs.ingest_many([job("a"), job("b"), job("c", queue="keep")])
    events.clear()
    assert await jobs.purge("q") == 2
    assert await jobs.purge("q") == 0
    assert [(event.kind, event.queue, event.count, event.job_id) for event in events] == [
        ("purged", "q", 2, None)]


async def test_recovery_reports_requeued_then_interrupted(engine: Engine) -> None:
    dying = engine.runtime()
    await dying.ingest(job("a", payload={"do": "block"}, recovery=Recovery(1)))
    await engine.lose(dying, await engine.start(dying, "a"))
    engine.make_recoverable()
    events, hook = recorder()
    survivor = engine.runtime(on_event=hook)
    assert (await survivor.tick()).status == "requeued"
    await engine.lose(survivor, await engine.start(survivor, "a"))
    engine.make_recoverable()
    last = engine.runtime(on_event=hook)
    assert (await last.tick()).outcome == "interrupted"
    assert summary(events) == [
        ("requeued", "a", None, "recovery", 1),
        ("claimed", "a", None, None, 1),
        ("settled", "a", "interrupted", None, 1),
    ]
    assert events[-1].duration_ms is None  # no execution of this runtime ended it


async def test_a_redrive_is_reported_requeued(engine: Engine) -> None:
    events, hook = recorder()
    jobs = engine.runtime(on_event=hook)
    await jobs.ingest(job("a", payload={"do": "fail"}))
    await jobs.tick()
    events.clear()
    assert (await jobs.redrive("a", "r1")).status == "redriven"
    assert (await jobs.redrive("a", "r1")).status == "replayed"
    assert summary(events) == [("requeued", "a", None, "redrive", 1)]


async def test_a_raising_hook_changes_no_outcome(
    engine: Engine, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same work with a hook that raises on every event, and without a
    hook: the same results, the same stored outcomes; each failure logged
    (a hook's failures are logged once a minute: here at every one)."""
    from tickwork import events

    monkeypatch.setattr(events, "HOOK_FAILURE_LOG_INTERVAL_S", 0.0)
    failures: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            failures.append(record)

    def broken(event: Event) -> None:
        raise RuntimeError(f"hook broke on {event.kind}")

    handler = Collect(level=logging.ERROR)
    events_logger = logging.getLogger("tickwork.events")
    events_logger.addHandler(handler)
    try:
        with_hook = await _work(engine.runtime(on_event=broken), "x")
    finally:
        events_logger.removeHandler(handler)
    without = await _work(engine.runtime(), "y")
    assert with_hook == without
    assert failures and all(record.exc_info for record in failures)
    assert {str(record.exc_info[1]) for record in failures if record.exc_info} >= {
        "hook broke on ingested", "hook broke on claimed", "hook broke on settled",
        "hook broke on retried", "hook broke on cancelled", "hook broke on refused",
        "hook broke on purged", "hook broke on requeued"}


async def _work(jobs: Any, prefix: str) -> list[Any]:
    """Every kind of transition on jobs named ``prefix``; what each call
    returned and the stored outcomes, with the prefix taken out."""
    def job_of(name: str, **options: Any) -> Any:
        return job(f"{prefix}-{name}", queue=f"{prefix}-{options.pop('queue', 'q')}",
                   lane=f"{prefix}-{options.pop('lane', 'lane')}", **options)

    said: list[Any] = [
        await jobs.ingest(job_of("ok")),
        await jobs.ingest(job_of("retry", queue="r", payload={"do": "fail_until", "succeed_on": 2},
                                 retry=Retry(attempts=2, base_delay_ms=0))),
        await jobs.ingest(job_of("dead", queue="d", payload={"do": "fail"})),
        await jobs.ingest(job_of("stop", queue="s")),
        await jobs.ingest_many([job_of("lane1", queue="l1", lane="bad"),
                                job_of("gone", queue="p")]),
    ]
    said.append(await jobs.cancel(f"{prefix}-stop", "c1"))
    said.append(await jobs.fail_lane(f"{prefix}-bad", "refused"))
    said.append(await jobs.purge(f"{prefix}-p"))
    for _ in range(6):
        said.append(await jobs.tick())
    said.append(await jobs.redrive(f"{prefix}-dead", "r1"))
    said.append(await jobs.tick())
    stored = []
    for name in ("ok", "retry", "dead", "stop", "lane1", "gone"):
        record = await jobs.read(f"{prefix}-{name}")
        stored.append(None if record is None else (record.state, record.outcome,
                                                   record.failure_reason, record.attempt))
    # A retry's due time is the clock's: not compared.
    said = [replace(value, retry_at=None) if isinstance(value, TickResult) else value
            for value in said]
    return [repr(value).replace(f"{prefix}-", "") for value in said + stored]


async def test_a_schedule_slots_job_is_reported_ingested_once(engine: Engine) -> None:
    from datetime import UTC, datetime

    from tickwork import Schedule, ScheduledJob

    events, hook = recorder()
    jobs, now = engine.timed_runtime(on_event=hook)
    await jobs.put_schedule(Schedule("nightly", ScheduledJob("reports", "reports", 0, {}),
                                     cron="0 2 * * *", catch_up=2))
    slot = int(datetime(2026, 12, 3, 2, tzinfo=UTC).timestamp() * 1000)
    now.advance(slot - now())  # three slots went by: the latest two are caught up
    other = (engine.another_process(clock=now, on_event=hook) if engine.local
             else engine.another_process(on_event=hook))
    assert await jobs.fire_schedules() == 2
    assert await other.fire_schedules() == 0
    assert [(event.kind, event.job_id, event.queue, event.at) for event in events] == [
        ("ingested", "nightly@2026-12-02T02:00:00Z", "reports", slot),
        ("ingested", "nightly@2026-12-03T02:00:00Z", "reports", slot)]
    events.clear()
    assert (await jobs.tick()).status == "settled"  # a tick reports what it claims
    assert [event.kind for event in events] == ["claimed", "settled"]
