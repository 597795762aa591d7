"""``EventBuffer``: a slow hook slows its own delivery, not the engine.

Found by load tests on main: a hook taking 10 ms per event made 300 jobs
settle in 9.5 s instead of 0.13 s under ``tickwork serve``; it now wraps its
``--on-event`` hooks in an ``EventBuffer``.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import ScriptedExecutor, job
from tickwork import InvalidArgument, OwnerRuntime
from tickwork.events import Event
from tickwork.hosts.cpython import EventBuffer, open_sqlite3


class Wake:
    def recompute(self) -> None:
        pass


def event(number: int) -> Event:
    return Event("ingested", f"j{number}", "q", "l", number)


def test_every_event_is_delivered_once_in_order_on_a_thread_of_its_own() -> None:
    seen: list[tuple[str | None, str]] = []
    buffer = EventBuffer(lambda e: seen.append((e.job_id, threading.current_thread().name)))
    for number in range(200):
        buffer(event(number))
    assert buffer.flush(5)
    assert [job_id for job_id, _ in seen] == [f"j{n}" for n in range(200)]
    assert {name for _, name in seen} == {"tickwork-event-hook"}
    assert (buffer.delivered, buffer.dropped) == (200, 0)
    buffer.close()


def test_a_full_buffer_drops_new_events_and_counts_them(caplog: pytest.LogCaptureFixture) -> None:
    gate = threading.Event()
    seen: list[str | None] = []

    def stuck(e: Event) -> None:
        gate.wait(5)
        seen.append(e.job_id)

    buffer = EventBuffer(stuck, capacity=3)
    buffer(event(0))
    deadline = time.monotonic() + 5
    while buffer._events and time.monotonic() < deadline:  # the thread took the first
        time.sleep(0.001)
    for number in range(1, 10):
        buffer(event(number))
    assert buffer.dropped == 6
    assert "is full (3 events)" in caplog.text
    gate.set()
    assert buffer.flush(5)
    assert seen == ["j0", "j1", "j2", "j3"]
    buffer.close()


def test_close_delivers_what_is_left_then_refuses() -> None:
    seen: list[str | None] = []
    buffer = EventBuffer(lambda e: (time.sleep(0.001), seen.append(e.job_id)))
    for number in range(20):
        buffer(event(number))
    buffer.close()
    assert len(seen) == 20
    buffer(event(99))
    assert buffer.dropped == 1 and len(seen) == 20


def test_a_failing_hook_is_contained_on_the_thread(caplog: pytest.LogCaptureFixture) -> None:
    def broken(e: Event) -> None:
        raise SystemExit(3)

    buffer = EventBuffer(broken)
    buffer(event(0))
    assert buffer.flush(5)
    assert buffer.delivered == 1 and "failed on a ingested event" in caplog.text
    buffer.close()


@pytest.mark.parametrize(("hook", "capacity", "problem"), [
    (3, 10, "hook"), (print, 0, "capacity"), (print, True, "capacity")])
def test_bad_arguments_are_refused_by_name(hook: Any, capacity: Any, problem: str) -> None:
    with pytest.raises(InvalidArgument) as refused:
        EventBuffer(hook, capacity=capacity)
    assert refused.value.field == problem


async def test_a_10_ms_hook_does_not_slow_the_ticks(tmp_path: Path) -> None:
    """300 jobs drained with a hook that sleeps 10 ms per event: called
    directly it costs 3 events x 300 x 10 ms = 9 s of the drain; buffered,
    the hook catches up on its own (figures: python -m bench.slow_hook)."""
    delivered: list[str] = []

    def slow(e: Event) -> None:
        time.sleep(0.01)
        delivered.append(e.kind)

    buffer = EventBuffer(slow)
    runtime = OwnerRuntime(open_sqlite3(tmp_path / "jobs.sqlite3"), execute=ScriptedExecutor(),
                           is_alive=lambda record: False, wake=Wake(), on_event=buffer)
    runtime.ingest_many([job(f"j{n}", queue=f"q{n % 10}") for n in range(100)])
    runtime.ingest_many([job(f"k{n}", queue=f"q{n % 10}") for n in range(100)])
    runtime.ingest_many([job(f"m{n}", queue=f"q{n % 10}") for n in range(100)])
    results = await runtime.drain()
    assert len(results) == 300
    # The drain did not wait for the hook: it ended with most of the 900
    # events (claimed and settled per job, and the ingests) still to deliver.
    assert buffer.delivered < 600, buffer.delivered
    assert buffer.flush(30)
    assert delivered.count("settled") == 300 and buffer.dropped == 0
    buffer.close()
