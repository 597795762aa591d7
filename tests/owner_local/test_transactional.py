"""Behaviour 9: the transactional projection inside a host transaction."""

from __future__ import annotations

import asyncio

import pytest

from tests.support import Harness, job
from tickwork import Failed, IngestConflict, TickResult


class HostRollback(Exception):
    pass


def domain_table(harness: Harness) -> None:
    harness.host_execute("CREATE TABLE IF NOT EXISTS orders (id TEXT PRIMARY KEY)")


def orders(harness: Harness) -> list[str]:
    return [row[0] for row in harness.host_query("SELECT id FROM orders ORDER BY id")]


def test_domain_write_and_job_commit_together(harness: Harness) -> None:
    domain_table(harness)
    runtime = harness.runtime()

    def accept() -> str:
        harness.host_execute("INSERT INTO orders (id) VALUES ('o1')")
        return runtime.transactional.enqueue(job("ship-o1"))

    assert harness.host_transaction(accept) == "queued"
    assert orders(harness) == ["o1"]
    assert runtime.read("ship-o1") is not None


def test_domain_write_and_job_roll_back_together(harness: Harness) -> None:
    domain_table(harness)
    runtime = harness.runtime()

    def accept_then_fail() -> None:
        harness.host_execute("INSERT INTO orders (id) VALUES ('o1')")
        runtime.transactional.enqueue(job("ship-o1"))
        head = runtime.transactional.read_queue_head("q")
        assert head is not None and head.job_id == "ship-o1"  # visible inside
        raise HostRollback

    with pytest.raises(HostRollback):
        harness.host_transaction(accept_then_fail)
    assert orders(harness) == []
    assert runtime.read("ship-o1") is None


def test_conflict_inside_host_transaction_propagates(harness: Harness) -> None:
    domain_table(harness)
    runtime = harness.runtime()
    runtime.ingest(job("ship-o1", payload={"v": 1}))

    def accept() -> None:
        harness.host_execute("INSERT INTO orders (id) VALUES ('o1')")
        runtime.transactional.enqueue(job("ship-o1", payload={"v": 2}))

    with pytest.raises(IngestConflict):
        harness.host_transaction(accept)
    assert orders(harness) == []
    record = runtime.read("ship-o1")
    assert record is not None and record.payload == {"v": 1}


async def test_cancellation_intent_commits_with_the_host(harness: Harness) -> None:
    domain_table(harness)
    runtime = harness.runtime()
    runtime.ingest(job("a"))

    def cancel_and_fail() -> None:
        harness.host_execute("INSERT INTO orders (id) VALUES ('o1')")
        result = runtime.transactional.cancel("a", "c1")
        assert result.status == "recorded"
        raise HostRollback

    with pytest.raises(HostRollback):
        harness.host_transaction(cancel_and_fail)
    record = runtime.read("a")
    assert record is not None and record.cancellation_id is None

    def cancel() -> str:
        return runtime.transactional.cancel("a", "c1").status

    assert harness.host_transaction(cancel) == "recorded"
    assert (await runtime.tick()).outcome == "cancelled"


async def test_transactional_cancel_of_a_running_job_aborts_after_commit(
    harness: Harness,
) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("a", payload={"do": "block"}))
    tick = asyncio.create_task(runtime.tick())
    await asyncio.sleep(0.01)

    def cancel() -> str:
        return runtime.transactional.cancel("a", "c1").status

    assert harness.host_transaction(cancel) == "recorded"
    assert (await tick).outcome == "cancelled"


async def test_rolled_back_cancellation_does_not_abort(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("a", payload={"do": "block"}))
    tick = asyncio.create_task(runtime.tick())
    await asyncio.sleep(0.01)

    def cancel_and_fail() -> None:
        runtime.transactional.cancel("a", "c1")
        raise HostRollback

    with pytest.raises(HostRollback):
        harness.host_transaction(cancel_and_fail)
    await asyncio.sleep(0.01)
    assert not harness.executor.signals["a"].aborted
    harness.executor.release("a")
    assert (await tick).outcome == "completed"


async def test_read_latest_settled_job(harness: Harness) -> None:
    clock = iter(range(1_000, 10_000, 10))
    runtime = harness.runtime(clock=lambda: next(clock))
    assert runtime.transactional.read_latest_settled_job("q") is None
    runtime.ingest(job("first", queue="q"))
    runtime.ingest(job("second", queue="q"))
    runtime.ingest(job("elsewhere", queue="other", priority=-1))
    await runtime.tick()
    await runtime.tick()
    await runtime.tick()
    latest = harness.host_transaction(lambda: runtime.transactional.read_latest_settled_job("q"))
    assert latest is not None and latest.job_id == "second"


async def test_transactional_cancellation_racing_the_executors_return(harness: Harness) -> None:
    """The executor has already returned a failure when the host records the
    cancellation; the settlement that follows is still cancelled."""
    runtime = harness.runtime()
    runtime.ingest(job("a", payload={"do": "block"}))
    tick = asyncio.create_task(runtime.tick())
    await asyncio.sleep(0.01)
    assert harness.executor.started == ["a"]
    harness.executor.release("a", Failed("boom"))

    def cancel() -> str:
        return runtime.transactional.cancel("a", "c1").status

    assert harness.host_transaction(cancel) == "recorded"
    assert await tick == TickResult("settled", job_id="a", outcome="cancelled")
