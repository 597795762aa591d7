"""The Durable Object owner under real Pyodide: its alarm loop and what each storage call costs.

    python -m bench.durable_object            # 2,000 jobs, best of 3 (FFI counted over 200)
    python -m bench.durable_object --quick    # 200 jobs, 1 round (counted over 50)

Runs ``node bench/durable_object.mjs``: npm ``pyodide@0.28.2`` (the build
workerd runs for tickwork's compatibility date) under Node, tickwork's
staged Workers bundle, and a JS ``ctx.storage`` with workerd's measured
rules (``tests/pyodide/js/do_storage.mjs``); the measurements themselves run
inside Pyodide (``bench/durable_object_inside.py``). Prints:

* jobs/s of ``runtime.ingest()`` (one job per call) beside a raw INSERT per
  ``sql.exec``;
* jobs/s of the ``JobOwner``'s ``alarm()``, delivered as the runtime does
  until no alarm is armed, over no-op jobs ingested first (best of the
  rounds, alternating with the baseline's), beside the raw claim UPDATE ...
  RETURNING + settle UPDATE loop through the same ``sql.exec`` (so the ratio
  is what the engine costs over the storage);
* FFI round trips per job (every JS call, property read, iteration step,
  ``to_py``) for ingest and for the alarm loop, beside the raw statements';
* us per round trip (a no-op JS function; ``SELECT 1`` through ``exec``; the
  engine's claim and settle statements beside the raw ones), of one
  event-loop yield, and the time of an alarm-loop job spent inside storage
  calls and crossing the FFI.

The SQLite behind the stand-in is sql.js (WebAssembly), several times slower
per statement than workerd's native SQLite with its statement cache: there,
the same round trips are a larger share of a job. Needs ``npm ci``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from bench.report import Figures, Row, print_rows

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "durable_object.mjs"
SECTION = "Durable Object"
#: Seconds the Node side may take (Pyodide's start is 3-5 s of it).
TIMEOUT_S = 900


def run_node(jobs: int, counted: int, rounds: int) -> dict[str, Any]:
    """The inside measurements' JSON; raises naming what is missing or failed."""
    node = shutil.which("node")
    if node is None:
        raise RuntimeError("bench.durable_object needs node (Node 20) on PATH")
    if not (ROOT / "node_modules" / "pyodide").exists():
        raise RuntimeError(f"bench.durable_object needs npm's pyodide in {ROOT / 'node_modules'}:"
                           " run npm ci")
    result = subprocess.run(
        [node, str(SCRIPT), "--jobs", str(jobs), "--counted", str(counted),
         "--rounds", str(rounds)],
        cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{SCRIPT.name} failed (exit {result.returncode}):\n"
                           f"{result.stderr[-4000:]}")
    lines = result.stdout.strip().splitlines()
    if not lines:
        raise RuntimeError(f"{SCRIPT.name} printed nothing:\n{result.stderr[-4000:]}")
    measured: dict[str, Any] = json.loads(lines[-1])
    return measured


def _statement_us(statements: list[dict[str, Any]], prefix: str) -> float | None:
    for statement in statements:
        if statement["sql"].startswith(prefix):
            return float(statement["us_each"])
    return None


#: The engine's statement beside the raw loop's, by the start of their text.
_STATEMENTS = tuple(
    (name, f"UPDATE tickwork_jobs SET state = '{state}'", f"UPDATE raw_jobs SET state = '{state}'")
    for name, state in (("claim", "running"), ("settle", "settled")))


