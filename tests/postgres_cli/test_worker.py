"""``tickwork worker`` as a subprocess against a real PostgreSQL: jobs enqueued
through ``PostgresRuntime`` run to completion, and SIGTERM shuts it down the
way ``tickwork serve`` does."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.postgres_cli.conftest import MakeDatabase, without_module
from tests.support.pg.fixtures import open_pool
from tickwork import Job, JobRecord, PostgresRuntime

ROOT = Path(__file__).resolve().parents[2]

#: The executors module the worker loads from its working directory.
EXECUTORS = textwrap.dedent('''
    import asyncio
    import time

    from tickwork import Completed, Failed
    from tickwork.executors import ExecutorRegistry

    registry = ExecutorRegistry(field="kind")

    @registry.on_field("add")
    async def add(job, signal):
        return Completed() if sum(job.payload["terms"]) == job.payload["sum"] \\
            else Failed("wrong_sum")

    @registry.on_field("sleep")
    def sleep(job, signal):  # a plain function: runs in a thread
        time.sleep(job.payload["ms"] / 1000)
        return Completed()

    @registry.on_field("wait")
    async def wait(job, signal):  # until the abort signal
        await signal.wait()
        return Failed("aborted")

    def record_event(event):  # --on-event jobs:record_event
        with open("events.txt", "a") as events:
            events.write(f"{event.kind} {event.job_id} {event.outcome}\\n")
''')


class _Wake:
    def recompute(self) -> None:
        pass


async def _never(job: object, signal: object) -> Any:
    raise AssertionError("the test process runs no jobs")


def shared_job(job_id: str, kind: str, **payload: Any) -> Job:
    return Job(job_id, queue=f"q-{job_id}", lane="tenant-1", priority=0,
               payload={"kind": kind, **payload})


class Database:
    """The test's side of the database: enqueue and read through PostgresRuntime."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    async def _call(self, method: str, *args: Any) -> Any:
        async with open_pool(self.dsn, max_size=2) as pool:
            runtime = PostgresRuntime(pool, execute=_never, wake=_Wake())
            return await getattr(runtime, method)(*args)

    def ingest(self, *jobs: Job) -> list[str]:
        statuses: list[str] = asyncio.run(self._call("ingest_many", list(jobs)))
        return statuses

    def read(self, job_id: str) -> JobRecord:
        record: JobRecord | None = asyncio.run(self._call("read", job_id))
        assert record is not None, job_id
        return record

    def sql(self, statement: str) -> list[tuple[Any, ...]]:
        """The test's own statement, committed."""
        async def run() -> list[tuple[Any, ...]]:
            async with open_pool(self.dsn, max_size=1) as pool, pool.connection() as conn:
                cursor = await conn.execute(statement)
                return await cursor.fetchall() if cursor.description else []

        return asyncio.run(run())

    def wait_for(self, job_id: str, state: str, timeout_s: float = 30.0) -> JobRecord:
        deadline = time.monotonic() + timeout_s
        while True:
            record = self.read(job_id)
            if record.state == state:
                return record
            assert time.monotonic() < deadline, f"{job_id} never {state}: {record}"
            time.sleep(0.05)


