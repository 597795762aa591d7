"""PostgreSQL baselines: jobs/s of PgQueuer and of a bare SKIP LOCKED loop.

    python -m bench.postgres_baselines            # 20,000 jobs at 1, 4 and 8 workers
    python -m bench.postgres_baselines --quick    # 2,000 jobs, for a smoke run
    python -m bench.postgres_baselines --jobs 500 --workers 1,2
    python -m bench.postgres_baselines --repeat 3  # best of 3 rounds, on a busy machine

A no-op executor over N jobs, enqueued before the clock starts, on a server
started for the run (``tests/support/pg/server.py``: PostgreSQL from Debian's package,
fsync and synchronous_commit on, data directory on the temp disk) or on the
server named by ``TICKWORK_PG_DSN``. Every measurement gets a fresh database,
ANALYZE and a CHECKPOINT before the clock starts, and is checked afterwards:
every job executed exactly once and settled in the store. The clock runs from
the workers' start until the last settlement is committed; shutting the
workers down afterwards is not timed. Over the same span each result notes
the CPU time of this process (the client: every contender's workers are
tasks in it) and, on Linux, of the whole machine; the difference is the
server's share (its backends, WAL writer and checkpointer).

Contenders (``baseline_contenders()``):

* **PgQueuer** (PyPI ``pgqueuer``), installed with its own installer
  (``Queries.install()``, durable tables), jobs enqueued with its batch
  ``enqueue``, drained by N PgQueuer ``QueueManager`` objects, each ``run(mode=drain)`` with
  the default batch size (10) and default settings. Two rows: over
  **asyncpg**, the driver PgQueuer recommends and benchmarks with (shown when
  asyncpg is installed), and over **psycopg 3**, the driver tickwork's
  PostgreSQL runtime uses. Its settlements are counted by observing
  ``Queries.log_jobs`` (the statement that deletes finished jobs from the
  queue and logs them), without changing it.
* **SKIP LOCKED loop**: the per-job raw limit. Each worker loops: one claim
  transaction (an UPDATE of the oldest queued row picked through a partial
  index with ``FOR UPDATE SKIP LOCKED``, setting a random claim token and a
  2-minute lease), the no-op executor, then one settle transaction (an UPDATE
  fenced on that token and an unexpired lease). One job per transaction, two
  commits (two WAL flushes) per job, nothing batched: the shape a leased,
  exactly-once claim has when nothing is shared between workers. (The
  weaker one-transaction shape, claim, execute and settle under one row lock
  with no durable claim, is ``SkipLockedLoop(one_transaction=True)``,
  ``--with-one-transaction-loop``.)

Workers are asyncio tasks in this one process, each with its own connection,
on the default asyncio event loop: that is how PgQueuer's own benchmark tool
runs its N dequeue workers, and how N tickwork workers share one event loop
and one pool, so every contender is measured under the same model.

The figures are noisy on a small shared machine (other load only ever slows a
round down): ``--repeat 3`` keeps the best of three rounds per cell.

Reuse from another benchmark, to print another runtime beside these in the
same run, on the same server, with the same job and worker counts: subclass
``Contender`` (``prepare`` enqueues jobs numbered 0..N-1 untimed, ``connect``
opens N workers, ``drain`` runs them with an executor that awaits
``self.execute(number)`` and calls ``self.settled(1)`` after each committed
settlement, ``close``, ``verify`` checks the store), then call
``main(extra_contenders=[MyContender])``; or ``run_contenders(server,
[*baseline_contenders(), MyContender], WORKER_COUNTS, JOBS)`` and
``print_table(results)``.
"""

from __future__ import annotations

import abc
import argparse
import asyncio
import collections
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import psycopg

from tests.support.pg.server import (
    ExternalPostgres,
    PostgresCluster,
    PostgresServer,
    fresh_database,
    start_postgres,
)

JOBS = 20_000
QUICK_JOBS = 2_000
WORKER_COUNTS: tuple[int, ...] = (1, 4, 8)
ENQUEUE_CHUNK = 1_000


class BenchmarkError(AssertionError):
    """A contender lost, duplicated or failed to settle a job."""


