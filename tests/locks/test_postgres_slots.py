"""PostgreSQL only: a slot's release racing another caller's acquisition.

Under READ COMMITTED an ``INSERT ... ON CONFLICT DO UPDATE`` re-checks its
WHERE on the newest version of the lock row, but its "slot already done?"
sub-query reads the statement's older snapshot. Without the per-name
advisory lock, a caller whose statement started before a slot run's release
committed would find the row released, miss the slot record and run the
slot a second time. This test builds exactly that interleaving.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.locks.conftest import LockHarness
from tests.locks.test_job_lock import TTL, idle
from tickwork.locks import LockLease, LockRun

WAITING = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND wait_event_type = 'Lock'
"""


@pytest.mark.parametrize("locks", ["postgres"], indirect=True)
async def test_an_acquisition_racing_a_slot_release_never_reruns_the_slot(
    locks: LockHarness,
) -> None:
    pool = locks.store()

    async def until_waiting(expected: int) -> None:
        for _ in range(1000):
            if (await locks.query(WAITING))[0][0] >= expected:
                return
            await asyncio.sleep(0.005)
        raise AssertionError(f"never saw {expected} waiting statements")

    first_started, first_done = asyncio.Event(), asyncio.Event()

    async def first_job(lease: LockLease) -> None:
        first_started.set()
        await first_done.wait()

    first = asyncio.create_task(locks.lock().run("cron", TTL, first_job, slot="02:30"))
    await asyncio.wait_for(first_started.wait(), 5)
    second: asyncio.Task[LockRun[Any]] | None = None
    async with pool.connection() as blocker, blocker.transaction():
        # Hold the lock row so the first run's release has to queue for it.
        await blocker.execute("SELECT 1 FROM tickwork_job_locks WHERE name = 'cron' FOR UPDATE")
        first_done.set()
        await until_waiting(1)  # the first run's release, queued on the row
        second = asyncio.create_task(locks.lock().run("cron", TTL, idle, slot="02:30"))
        await until_waiting(2)  # the second caller, queued too
    # The blocker committed: the release goes first, then the acquisition.
    first_run = await first
    second_run = await second
    assert first_run.ran and first_run.lost is None
    assert not second_run.ran and second_run.reason == "slot_done"
    rows = await locks.query("SELECT slot, fence FROM tickwork_job_locks_slots")
    assert rows == [("02:30", 1)]
