"""The real-Pyodide tier's suites name every behaviour module.

The tier lists its modules by hand (it imports them inside Pyodide), so a
behaviour module added without its line would run on CPython only; this
holds the list to the directory, on the fast tier.
"""

from __future__ import annotations

from pathlib import Path

from tests.pyodide.collect import SUITES

BEHAVIOUR = Path(__file__).resolve().parents[1] / "behaviour"


def test_both_behaviour_suites_run_every_behaviour_module() -> None:
    modules = sorted(f"tests.behaviour.{path.stem}" for path in BEHAVIOUR.glob("test_*.py"))
    assert "tests.behaviour.test_cancel_lane" in modules
    assert sorted(SUITES["behaviour-do"]) == modules
    assert sorted(SUITES["behaviour-d1"]) == modules
