"""The Cloudflare example's environment builds from nothing, as its README and
docs/how-to/add-tickwork-to-your-worker.md say, with uv and the package index:

* the example itself, copied out of the repository with its path source
  pointed back at it: ``uv sync`` installs tickwork (this repository's, as a
  regular package, not a link to the checkout) and workers-py, and ``uv run
  python -m tickwork schema d1 migrations`` works in it;
* a project outside the repository, made of the how-to page's own blocks,
  with tickwork from the wheel the page builds;
* pywrangler's vendoring: its two uv commands (compile the project to
  ``pylock.toml`` without building, then install that with prebuilt wheels
  only, local sources excepted) take both sources. pywrangler runs them
  for a Pyodide interpreter, which uv would have to download; here they run
  for CPython, which resolves a pure-Python package the same way.

Needs uv (the test extra installs it) and PyPI (workers-py, setuptools for
building tickwork). Each test starts with an empty uv cache."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.support.examples import EXAMPLE
from tests.support.tree_build import building_from_the_checkout
from tickwork import __version__
from tickwork.schemas import migrations

REPO = Path(__file__).resolve().parents[2]
HOW_TO = REPO / "docs" / "how-to" / "add-tickwork-to-your-worker.md"
EXAMPLE_SOURCE = 'tickwork = { path = "../..", editable = false }'
#: What pywrangler adds to every Worker's requirements (pywrangler.resolve).
PYWRANGLER_SUPPLEMENT = "workers-runtime-sdk"


def uv() -> str:
    """The uv next to this Python (the test extra), else one on PATH."""
    beside = Path(sys.executable).parent / "uv"
    found = str(beside) if beside.is_file() else shutil.which("uv")
    if found is None:
        pytest.fail("uv is not installed: pip install -e '.[test]' installs it")
    return found


def python_for_the_example() -> list[str]:
    """``--python`` for uv: a CPython 3.12+ on this machine (the example's
    requires-python), from PATH or pyenv's versions. None found is a failure
    that says so: uv would try to download one (from GitHub, which neither
    this workplace nor its CI reaches), and fail less clearly."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [shutil.which(f"python3.{minor}") for minor in (12, 13, 14)]
    candidates += [str(path) for path in sorted(pyenv.glob("3.1[2-9]*/bin/python3"))]
    for candidate in candidates:
        # pyenv's shims are on PATH for every version but run only the selected ones.
        if candidate and subprocess.run(
                [candidate, "-c", "import sys; sys.exit(sys.version_info < (3, 12))"],
                capture_output=True).returncode == 0:
            return ["--python", candidate]
    pytest.fail("no CPython 3.12 or newer on this machine (the example's requires-python): "
                "install one (e.g. pyenv install 3.12) to build the example's environment")


@pytest.fixture
def uv_env(tmp_path: Path) -> dict[str, str]:
    """This environment without what would point uv at another environment
    or change what ``uv sync`` does (an index setting stays: a mirror is
    still the index), with an empty cache of the test's own."""
    environment = {name: value for name, value in os.environ.items() if name not in {
        "VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH", "PYTHONHOME", "UV_PYTHON",
        "UV_PROJECT_ENVIRONMENT", "UV_FROZEN", "UV_LOCKED", "UV_NO_SYNC", "UV_NO_DEV"}}
    environment["UV_CACHE_DIR"] = str(tmp_path / "uv-cache")
    environment["NO_COLOR"] = "1"
    environment["UV_PYTHON_DOWNLOADS"] = "never"  # see python_for_the_example
    return environment


def run(command: list[str], cwd: Path, env: dict[str, str]) -> str:
    finished = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=600)
    assert finished.returncode == 0, (
        f"{' '.join(command)} failed ({finished.returncode}) in {cwd}:\n"
        f"{finished.stdout[-3000:]}\n{finished.stderr[-3000:]}")
    return finished.stdout


def package_files(root: Path) -> dict[str, bytes]:
    """The package's files under ``root/tickwork`` (its code, schema files and
    py.typed; no caches), by relative path. The checkout's ``_schema`` is a
    link to ``schema/``, so links are followed."""
    found = {}
    for directory, _, names in os.walk(root / "tickwork", followlinks=True):
        for name in names:
            path = Path(directory) / name
            if "__pycache__" not in path.parts and path.suffix in {".py", ".sql", ".typed"}:
                found[path.relative_to(root).as_posix()] = path.read_bytes()
    return found


def assert_this_repositorys_tickwork(python: Path, env: dict[str, str]) -> None:
    """``python`` imports tickwork from its own site-packages (an install, not
    a link to the checkout), of this repository's version and files."""
    script = "import pathlib, tickwork; print(tickwork.__version__); " \
             "print(pathlib.Path(tickwork.__file__).parent.parent)"
    version, site = run([str(python), "-c", script], python.parent, env).split()
    assert version == __version__
    assert Path(site).name == "site-packages" and not Path(site).is_relative_to(REPO)
    assert package_files(Path(site)) == package_files(REPO)


def copy_example(target: Path) -> Path:
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns(
        ".venv", ".venv-workers", "python_modules", "uv.lock", "pylock.toml", "migrations"))
    return target


def point_the_example_at_this_repository(project: Path) -> None:
    """The copy's path source, ``../..`` in the example, made absolute."""
    pyproject = project / "pyproject.toml"
    text = pyproject.read_text()
    assert text.count(EXAMPLE_SOURCE) == 1
    source = tomllib.loads(text)["tool"]["uv"]["sources"]["tickwork"]
    assert (EXAMPLE / source["path"]).resolve() == REPO
    pyproject.write_text(text.replace('path = "../.."', f'path = "{REPO.as_posix()}"'))


