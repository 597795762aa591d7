"""Behaviour 1-2: validation and idempotent ingest, on every owner."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.support import Harness, job
from tickwork import IngestConflict, InvalidJob, Job, Recovery

MAX = 2**53 - 1


def table_rows(harness: Harness) -> list[tuple[Any, ...]]:
    return harness.host_query("SELECT * FROM tickwork_jobs ORDER BY sequence")


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (Job("", "q", "l", 0, {}), "job_id"),
        (Job("x" * 257, "q", "l", 0, {}), "job_id"),
        (Job(7, "q", "l", 0, {}), "job_id"),  # type: ignore[arg-type]
        (Job("a", "", "l", 0, {}), "queue"),
        (Job("a", "q" * 257, "l", 0, {}), "queue"),
        (Job("a", "q", "", 0, {}), "lane"),
        (Job("a", "q", "l" * 513, 0, {}), "lane"),
        (Job("a", "q", "l", True, {}), "priority"),
        (Job("a", "q", "l", 1.5, {}), "priority"),  # type: ignore[arg-type]
        (Job("a", "q", "l", MAX + 1, {}), "priority"),
        (Job("a", "q", "l", -MAX - 1, {}), "priority"),
        (Job("a", "q", "l", 0, {"x": math.nan}), "payload"),
        (Job("a", "q", "l", 0, [math.inf]), "payload"),
        (Job("a", "q", "l", 0, {1: "non-string key"}), "payload"),
        (Job("a", "q", "l", 0, {"x": object()}), "payload"),
        (Job("\ud800", "q", "l", 0, {}), "job_id"),
        (Job("a", "q\udfff", "l", 0, {}), "queue"),
        (Job("a", "q", "l\ud800", 0, {}), "lane"),
        (Job("a", "q", "l", 0, {"s": "\ud800"}), "payload"),
        (Job("a", "q", "l", 0, {"\ud800": 1}), "payload"),
        (Job("a", "q", "l", 0, {}, Recovery(-1)), "recovery.max_recoveries"),
        (Job("a", "q", "l", 0, {}, Recovery(True)), "recovery.max_recoveries"),
        (Job("a", "q", "l", 0, {}, 3), "recovery"),  # type: ignore[arg-type]
    ],
)
def test_invalid_job_names_the_field_and_writes_nothing(
    harness: Harness, bad: Job, field: str
) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("kept"))
    before = table_rows(harness)
    with pytest.raises(InvalidJob) as caught:
        runtime.ingest(bad)
    assert caught.value.field == field
    assert field in str(caught.value)
    assert table_rows(harness) == before


def test_boundary_values_are_accepted(harness: Harness) -> None:
    runtime = harness.runtime()
    edge = Job("i" * 256, "q" * 256, "l" * 512, MAX, {"deep": [1, 2.5, None, "s"]}, Recovery(0))
    assert runtime.ingest(edge) == "queued"
    assert runtime.ingest(Job("low", "q", "l", -MAX, None)) == "queued"
    stored = runtime.read("i" * 256)
    assert stored is not None
    assert stored.priority == MAX and isinstance(stored.priority, int)
    assert stored.payload == {"deep": [1, 2.5, None, "s"]}
    assert stored.recovery == Recovery(0)
    low = runtime.read("low")
    assert low is not None and low.priority == -MAX and low.payload is None


def test_new_job_is_queued_with_a_full_record(harness: Harness) -> None:
    runtime = harness.runtime()
    assert runtime.ingest(job("a", queue="emails", lane="tenant-1", priority=3,
                              payload={"to": "x"}, recovery=Recovery(2))) == "queued"
    record = runtime.read("a")
    assert record is not None
    assert (record.job_id, record.queue, record.lane, record.priority) == ("a", "emails",
                                                                            "tenant-1", 3)
    assert record.payload == {"to": "x"}
    assert record.recovery == Recovery(2)
    assert (record.state, record.outcome, record.failure_reason) == ("queued", None, None)
    assert record.recoveries == 0
    assert record.enqueued_at > 0 and record.started_at is None and record.settled_at is None
    assert runtime.read("missing") is None


def test_identical_replay_is_a_duplicate_regardless_of_key_order(harness: Harness) -> None:
    runtime = harness.runtime()
    assert runtime.ingest(job("a", payload={"x": 1, "y": [1, 2]})) == "queued"
    assert runtime.ingest(job("a", payload={"y": [1, 2], "x": 1})) == "duplicate"
    assert len(table_rows(harness)) == 1


@pytest.mark.parametrize(
    ("replay", "field"),
    [
        (job("a", queue="other", payload={"x": 1}), "queue"),
        (job("a", lane="other", payload={"x": 1}), "lane"),
        (job("a", priority=1, payload={"x": 1}), "priority"),
        (job("a", payload={"x": 2}), "payload"),
        (job("a", payload={"x": 1}, recovery=Recovery(1)), "recovery"),
    ],
)
def test_replay_with_different_cargo_conflicts_and_keeps_the_stored_job(
    harness: Harness, replay: Job, field: str
) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("a", payload={"x": 1}))
    before = table_rows(harness)
    with pytest.raises(IngestConflict) as caught:
        runtime.ingest(replay)
    assert caught.value.fields == (field,)
    assert table_rows(harness) == before


async def test_settled_job_replay_is_still_a_duplicate(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("a"))
    await runtime.tick()
    assert runtime.ingest(job("a")) == "duplicate"
    record = runtime.read("a")
    assert record is not None and record.state == "settled"


def test_runtime_construction_is_idempotent_and_keeps_data(harness: Harness) -> None:
    harness.runtime().ingest(job("a"))
    harness.open()
    rebuilt = harness.runtime()
    assert rebuilt.read("a") is not None
    assert rebuilt.ingest(job("a")) == "duplicate"
