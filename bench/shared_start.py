"""How soon a shared (D1) job starts, and jobs/s of drains running at once, on
Miniflare's D1 through the real Worker code path.

    python -m bench.shared_start            # 200 jobs per latency row, 2,000 per drain row
    python -m bench.shared_start --quick    # 20 and 300, drains in 1 round

Everything runs under CPython in one event loop: ``worker.entry.Default``
(``fetch``, ``scheduled``) over the test stand-ins of its env
(``tests.support.worker.make_env``: the real ``SharedPump`` behind the fake
Durable Object namespace, D1 through the Miniflare bridge), with a no-op
executor that notes when it was called (a job's start). The
``ExecutionContext.waitUntil`` tasks run on the loop as the runtime runs them
after the answer. Absolute figures include the test bridge's hop (Python ->
Node -> workerd, about 0.5 ms per D1 call); compare the rows with one another,
not with production D1.

Start latency, p50 and p99 (nearest rank) over the jobs of each row:

a. **cron alone** (the baseline): no drain after a write, no pump. Each
   simulated minute, ``PER_MINUTE`` jobs are acknowledged (real requests) at
   offsets spread uniformly over the minute; then a firing at the minute's end
   runs for real (``Default.scheduled``). Latency = the wait for that firing,
   COMPUTED from the firing schedule (60 s - offset), + the firing's measured
   time from its start to the job's start.
b. **drain after enqueue** (the default): one request per job, each after
   the last one's ``waitUntil`` work ended; latency = the executor's call -
   the moment ``fetch`` returned its 200. Measured.
c. **the pump, delayed jobs**: ``delay_ms`` drawn from 1,000-3,000, one
   request per job, in waves of ``WAVE`` requests sent at once (the next wave
   once every job of the last has started). The drain after each write is on with its
   budget cut to ``PUMP_ROW_WRITE_BUDGET_MS`` (below the shortest delay), so
   it arms the pump at the job's due time and never waits for the job
   itself. The pump's alarm is delivered by a loop that runs the fake
   scheduler against the wall clock every ``ALARM_POLL_S`` of real time, so
   the figure is real time. Latency = start - due time (the job's
   ``enqueued_at + delay_ms``, the database's clock: Miniflare's workerd on
   this machine, the same clock as the start's ``time.time()``).
d. **delayed jobs, default budgets**: as c with the write drain's own
   budget (``WRITE_DRAIN``): a request's drain that finds its job not yet due
   sleeps until it is (within its budget) and races the pump for it.

Each latency row says which drain started its jobs (pump, write, cron).

Parallel drains: 1, 4 and 8 ``drain_shared`` calls at once (each with
concurrency 1, its own D1 binding and runtime, as separate invocations would
have), over 2,000 no-op jobs in 16 queues; jobs/s from the drains' start to
the last one's end, each count's best of ``ROUNDS`` rounds taken in turns,
beside 1 drain; and the D1 round trips per job (claims lost to another drain
would show there). Every row checks that every job started exactly once (and,
for the drains, that every job was settled as completed); a duplicate start
makes the bench say so loudly and exit non-zero. Needs ``npm ci`` (Miniflare).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import contextvars
import io
import math
import os
import random
import sys
import time
import types
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from bench.report import Figures, Row, print_rows
from tests.support.d1.miniflare import D1Bridge
from tests.support.fake_js import installed_js_module
from tests.support.fakes.alarms import AlarmScheduler, SimClock
from tests.support.fakes.workers_module import installed_workers_module
from tests.support.stores import apply_d1_schema
from tests.support.worker import ExecutionContext, make_env, request
from tickwork import Completed, Job, JobRecord
from tickwork.runtimes.d1 import D1Runtime

if TYPE_CHECKING:  # tickwork.cloudflare imports ``workers``: only under the stand-in
    from tickwork.cloudflare.shared_drains import SharedDrain

SECTION = "D1 shared start"
SHAPE: Literal["external"] = "external"
#: Jobs acknowledged per simulated minute in the cron-alone row (under the
#: cron drain's 100 ticks, so each firing starts all of them).
PER_MINUTE = 10
#: A minute boundary, as ``controller.scheduledTime`` (a JS number).
FIRST_FIRING = 1_796_000_040_000.0
#: Requests per wave in the delayed-job rows.
WAVE = 10
DELAY_MS = (1_000, 3_000)
#: The write drain's budget in the pump row: below the shortest delay, so the
#: drain after a write never sleeps until its own job is due.
PUMP_ROW_WRITE_BUDGET_MS = 250
#: How often the alarm loop delivers due alarms, in real time.
ALARM_POLL_S = 0.002
QUEUES = 16
DRAINS = (1, 4, 8)
#: Rounds of the parallel drains (each count keeps its best; 1 with --quick).
ROUNDS = 2

#: Which drain runs the code that calls the executor: "write" (a request's
#: waitUntil), "pump" (the alarm), "cron" or "parallel".
STARTER: contextvars.ContextVar[str] = contextvars.ContextVar("bench_starter",
                                                              default="write")


class DuplicateStart(Exception):
    """A job started more than once: what no drain may ever do."""


@dataclass(frozen=True)
class Start:
    perf: float  # time.perf_counter() at the executor's call
    wall_ms: float  # time.time() in ms, to set against the database's clock
    due_ms: int  # enqueued_at + delay_ms (the database's clock)
    starter: str


@dataclass
class Starts:
    """The no-op executor: notes every call, completes at once."""

    seen: dict[str, list[Start]] = field(default_factory=dict)

    async def execute(self, job: JobRecord, signal: Any) -> Completed:
        self.seen.setdefault(job.job_id, []).append(Start(
            time.perf_counter(), time.time() * 1000, job.enqueued_at + (job.delay_ms or 0),
            STARTER.get()))
        return Completed()

    def factory(self, env: Any) -> Callable[..., Any]:
        return self.execute

    def first(self, job_id: str) -> Start:
        return self.seen[job_id][0]

    def check_once(self, job_ids: Sequence[str]) -> None:
        """No job started twice (of any row so far), and each of ``job_ids`` started."""
        duplicates = {job_id: len(runs) for job_id, runs in self.seen.items() if len(runs) > 1}
        if duplicates:
            shown = ", ".join(f"{job_id} x{count}" for job_id, count in
                              sorted(duplicates.items())[:10])
            raise DuplicateStart(f"{len(duplicates)} job(s) started more than once: {shown}")
        missing = [job_id for job_id in job_ids if job_id not in self.seen]
        if missing:
            raise AssertionError(f"{len(missing)} job(s) never started, e.g. {missing[:5]}")

    def starters(self, job_ids: Sequence[str]) -> str:
        counts = Counter(self.first(job_id).starter for job_id in job_ids)
        return ", ".join(f"{name} {count}" for name, count in counts.most_common())


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile: the smallest value with at least
    ``share`` of the values at or below it."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


class WallClock(SimClock):
    """The fake alarm scheduler's clock, reading the wall clock (epoch ms)."""

    def __call__(self) -> int:
        return int(time.time() * 1000)


