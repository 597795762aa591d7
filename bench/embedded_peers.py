"""tickwork against the embedded SQLite queues people would pick instead.

    python -m bench.embedded_peers            # 20,000 jobs per contender
    python -m bench.embedded_peers --quick    # 2,000

Each contender stores the same number of jobs with one enqueue call per job,
then runs all of them with a no-op task, on a fresh WAL file, at synchronous
NORMAL and then at FULL (the same setting for every contender), timed from
the first enqueue to the last job done. Every contender is checked to have
run every job exactly once. A full run takes each contender's fastest of two
runs, the contenders in turns, each run after ``os.sync()`` (no other run's
dirty pages are written back while it syncs); ``--quick`` runs each once.

* tickwork, on a file opened by ``open_sqlite3`` (as ``tickwork serve``
  and the docs open theirs: a new file gets 1,024-byte pages):
  ``OwnerRuntime.ingest()`` per job (one commit each), then one
  ``drain()`` (each job's settlement and the next job's claim share a
  commit: two commits per job in all). Every job keeps its row, its outcome and its
  fenced claim; a claim whose process died is recovered by the next tick.
* huey 3.5.4, ``SqliteHuey``: ``task(n)`` per job (one INSERT, one commit),
  then ``dequeue()`` + ``execute()`` until empty, as its consumer does. The
  dequeue DELETEs the row in its commit (two commits per job): a process
  that dies after a dequeue loses that job, and no outcome is kept (a task
  returning None stores no result). Its file is as ``SqliteHuey`` creates
  it: SQLite's default 4,096-byte pages, a checkpoint every 1,000 pages. A
  second huey row, as context, runs it with tickwork's file settings (the
  page size of a new file, a checkpoint every 4 MiB of frames), to show
  what those settings alone are worth to it.
* persist-queue 1.1.0, ``SQLiteAckQueue``: ``put(n)`` per job, then
  ``get()`` (marks it unacked, a commit) and ``ack()`` (a commit) per job,
  and ``clear_acked_data()`` once at the end, deleting every acked row
  (three commits per job). Unacked jobs are put back when the queue is
  opened again (``auto_resume``): a job whose process died after get() runs
  again, with no count of how often.

* raw SQL on tickwork's table (no engine): the storage limit of tickwork's
  schema in the drain's commit shape. One INSERT per job (one commit each,
  and every 100th insert one more listing the rows inserted since, as the
  store does),
  then per job one transaction settling the previous job (fenced on its
  token) and claiming the next (the runnable index, highest priority and
  oldest first), every 100th of them also filing the settled rows into the
  history indexes, as ``drain()`` commits, with none of the engine around it:
  no queue exclusivity, no recovery probe, no validation, no plan.
* raw SQL on a narrow schema, three times (no engine): queued and running
  jobs in a table of their own, clustered in claim order, settled jobs in a
  history table; the same commit shape and the same promises for these jobs
  (one stored row per job id, a fenced committed claim, an outcome per job
  in its settling commit, serial queues). With the claim's indexes only;
  with the indexes tickwork's other operations read in O(log n) (a queue's
  head, a lane's jobs, due times, settled history and dead letters), each
  job moved to history as it settles; and with those indexes, the outcome
  written into the live row and settled rows moved 100 at a time. They size
  a redesign of the schema: what the storage could reach without the
  engine, and what the features' indexes cost.

The raw loops run on files opened like tickwork's. Target: tickwork at or
above huey at NORMAL and at FULL (rows with target 1.0); persist-queue's
rows are context, and so are huey on tickwork's file settings and the raw
loop beside huey: where that loop is below huey, what bounds tickwork is
the work its own table does per commit (a job's row kept through claim and
settlement, and the indexes that keep queue heads, lanes, due times and
history in order), not the engine's Python.

What a commit writes is counted too, in an untimed pass of 2,000 jobs for
tickwork, huey and the raw loop, with automatic checkpoints off: the WAL
frames (one page each, written with its header at every commit) that each
enqueue and each drained job appends. Each b-tree a commit changes is at
least one frame, so the count shows how many tables and indexes a job's
commits touch. And the timed runs note the process's user and system CPU
time per job (``getrusage``): system time follows the frames (two ``pwrite``
calls each) and the syncs, user time is the contender's Python and SQLite's
own work, and the rest of the elapsed time is waiting for the disk.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import resource
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.report import Figures, Row, print_rows
from tickwork import Completed, Job, OwnerRuntime
from tickwork.hosts.cpython import open_sqlite3
from tickwork.hosts.cpython.sqlite_files import NEW_FILE_PAGE_SIZE, checkpoint_by_bytes
from tickwork.stores import Sqlite3Database
from tickwork.stores.index_batching import FILE_EVERY, LIST_EVERY
from tickwork.stores.owner_local import OwnerLocalStore

SECTION = "owner-local"
SYNCHRONOUS = {"NORMAL": 1, "FULL": 2}


def _set_synchronous(connection: Any, setting: str) -> None:
    connection.execute(f"PRAGMA synchronous = {setting}")
    (value,), = connection.execute("PRAGMA synchronous").fetchall()
    (mode,), = connection.execute("PRAGMA journal_mode").fetchall()
    if (value, mode) != (SYNCHRONOUS[setting], "wal"):
        raise AssertionError(f"the connection runs synchronous={value}, journal_mode={mode}")


def _open(path: Path, setting: str) -> sqlite3.Connection:
    """A contender's file as tickwork opens its own (``open_sqlite3``)."""
    connection: sqlite3.Connection = open_sqlite3(path, synchronous=setting).connection
    _set_synchronous(connection, setting)
    return connection


