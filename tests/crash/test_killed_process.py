"""Crash and fault injection: real processes killed with SIGKILL, failing stores."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support import ScriptedExecutor, job
from tickwork import Completed, Failed, OwnerRuntime, Recovery, Retry, TickResult
from tickwork.stores import Sqlite3Database

ROOT = Path(__file__).resolve().parents[2]

CHILD_PRELUDE = textwrap.dedent("""
    import asyncio, sqlite3, sys
    from tickwork import Completed, Job, OwnerRuntime, Recovery
    from tickwork.stores import Sqlite3Database

    class Wake:
        def recompute(self):
            pass

    def runtime(execute):
        connection = sqlite3.connect(sys.argv[1], isolation_level=None)
        connection.execute("PRAGMA journal_mode = WAL")
        return OwnerRuntime(Sqlite3Database(connection), execute=execute,
                            is_alive=lambda job: False, wake=Wake())
""")

HANG_IN_EXECUTOR = CHILD_PRELUDE + textwrap.dedent("""
    async def hang(job, signal):
        print("claimed", job.job_id, flush=True)
        await asyncio.sleep(3600)
        return Completed()

    asyncio.run(runtime(hang).tick())
""")

INGEST_FOREVER = CHILD_PRELUDE + textwrap.dedent("""
    async def noop(job, signal):
        return Completed()

    engine = runtime(noop)
    number = 0
    while True:
        engine.ingest(Job(f"job-{number:06}", f"q{number % 7}", "lane", number % 3,
                          {"n": number}, Recovery(1)))
        if number == 200:
            print("ingesting", flush=True)
        number += 1
""")


TICK_DUE_JOBS_FOREVER = CHILD_PRELUDE + textwrap.dedent("""
    async def noop(job, signal):
        return Completed()

    async def main():
        engine = runtime(noop)
        for batch in range(10):
            engine.ingest_many([Job(f"due-{batch}-{n:02}", f"q{n % 5}", "lane", 0, {},
                                    Recovery(1), delay_ms=1 + n) for n in range(50)])
        ticks = 0
        while True:
            await engine.tick()
            ticks += 1
            if ticks == 100:
                print("ticking", flush=True)

    asyncio.run(main())
""")


DRAIN_UNTIL_KILLED = CHILD_PRELUDE + textwrap.dedent("""
    import time
    from tickwork.hosts.ticking import tick_until_idle

    async def noop(job, signal):
        return Completed()

    async def main():
        engine = runtime(noop)
        for batch in range(3):
            engine.ingest_many([Job(f"job-{n:03}", f"q{n % 5}", "lane", 0, {}, Recovery(1))
                                for n in range(batch * 100, batch * 100 + 100)])
        results = []

        def on_result(result):
            results.append(result)
            if len(results) == 100:
                # Job 100 is settled and, in the same transaction, job 101
                # claimed ahead: die before it runs.
                print("carrying", flush=True)
                time.sleep(3600)

        await tick_until_idle(engine, on_result=on_result)

    asyncio.run(main())
""")


RETRY_JOBS_FOREVER = CHILD_PRELUDE + textwrap.dedent("""
    from tickwork import Failed, Retry

    async def fail_twice(job, signal):
        return Completed() if job.attempt >= 3 else Failed(f"attempt-{job.attempt}")

    async def main():
        engine = runtime(fail_twice)
        for batch in range(5):
            engine.ingest_many([Job(f"retry-{batch}-{n:02}", f"q{n % 5}", "lane", 0, {},
                                    Recovery(1), retry=Retry(3, base_delay_ms=1))
                                for n in range(100)])
        ticks = 0
        while True:
            await engine.tick()
            ticks += 1
            if ticks == 300:
                print("retrying", flush=True)

    asyncio.run(main())
