"""JobLock on every store (sqlite3, PostgreSQL, D1 in both SDK shapes).

Most tests override the database clock with ``locks.now`` (still applied in
SQL) so expiry is exercised without waiting; the tests named "real database
time" use the database's own clock and short TTLs.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.locks.conftest import LockHarness
from tickwork.leases import TimerHandle
from tickwork.locks import JobLock, LockLease, LockRun, table_ddl
from tickwork.model.errors import InvalidArgument, SchemaError
from tickwork.model.jobs import MAX_SAFE_INTEGER

TTL = 60_000
HOURS_AHEAD_MS = 3 * 3600 * 1000


class Boom(Exception):
    pass


async def idle(lease: LockLease) -> str:
    return "ran"


async def until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Let the loop run until ``predicate()`` holds; False on timeout."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True


# ---------------------------------------------------------------- contention


async def contend_in_tasks(locks: LockHarness, n: int, *, hold: bool,
                           slot: str | None = None) -> tuple[list[LockRun[Any]], int]:
    """``n`` instances call ``run`` at once on one event loop (PostgreSQL: up
    to 24 pooled connections; D1: every request in flight at once)."""
    skipped = 0
    calls = 0

    async def job(lease: LockLease) -> int:
        nonlocal calls
        calls += 1
        if hold:  # keep the lock until every other caller has given up
            await until(lambda: skipped >= n - 1)
        return lease.fence

    async def one(job_lock: JobLock) -> LockRun[Any]:
        nonlocal skipped
        run = await job_lock.run("nightly", TTL, job, slot=slot)
        skipped += not run.ran
        return run

    instances = [locks.lock(db_time=True) for _ in range(n)]
    runs = await asyncio.gather(*(one(instance) for instance in instances))
    return list(runs), calls


def contend_in_threads(locks: LockHarness, n: int, *, hold: bool,
                       slot: str | None = None) -> tuple[list[LockRun[Any]], int]:
    """``n`` threads, each with its own connection to the file and its own
    event loop, start together: real contention on SQLite's locks."""
    assert locks.sqlite_path is not None
    barrier = threading.Barrier(n)
    guard = threading.Lock()
    skipped = [0]
    calls = [0]
    runs: list[Any] = [None] * n
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        conn = sqlite3.connect(locks.sqlite_path, isolation_level=None, timeout=30)
        try:
            job_lock = JobLock(conn, on_info=locks.notes.info.append,
                               on_error=locks.notes.errors.append)

            async def job(lease: LockLease) -> int:
                with guard:
                    calls[0] += 1
                if hold:
                    deadline = time.monotonic() + 5
                    while skipped[0] < n - 1 and time.monotonic() < deadline:
                        await asyncio.sleep(0.005)
                return lease.fence

            barrier.wait()
            run = asyncio.run(job_lock.run("nightly", TTL, job, slot=slot))
            with guard:
                skipped[0] += not run.ran
            runs[index] = run
        except BaseException as error:
            errors.append(error)
        finally:
            conn.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    return runs, calls[0]


async def contend(locks: LockHarness, n: int, *, hold: bool,
                  slot: str | None = None) -> tuple[list[LockRun[Any]], int]:
    if locks.kind == "sqlite3":
        return await asyncio.to_thread(contend_in_threads, locks, n, hold=hold, slot=slot)
    return await contend_in_tasks(locks, n, hold=hold, slot=slot)


async def test_twenty_concurrent_callers_exactly_one_runs(locks: LockHarness) -> None:
    runs, calls = await contend(locks, 20, hold=True)
    assert calls == 1
    assert sum(run.ran for run in runs) == 1
    winner = next(run for run in runs if run.ran)
    assert winner.result == winner.fence == 1
    assert {run.reason for run in runs if not run.ran} == {"held"}
    assert all(run.result is None and run.fence is None for run in runs if not run.ran)
    assert len(locks.notes.info) == 19
    assert all("held by another instance" in message for message in locks.notes.info)
    assert locks.notes.errors == []
    assert await locks.lock_row("nightly") == (None, 1)  # released, fence kept


# -------------------------------------------------------------------- expiry


async def test_expired_lock_is_taken_over_by_database_time(locks: LockHarness) -> None:
    holder, rival = locks.lock(), locks.lock()
    attempts: list[LockRun[Any]] = []

    async def job(lease: LockLease) -> int:
        locks.now.advance(TTL - 1)  # one ms before expiry (database clock)
        attempts.append(await rival.run("job", TTL, idle))
        locks.now.advance(1)  # expired
        attempts.append(await rival.run("job", TTL, idle))
        return lease.fence

    run = await holder.run("job", TTL, job)
    early, late = attempts
    assert not early.ran and early.reason == "held"
    assert late.ran and late.fence == run.fence + 1
    # The old holder's release found the lock gone to another holder.
    assert run.ran and run.lost == "lease_lost"
    assert any("no longer held at release" in message for message in locks.notes.errors)


