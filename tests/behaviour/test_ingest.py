"""Validation and idempotent ingest, one job or a list, on every store."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.support import job, unchecked_job
from tests.support.engine import Engine
from tickwork import IngestConflict, InvalidArgument, InvalidJob, Job, Recovery
from tickwork.model.jobs import MAX_INGEST_BATCH

MAX = 2**53 - 1


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        (("", "q", "l", 0, {}), "job_id"),
        (("x" * 257, "q", "l", 0, {}), "job_id"),
        ((7, "q", "l", 0, {}), "job_id"),
        (("a", "", "l", 0, {}), "queue"),
        (("a", "q" * 257, "l", 0, {}), "queue"),
        (("a", "q", "", 0, {}), "lane"),
        (("a", "q", "l" * 513, 0, {}), "lane"),
        (("a", "q", "l", True, {}), "priority"),
        (("a", "q", "l", 1.5, {}), "priority"),
        (("a", "q", "l", MAX + 1, {}), "priority"),
        (("a", "q", "l", -MAX - 1, {}), "priority"),
        (("a", "q", "l", 0, {"x": math.nan}), "payload"),
        (("a", "q", "l", 0, [math.inf]), "payload"),
        (("a", "q", "l", 0, {1: "non-string key"}), "payload"),
        (("a", "q", "l", 0, {"x": object()}), "payload"),
        (("\ud800", "q", "l", 0, {}), "job_id"),
        (("a", "q\udfff", "l", 0, {}), "queue"),
        (("a", "q", "l\ud800", 0, {}), "lane"),
        (("a", "q", "l", 0, {"s": "\ud800"}), "payload"),
        (("a", "q", "l", 0, {"\ud800": 1}), "payload"),
        (("a", "q", "l", 0, {}, Recovery(-1)), "recovery.max_recoveries"),
        (("a", "q", "l", 0, {}, Recovery(True)), "recovery.max_recoveries"),
        (("a", "q", "l", 0, {}, 3), "recovery"),
    ],
)
async def test_invalid_job_names_the_field_and_writes_nothing(
    engine: Engine, fields: tuple[Any, ...], field: str
) -> None:
    # Job() refuses it where it is built; a job that got around the
    # constructor (its fields changed since) is refused by ingest, the same way.
    with pytest.raises(InvalidJob) as built:
        Job(*fields)
    runtime = engine.runtime()
    await runtime.ingest(job("kept"))
    before = await engine.table()
    with pytest.raises(InvalidJob) as caught:
        await runtime.ingest(unchecked_job(*fields))
    assert caught.value.field == field
    assert field in str(caught.value)
    assert (built.value.field, str(built.value)) == (field, str(caught.value))
    assert await engine.table() == before


async def test_a_payload_changed_after_the_job_was_built_is_refused_at_ingest(
    engine: Engine,
) -> None:
    # Job() checked the payload when it was built; a dict is still the
    # caller's to change, so ingest checks it again.
    payload: dict[str, Any] = {"amount": 30}
    built = Job("a", "q", "l", 0, payload)
    payload["at"] = {"nan": math.nan}
    runtime = engine.runtime()
    await runtime.ingest(job("kept"))
    before = await engine.table()
    with pytest.raises(InvalidJob) as caught:
        await runtime.ingest(built)
    assert str(caught.value) == (
        "payload: payload['at']['nan'] is nan, which JSON cannot represent")
    with pytest.raises(InvalidJob) as in_a_list:
        await runtime.ingest_many([job("b"), built])
    assert in_a_list.value.field == "jobs[1].payload"
    assert await engine.table() == before


async def test_boundary_values_are_accepted(engine: Engine) -> None:
    runtime = engine.runtime()
    edge = Job("i" * 256, "q" * 256, "l" * 512, MAX, {"deep": [1, 2.5, None, "s"]}, Recovery(0))
    assert await runtime.ingest(edge) == "queued"
    assert await runtime.ingest(Job("low", "q", "l", -MAX, None)) == "queued"
    stored = await runtime.read("i" * 256)
    assert stored is not None
    assert stored.priority == MAX and isinstance(stored.priority, int)
    assert stored.payload == {"deep": [1, 2.5, None, "s"]}
    assert stored.recovery == Recovery(0)
    low = await runtime.read("low")
    assert low is not None and low.priority == -MAX and low.payload is None


async def test_new_job_is_queued_with_a_full_record(engine: Engine) -> None:
    runtime = engine.runtime()
    assert await runtime.ingest(job("a", queue="emails", lane="tenant-1", priority=3,
                                    payload={"to": "x"}, recovery=Recovery(2))) == "queued"
    record = await runtime.read("a")
    assert record is not None
    assert (record.job_id, record.queue, record.lane, record.priority) == ("a", "emails",
                                                                            "tenant-1", 3)
    assert record.payload == {"to": "x"}
    assert record.recovery == Recovery(2)
    assert (record.state, record.outcome, record.failure_reason) == ("queued", None, None)
    assert record.recoveries == 0 and record.cancellation_id is None
    assert record.enqueued_at > 0 and record.started_at is None and record.settled_at is None
    assert await runtime.read("missing") is None


async def test_identical_replay_is_a_duplicate_regardless_of_key_order(engine: Engine) -> None:
    runtime = engine.runtime()
    assert await runtime.ingest(job("a", payload={"x": 1, "y": [1, 2]})) == "queued"
    wakes = engine.wake.calls
    assert await runtime.ingest(job("a", payload={"y": [1, 2], "x": 1})) == "duplicate"
    assert len(await engine.table()) == 1
    # Nothing changed, yet the host is woken: the first ingest may have
    # stored the job and died before its wake.
    assert engine.wake.calls == wakes + 1


@pytest.mark.parametrize(
    ("replay", "fields"),
    [
        (job("a", queue="other", payload={"x": 1}), ("queue",)),
        (job("a", lane="other", payload={"x": 1}), ("lane",)),
        (job("a", priority=1, payload={"x": 1}), ("priority",)),
        (job("a", payload={"x": 2}), ("payload",)),
        (job("a", payload={"x": 1}, recovery=Recovery(1)), ("recovery",)),
        (job("a", queue="other", priority=3, payload={"x": 1}), ("queue", "priority")),
    ],
)
async def test_replay_with_different_cargo_conflicts_and_keeps_the_stored_job(
    engine: Engine, replay: Job, fields: tuple[str, ...]
) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("a", payload={"x": 1}))
    before = await engine.table()
    with pytest.raises(IngestConflict) as caught:
        await runtime.ingest(replay)
    assert caught.value.fields == fields
    assert await engine.table() == before


async def test_settled_job_replay_is_still_a_duplicate(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("a"))
    await runtime.tick()
    assert await runtime.ingest(job("a")) == "duplicate"
    record = await runtime.read("a")
    assert record is not None and record.state == "settled"


async def test_another_process_sees_the_same_jobs(engine: Engine) -> None:
    await engine.runtime().ingest(job("a", payload={"n": 1}))
    other = engine.another_process()
    assert await other.ingest(job("a", payload={"n": 1})) == "duplicate"
    read = await other.read("a")
    assert read is not None and read.payload == {"n": 1}


# ---------------------------------------------------------------- ingest_many


async def test_a_list_is_stored_in_list_order_and_wakes_once(engine: Engine) -> None:
    runtime = engine.runtime()
    before = engine.wake.calls
    statuses = await runtime.ingest_many([
        job("c", priority=1), job("a", queue="other", recovery=Recovery(2)), job("b")])
    assert statuses == ["queued", "queued", "queued"]
    assert engine.wake.calls == before + 1
    rows = await engine.rows("SELECT job_id FROM tickwork_jobs ORDER BY sequence")
    assert [row[0] for row in rows] == ["c", "a", "b"]  # enqueue order is list order
    record = await runtime.read("a")
    assert record is not None
    assert (record.queue, record.state, record.recovery) == ("other", "queued", Recovery(2))


async def test_an_identical_replay_of_the_whole_list_is_all_duplicates(engine: Engine) -> None:
    runtime = engine.runtime()
    jobs = [job(f"j{n}", payload={"n": n, "m": [n]}, recovery=Recovery(n) if n % 2 else None)
            for n in range(5)]
    assert await runtime.ingest_many(jobs) == ["queued"] * 5
    rows, wakes = await engine.table(), engine.wake.calls
    replay = [job(f"j{n}", payload={"m": [n], "n": n}, recovery=Recovery(n) if n % 2 else None)
              for n in range(5)]  # key order differs
    assert await engine.another_process().ingest_many(replay) == ["duplicate"] * 5
    assert await engine.table() == rows
    assert engine.wake.calls == wakes + 1  # a replay wakes too (see ingest)
    # Mixed: stored, new, stored.
    assert await runtime.ingest_many([jobs[0], job("new"), jobs[4]]) == [
        "duplicate", "queued", "duplicate"]


async def test_a_repeated_id_within_one_call(engine: Engine) -> None:
    runtime = engine.runtime()
    assert await runtime.ingest_many([job("a", payload={"v": 1}), job("b"),
                                      job("a", payload={"v": 1})]) == [
        "queued", "queued", "duplicate"]
    rows = await engine.table()
    assert len(rows) == 2
    with pytest.raises(IngestConflict) as caught:
        await runtime.ingest_many([job("x", payload={"v": 1}), job("y"),
                                   job("x", payload={"v": 2}, lane="other")])
    assert (caught.value.job_id, caught.value.fields) == ("x", ("lane", "payload"))
    assert await engine.table() == rows


async def test_a_conflict_in_the_middle_stores_nothing(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("stored", payload={"v": 1}))
    await runtime.tick()  # settled history conflicts just the same
    rows, wakes = await engine.table(), engine.wake.calls
    with pytest.raises(IngestConflict) as caught:
        await runtime.ingest_many([job("first"), job("second", queue="elsewhere"),
                                   job("stored", priority=4, payload={"v": 1},
                                       recovery=Recovery(1)),
                                   job("last")])
    assert (caught.value.job_id, caught.value.fields) == ("stored", ("priority", "recovery"))
    assert await engine.table() == rows
    assert await runtime.read("first") is None and await runtime.read("last") is None
    assert engine.wake.calls == wakes
    # The same list without the conflicting job goes through.
    assert await runtime.ingest_many([job("first"), job("second", queue="elsewhere"),
                                      job("last")]) == ["queued"] * 3


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (unchecked_job("a", "q", "l", True, {}), "jobs[2].priority"),
        (unchecked_job("", "q", "l", 0, {}), "jobs[2].job_id"),
        (unchecked_job("a", "q", "l" * 513, 0, {}), "jobs[2].lane"),
        (unchecked_job("a", "q", "l", 0, {"x": float("nan")}), "jobs[2].payload"),
        (unchecked_job("a", "q", "l", 0, {}, Recovery(-1)), "jobs[2].recovery.max_recoveries"),
        ("not a job", "jobs[2]"),
    ],
)
async def test_an_invalid_job_in_a_list_names_its_index_and_nothing_is_written(
    engine: Engine, bad: Any, field: str
) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("kept"))
    rows, wakes = await engine.table(), engine.wake.calls
    with pytest.raises(InvalidJob) as caught:
        await runtime.ingest_many([job("x"), job("y"), bad, job("z")])
    assert caught.value.field == field
    assert field in str(caught.value)
    assert await engine.table() == rows
    assert engine.wake.calls == wakes


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
async def test_a_bad_list_is_refused_and_nothing_is_written(engine: Engine, bad: Any) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("kept"))
    rows = await engine.table()
    with pytest.raises(InvalidArgument) as caught:
        await runtime.ingest_many(bad)
    assert caught.value.field == "jobs"
    assert await engine.table() == rows


async def test_the_limit_is_accepted_in_full(engine: Engine) -> None:
    runtime = engine.runtime()
    jobs = [job(f"j{n:03}", queue=f"q{n % 7}", priority=n, payload={"n": n},
                recovery=Recovery(n)) for n in range(MAX_INGEST_BATCH)]
    assert await runtime.ingest_many(jobs) == ["queued"] * MAX_INGEST_BATCH
    assert await runtime.ingest_many(tuple(jobs)) == ["duplicate"] * MAX_INGEST_BATCH
    assert len(await engine.table()) == MAX_INGEST_BATCH
    assert sum(status.queued for status in await runtime.status()) == MAX_INGEST_BATCH
    with pytest.raises(IngestConflict) as caught:
        await runtime.ingest_many([*jobs[:99], job("j099", queue="q1")])
    assert (caught.value.job_id, caught.value.fields) == (
        "j099", ("priority", "payload", "recovery"))