""")


FIRE_SCHEDULE_FOREVER = textwrap.dedent("""
    import asyncio, sqlite3, sys, time
    from tickwork import Completed, OwnerRuntime, Schedule, ScheduledJob
    from tickwork.stores import Sqlite3Database

    class Wake:
        def recompute(self):
            pass

    START = 1_800_000_000_000
    begun = time.monotonic()

    def clock():  # a second of slots every millisecond
        return START + int((time.monotonic() - begun) * 1_000_000)

    async def noop(job, signal):
        return Completed()

    async def main():
        connection = sqlite3.connect(sys.argv[1], isolation_level=None)
        connection.execute("PRAGMA journal_mode = WAL")
        engine = OwnerRuntime(Sqlite3Database(connection), execute=noop,
                              is_alive=lambda job: False, wake=Wake(), clock=clock)
        engine.put_schedule(Schedule("beat", ScheduledJob("beats", "beats"), every_ms=1000,
                                     catch_up=1000))
        ticks = 0
        while True:
            await engine.tick()
            ticks += 1
            if ticks == 300:
                print("firing", flush=True)

    asyncio.run(main())
""")


HANG_WITH_N_IN_FLIGHT = CHILD_PRELUDE + textwrap.dedent("""
    from tickwork.hosts.ticking import tick_until_idle

    in_flight = set()

    async def hang(job, signal):
        in_flight.add(job.job_id)
        if len(in_flight) == 4:
            print("running", *sorted(in_flight), flush=True)
        await asyncio.sleep(3600)
        return Completed()

    async def main():
        connection = sqlite3.connect(sys.argv[1], isolation_level=None)
        connection.execute("PRAGMA journal_mode = WAL")
        engine = OwnerRuntime(Sqlite3Database(connection), execute=hang,
                              is_alive=lambda job: False, wake=Wake(), concurrency=4)
        engine.ingest_many([Job(f"job-{n}", f"q{n}", "lane", 8 - n, {}, Recovery(n % 2))
                            for n in range(8)])
        await tick_until_idle(engine)

    asyncio.run(main())
