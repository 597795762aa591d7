"""The deployment files' comments name only files and folders that exist.

Comments in wrangler.toml are the first thing a deployer reads; one that
points at a file moved long ago (it once named worker/app.py) sends them
looking for code that is not there.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: A repository path as the comments write one: a top folder, then a path.
_PATH = re.compile(r"\b((?:tickwork|worker|durable_objects|schema|docs|tests|bench|examples)"
                   r"/[\w./-]*\w)")
FILES = [ROOT / "wrangler.toml", ROOT / "examples/cloudflare-worker/wrangler.toml"]


@pytest.mark.parametrize("config", FILES, ids=lambda path: str(path.relative_to(ROOT)))
def test_every_path_a_comment_names_exists(config: Path) -> None:
    named = []
    for number, line in enumerate(config.read_text(encoding="utf-8").splitlines(), 1):
        comment = line.partition("#")[2]
        named += [(number, path) for path in _PATH.findall(comment)]
    missing = [(number, path) for number, path in named
               if not (ROOT / path).exists() and not (config.parent / path).exists()]
    assert not missing, f"{config.name} comments name what does not exist: {missing}"
    assert named or config.parent != ROOT, "the root wrangler.toml names no path: check _PATH"
