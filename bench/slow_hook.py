"""A slow event hook, called directly and through ``EventBuffer``, beside no hook.

    python -m bench.slow_hook [--jobs 300] [--hook-ms 10]

Drains ``--jobs`` no-op jobs on one sqlite3 owner (``open_sqlite3`` +
``OwnerRuntime.drain``) three ways in the same run, each on a fresh file:
with no hook (the baseline), with a hook that sleeps ``--hook-ms`` per event
called directly (how a runtime calls ``on_event``), and with the same hook
wrapped in ``tickwork.hosts.cpython.EventBuffer`` (how ``tickwork serve``
calls its ``--on-event`` hooks). Prints the drain's seconds and jobs/s, and
for the buffered hook how long its thread took to catch up after the drain.
Target: the buffered drain within 1.5x the baseline's time.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tickwork import Completed, Job, OwnerRuntime
from tickwork.events import Event
from tickwork.hosts.cpython import EventBuffer, open_sqlite3


class _Wake:
    def recompute(self) -> None:
        return None


async def _complete(job: Any, signal: Any) -> Completed:
    return Completed()


def _drain(directory: Path, jobs: int, hook: Callable[[Event], object] | None) -> float:
    runtime = OwnerRuntime(open_sqlite3(directory / "jobs.sqlite3"), execute=_complete,
                           is_alive=lambda record: False, wake=_Wake(), on_event=hook)
    for start in range(0, jobs, 100):
        runtime.ingest_many([Job(f"j{n}", f"q{n % 10}", f"q{n % 10}", 0, None, None)
                             for n in range(start, min(jobs, start + 100))])
    started = time.perf_counter()
    settled = asyncio.run(runtime.drain())
    took = time.perf_counter() - started
    assert len(settled) == jobs, len(settled)
    return took


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.slow_hook")
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--hook-ms", type=float, default=10.0)
    options = parser.parse_args(argv)

    def slow(event: Event) -> None:
        time.sleep(options.hook_ms / 1000)

    rows: list[tuple[str, float, str]] = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for name in ("none", "direct", "buffered"):
            (root / name).mkdir()
        baseline = _drain(root / "none", options.jobs, None)
        rows.append(("no hook (baseline)", baseline, ""))
        rows.append(("hook called directly", _drain(root / "direct", options.jobs, slow), ""))
        buffer = EventBuffer(slow)
        buffered = _drain(root / "buffered", options.jobs, buffer)
        caught_up = time.perf_counter()
        buffer.flush()
        behind = time.perf_counter() - caught_up
        buffer.close()
        rows.append(("hook in EventBuffer", buffered,
                     f"hook thread caught up {behind:.2f} s later; {buffer.dropped} dropped"))
    print(f"{options.jobs} jobs, a hook sleeping {options.hook_ms:g} ms per event")
    print(f"{'':24} {'drain s':>8} {'jobs/s':>8} {'x baseline':>10}")
    for name, seconds, note in rows:
        print(f"{name:24} {seconds:8.3f} {options.jobs / seconds:8.0f} "
              f"{seconds / baseline:10.2f}  {note}")
    met = rows[2][1] <= 1.5 * baseline
    print(f"target (buffered within 1.5x baseline): {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