""")


class Wake:
    def recompute(self) -> None:
        pass


def spawn(script: str, database: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, str(database)], stdout=subprocess.PIPE, text=True,
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


#: Runs of a kill that must land mid-work before a test gives up.
KILL_RUNS = 5


def kill_after_line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    return line


def open_runtime(database: Path, **options: Any) -> OwnerRuntime:
    connection = sqlite3.connect(database, isolation_level=None)
    defaults: dict[str, Any] = {"execute": ScriptedExecutor(), "is_alive": lambda job: False,
                                "wake": Wake()}
    defaults.update(options)
    return OwnerRuntime(Sqlite3Database(connection), **defaults)


@pytest.mark.parametrize(("budget", "expected"), [(1, ["requeued", "completed"]),
                                                  (0, ["interrupted"])])
async def test_process_killed_mid_job_is_recovered(
    tmp_path: Path, budget: int, expected: list[str]
) -> None:
    database = tmp_path / "jobs.sqlite3"
    open_runtime(database).ingest(job("report", recovery=Recovery(budget)))
    assert kill_after_line(spawn(HANG_IN_EXECUTOR, database)) == "claimed report"

    runtime = open_runtime(database)
    stuck = runtime.read("report")
    assert stuck is not None and stuck.state == "running"
    seen = []
    while (result := await runtime.tick()).status != "idle":
        seen.append(result.outcome or result.status)
    assert seen == expected
    record = runtime.read("report")
    assert record is not None and record.state == "settled"
    assert record.recoveries == budget


async def test_process_killed_while_ingesting_leaves_a_consistent_prefix(tmp_path: Path) -> None:
    database = tmp_path / "jobs.sqlite3"
    open_runtime(database)  # schema first, so the child only ingests
    assert kill_after_line(spawn(INGEST_FOREVER, database)) == "ingesting"

    connection = sqlite3.connect(database)
    assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    ids = [row[0] for row in connection.execute(
        "SELECT job_id FROM tickwork_jobs ORDER BY sequence")]
    assert len(ids) > 200
    # Every acknowledged-or-not ingest is all or nothing, in order: no gaps.
    assert ids == [f"job-{number:06}" for number in range(len(ids))]
    runtime = open_runtime(database, execute=lambda job, signal: Completed())
    settled = 0
    while (await runtime.tick()).status == "settled":
        settled += 1
    assert settled == len(ids)
    assert not runtime.has_pending_work()


class FailingOwner(Sqlite3Database):
    """A sqlite3 owner whose next write fails, as a full disk or I/O error would."""

    fail_next_write = False

    def _fail_if_asked(self) -> None:
        if self.fail_next_write:
            self.fail_next_write = False
            raise sqlite3.OperationalError("disk I/O error (injected)")

    def mutate(self, sql: str, params: Any = ()) -> Any:
        self._fail_if_asked()
        return super().mutate(sql, params)

    def mutate_count(self, sql: str, params: Any = ()) -> int:
        # The hot claim and settlement write through this one (no RETURNING).
        self._fail_if_asked()
        return super().mutate_count(sql, params)


async def test_store_failure_while_settling_leaves_a_recoverable_claim(tmp_path: Path) -> None:
    owner = FailingOwner(sqlite3.connect(tmp_path / "jobs.sqlite3", isolation_level=None))
    alive = {"answer": True}
    runs: list[str] = []

    async def execute(job: Any, signal: Any) -> Completed:
        runs.append(job.job_id)
        owner.fail_next_write = len(runs) == 1  # the first settle write fails
        return Completed()

    runtime = OwnerRuntime(owner, execute=execute, is_alive=lambda job: alive["answer"],
                           wake=Wake())
    runtime.ingest(job("a", recovery=Recovery(1)))
    with pytest.raises(sqlite3.OperationalError, match="injected"):
        await runtime.tick()
    record = runtime.read("a")
    assert record is not None and record.state == "running"  # nothing half-written
    # The claim is no longer executed by anyone: the next tick asks the probe.
    alive["answer"] = False
    assert await runtime.tick() == TickResult("requeued", job_id="a")
    assert (await runtime.tick()).outcome == "completed"
    assert runs == ["a", "a"]


async def test_store_failure_while_claiming_changes_nothing(tmp_path: Path) -> None:
    owner = FailingOwner(sqlite3.connect(tmp_path / "jobs.sqlite3", isolation_level=None))
    executor = ScriptedExecutor()
    runtime = OwnerRuntime(owner, execute=executor, is_alive=lambda job: False, wake=Wake())
    runtime.ingest(job("a"))
    owner.fail_next_write = True
    with pytest.raises(sqlite3.OperationalError):
        await runtime.tick()
    record = runtime.read("a")
    assert record is not None and record.state == "queued"
    assert executor.started == []
    assert (await runtime.tick()).outcome == "completed"


def test_a_locked_database_fails_loudly_and_loses_nothing(tmp_path: Path) -> None:
    """Another process holding the write lock makes ingest raise (after the
    connection's busy timeout); the job is not silently dropped or half-written."""
    database = tmp_path / "jobs.sqlite3"
    connection = sqlite3.connect(database, isolation_level=None, timeout=0.05)
    runtime = OwnerRuntime(Sqlite3Database(connection), execute=ScriptedExecutor(),
                           is_alive=lambda job: False, wake=Wake())
    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        runtime.ingest(job("a"))
    holder.execute("ROLLBACK")
    assert runtime.read("a") is None
    assert runtime.ingest(job("a")) == "queued"
    asyncio.run(runtime.tick())
    record = runtime.read("a")
    assert record is not None and record.outcome == "completed"


class FailingReadOwner(Sqlite3Database):
    """A sqlite3 owner whose reads containing ``fail_on`` fail (an I/O error)."""

    fail_on: str | None = None

    def query(self, sql: str, params: Any = ()) -> Any:
        if self.fail_on is not None and self.fail_on in sql:
            raise sqlite3.OperationalError("disk I/O error (injected)")
        return super().query(sql, params)


async def test_a_failing_read_after_a_committed_lane_refusal_changes_nothing_it_reported(
    tmp_path: Path,
) -> None:
    """Without a projector the refusal commits on its own; a read that fails
    afterwards must not turn it into an error, nor keep the refused job's
    executor running."""
    from tickwork import FailLaneResult
    from tickwork.lifecycle import FAIL_LANE_BATCH
    from tickwork.stores.owner_local import _LANE_HAS_PENDING

    owner = FailingReadOwner(sqlite3.connect(tmp_path / "jobs.sqlite3", isolation_level=None))
    executor = ScriptedExecutor()
    runtime = OwnerRuntime(owner, execute=executor, is_alive=lambda job: False, wake=Wake())
    runtime.ingest(job("running", queue="r", lane="bad", payload={"do": "block"}))
    tick = asyncio.create_task(runtime.tick())
    await asyncio.sleep(0.01)
    for number in range(FAIL_LANE_BATCH):
        runtime.ingest(job(f"q{number}", queue=f"q{number}", lane="bad"))
    owner.fail_on = _LANE_HAS_PENDING.text
    result = runtime.fail_lane("bad", "tenant_gone")
    # Durable, reported, and the running executor stopped at once.
    assert (result.settled, result.more) == (FAIL_LANE_BATCH, True)
    assert executor.signals["running"].aborted
    assert (await tick).failure_reason == "tenant_gone"
    owner.fail_on = None
    rest = runtime.fail_lane("bad", "tenant_gone")
    assert (rest.settled, rest.more) == (1, False)
    assert runtime.fail_lane("bad", "tenant_gone") == FailLaneResult(0, False)
    # A short batch needs no read at all: it took every unsettled job.
    runtime.ingest(job("late", lane="late"))
    owner.fail_on = _LANE_HAS_PENDING.text
    assert runtime.fail_lane("late", "x") == FailLaneResult(1, False)


async def test_process_killed_while_ticking_through_due_jobs_loses_none(
        tmp_path: Path) -> None:
    """Kill -9 while ticks move due jobs into the ready set and run them: the
    survivor finds every job once, runs each left one, and none stays waiting."""
    database = tmp_path / "jobs.sqlite3"
    open_runtime(database)
    assert kill_after_line(spawn(TICK_DUE_JOBS_FOREVER, database)) == "ticking"
    connection = sqlite3.connect(database)
    assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert connection.execute("SELECT count(*) FROM tickwork_jobs").fetchone() == (500,)
    runtime = open_runtime(database)
    while (result := await runtime.tick()).status != "idle" or result.job_id is not None:
        pass
    rows = connection.execute(
        "SELECT state, outcome, due_at IS NULL, count(*) FROM tickwork_jobs GROUP BY 1, 2, 3"
    ).fetchall()
    assert rows == [("settled", "completed", 1, 500)]
    assert runtime.next_tick_at() is None


async def test_process_killed_holding_a_claim_taken_ahead_recovers_it_once(
        tmp_path: Path) -> None:
    """Kill -9 after a drain's transaction settled one job and claimed the
    next: that claim is a running claim nobody executes, recovered (and
    counted) like any other; every job settles exactly once."""
    database = tmp_path / "jobs.sqlite3"
    open_runtime(database)
    assert kill_after_line(spawn(DRAIN_UNTIL_KILLED, database)) == "carrying"
    connection = sqlite3.connect(database)
    assert connection.execute(
        "SELECT job_id, recoveries FROM tickwork_jobs WHERE state = 'running'").fetchall() == [
        ("job-100", 0)]
    assert connection.execute("SELECT count(*) FROM tickwork_jobs WHERE state = 'settled'"
                              ).fetchone() == (100,)
    runtime = open_runtime(database)
    assert await runtime.tick() == TickResult("requeued", job_id="job-100")
    results = await runtime.drain()
    assert sorted(result.job_id or "" for result in results) == [
        f"job-{n:03}" for n in range(100, 300)]
    assert connection.execute(
        "SELECT state, outcome, sum(recoveries), count(*) FROM tickwork_jobs GROUP BY 1, 2"
    ).fetchall() == [("settled", "completed", 1, 300)]


async def test_process_killed_with_n_claims_in_flight_recovers_each_by_its_budget(
        tmp_path: Path) -> None:
    """Kill -9 while an owner with concurrency 4 executes four claims: each
    is recovered by its own budget (requeued and run again, or settled
    interrupted), the jobs it never claimed run, and each settles once."""
    database = tmp_path / "jobs.sqlite3"
    open_runtime(database)
    line = kill_after_line(spawn(HANG_WITH_N_IN_FLIGHT, database))
    # The four best by priority were claimed at once.
    assert line == "running job-0 job-1 job-2 job-3"
    connection = sqlite3.connect(database)
    assert connection.execute(
        "SELECT job_id FROM tickwork_jobs WHERE state = 'running' ORDER BY job_id"
    ).fetchall() == [("job-0",), ("job-1",), ("job-2",), ("job-3",)]

    async def complete(record: Any, signal: Any) -> Completed:
        return Completed()

    runtime = open_runtime(database, execute=complete, concurrency=4)
    results = await runtime.drain()
    assert sorted((result.job_id or "", result.status, result.outcome) for result in results) \
        == [("job-0", "settled", "interrupted"),
            ("job-1", "requeued", None), ("job-1", "settled", "completed"),
            ("job-2", "settled", "interrupted"),
            ("job-3", "requeued", None), ("job-3", "settled", "completed"),
            *((f"job-{n}", "settled", "completed") for n in range(4, 8))]
    assert connection.execute(
        "SELECT job_id, outcome, recoveries FROM tickwork_jobs ORDER BY job_id").fetchall() == [
        ("job-0", "interrupted", 0), ("job-1", "completed", 1), ("job-2", "interrupted", 0),
        ("job-3", "completed", 1), ("job-4", "completed", 0), ("job-5", "completed", 0),
        ("job-6", "completed", 0), ("job-7", "completed", 0)]


async def test_store_failure_while_moving_due_jobs_changes_nothing(tmp_path: Path) -> None:
    from tests.support.shared import ManualNow

    owner = FailingOwner(sqlite3.connect(tmp_path / "jobs.sqlite3", isolation_level=None))
    now = ManualNow()
    executor = ScriptedExecutor()
    runtime = OwnerRuntime(owner, execute=executor, is_alive=lambda job: False, wake=Wake(),
                           clock=now)
    runtime.ingest(job("later", delay_ms=1_000))
    now.advance(1_000)
    owner.fail_next_write = True  # the promotion's write
    with pytest.raises(sqlite3.OperationalError, match="injected"):
        await runtime.tick()
    record = runtime.read("later")
    assert record is not None and (record.state, record.due_at) == ("queued", now())
    assert executor.started == []
    assert (await runtime.tick()).outcome == "completed"  # the next tick moves and runs it


async def test_process_killed_while_retrying_loses_no_attempt(tmp_path: Path) -> None:
    """Kill -9 while ticks fail attempts and put their jobs back: every job
    still ends with one outcome after exactly its three attempts, each of the
    first two in its history once (an attempt the kill cut short is recovered
    by Recovery, not counted as a retry)."""
    # The kill must come while jobs are between attempts. The child goes on
    # ticking after it says so, and on a loaded machine it can settle every
    # job before the kill lands (about 1,200 ticks later): then run again.
    for run in range(KILL_RUNS):
        database = tmp_path / f"jobs-{run}.sqlite3"
        open_runtime(database)
        assert kill_after_line(spawn(RETRY_JOBS_FOREVER, database)) == "retrying"
        connection = sqlite3.connect(database)
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        mid_flight = connection.execute(
            "SELECT count(*) FROM tickwork_jobs WHERE attempt > 1 AND state <> 'settled'"
        ).fetchone()[0]
        if mid_flight > 0:
            break
        connection.close()
    else:
        pytest.fail(f"the child had settled every job before the kill, {KILL_RUNS} times")

    async def fail_twice(job: Any, signal: Any) -> Any:
        return Completed() if job.attempt >= 3 else Failed(f"attempt-{job.attempt}")

    runtime = open_runtime(database, execute=fail_twice)
    while runtime.next_tick_at() is not None:  # a retry waits 1 ms
        if (await runtime.tick()).status == "idle":
            await asyncio.sleep(0.002)
    rows = connection.execute(
        "SELECT state, outcome, attempt, json_array_length(history_json), count(*)"
        " FROM tickwork_jobs GROUP BY 1, 2, 3, 4").fetchall()
    assert rows == [("settled", "completed", 3, 2, 500)]
    histories = {row[0] for row in connection.execute(
        "SELECT group_concat(json_extract(entry.value, '$.attempt') || ':' ||"
        " json_extract(entry.value, '$.reason'), ',')"
        " FROM tickwork_jobs, json_each(tickwork_jobs.history_json) AS entry"
        " GROUP BY tickwork_jobs.sequence")}
    assert histories == {"1:attempt-1,2:attempt-2"}


async def test_store_failure_while_retrying_leaves_a_recoverable_claim(tmp_path: Path) -> None:
    owner = FailingOwner(sqlite3.connect(tmp_path / "jobs.sqlite3", isolation_level=None))
    runs: list[int] = []

    async def execute(job: Any, signal: Any) -> Any:
        runs.append(job.attempt)
        owner.fail_next_write = len(runs) == 1  # the first retry write fails
        return Failed("boom") if job.attempt == 1 else Completed()

    runtime = OwnerRuntime(owner, execute=execute, is_alive=lambda job: False, wake=Wake())
    runtime.ingest(job("a", recovery=Recovery(1), retry=Retry(2, base_delay_ms=0)))
    with pytest.raises(sqlite3.OperationalError, match="injected"):
        await runtime.tick()
    record = runtime.read("a")
    assert record is not None and (record.state, record.attempt, record.history) == (
        "running", 1, ())  # nothing half-written
    assert await runtime.tick() == TickResult("requeued", job_id="a")
    assert (await runtime.tick()).status == "retried"
    assert (await runtime.tick()).outcome == "completed"
    assert runs == [1, 1, 2]


async def test_process_killed_while_filling_schedule_slots_loses_and_repeats_none(
        tmp_path: Path) -> None:
    """Kill -9 while ticks fill a fast schedule's slots: every slot up to the
    schedule's next one has exactly one job, none after it, and a survivor
    goes on from there without a gap or a repeat."""
    database = tmp_path / "jobs.sqlite3"
    open_runtime(database)
    assert kill_after_line(spawn(FIRE_SCHEDULE_FOREVER, database)) == "firing"
    connection = sqlite3.connect(database)
    assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    (next_at,) = connection.execute(
        "SELECT next_at FROM tickwork_schedules WHERE name = 'beat'").fetchone()
    runs = [row[0] for row in connection.execute(
        "SELECT run_at FROM tickwork_jobs ORDER BY run_at")]
    firings = connection.execute(
        "SELECT count(DISTINCT enqueued_at) FROM tickwork_jobs").fetchone()[0]
    assert firings > 20  # the kill came after many firings
    first = runs[0]
    assert runs == list(range(first, next_at, 1000))  # no gap, no repeat, none ahead
    survivor = open_runtime(database, clock=lambda: next_at + 4_500)
    assert survivor.fire_schedules() == 5
    runs = [row[0] for row in connection.execute(
        "SELECT run_at FROM tickwork_jobs ORDER BY run_at")]
    assert runs == list(range(first, next_at + 5_000, 1000))
    assert len({row[0] for row in connection.execute("SELECT job_id FROM tickwork_jobs")}) == \
        len(runs)
