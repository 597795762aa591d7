"""Every code example in README.md and docs/ runs, and every link resolves.

A page is run top to bottom, like a reader would, on its own: a fresh
working directory, a fresh namespace, nothing from another page:

* its ``python`` blocks run as scripts, in one namespace per page, with no
  event loop running (``asyncio.run`` works); a block with a top-level
  ``await`` runs on the page's own loop;
* its ``sh`` blocks run with bash in the same directory, one after another,
  with ``.venv/bin`` first on PATH; each is a new terminal: what one exports
  does not reach the next, and no ``TICKWORK_*`` variable is set for any (not
  even from the environment the tests run in), so a block that needs the
  token exports it itself; a block marked
  ``<!-- example: background -->`` keeps running (a server) until the page ends
  and then gets SIGTERM; the next block runs once port 8787 answers, or, for
  a block that does not name the port (a worker), once it did not exit at once;
* a block marked ``<!-- example: not run (why) -->`` is only checked to say why
  (commands that need a Cloudflare account, or the test command itself; a
  ``toml`` block so marked is a file of the reader's own);
* a ``text`` block marked ``<!-- example: output -->`` must be exactly what
  the block before it printed (a python block, or a shell block's stdout);
* other fences (``toml``, ``json``, ``text``) are configuration or output.

A block that imports names from a module imports every name it uses from that
module: a reader who copies it alone must not meet a NameError for a name an
earlier block happened to import. The README's quick start and the first
tutorial also run twice in the same directory, as a reader reruns them.

A page declares what its examples need on its first line,
``<!-- examples: d1 -->`` (``env.DB`` is Miniflare's D1 with schema/d1
applied), ``postgres`` (``$DATABASE_URL`` names a fresh database with
schema/postgres applied), ``empty_postgres`` (``$DATABASE_URL`` names a
fresh database without the schema, for a page that creates it), ``workers``
(the ``workers`` module stand-in is importable) or
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
    return page.relative_to(REPO).as_posix() if page.is_relative_to(REPO) else page.name


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
            assert block.language in RUN | {"toml"} and len(block.mark) > len("not run (...)")
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
        if (block.mark or "").startswith("not run"):
            continue  # a file of the reader's own (the mark says where it is checked)
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

    def run(self, block: Block, where: str) -> str:
        """Runs one block in a new bash; what it printed (stdout, the port as
        the page wrote it)."""
        code = block.code.replace("8787", self.port)
        if block.mark == "background":
            process = subprocess.Popen(["bash", "-c", code], cwd=self.directory,
                                       env=self.environment, start_new_session=True,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.background.append(process)
            if "8787" in block.code:
                self._wait_for_port()
            else:
                self._wait_alive(process)
            return ""
        finished = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=self.directory,
                                  env=self.environment, capture_output=True, text=True,
                                  timeout=120)
        assert finished.returncode == 0, (
            f"{where} failed ({finished.returncode}):\n{code}\n--- stdout\n"
            f"{finished.stdout[-3000:]}\n--- stderr\n{finished.stderr[-3000:]}")
        return finished.stdout.replace(self.port, "8787")

    def _wait_for_port(self) -> None:
        for _ in range(200):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", int(self.port))) == 0:
                    return
            if any(process.poll() is not None for process in self.background):
                raise AssertionError("a background example exited at once")
            subprocess.run(["sleep", "0.05"], check=True)
        raise AssertionError(f"nothing listens on port {self.port}")

    @staticmethod
    def _wait_alive(process: subprocess.Popen[bytes]) -> None:
        """A process that listens on no port (a worker): still running after 2 s."""
        try:
            process.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return
        raise AssertionError(f"a background example exited at once ({process.returncode})")

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
def page_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh directory to run a page in, with no ``TICKWORK_*`` variable in
    this process's environment either (python blocks read ``os.environ``)."""
    for name in list(os.environ):
        if name.startswith("TICKWORK_"):
            monkeypatch.delenv(name)
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

#: Pages a reader is likely to run again where they ran them first (their files
#: from the first run still there).
RERUN_PAGES = [REPO / "README.md", REPO / "docs" / "tutorial" / "first-jobs.md"]


def _imports(tree: ast.AST) -> dict[str, str]:
    """``from M import name`` in a block: each name bound, and its module."""
    return {alias.asname or alias.name: node.module or ""
            for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            for alias in node.names}