class Worker:
    """One ``python -m tickwork worker`` process, its output in files."""

    def __init__(self, directory: Path, dsn: str | None, *extra: str,
                 env: dict[str, str] | None = None) -> None:
        (directory / "jobs.py").write_text(EXECUTORS)
        self.directory = directory
        self.args = [sys.executable, "-m", "tickwork", "worker", "--executors", "jobs:registry",
                     *(["--dsn", dsn] if dsn else []), *extra]
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        if "DATABASE_URL" not in (env or {}):
            self.env.pop("DATABASE_URL", None)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout_s: float = 30.0) -> Worker:
        with (self.directory / "stdout.txt").open("wb") as out, \
                (self.directory / "stderr.txt").open("wb") as err:
            self.process = subprocess.Popen(self.args, cwd=self.directory, env=self.env,
                                            stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while "tickwork worker: " not in self.stdout():
            if self.process.poll() is not None:
                raise AssertionError(f"the worker exited with {self.process.returncode}:\n"
                                     f"{self.stderr()}")
            assert time.monotonic() < deadline, f"the worker never started:\n{self.stderr()}"
            time.sleep(0.02)
        return self

    def run(self, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.args, cwd=self.directory, env=self.env,
                              capture_output=True, text=True, timeout=timeout_s)

    def stdout(self) -> str:
        return (self.directory / "stdout.txt").read_text(errors="replace")

    def stderr(self) -> str:
        return (self.directory / "stderr.txt").read_text(errors="replace")

    def signal(self, number: int = signal.SIGTERM) -> None:
        assert self.process is not None
        self.process.send_signal(number)

    def wait(self, timeout_s: float) -> int:
        assert self.process is not None
        return self.process.wait(timeout_s)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def migrated(make_database: MakeDatabase) -> Database:
    return Database(make_database(None))


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.kill()


def test_the_worker_runs_enqueued_jobs_to_completion(
        tmp_path: Path, migrated: Database, workers: list[Worker]) -> None:
    worker = Worker(tmp_path, None, "--workers", "3", "--poll", "0.2",
                    "--progress-every", "0.2", env={"DATABASE_URL": migrated.dsn})
    workers.append(worker.start())
    assert worker.stdout() == ("tickwork worker: 3 worker(s) on PostgreSQL "
                               f"({migrated.dsn}), executors jobs:registry\n")
    jobs = [shared_job(f"add-{n}", "add", terms=[n, 1], sum=n + 1) for n in range(20)]
    jobs += [shared_job("wrong", "add", terms=[1, 1], sum=3),
             shared_job("plain", "sleep", ms=100)]
    assert migrated.ingest(*jobs) == ["queued"] * len(jobs)
    for job in jobs:
        record = migrated.wait_for(job.job_id, "settled")
        expected = ("failed", "wrong_sum") if job.job_id == "wrong" else ("completed", None)
        assert (record.outcome, record.failure_reason) == expected, record
    # The progress line counts them, under the worker's own name.
    deadline = time.monotonic() + 10
    while "tickwork worker: 22 settled (completed 21, failed 1)" not in worker.stderr():
        assert time.monotonic() < deadline, worker.stderr()
        time.sleep(0.05)
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    assert worker.stderr().splitlines()[-1] == "tickwork worker: stopped"


def test_the_worker_prunes_settled_history_past_its_retention(
        tmp_path: Path, migrated: Database, workers: list[Worker]) -> None:
    first = Worker(tmp_path, migrated.dsn, "--poll", "0.2", "--quiet")
    workers.append(first.start())
    jobs = [shared_job(f"add-{n}", "add", terms=[n], sum=n) for n in range(3)]
    migrated.ingest(*jobs)
    for job in jobs:
        migrated.wait_for(job.job_id, "settled")
    first.signal(signal.SIGTERM)
    assert first.wait(15) == 0
    # Two of them settled eight days ago: past the built-in week.
    migrated.sql("UPDATE tickwork_jobs SET settled_at = settled_at - 8 * 86400000 "
                 "WHERE job_id IN ('add-0', 'add-1')")
    second = Worker(tmp_path, migrated.dsn, "--poll", "0.2", "--quiet")
    workers.append(second.start())  # its first worker prunes after its first drain
    deadline = time.monotonic() + 15
    while migrated.sql("SELECT job_id FROM tickwork_jobs ORDER BY job_id") != [("add-2",)]:
        assert time.monotonic() < deadline, second.stderr()
        time.sleep(0.05)
    second.signal(signal.SIGTERM)
    assert second.wait(15) == 0


def test_sigterm_gives_a_running_job_its_grace(
        tmp_path: Path, migrated: Database, workers: list[Worker]) -> None:
    worker = Worker(tmp_path, migrated.dsn, "--poll", "0.2", "--grace", "20")
    workers.append(worker.start())
    migrated.ingest(shared_job("nap", "sleep", ms=1500), shared_job("later", "add",
                                                                     terms=[], sum=0))
    migrated.wait_for("nap", "running")
    migrated.wait_for("later", "settled")
    signalled = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    took = time.monotonic() - signalled
    assert took < 10, took  # promptly: the job's remaining time, not the 20 s grace
    assert migrated.read("nap").outcome == "completed"
    stderr = worker.stderr()
    assert "tickwork worker: SIGTERM: stopping (running jobs have 20s to settle; signal " \
           "again to interrupt them)" in stderr
    assert re.search(r"tickwork worker: 2 settled \(completed 2\)", stderr), stderr
    assert stderr.splitlines()[-1] == "tickwork worker: stopped"


def test_after_the_grace_a_running_job_is_interrupted(
        tmp_path: Path, migrated: Database, workers: list[Worker]) -> None:
    worker = Worker(tmp_path, migrated.dsn, "--poll", "0.2", "--grace", "0.5")
    workers.append(worker.start())
    migrated.ingest(shared_job("forever", "wait"))
    migrated.wait_for("forever", "running")
    worker.signal(signal.SIGINT)
    assert worker.wait(15) == 0
    record = migrated.read("forever")
    assert (record.state, record.outcome, record.failure_reason) == (
        "settled", "failed", "execution_interrupted")


def test_a_second_signal_interrupts_at_once(
        tmp_path: Path, migrated: Database, workers: list[Worker]) -> None:
    worker = Worker(tmp_path, migrated.dsn, "--poll", "0.2", "--grace", "60")
    workers.append(worker.start())
    migrated.ingest(shared_job("forever", "wait"))
    migrated.wait_for("forever", "running")
    signalled = time.monotonic()
    worker.signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while "stopping" not in worker.stderr():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    assert time.monotonic() - signalled < 15  # not the 60 s grace
    assert migrated.read("forever").failure_reason == "execution_interrupted"


def test_event_hooks_get_every_transition_before_the_worker_exits(
        tmp_path: Path, migrated: Database, workers: list[Worker]) -> None:
    worker = Worker(tmp_path, migrated.dsn, "--poll", "0.2", "--on-event", "jobs:record_event")
    workers.append(worker.start())
    migrated.ingest(shared_job("one", "add", terms=[2], sum=2))
    migrated.wait_for("one", "settled")
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0
    # The worker's own transitions (this test's ingest ran in another process).
    assert (tmp_path / "events.txt").read_text().splitlines() == [
        "claimed one None", "settled one completed"]


def test_an_unmigrated_database_is_refused(
        tmp_path: Path, make_database: MakeDatabase) -> None:
    for version, missing in ((0, "0001_tickwork_jobs.sql"), (9, "0010_queue_claims.sql")):
        result = Worker(tmp_path, make_database(version)).run()
        assert result.returncode == 1
        assert result.stdout == ""
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith(f"tickwork worker: PostgreSQL schema: the PostgreSQL "
                                   f"database has tickwork schema version {version}, ")
        assert missing in lines[0] and "tickwork migrate postgres" in lines[0]


@pytest.mark.parametrize(("args", "expected"), [
    (["--dsn", "postgresql://u:hunter2@127.0.0.1:1/db?connect_timeout=2"],
     "tickwork worker: cannot connect to PostgreSQL (postgresql://u@127.0.0.1:1/"
     "db?connect_timeout=2): "),
    ([], "tickwork worker: no database: pass --dsn DSN or set $DATABASE_URL"),
    (["--dsn", "postgresql://nowhere/db", "--lease", "5", "--renew-every", "5"],
     "tickwork worker: --renew-every (5) must be shorter than --lease (5)"),
    (["--dsn", "postgresql://nowhere/db", "--workers", "0"],
     "tickwork worker: --workers must be at least 1, got 0"),
    (["--dsn", "postgresql://nowhere/db", "--executors", "jobs:nothing"],
     "tickwork worker: --executors 'jobs:nothing': jobs has no nothing"),
], ids=["unreachable", "no-dsn", "renewal-not-shorter", "no-workers", "no-such-executors"])
def test_bad_input_is_one_clear_line(tmp_path: Path, args: list[str], expected: str) -> None:
    result = Worker(tmp_path, None, *args).run()
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(expected), result.stderr
    assert "hunter2" not in result.stderr


def test_missing_psycopg_names_the_extra(tmp_path: Path) -> None:
    shadow = without_module(tmp_path, "psycopg_pool")
    result = Worker(tmp_path, "postgresql://nowhere/db",
                    env={"PYTHONPATH": f"{shadow}:{ROOT}"}).run()
    assert result.returncode == 1
    assert "pip install 'tickwork[postgres]'" in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
