"""The benchmarks keep running (their figures are read by people, not asserted)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_quick(module: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """``python -m bench.<module> --quick``, which must succeed."""
    result = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", "--quick"],
        capture_output=True, text=True, cwd=ROOT, timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    return result


def test_owner_local_benchmark_runs_and_prints_every_figure() -> None:
    result = run_quick("owner_local")
    for label in ("engine ", "raw loop, bare table", "raw loop, engine table",
                  "single-job ingest()", "depth   1,000", "ratio",
                  "1,000 due, none waiting", "waiting:"):
        assert label in result.stdout, label


def test_serve_http_benchmark_runs_verifies_and_prints_every_figure() -> None:
    result = run_quick("serve_http")
    for label in ("| measure", "tickwork serve", "baseline (same run)", "| ratio",
                  "enqueue, 1 job/request (keep-alive)", "enqueue, 100 jobs/request",
                  "tick loop held", "end to end, 1 owner", "end to end, 8 owners",
                  "verify: enqueue answered 'queued' 300 of 300 times",
                  "verify: status route: 8 owner(s), completed 300",
                  "verify: server's tick counter: 300 settlements"):
        assert label in result.stdout, label


def test_durable_object_benchmark_runs_under_real_pyodide_and_prints_every_figure() -> None:
    result = run_quick("durable_object", timeout=600)
    for label in ("real Pyodide 0.28.2", "alarm loop, 1 owner, 200 no-op jobs",
                  "raw claim+settle statements, same sql.exec",
                  "FFI round trips per job, alarm loop", "FFI round trips per job, ingest()",
                  "one FFI round trip (no-op JS function)",
                  "engine's claim UPDATE through sql.exec", "time crossing the FFI", "ratio"):
        assert label in result.stdout, label


def test_durable_object_benchmark_fails_loudly_without_node(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.durable_object import collect

    monkeypatch.setenv("PATH", "")
    with pytest.raises(RuntimeError, match="needs node"):
        collect(quick=True)
