"""Plain (not ``async``) executors work everywhere, and on CPython never
block the event loop (found by a newcomer's walk through the docs: through
``ExecutorRegistry`` a plain executor failed with "object Completed can't be
used in 'await' expression", and a ``time.sleep(3)`` froze ``tickwork
serve``)."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import job
from tickwork import Completed, Failed, OwnerRuntime
from tickwork.executors import ExecutorRegistry
from tickwork.hosts.cpython import open_sqlite3
from tickwork.runtimes.execution import is_async_executor, nonblocking


class Wake:
    def recompute(self) -> None:
        pass


def plain(record: Any, signal: Any) -> Completed | Failed:
    return Failed("nope") if record.job_id.startswith("no") else Completed()


def runtime(path: Path, execute: Any) -> OwnerRuntime:
    return OwnerRuntime(open_sqlite3(path / "jobs.sqlite3"), execute=execute,
                        is_alive=lambda record: False, wake=Wake())


@pytest.mark.parametrize("through_registry", [False, True], ids=["direct", "registry"])
async def test_a_plain_executor_settles_its_jobs(tmp_path: Path, through_registry: bool) -> None:
    if through_registry:
        registry = ExecutorRegistry()
        registry.on_queue("q", plain)
        execute: Any = registry
    else:
        execute = plain
    jobs = runtime(tmp_path, execute)
    jobs.ingest_many([job("ok"), job("no", queue="q2" if not through_registry else "q")])
    results = await jobs.drain()
    assert sorted((r.job_id, r.outcome, r.failure_reason) for r in results) == [
        ("no", "failed", "nope"), ("ok", "completed", None)]


@pytest.mark.parametrize("through_registry", [False, True], ids=["direct", "registry"])
async def test_a_blocking_executor_runs_off_the_event_loop(tmp_path: Path,
                                                           through_registry: bool) -> None:
    threads: list[str] = []

    def blocking(record: Any, signal: Any) -> Completed:
        threads.append(threading.current_thread().name)
        time.sleep(0.3)
        return Completed()

    registry = ExecutorRegistry(fallback=blocking)
    jobs = runtime(tmp_path, registry if through_registry else blocking)
    jobs.ingest(job("slow"))
    turns = 0
    stop = asyncio.Event()

    async def count_turns() -> None:
        nonlocal turns
        while not stop.is_set():
            turns += 1
            await asyncio.sleep(0.01)

    counter = asyncio.create_task(count_turns())
    result = await jobs.tick()
    stop.set()
    await counter
    assert (result.job_id, result.outcome) == ("slow", "completed")
    assert threads and threads[0] != threading.main_thread().name
    assert turns >= 5  # the loop kept turning while the job slept 300 ms


def test_which_executors_are_async() -> None:
    async def coroutine_function(record: Any, signal: Any) -> None:
        pass

    assert is_async_executor(coroutine_function)
    assert is_async_executor(ExecutorRegistry())
    assert not is_async_executor(plain)
    assert nonblocking(coroutine_function) is coroutine_function
    assert nonblocking(plain) is not plain