@contextlib.asynccontextmanager
async def alarms_delivered(env: Any) -> AsyncIterator[None]:
    """Deliver the pump's due alarms every ALARM_POLL_S of real time for the
    block (a delivery runs the whole alarm handler, as one object runs one
    event at a time)."""
    namespace = getattr(env, "TICKWORK_PUMP", None)
    if namespace is None:
        yield
        return
    scheduler = AlarmScheduler(namespace, WallClock())

    async def deliver() -> None:
        STARTER.set("pump")
        while True:
            for delivery in await scheduler.run_due():
                if delivery.outcome != "ok":
                    print(f"pump alarm {delivery.outcome}: {delivery.error!r}", file=sys.stderr)
            await asyncio.sleep(ALARM_POLL_S)

    task = asyncio.create_task(deliver())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@dataclass
class Deployment:
    """The reference Worker and pump classes, their executors replaced by a
    ``Starts``; a fresh D1 database per env."""

    bridge: D1Bridge
    worker_class: Any
    starts: Starts = field(default_factory=Starts)
    envs: list[Any] = field(default_factory=list)

    async def env(self, *, write_drain: bool, pump: bool, **variables: str) -> Any:
        db = self.bridge.binding(SHAPE)
        await apply_d1_schema(db)
        env = make_env(db, SHAPE, write_drain=write_drain, pump=pump)
        for name, value in variables.items():
            setattr(env, name, value)
        self.envs.append(env)
        return env

    def worker(self, env: Any) -> tuple[Any, ExecutionContext]:
        ctx = ExecutionContext()
        return self.worker_class(ctx, env), ctx

    async def enqueue(self, env: Any, job: dict[str, Any]) -> tuple[float, ExecutionContext]:
        """One ``POST /v1/shared/jobs`` of ``job``: the moment its 200 came
        back (perf_counter) and the request's ctx (its waitUntil work runs on)."""
        worker, ctx = self.worker(env)
        response = await worker.fetch(request(SHAPE, "POST", "/v1/shared/jobs", {"jobs": [job]}))
        acknowledged = time.perf_counter()
        if response.status != 200:
            raise AssertionError(f"enqueue answered {response.status}: {response.body!r}")
        return acknowledged, ctx


