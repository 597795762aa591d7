"""The docs harness (test_examples.py) fails where a reader would: a shell
block that needs a variable only another block (or the tests' own
environment) set, a block whose import line misses a name it uses, a page
that leans on another page's names or files, a page that does not hold when
run again where it ran before."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.docs.test_examples import incomplete_imports, run_page


def page(tmp_path: Path, name: str, text: str) -> Path:
    pages = tmp_path / "pages"
    pages.mkdir(exist_ok=True)
    path = pages / name
    path.write_text(textwrap.dedent(text))
    return path


def fresh(tmp_path: Path, name: str) -> Path:
    directory = tmp_path / name
    directory.mkdir()
    return directory


def test_a_shell_block_sees_no_token_it_did_not_export(
        tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TICKWORK_TOKEN", "from-the-tests-own-environment")
    missing = page(tmp_path, "missing.md", """\
        ```sh
        tickwork inspect --url http://127.0.0.1:9 --owner acme
        ```
        """)
    with pytest.raises(AssertionError, match="no token"):
        run_page(missing, fresh(tmp_path, "one"), request)
    earlier = page(tmp_path, "earlier.md", """\
        ```sh
        export TICKWORK_TOKEN=dev-token
        ```

        ```sh
        test -n "${TICKWORK_TOKEN:-}"
        ```
        """)
    with pytest.raises(AssertionError, match="example 2"):
        run_page(earlier, fresh(tmp_path, "two"), request)


def test_a_block_whose_import_line_misses_a_name_is_named(tmp_path: Path) -> None:
    partial = page(tmp_path, "partial.md", """\
        ```python
        from tickwork import Completed, Job
        ```

        ```python
        from tickwork import Failed
        outcomes = (Completed(), Failed("no"))
        ```

        ```python
        job = Job("j", queue="q")
        ```
        """)
    # The third block imports nothing: it goes on from the blocks before.
    assert incomplete_imports(partial) == [
        "partial.md:5: imports from tickwork but not Completed, which it uses"]


def test_a_page_sees_nothing_of_another_page(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    first = page(tmp_path, "first.md", """\
        ```python
        import pathlib
        helper = 1
        pathlib.Path("helpers.py").write_text("VALUE = 1\\n")
        import helpers
        ```
        """)
    run_page(first, fresh(tmp_path, "first"), request)
    uses_a_name = page(tmp_path, "name.md", """\
        ```python
        print(helper)
        ```
        """)
    with pytest.raises(NameError):
        run_page(uses_a_name, fresh(tmp_path, "second"), request)
    uses_a_module = page(tmp_path, "module.md", """\
        ```python
        import helpers
        ```
        """)
    with pytest.raises(ModuleNotFoundError):
        run_page(uses_a_module, fresh(tmp_path, "third"), request)


def test_a_second_run_finds_the_first_runs_files(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    once = page(tmp_path, "once.md", """\
        ```python
        import pathlib
        marker = pathlib.Path("first-run.txt")
        assert not marker.exists(), "run before"
        marker.write_text("")
        ```
        """)
    directory = fresh(tmp_path, "here")
    run_page(once, directory, request)
    with pytest.raises(AssertionError, match="run before"):
        run_page(once, directory, request)
