"""``node worker/bundle.mjs [out-dir]``: it empties its output folder, so it
stages only into a folder inside dist/, and it leaves out exactly the
CPython-only files of worker/bundle-exclude.json."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "worker" / "bundle.mjs"
EXCLUDED = json.loads((REPO / "worker" / "bundle-exclude.json").read_text())["excluded"]


def node() -> str:
    found = os.environ.get("TICKWORK_NODE") or shutil.which("node")
    assert found is not None, "these tests need Node.js (20 or newer) on PATH"
    return found


def bundle(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([node(), str(BUNDLE), *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {path.relative_to(folder).as_posix(): (path.stat().st_size, path.stat().st_mtime_ns)
            for path in folder.rglob("*") if path.is_file()}


@pytest.mark.parametrize("out", ["tickwork", ".", "dist", "distx", "dist/../tickwork",
                                 "worker", "/tmp/tickwork-bundle-elsewhere"])
def test_an_output_outside_dist_is_refused_and_nothing_is_removed(
        out: str, tmp_path: Path) -> None:
    before = {name: snapshot(REPO / name) for name in ("tickwork", "worker")}
    result = bundle(out)
    assert result.returncode != 0, result.stdout
    assert "refusing to stage" in result.stderr and "inside" in result.stderr, result.stderr
    # a message, not a stack trace
    assert not any(line.lstrip().startswith("at ") for line in result.stderr.splitlines())
    assert {name: snapshot(REPO / name) for name in ("tickwork", "worker")} == before


def test_an_output_inside_dist_stages_the_runtime_modules_without_the_excluded() -> None:
    out = REPO / "dist" / f"test-bundle-{os.getpid()}"
    try:
        result = bundle(str(out.relative_to(REPO)))
        assert result.returncode == 0, result.stderr
        staged = {path.relative_to(out).as_posix() for path in out.rglob("*") if path.is_file()}
        assert "worker/entry.py" in staged and "tickwork/__init__.py" in staged
        assert "durable_objects/job_owner.py" in staged
        assert all(name.endswith(".py") for name in staged)
        for rule in EXCLUDED:
            assert not any(name.startswith(rule) if rule.endswith("/") else name == rule
                           for name in staged), rule
        # Each exclusion names something that exists (a stale rule would hide a typo).
        for rule in EXCLUDED:
            assert (REPO / rule.rstrip("/")).exists(), rule
    finally:
        shutil.rmtree(out, ignore_errors=True)
