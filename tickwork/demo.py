"""``python -m tickwork demo``: the engine end to end on the embedded default.

Runs on CPython with ``sqlite3`` (never loaded by Workers). It ingests jobs
across several queues, lanes and priorities, kills a worker process in the
middle of a job, recovers that job on a rebuilt runtime over the same
database file, and prints every job's outcome.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tickwork import (
    AbortSignal,
    Completed,
    ExecutionResult,
    Failed,
    Job,
    JobRecord,
    OwnerRuntime,
    Recovery,
    TickResult,
)
from tickwork.hosts.cpython.sqlite_files import open_sqlite3

DEMO_JOBS = (
    # job_id, queue, lane, priority, payload
    ("charge-card-17", "billing", "tenant-acme", 9, {"task": "charge", "declined": True}),
    ("welcome-email-4", "emails", "tenant-acme", 5, {"task": "email"}),
    ("newsletter-nov", "emails", "tenant-globex", 0, {"task": "email"}),
    ("sync-crm-2", "crm", "tenant-globex", 3, {"task": "sync"}),
    ("resize-photo-8", "images", "tenant-initech", 1, {"task": "resize"}),
    ("export-ledger", "exports", "tenant-suspended", 4, {"task": "export"}),
)
CRASHING_JOB = ("nightly-report", "reports", "tenant-initech", 2, {"task": "report"})


class NoTimerWake:
    """The embedded host's wake: a real host would arm a timer here."""

    def recompute(self) -> None:
        pass


async def execute(job: JobRecord, signal: AbortSignal) -> ExecutionResult:
    """The demo's executor: what each kind of job does."""
    await asyncio.sleep(0.01)  # pretend to work
    task = job.payload["task"]
    if task == "charge" and job.payload.get("declined"):
        return Failed("card_declined")
    if task == "sync":
        raise ConnectionError("CRM API unreachable")
    return Completed()


def open_runtime(path: Path, executor: Any = execute, is_alive: Any = None) -> OwnerRuntime:
    return OwnerRuntime(
        open_sqlite3(path),
        execute=executor,
        # The worker that ran a claim is gone when its process is: in this
        # demo every claim found at start-up belongs to a dead process.
        is_alive=is_alive or (lambda job: False),
        wake=NoTimerWake(),
    )


async def crash_worker(path: Path) -> None:
    """Child process: claim the waiting job, announce it, then hang until killed."""

    async def hang(job: JobRecord, signal: AbortSignal) -> ExecutionResult:
        print(f"started {job.job_id}", flush=True)
        await asyncio.sleep(3600)
        return Completed()

    await open_runtime(path, executor=hang).tick()


def run_crashing_worker(path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-m", "tickwork.demo", "--crash-worker", str(path)],
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    print(f"  worker process {child.pid}: {line}")
    child.send_signal(signal.SIGKILL)
    child.wait()
    print(f"  worker process {child.pid}: killed with SIGKILL in the middle of the job")


def describe(result: TickResult) -> str:
    if result.status == "settled":
        reason = f" ({result.failure_reason})" if result.failure_reason else ""
        return f"settled {result.job_id}: {result.outcome}{reason}"
    if result.status in ("requeued", "liveness_unknown"):
        return f"{result.status} {result.job_id}" + (f": {result.reason}" if result.reason else "")
    return result.status


def summary(records: list[JobRecord]) -> str:
    header = ("job", "queue", "lane", "prio", "outcome", "reason", "recoveries")
    rows = [header] + [
        (r.job_id, r.queue, r.lane, str(r.priority), r.outcome or r.state,
         r.failure_reason or "-", str(r.recoveries))
        for r in records
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


async def demo(directory: Path) -> list[JobRecord]:
    path = directory / "demo.sqlite3"
    print(f"tickwork demo: owner-local runtime on sqlite3 ({path})\n")

    print("1. A worker process claims a job and dies mid-execution")
    first = open_runtime(path)
    first.ingest(Job(*CRASHING_JOB[:4], CRASHING_JOB[4], recovery=Recovery(max_recoveries=1)))
    run_crashing_worker(path)
    stuck = first.read(CRASHING_JOB[0])
    assert stuck is not None
    print(f"  {stuck.job_id} is left '{stuck.state}' with no live executor\n")

    print("2. A rebuilt runtime over the same database ingests more work")
    runtime = open_runtime(path)
    for job_id, queue, lane, priority, payload in DEMO_JOBS:
        status = runtime.ingest(Job(job_id, queue, lane, priority, payload))
        print(f"  ingest {job_id:16} queue={queue:8} lane={lane:16} priority={priority}: {status}")
    replay = runtime.ingest(Job(*DEMO_JOBS[1][:4], DEMO_JOBS[1][4]))
    print(f"  ingest {DEMO_JOBS[1][0]:16} again (identical replay): {replay}")
    cancel = runtime.cancel("newsletter-nov", "cancel-newsletter-1")
    print(f"  cancel newsletter-nov: {cancel.status}")
    failed = runtime.fail_lane("tenant-suspended", "tenant_suspended")
    print(f"  fail_lane tenant-suspended: {failed.settled} job(s) failed, more={failed.more}\n")

    print("3. Ticks until idle (each tick: recover, or settle a cancellation, or run one job)")
    number = 0
    while True:
        result = await runtime.tick()
        number += 1
        print(f"  tick {number:2}: {describe(result)}")
        if result.status == "idle":
            break

    records = [runtime.read(job[0]) for job in (CRASHING_JOB, *DEMO_JOBS)]
    return [record for record in records if record is not None]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--crash-worker"]:
        asyncio.run(crash_worker(Path(args[1])))
        return 0
    with tempfile.TemporaryDirectory(prefix="tickwork-demo-") as directory:
        records = asyncio.run(demo(Path(directory)))
    print("\nEvery job's outcome:\n")
    print(summary(records))
    raised = [record for record in records if record.error is not None]
    if raised:
        print("\nWhat raised, as each job's record keeps it (job.error, traceback included):\n")
        for record in raised:
            assert record.error is not None
            print(f"  {record.job_id}: {record.error.line}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
