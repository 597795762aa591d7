"""``tickwork serve`` over HTTP, each figure beside a baseline measured in the same run.

    python -m bench.serve_http            # full sizes, 3 rounds (about a minute on 2 cores)
    python -m bench.serve_http --quick    # smaller sizes, for a smoke run

The server is ``python -m tickwork serve`` as a subprocess on loopback (port
0, a fresh temporary data directory and a fixed token for every run, the
default executors: payload ``{"kind": "echo"}`` runs ``echo`` from
``tickwork/hosts/cpython/examples.py``, which completes at once). The client is the
standard library's ``http.client`` on one persistent connection for the
enqueues (the server keeps HTTP/1.1 connections alive; the run counts the
connections it opened and prints the count) and a second one for the polls.

1. Enqueue throughput: N jobs (5,000; ``--quick`` 300) for one owner, one job
   per request and then 100 per request (``{"jobs": [...]}``). Baseline: the
   same jobs through an in-process ``OwnerRuntime.ingest_many`` (the route
   calls ``ingest_many`` for a single job too) on a sqlite3 WAL file opened
   with the server's own connection settings (``synchronous=FULL``), i.e.
   what the server does per request, without HTTP, JSON and the event loop.
   Every serve run is measured right next to its baselines, in ``--rounds``
   rounds (3) with the order alternating (``measure_in_pairs``: the baselines
   are fsync-bound, so they follow the disk's state); the table shows each
   best rate and the ratios pair by pair. "Jobs run meanwhile": the plain case, where the
   owner's tick loop runs the jobs in the same event loop as the requests.
   An ``echo`` tick never suspends (the executor is awaited directly and
   completes at once), so the loop keeps the event loop until the owner is
   idle and a request that arrives meanwhile waits for the whole backlog;
   the run prints how many jobs were already completed when the last enqueue
   was answered. "Tick loop held": each owner first gets a running ``sleep``
   job, which parks its tick loop, so the enqueues run alone, like the
   baseline (which only ingests); the holder is cancelled afterwards.
2. End to end: from the first enqueue request until every job reads back
   settled ``completed`` through ``GET /v1/owners/{owner}/queues``, polled
   every 50 ms after the last enqueue was answered (so the figure is late by
   up to one poll), with 1 owner and with 8 owners (jobs spread round robin,
   batches interleaved across owners). Baseline: in-process runtimes over
   WAL files (one per owner, like the server) ingesting the same batches and
   then ticking every owner to idle, in one event loop as the server does.
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
    end_to_end_s: float
    completed_at_last_enqueue: int
    requests: int
    connections: int
    kept_alive: bool
    checks: list[str] = field(default_factory=list)


HOLDER = "holder"


def serve_run(directory: Path, jobs: list[tuple[str, Wire]], per_request: int, *,
              hold: bool = False) -> ServeRun:
    """Enqueue ``jobs`` over HTTP, poll until all completed, verify, stop the server.

    With ``hold``, each owner first gets a long ``sleep`` job (queue
    ``holder``) and the run waits until it is running: the owner's tick loop
    then awaits it and runs nothing else, so the timed enqueues do not share
    the event loop with ticks. The holder is cancelled after the last
    enqueue; the end-to-end time of such a run is not a figure.
    """
    directory.mkdir()
    expected: dict[str, int] = {}
    for owner, _ in jobs:
        expected[owner] = expected.get(owner, 0) + 1
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
        queued = 0
        started = time.perf_counter()
        if per_request == 1:
            for owner, wire in jobs:
                status, body = enqueuer.call("POST", f"{owner_path(owner)}/jobs", wire)
                if status != 201:
                    raise AssertionError(f"enqueue answered {status}: {body}")
                queued += body["status"] == "queued"
        else:
            for owner, chunk in batches(jobs, per_request):
                status, body = enqueuer.call("POST", f"{owner_path(owner)}/jobs",
                                             {"jobs": chunk})
                if status != 200:
                    raise AssertionError(f"enqueue answered {status}: {body}")
                queued += sum(item["status"] == "queued" for item in body["jobs"])
        enqueued = time.perf_counter()
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
        if {name: got.get(name, 0) for name in right} != right or sum(
                count for name, count in got.items() if name not in right):
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
    return ServeRun(total, enqueued - started, finished - started, first_poll_completed or 0,
                    enqueuer.requests, connections, enqueuer.kept_alive, checks)


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


def baseline_ingest(directory: Path, jobs: list[tuple[str, Wire]], per_request: int) -> float:
    """Seconds to ingest ``jobs`` in-process, ``per_request`` per ingest_many call."""
    directory.mkdir()
    opened = {owner: open_runtime(directory / f"{owner}.sqlite3") for owner in
              dict.fromkeys(owner for owner, _ in jobs)}
    calls = [(owner, [to_job(wire) for wire in chunk])
             for owner, chunk in batches(jobs, per_request)]
    started = time.perf_counter()
    for owner, chunk in calls:
        statuses = opened[owner][1].ingest_many(chunk)
        assert statuses == ["queued"] * len(chunk), statuses
    elapsed = time.perf_counter() - started
    for connection, _ in opened.values():
        connection.close()
    return elapsed


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


# --------------------------------------------------------------------- table


@dataclass
class Row:
    measure: str
    serve: str
    baseline: str
    ratio: str


def rate(jobs: int, seconds: float) -> str:
    return f"{jobs / seconds:,.0f} jobs/s"


def print_table(rows: list[Row]) -> None:
    header = Row("measure", "tickwork serve", "baseline (same run)", "ratio")
    widths = [max(len(getattr(row, name)) for row in [header, *rows])
              for name in ("measure", "serve", "baseline", "ratio")]

    def line(row: Row) -> str:
        cells = (row.measure, row.serve, row.baseline, row.ratio)
        return "| " + " | ".join(cell.ljust(width) for cell, width in
                                 zip(cells, widths, strict=True)) + " |"

    print(line(header))
    print("|" + "|".join("-" * (width + 2) for width in widths) + "|")
    for row in rows:
        print(line(row))


#: A measurement: (name, seconds of one run in a fresh directory).
Measure = tuple[str, Any]


def measure_in_pairs(rounds: int, pairs: list[tuple[Measure, list[Measure]]], root: Path
                     ) -> tuple[dict[str, list[float]], dict[str, list[ServeRun]]]:
    """Run each serve measurement right next to its baselines, ``rounds`` times,
    serve first in even rounds and baselines first in odd ones.

    The baselines are fsync-bound (WAL, ``synchronous=FULL``, one fsync per
    ``ingest_many``), so their speed follows the disk's state: one run of the
    same function read 48-59k jobs/s as the first thing in a process and 25k
    right after a serve run. Measured next to its serve figure, each baseline
    sees the disk that figure saw; the ratios are taken pair by pair."""
    seconds: dict[str, list[float]] = {}  # "<serve>/<baseline>" -> per round
    runs: dict[str, list[ServeRun]] = {}
    made = 0
    for number in range(rounds):
        for (serve_name, serve), baselines in pairs:
            steps = [(serve_name, serve), *baselines]
            if number % 2:
                steps = [*baselines, (serve_name, serve)]
            for name, run in steps:
                made += 1
                result = run(root / f"{made:03}-{name}")
                if isinstance(result, ServeRun):
                    runs.setdefault(name, []).append(result)
                else:
                    seconds.setdefault(f"{serve_name}/{name}", []).append(result)
    return seconds, runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--rounds", type=int, default=None,
                        help="pairs of serve and baseline runs (default 3; --quick 1)")
    args = parser.parse_args()
    count = 300 if args.quick else 5_000
    rounds = args.rounds or (1 if args.quick else 3)
    many = 8
    print(f"tickwork serve over HTTP beside in-process OwnerRuntime, {count:,} echo jobs per "
          f"run, {QUEUES_PER_OWNER} queues per owner, {rounds} round(s) of adjacent pairs")
    print(f"  Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}, "
          f"{os.cpu_count()} CPUs, load average before: " + load())
    started = time.perf_counter()
    one = make_jobs(count, 1, "one")
    spread = make_jobs(count, many, "spread")

    def base_ingest(per_request: int) -> Measure:
        name = f"base-ingest-{per_request}"
        return name, lambda d: baseline_ingest(d, one, per_request)

    def base_e2e(name: str, jobs: list[tuple[str, Wire]], per_request: int) -> Measure:
        return name, lambda d: baseline_end_to_end(d, jobs, per_request)

    pairs: list[tuple[Measure, list[Measure]]] = [
        (("single", lambda d: serve_run(d, one, 1)),
         [base_ingest(1), base_e2e("base-e2e-single", one, 1)]),
        (("single-held", lambda d: serve_run(d, one, 1, hold=True)), [base_ingest(1)]),
        (("batched", lambda d: serve_run(d, one, BATCH)),
         [base_ingest(BATCH), base_e2e("base-e2e-one", one, BATCH)]),
        (("batched-held", lambda d: serve_run(d, one, BATCH, hold=True)), [base_ingest(BATCH)]),
        (("owners", lambda d: serve_run(d, spread, BATCH)),
         [base_e2e("base-e2e-many", spread, BATCH)]),
    ]
    with tempfile.TemporaryDirectory(prefix="tickwork-bench-") as temp:
        seconds, runs = measure_in_pairs(rounds, pairs, Path(temp))

    def figure(serve: str, base: str, end_to_end: bool = False) -> tuple[str, str, str]:
        """Best serve rate, best baseline rate, and the pairwise ratios."""
        served = [run.end_to_end_s if end_to_end else run.enqueue_s for run in runs[serve]]
        based = seconds[f"{serve}/{base}"]
        ratios = sorted(base_s / serve_s for serve_s, base_s in zip(served, based, strict=True))
        spread_ = "" if len(ratios) == 1 else f" ({ratios[0]:.0%}-{ratios[-1]:.0%})"
        best_serve, best_base = min(served), min(based)
        timing = f" ({best_serve:.2f} s)" if end_to_end else ""
        base_timing = f" ({best_base:.2f} s)" if end_to_end else ""
        return (f"{rate(count, best_serve)}{timing}", f"{rate(count, best_base)}{base_timing}",
                f"{ratios[len(ratios) // 2]:.0%}{spread_}")

    single = runs["single"][-1]
    connection = "keep-alive" if single.kept_alive else "a connection per request"
    rows = []
    for label, serve, base, how in (
            (f"enqueue, 1 job/request ({connection}), jobs run meanwhile", "single",
             "base-ingest-1", "ingest_many([job])"),
            ("enqueue, 1 job/request, tick loop held", "single-held", "base-ingest-1",
             "ingest_many([job])"),
            (f"enqueue, {BATCH} jobs/request, jobs run meanwhile", "batched",
             f"base-ingest-{BATCH}", f"ingest_many({BATCH} jobs)"),
            (f"enqueue, {BATCH} jobs/request, tick loop held", "batched-held",
             f"base-ingest-{BATCH}", f"ingest_many({BATCH} jobs)")):
        served, based, ratio = figure(serve, base)
        rows.append(Row(label, served, f"{how}: {based}", ratio))
    for label, serve, base, how in (
            ("end to end, 1 owner, 1 job/request", "single", "base-e2e-single",
             "ingest_many([job]), then ticks"),
            (f"end to end, 1 owner, {BATCH} jobs/request", "batched", "base-e2e-one",
             f"ingest_many({BATCH}), then ticks"),
            (f"end to end, {many} owners, {BATCH} jobs/request", "owners", "base-e2e-many",
             f"{many} runtimes, ingest_many({BATCH}), then ticks")):
        served, based, ratio = figure(serve, base, end_to_end=True)
        rows.append(Row(label, served, f"{how}: {based}", ratio))
    print()
    print_table(rows)
    print()
    print("rates: the best of the rounds; ratio: tickwork serve's rate / the baseline's, pair by")
    print("pair (median, and min-max over the rounds; 100% = as fast as in-process).")
    print("'jobs run meanwhile': the owner's tick loop runs the jobs in the server's one event")
    print("loop; an echo tick never suspends, so a request that arrives while the loop drains")
    print("waits until the owner is idle. 'tick loop held': a running sleep job parks each")
    print("owner's tick loop, so the enqueues run alone, like the baseline (which only ingests).")
    for label, name in (
            ("1 job/request", "single"), ("1 job/request, held", "single-held"),
            (f"{BATCH} jobs/request", "batched"), (f"{BATCH} jobs/request, held", "batched-held"),
            (f"{BATCH} jobs/request, {many} owners", "owners")):
        run = runs[name][-1]
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
