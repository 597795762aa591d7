"""``wrangler deploy --dry-run`` on the repository's wrangler.toml: it builds
offline, lists the bindings, and uploads exactly the runtime modules.

Needs the pinned wrangler from ``npm ci`` (CI runs it); without it this test
fails, saying so. The build step stages the modules into dist/worker/ (a
gitignored build directory), as a real deploy does.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WRANGLER = REPO / "node_modules" / ".bin" / "wrangler"

#: The runtime packages, and their CPython-only parts that must never be
#: uploaded (the list worker/bundle.mjs reads too).
RUNTIME_PACKAGES = ("tickwork", "worker", "durable_objects")
CPYTHON_ONLY: tuple[str, ...] = tuple(
    json.loads((REPO / "worker" / "bundle-exclude.json").read_text())["excluded"])


def runtime_modules() -> set[str]:
    found = set()
    for package in RUNTIME_PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            name = path.relative_to(REPO).as_posix()
            if "__pycache__" in path.parts or any(
                    name.startswith(rule) if rule.endswith("/") else name == rule
                    for rule in CPYTHON_ONLY):
                continue
            found.add(name)
    return found


def test_dry_run_lists_the_bindings_and_uploads_exactly_the_runtime_modules(
        tmp_path: Path) -> None:
    assert WRANGLER.exists(), (
        f"{WRANGLER} is missing: run `npm ci` in {REPO} (it installs the pinned wrangler)")
    out = tmp_path / "out"
    result = subprocess.run(
        [str(WRANGLER), "deploy", "--dry-run", "--outdir", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "WRANGLER_SEND_METRICS": "false", "CI": "1", "NO_COLOR": "1",
             "FORCE_COLOR": "0"},
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output

    # the bindings wrangler.toml declares
    assert "env.JOB_OWNERS (JobOwner)" in output and "Durable Object" in output, output
    assert "env.TICKWORK_PUMP (SharedPump)" in output, output
    assert "env.DB (tickwork)" in output and "D1 Database" in output, output
    assert "--dry-run: exiting now." in output

    # the upload: the main module (wrangler names it by its basename) plus the
    # additional modules, each at its repository path
    uploaded = {path.relative_to(out).as_posix() for path in out.rglob("*") if path.is_file()}
    uploaded.discard("README.md")  # wrangler's note about the output folder, not uploaded
    assert "entry.py" in uploaded
    assert (out / "entry.py").read_bytes() == (REPO / "worker" / "entry.py").read_bytes()
    modules = (uploaded - {"entry.py"}) | {"worker/entry.py"}
    expected = runtime_modules()
    assert modules == expected, (
        f"missing: {sorted(expected - modules)}; unexpected: {sorted(modules - expected)}")
    assert not any(name.startswith(("tests/", "bench/", ".venv/", "node_modules/",
                                    "tickwork/hosts/cpython/")) for name in uploaded)
    assert f"Total ({len(expected) - 1} modules)" in output  # the additional modules
