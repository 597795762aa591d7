"""What mypy proves about the declared operations and the answers: run on
small programs that use tickwork as a user or a contributor would.

* a call of a declared operation is checked against its plan's signature,
  on a synchronous surface (a result) and an asynchronous one (awaited);
* a method a surface writes by hand in place of a declared one must keep
  the declaration's signature;
* a runtime's answers class that misses one request's answer cannot be
  instantiated.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def mypy(tmp_path: Path, source: str) -> list[str]:
    """mypy's error lines for ``source`` (strict, as the project runs it)."""
    program = tmp_path / "program.py"
    program.write_text(textwrap.dedent(source))
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
         "--cache-dir", str(REPO / ".mypy_cache"), str(program)],
        capture_output=True, text=True, cwd=REPO, timeout=600)
    return [line.split(": error: ", 1)[1] for line in run.stdout.splitlines()
            if ": error: " in line]


@pytest.fixture(scope="module")
def errors(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    # One program for every case (mypy takes seconds to start): each line
    # that must fail says so in a comment, and every other line must pass.
    return mypy(tmp_path_factory.mktemp("typing"), '''
        from tickwork import Job, OwnerRuntime, RedriveResult
        from tickwork.client import AsyncJobs, Jobs
        from tickwork.lifecycle.answers import OwnerLocalAnswers
        from tickwork.lifecycle.requests import Find
        from tickwork.model.jobs import JobRecord


        async def calls(runtime: OwnerRuntime, remote: AsyncJobs, jobs: Jobs) -> None:
            result: RedriveResult = runtime.redrive("j", "r")
            remote_result: RedriveResult = await remote.redrive("j", "r")
            page = jobs.dead_letters("q", limit=10)
            runtime.redrive("j")  # error: too few
            jobs.dead_letters("q", 10)  # error: limit is keyword-only
            text: str = await remote.pause("q")  # error: a bool
            runtime.ingest(Job("a", queue="q"))


        class Remote(AsyncJobs):
            async def pause(self, queue: str, now: bool) -> bool:  # error: override
                return True


        class Partial(OwnerLocalAnswers):
            def find(self, request: Find) -> JobRecord | None:
                return None


        Partial()  # error: abstract
    ''')


def test_every_line_marked_as_an_error_is_one_and_no_other(errors: list[str]) -> None:
    assert len(errors) == 5, errors


def test_a_call_is_checked_against_the_plans_parameters(errors: list[str]) -> None:
    assert any("Too few arguments" in error for error in errors), errors
    assert any("Too many positional arguments" in error for error in errors), errors


def test_a_result_has_the_plans_type_on_every_surface(errors: list[str]) -> None:
    assert any('expression has type "bool", variable has type "str"' in error
               for error in errors), errors


def test_a_hand_written_method_keeps_the_declared_signature(errors: list[str]) -> None:
    assert any('Signature of "pause" incompatible with supertype' in error
               for error in errors), errors


def test_a_runtime_that_misses_an_answer_cannot_be_made(errors: list[str]) -> None:
    # mypy names the missing answers (a few, then how many more).
    assert any('Cannot instantiate abstract class "Partial" with abstract attributes' in error
               and '"ask_liveness"' in error and '"find"' not in error
               for error in errors), errors