@contextlib.contextmanager
def deployment(bridge: D1Bridge) -> Iterator[Deployment]:
    """``worker.entry.Default`` and ``durable_objects.pump.SharedPump`` under
    the ``workers``/``js`` stand-ins, running a ``Starts``'s executor."""
    with installed_workers_module(), installed_js_module():
        from durable_objects.pump import SharedPump
        from worker.entry import Default

        made = Deployment(bridge, Default)
        saved = Default.__dict__["_executors"], SharedPump.__dict__["_executors"]
        Default._executors = staticmethod(made.starts.factory)
        SharedPump._executors = staticmethod(made.starts.factory)
        try:
            yield made
        finally:
            Default._executors, SharedPump._executors = saved
            for env in made.envs:
                env.JOB_OWNERS.close()
                if hasattr(env, "TICKWORK_PUMP"):
                    env.TICKWORK_PUMP.close()


def shared_job(job_id: str, index: int, **fields: Any) -> dict[str, Any]:
    return {"job_id": job_id, "queue": f"q{index % QUEUES}", **fields}


# ------------------------------------------------------------ start latency


@dataclass(frozen=True)
class Latencies:
    label: str
    values_ms: list[float]
    starters: str
    #: D1 statements and round trips of a request's waitUntil work (its drain).
    statements: float | None = None
    round_trips: float | None = None

    def at(self, share: float) -> float:
        return percentile(self.values_ms, share)


async def cron_alone(made: Deployment, jobs: int, rng: random.Random,
                     ) -> tuple[Latencies, Latencies]:
    """Row a: (whole latency, the firing's measured part)."""
    env = await made.env(write_drain=False, pump=False)
    whole: list[float] = []
    measured: list[float] = []
    ids: list[str] = []
    firing = FIRST_FIRING
    for first in range(0, jobs, PER_MINUTE):
        batch = [f"cron-{n}" for n in range(first, min(jobs, first + PER_MINUTE))]
        for n, job_id in enumerate(batch, first):
            _, ctx = await made.enqueue(env, shared_job(job_id, n))
            await ctx.settle()  # the write drain is off: nothing to wait for
        # Acks spread uniformly over the minute: one in each of len(batch) slices.
        offsets = [(slot + rng.random()) * 60_000 / len(batch) for slot in range(len(batch))]
        firing += 60_000
        worker, _ = made.worker(env)
        token = STARTER.set("cron")
        fired = time.perf_counter()
        try:
            await worker.scheduled(types.SimpleNamespace(scheduledTime=firing, cron="* * * * *"))
        finally:
            STARTER.reset(token)
        for job_id, offset in zip(batch, offsets, strict=True):
            took_ms = (made.starts.first(job_id).perf - fired) * 1000
            measured.append(took_ms)
            whole.append(60_000 - offset + took_ms)
        ids += batch
    made.starts.check_once(ids)
    starters = made.starts.starters(ids)
    return (Latencies("a. cron alone", whole, starters),
            Latencies("a. the firing's drain alone", measured, starters))


async def drain_after_enqueue(made: Deployment, jobs: int) -> Latencies:
    """Row b: one request at a time, each after the last one's waitUntil work."""
    env = await made.env(write_drain=True, pump=True)
    values: list[float] = []
    ids = [f"write-{n}" for n in range(jobs)]
    statements = round_trips = 0
    async with alarms_delivered(env):
        for n, job_id in enumerate(ids):
            acknowledged, ctx = await made.enqueue(env, shared_job(job_id, n))
            answered = env.DB.stats.snapshot()
            await ctx.settle()
            values.append((made.starts.first(job_id).perf - acknowledged) * 1000)
            spent = env.DB.stats.since(answered)
            statements += spent.statements
            round_trips += spent.round_trips
    made.starts.check_once(ids)
    return Latencies("b. drain after enqueue", values, made.starts.starters(ids),
                     statements / jobs, round_trips / jobs)