def incomplete_imports(page: Path) -> list[str]:
    """Each python block that imports from a module but not every name it
    uses from that module (a name an earlier block imported), as "where: names"."""
    found = []
    imported_before: dict[str, str] = {}
    for block in blocks(page):
        if block.language != "python" or (block.mark or "").startswith("not run"):
            continue
        tree = ast.parse(textwrap.dedent(block.code))
        own = _imports(tree)
        used = {node.id for node in ast.walk(tree)
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
        missing = sorted(name for name in used - own.keys()
                         if imported_before.get(name) in set(own.values()))
        if missing:
            modules = sorted({imported_before[name] for name in missing})
            found.append(f"{_id(page)}:{block.line}: imports from {', '.join(modules)} "
                         f"but not {', '.join(missing)}, which it uses")
        imported_before.update(own)
    return found


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_a_block_imports_all_it_uses_from_a_module_it_imports_from(page: Path) -> None:
    # Blocks share a namespace, so a name an earlier block imported would
    # never raise here; a reader who copies a block that has its own
    # `from tickwork import ...` line trusts that line to be complete.
    assert not incomplete_imports(page)


def run_page(page: Path, directory: Path, request: pytest.FixtureRequest) -> None:
    """Runs ``page``'s blocks in order in ``directory``, in a fresh namespace
    (see the module docstring)."""
    wanted = needs(page)
    inherited = {name: value for name, value in os.environ.items()
                 if not name.startswith("TICKWORK_")}
    environment = {**inherited, "PATH": f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}",
                   "PYTHONPATH": str(REPO)}
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
    if "postgres" in wanted or "empty_postgres" in wanted:
        if "postgres" in wanted:
            dsn = request.getfixturevalue("postgres_dsn")
        else:  # a database the page migrates itself
            from tests.support.pg.server import unique_database_name

            server = request.getfixturevalue("postgres_server")
            name = unique_database_name("tickwork_docs")
            dsn = server.create_database(name)
            cleanups.append(lambda: server.drop_database(name))
        environment["DATABASE_URL"] = dsn
        os.environ["DATABASE_URL"] = dsn
        cleanups.append(lambda: os.environ.pop("DATABASE_URL", None))
    if "workers" in wanted:
        from tests.support.fakes.workers_module import installed_workers_module

        installed = installed_workers_module()
        installed.__enter__()
        cleanups.append(lambda: installed.__exit__(None, None, None))
    environment.update({"WRANGLER_SEND_METRICS": "false", "CI": "1", "NO_COLOR": "1"})
    shell = Shell(REPO if "repository" in wanted else directory, environment)
    # As `python3` started in the directory: the page's own files import, and
    # are forgotten afterwards, so no other page (or rerun) sees them.
    sys.path[:0] = [str(directory), str(REPO)]
    modules_before = set(sys.modules)
    cwd_before = Path.cwd()
    os.chdir(directory)
    try:
        printed = None
        for number, block in enumerate(blocks(page), start=1):
            where = f"{_id(page)}:{block.line} (example {number})"
            if block.mark == "output":
                assert printed is not None, f"{where}: no block before this output"
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
                printed = shell.run(block, where)
                sys.stdout.write(printed)
    finally:
        shell.close()
        os.chdir(cwd_before)
        sys.path.remove(str(directory))
        sys.path.remove(str(REPO))
        for name in set(sys.modules) - modules_before:
            file = getattr(sys.modules[name], "__file__", None) or ""
            if Path(file).is_relative_to(directory):
                del sys.modules[name]
        for cleanup in reversed(cleanups):
            cleanup()


@pytest.mark.parametrize("page", PAGES_WITH_EXAMPLES, ids=_id)
def test_the_examples_run(page: Path, page_directory: Path,
                          request: pytest.FixtureRequest) -> None:
    run_page(page, page_directory, request)


@pytest.mark.parametrize("page", RERUN_PAGES, ids=_id)
def test_the_examples_run_again_in_the_same_directory(
        page: Path, page_directory: Path, request: pytest.FixtureRequest) -> None:
    # A reader reruns a page in a new session where its files (the sqlite3
    # database) were left: the page must still hold as written.
    run_page(page, page_directory, request)
    run_page(page, page_directory, request)
