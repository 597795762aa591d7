"""The host's pieces in process: owner files, the data-dir lock, tick loops,
``--executors`` loading and the progress line."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.support import serve_executors as executors
from tickwork import Completed, Job, JobRecord, TickResult
from tickwork.executors import ExecutorRegistry
from tickwork.hosts.cpython.owners import (
    HASH_DIGITS,
    DataDirLock,
    HostError,
    OwnerDirectory,
    owner_file_name,
)
from tickwork.hosts.cpython.progress import Progress
from tickwork.hosts.cpython.serve import load_executor


@pytest.mark.parametrize("key", ["tenant-1", "Tenant-1", "a/b", "../..", "x" * 256, "é🙂",
                                 "a b\x00c", ".", "-"])
def test_owner_file_names_are_safe_and_distinct(key: str) -> None:
    name = owner_file_name(key)
    assert "/" not in name and "\x00" not in name and name != ".."
    assert name.endswith(".sqlite3") and len(name.encode()) < 100
    assert all(char.isascii() for char in name)
    slug, digest = name.removesuffix(".sqlite3").rsplit("-", 1)
    assert len(digest) == HASH_DIGITS and slug
    assert owner_file_name(key) == name  # stable


def test_keys_that_slug_alike_get_different_files() -> None:
    names = {owner_file_name(key) for key in ("a/b", "a_b", "a?b", "A/b", "a/b ")}
    assert len(names) == 5


def test_the_data_dir_lock_is_exclusive(tmp_path: Path) -> None:
    first, second = DataDirLock(tmp_path), DataDirLock(tmp_path)
    first.acquire()
    try:
        with pytest.raises(HostError, match="in use by pid"):
            second.acquire()
    finally:
        first.release()
    second.acquire()  # free again once released
    second.release()


async def complete(job: JobRecord, signal: Any) -> Completed:
    return Completed()


async def test_a_file_serves_only_its_own_key(tmp_path: Path) -> None:
    store = OwnerDirectory(tmp_path, complete)
    await store.service("mine").ingest([Job("a", "q", "q", 0, None)])
    await store.close(1.0)
    # Someone renames another owner's file over ours: it is refused, not served.
    (tmp_path / "owners" / owner_file_name("mine")).rename(
        tmp_path / "owners" / owner_file_name("theirs"))
    store = OwnerDirectory(tmp_path, complete)
    with pytest.raises(HostError, match="belongs to owner 'mine'"):
        await store.service("theirs").read("a")
    assert store.recover() == []  # the scan skips the misnamed file too
    await store.close(1.0)


async def test_tick_loops_run_until_idle_and_restart_on_wake(tmp_path: Path) -> None:
    progress = Progress()
    store = OwnerDirectory(tmp_path, complete, progress=progress)
    service = store.service("loop")
    await service.ingest([Job(f"j{n}", "q", "q", 0, None) for n in range(5)])
    for _ in range(300):
        # The loop stops after the tick that finds nothing left (one more
        # than the last job's), so wait for both.
        if progress.settled == 5 and store.running_loops() == 0:
            break
        await asyncio.sleep(0.01)
    assert progress.outcomes["completed"] == 5
    assert store.running_loops() == 0
    await service.ingest([Job("late", "q", "q", 0, None)])
    for _ in range(100):
        record = await service.read("late")
        if record is not None and record.state == "settled":
            break
        await asyncio.sleep(0.01)
    assert record is not None and record.outcome == "completed"
    await store.close(1.0)


async def test_idle_owners_are_closed_beyond_the_limit(tmp_path: Path) -> None:
    store = OwnerDirectory(tmp_path, complete, max_open=2)
    for key in ("a", "b", "c", "d"):
        await store.service(key).ingest([Job("x", "q", "q", 0, None)])
        for _ in range(100):
            if store.running_loops() == 0:
                break
            await asyncio.sleep(0.01)
    assert len(store._open) <= 3
    record = await store.service("a").read("x")  # reopened on demand
    assert record is not None and record.outcome == "completed"
    await store.close(1.0)


async def _settled(service: Any, job_id: str, timeout_s: float = 5.0) -> JobRecord:
    for _ in range(int(timeout_s / 0.01)):
        record = await service.read(job_id)
        if record is not None and record.state == "settled":
            return record  # type: ignore[no-any-return]
        await asyncio.sleep(0.01)
    raise AssertionError(f"{job_id} did not settle")


async def test_a_delayed_job_runs_when_due_even_after_its_idle_owner_was_closed(
        tmp_path: Path) -> None:
    """One timer per owner, held by the directory: the owner is closed while
    its job waits (the store is full of others), and is opened and ticked
    again when the timer fires."""
    store = OwnerDirectory(tmp_path, complete, max_open=1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await store.service("waits").ingest([Job("later", "q", "q", 0, None, delay_ms=400)])
    assert "waits" in store._due_timers
    await store.service("other").ingest([Job("now", "q", "q", 0, None)])  # closes "waits"
    await _settled(store.service("other"), "now")
    for _ in range(300):
        if "waits" not in store._due_timers and store.running_loops() == 0:
            break
        await asyncio.sleep(0.01)
    record = await _settled(store.service("waits"), "later")
    assert record.outcome == "completed"
    assert record.started_at is not None and record.started_at >= record.enqueued_at + 400
    assert loop.time() - started >= 0.35
    await store.close(1.0)


async def test_a_restart_arms_the_timer_of_an_owner_whose_jobs_only_wait(
        tmp_path: Path) -> None:
    store = OwnerDirectory(tmp_path, complete)
    await store.service("waits").ingest([Job("later", "q", "q", 0, None, delay_ms=300)])
    await store.close(1.0)
    store = OwnerDirectory(tmp_path, complete)
    assert store.recover() == []  # nothing due now: no tick loop, one timer
    assert list(store._due_timers) == ["waits"]
    assert "waits" not in store._open
    assert (await _settled(store.service("waits"), "later")).outcome == "completed"
    await store.close(1.0)


async def test_a_creation_that_never_committed_is_skipped(tmp_path: Path) -> None:
    owners = tmp_path / "owners"
    owners.mkdir()
    sqlite3.connect(owners / "stray-0000000000000000.sqlite3").execute(
        "PRAGMA journal_mode = WAL").close()
    store = OwnerDirectory(tmp_path, complete)
    assert store.recover() == []
    await store.close(1.0)


def test_load_executor_forms() -> None:
    assert load_executor("tests.support.serve_executors:registry") is executors.registry
    assert load_executor("tests.support.serve_executors:make_registry") is executors.registry
    assert load_executor("tests.support.serve_executors:complete") is executors.complete
    assert isinstance(load_executor("tickwork.hosts.cpython.examples:example_registry"),
                      ExecutorRegistry)
    for spec, message in (("x", "MODULE:ATTR"), (":a", "MODULE:ATTR"),
                          ("tests.support.serve_executors:TYPE_CHECKING_NOPE", "has no"),
                          ("tests.support.serve_executors:__name__", "not an ExecutorRegistry")):
        with pytest.raises(HostError, match=message):
            load_executor(spec)


def test_progress_summary_only_when_something_changed() -> None:
    now = [100.0]
    progress = Progress(clock=lambda: now[0])
    assert progress.summary() is None
    progress.started_job()
    progress.record(TickResult("settled", "a", "completed"))
    progress.record(TickResult("settled", "b", "failed", "boom"))
    progress.record(TickResult("requeued", "c"))
    progress.record(TickResult("requeued", "d", reason="rate_limited"))
    progress.record(TickResult("idle"))
    now[0] += 2
    assert progress.summary() == ("tickwork serve: 2 settled (completed 1, failed 1), "
                                  "1 recovered, 1 rate-limited | 1.0/s | 1 running")
    assert progress.summary() is None
    progress.finished_job()
    assert progress.summary() is None  # a job finishing is counted when it settles
