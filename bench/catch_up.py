"""Schedule catch-up after an outage: the first tick, bounded and unbounded.

    python -m bench.catch_up [--schedules 100] [--catch-up 1000] [--days 30]

``--schedules`` interval schedules (every minute, ``catch_up`` slots each)
on one sqlite3 owner (``open_sqlite3``), then the clock jumps ``--days``
ahead: the first ``fire_schedules()`` call, as every tick makes it, is timed
twice in the same run, each on a fresh file: with the bound of
``MAX_SLOTS_PER_TICK`` slots a call (today's) and without one (the baseline,
what a call did before: every due slot at once). Also prints how many calls
the bounded runtime takes to catch up and its slowest call. Target: the
bounded first call under 50 ms.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from tickwork import OwnerRuntime, Schedule, ScheduledJob
from tickwork.hosts.cpython import open_sqlite3
from tickwork.lifecycle import operations

START_MS = 1_796_000_000_000


class NoWake:
    def recompute(self) -> None:
        return None


async def never_run(job: object, signal: object) -> None:  # pragma: no cover - never run
    raise AssertionError("no job runs here")


def _runtime(path: Path, clock: list[int], schedules: int, catch_up: int) -> OwnerRuntime:
    runtime = OwnerRuntime(open_sqlite3(path), execute=never_run, is_alive=lambda job: False,
                           wake=NoWake(), clock=lambda: clock[0])
    for number in range(schedules):
        runtime.put_schedule(Schedule(f"s{number}", ScheduledJob("q", "q"), every_ms=60_000,
                                      catch_up=catch_up))
    return runtime


def _calls(directory: Path, options: argparse.Namespace, bound: int) -> list[tuple[int, float]]:
    clock = [START_MS]
    runtime = _runtime(directory / "jobs.sqlite3", clock, options.schedules, options.catch_up)
    clock[0] += options.days * 86_400_000
    saved = operations.MAX_SLOTS_PER_TICK
    operations.MAX_SLOTS_PER_TICK = bound  # type: ignore[misc]
    try:
        calls = []
        while True:
            started = time.perf_counter()
            made = runtime.fire_schedules()
            calls.append((made, time.perf_counter() - started))
            if made == 0:
                return calls
    finally:
        operations.MAX_SLOTS_PER_TICK = saved  # type: ignore[misc]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.catch_up")
    parser.add_argument("--schedules", type=int, default=100)
    parser.add_argument("--catch-up", type=int, default=1000)
    parser.add_argument("--days", type=int, default=30)
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        (root / "unbounded").mkdir()
        (root / "bounded").mkdir()
        unbounded = _calls(root / "unbounded", options, 10**12)
        bounded = _calls(root / "bounded", options, operations.MAX_SLOTS_PER_TICK)
    total = sum(made for made, _ in bounded)
    print(f"{options.schedules} schedules x catch_up {options.catch_up}, "
          f"{options.days} days late: {total} slot jobs to create")
    print(f"{'':34} {'first call':>10} {'slowest':>9} {'calls':>6}")
    for name, calls in (("unbounded (baseline)", unbounded),
                        (f"bounded ({operations.MAX_SLOTS_PER_TICK} slots a call)", bounded)):
        working = [seconds for made, seconds in calls if made]
        print(f"{name:34} {calls[0][1] * 1000:8.1f} ms {max(working) * 1000:6.1f} ms "
              f"{len(working):6d}")
    met = bounded[0][1] < 0.05
    print(f"target (bounded first call under 50 ms): {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
