"""The optional Cloudflare Queues block of wrangler.toml: commented out (a
deployment needs no queue), the very block the deploy how-to shows, and
accepted by ``wrangler deploy --dry-run`` once uncommented.

The dry run stages a copy of the runtime packages in a temporary directory,
so it never races the repository's own dry run over dist/.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WRANGLER = REPO / "node_modules" / ".bin" / "wrangler"
HOW_TO = REPO / "docs" / "how-to" / "deploy-on-cloudflare.md"

#: The commented-out block: from its first table to the line before the next blank one.
_BLOCK = re.compile(r"^# \[\[queues\.producers\]\]\n(?:#.*\n)*?(?=\n)", re.MULTILINE)


def commented_block() -> str:
    found = _BLOCK.findall((REPO / "wrangler.toml").read_text(encoding="utf-8"))
    assert len(found) == 1, f"wrangler.toml has {len(found)} commented-out queues blocks"
    block: str = found[0]
    return block


def uncommented(block: str) -> str:
    return "".join(line[2:] if line.startswith("# ") else line.lstrip("#")
                   for line in block.splitlines(keepends=True))


def test_the_block_is_commented_out_and_is_the_one_the_how_to_shows() -> None:
    config = (REPO / "wrangler.toml").read_text(encoding="utf-8")
    assert not re.search(r"^\s*\[\[queues\.", config, re.MULTILINE), (
        "the queues tables must stay commented out: a deployment needs no queue")
    shown = re.search(r"^```toml\n(\[\[queues\.producers\]\]\n.*?)^```$",
                      HOW_TO.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)
    assert shown is not None, f"{HOW_TO.name} shows no queues block"
    assert shown.group(1) == uncommented(commented_block())
    assert 'binding = "TICKWORK_QUEUE"' in shown.group(1)


def test_dry_run_with_the_block_uncommented_binds_the_queue(tmp_path: Path) -> None:
    assert WRANGLER.exists(), (
        f"{WRANGLER} is missing: run `npm ci` in {REPO} (it installs the pinned wrangler)")
    project = tmp_path / "project"
    for package in ("tickwork", "worker", "durable_objects", "schema"):
        shutil.copytree(REPO / package, project / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    (project / "node_modules").symlink_to(REPO / "node_modules")
    config = (REPO / "wrangler.toml").read_text(encoding="utf-8")
    block = commented_block()
    (project / "wrangler.toml").write_text(config.replace(block, uncommented(block)),
                                           encoding="utf-8")
    result = subprocess.run(
        [str(WRANGLER), "deploy", "--dry-run", "--outdir", str(tmp_path / "out")],
        cwd=project, capture_output=True, text=True, timeout=300,
        env={**os.environ, "WRANGLER_SEND_METRICS": "false", "CI": "1", "NO_COLOR": "1",
             "FORCE_COLOR": "0"},
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert re.search(r"env\.TICKWORK_QUEUE \(tickwork-drains\)\s+Queue", output), output
    # wrangler warns about a key it does not know (e.g. a misspelt consumer setting)
    assert "Unexpected fields" not in output, output
    assert "--dry-run: exiting now." in output
