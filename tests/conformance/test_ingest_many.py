"""ingest_many: validation first, then all or nothing, on every owner."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import Harness, job
from tickwork import IngestConflict, InvalidArgument, InvalidJob, Job, QueueTransition, Recovery
from tickwork.model.jobs import MAX_INGEST_BATCH


def table_rows(harness: Harness) -> list[tuple[Any, ...]]:
    return harness.host_query("SELECT * FROM tickwork_jobs ORDER BY sequence")


def test_stores_every_job_in_list_order_and_wakes_once(harness: Harness) -> None:
    runtime = harness.runtime()
    before = harness.wake.calls
    statuses = runtime.ingest_many([
        job("c", priority=1), job("a", queue="other", recovery=Recovery(2)), job("b")])
    assert statuses == ["queued", "queued", "queued"]
    assert harness.wake.calls == before + 1
    rows = harness.host_query("SELECT job_id FROM tickwork_jobs ORDER BY sequence")
    assert [row[0] for row in rows] == ["c", "a", "b"]  # enqueue order is list order
    record = runtime.read("a")
    assert record is not None
    assert (record.queue, record.state, record.recovery) == ("other", "queued", Recovery(2))


def test_an_identical_replay_of_the_whole_list_is_all_duplicates(harness: Harness) -> None:
    runtime = harness.runtime()
    jobs = [job(f"j{n}", payload={"n": n, "m": [n]}) for n in range(5)]
    assert runtime.ingest_many(jobs) == ["queued"] * 5
    rows = table_rows(harness)
    wakes = harness.wake.calls
    replay = [job(f"j{n}", payload={"m": [n], "n": n}) for n in range(5)]  # key order differs
    assert runtime.ingest_many(replay) == ["duplicate"] * 5
    assert table_rows(harness) == rows
    assert harness.wake.calls == wakes  # nothing changed, nothing to wake for
    # Mixed: stored, new, stored.
    assert runtime.ingest_many([jobs[0], job("new"), jobs[4]]) == [
        "duplicate", "queued", "duplicate"]


def test_a_repeated_id_within_one_call(harness: Harness) -> None:
    runtime = harness.runtime()
    assert runtime.ingest_many([job("a", payload={"v": 1}), job("b"),
                                job("a", payload={"v": 1})]) == ["queued", "queued", "duplicate"]
    assert len(table_rows(harness)) == 2
    rows = table_rows(harness)
    with pytest.raises(IngestConflict) as caught:
        runtime.ingest_many([job("x", payload={"v": 1}), job("y"),
                             job("x", payload={"v": 2}, lane="other")])
    assert (caught.value.job_id, caught.value.fields) == ("x", ("lane", "payload"))
    assert table_rows(harness) == rows


def test_a_conflict_in_the_middle_stores_nothing(harness: Harness) -> None:
    projector = harness.recording_projector()
    runtime = harness.runtime(project=projector)
    runtime.ingest(job("stored", payload={"v": 1}))
    rows = table_rows(harness)
    projections, wakes = len(harness.projections), harness.wake.calls
    with pytest.raises(IngestConflict) as caught:
        runtime.ingest_many([job("first"), job("second", queue="elsewhere"),
                             job("stored", priority=4, payload={"v": 1}), job("last")])
    assert (caught.value.job_id, caught.value.fields) == ("stored", ("priority",))
    assert table_rows(harness) == rows
    assert runtime.read("first") is None and runtime.read("last") is None
    assert harness.wake.calls == wakes
    # The projector ran for the first two inside the transaction that rolled back.
    assert [t.queue for t in harness.projections[projections:]] == ["q", "elsewhere"]


def test_the_projector_runs_in_the_same_transaction(harness: Harness) -> None:
    seen: list[QueueTransition] = []

    def project(transition: QueueTransition) -> None:
        seen.append(transition)
        if transition.head is not None and transition.head.job_id == "boom":
            raise RuntimeError("projection failed")

    runtime = harness.runtime(project=project)
    assert runtime.ingest_many([job("a", queue="q1"), job("b", queue="q2")]) == [
        "queued", "queued"]
    assert [(t.queue, t.head.job_id if t.head else None) for t in seen] == [
        ("q1", "a"), ("q2", "b")]
    with pytest.raises(RuntimeError, match="projection failed"):
        runtime.ingest_many([job("c", queue="q3"), job("boom", queue="q4", priority=1)])
    assert runtime.read("c") is None and runtime.read("boom") is None


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (Job("a", "q", "l", True, {}), "jobs[2].priority"),
        (Job("", "q", "l", 0, {}), "jobs[2].job_id"),
        (Job("a", "q", "l", 0, {"x": float("nan")}), "jobs[2].payload"),
        (Job("a", "q", "l", 0, {}, Recovery(-1)), "jobs[2].recovery.max_recoveries"),
        ("not a job", "jobs[2]"),
    ],
)
def test_an_invalid_job_names_its_index_and_nothing_is_written(
    harness: Harness, bad: Any, field: str
) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("kept"))
    rows, wakes = table_rows(harness), harness.wake.calls
    with pytest.raises(InvalidJob) as caught:
        runtime.ingest_many([job("x"), job("y"), bad, job("z")])
    assert caught.value.field == field
    assert field in str(caught.value)
    assert table_rows(harness) == rows
    assert harness.wake.calls == wakes


@pytest.mark.parametrize(
    "bad",
    [
        [],
        [job(f"j{n}") for n in range(MAX_INGEST_BATCH + 1)],
        job("a"),
        "jobs",
        None,
        {"a": job("a")},
        (j for j in [job("a")]),
    ],
    ids=["empty", "too-many", "a-job", "a-string", "none", "a-dict", "a-generator"],
)
def test_a_bad_list_is_refused_and_nothing_is_written(harness: Harness, bad: Any) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("kept"))
    rows = table_rows(harness)
    with pytest.raises(InvalidArgument) as caught:
        runtime.ingest_many(bad)
    assert caught.value.field == "jobs"
    assert table_rows(harness) == rows


def test_the_limit_is_accepted_in_full(harness: Harness) -> None:
    runtime = harness.runtime()
    jobs = [job(f"j{n:03}", queue=f"q{n % 7}") for n in range(MAX_INGEST_BATCH)]
    assert runtime.ingest_many(jobs) == ["queued"] * MAX_INGEST_BATCH
    assert runtime.ingest_many(tuple(jobs)) == ["duplicate"] * MAX_INGEST_BATCH
    assert len(table_rows(harness)) == MAX_INGEST_BATCH
    assert sum(status.queued for status in runtime.status()) == MAX_INGEST_BATCH
