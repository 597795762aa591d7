"""``tickwork serve`` over HTTP, each figure beside a baseline measured in the same run.

    python -m bench.serve_http            # 5,000 jobs per run, 1 round
    python -m bench.serve_http --quick    # 300 jobs, for a smoke run
    python -m bench --only serve_http     # the rows in the comparison table, 2 rounds

The server is ``python -m tickwork serve`` as a subprocess on loopback (port
0, a fresh temporary data directory and a fixed token for every run, the
default executors: payload ``{"kind": "echo"}`` runs ``echo`` from
``tickwork/hosts/cpython/examples.py``, which completes at once). The client is the
standard library's ``http.client`` on one persistent connection for the
enqueues (the server keeps HTTP/1.1 connections alive; the run counts the
connections it opened and prints the count) and a second one for the polls.

1. Enqueue throughput: N jobs for one owner, one job per request and then
   100 per request (``{"jobs": [...]}``). Baseline: the same calls through an
   in-process ``OwnerRuntime.ingest_many`` (the route calls ``ingest_many``
   for a single job too) on a sqlite3 WAL file in the same directory, opened
   with the server's own connection settings (``synchronous=FULL``), i.e.
   what the server does per request, without HTTP, JSON and the event loop.
   "Tick loop held": each owner first gets a running ``sleep`` job, which
   parks its tick loop, so the enqueues run alone; each request is followed
   by its baseline call (interleaved, each side timed on its own calls).
   "Jobs run meanwhile": the plain case, where the owner's tick loop runs the
   jobs in the same event loop as the requests (an ``echo`` tick never
   suspends, so a request that arrives meanwhile waits for the backlog); the
   baseline runs just before the first request, the server up and idle.

   Why interleaved: the baseline is 0.1-0.2 s of CPU and 50 (or 5,000)
   commits with an fsync each; on a loaded machine its wall time is several
   times its CPU time (waiting for a core or the disk), so its rate follows
   whatever else the machine does at that moment. The
   earlier version ran it after the serve run had drained its jobs and
   stopped, tens of seconds after the serve figure under load;
   ``--late-baseline`` prints both side by side (6 rounds at load 8.6-15:
   the late one 44-56 s after the serve window, ratios 47%-89%, interleaved
   54%-71%; an earlier series of 8 at load 7.4-8.6: 30%-88% against
   48%-64%). A baseline from another moment, not a slower function: run in
   a fresh process next to an in-process run it read the same, and it
   triggers no gen-2 collection. See docs/explanation/benchmarks.md.
2. End to end: from the first enqueue request until every job reads back
   settled ``completed`` through ``GET /v1/owners/{owner}/queues``, polled
   every 50 ms after the last enqueue was answered (so the figure is late by
   up to one poll), with 1 owner and with 8 owners (jobs spread round robin,
   batches interleaved across owners). Baseline, right after the server
   stopped: in-process runtimes over WAL files (one per owner, like the
   server) ingesting the same batches and then ticking every owner to idle,
   in one event loop as the server does (runs of seconds, less exposed).
3. Verify: every enqueue answered ``queued``; the status route reports, per
   owner, exactly the owner's job count settled, all ``completed``, nothing
   queued or running; and the server's own tick counter (its shutdown summary
   on stderr) counts exactly N settlements, so no job was settled twice (a
   held run also counts its holders, settled ``cancelled``). Any mismatch
   stops the run with an error.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bench.report import Figures, Row, print_rows
from tickwork import Job, OwnerRuntime
from tickwork.hosts.cpython.examples import example_registry
from tickwork.hosts.cpython.owners import connect_owner_database  # the server's own settings
from tickwork.stores import Sqlite3Database

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-serve-token"
BATCH = 100
QUEUES_PER_OWNER = 10
POLL_S = 0.05
TIMEOUT_S = 300.0
_LISTENING = re.compile(r"listening on http://([^\s:/]+):(\d+)")
_SUMMARY = re.compile(r"tickwork serve: (\d+) settled(?: \(([^)]*)\))?")

Wire = dict[str, Any]


class NoWake:
    def recompute(self) -> None:
        pass


# ---------------------------------------------------------------------- jobs


def make_jobs(count: int, owners: int, tag: str) -> list[tuple[str, Wire]]:
    """``count`` echo jobs as (owner, wire job), spread round robin over owners."""
    return [(f"owner-{i % owners}", {
        "job_id": f"{tag}-{i}", "queue": f"queue-{i % QUEUES_PER_OWNER}",
        "lane": f"lane-{i % 4}", "payload": {"kind": "echo", "n": i},
    }) for i in range(count)]


def batches(jobs: Sequence[tuple[str, Wire]], size: int) -> list[tuple[str, list[Wire]]]:
    """Batches of up to ``size`` jobs of one owner, interleaved across owners."""
    by_owner: dict[str, list[Wire]] = {}
    for owner, job in jobs:
        by_owner.setdefault(owner, []).append(job)
    chunked = [[(owner, wires[start:start + size]) for start in range(0, len(wires), size)]
               for owner, wires in by_owner.items()]
    rounds = max(len(chunks) for chunks in chunked)
    return [chunks[index] for index in range(rounds) for chunks in chunked
            if index < len(chunks)]


def to_job(wire: Wire) -> Job:
    return Job(wire["job_id"], wire["queue"], wire["lane"], 0, wire["payload"])


# -------------------------------------------------------------------- server


class CountingConnection(http.client.HTTPConnection):
    """An HTTPConnection that counts the TCP connections it opens."""

    opened = 0

    def connect(self) -> None:
        self.opened += 1
        super().connect()


class Client:
    """A /v1 client over one persistent ``http.client`` connection."""

    def __init__(self, host: str, port: int) -> None:
        self.connection = CountingConnection(host, port, timeout=60)
        self.requests = 0
        self.kept_alive = True
        self.headers = {"authorization": f"Bearer {TOKEN}",
                        "content-type": "application/json"}

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        self.connection.request(method, path, body=data, headers=self.headers)
        response = self.connection.getresponse()
        text = response.read()
        self.requests += 1
        if response.will_close:  # http.client reconnects on the next request
            self.kept_alive = False
            self.connection.close()
        return response.status, json.loads(text) if text else None

    def close(self) -> None:
        self.connection.close()


def owner_path(owner: str) -> str:
    return f"/v1/owners/{quote(owner, safe='')}"


class Server:
    """One ``python -m tickwork serve`` on a free loopback port, fresh data dir."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.out = directory / "stdout.txt"
        self.err = directory / "stderr.txt"
        self.process: subprocess.Popen[bytes] | None = None
        self.host, self.port = "", 0

    def __enter__(self) -> Server:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        env.pop("TICKWORK_TOKEN", None)
        args = [sys.executable, "-m", "tickwork", "serve", "--data",
                str(self.directory / "data"), "--host", "127.0.0.1", "--port", "0",
                "--token", TOKEN, "--grace", "10", "--progress-every", "3600"]
        with self.out.open("wb") as out, self.err.open("wb") as err:
            self.process = subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=err,
                                            stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            match = _LISTENING.search(self.out.read_text(errors="replace"))
            if match:
                self.host, self.port = match[1], int(match[2])
                return self
            if self.process.poll() is not None:
                raise RuntimeError(f"tickwork serve exited with {self.process.returncode}:\n"
                                   f"{self.err.read_text(errors='replace')}")
            time.sleep(0.02)
        self.process.kill()
        raise RuntimeError("tickwork serve did not print its URL in time")

    def stop(self) -> dict[str, int]:
        """Stop gracefully; the settlements its ticks counted, by outcome."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(30)
        stderr = self.err.read_text(errors="replace")
        if code != 0:
            raise RuntimeError(f"tickwork serve exited with {code}:\n{stderr}")
        matches = _SUMMARY.findall(stderr)
        if not matches:
            return {}
        total, detail = matches[-1]
        counts = {"settled": int(total)}
        for item in filter(None, detail.split(", ")):
            name, count = item.rsplit(" ", 1)
            counts[name] = int(count)
        return counts

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@dataclass
class ServeRun:
    jobs: int
    enqueue_s: float
    baseline_s: float  # the in-process ingest_many of the same calls (see serve_run)
    end_to_end_s: float
    completed_at_last_enqueue: int
    requests: int
    connections: int
    kept_alive: bool
    start_s: float = 0.0  # perf_counter() when the first enqueue was sent
    checks: list[str] = field(default_factory=list)


HOLDER = "holder"


class InProcess:
    """The enqueue baseline: one in-process ``OwnerRuntime`` per owner over its
    own WAL file in the run's directory, opened with the server's connection
    settings before the clock starts (with ``hold``, each file also gets a
    holder job, so it starts in the state the server's file is in)."""

    def __init__(self, directory: Path, owners: Sequence[str], *, hold: bool) -> None:
        directory.mkdir()
        self.opened = {owner: open_runtime(directory / f"{owner}.sqlite3") for owner in owners}
        if hold:
            for _, runtime in self.opened.values():
                runtime.ingest(Job(HOLDER, HOLDER, HOLDER, 0, {"kind": "sleep", "ms": 1}))

    def ingest(self, owner: str, jobs: list[Job]) -> float:
        """Seconds one ``ingest_many`` call takes."""
        started = time.perf_counter()
        statuses = self.opened[owner][1].ingest_many(jobs)
        elapsed = time.perf_counter() - started
        assert statuses == ["queued"] * len(jobs), statuses
        return elapsed

    def close(self) -> None:
        for connection, _ in self.opened.values():
            connection.close()


def serve_run(directory: Path, jobs: list[tuple[str, Wire]], per_request: int, *,
              hold: bool = False) -> ServeRun:
    """Enqueue ``jobs`` over HTTP, poll until all completed, verify, stop the server.

    With ``hold``, each owner first gets a long ``sleep`` job (queue
    ``holder``) and the run waits until it is running: the owner's tick loop
    then awaits it and runs nothing else, so the timed enqueues do not share
    the event loop with ticks. The holder is cancelled after the last
    enqueue; the end-to-end time of such a run is not a figure.

    The baseline is measured inside the run, on the same calls. With
    ``hold`` it is interleaved: each request is followed by the in-process
    ``ingest_many`` of the same jobs (the server idles meanwhile, its tick
    loop parked), and each side's time is the sum of its own calls, so every
    request and its baseline call are milliseconds apart and see the same
    disk and the same competition for the cores. Without ``hold`` the server
    runs jobs between requests, which would compete with an interleaved
    baseline call, so the baseline runs just before the first request (the
    server started and idle).
    """
    directory.mkdir()
    expected: dict[str, int] = {}
    for owner, _ in jobs:
        expected[owner] = expected.get(owner, 0) + 1
    calls = ([(owner, [wire]) for owner, wire in jobs] if per_request == 1
             else batches(jobs, per_request))
    in_process_calls = [(owner, [to_job(wire) for wire in chunk]) for owner, chunk in calls]
    with Server(directory) as server:
        enqueuer = Client(server.host, server.port)
        poller = Client(server.host, server.port)
        if hold:
            for owner in expected:
                status, body = poller.call("POST", f"{owner_path(owner)}/jobs", {
                    "job_id": HOLDER, "queue": HOLDER,
                    "payload": {"kind": "sleep", "ms": int(TIMEOUT_S * 1000)}})
                assert status == 201, body
            for owner in expected:
                wait_for_state(poller, owner, HOLDER, "running")
        in_process = InProcess(directory / "in-process", list(expected), hold=hold)
        baseline_s = 0.0
        if not hold:
            baseline_s = sum(in_process.ingest(owner, chunk) for owner, chunk in in_process_calls)
        queued = 0
        enqueue_s = 0.0
        started = time.perf_counter()
        for (owner, chunk), (_, native) in zip(calls, in_process_calls, strict=True):
            sent = time.perf_counter()
            if per_request == 1:
                status, body = enqueuer.call("POST", f"{owner_path(owner)}/jobs", chunk[0])
                answered = [body] if status == 201 else []
            else:
                status, body = enqueuer.call("POST", f"{owner_path(owner)}/jobs",
                                             {"jobs": chunk})
                answered = body["jobs"] if status == 200 else []
            enqueue_s += time.perf_counter() - sent
            if not answered:
                raise AssertionError(f"enqueue answered {status}: {body}")
            queued += sum(item["status"] == "queued" for item in answered)
            if hold:
                baseline_s += in_process.ingest(owner, native)
        in_process.close()
        # The poller sat idle through the window, maybe past the server's
        # 30 s keep-alive timeout (a held run on a loaded machine): reconnect.
        poller.close()
        poller = Client(server.host, server.port)
        if hold:
            for owner in expected:
                status, body = poller.call(
                    "POST", f"{owner_path(owner)}/jobs/{HOLDER}/cancel",
                    {"cancellation_id": "bench"})
                assert status == 200 and body["status"] == "recorded", body

        pending = dict(expected)
        counts: dict[str, dict[str, int]] = {}
        first_poll_completed: int | None = None
        while pending:
            if time.perf_counter() - started > TIMEOUT_S:
                raise AssertionError(f"not every job settled in {TIMEOUT_S:g} s: {counts}")
            completed_now = 0
            for owner in list(pending):
                status, body = poller.call("GET", f"{owner_path(owner)}/queues")
                if status != 200:
                    raise AssertionError(f"status answered {status}: {body}")
                counts[owner] = owner_counts(body["queues"])
                completed_now += counts[owner].get("completed", 0)
                if counts[owner]["settled"] >= pending[owner] + hold:
                    del pending[owner]
            if first_poll_completed is None:
                first_poll_completed = completed_now
            if pending:
                time.sleep(POLL_S)
        finished = time.perf_counter()
        connections = enqueuer.connection.opened
        enqueuer.close()
        poller.close()
        ticks = server.stop()

    total = len(jobs)
    checks = [f"enqueue answered 'queued' {queued:,} of {total:,} times"]
    if queued != total:
        raise AssertionError(checks[0])
    for owner, want in expected.items():
        got = counts[owner]
        right = {"queued": 0, "running": 0, "settled": want + hold, "completed": want,
                 "cancelled": int(hold)}
        others = sum(count for name, count in got.items() if name not in right)
        if {name: got.get(name, 0) for name in right} != right or others:
            raise AssertionError(f"owner {owner}: status route says {got}, expected {right}")
    held = f" (and {len(expected)} holder(s) cancelled)" if hold else ""
    checks.append(f"status route: {len(expected)} owner(s), completed {total:,}{held}, "
                  "other outcomes 0, queued 0, running 0")
    right_ticks = {"settled": total + hold * len(expected), "completed": total}
    if hold:
        right_ticks["cancelled"] = len(expected)
    if ticks != right_ticks:
        raise AssertionError(f"the server's ticks settled {ticks}, expected {right_ticks}")
    checks.append(f"server's tick counter: {ticks['settled']:,} settlements, "
                  f"completed {total:,}{held}")
    return ServeRun(total, enqueue_s, baseline_s, finished - started, first_poll_completed or 0,
                    enqueuer.requests, connections, enqueuer.kept_alive, started, checks)


def wait_for_state(client: Client, owner: str, job_id: str, state: str) -> None:
    deadline = time.perf_counter() + 30
    while time.perf_counter() < deadline:
        status, body = client.call("GET", f"{owner_path(owner)}/jobs/{job_id}")
        if status == 200 and body["job"]["state"] == state:
            return
        time.sleep(0.01)
    raise AssertionError(f"job {job_id} of {owner} never became {state}")


def owner_counts(queues: list[Wire]) -> dict[str, int]:
    counts = {"queued": 0, "running": 0, "settled": 0}
    for queue in queues:
        for name in ("queued", "running", "settled"):
            counts[name] += queue[name]
        for outcome, count in queue["outcomes"].items():
            counts[outcome] = counts.get(outcome, 0) + count
    return counts


# ----------------------------------------------------------------- baselines


def open_runtime(path: Path) -> tuple[sqlite3.Connection, OwnerRuntime]:
    connection = connect_owner_database(path)
    runtime = OwnerRuntime(Sqlite3Database(connection), execute=example_registry(),
                           is_alive=lambda job: False, wake=NoWake())
    return connection, runtime


def baseline_end_to_end(directory: Path, jobs: list[tuple[str, Wire]], per_request: int
                        ) -> float:
    """Seconds to ingest ``jobs`` in-process and tick every owner to idle."""
    directory.mkdir()
    calls = [(owner, [to_job(wire) for wire in chunk])
             for owner, chunk in batches(jobs, per_request)]
    opened: dict[str, tuple[sqlite3.Connection, OwnerRuntime]] = {}

    async def until_idle(runtime: OwnerRuntime) -> None:
        while (await runtime.tick()).status != "idle":
            pass

    async def run() -> None:
        for owner, chunk in calls:
            if owner not in opened:  # the server, too, creates the file in the first ingest
                opened[owner] = open_runtime(directory / f"{owner}.sqlite3")
            opened[owner][1].ingest_many(chunk)
        await asyncio.gather(*(until_idle(runtime) for _, runtime in opened.values()))

    started = time.perf_counter()
    asyncio.run(run())
    elapsed = time.perf_counter() - started
    for owner, (connection, runtime) in opened.items():
        want = sum(1 for who, _ in jobs if who == owner)
        got = owner_counts([{"queued": item.queued, "running": item.running,
                             "settled": item.settled, "outcomes": item.outcomes}
                            for item in runtime.status()])
        assert got.get("completed") == got["settled"] == want, (owner, got)
        connection.close()
    return elapsed


# --------------------------------------------------------------------- rows

SECTION = "HTTP host"


def figures(count: int, runs: dict[str, ServeRun], e2e: dict[str, float],
            owners: int) -> Figures:
    """The rows of one round: every serve figure beside the baseline measured with it."""
    single = runs["single"]
    connection = "keep-alive" if single.kept_alive else "a connection per request"
    rows = []
    for measure, name, how in (
            (f"enqueue, 1 job/request ({connection}), jobs run meanwhile", "single",
             "ingest_many([job]), just before"),
            ("enqueue, 1 job/request, tick loop held", "single-held",
             "ingest_many([job]), interleaved"),
            (f"enqueue, {BATCH} jobs/request, jobs run meanwhile", "batched",
             f"ingest_many({BATCH} jobs), just before"),
            (f"enqueue, {BATCH} jobs/request, tick loop held", "batched-held",
             f"ingest_many({BATCH} jobs), interleaved")):
        run = runs[name]
        rows.append(Row(SECTION, measure, count / run.enqueue_s, "jobs/s",
                        f"in-process {how}", count / run.baseline_s))
    for measure, name, how in (
            ("end to end, 1 owner, 1 job/request", "single", "ingest_many([job]), then ticks"),
            (f"end to end, 1 owner, {BATCH} jobs/request", "batched",
             f"ingest_many({BATCH}), then ticks"),
            (f"end to end, {owners} owners, {BATCH} jobs/request", "owners",
             f"{owners} runtimes, ingest_many({BATCH}), then ticks")):
        rows.append(Row(SECTION, measure, count / runs[name].end_to_end_s, "jobs/s",
                        f"in-process {how}", count / e2e[name]))
    return Figures(rows=rows)


def measure_round(count: int, root: Path, owners: int = 8) -> tuple[Figures, dict[str, ServeRun]]:
    """Every serve run once, each end-to-end one followed by its in-process
    baseline (a run of seconds, measured right after the server stopped)."""
    one = make_jobs(count, 1, "one")
    spread = make_jobs(count, owners, "spread")
    runs: dict[str, ServeRun] = {}
    e2e: dict[str, float] = {}
    for name, jobs, per_request, hold in (
            ("single", one, 1, False), ("single-held", one, 1, True),
            ("batched", one, BATCH, False), ("batched-held", one, BATCH, True),
            ("owners", spread, BATCH, False)):
        runs[name] = serve_run(root / name, jobs, per_request, hold=hold)
        if not hold:
            e2e[name] = baseline_end_to_end(root / f"{name}-in-process-e2e", jobs, per_request)
    return figures(count, runs, e2e, owners), runs


def collect(*, quick: bool) -> Figures:
    """One round for the comparison command (5,000 jobs per run; quick 300)."""
    with tempfile.TemporaryDirectory(prefix="tickwork-bench-") as temp:
        found, _ = measure_round(300 if quick else 5_000, Path(temp))
    return found


def late_baseline(count: int, rounds: int) -> None:
    """The held 100-per-request row with the baseline of the earlier version
    beside the interleaved one: the same ``ingest_many`` calls, run after the
    serve run had drained its jobs and stopped."""
    jobs = make_jobs(count, 1, "one")
    calls = [(owner, [to_job(wire) for wire in chunk]) for owner, chunk in batches(jobs, BATCH)]
    with tempfile.TemporaryDirectory(prefix="tickwork-bench-") as temp:
        for number in range(rounds):
            run = serve_run(Path(temp) / f"{number}", jobs, BATCH, hold=True)
            stopped = time.perf_counter()
            late = InProcess(Path(temp) / f"{number}-late", ["owner-0"], hold=False)
            late_s = sum(late.ingest(owner, chunk) for owner, chunk in calls)
            late.close()
            ratio, late_ratio = run.baseline_s / run.enqueue_s, late_s / run.enqueue_s
            print(f"round {number + 1}: serve {count / run.enqueue_s:,.0f} jobs/s; interleaved "
                  f"baseline {count / run.baseline_s:,.0f} (ratio {ratio:.0%});"
                  f" late baseline {count / late_s:,.0f} (ratio {late_ratio:.0%}),"
                  f" {stopped - run.start_s:.1f} s after the serve window began;"
                  f" load average {load()}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--rounds", type=int, default=1, help="rounds (default 1)")
    parser.add_argument("--late-baseline", action="store_true",
                        help="only the held 100-per-request row, beside both its interleaved "
                             "baseline and the earlier version's (after the drain and stop)")
    args = parser.parse_args()
    count = 300 if args.quick else 5_000
    if args.late_baseline:
        late_baseline(count, args.rounds)
        return
    print(f"tickwork serve over HTTP beside in-process OwnerRuntime, {count:,} echo jobs per "
          f"run, {QUEUES_PER_OWNER} queues per owner, {args.rounds} round(s)")
    print(f"  Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, "
          f"{os.cpu_count()} CPUs, load average before: " + load())
    started = time.perf_counter()
    for number in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="tickwork-bench-") as temp:
            found, runs = measure_round(count, Path(temp))
        print(f"round {number + 1}:")
        print_rows(found.rows)
    print("'jobs run meanwhile': the owner's tick loop runs the jobs in the server's one event")
    print("loop, so a request that arrives while the loop drains waits for it. 'tick loop")
    print("held': a running sleep job parks each owner's tick loop, so the enqueues run alone,")
    print("like the baseline, whose calls are interleaved with the requests.")
    for label, name in (
            ("1 job/request", "single"), ("1 job/request, held", "single-held"),
            (f"{BATCH} jobs/request", "batched"), (f"{BATCH} jobs/request, held", "batched-held"),
            (f"{BATCH} jobs/request, 8 owners", "owners")):
        run = runs[name]
        line = (f"{label}: {run.requests:,} enqueue requests over {run.connections} TCP "
                f"connection(s), {'kept alive' if run.kept_alive else 'closed by the server'}")
        if "held" not in label:
            line += (f"; {run.completed_at_last_enqueue:,} of {run.jobs:,} completed when the "
                     "last enqueue was answered")
        print(line)
        for check in run.checks:
            print(f"  verify: {check}")
    print(f"load average after: {load()}; whole run {time.perf_counter() - started:.1f} s")


def load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


if __name__ == "__main__":
    main()