def rows(measured: dict[str, Any]) -> list[Row]:
    alarm, raw, ffi = measured["alarm"], measured["raw"], measured["ffi"]
    prices, tick, ingest = measured["crossing"], ffi["tick"], ffi["ingest"]
    jobs = alarm["jobs"]
    # Shares are of a job of the counted run itself (the counting slows it a little).
    counted_job_us = 1e6 * tick["seconds_per_job_counted"]
    found = [
        Row(SECTION, f"alarm loop, 1 owner, {jobs:,} no-op jobs", alarm["jobs_per_s"], "jobs/s",
            "raw claim+settle statements, same sql.exec", raw["jobs_per_s"]),
        Row(SECTION, "ingest(), 1 job per call", alarm["ingest_per_s"], "jobs/s",
            "raw INSERT through sql.exec", raw["insert_per_s"]),
        Row(SECTION, "FFI round trips per job, alarm loop", tick["calls_per_job"],
            "FFI calls/job", "raw claim+settle loop", ffi["raw"]["calls_per_job"],
            lower_is_better=True),
        Row(SECTION, "FFI round trips per job, ingest()", ingest["calls_per_job"],
            "FFI calls/job", "raw INSERT", ffi["raw_insert"]["calls_per_job"],
            lower_is_better=True),
        Row(SECTION, "one FFI round trip (no-op JS function)", prices["noop_call_us"], "us/call",
            "", lower_is_better=True),
        Row(SECTION, "one event-loop yield (await asyncio.sleep(0))", prices["yield_us"],
            "us/call", "", lower_is_better=True),
        Row(SECTION, "SELECT 1 through sql.exec + toArray()", prices["select1_exec_toarray_us"],
            "us/call", "no-op JS function", prices["noop_call_us"], lower_is_better=True),
    ]
    found += [
        Row(SECTION, "a 16-column row read through DurableObjectDatabase",
            prices["wide_row_adapter_us"], "us/call", "sql.exec + toArray() alone",
            prices["wide_row_exec_toarray_us"], lower_is_better=True),
        Row(SECTION, "an UPDATE changing no row through DurableObjectDatabase",
            prices["no_row_adapter_us"], "us/call", "sql.exec + toArray() alone",
            prices["no_row_exec_toarray_us"], lower_is_better=True),
    ]
    for name, engine, baseline in _STATEMENTS:
        # Absent when the engine's loop no longer runs that statement on its own.
        engine_us = _statement_us(tick["statements"], engine)
        raw_us = _statement_us(ffi["raw"]["statements"], baseline)
        if engine_us is not None:
            found.append(Row(SECTION, f"engine's {name} UPDATE through sql.exec", engine_us,
                             "us/call", f"raw {name} UPDATE", raw_us, lower_is_better=True))
    found += [
        Row(SECTION, "alarm-loop job: time inside storage calls",
            1e6 * tick["seconds_inside_per_job"], "us/job", "the whole job (counted run)",
            counted_job_us, lower_is_better=True),
        Row(SECTION, "alarm-loop job: time crossing the FFI", tick["crossing_us_per_job"],
            "us/job", "the whole job (counted run)", counted_job_us, lower_is_better=True),
    ]
    return found


def _sizes(quick: bool) -> tuple[int, int, int]:
    """Jobs per loop, jobs counted, rounds."""
    return (200, 50, 1) if quick else (2_000, 200, 3)


def collect(*, quick: bool) -> Figures:
    return Figures(rows=rows(run_node(*_sizes(quick))))


def _details(measured: dict[str, Any]) -> None:
    for name in ("ingest", "tick"):
        part = measured["ffi"][name]
        kinds = ", ".join(f"{kind} {n:.2f}" for kind, n in part["by_kind_per_job"].items())
        print(f"  {name}: round trips per job by kind: {kinds}")
        for statement in part["statements"][:4]:
            print(f"    {statement['per_job']:.2f}/job  {statement['us_each']:,.0f} us  "
                  f"{statement['sql'][:60]}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="200 jobs instead of 2,000")
    args = parser.parse_args(argv)
    jobs, counted, rounds = _sizes(args.quick)
    measured = run_node(jobs, counted, rounds)
    print(f"Durable Object owner under real Pyodide {measured['pyodide']} "
          f"({jobs:,} jobs, best of {rounds}; FFI counted over {counted})")
    print_rows(rows(measured))
    _details(measured)


if __name__ == "__main__":
    main()
