"""Dead letters and redrive, on every store.

A queue's dead letters are its jobs that settled ``failed``,
``outcome_unknown`` or ``interrupted``, listed newest settlement first, a
page at a time. ``redrive`` puts one back to queued as a new attempt chain,
replay-safe by its redrive id, and refuses jobs that are not dead letters.
"""

from __future__ import annotations

import pytest

from tests.support import job
from tests.support.engine import Engine
from tickwork import Attempt, InvalidArgument, Retry


async def _settle_all(engine: Engine, now: object, specs: list[tuple[str, str, str]]) -> None:
    """Ingest and run (job_id, queue, action) one at a time, 10 ms apart."""
    jobs = engine.runtime(clock=now) if engine.local else engine.runtime()
    for job_id, queue, action in specs:
        await jobs.ingest(job(job_id, queue=queue, payload={"do": action}))
        assert (await jobs.tick()).job_id == job_id
        now.advance(10)  # type: ignore[attr-defined]


async def test_dead_letters_are_listed_newest_first_a_page_at_a_time(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await _settle_all(engine, now, [
        ("f1", "q", "fail"), ("ok", "q", "complete"), ("u1", "q", "unknown"),
        ("gave-up", "q", "cancel"), ("f2", "q", "raise"), ("elsewhere", "other", "fail"),
        ("f3", "q", "fail")])
    page = await jobs.dead_letters("q", limit=2)
    assert [record.job_id for record in page.jobs] == ["f3", "f2"]
    assert page.cursor is not None
    page = await jobs.dead_letters("q", limit=2, cursor=page.cursor)
    assert [record.job_id for record in page.jobs] == ["u1", "f1"]
    assert page.cursor is not None  # a full page: there may be more
    last = await jobs.dead_letters("q", limit=2, cursor=page.cursor)
    assert (last.jobs, last.cursor) == ([], None)
    everything = await jobs.dead_letters("q")
    assert [(r.job_id, r.outcome, r.failure_reason) for r in everything.jobs] == [
        ("f3", "failed", None), ("f2", "failed", "execution_failed"),
        ("u1", "outcome_unknown", None), ("f1", "failed", None)]
    assert everything.cursor is None
    assert (await jobs.dead_letters("nobody")).jobs == []


async def test_interrupted_jobs_are_dead_letters(engine: Engine) -> None:
    dying = engine.runtime()
    await dying.ingest(job("lost", payload={"do": "block"}))
    await engine.lose(dying, await engine.start(dying, "lost"))
    engine.make_recoverable()
    survivor = engine.runtime()
    assert (await survivor.tick()).outcome == "interrupted"
    page = await survivor.dead_letters("q")
    assert [(r.job_id, r.outcome) for r in page.jobs] == [("lost", "interrupted")]


async def test_a_redriven_job_runs_again_as_a_new_attempt_chain(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.ingest(job("hook", payload={"do": "fail_until", "succeed_on": 3},
                          retry=Retry(2, base_delay_ms=0)))
    results = await jobs.drain()
    assert [r.status for r in results] == ["retried", "settled"]
    dead = await jobs.read("hook")
    assert dead is not None and (dead.outcome, dead.attempt) == ("failed", 2)
    calls_before = engine.wake.calls

    now.advance(1_000)
    assert (await jobs.redrive("hook", "redrive-1")).status == "redriven"
    assert engine.wake.calls > calls_before
    record = await jobs.read("hook")
    assert record is not None
    assert (record.state, record.outcome, record.failure_reason, record.attempt,
            record.settled_at, record.due_at) == ("queued", None, None, 1, None, None)
    assert record.history == (
        Attempt(1, "failed", "attempt-1", dead.history[0].started_at,
                dead.history[0].ended_at),
        Attempt(2, "failed", "attempt-2", dead.started_at, dead.settled_at, "redrive-1"))
    assert (await jobs.dead_letters("q")).jobs == []
    assert await jobs.read_queue_head("q") == record
    # A new chain: attempt 1 fails, is retried, and attempt 2 fails for good
    # (the script succeeds on attempt 3, which this policy never reaches).
    results = await jobs.drain()
    assert [(r.status, r.failure_reason) for r in results] == [
        ("retried", "attempt-1"), ("settled", "attempt-2")]
    again = await jobs.read("hook")
    assert again is not None and len(again.history) == 3


async def test_a_redrive_is_replay_safe_by_its_id(engine: Engine) -> None:
    jobs, _ = engine.timed_runtime()
    await jobs.ingest(job("flaky", payload={"do": "fail"}))
    await jobs.tick()
    assert (await jobs.redrive("flaky", "r-1")).status == "redriven"
    replay = await jobs.redrive("flaky", "r-1")
    assert (replay.status, replay.reason) == ("replayed", None)
    await jobs.tick()  # fails again: a dead letter again
    before = await engine.table()
    # The first id replays even now, and changes nothing; a new id redrives.
    assert (await jobs.redrive("flaky", "r-1")).status == "replayed"
    assert await engine.table() == before
    assert (await jobs.redrive("flaky", "r-2")).status == "redriven"
    assert (await jobs.redrive("flaky", "r-1")).status == "replayed"
    record = await jobs.read("flaky")
    assert record is not None
    assert [entry.redrive_id for entry in record.history] == ["r-1", "r-2"]


async def test_redrive_refuses_what_is_not_a_dead_letter_and_says_why(engine: Engine) -> None:
    jobs, _ = engine.timed_runtime()
    await jobs.ingest(job("done", queue="a"))
    await jobs.ingest(job("stopped", queue="b", payload={"do": "cancel"}))
    await jobs.drain()
    await jobs.ingest(job("waiting", queue="c", delay_ms=60_000))
    await jobs.ingest(job("running", queue="d", payload={"do": "block"}))
    task = await engine.start(jobs, "running")
    await jobs.ingest(job("cancelled-then-failed", lane="gone", queue="e"))
    await jobs.cancel("cancelled-then-failed", "c-1")
    await jobs.fail_lane("gone", "lane_gone")
    before = await engine.table()
    answers = {job_id: await jobs.redrive(job_id, "r")
               for job_id in ("done", "stopped", "waiting", "running",
                              "cancelled-then-failed", "missing")}
    assert {job_id: (a.status, a.reason) for job_id, a in answers.items()} == {
        "done": ("refused", "not_dead"),
        "stopped": ("refused", "not_dead"),
        "waiting": ("refused", "not_settled"),
        "running": ("refused", "not_settled"),
        "cancelled-then-failed": ("refused", "cancellation_recorded"),
        "missing": ("not_found", None),
    }
    assert await engine.table() == before
    engine.executor.release("running")
    await task


@pytest.mark.parametrize(("call", "field"), [
    ({"job_id": "", "redrive_id": "r"}, "job_id"),
    ({"job_id": "x", "redrive_id": 7}, "redrive_id"),
])
async def test_bad_redrive_arguments_are_refused_by_name(
        engine: Engine, call: dict[str, object], field: str) -> None:
    jobs, _ = engine.timed_runtime()
    with pytest.raises(InvalidArgument) as raised:
        await jobs.redrive(**call)  # type: ignore[arg-type]
    assert raised.value.field == field


@pytest.mark.parametrize(("limit", "cursor", "field"), [
    (0, None, "limit"), (101, None, "limit"), (True, None, "limit"), ("5", None, "limit"),
    (10, "nonsense", "cursor"), (10, "1.2.3", "cursor"), (10, 5, "cursor"),
    # Beyond what a D1 or Durable Object binding takes (no stored value is).
    (10, "9007199254740992.1", "cursor"), (10, "1.9007199254740992", "cursor"),
    (10, "-9007199254740992.1", "cursor"),
])
async def test_bad_dead_letter_pages_are_refused_by_name(
        engine: Engine, limit: object, cursor: object, field: str) -> None:
    jobs, _ = engine.timed_runtime()
    with pytest.raises(InvalidArgument) as raised:
        await jobs.dead_letters("q", limit=limit, cursor=cursor)  # type: ignore[arg-type]
    assert raised.value.field == field


async def test_a_cursor_at_the_integer_bounds_pages_on_every_store(engine: Engine) -> None:
    """The largest cursor binds as a JS Number on D1 and a Durable Object
    (``+-(2**53 - 1)`` cross as BigInt unless tickwork converts them)."""
    jobs, now = engine.timed_runtime()
    await _settle_all(engine, now, [("f1", "q", "fail")])
    edge = 2**53 - 1
    page = await jobs.dead_letters("q", cursor=f"{edge}.{edge}")
    assert [record.job_id for record in page.jobs] == ["f1"]
    assert (await jobs.dead_letters("q", cursor=f"-{edge}.{edge}")).jobs == []


async def test_a_queues_dead_letters_are_redriven_a_page_at_a_time_under_one_id(
        engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await _settle_all(engine, now, [
        ("f1", "q", "fail"), ("ok", "q", "complete"), ("u1", "q", "unknown"),
        ("f2", "q", "raise"), ("elsewhere", "other", "fail"), ("f3", "q", "fail")])
    calls_before = engine.wake.calls
    first = await jobs.redrive_dead_letters("q", "bulk-1", limit=2)
    assert (first.queue, first.redriven, first.replayed, first.refused) == ("q", 2, 0, 0)
    assert first.cursor is not None  # a full page: there may be more
    assert engine.wake.calls > calls_before
    assert {job_id: (await jobs.read(job_id)).state  # type: ignore[union-attr]
            for job_id in ("f3", "f2", "u1", "f1")} == {
        "f3": "queued", "f2": "queued", "u1": "settled", "f1": "settled"}
    rest = await jobs.redrive_dead_letters("q", "bulk-1", limit=2, cursor=first.cursor)
    assert (rest.redriven, rest.replayed, rest.refused) == (2, 0, 0)
    assert rest.cursor is not None
    last = await jobs.redrive_dead_letters("q", "bulk-1", limit=2, cursor=rest.cursor)
    assert (last.redriven, last.replayed, last.refused, last.cursor) == (0, 0, 0, None)
    assert (await jobs.dead_letters("q")).jobs == []
    other = await jobs.read("elsewhere")
    assert other is not None and other.state == "settled"  # another queue's: left alone
    for job_id in ("f3", "f2", "u1", "f1"):
        record = await jobs.read(job_id)
        assert record is not None and record.history[-1].redrive_id == "bulk-1"


async def test_a_bulk_redrive_sent_again_replays_and_redrives_nothing_twice(
        engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await _settle_all(engine, now, [("f1", "q", "fail"), ("f2", "q", "fail")])
    assert (await jobs.redrive_dead_letters("q", "bulk-1")).redriven == 2
    await jobs.drain()  # both fail again: dead letters again
    before = await engine.table()
    again = await jobs.redrive_dead_letters("q", "bulk-1")
    assert (again.redriven, again.replayed, again.refused, again.cursor) == (0, 2, 0, None)
    assert await engine.table() == before
    # A new id is a new request: both go back.
    assert (await jobs.redrive_dead_letters("q", "bulk-2")).redriven == 2


async def test_a_dead_letter_with_a_recorded_cancellation_is_refused_by_a_bulk_redrive(
        engine: Engine) -> None:
    jobs, _ = engine.timed_runtime()
    await jobs.ingest(job("cancelled-then-failed", lane="gone"))
    await jobs.cancel("cancelled-then-failed", "c-1")
    await jobs.fail_lane("gone", "lane_gone")
    await jobs.ingest(job("plain", payload={"do": "fail"}))
    await jobs.drain()
    result = await jobs.redrive_dead_letters("q", "bulk-1")
    assert (result.redriven, result.replayed, result.refused) == (1, 0, 1)
    refused = await jobs.read("cancelled-then-failed")
    assert refused is not None and refused.state == "settled"


@pytest.mark.parametrize(("call", "field"), [
    ({"queue": "", "redrive_id": "r"}, "queue"),
    ({"queue": "q", "redrive_id": ""}, "redrive_id"),
    ({"queue": "q", "redrive_id": "r", "limit": 0}, "limit"),
    ({"queue": "q", "redrive_id": "r", "limit": 101}, "limit"),
    ({"queue": "q", "redrive_id": "r", "cursor": "nonsense"}, "cursor"),
])
async def test_bad_bulk_redrive_arguments_are_refused_by_name_and_change_nothing(
        engine: Engine, call: dict[str, object], field: str) -> None:
    jobs, now = engine.timed_runtime()
    await _settle_all(engine, now, [("f1", "q", "fail")])
    before = await engine.table()
    with pytest.raises(InvalidArgument) as raised:
        await jobs.redrive_dead_letters(**call)  # type: ignore[arg-type]
    assert raised.value.field == field
    assert await engine.table() == before