def cpu_seconds() -> tuple[float, float | None]:
    """(CPU seconds this process has used, busy CPU seconds of the whole
    machine, every core: user, nice, system, irq and softirq time from
    ``/proc/stat``; None where there is no such file).

    The contenders' workers are tasks in this process, so its CPU time is
    the client's; the machine's busy time minus it is the server's backends,
    WAL writer and checkpointer, and whatever else ran meanwhile."""
    client = time.process_time()
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
    except OSError:
        return client, None
    if not fields or fields[0] != "cpu":
        return client, None
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[1:8])
    return client, (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Result:
    system: str
    workers: int
    jobs: int
    seconds: float
    executed: int  # executor calls
    distinct: int  # distinct jobs executed
    # CPU seconds over the timed span (see cpu_seconds): this process's, and
    # the whole machine's (None where it cannot be read).
    client_cpu_s: float = 0.0
    machine_cpu_s: float | None = None
    # The most jobs one worker held at once (taken, not yet settled), where
    # the contender counts them (see HeldJobs).
    most_held: int | None = None

    @property
    def jobs_per_second(self) -> float:
        return self.jobs / self.seconds

    @property
    def client_us_per_job(self) -> float:
        """The client's CPU time per job: the workers' Python and driver."""
        return self.client_cpu_s / self.jobs * 1e6

    @property
    def server_us_per_job(self) -> float | None:
        """The rest of the machine's CPU time per job: the server's side."""
        if self.machine_cpu_s is None:
            return None
        return max(0.0, self.machine_cpu_s - self.client_cpu_s) / self.jobs * 1e6


class HeldJobs:
    """The jobs one worker holds: taken (claimed, dequeued) and not yet
    settled, counted at each statement that takes or settles some, and the
    most it held at once."""

    __slots__ = ("most", "now")

    def __init__(self) -> None:
        self.now = 0
        self.most = 0

    def took(self, count: int) -> None:
        self.now += count
        self.most = max(self.most, self.now)

    def settled(self, count: int) -> None:
        self.now -= count


class Contender(abc.ABC):
    """One system under test, for one measurement (a new instance each time).

    ``prepare`` (untimed) installs the schema and enqueues jobs numbered
    ``0..jobs-1``; ``connect`` (untimed) opens the workers' connections;
    ``drain`` runs the workers until every job is settled and
    ``execute(number)`` was called for each; ``close`` releases everything;
    ``verify`` (untimed) raises ``BenchmarkError`` unless the store shows
    every job settled once.

    The clock runs from the start of ``drain`` until the last settlement is
    committed, which the contender reports with ``settled(count)`` after each
    committed settlement; the workers' shutdown afterwards is not timed (a
    contender that reports nothing is timed until ``drain`` returns).
    """

    label: str = "?"

    def __init__(self) -> None:
        self.executions: collections.Counter[int] = collections.Counter()
        self.expected = 0  # set by measure() before drain()
        self.settled_count = 0
        self.all_settled_at: float | None = None  # time.perf_counter()
        self.all_settled_cpu: tuple[float, float | None] | None = None  # cpu_seconds()
        self.held: list[HeldJobs] = []  # one per worker (or pool), where counted

    @property
    def most_held(self) -> int | None:
        """The most jobs one worker (one counter) held at once; None if uncounted."""
        return max((held.most for held in self.held), default=None)

    async def execute(self, number: int) -> None:
        """The no-op executor: only counts the call."""
        self.executions[number] += 1

    def settled(self, count: int) -> None:
        """Report ``count`` more settlements committed; stops the clock at the last."""
        self.settled_count += count
        if self.all_settled_at is None and self.settled_count >= self.expected:
            self.all_settled_at = time.perf_counter()
            self.all_settled_cpu = cpu_seconds()
            self.on_all_settled()

    def on_all_settled(self) -> None:
        """Called once every job is settled: tell the workers to stop, if they need it."""
        return None

    @abc.abstractmethod
    async def prepare(self, dsn: str, jobs: int) -> None: ...

    @abc.abstractmethod
    async def connect(self, dsn: str, workers: int) -> None: ...

    @abc.abstractmethod
    async def drain(self) -> None: ...

    @abc.abstractmethod
    async def close(self) -> None: ...

    @abc.abstractmethod
    async def verify(self, dsn: str, jobs: int) -> None: ...


ContenderFactory = Callable[[], Contender]


# -- PgQueuer ---------------------------------------------------------------------------------


def pgqueuer_version() -> str:
    from importlib.metadata import version

    return version("pgqueuer")


def pgqueuer_default_batch_size() -> int:
    import inspect

    from pgqueuer import QueueManager

    default: int = inspect.signature(QueueManager.run).parameters["batch_size"].default
    return default


def asyncpg_available() -> bool:
    from importlib.util import find_spec

    return find_spec("asyncpg") is not None


class PgQueuerContender(Contender):
    """N PgQueuer ``QueueManager`` objects, one connection each, ``run(mode=drain)``."""

    def __init__(self, driver: str = "psycopg") -> None:
        super().__init__()
        if driver not in ("psycopg", "asyncpg"):
            raise ValueError(driver)
        self.driver = driver
        self.label = (f"PgQueuer {pgqueuer_version()} / {driver}"
                      f" (batch {pgqueuer_default_batch_size()})")
        self._connections: list[Any] = []
        self._managers: list[Any] = []

    async def prepare(self, dsn: str, jobs: int) -> None:
        from pgqueuer import Queries

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            queries = Queries.from_psycopg_connection(connection)
            await queries.install()
            for start in range(0, jobs, ENQUEUE_CHUNK):
                numbers = range(start, min(start + ENQUEUE_CHUNK, jobs))
                await queries.enqueue(["noop"] * len(numbers),
                                      [str(n).encode() for n in numbers], [0] * len(numbers))

    async def connect(self, dsn: str, workers: int) -> None:
        from pgqueuer import Queries, QueueManager
        from pgqueuer.models import Job

        async def noop(job: Job) -> None:
            assert job.payload is not None
            await self.execute(int(job.payload))

        for _ in range(workers):
            if self.driver == "asyncpg":
                from importlib import import_module

                from psycopg.conninfo import conninfo_to_dict

                asyncpg: Any = import_module("asyncpg")  # optional, untyped
                params = conninfo_to_dict(dsn)
                connection = await asyncpg.connect(
                    host=params.get("host"), port=params.get("port"), user=params.get("user"),
                    password=params.get("password"), database=params.get("dbname"))
                queries = Queries.from_asyncpg_connection(connection)
            else:
                connection = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
                queries = Queries.from_psycopg_connection(connection)
            self._connections.append(connection)
            self._count_settlements(queries)
            manager = QueueManager(queries)
            manager.entrypoint("noop")(noop)
            self._managers.append(manager)

    def _count_settlements(self, queries: Any) -> None:
        """Observe (not change) one worker's PgQueuer: ``log_jobs`` is the one
        statement that deletes finished jobs from the queue table and logs
        them, ``dequeue`` the one that picks a batch. A worker dequeues its
        next batch while the jobs of the last one run and their results wait
        in its buffer, so it can hold more than one batch (``HeldJobs``)."""
        log_jobs, dequeue = queries.log_jobs, queries.dequeue
        held = HeldJobs()
        self.held.append(held)

        async def counted(job_status: list[Any]) -> None:
            await log_jobs(job_status)
            held.settled(len(job_status))
            self.settled(len(job_status))

        async def dequeued(*args: Any, **kwargs: Any) -> Any:
            jobs = await dequeue(*args, **kwargs)
            held.took(len(jobs))
            return jobs

        queries.log_jobs = counted
        queries.dequeue = dequeued

    async def drain(self) -> None:
        from pgqueuer.domain.types import QueueExecutionMode

        # Default batch size (10) and settings. Drain mode would also return by
        # itself once the queue is empty, but over psycopg its shutdown takes
        # seconds (the notification watcher's 1 s timeouts); that tail is not
        # throughput, so the clock stops at the last settlement and the managers
        # are told to shut down then.
        await asyncio.gather(*(manager.run(mode=QueueExecutionMode.drain)
                               for manager in self._managers))

    def on_all_settled(self) -> None:
        for manager in self._managers:
            manager.shutdown.set()

    async def close(self) -> None:
        for connection in self._connections:
            with contextlib.suppress(Exception):
                await connection.close()

    async def verify(self, dsn: str, jobs: int) -> None:
        from pgqueuer.domain.settings import db_settings

        settings = db_settings()
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            cursor = await connection.execute(
                f"SELECT count(*) FROM {settings.queue_table}")
            left = await cursor.fetchone()
            cursor = await connection.execute(
                f"SELECT count(*), count(DISTINCT job_id) FROM {settings.queue_table_log}"
                " WHERE status = 'successful'")
            logged = await cursor.fetchone()
        if left != (0,) or logged != (jobs, jobs):
            raise BenchmarkError(f"{self.label}: {left} jobs left in the queue table,"
                                 f" (successful, distinct) log rows {logged}, expected {jobs}")
        print(f"    {self.label}: {jobs:,} jobs; one worker held up to {self.most_held} at once"
              " (dequeued, not yet logged)", flush=True)


# -- the bare SKIP LOCKED loop ----------------------------------------------------------------

RAW_SCHEMA = """
CREATE TABLE bench_jobs (
    id bigint PRIMARY KEY,
    payload jsonb NOT NULL,
    state text NOT NULL DEFAULT 'queued',
    claim_token uuid,
    lease_until timestamptz,
    settled_at timestamptz
);
CREATE INDEX bench_jobs_queued ON bench_jobs (id) WHERE state = 'queued';
"""
RAW_CLAIM = """
UPDATE bench_jobs
   SET state = 'running', claim_token = gen_random_uuid(),
       lease_until = now() + interval '2 minutes'
 WHERE id = (SELECT id FROM bench_jobs WHERE state = 'queued'
              ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, payload, claim_token
"""
RAW_SETTLE = """
UPDATE bench_jobs SET state = 'settled', settled_at = now()
 WHERE id = %s AND claim_token = %s AND state = 'running' AND lease_until > now()
"""
RAW_PICK_LOCKED = """
SELECT id, payload FROM bench_jobs WHERE state = 'queued'
 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED
"""
RAW_SETTLE_LOCKED = "UPDATE bench_jobs SET state = 'settled', settled_at = now() WHERE id = %s"


class ConnectionPerWorker(Contender):
    """A contender whose workers each own one autocommit connection."""

    def __init__(self) -> None:
        super().__init__()
        self._connections: list[psycopg.AsyncConnection[Any]] = []

    async def connect(self, dsn: str, workers: int) -> None:
        for _ in range(workers):
            self._connections.append(
                await psycopg.AsyncConnection.connect(dsn, autocommit=True))

    async def close(self) -> None:
        for connection in self._connections:
            await connection.close()


class SkipLockedLoop(ConnectionPerWorker):
    """N workers, each on its own autocommit connection, one job at a time.

    Default: claim (one transaction: token + lease) -> execute -> settle (one
    transaction, fenced on the token and the lease): two commits per job.
    ``one_transaction=True``: BEGIN, pick with the row lock, execute, settle,
    COMMIT: one commit per job, but the claim is never durable and the row
    lock is held while the executor runs.
    """

    def __init__(self, one_transaction: bool = False) -> None:
        super().__init__()
        self.one_transaction = one_transaction
        self.label = ("SKIP LOCKED loop, claim+execute+settle in 1 txn" if one_transaction
                      else "SKIP LOCKED loop, 1 job/txn (claim, settle)")
        self.rejected_settlements = 0

    async def prepare(self, dsn: str, jobs: int) -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            await connection.execute(RAW_SCHEMA.encode())
            await connection.execute(
                "INSERT INTO bench_jobs (id, payload)"
                " SELECT n, jsonb_build_object('n', n) FROM generate_series(0, %s - 1) n",
                (jobs,))

    async def _two_transactions(self, connection: psycopg.AsyncConnection[Any]) -> None:
        while True:
            cursor = await connection.execute(RAW_CLAIM)
            row = await cursor.fetchone()
            if row is None:
                return
            job_id, payload, token = row
            await self.execute(int(payload["n"]))
            cursor = await connection.execute(RAW_SETTLE, (job_id, token))
            if cursor.rowcount == 1:
                self.settled(1)
            else:
                self.rejected_settlements += 1

    async def _one_transaction(self, connection: psycopg.AsyncConnection[Any]) -> None:
        while True:
            async with connection.transaction():
                cursor = await connection.execute(RAW_PICK_LOCKED)
                row = await cursor.fetchone()
                if row is None:
                    return
                job_id, payload = row
                await self.execute(int(payload["n"]))
                await connection.execute(RAW_SETTLE_LOCKED, (job_id,))
            self.settled(1)

    async def drain(self) -> None:
        loop = self._one_transaction if self.one_transaction else self._two_transactions
        await asyncio.gather(*(loop(connection) for connection in self._connections))

    async def verify(self, dsn: str, jobs: int) -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            cursor = await connection.execute(
                "SELECT count(*) FILTER (WHERE state = 'settled'), count(*) FROM bench_jobs")
            counts = await cursor.fetchone()
        if counts != (jobs, jobs) or self.rejected_settlements:
            raise BenchmarkError(f"{self.label}: (settled, total) = {counts}, expected {jobs};"
                                 f" {self.rejected_settlements} settlements rejected")


def baseline_contenders(*, one_transaction_loop: bool = False) -> list[ContenderFactory]:
    """PgQueuer over asyncpg (when installed) and over psycopg, then the raw loop."""
    factories: list[ContenderFactory] = []
    if asyncpg_available():
        factories.append(lambda: PgQueuerContender("asyncpg"))
    factories.append(lambda: PgQueuerContender("psycopg"))
    factories.append(SkipLockedLoop)
    if one_transaction_loop:
        factories.append(lambda: SkipLockedLoop(one_transaction=True))
    return factories


# -- measuring --------------------------------------------------------------------------------


async def _quiesce(dsn: str) -> None:
    """Statistics for the planner, and no checkpoint debt carried into the timing."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        await connection.execute("ANALYZE")
        await connection.execute("CHECKPOINT")


async def _measure(dsn: str, contender: Contender, workers: int,
                   jobs: int) -> tuple[float, float, float | None]:
    """(seconds, client CPU seconds, machine CPU seconds or None) over the timed span."""
    await contender.prepare(dsn, jobs)
    await _quiesce(dsn)
    contender.expected = jobs
    try:
        await contender.connect(dsn, workers)
        cpu_started = cpu_seconds()
        started = time.perf_counter()
        await contender.drain()
        finished = contender.all_settled_at or time.perf_counter()
        cpu_finished = contender.all_settled_cpu or cpu_seconds()
    finally:
        await contender.close()
    await contender.verify(dsn, jobs)
    machine = (None if cpu_started[1] is None or cpu_finished[1] is None
               else cpu_finished[1] - cpu_started[1])
    return finished - started, cpu_finished[0] - cpu_started[0], machine


def measure(server: PostgresCluster, factory: ContenderFactory, workers: int,
            jobs: int) -> Result:
    """One measurement in a fresh database, on a fresh event loop; checks that every
    job was executed exactly once (``BenchmarkError`` otherwise)."""
    contender = factory()
    with fresh_database(server, prefix="bench") as dsn:
        elapsed, client_cpu, machine_cpu = asyncio.run(_measure(dsn, contender, workers, jobs))
    executions = contender.executions
    wrong = {n: c for n, c in executions.items() if c != 1 or not 0 <= n < jobs}
    if len(executions) != jobs or wrong:
        raise BenchmarkError(
            f"{contender.label}, {workers} workers: {len(executions)} of {jobs} jobs executed;"
            f" not exactly once: {dict(list(wrong.items())[:10])}")
    return Result(contender.label, workers, jobs, elapsed,
                  executed=sum(executions.values()), distinct=len(executions),
                  client_cpu_s=client_cpu, machine_cpu_s=machine_cpu,
                  most_held=contender.most_held)


def run_contenders(server: PostgresCluster, factories: Sequence[ContenderFactory],
                   worker_counts: Sequence[int] = WORKER_COUNTS, jobs: int = JOBS,
                   *, repeats: int = 1, progress: TextIO | None = None) -> list[Result]:
    """Every contender at every worker count, keeping the best of ``repeats`` rounds
    (the machine's other load only ever slows a round down). Contenders alternate
    inside each round and worker count, so drift hits them all alike."""
    best: dict[tuple[int, int], Result] = {}
    for round_number in range(repeats):
        for workers in worker_counts:
            for index, factory in enumerate(factories):
                result = measure(server, factory, workers, jobs)
                if progress is not None:
                    print(f"  {result.system:<48} {workers:>2} workers"
                          f" {result.jobs_per_second:>9,.0f} jobs/s"
                          + (f"  (round {round_number + 1})" if repeats > 1 else ""),
                          file=progress, flush=True)
                key = (workers, index)
                if key not in best or result.seconds < best[key].seconds:
                    best[key] = result
    return [best[(workers, index)] for workers in worker_counts
            for index in range(len(factories))]


def run_baselines(server: PostgresCluster, worker_counts: Sequence[int] = WORKER_COUNTS,
                  jobs: int = JOBS, *, repeats: int = 1,
                  progress: TextIO | None = None) -> list[Result]:
    """The baseline contenders at each worker count (``print_table`` prints them)."""
    return run_contenders(server, baseline_contenders(), worker_counts, jobs,
                          repeats=repeats, progress=progress)


def print_table(results: Iterable[Result], file: TextIO | None = None) -> None:
    """jobs/s, one row per system (first-seen order), one column per worker count."""
    out = file or sys.stdout
    results = list(results)
    systems = list(dict.fromkeys(r.system for r in results))
    counts = sorted({r.workers for r in results})
    cells = {(r.system, r.workers): r for r in results}
    jobs = sorted({r.jobs for r in results})
    width = max([len("system"), *(len(s) for s in systems)])
    header = "".join(f"{f'{n} worker' + ('s' if n != 1 else ''):>12}" for n in counts)
    print(f"jobs/s, no-op executor, {'/'.join(f'{j:,}' for j in jobs)} jobs", file=out)
    print(f"{'system':<{width}}{header}", file=out)
    for system in systems:
        row = "".join(
            f"{cells[(system, n)].jobs_per_second:>12,.0f}" if (system, n) in cells
            else f"{'-':>12}" for n in counts)
        print(f"{system:<{width}}{row}", file=out)


def describe_server(server: PostgresCluster) -> str:
    """One line: version, durability settings, WAL sync method, filesystem, CPUs."""
    with psycopg.connect(server.dsn(), autocommit=True) as connection:
        row = connection.execute(
            "SELECT current_setting('server_version'), current_setting('fsync'),"
            " current_setting('synchronous_commit'), current_setting('wal_sync_method'),"
            " current_setting('full_page_writes')").fetchone()
    assert row is not None
    version, fsync, sync_commit, wal_sync, fpw = row
    return (f"PostgreSQL {version}: fsync={fsync} synchronous_commit={sync_commit}"
            f" wal_sync_method={wal_sync} full_page_writes={fpw};"
            f" data on {server.data_directory_filesystem()}; {os.cpu_count()} CPUs;"
            f" Python {sys.version.split()[0]}, psycopg {psycopg.__version__},"
            f" asyncio default loop")


def main(argv: Sequence[str] | None = None,
         extra_contenders: Sequence[ContenderFactory] = ()) -> list[Result]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_JOBS:,} jobs")
    parser.add_argument("--jobs", type=int, help=f"jobs per measurement (default {JOBS:,})")
    parser.add_argument("--workers", default=",".join(map(str, WORKER_COUNTS)),
                        help="comma-separated worker counts (default 1,4,8)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="rounds; the best of them is printed (default 1)")
    parser.add_argument("--with-one-transaction-loop", action="store_true",
                        help="also the loop that claims, executes and settles in one txn")
    args = parser.parse_args(argv)
    jobs = args.jobs or (QUICK_JOBS if args.quick else JOBS)
    worker_counts = [int(n) for n in args.workers.split(",") if n.strip()]
    factories = [*baseline_contenders(one_transaction_loop=args.with_one_transaction_loop),
                 *extra_contenders]

    started = time.perf_counter()
    server: PostgresServer | ExternalPostgres = start_postgres()
    try:
        print(f"server up in {time.perf_counter() - started:.2f}s; {describe_server(server)}")
        if not asyncpg_available():
            print("note: asyncpg is not installed, so PgQueuer runs over psycopg only"
                  " (pip install asyncpg for the asyncpg row)")
        results = run_contenders(server, factories, worker_counts, jobs,
                                 repeats=max(1, args.repeat), progress=sys.stdout)
    finally:
        server.stop()
    print()
    print_table(results)
    return results


if __name__ == "__main__":
    main()
