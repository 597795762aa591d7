"""Events of what only the owner-local runtime has: a transition that rolls
back (a projector that raises, the host's own transaction) reports nothing,
and the concurrent lane's ticker reports like the serial one."""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

import pytest

from tests.support import Harness, job
from tickwork import InvalidArgument, QueueTransition
from tickwork.events import Event


class ProjectorError(Exception):
    pass


class HostRollback(Exception):
    pass


def failing_when(flag: dict[str, bool]) -> Any:
    def project(transition: QueueTransition) -> None:
        if flag["fail"]:
            raise ProjectorError("projection refused")

    return project


@pytest.mark.parametrize("operation", ["ingest", "claim", "settle", "cancel", "fail_lane",
                                       "purge", "cancelled_settle"])
async def test_a_transition_a_projector_rolls_back_reports_nothing(
    harness: Harness, operation: str
) -> None:
    events: list[Event] = []
    flag = {"fail": False}
    runtime = harness.runtime(project=failing_when(flag), on_event=events.append)
    runtime.ingest(job("a", queue="q", lane="l", payload={"do": "block"}))
    runtime.ingest(job("b", queue="q2", lane="l"))
    tick = None
    if operation == "settle":
        tick = asyncio.create_task(runtime.tick())
        await asyncio.sleep(0.01)
    if operation == "cancelled_settle":
        runtime.cancel("b", "c1")
    before = list(events)
    flag["fail"] = True
    with pytest.raises(ProjectorError):
        if operation == "ingest":
            runtime.ingest(job("c", queue="q3"))
        elif operation == "claim":
            await runtime.tick()
        elif operation == "settle":
            assert tick is not None
            harness.executor.release("a")
            await tick
        elif operation == "cancel":
            runtime.cancel("a", "c9")
        elif operation == "fail_lane":
            runtime.fail_lane("l", "refused")
        elif operation == "purge":
            runtime.purge("q2")
        elif operation == "cancelled_settle":
            await runtime.tick()
    assert events == before


async def test_transactional_changes_are_reported_once_the_host_committed(
    harness: Harness,
) -> None:
    events: list[Event] = []
    runtime = harness.runtime(on_event=events.append)

    def enqueue() -> str:
        status = runtime.transactional.enqueue(job("a"))
        assert events == []  # the host's transaction is still open
        return status

    assert harness.host_transaction(enqueue) == "queued"
    await asyncio.sleep(0)
    assert [(event.kind, event.job_id) for event in events] == [("ingested", "a")]

    def cancel() -> str:
        return runtime.transactional.cancel("a", "c1").status

    assert harness.host_transaction(cancel) == "recorded"
    await asyncio.sleep(0)
    assert [event.kind for event in events] == ["ingested", "cancelled"]


async def test_transactional_changes_the_host_rolls_back_are_not_reported(
    harness: Harness,
) -> None:
    events: list[Event] = []
    runtime = harness.runtime(on_event=events.append)
    runtime.ingest(job("kept"))
    events.clear()

    def enqueue_then_fail() -> None:
        runtime.transactional.enqueue(job("a"))
        runtime.transactional.cancel("kept", "c1")
        raise HostRollback

    with pytest.raises(HostRollback):
        harness.host_transaction(enqueue_then_fail)
    await asyncio.sleep(0.01)
    assert events == []
    assert runtime.read("a") is None


@pytest.mark.skipif(sys.platform == "emscripten",
                    reason="the Pyodide tier calls every test from its running event loop")
def test_without_an_event_loop_a_transactional_change_is_not_reported(
    harness: Harness,
) -> None:
    events: list[Event] = []
    warnings: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            warnings.append(record)

    runtime = harness.runtime(on_event=events.append)
    handler = Collect(level=logging.WARNING)
    logging.getLogger("tickwork.events").addHandler(handler)
    try:
        assert harness.host_transaction(lambda: runtime.transactional.enqueue(job("a"))) == (
            "queued")
    finally:
        logging.getLogger("tickwork.events").removeHandler(handler)
    assert events == []
    assert [record.levelno for record in warnings] == [logging.WARNING]
    assert "not reported" in warnings[0].getMessage()


async def test_the_concurrent_lanes_ticker_reports_its_transitions(harness: Harness) -> None:
    events: list[Event] = []
    runtime = harness.concurrent_runtime("fast", on_event=events.append)
    runtime.ingest(job("f", queue="qf", lane="fast"))
    runtime.ingest(job("s", queue="qs", lane="slow"))
    assert (await runtime.tick_concurrent()).job_id == "f"
    assert (await runtime.tick()).job_id == "s"
    assert [(event.kind, event.job_id, event.lane) for event in events] == [
        ("ingested", "f", "fast"), ("ingested", "s", "slow"),
        ("claimed", "f", "fast"), ("settled", "f", "fast"),
        ("claimed", "s", "slow"), ("settled", "s", "slow")]


def test_a_hook_that_is_not_callable_is_refused(harness: Harness) -> None:
    with pytest.raises(InvalidArgument, match="on_event"):
        harness.runtime(on_event="print")
