"""The Python API reference names every public name of ``tickwork``.

docs/reference/python-api.md is written by hand (its prose says what a
signature cannot); this keeps it from losing a name the package exports.
"""

from __future__ import annotations

import re
from pathlib import Path

import tickwork

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "python-api.md"


def test_every_name_in_tickwork_all_is_in_the_reference() -> None:
    text = REFERENCE.read_text(encoding="utf-8")
    # A name counts when code holds it as a word: a fenced example, or an
    # inline span (`Name`, `Name(...)`, `x.Name`, `f(Name(...))`, one that
    # wraps onto the next line too).
    fenced = re.findall(r"^```\w*\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)
    prose = re.sub(r"^```\w*\n.*?^```$", "", text, flags=re.DOTALL | re.MULTILINE)
    code = fenced + re.findall(r"`([^`]+)`", prose)
    words = {word for piece in code for word in re.findall(r"\w+", piece)}
    missing = [name for name in tickwork.__all__ if name not in words]
    assert not missing, f"docs/reference/python-api.md does not name {missing}"
