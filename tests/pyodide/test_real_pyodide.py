"""The real-Pyodide tier as pytest tests: one per case, each line's cases in one Node process.

The cases (``collect.py``) are the behaviour suite on a Durable Object
whose ``ctx.storage`` is a JS object and on Miniflare's real D1, the
owner-local and shared suites on the same, and the Worker and ``JobOwner``
cases in ``cases/``,
all inside npm ``pyodide@0.28.2`` and ``pyodide@314`` (the two lines workerd
runs) under Node (``runner.mjs``). Each pytest
test here reports one case's result; a case the runner did not report fails.
"""

from __future__ import annotations

import json
import subprocess
import threading
import warnings
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.pyodide import collect
from tests.support.d1.miniflare import REPO_ROOT, check_node_setup

RUNNER = Path(__file__).with_name("runner.mjs")
#: Each Pyodide line's time limit: a line takes about 7 minutes alone on a
#: 2-core machine, and up to about twice that beside the other line and the
#: rest of the suite.
TIER_TIMEOUT_S = 1800
#: The Pyodide lines workerd runs (runner.mjs --pyodide), and their npm packages:
#: 0.28.2 / Python 3.13 (compatibility dates before python_workers_20260610)
#: and 314 / Python 3.14 (from it on).
LINES = {"0.28": "pyodide", "314": "pyodide-314"}

#: Node 20's V8 crashed in its deoptimizer ("Fatal error ... unreachable
#: code" in DoComputeBuiltinContinuation) once the external SDK's cases had
#: warmed Pyodide's glue up; without inlining in the optimizing compiler it
#: does not, at no measurable cost to the tier's time.
NODE_FLAGS = ("--no-turbo-inlining",)

CASES = collect.cases()


def _check_pyodide_installed() -> None:
    pinned = json.loads((REPO_ROOT / "package.json").read_text())["devDependencies"]
    for package in LINES.values():
        wanted = pinned[package].removeprefix("npm:pyodide@")
        installed = REPO_ROOT / "node_modules" / package / "package.json"
        if not installed.is_file():
            raise RuntimeError(f"{package} is not installed ({installed} is missing): "
                               "run `npm ci`")
        have = json.loads(installed.read_text())["version"]
        if have != wanted:
            raise RuntimeError(f"node_modules has {package} {have}, package.json pins "
                               f"{wanted}: run `npm ci`")


def _check_external_sdk_installed() -> None:
    pinned = (REPO_ROOT / "tests" / "pyodide" / "external-sdk.txt").read_text()
    marker = REPO_ROOT / ".venv" / "workers-runtime-sdk" / ".installed"
    if not marker.is_file() or marker.read_text() != pinned:
        raise RuntimeError("the external Workers SDK is not installed as "
                           "tests/pyodide/external-sdk.txt pins it: run bash scripts/test")


class Tier:
    """The runner's Node processes, one per Pyodide line, run at once, each
    watched by a background thread; started once per session (see
    conftest.py: as soon as collection finishes, so they run beside the rest
    of the suite). At once, since one line alone keeps one core busy and the
    rest of the suite is done well before two lines in a row would be."""

    threads: ClassVar[list[threading.Thread]] = []
    found: ClassVar[dict[str, dict[str, Any]]] = {}
    problems: ClassVar[list[str]] = []
    error: ClassVar[str | None] = None

    @classmethod
    def start(cls, directory: Path) -> None:
        if cls.threads or cls.error is not None:
            return
        try:
            node = check_node_setup()
            _check_pyodide_installed()
            _check_external_sdk_installed()
        except Exception as problem:  # reported by the tests, not by collection
            cls.error = str(problem)
            return
        cls.threads = [threading.Thread(target=cls._run_line, args=(node, line, directory),
                                        name=f"pyodide-tier-{line}", daemon=True)
                       for line in LINES]
        for thread in cls.threads:
            thread.start()

    @classmethod
    def _run_line(cls, node: str, line: str, directory: Path) -> None:
        # Each thread writes only its own line's keys (dict and list updates
        # are atomic under the GIL); results() reads after joining them all.
        out = directory / f"results-{line}.jsonl"
        try:
            run = subprocess.run([node, *NODE_FLAGS, str(RUNNER), "--pyodide", line,
                                  "--out", str(out)],
                                 cwd=REPO_ROOT, text=True, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, timeout=TIER_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            cls.problems.append(f"pyodide {line}: took over {TIER_TIMEOUT_S} s")
            return
        if run.returncode != 0:
            cls.problems.append(f"pyodide {line} did not run (exit code {run.returncode}):\n"
                                f"{(run.stderr or '')[-4000:]}")
            return
        for result in map(json.loads, out.read_text(encoding="utf-8").splitlines()):
            cls.found[f"{line}/{result['id']}"] = result

    @classmethod
    def results(cls) -> dict[str, dict[str, Any]]:
        for thread in cls.threads:
            thread.join()
        if cls.error is None and cls.problems:
            cls.error = "\n".join(sorted(cls.problems))
        if cls.error is not None:
            raise RuntimeError(cls.error)
        return cls.found


#: pytest-xdist's modes that send all of one file's tests to one worker.
WHOLE_FILE_MODES = ("loadfile", "loadscope")


@pytest.fixture(scope="session")
def pyodide_results(pytestconfig: pytest.Config,
                    tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    workerinput = getattr(pytestconfig, "workerinput", None)
    if workerinput is not None:
        # Every xdist worker this file's tests reach would start both lines
        # (tests/conftest.py passes the controller's --dist on).
        dist = workerinput.get("dist")
        if dist not in WHOLE_FILE_MODES:
            raise RuntimeError(f"the real-Pyodide tier runs in one pytest-xdist worker: "
                               f"run it with --dist loadfile (as scripts/test does), "
                               f"not --dist {dist}")
    Tier.start(tmp_path_factory.mktemp("pyodide-tier"))  # if collection did not already
    return Tier.results()


IDS = [f"{line}/{case.id}" for line in LINES for case in CASES]


@pytest.mark.parametrize("case_id", IDS)
def test_in_real_pyodide(case_id: str, pyodide_results: dict[str, dict[str, Any]]) -> None:
    result = pyodide_results.get(case_id)
    if result is None:
        line = case_id.split("/", 1)[0]
        collection = pyodide_results.get(f"{line}/<collection>")
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
    assert set(pyodide_results) == set(IDS)