async def test_expiry_by_real_database_time(locks: LockHarness) -> None:
    ttl = 400
    holder, rival = locks.lock(db_time=True), locks.lock(db_time=True)
    attempts: list[bool] = []

    async def job(lease: LockLease) -> str | None:
        attempts.append((await rival.run("job", ttl, idle)).ran)
        await asyncio.sleep(0.6)  # past the TTL, no renewal
        attempts.append((await rival.run("job", ttl, idle)).ran)
        return lease.signal.reason

    run = await holder.run("job", ttl, job)
    assert attempts == [False, True]
    # The local watchdog told the job its lease ran out.
    assert run.result == "lease_expired" and run.lost == "lease_expired"


class ClockAhead:
    """A lease clock (``tickwork.leases.Clock``) hours ahead of the loop's."""

    def __init__(self, ahead_ms: int) -> None:
        self.ahead_ms = ahead_ms

    def now_ms(self) -> float:
        return asyncio.get_running_loop().time() * 1000 + self.ahead_ms

    def call_later(self, delay_ms: float, callback: Callable[[], None]) -> TimerHandle:
        return asyncio.get_running_loop().call_later(max(0.0, delay_ms) / 1000, callback)


async def test_a_caller_whose_clock_is_hours_ahead_cannot_steal_a_live_lock(
    locks: LockHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    holder = locks.lock(db_time=True)
    skewed = locks.lock(db_time=True, clock=ClockAhead(HOURS_AHEAD_MS))

    async def job(lease: LockLease) -> LockRun[Any]:
        real_time, real_time_ns = time.time, time.time_ns
        with monkeypatch.context() as patch:
            # The rival's wall clock is three hours ahead: were expiry judged
            # by it, the holder's 60 s lease would look long expired.
            patch.setattr(time, "time", lambda: real_time() + HOURS_AHEAD_MS / 1000)
            patch.setattr(time, "time_ns", lambda: real_time_ns() + HOURS_AHEAD_MS * 10**6)
            return await skewed.run("job", TTL, idle)

    run = await holder.run("job", TTL, job)
    assert run.result is not None
    assert not run.result.ran and run.result.reason == "held"
    assert run.lost is None and locks.notes.errors == []
    # And once released, the skewed caller takes it like anyone else.
    assert (await skewed.run("job", TTL, idle)).fence == run.fence + 1


# ------------------------------------------------------------------- release


async def test_late_release_of_an_expired_holder_leaves_the_successor_in_place(
    locks: LockHarness,
) -> None:
    first, second, third = locks.lock(), locks.lock(), locks.lock()
    second_started = asyncio.Event()
    second_may_finish = asyncio.Event()
    tasks: list[asyncio.Task[LockRun[Any]]] = []

    async def second_job(lease: LockLease) -> int:
        second_started.set()
        await second_may_finish.wait()
        return lease.fence

    async def first_job(lease: LockLease) -> int:
        locks.now.advance(TTL)  # the first holder's lease has expired
        tasks.append(asyncio.create_task(second.run("job", TTL, second_job)))
        await asyncio.wait_for(second_started.wait(), 5)
        return lease.fence  # ... and the first holder releases late, here

    first_run = await first.run("job", TTL, first_job)
    row = await locks.lock_row("job")
    assert row is not None and row[0] is not None and row[1] == first_run.fence + 1
    blocked = await third.run("job", TTL, idle)
    assert not blocked.ran and blocked.reason == "held"

    second_may_finish.set()
    second_run = await tasks[0]
    assert second_run.ran and second_run.fence == first_run.fence + 1
    assert second_run.lost is None
    assert first_run.lost == "lease_lost"
    assert await locks.lock_row("job") == (None, first_run.fence + 1)


async def test_fn_raising_releases_the_lock_and_reraises_the_same_error(
    locks: LockHarness,
) -> None:
    boom = Boom("the job failed")

    async def failing(lease: LockLease) -> None:
        raise boom

    with pytest.raises(Boom) as caught:
        await locks.lock().run("job", TTL, failing)
    assert caught.value is boom
    row = await locks.lock_row("job")
    assert row == (None, 1)
    # Same database time, so only a release can have freed it.
    again = await locks.lock().run("job", TTL, idle)
    assert again.ran and again.fence == 2
    assert locks.notes.errors == []


async def test_a_failing_release_calls_on_error_and_does_not_raise(locks: LockHarness) -> None:
    async def job(lease: LockLease) -> str:
        # The store fails under the release: the lock table is gone.
        await locks.query("ALTER TABLE tickwork_job_locks RENAME TO tickwork_job_locks_away")
        return "work done"

    run = await locks.lock().run("job", TTL, job)
    assert run.ran and run.result == "work done" and run.fence == 1
    assert len(locks.notes.errors) == 1
    assert "release failed" in locks.notes.errors[0]
    assert "'job'" in locks.notes.errors[0]

    await locks.query("ALTER TABLE tickwork_job_locks_away RENAME TO tickwork_job_locks")
    # Not released: the lock stays held until its TTL runs out.
    row = await locks.lock_row("job")
    assert row is not None and row[0] is not None and row[1] == 1
    assert not (await locks.lock().run("job", TTL, idle)).ran
    locks.now.advance(TTL)
    assert (await locks.lock().run("job", TTL, idle)).fence == 2


async def test_a_cancelled_run_aborts_its_signal_and_releases(locks: LockHarness) -> None:
    started = asyncio.Event()
    leases: list[LockLease] = []

    async def forever(lease: LockLease) -> None:
        leases.append(lease)
        started.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(locks.lock().run("job", TTL, forever))
    await asyncio.wait_for(started.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert leases[0].signal.reason == "interrupted"
    assert (await locks.lock().run("job", TTL, idle)).ran


# -------------------------------------------------------------------- fences


async def test_fence_strictly_increases_across_handovers(locks: LockHarness) -> None:
    fences: list[int] = []

    async def note(lease: LockLease) -> None:
        fences.append(lease.fence)

    for _ in range(3):  # released and taken again
        await locks.lock().run("job", TTL, note)

    async def overruns(lease: LockLease) -> None:
        fences.append(lease.fence)
        locks.now.advance(TTL)
        await locks.lock().run("job", TTL, note)  # taken over after expiry

    await locks.lock().run("job", TTL, overruns)
    locks.now.advance(1)
    await locks.lock().run("job", TTL, note)
    assert len(fences) == 6
    assert all(earlier < later for earlier, later in itertools.pairwise(fences))
    # Each name has its own counter.
    other = await locks.lock().run("other", TTL, idle)
    assert other.fence == 1


# ------------------------------------------------------------------- renewal


async def test_renewal_keeps_a_slow_jobs_lock_past_its_ttl(locks: LockHarness) -> None:
    # The TTL leaves a renewal 1,400 ms: with 400 ms (300 ms left), the full
    # suite's run on a fresh clone, the real-Pyodide tier beside it, saw D1
    # renewals take longer and the rival took the lock.
    ttl = 1500
    holder, rival = locks.lock(db_time=True), locks.lock(db_time=True)

    async def slow(lease: LockLease) -> tuple[list[bool], bool]:
        attempts = []
        for _ in range(4):  # 4.8 s: three TTLs
            await asyncio.sleep(1.2)
            attempts.append((await rival.run("job", ttl, idle)).ran)
        return attempts, lease.signal.aborted

    run = await holder.run("job", ttl, slow, renew_every_ms=100)
    assert run.result == ([False] * 4, False)
    assert run.lost is None and locks.notes.errors == []
    assert (await rival.run("job", ttl, idle)).fence == run.fence + 1


async def test_heartbeat_extends_the_lease_from_database_time(locks: LockHarness) -> None:
    rival = locks.lock()

    async def job(lease: LockLease) -> list[bool]:
        locks.now.advance(800)
        assert await lease.heartbeat.beat() is True  # now ends at 800 + 1000
        locks.now.advance(800)  # past the first TTL
        attempts = [(await rival.run("job", 1000, idle)).ran]
        locks.now.advance(200)  # past the extended one
        attempts.append((await rival.run("job", 1000, idle)).ran)
        return attempts

    run = await locks.lock().run("job", 1000, job)
    assert run.result == [False, True]


async def test_a_stolen_lock_aborts_the_lease_signal(locks: LockHarness) -> None:
    victim, thief = locks.lock(), locks.lock()
    tasks: list[asyncio.Task[LockRun[Any]]] = []
    victim_signal: list[str] = []

    async def thief_job(lease: LockLease) -> int:
        # Hold the stolen lock until the victim has noticed, so the victim's
        # renewal meets the thief's live lease, not a released row.
        await until(lambda: bool(victim_signal))
        return lease.fence

    async def victim_job(lease: LockLease) -> tuple[str, bool]:
        locks.now.advance(TTL + 1)  # the victim's lease expired (database time)
        tasks.append(asyncio.create_task(thief.run("job", TTL, thief_job)))
        reason = await asyncio.wait_for(lease.signal.wait(), 5)  # the next renewal
        victim_signal.append(reason)
        return reason, lease.held

    run = await victim.run("job", TTL, victim_job, renew_every_ms=50)
    stolen = await tasks[0]
    assert stolen.ran and stolen.fence == run.fence + 1 and stolen.lost is None
    assert run.result == ("lease_lost", False)
    assert run.ran and run.lost == "lease_lost"
    assert any("was lost while its job ran" in message for message in locks.notes.errors)


# --------------------------------------------------------------------- slots


async def test_a_slot_runs_at_most_once_even_after_release(locks: LockHarness) -> None:
    slot = 1_796_000_000_000  # e.g. a cron trigger's scheduledTime
    first = await locks.lock().run("cron", TTL, idle, slot=slot)
    assert first.ran
    for same in (slot, float(slot), str(slot)):
        again = await locks.lock().run("cron", TTL, idle, slot=same)
        assert not again.ran and again.reason == "slot_done"
    assert "slot '1796000000000' already ran" in locks.notes.info[-1]
    assert (await locks.lock().run("cron", TTL, idle, slot=slot + 60_000)).ran
    assert (await locks.lock().run("cron", TTL, idle)).ran  # no slot: not refused
    assert (await locks.lock().run("other", TTL, idle, slot=slot)).ran  # slots are per name
    rows = await locks.query(
        "SELECT name, slot, fence FROM tickwork_job_locks_slots ORDER BY name, slot")
    assert [tuple(row) for row in rows] == [
        ("cron", "1796000000000", 1), ("cron", "1796000060000", 2), ("other", "1796000000000", 1)]


async def test_a_slot_whose_run_failed_may_run_again(locks: LockHarness) -> None:
    async def failing(lease: LockLease) -> None:
        raise Boom()

    with pytest.raises(Boom):
        await locks.lock().run("cron", TTL, failing, slot="2026-11-30")
    retry = await locks.lock().run("cron", TTL, idle, slot="2026-11-30")
    assert retry.ran and retry.fence == 2
    done = await locks.lock().run("cron", TTL, idle, slot="2026-11-30")
    assert not done.ran and done.reason == "slot_done"


async def test_a_slot_in_progress_is_held_then_done(locks: LockHarness) -> None:
    seen: list[LockRun[Any]] = []

    async def job(lease: LockLease) -> None:
        assert lease.slot == "7"
        seen.append(await locks.lock().run("cron", TTL, idle, slot=7))

    await locks.lock().run("cron", TTL, job, slot=7)
    seen.append(await locks.lock().run("cron", TTL, idle, slot=7))
    assert [run.reason for run in seen] == ["held", "slot_done"]


async def test_twenty_concurrent_callers_of_one_slot_run_it_once(locks: LockHarness) -> None:
    # No holding: winners release at once, so later callers find the lock
    # free and must be refused by the slot record alone.
    runs, calls = await contend(locks, 20, hold=False, slot="2026-11-30T02:30")
    assert calls == 1
    assert sum(run.ran for run in runs) == 1
    assert {run.reason for run in runs if not run.ran} <= {"held", "slot_done"}
    rows = await locks.query("SELECT count(*) FROM tickwork_job_locks_slots")
    assert rows[0][0] == 1


async def test_prune_slots_forgets_old_slots_by_database_time(locks: LockHarness) -> None:
    lock = locks.lock()
    assert (await lock.run("cron", TTL, idle, slot="a")).ran
    locks.now.advance(1000)
    assert (await lock.run("cron", TTL, idle, slot="b")).ran
    assert await lock.prune_slots(1000, name="other") == 0
    assert await lock.prune_slots(1000) == 1  # "a" finished 1000 ms ago, "b" just now
    assert (await lock.run("cron", TTL, idle, slot="a")).ran
    assert not (await lock.run("cron", TTL, idle, slot="b")).ran


# ---------------------------------------------------------------- validation

BAD_CALLS: list[tuple[dict[str, Any], str]] = [
    ({"name": ""}, "name"),
    ({"name": "x" * 257}, "name"),
    ({"name": 42}, "name"),
    ({"name": "\ud800"}, "name"),
    ({"ttl_ms": 0}, "ttl_ms"),
    ({"ttl_ms": -1}, "ttl_ms"),
    ({"ttl_ms": MAX_SAFE_INTEGER + 1}, "ttl_ms"),
    ({"ttl_ms": 1.5}, "ttl_ms"),
    ({"ttl_ms": True}, "ttl_ms"),
    ({"ttl_ms": "60000"}, "ttl_ms"),
    ({"renew_every_ms": TTL}, "renew_every_ms"),
    ({"renew_every_ms": 0}, "renew_every_ms"),
    ({"renew_every_ms": 1.0}, "renew_every_ms"),
    ({"slot": ""}, "slot"),
    ({"slot": "s" * 257}, "slot"),
    ({"slot": MAX_SAFE_INTEGER + 1}, "slot"),
    ({"slot": -MAX_SAFE_INTEGER - 1}, "slot"),
    ({"slot": 1.5}, "slot"),
    ({"slot": float("nan")}, "slot"),
    ({"slot": True}, "slot"),
    ({"slot": b"x"}, "slot"),
    ({"fn": None}, "fn"),
]


async def test_invalid_arguments_raise_before_touching_any_row(locks: LockHarness) -> None:
    called: list[LockLease] = []

    async def job(lease: LockLease) -> None:
        called.append(lease)

    lock = locks.lock()
    for overrides, field in BAD_CALLS:
        arguments: dict[str, Any] = {"name": "job", "ttl_ms": TTL, "fn": job, **overrides}
        name, ttl_ms, fn = arguments.pop("name"), arguments.pop("ttl_ms"), arguments.pop("fn")
        with pytest.raises(InvalidArgument) as caught:
            await lock.run(name, ttl_ms, fn, **arguments)
        assert caught.value.field == field, overrides
    with pytest.raises(InvalidArgument) as bad_clock:
        await locks.lock(now=lambda: MAX_SAFE_INTEGER + 1).run("job", TTL, job)
    assert bad_clock.value.field == "now()"
    with pytest.raises(InvalidArgument) as bad_age:
        await lock.prune_slots(-1)
    assert bad_age.value.field == "older_than_ms"
    for table in ("Locks", "locks;drop", "", "9locks", "l" * 41, None):
        with pytest.raises(InvalidArgument) as bad_table:
            locks.lock(table=table)
        assert bad_table.value.field == "table"

    assert called == []
    if locks.kind == "sqlite3":  # not even the tables were created
        assert not await locks.table_exists("tickwork_job_locks")
    else:
        for table in ("tickwork_job_locks", "tickwork_job_locks_slots"):
            assert (await locks.query(f"SELECT count(*) FROM {table}"))[0][0] == 0


async def test_limits_are_accepted(locks: LockHarness) -> None:
    name = "n" * 256
    run = await locks.lock().run(name, MAX_SAFE_INTEGER, idle, slot=-MAX_SAFE_INTEGER,
                                 renew_every_ms=MAX_SAFE_INTEGER - 1)
    assert run.ran and run.fence == 1
    assert (await locks.lock().run(name, 1, idle, slot="s" * 256)).ran


async def test_unknown_stores_are_refused() -> None:
    class AsyncConnection:  # a psycopg AsyncConnection is not a pool
        in_transaction = False

        async def execute(self, *args: Any) -> None: ...

        async def commit(self) -> None: ...

    for store in (object(), "db.sqlite3", AsyncConnection()):
        with pytest.raises(InvalidArgument) as caught:
            JobLock(store)
        assert caught.value.field == "store"


# ------------------------------------------------------------- table naming


async def test_a_lock_table_of_another_name(locks: LockHarness) -> None:
    if locks.kind != "sqlite3":  # sqlite3 creates its tables; the others migrate
        with pytest.raises(SchemaError, match="billing_locks"):
            await locks.lock(table="billing_locks").run("job", TTL, idle)
        dialect = "postgres" if locks.kind == "postgres" else "sqlite"
        for statement in table_ddl(dialect, "billing_locks"):
            await locks.query(statement)
    lock = locks.lock(table="billing_locks")
    assert lock.slot_table == "billing_locks_slots"
    run = await lock.run("job", TTL, idle, slot=1)
    assert run.ran and run.fence == 1
    assert await locks.lock_row("job", "billing_locks") == (None, 1)
    assert not (await lock.run("job", TTL, idle, slot=1)).ran
    if locks.kind != "sqlite3":
        assert await locks.lock_row("job") is None  # the default table is untouched