def _check_once(ran: list[int], count: int, who: str) -> None:
    if sorted(ran) != list(range(count)):
        raise AssertionError(f"{who}: {len(ran)} runs of {len(set(ran))} distinct jobs, "
                             f"expected each of {count} once")


class _NoWake:
    def recompute(self) -> None:
        pass


#: What a contender's run took: (seconds enqueuing, seconds draining).
Phases = tuple[float, float]


class Meter:
    """What a run notes at its start (``start``, once its connection is open)
    and after each phase (``mark``: enqueued, then drained). This one notes
    nothing: a run's default."""

    def start(self, connection: Any, path: Path) -> None:
        pass

    def mark(self) -> None:
        pass


NO_METER = Meter()


class CpuTime(Meter):
    """The process's user and system CPU time in each phase (``getrusage``),
    for timed runs: one system call per mark, and no setting changed.

    System time is mostly the kernel's part of each commit (two ``pwrite``
    calls per WAL frame, its header and its page, and the sync); user time
    is the contender's Python and SQLite's own work. Whatever is left of the
    elapsed time is waiting, for the disk above all."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, float]] = []

    @staticmethod
    def _now() -> tuple[float, float]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime, usage.ru_stime

    def start(self, connection: Any, path: Path) -> None:
        self.marks = [self._now()]

    def mark(self) -> None:
        self.marks.append(self._now())

    def per_job(self, count: int) -> tuple[float, float]:
        """(user, system) microseconds per job over both phases."""
        (user_0, system_0), *_, (user_1, system_1) = self.marks
        return (user_1 - user_0) * 1e6 / count, (system_1 - system_0) * 1e6 / count


class FrameCount(Meter):
    """WAL frames a run appends while enqueuing and while draining.

    ``start`` turns automatic checkpoints off on the contender's connection
    (so the WAL only grows) and notes its size; ``mark`` notes the size after
    each phase. A run given no counter is timed as usual; a counted run is
    not timed."""

    def __init__(self) -> None:
        self.page_size = 0
        self.sizes: list[int] = []
        self.path: Path | None = None

    def start(self, connection: Any, path: Path) -> None:
        connection.execute("PRAGMA wal_autocheckpoint = 0")
        (self.page_size,), = connection.execute("PRAGMA page_size").fetchall()
        self.path = path
        self.mark()

    def mark(self) -> None:
        assert self.path is not None, "start() first"
        wal = self.path.with_name(self.path.name + "-wal")
        self.sizes.append(wal.stat().st_size if wal.exists() else 0)

    def per_job(self, count: int) -> tuple[float, float]:
        """(frames per enqueue, frames per drained job)."""
        start, enqueued, drained = self.sizes
        frame = self.page_size + 24  # a frame is its page and a 24-byte header
        return (enqueued - start) / frame / count, (drained - enqueued) / frame / count


def tickwork_run(path: Path, count: int, setting: str,
                 meter: Meter = NO_METER) -> Phases:
    connection = _open(path, setting)
    ran: list[int] = []

    async def execute(job: Any, signal: Any) -> Completed:
        ran.append(job.payload["n"])
        return Completed()

    runtime = OwnerRuntime(Sqlite3Database(connection), execute=execute,
                           is_alive=lambda job: False, wake=_NoWake())
    jobs = [Job(f"job-{n}", "q", "q", 0, {"n": n}) for n in range(count)]
    meter.start(connection, path)
    started = time.perf_counter()
    for job in jobs:
        runtime.ingest(job)
    enqueued = time.perf_counter()
    meter.mark()
    results = asyncio.run(runtime.drain())
    drained = time.perf_counter()
    meter.mark()
    _check_once(ran, count, "tickwork")
    if len(results) != count or any(result.outcome != "completed" for result in results):
        raise AssertionError("tickwork: not every job settled completed")
    (settled,), = connection.execute(
        "SELECT count(*) FROM tickwork_jobs WHERE outcome = 'completed'").fetchall()
    assert settled == count, settled
    connection.close()
    return enqueued - started, drained - enqueued


def huey_run(path: Path, count: int, setting: str, meter: Meter = NO_METER, *,
             tickwork_file_settings: bool = False) -> Phases:
    """huey as its consumer runs it; ``tickwork_file_settings`` creates its
    file first with tickwork's page size and sets tickwork's checkpoint
    interval on its connection (else its file is as ``SqliteHuey`` makes it)."""
    from huey import SqliteHuey

    if tickwork_file_settings:
        # The file created as tickwork creates its own: it keeps that page
        # size whoever opens it next.
        open_sqlite3(path).connection.close()
    huey = SqliteHuey("bench", filename=str(path), journal_mode="wal")
    _set_synchronous(huey.storage.conn, setting)
    if tickwork_file_settings:
        checkpoint_by_bytes(huey.storage.conn)
    ran: list[int] = []

    @huey.task()
    def noop(n: int) -> None:
        ran.append(n)

    meter.start(huey.storage.conn, path)
    started = time.perf_counter()
    for n in range(count):
        noop(n)
    enqueued = time.perf_counter()
    meter.mark()
    while (task := huey.dequeue()) is not None:
        huey.execute(task)
    drained = time.perf_counter()
    meter.mark()
    _check_once(ran, count, "huey")
    assert huey.pending_count() == 0
    huey.storage.close()
    return enqueued - started, drained - enqueued


def persist_queue_run(path: Path, count: int, setting: str,
                      meter: Meter = NO_METER) -> Phases:
    from persistqueue import Empty, SQLiteAckQueue

    queue = SQLiteAckQueue(str(path))
    _set_synchronous(queue._conn, setting)
    ran: list[int] = []
    meter.start(queue._conn, path)
    started = time.perf_counter()
    for n in range(count):
        queue.put(n)
    enqueued = time.perf_counter()
    meter.mark()
    while True:
        try:
            item = queue.get(block=False)
        except Empty:
            break
        ran.append(item)
        queue.ack(item)
    # Every acked row, deleted at once (no LIMIT, none kept).
    queue.clear_acked_data(max_delete=0, keep_latest=0)
    drained = time.perf_counter()
    meter.mark()
    _check_once(ran, count, "persist-queue")
    assert queue.acked_count() == 0 and queue.size == 0
    queue._conn.close()
    return enqueued - started, drained - enqueued


def _raw_drain(connection: sqlite3.Connection, count: int, claim: str,
               settle: Callable[[int, tuple[Any, str]], object],
               after_commit: Callable[[bool], None] = lambda last: None) -> list[int]:
    """drain()'s commit shape in raw SQL: per job one transaction settling the
    job held (its key and claim token) and claiming the next; the jobs run.
    ``after_commit(last)`` runs after each of those commits."""
    ran: list[int] = []
    held: tuple[Any, str] | None = None
    for number in range(count + 1):
        now = int(time.time() * 1000)
        connection.execute("BEGIN")
        if held is not None:
            settle(now, held)
        claimed = connection.execute(claim, (str(number), now)).fetchall()
        connection.execute("COMMIT")
        after_commit(not claimed)
        if not claimed:
            break
        (key, payload), = claimed
        ran.append(json.loads(payload)["n"])
        held = (key, str(number))
    return ran


def raw_table_run(path: Path, count: int, setting: str, meter: Meter = NO_METER, *,
                  reshape: Callable[[sqlite3.Connection], None] | None = None) -> Phases:
    """The raw loop on tickwork's table; ``reshape`` changes the fresh schema
    first (``bench.index_costs`` takes indexes away)."""
    connection = _open(path, setting)
    OwnerRuntime(Sqlite3Database(connection), execute=lambda job, signal: Completed(),
                 is_alive=lambda job: False, wake=_NoWake())  # creates the schema
    if reshape is not None:
        reshape(connection)
    insert = ("INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json,"
              " state, enqueued_at) VALUES (?, 'q', 'q', 0, ?, 'queued', ?)")
    claim = ("UPDATE tickwork_jobs SET state = 'running', claim_token = ?, started_at = ?"
             " WHERE sequence = (SELECT sequence FROM tickwork_jobs WHERE state = 'queued'"
             " AND cancellation_id IS NULL AND due_at IS NULL"
             " ORDER BY priority DESC, sequence LIMIT 1) RETURNING sequence, payload_json")
    # Schema 0009, as the store and drain() write it: every LIST_EVERY-th
    # insert also lists the rows inserted since (in a transaction of its own,
    # after the insert); a settlement leaves its row unfiled, and every
    # FILE_EVERY-th settling commit files the rows settled since.
    store = OwnerLocalStore(Sqlite3Database(connection))
    settle = ("UPDATE tickwork_jobs SET state = 'settled', outcome = 'completed',"
              " settled_at = ? WHERE sequence = ? AND claim_token = ? AND state = 'running'")
    settlements = itertools.count(1)

    def settle_held(now: int, held: tuple[Any, str]) -> None:
        connection.execute(settle, (now, *held))
        if next(settlements) % FILE_EVERY == 0:
            store.file_settled()

    meter.start(connection, path)
    started = time.perf_counter()
    for n in range(count):
        connection.execute(insert, (f"job-{n}", json.dumps({"n": n}), int(time.time() * 1000)))
        if n % LIST_EVERY == 0:
            store.list_new_rows()
    enqueued = time.perf_counter()
    meter.mark()
    ran = _raw_drain(connection, count, claim, settle_held)
    drained = time.perf_counter()
    meter.mark()
    _check_once(ran, count, "raw SQL on tickwork's table")
    (settled,), = connection.execute(
        "SELECT count(*) FROM tickwork_jobs WHERE outcome = 'completed'").fetchall()
    assert settled == count, settled
    connection.close()
    return enqueued - started, drained - enqueued


# A narrow schema, measured to size the redesign the frame rows point at:
# queued and running jobs in a table of their own, clustered in claim order,
# and settled jobs in a history table. All three variants keep tickwork's
# promises for these jobs: a job id stored once (live or settled), a
# committed claim fenced by its token, an outcome kept for every job in the
# commit that settles it, queues serial (a queue with a claimed, unsettled
# row is skipped).
NARROW_LIVE = """CREATE TABLE live (
    priority INTEGER NOT NULL, sequence INTEGER NOT NULL, job_id TEXT NOT NULL UNIQUE,
    queue TEXT NOT NULL, lane TEXT NOT NULL, payload_json TEXT NOT NULL,
    due_at INTEGER, cancellation_id TEXT, attempt INTEGER NOT NULL DEFAULT 1,
    enqueued_at INTEGER NOT NULL, claim_token TEXT, started_at INTEGER,
    outcome TEXT, settled_at INTEGER,
    PRIMARY KEY (priority DESC, sequence)) WITHOUT ROWID"""
NARROW_SETTLED = """CREATE TABLE settled (
    job_id TEXT PRIMARY KEY, queue TEXT NOT NULL, lane TEXT NOT NULL,
    outcome TEXT NOT NULL, payload_json TEXT NOT NULL, attempt INTEGER NOT NULL,
    enqueued_at INTEGER NOT NULL, started_at INTEGER, settled_at INTEGER NOT NULL
) WITHOUT ROWID"""
#: Claiming only: the claim order (the table's key), the job id, busy queues.
NARROW_CLAIM_ONLY = (
    NARROW_LIVE, NARROW_SETTLED,
    "CREATE INDEX live_busy ON live (queue) WHERE claim_token IS NOT NULL AND outcome IS NULL")
#: And the indexes tickwork's other operations read in O(log n): a queue's
#: head (read_queue_head, purge, status), a lane's jobs (fail_lane), due
#: times, a queue's settled history and its dead letters (browsing).
NARROW_FEATURES = (
    *NARROW_CLAIM_ONLY,
    "CREATE INDEX live_queue ON live (queue, priority DESC, sequence)",
    "CREATE INDEX live_lane ON live (lane, sequence)",
    "CREATE INDEX live_due ON live (due_at) WHERE due_at IS NOT NULL",
    "CREATE INDEX settled_queue ON settled (queue, settled_at)",
    "CREATE INDEX settled_dead ON settled (queue, settled_at) WHERE outcome <> 'completed'")


def narrow_run(schema: tuple[str, ...], move_every: int = 1,
               ) -> Callable[[Path, int, str, Meter], Phases]:
    """Raw SQL on a narrow schema in drain()'s commit shape: one INSERT per
    job (skipped when the id is already settled), then per job one
    transaction settling the previous job (fenced on its token) and claiming
    the next. No engine, and the sequence comes from the loop (a real store
    would read its high-water mark when it opens).

    ``move_every=1`` moves the settled job to history in its settling
    commit. Above 1, the settlement writes the outcome into the live row
    (changing the row and leaving the busy index, nothing else), and every
    ``move_every`` settlements one more transaction moves those rows to
    history: the outcome is as durable, and the indexes the move changes are
    written once per batch instead of once per job. (A real store would
    finish an interrupted move when it opens; the claim passes over the
    settled rows still in the live table, one batch at most.)"""

    def run(path: Path, count: int, setting: str, meter: Meter = NO_METER) -> Phases:
        connection = _open(path, setting)
        for statement in schema:
            connection.execute(statement)
        insert = ("INSERT INTO live (priority, sequence, job_id, queue, lane, payload_json,"
                  " enqueued_at) SELECT 0, ?, ?, 'q', 'q', ?, ?"
                  " WHERE NOT EXISTS (SELECT 1 FROM settled WHERE job_id = ?)")
        # INDEXED BY: left to itself the planner may check a busy queue
        # through live_queue, a walk over every job of the queue.
        claim = ("UPDATE live SET claim_token = ?, started_at = ? WHERE (priority, sequence) = ("
                 "SELECT priority, sequence FROM live AS head WHERE claim_token IS NULL"
                 " AND due_at IS NULL AND cancellation_id IS NULL AND NOT EXISTS ("
                 "SELECT 1 FROM live AS busy INDEXED BY live_busy WHERE busy.queue = head.queue"
                 " AND busy.claim_token IS NOT NULL AND busy.outcome IS NULL)"
                 " ORDER BY priority DESC, sequence LIMIT 1) RETURNING job_id, payload_json")
        settle = ("UPDATE live SET outcome = 'completed', settled_at = ?"
                  " WHERE job_id = ? AND claim_token = ? AND outcome IS NULL")
        chosen = " FROM live WHERE job_id IN (SELECT value FROM json_each(?))"
        move = ("INSERT INTO settled SELECT job_id, queue, lane, outcome, payload_json, attempt,"
                " enqueued_at, started_at, settled_at" + chosen)
        leave = "DELETE" + chosen
        settled_here: list[str] = []

        def move_settled() -> None:
            chosen_ids = (json.dumps(settled_here),)
            if connection.execute(move, chosen_ids).rowcount != len(settled_here):
                raise AssertionError("a settled job was not moved to history")
            connection.execute(leave, chosen_ids)
            settled_here.clear()

        def settle_held(now: int, held: tuple[Any, str]) -> None:
            if connection.execute(settle, (now, *held)).rowcount != 1:
                raise AssertionError(f"the settlement of {held[0]} missed its claim")
            settled_here.append(held[0])
            if move_every == 1:
                move_settled()

        def batch_done(last: bool) -> None:
            if move_every > 1 and (last or len(settled_here) >= move_every) and settled_here:
                connection.execute("BEGIN")
                move_settled()
                connection.execute("COMMIT")

        meter.start(connection, path)
        started = time.perf_counter()
        for n in range(count):
            connection.execute(insert, (n, f"job-{n}", json.dumps({"n": n}),
                                        int(time.time() * 1000), f"job-{n}"))
        enqueued = time.perf_counter()
        meter.mark()
        ran = _raw_drain(connection, count, claim, settle_held, batch_done)
        drained = time.perf_counter()
        meter.mark()
        _check_once(ran, count, "raw SQL on a narrow schema")
        (settled,), = connection.execute("SELECT count(*) FROM settled").fetchall()
        (live,), = connection.execute("SELECT count(*) FROM live").fetchall()
        assert (settled, live) == (count, 0), (settled, live)
        connection.close()
        return enqueued - started, drained - enqueued

    return run


NARROW = {
    "raw SQL, narrow schema, claim indexes only": narrow_run(NARROW_CLAIM_ONLY),
    "raw SQL, narrow schema with tickwork's feature indexes": narrow_run(NARROW_FEATURES),
    "raw SQL, narrow schema with the feature indexes, history moved 100 at a time":
        narrow_run(NARROW_FEATURES, move_every=100),
}


def huey_on_tickwork_file_settings(path: Path, count: int, setting: str,
                                   meter: Meter = NO_METER) -> Phases:
    return huey_run(path, count, setting, meter, tickwork_file_settings=True)


#: The context row's name for huey with tickwork's file settings.
HUEY_TICKWORK_FILES = (f"huey SqliteHuey on tickwork's file settings ({NEW_FILE_PAGE_SIZE:,}-byte "
                       "pages, a checkpoint every 4 MiB)")

CONTENDERS: dict[str, Callable[[Path, int, str, Meter], Phases]] = {
    "tickwork": tickwork_run,
    "huey SqliteHuey": huey_run,
    HUEY_TICKWORK_FILES: huey_on_tickwork_file_settings,
    "persist-queue SQLiteAckQueue": persist_queue_run,
    "raw SQL on tickwork's table": raw_table_run,
    **NARROW,
}


def _slug(name: str) -> str:
    """A contender's name in its files and folders: one per contender, so no
    run reopens another's."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def collect(*, quick: bool) -> Figures:
    """One run: every contender at NORMAL and at FULL (a full run: each
    contender's best of two, see ``best_runs``), as rows (the total against
    each peer; each phase against huey's, as context)."""
    count = 2_000 if quick else 20_000
    repeats = 1 if quick else 2
    figures = Figures()
    rows = figures.rows
    with tempfile.TemporaryDirectory() as directory:
        for setting in SYNCHRONOUS:
            best = best_runs(Path(directory), count, setting, repeats)
            runs = {name: phases for name, (phases, _) in best.items()}
            cpu = {name: meter for name, (_, meter) in best.items()}
            rates = {name: count / sum(phases) for name, phases in runs.items()}
            measure = f"enqueue + drain, {count:,} jobs, WAL, synchronous {setting}"
            rows.append(Row(SECTION, measure, rates["tickwork"], "jobs/s", "huey SqliteHuey",
                            rates["huey SqliteHuey"], 1.0))
            rows.append(Row(SECTION, measure, rates["tickwork"], "jobs/s",
                            f"{HUEY_TICKWORK_FILES} (context)", rates[HUEY_TICKWORK_FILES]))
            rows.append(Row(SECTION, measure, rates["tickwork"], "jobs/s",
                            "persist-queue SQLiteAckQueue",
                            rates["persist-queue SQLiteAckQueue"]))
            raw = "raw SQL on tickwork's table"
            rows.append(Row(SECTION, measure, rates["tickwork"], "jobs/s",
                            f"{raw} (drain's commits, no engine)", rates[raw]))
            for name in (raw, *NARROW):
                rows.append(Row(SECTION, f"{name}: enqueue + drain, WAL, synchronous {setting}",
                                rates[name], "jobs/s", "huey SqliteHuey",
                                rates["huey SqliteHuey"]))
            for phase, what in enumerate(("enqueue (ingest() per job)", "drain()")):
                rows.append(Row(SECTION, f"{what} alone, WAL, synchronous {setting}",
                                count / runs["tickwork"][phase], "jobs/s",
                                "huey SqliteHuey, the same phase",
                                count / runs["huey SqliteHuey"][phase]))
                rows.append(Row(SECTION, f"{what} alone, WAL, synchronous {setting}",
                                count / runs["tickwork"][phase], "jobs/s",
                                f"{raw}, the same phase", count / runs[raw][phase]))
            rows.extend(cpu_rows(cpu, count, setting))
        rows.extend(frame_rows(Path(directory), 500 if quick else 2_000))
    return figures