async def delayed(made: Deployment, jobs: int, rng: random.Random, *, tag: str, label: str,
                  **variables: str) -> Latencies:
    """Rows c and d: delayed jobs in waves; latency = start - due."""
    env = await made.env(write_drain=True, pump=True, **variables)
    ids = [f"{tag}-{n}" for n in range(jobs)]
    async with alarms_delivered(env):
        for first in range(0, jobs, WAVE):
            wave = ids[first:first + WAVE]
            # The wave's requests at once, so that they have all been answered
            # well before the first of their jobs is due.
            answered = await asyncio.gather(*(
                made.enqueue(env, shared_job(job_id, n, delay_ms=rng.randint(*DELAY_MS)))
                for n, job_id in enumerate(wave, first)))
            deadline = time.monotonic() + DELAY_MS[1] / 1000 + 30
            while not all(job_id in made.starts.seen for job_id in wave):
                if time.monotonic() > deadline:
                    left = [job_id for job_id in wave if job_id not in made.starts.seen]
                    raise AssertionError(f"{label}: {len(left)} delayed job(s) not started "
                                         f"30 s after their due time, e.g. {left[:5]}")
                await asyncio.sleep(0.01)
            for _, ctx in answered:
                await ctx.settle()
    made.starts.check_once(ids)
    values = [made.starts.first(job_id).wall_ms - made.starts.first(job_id).due_ms
              for job_id in ids]
    return Latencies(label, values, made.starts.starters(ids))


# ---------------------------------------------------------- parallel drains


@dataclass(frozen=True)
class Parallel:
    drains: int
    jobs_per_s: float
    per_drain: list[int]
    #: D1 round trips and statements per job, every drain's together.
    round_trips: float
    statements: float


async def parallel_drains(made: Deployment, jobs: int, drains: int, tag: str = "") -> Parallel:
    """``drains`` drains at once over ``jobs`` no-op jobs in QUEUES queues, each
    with concurrency 1 and a budget that does not end it before the work does."""
    from tickwork.cloudflare.bindings import NoWake
    from tickwork.cloudflare.shared_drains import DrainBudget, drain_shared

    budget = DrainBudget("TICKWORK_BENCH_DRAIN", max_ticks=100_000, budget_ms=900_000,
                         concurrency=1)
    db = made.bridge.binding(SHAPE)
    await apply_d1_schema(db)
    loader = D1Runtime(db, execute=made.starts.execute, wake=NoWake())
    ids = [f"par{drains}{tag}-{n}" for n in range(jobs)]
    for first in range(0, jobs, 50):
        await db.batch([loader.enqueue(Job(job_id, f"q{n % QUEUES}", "l", 0, {}))
                        for n, job_id in enumerate(ids[first:first + 50], first)])
    envs = [types.SimpleNamespace(DB=made.bridge.binding(SHAPE, database=db.database))
            for _ in range(drains)]

    async def no_pump(drained: SharedDrain, at_ms: int | None) -> None:
        return None

    before = [env.DB.stats.snapshot() for env in envs]
    token = STARTER.set("parallel")
    started = time.perf_counter()
    try:
        done = await asyncio.gather(*(drain_shared(env, made.starts.execute, budget,
                                                   arm=no_pump) for env in envs))
    finally:
        STARTER.reset(token)
    elapsed = time.perf_counter() - started
    made.starts.check_once(ids)
    left = await db.prepare("SELECT count(*) AS n FROM tickwork_jobs WHERE state != 'settled'"
                            " OR outcome != 'completed'").first("n")
    if left:
        raise AssertionError(f"{drains} drains: {left} job(s) not settled as completed")
    spent = [env.DB.stats.since(mark) for env, mark in zip(envs, before, strict=True)]
    return Parallel(drains, jobs / elapsed,
                    [0 if drained is None else drained.settled for drained in done],
                    sum(one.round_trips for one in spent) / jobs,
                    sum(one.statements for one in spent) / jobs)


async def best_of_rounds(made: Deployment, jobs: int, rounds: int) -> list[Parallel]:
    """Each drain count's best of ``rounds`` rounds, the counts taken in turns
    (other load on the machine only ever slows a round down)."""
    best: dict[int, Parallel] = {}
    for round_number in range(rounds):
        for drains in DRAINS:
            found = await parallel_drains(made, jobs, drains, tag=f"r{round_number}")
            if drains not in best or found.jobs_per_s > best[drains].jobs_per_s:
                best[drains] = found
    return [best[drains] for drains in DRAINS]


# ---------------------------------------------------------------- the rows


def latency_rows(baseline: Latencies, rows: Sequence[Latencies], note: str) -> list[Row]:
    out = []
    for name, share in (("p50", 0.5), ("p99", 0.99)):
        out.append(Row(SECTION, f"{baseline.label}: start {name} ({note})",
                       baseline.at(share), "ms", ""))
        for found in rows:
            out.append(Row(SECTION, f"{found.label}: start {name}", found.at(share), "ms",
                           f"cron alone, {name}", baseline.at(share), lower_is_better=True))
    return out


