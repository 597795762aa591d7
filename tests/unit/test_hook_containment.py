"""Hooks never change the engine's control flow, and a failing hook's log is
rate-limited (found by abuse tests on main: a hook raising CancelledError
on ``claimed`` left jobs settled ``interrupted`` without running them; one
raising SystemExit on ``settled`` killed ``tickwork serve``; a raising hook
logged a full traceback per event)."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from typing import Any

import pytest

from tests.support import ScriptedExecutor, job
from tickwork import OwnerRuntime, events
from tickwork.events import Event, emit
from tickwork.stores import Sqlite3Database

EVENT = Event("settled", "a", "q", "l", 0, outcome="completed")


@pytest.fixture(autouse=True)
def fresh_failure_log(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(events, "_hook_failures", OrderedDict(), raising=False)


@pytest.mark.parametrize("raised", [RuntimeError("boom"), asyncio.CancelledError(),
                                    SystemExit(3), GeneratorExit()], ids=type)
def test_whatever_a_hook_raises_is_contained(raised: BaseException,
                                              caplog: pytest.LogCaptureFixture) -> None:
    def hook(event: Event) -> None:
        raise raised

    emit(hook, EVENT)  # does not raise
    assert "failed on a settled event of job 'a'" in caplog.text


def test_keyboard_interrupt_still_stops_the_process() -> None:
    def hook(event: Event) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        emit(hook, EVENT)


def test_a_failing_hook_is_logged_once_a_minute_with_a_count(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(events.time, "monotonic", lambda: clock[0])

    def hook(event: Event) -> None:
        raise ValueError("nope")

    caplog.set_level(logging.ERROR, "tickwork.events")
    for _ in range(900):
        emit(hook, EVENT)
    assert len(caplog.records) == 1
    clock[0] += 61
    emit(hook, EVENT)
    assert len(caplog.records) == 2
    assert "(899 more failures of this hook not logged)" in caplog.records[1].getMessage()
    assert caplog.records[1].exc_info is not None  # the traceback is still there


async def test_a_hook_raising_cancelled_error_on_claims_changes_no_outcome(tmp_path: Any) -> None:
    import sqlite3

    from tickwork.hosts.cpython import open_sqlite3

    open_sqlite3(tmp_path / "jobs.sqlite3").connection.close()

    def hook(event: Event) -> None:
        if event.kind == "claimed":
            raise asyncio.CancelledError

    class Wake:
        def recompute(self) -> None:
            pass

    runtime = OwnerRuntime(
        Sqlite3Database(sqlite3.connect(tmp_path / "jobs.sqlite3", isolation_level=None)),
        execute=ScriptedExecutor(), is_alive=lambda record: False, wake=Wake(),
        on_event=hook)
    for name in ("a", "b", "c"):
        runtime.ingest(job(name, queue=f"q-{name}"))
    results = await runtime.drain()
    assert sorted((r.job_id, r.outcome) for r in results) == [
        ("a", "completed"), ("b", "completed"), ("c", "completed")]
