"""The benchmarks keep running (their figures are read by people, not asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_owner_local_benchmark_runs_and_prints_every_figure() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.owner_local", "--quick"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    for label in ("engine ", "raw loop, bare table", "raw loop, engine table",
                  "single-job ingest()", "depth   1,000", "ratio",
                  "1,000 due, none waiting", "waiting:"):
        assert label in result.stdout, label


def test_serve_http_benchmark_runs_verifies_and_prints_every_figure() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.serve_http", "--quick"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    for label in ("[HTTP host] enqueue, 1 job/request (keep-alive), jobs run meanwhile",
                  "in-process ingest_many([job]), just before",
                  "[HTTP host] enqueue, 100 jobs/request, tick loop held",
                  "in-process ingest_many(100 jobs), interleaved", "ratio",
                  "end to end, 1 owner", "end to end, 8 owners",
                  "verify: enqueue answered 'queued' 300 of 300 times",
                  "verify: status route: 8 owner(s), completed 300",
                  "verify: server's tick counter: 300 settlements"):
        assert label in result.stdout, label


def test_serve_http_prints_the_held_row_beside_its_late_and_interleaved_baselines() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.serve_http", "--quick", "--late-baseline"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith("round 1: serve "), line
    for label in ("interleaved baseline", "late baseline", "s after the serve window began"):
        assert label in line, label