def test_the_example_builds_its_environment_from_this_repository(
        tmp_path: Path, uv_env: dict[str, str]) -> None:
    project = copy_example(tmp_path / "my-jobs")
    point_the_example_at_this_repository(project)
    assert tomllib.loads((project / "pyproject.toml").read_text())["project"][
        "requires-python"] == ">=3.12"  # python_for_the_example looks for this
    # The README's first command: tickwork and workers-py (the dev group).
    with building_from_the_checkout(REPO):
        run([uv(), "sync", *python_for_the_example()], project, uv_env)
    assert_this_repositorys_tickwork(project / ".venv" / "bin" / "python", uv_env)
    assert (project / ".venv" / "bin" / "pywrangler").is_file()
    run([uv(), "run", "--frozen", "pywrangler", "--help"], project, uv_env)
    # The README's second command writes the migrations wrangler.toml names.
    run([uv(), "run", "--frozen", "python", "-m", "tickwork", "schema", "d1", "migrations"],
        project, uv_env)
    assert sorted(path.name for path in (project / "migrations").iterdir()) == [
        migration.name for migration in migrations("d1")]


def vendor_like_pywrangler(project: Path, env: dict[str, str]) -> tuple[Path, dict[str, Any]]:
    """pywrangler's resolve and install steps for ``project``: its lock entry
    for tickwork, and the Python of the environment tickwork went into."""
    python = python_for_the_example()
    (project / "requirements.in").write_text(PYWRANGLER_SUPPLEMENT + "\n")
    run([uv(), "pip", "compile", "pyproject.toml", "requirements.in", *python,
         "--no-build", "--no-header", "-o", "pylock.toml"], project, env)
    (locked,) = [package for package in tomllib.loads(
        (project / "pylock.toml").read_text())["packages"] if package["name"] == "tickwork"]
    # Prebuilt wheels only, but for local sources that have none (a directory).
    build_locally = ["--no-binary", "tickwork"] if "directory" in locked else []
    vendor = project / "pyodide-venv"
    run([uv(), "venv", str(vendor), *python], project, env)
    with building_from_the_checkout(REPO):
        run([uv(), "pip", "install", "--only-binary", ":all:", *build_locally,
             "-r", "pylock.toml", "--preview-features", "pylock"],
            project, {**env, "VIRTUAL_ENV": str(vendor)})
    return vendor / "bin" / "python", locked


def test_pywranglers_vendoring_takes_the_path_source(
        tmp_path: Path, uv_env: dict[str, str]) -> None:
    project = copy_example(tmp_path / "my-jobs")
    point_the_example_at_this_repository(project)
    vendored, locked = vendor_like_pywrangler(project, uv_env)
    assert locked["directory"] == {"path": REPO.as_posix(), "editable": False}
    assert_this_repositorys_tickwork(vendored, uv_env)


def how_to_block(language: str, containing: str) -> str:
    from tests.docs.test_examples import blocks

    (found,) = [block.code for block in blocks(HOW_TO)
                if block.language == language and containing in block.code]
    return found


def test_a_project_outside_the_repository_builds_with_the_documented_wheel(
        tmp_path: Path, uv_env: dict[str, str]) -> None:
    project = tmp_path / "my-jobs"
    project.mkdir()
    # The page's project, with its wheel source in place of the example's path.
    shown = how_to_block("toml", "[project]")
    assert shown.count(EXAMPLE_SOURCE) == 1
    wheel_source = how_to_block("toml", "wheels/")
    (project / "pyproject.toml").write_text(
        shown[:shown.index("[tool.uv.sources]")] + wheel_source)
    # The page's build command, run in this clone, as it says.
    command = how_to_block("sh", "uv build").split("#", 1)[0].split()
    assert command == ["uv", "build", "--wheel", "--out-dir", "../my-jobs/wheels"]
    with building_from_the_checkout(REPO):
        run([uv(), *command[1:-1], str(project / "wheels")], REPO, uv_env)
    (built,) = (project / "wheels").glob("tickwork-*.whl")
    wanted = tomllib.loads(wheel_source)["tool"]["uv"]["sources"]["tickwork"]["path"]
    assert wanted == f"wheels/{built.name}", (
        f"the page names {wanted}, this version builds {built.name}")
    run([uv(), "sync", *python_for_the_example()], project, uv_env)
    assert_this_repositorys_tickwork(project / ".venv" / "bin" / "python", uv_env)
    vendored, locked = vendor_like_pywrangler(project, uv_env)
    assert "directory" not in locked  # a wheel: nothing to build for the Worker
    assert_this_repositorys_tickwork(vendored, uv_env)


def test_the_release_steps_name_every_place_the_version_is_written() -> None:
    # tests/unit/test_version.py holds pyproject.toml and _version.py equal;
    # the how-to's wheel name carries the version too (see the test above).
    page = (REPO / "docs" / "how-to" / "release-tickwork.md").read_text()
    for place in ("pyproject.toml", "tickwork/_version.py",
                  "docs/how-to/add-tickwork-to-your-worker.md"):
        assert f"`{place}`" in page, place
    assert f"wheels/tickwork-{__version__}-py3-none-any.whl" in HOW_TO.read_text()
