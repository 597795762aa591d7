"""When an owner's host prunes: the tick loop's pass between loops, on sqlite3
and the Durable Object storage stand-in (both SDK shapes): the ``harness``
fixture. What a prune deletes is the behaviour suite's
(tests/behaviour/test_retention.py); here, when it runs and what it costs."""

from __future__ import annotations

import logging

import pytest

from tests.support import Harness, job
from tickwork.events import Event
from tickwork.hosts.ticking import tick_until_idle
from tickwork.model.retention import MIN_KEEP_MS, PRUNE_BATCH
from tickwork.runtimes.pruning import MAX_BATCHES_PER_PASS, PRUNE_INTERVAL_MS, PruneSchedule

START = 1_800_000_000_000


def test_a_pass_is_due_at_first_then_after_the_interval_or_at_once_after_a_full_batch(
) -> None:
    schedule = PruneSchedule()
    assert schedule.due(START)
    schedule.ran(START, PRUNE_BATCH - 1)
    assert not schedule.due(START + PRUNE_INTERVAL_MS - 1)
    assert schedule.due(START + PRUNE_INTERVAL_MS)
    schedule.ran(START, PRUNE_BATCH)  # more may be left: due at once
    assert schedule.due(START)


async def test_the_host_loop_prunes_when_a_pass_is_due(harness: Harness) -> None:
    now = [START]
    events: list[Event] = []
    runtime = harness.runtime(clock=lambda: now[0], on_event=events.append)
    runtime.set_retention(None, keep_completed_ms=MIN_KEEP_MS, keep_failed_ms=MIN_KEEP_MS)
    runtime.ingest(job("a"))
    await runtime.tick()  # settled (and filed) at START
    now[0] += 10_000
    await tick_until_idle(runtime)  # the first pass: "a" is too young
    now[0] = START + 65_000  # "a" is old now, but the next pass is due at +70 s
    await tick_until_idle(runtime)
    assert harness.host_query("SELECT job_id FROM tickwork_jobs") == [("a",)]
    now[0] = START + 70_000
    await tick_until_idle(runtime)
    assert harness.host_query("SELECT job_id FROM tickwork_jobs") == []
    assert [(event.kind, event.queue, event.count) for event in events
            if event.kind == "pruned"] == [("pruned", "q", 1)]


async def test_a_pass_runs_a_few_batches_and_the_next_loop_goes_on(harness: Harness) -> None:
    now = [START]
    runtime = harness.runtime(clock=lambda: now[0])
    runtime.set_retention(None, keep_completed_ms=MIN_KEEP_MS, keep_failed_ms=MIN_KEEP_MS)
    total = PRUNE_BATCH * MAX_BATCHES_PER_PASS + 7
    # Settled history written directly: as a long-running owner would have it.
    harness.host_query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) "
        "INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, "
        "max_recoveries, state, outcome, enqueued_at, started_at, settled_at, listed, filed) "
        "SELECT 'h' || i, 'q', 'q', 0, '{}', 0, 'settled', 'completed', ?, ?, ?, 1, 1 FROM n",
        (total, START, START, START))
    runtime.ingest(job("waiting"))
    now[0] += MIN_KEEP_MS + 1
    assert runtime.prune_if_due() == PRUNE_BATCH * MAX_BATCHES_PER_PASS
    assert runtime.prune_if_due() == 7  # the last batch was full: due again at once
    assert runtime.prune_if_due() == 0  # not due again for a minute
    assert harness.host_query("SELECT job_id, state FROM tickwork_jobs") == [
        ("waiting", "queued")]


async def test_a_failing_prune_is_logged_and_the_loop_goes_on(
        harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    runtime = harness.runtime()
    harness.host_query("DROP TABLE tickwork_retention")  # every prune now fails
    runtime.ingest(job("a"))
    with caplog.at_level(logging.ERROR):
        ended = await tick_until_idle(runtime)
    assert ended.stop == "idle"
    assert [record.name for record in caplog.records] == ["tickwork.pruning"]
    assert "could not prune settled jobs" in caplog.text
    assert harness.host_query("SELECT state FROM tickwork_jobs") == [("settled",)]


async def test_a_drains_settlements_waiting_for_their_filing_batch_are_pruned_too(
        harness: Harness) -> None:
    now = [START]
    runtime = harness.runtime(clock=lambda: now[0])
    for n in range(3):
        runtime.ingest(job(f"j{n}"))
    await runtime.drain()  # settled by the drain, which leaves them for a filing batch
    [(unfiled,)] = harness.host_query(
        "SELECT count(*) FROM tickwork_jobs WHERE filed = 0 AND state = 'settled'")
    assert unfiled >= 2  # each one the drain settled with the next claim taken ahead
    now[0] += 8 * 86_400_000  # past the built-in week
    assert runtime.prune() == 3
    assert harness.host_query("SELECT count(*) FROM tickwork_jobs") == [(0,)]