def drain_rows(parallel: Sequence[Parallel], jobs: int) -> list[Row]:
    """jobs/s and round trips per job of each drain count, beside 1 drain's."""
    one = parallel[0]
    rows = []
    for drained in parallel:
        is_one = drained is one
        count = f"{drained.drains} drain{'' if is_one else 's'} at once"
        rows.append(Row(SECTION, f"{count}, concurrency 1 each, {jobs:,} no-op jobs in "
                        f"{QUEUES} queues", drained.jobs_per_s, "jobs/s",
                        "" if is_one else "1 drain", None if is_one else one.jobs_per_s))
        rows.append(Row(SECTION, f"{count}: D1 round trips per job", drained.round_trips,
                        "round trips/job", "" if is_one else "1 drain",
                        None if is_one else one.round_trips, lower_is_better=True))
    return rows


async def measure(bridge: D1Bridge, jobs: int, parallel_jobs: int, rounds: int,
                  ) -> tuple[Figures, list[str]]:
    """The rows, and lines saying who started each row's jobs."""
    rng = random.Random(49)
    notes: list[str] = []
    with deployment(bridge) as made, contextlib.redirect_stdout(io.StringIO()):
        # The engine's informational lines (JSON event log, drain summaries)
        # go to stdout: kept out of the bench's own. Errors stay on stderr.
        cron, firing = await cron_alone(made, jobs, rng)
        after_write = await drain_after_enqueue(made, jobs)
        pump = await delayed(made, jobs, rng, tag="pump", label=(
            f"c. pump, delayed jobs (write drain on, budget {PUMP_ROW_WRITE_BUDGET_MS} ms)"),
            TICKWORK_WRITE_DRAIN_BUDGET_MS=str(PUMP_ROW_WRITE_BUDGET_MS))
        default = await delayed(made, jobs, rng, tag="default",
                                label="d. delayed jobs, default budgets (write drain on, pump)")
        parallel = await best_of_rounds(made, parallel_jobs, rounds)
    rows = latency_rows(cron, [after_write, pump, default],
                        "wait computed from the firing schedule + the firing measured")
    rows += [Row(SECTION, f"{firing.label}: start {name} (measured part of a)",
                 firing.at(share), "ms", "") for name, share in (("p50", 0.5), ("p99", 0.99))]
    # D1 counts queries per invocation (1,000; 50 on the free plan).
    for unit, per_request in (("statements", after_write.statements),
                              ("round trips", after_write.round_trips)):
        assert per_request is not None
        rows.append(Row(SECTION, f"b. D1 {unit} of the drain after a one-job write",
                        per_request, unit, ""))
    # The least latency too: below 0 would mean the database's clock and
    # this process's disagree (a job is claimed only once it is due).
    notes += [f"{latencies.label}: {len(latencies.values_ms)} jobs, started by "
              f"{latencies.starters}; least {min(latencies.values_ms):,.1f} ms"
              for latencies in (cron, after_write, pump, default)]
    rows += drain_rows(parallel, parallel_jobs)
    notes += [f"{drained.drains} drain(s): jobs settled by each: {drained.per_drain}; "
              f"{drained.statements:.2f} D1 statements per job; every job started exactly once"
              for drained in parallel]
    return Figures(rows=rows), notes


def sizes(quick: bool) -> tuple[int, int, int]:
    """(jobs per latency row, jobs per parallel-drain row, rounds of the drains)."""
    return (20, 300, 1) if quick else (200, 2000, ROUNDS)


def collect(*, quick: bool) -> Figures:
    """One run for the comparison command."""
    with D1Bridge.start() as bridge:
        figures, notes = asyncio.run(measure(bridge, *sizes(quick)))
    for line in notes:
        print(line)
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="20 jobs per latency row, 300 per drain row, 1 round")
    args = parser.parse_args(argv)
    jobs, parallel_jobs, rounds = sizes(args.quick)
    try:
        with D1Bridge.start() as bridge:
            figures, notes = asyncio.run(measure(bridge, jobs, parallel_jobs, rounds))
    except DuplicateStart as error:
        banner = "!" * 72
        print(f"{banner}\nDUPLICATE START: {error}\n{banner}", file=sys.stderr)
        return 1
    print(f"D1 (Miniflare) shared start, {jobs:,} jobs per latency row, {parallel_jobs:,} "
          f"per drain row; load average {os.getloadavg()[0]:.2f}")
    print("a's wait for the firing is computed from the firing schedule (acks spread "
          f"uniformly over each minute, {PER_MINUTE} a minute); the firing itself is "
          "measured. b, c, d and the drains are measured in real time.")
    print_rows(figures.rows)
    for line in notes:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
