"""Every code example in README.md and docs/ runs, and every link resolves.

A page is run top to bottom, like a reader would:

* its ``python`` blocks run as scripts, in one namespace and a fresh working
  directory, with no event loop running (``asyncio.run`` works); a block with
  a top-level ``await`` runs on the page's own loop;
* its ``sh`` blocks run with bash in the same directory, one after another,
  with ``.venv/bin`` first on PATH; a block marked
  ``<!-- example: background -->`` keeps running (a server) until the page ends;
* a block marked ``<!-- example: not run (why) -->`` is only checked to say why
  (commands that need a Cloudflare account, or the test command itself);
* a ``text`` block marked ``<!-- example: output -->`` must be exactly what
  the python block before it printed;
* other fences (``toml``, ``json``, ``text``) are configuration or output.

A page declares what its examples need on its first line,
``<!-- examples: d1 -->`` (``env.DB`` is Miniflare's D1 with schema/d1
applied), ``postgres`` (``$DATABASE_URL`` names a fresh database with
schema/postgres applied), ``workers`` (the ``workers`` module stand-in is importable) or
``repository`` (shell blocks run from the repository root). Port 8787 in a
page's shell and python blocks is replaced by a free port. A ``toml`` block is a piece
of ``wrangler.toml`` (or of the file a ``<!-- example: from FILE -->`` mark
names): each of its settings must be in the real file; a python block so
marked must be that file's code.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])
RUN = {"python", "sh"}
SHOWN = {"toml", "json", "text"}
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.DOTALL | re.MULTILINE)
_MARK = re.compile(r"<!-- example: (background|output|from [\w./-]+|not run \(.+?\)) -->\s*$")
_NEEDS = re.compile(r"^<!-- examples: ([\w, ]+) -->")


@dataclass
class Block:
    language: str
    code: str
    line: int
    mark: str | None


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        before = text[:match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = _MARK.search(before)
        found.append(Block(match.group(1), match.group(2), text.count("\n", 0, match.start()) + 1,
                           mark.group(1) if mark else None))
    return found


def needs(page: Path) -> set[str]:
    match = _NEEDS.match(page.read_text(encoding="utf-8"))
    return {word.strip() for word in match.group(1).split(",")} if match else set()


def _id(page: Path) -> str:
    return page.relative_to(REPO).as_posix()


def test_there_are_docs_and_examples() -> None:
    assert len(PAGES) >= 10
    assert sum(len(blocks(page)) for page in PAGES) >= 30
    # A tutorial or how-to page without a runnable example teaches nothing we check.
    for page in PAGES:
        if page.parent.name in {"tutorial", "how-to"} or page == REPO / "README.md":
            assert runnable(page), f"{_id(page)} has no runnable example"


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_every_fence_is_a_known_kind_and_every_skip_says_why(page: Path) -> None:
    for block in blocks(page):
        assert block.language in RUN | SHOWN, (
            f"{_id(page)}:{block.line}: fence ```{block.language} (use one of "
            f"{sorted(RUN | SHOWN)})")
        if block.mark and block.mark.startswith("not run"):
            assert block.language in RUN and len(block.mark) > len("not run (...)")
        if block.mark == "output":
            assert block.language == "text", f"{_id(page)}:{block.line}: output is ```text"


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_every_link_resolves(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#", 1)[0]).resolve()
        assert path.exists(), f"{_id(page)}: broken link {target}"


def _settings(text: str) -> set[str]:
    return {" ".join(line.split("#", 1)[0].split()) for line in text.splitlines()} - {""}


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_files_shown_are_the_real_ones(page: Path) -> None:
    # A toml block is a piece of wrangler.toml, or of the file its
    # "from FILE" mark names; a python block marked so is that file's code.
    for block in blocks(page):
        source = block.mark[len("from "):] if (block.mark or "").startswith("from ") else None
        if block.language == "toml":
            name = source or "wrangler.toml"
            missing = _settings(block.code) - _settings((REPO / name).read_text())
            assert not missing, f"{_id(page)}:{block.line}: {sorted(missing)} not in {name}"
        elif source is not None:
            assert block.code.strip() in (REPO / source).read_text(), (
                f"{_id(page)}:{block.line}: this block is not the code of {source}")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Shell:
    """The page's shell blocks, run in its directory with its environment."""

    def __init__(self, directory: Path, environment: dict[str, str]) -> None:
        self.directory = directory
        self.environment = environment
        self.background: list[subprocess.Popen[bytes]] = []
        self.port = str(_free_port())

    def run(self, block: Block, where: str) -> None:
        code = block.code.replace("8787", self.port)
        if block.mark == "background":
            process = subprocess.Popen(["bash", "-c", code], cwd=self.directory,
                                       env=self.environment, start_new_session=True,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.background.append(process)
            self._wait_for_port()
            return
        finished = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=self.directory,
                                  env=self.environment, capture_output=True, text=True,
                                  timeout=120)
        assert finished.returncode == 0, (
            f"{where} failed ({finished.returncode}):\n{code}\n--- stdout\n"
            f"{finished.stdout[-3000:]}\n--- stderr\n{finished.stderr[-3000:]}")

    def _wait_for_port(self) -> None:
        for _ in range(200):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", int(self.port))) == 0:
                    return
            if any(process.poll() is not None for process in self.background):
                raise AssertionError("a background example exited at once")
            subprocess.run(["sleep", "0.05"], check=True)
        raise AssertionError(f"nothing listens on port {self.port}")

    def close(self) -> None:
        for process in self.background:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