def best_runs(directory: Path, count: int, setting: str,
              repeats: int) -> dict[str, tuple[Phases, CpuTime]]:
    """Each contender's fastest of ``repeats`` runs (its phases and its CPU
    time), the contenders taken in turns, one run of each per round, so a
    change of the machine's load falls on all of them alike.

    Every run starts in a folder of its own (persist-queue's path is a
    folder), removed after it, and after ``os.sync()``: the pages an earlier
    run left dirty are on disk before the clock starts, rather than written
    back by the kernel while the next contender syncs its commits."""
    best: dict[str, tuple[Phases, CpuTime]] = {}
    for round_number in range(repeats):
        for name, run in CONTENDERS.items():
            folder = directory / f"{_slug(name)}-{setting}-{round_number}"
            folder.mkdir()
            os.sync()
            meter = CpuTime()
            phases = run(folder / "queue.sqlite3", count, setting, meter)
            shutil.rmtree(folder)
            if name not in best or sum(phases) < sum(best[name][0]):
                best[name] = phases, meter
    return best


def cpu_rows(cpu: dict[str, CpuTime], count: int, setting: str) -> list[Row]:
    """User and system CPU per job (enqueue + drain), tickwork and the raw loop
    beside huey, from the timed runs: where a contender's time goes."""
    huey = cpu["huey SqliteHuey"].per_job(count)
    rows = []
    for name in ("tickwork", "raw SQL on tickwork's table"):
        who = "tickwork" if name == "tickwork" else f"{name}:"
        for index, kind in enumerate(("user", "system")):
            rows.append(Row(SECTION, f"{who} {kind} CPU per job, WAL, synchronous {setting}",
                            cpu[name].per_job(count)[index], "us/job", "huey SqliteHuey",
                            huey[index], lower_is_better=True))
    return rows


def frame_rows(directory: Path, count: int) -> list[Row]:
    """WAL frames per enqueue and per drained job, tickwork and the raw loop beside huey
    (an untimed pass at NORMAL: the frames a commit writes do not depend on
    the synchronous setting)."""
    counted: dict[str, tuple[float, float]] = {}
    counted_names = ("tickwork", "raw SQL on tickwork's table", *NARROW)
    for name in ("huey SqliteHuey", *counted_names):
        run, frames = CONTENDERS[name], FrameCount()
        run(directory / f"{_slug(name)}-frames.sqlite3", count, "NORMAL", frames)
        counted[name] = frames.per_job(count)
    huey = counted["huey SqliteHuey"]
    rows = []
    for name in counted_names:
        who = "tickwork" if name == "tickwork" else f"{name}:"
        for phase, what in enumerate(("enqueue", "drained job")):
            rows.append(Row(SECTION, f"{who} WAL frames per {what}", counted[name][phase],
                            "frames", "huey SqliteHuey", huey[phase], lower_is_better=True))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 jobs, for a smoke run")
    args = parser.parse_args()
    print("embedded peers (one run; python -m bench runs it twice and prints min-max)")
    print_rows(collect(quick=args.quick).rows)


if __name__ == "__main__":
    main()
