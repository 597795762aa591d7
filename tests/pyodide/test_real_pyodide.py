"""The real-Pyodide tier as pytest tests: one per case, all run in one Node process.

The cases (``collect.py``) are the behaviour suite on a Durable Object
whose ``ctx.storage`` is a JS object and on Miniflare's real D1, the
owner-local and shared suites on the same, and the Worker and ``JobOwner``
cases in ``cases/``,
all inside npm ``pyodide@0.28.2`` under Node (``runner.mjs``). Each pytest
test here reports one case's result; a case the runner did not report fails.
"""

from __future__ import annotations

import json
import subprocess
import warnings
from pathlib import Path
from typing import Any

import pytest

from tests.pyodide import collect
from tests.support.d1.miniflare import REPO_ROOT, check_node_setup

RUNNER = Path(__file__).with_name("runner.mjs")
#: The whole tier's time limit (it takes about a minute on a 2-core machine).
TIER_TIMEOUT_S = 900

CASES = collect.cases()


def _check_pyodide_installed() -> None:
    wanted = json.loads((REPO_ROOT / "package.json").read_text())["devDependencies"]["pyodide"]
    installed = REPO_ROOT / "node_modules" / "pyodide" / "package.json"
    if not installed.is_file():
        raise RuntimeError(f"pyodide is not installed ({installed} is missing): run `npm ci`")
    have = json.loads(installed.read_text())["version"]
    if have != wanted:
        raise RuntimeError(f"node_modules has pyodide {have}, package.json pins {wanted}: "
                           "run `npm ci`")


class Tier:
    """The runner's Node process, started once per session (see conftest.py:
    as soon as collection finishes, so it runs beside the rest of the suite
    on the machine's other core)."""

    process: subprocess.Popen[str] | None = None
    out: Path | None = None
    error: str | None = None

    @classmethod
    def start(cls, directory: Path) -> None:
        if cls.process is not None or cls.error is not None:
            return
        try:
            node = check_node_setup()
            _check_pyodide_installed()
        except Exception as problem:  # reported by the tests, not by collection
            cls.error = str(problem)
            return
        cls.out = directory / "results.jsonl"
        cls.process = subprocess.Popen(
            [node, str(RUNNER), "--out", str(cls.out)], cwd=REPO_ROOT, text=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    @classmethod
    def results(cls) -> dict[str, dict[str, Any]]:
        if cls.error is not None:
            raise RuntimeError(cls.error)
        assert cls.process is not None and cls.out is not None
        try:
            _, stderr = cls.process.communicate(timeout=TIER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            cls.process.kill()
            raise RuntimeError(f"the real-Pyodide tier took over {TIER_TIMEOUT_S} s") from None
        if cls.process.returncode != 0:
            raise RuntimeError("the real-Pyodide tier did not run (exit code "
                               f"{cls.process.returncode}):\n{(stderr or '')[-4000:]}")
        return {result["id"]: result
                for result in map(json.loads, cls.out.read_text(encoding="utf-8").splitlines())}


@pytest.fixture(scope="session")
def pyodide_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    Tier.start(tmp_path_factory.mktemp("pyodide-tier"))  # if collection did not already
    return Tier.results()


@pytest.mark.parametrize("case_id", [case.id for case in CASES])
def test_in_real_pyodide(case_id: str, pyodide_results: dict[str, dict[str, Any]]) -> None:
    result = pyodide_results.get(case_id)
    if result is None:
        collection = pyodide_results.get("<collection>")
        detail = collection["detail"] if collection else "the runner never reported it"
        pytest.fail(f"{case_id} did not run inside Pyodide: {detail}", pytrace=False)
    if result["status"] == "skipped":
        pytest.skip(f"inside Pyodide: {result['detail']}")
    if result["status"] != "passed":
        pytest.fail(f"failed inside Pyodide:\n{result['detail']}", pytrace=False)
    if "rerun" in result:  # passed on its second run: shown, never hidden
        warnings.warn(f"{case_id} passed after a rerun: {result['rerun']}", stacklevel=1)


def test_the_runner_ran_exactly_the_cases_collected_here(
    pyodide_results: dict[str, dict[str, Any]],
) -> None:
    assert set(pyodide_results) == {case.id for case in CASES}
