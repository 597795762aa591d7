"""Queue status: status() and queue_status(), on every owner."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

import pytest

from tests.support import Harness, job
from tickwork import InvalidArgument, QueueStatus, Recovery
from tickwork.stores.sql import sqlite as sql

NO_OUTCOMES = {"completed": 0, "failed": 0, "cancelled": 0, "outcome_unknown": 0,
               "interrupted": 0}


def counts(queued: int = 0, running: int = 0, **outcomes: int) -> tuple[Any, ...]:
    """(queued, running, settled, outcomes) as QueueStatus carries them."""
    return queued, running, sum(outcomes.values()), {**NO_OUTCOMES, **outcomes}


def of(status: QueueStatus) -> tuple[Any, ...]:
    return status.queued, status.running, status.settled, status.outcomes


async def test_counts_follow_every_transition(harness: Harness) -> None:
    runtime = harness.runtime()
    assert runtime.status() == []
    # An orphaned claim (its process died) settles interrupted on recovery.
    dying = harness.runtime()
    dying.ingest(job("lost", queue="q", payload={"do": "block"}, recovery=Recovery(0)))
    task = asyncio.create_task(dying.tick())
    await asyncio.sleep(0.01)
    await harness.crash(task)
    runtime = harness.runtime()
    assert of(runtime.queue_status("q")) == counts(running=1)
    assert (await runtime.tick()).outcome == "interrupted"

    statuses = runtime.ingest_many([
        job("done", queue="q"),
        job("failed", queue="q", payload={"do": "fail"}),
        job("unknown", queue="q", payload={"do": "unknown"}),
        job("cancelled", queue="q"),
        job("refused", queue="r", lane="bad"),
        job("purged", queue="p"),
        job("waiting", queue="w"),
    ])
    assert statuses == ["queued"] * 7
    assert of(runtime.queue_status("q")) == counts(queued=4, interrupted=1)
    assert runtime.cancel("cancelled", "c1").status == "recorded"
    for _ in range(4):  # the cancelled job first, then done, failed, unknown
        assert (await runtime.tick()).status == "settled"
    assert of(runtime.queue_status("q")) == counts(
        completed=1, failed=1, cancelled=1, outcome_unknown=1, interrupted=1)

    assert runtime.fail_lane("bad", "tenant_gone").settled == 1
    assert runtime.purge("p") == 1
    # A running job counts as running; its queue's other jobs wait.
    runtime.ingest_many([job("blocking", queue="w2", priority=9, payload={"do": "block"}),
                         job("behind", queue="w2")])
    tick = asyncio.create_task(runtime.tick())
    await asyncio.sleep(0.01)
    assert harness.executor.started[-1] == "blocking"

    everything = runtime.status()
    # Every queue that has a job, by name; the purged queue has none left.
    assert [status.queue for status in everything] == ["q", "r", "w", "w2"]
    assert {status.queue: of(status) for status in everything} == {
        "q": counts(completed=1, failed=1, cancelled=1, outcome_unknown=1, interrupted=1),
        "r": counts(failed=1),
        "w": counts(queued=1),
        "w2": counts(queued=1, running=1),
    }
    for status in everything:
        assert runtime.queue_status(status.queue) == status
    assert runtime.queue_status("p") == QueueStatus("p", 0, 0, 0, NO_OUTCOMES)

    harness.executor.release("blocking")
    assert (await tick).outcome == "completed"
    assert of(runtime.queue_status("w2")) == counts(queued=1, completed=1)


def test_an_unknown_queue_is_all_zeros(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("a", queue="known"))
    status = runtime.queue_status("unknown")
    assert status == QueueStatus("unknown", 0, 0, 0, NO_OUTCOMES)
    assert list(status.outcomes) == list(NO_OUTCOMES)


def test_counts_are_per_queue_with_similar_names(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest_many([job("a", queue="b"), job("b", queue="a"), job("c", queue="a"),
                         job("d", queue="A"), job("e", queue="ä")])
    assert [(s.queue, s.queued) for s in runtime.status()] == [
        ("A", 1), ("a", 2), ("b", 1), ("ä", 1)]


@pytest.mark.parametrize("bad", ["", "q" * 257, 7, None, "q\ud800"])
def test_queue_status_refuses_a_bad_queue_name(harness: Harness, bad: Any) -> None:
    runtime = harness.runtime()
    with pytest.raises(InvalidArgument) as caught:
        runtime.queue_status(bad)
    assert caught.value.field == "queue"


def test_queue_status_reads_indexes_only(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest_many([job(f"j{n}", queue=f"q{n % 3}") for n in range(30)])
    text = sql.QUEUE_STATUS.render(sql.OWNER_LOCAL).text
    plan = [row[-1] for row in harness.host_query("EXPLAIN QUERY PLAN " + text, ("q1",))]
    searches = [line for line in plan if "tickwork_jobs" in line]
    assert len(searches) == 3, plan
    assert all(line.startswith("SEARCH tickwork_jobs USING") for line in searches), plan
    used = " ".join(searches)
    for index in ("queue_waiting", "running", "queue_settled"):
        assert f"tickwork_jobs_{index} (queue=?)" in used, plan
    assert not any(line.startswith("SCAN") for line in plan), plan


def test_a_status_is_a_plain_value(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("a"))
    status = runtime.queue_status("q")
    with pytest.raises(dataclasses.FrozenInstanceError):
        status.queued = 5  # type: ignore[misc]
    assert json.loads(json.dumps(dataclasses.asdict(status))) == {
        "queue": "q", "queued": 1, "running": 0, "settled": 0, "outcomes": NO_OUTCOMES}
    # Each status owns its outcomes: changing one changes no other status.
    status.outcomes["failed"] = 9  # type: ignore[index]
    assert runtime.queue_status("q").outcomes == NO_OUTCOMES
    passed = {"failed": 2}
    built = QueueStatus("q", 0, 0, 2, passed)
    assert built.outcomes == {**NO_OUTCOMES, "failed": 2}
    assert built.outcomes is not passed
