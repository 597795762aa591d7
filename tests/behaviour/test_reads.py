"""Reads (a job, a queue's head, the status counts, pending work) and purge, on every store."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from tests.support import job
from tests.support.engine import Engine
from tickwork import InvalidArgument, QueueStatus, Recovery, SchemaError

NO_OUTCOMES = {"completed": 0, "failed": 0, "cancelled": 0, "outcome_unknown": 0,
               "interrupted": 0}


def counts(queued: int = 0, running: int = 0, **outcomes: int) -> tuple[Any, ...]:
    """(queued, running, settled, outcomes) as QueueStatus carries them."""
    return queued, running, sum(outcomes.values()), {**NO_OUTCOMES, **outcomes}


def of(status: QueueStatus) -> tuple[Any, ...]:
    return status.queued, status.running, status.settled, status.outcomes


async def test_counts_follow_every_transition(engine: Engine) -> None:
    runtime = engine.runtime()
    assert await runtime.status() == []
    # A claim whose process died settles interrupted once it is recovered.
    dying = engine.runtime()
    await dying.ingest(job("lost", queue="q", payload={"do": "block"}, recovery=Recovery(0)))
    await engine.lose(dying, await engine.start(dying, "lost"))
    runtime = engine.runtime()
    assert of(await runtime.queue_status("q")) == counts(running=1)
    engine.make_recoverable()
    assert (await runtime.tick()).outcome == "interrupted"

    assert await runtime.ingest_many([
        job("done", queue="q"),
        job("failed", queue="q", payload={"do": "fail"}),
        job("unknown", queue="q", payload={"do": "unknown"}),
        job("cancelled", queue="q"),
        job("refused", queue="r", lane="bad"),
        job("purged", queue="p"),
        job("waiting", queue="w"),
    ]) == ["queued"] * 7
    assert of(await runtime.queue_status("q")) == counts(queued=4, interrupted=1)
    assert (await runtime.cancel("cancelled", "c1")).status == "recorded"
    for _ in range(4):  # the cancelled job first, then done, failed, unknown
        assert (await runtime.tick()).status == "settled"
    assert of(await runtime.queue_status("q")) == counts(
        completed=1, failed=1, cancelled=1, outcome_unknown=1, interrupted=1)

    assert (await runtime.fail_lane("bad", "tenant_gone")).settled == 1
    assert await runtime.purge("p") == 1
    # A running job counts as running; its queue's other jobs wait.
    await runtime.ingest_many([job("blocking", queue="w2", priority=9, payload={"do": "block"}),
                               job("behind", queue="w2")])
    tick = await engine.start(runtime, "blocking")

    everything = await runtime.status()
    # Every queue that has a job, by name; the purged queue has none left.
    assert [status.queue for status in everything] == ["q", "r", "w", "w2"]
    assert {status.queue: of(status) for status in everything} == {
        "q": counts(completed=1, failed=1, cancelled=1, outcome_unknown=1, interrupted=1),
        "r": counts(failed=1),
        "w": counts(queued=1),
        "w2": counts(queued=1, running=1),
    }
    for status in everything:
        assert await runtime.queue_status(status.queue) == status
    assert await runtime.queue_status("p") == QueueStatus("p", 0, 0, 0, NO_OUTCOMES)
    engine.executor.release("blocking")
    assert (await tick).outcome == "completed"
    assert of(await runtime.queue_status("w2")) == counts(queued=1, completed=1)


async def test_queues_sort_by_name_whatever_the_collation(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest_many([job("a", queue="b"), job("b", queue="a"), job("c", queue="a"),
                               job("d", queue="A"), job("e", queue="ä"), job("f", queue="_z")])
    assert [(s.queue, s.queued) for s in await runtime.status()] == [
        ("A", 1), ("_z", 1), ("a", 2), ("b", 1), ("ä", 1)]
    unknown = await runtime.queue_status("B")
    assert unknown == QueueStatus("B", 0, 0, 0, NO_OUTCOMES)
    assert list(unknown.outcomes) == list(NO_OUTCOMES)


@pytest.mark.parametrize("bad", ["", "q" * 257, 7, None, "q\ud800"])
async def test_queue_status_refuses_a_bad_queue_name(engine: Engine, bad: Any) -> None:
    with pytest.raises(InvalidArgument) as caught:
        await engine.runtime().queue_status(bad)
    assert caught.value.field == "queue"


async def test_a_status_is_a_plain_value(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("a"))
    status = await runtime.queue_status("q")
    with pytest.raises(dataclasses.FrozenInstanceError):
        status.queued = 5  # type: ignore[misc]
    assert json.loads(json.dumps(dataclasses.asdict(status))) == {
        "queue": "q", "queued": 1, "running": 0, "settled": 0, "outcomes": NO_OUTCOMES,
        "delayed": 0, "paused": False}
    # Each status owns its outcomes: changing one changes no other status.
    status.outcomes["failed"] = 9  # type: ignore[index]
    assert (await runtime.queue_status("q")).outcomes == NO_OUTCOMES


async def test_reads_validate_their_arguments(engine: Engine) -> None:
    runtime = engine.runtime()
    for call, field in ((runtime.read(""), "job_id"), (runtime.read_queue_head("q" * 300), "queue"),
                        (runtime.purge(""), "queue")):
        with pytest.raises(InvalidArgument) as caught:
            await call
        assert caught.value.field == field


async def test_queue_head_is_running_first_then_priority_then_age(engine: Engine) -> None:
    runtime = engine.runtime()
    assert await runtime.read_queue_head("q") is None
    await runtime.ingest(job("low", priority=1))
    await runtime.ingest(job("high", priority=5))
    await runtime.ingest(job("high-later", priority=5))
    head = await runtime.read_queue_head("q")
    assert head is not None and head.job_id == "high"
    await runtime.ingest(job("urgent", priority=9, payload={"do": "block"}))
    task = await engine.start(runtime, "urgent")
    await runtime.ingest(job("even-more-urgent", priority=99))
    head = await runtime.read_queue_head("q")
    assert head is not None and (head.job_id, head.state) == ("urgent", "running")
    engine.executor.release("urgent")
    await task
    head = await runtime.read_queue_head("q")
    assert head is not None and head.job_id == "even-more-urgent"


async def test_purge_deletes_only_waiting_jobs_of_one_queue(engine: Engine) -> None:
    runtime = engine.runtime()
    await runtime.ingest(job("done"))
    assert (await runtime.tick()).status == "settled"
    await runtime.ingest(job("running", payload={"do": "block"}))
    task = await engine.start(runtime, "running")
    await runtime.ingest(job("waiting-1"))
    await runtime.ingest(job("waiting-2"))
    await runtime.ingest(job("other", queue="other"))
    wakes = engine.wake.calls
    assert await runtime.purge("q") == 2
    assert engine.wake.calls == wakes + 1
    assert await runtime.purge("q") == 0
    assert engine.wake.calls == wakes + 1  # nothing deleted, nothing to wake for
    assert set(await engine.job_states()) == {"done", "running", "other"}
    engine.executor.release("running")
    assert (await task).status == "settled"
    # A purged id is free again: a later ingest is new work.
    assert await runtime.ingest(job("waiting-1")) == "queued"


async def test_has_pending_work(engine: Engine) -> None:
    runtime = engine.runtime()
    assert await runtime.has_pending_work() is False
    await runtime.ingest(job("a", payload={"do": "block"}))
    assert await runtime.has_pending_work() is True
    task = await engine.start(runtime, "a")
    assert await runtime.has_pending_work() is True  # running counts
    engine.executor.release("a")
    await task
    assert await runtime.has_pending_work() is False


async def test_readiness_reads_the_store_and_names_its_schema_version(engine: Engine) -> None:
    from tickwork.stores.owner_schema import SCHEMA_VERSION as OWNER_VERSION
    from tickwork.stores.schema_version import POSTGRES_SCHEMA_VERSION
    from tickwork.stores.schema_version import SCHEMA_VERSION as D1_VERSION

    jobs = engine.runtime()
    expected = (OWNER_VERSION if engine.local
                else POSTGRES_SCHEMA_VERSION if engine.kind == "postgres" else D1_VERSION)
    assert await jobs.check_ready() == expected
    # It reads the store at every call: a schema this package does not know
    # is refused by name.
    await engine.set_schema_version(expected + 1)
    with pytest.raises(SchemaError, match="schema version"):
        await jobs.check_ready()