def run_python(code: str, namespace: dict[str, Any], where: str,
               loop: asyncio.AbstractEventLoop) -> None:
    compiled = compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    result = eval(compiled, namespace)
    if asyncio.iscoroutine(result):
        loop.run_until_complete(result)


@pytest.fixture
def page_directory(tmp_path: Path) -> Iterator[Path]:
    before = Path.cwd()
    os.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        os.chdir(before)


def runnable(page: Path) -> list[Block]:
    return [block for block in blocks(page) if block.language in RUN
            and not (block.mark or "").startswith("not run")]


# Explanation pages may have nothing to run; the fence and link checks above
# still cover them, and test_there_are_docs_and_examples keeps this list honest.
PAGES_WITH_EXAMPLES = [page for page in PAGES if runnable(page)]


@pytest.mark.parametrize("page", PAGES_WITH_EXAMPLES, ids=_id)
def test_the_examples_run(page: Path, page_directory: Path,
                          request: pytest.FixtureRequest) -> None:
    wanted = needs(page)
    environment = {**os.environ, "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}",
                   "PYTHONPATH": str(REPO), "TICKWORK_TOKEN": "dev-token"}
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    loop = asyncio.new_event_loop()
    cleanups: list[Any] = [loop.close]
    if "d1" in wanted:
        from tests.support.d1.fixtures import d1_binding
        from tests.support.stores import apply_d1_schema

        binding = d1_binding(request.getfixturevalue("d1_bridge"), "external",
                             yield_to_loop=True)
        db = binding.__enter__()
        cleanups.append(lambda: binding.__exit__(None, None, None))
        loop.run_until_complete(apply_d1_schema(db))
        namespace["env"] = SimpleNamespace(DB=db)
    if "postgres" in wanted:
        dsn = request.getfixturevalue("postgres_dsn")
        environment["DATABASE_URL"] = dsn
        os.environ["DATABASE_URL"] = dsn
        cleanups.append(lambda: os.environ.pop("DATABASE_URL", None))
    if "workers" in wanted:
        from tests.support.fakes.workers_module import installed_workers_module

        installed = installed_workers_module()
        installed.__enter__()
        cleanups.append(lambda: installed.__exit__(None, None, None))
    environment.update({"WRANGLER_SEND_METRICS": "false", "CI": "1", "NO_COLOR": "1"})
    shell = Shell(REPO if "repository" in wanted else page_directory, environment)
    sys.path.insert(0, str(REPO))
    try:
        printed = None
        for number, block in enumerate(blocks(page), start=1):
            where = f"{_id(page)}:{block.line} (example {number})"
            if block.mark == "output":
                assert printed is not None, f"{where}: no python block before this output"
                assert printed.rstrip() == block.code.rstrip(), (
                    f"{where}: the block above printed\n{printed}")
            elif block.language not in RUN or (block.mark or "").startswith("not run"):
                continue
            elif block.language == "python":
                captured = io.StringIO()
                with contextlib.redirect_stdout(captured):
                    run_python(textwrap.dedent(block.code).replace("8787", shell.port),
                               namespace, where, loop)
                printed = captured.getvalue()
                sys.stdout.write(printed)
            else:
                shell.run(block, where)
    finally:
        shell.close()
        sys.path.remove(str(REPO))
        for cleanup in reversed(cleanups):
            cleanup()
