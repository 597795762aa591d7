"""One benchmark module's ``collect`` in a process of its own: both ends.

    python -m bench.isolated bench.owner_local --result /tmp/figures.json [--quick]

``python -m bench`` calls ``collect_in_child`` once per module and run, which
starts this file's ``main`` in a fresh interpreter, so that what one module
leaves behind (objects, threads, caches, a warm allocator) does not weigh on
the next one's figures. Everything the module prints goes to stderr (file
descriptor 1 is pointed at 2, so child processes of the module follow); the
figures, or the reason there are none, go to ``--result`` as JSON:
``{"rows": [...], "points": [...]}`` or ``{"error": "..."}``. Exit status 0
when the module gave figures, 1 when it raised.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Sequence
from pathlib import Path

from bench.report import Figures

ROOT = Path(__file__).resolve().parents[1]


class ModuleFailed(Exception):
    """A module's collect raised in its child process (which printed the traceback)."""


def failure_reason() -> str:
    """The last line of the exception being handled ("ValueError: ...")."""
    return traceback.format_exc().strip().splitlines()[-1]


def collect_in_child(module: str, *, quick: bool) -> Figures:
    """The collect of ``module`` (dotted, e.g. ``bench.owner_local``) in a fresh
    interpreter, so that no module measures in a process another module, or
    an earlier run, has already used."""
    with tempfile.TemporaryDirectory(prefix="tickwork-bench-") as folder:
        result = Path(folder) / "figures.json"
        argv = [sys.executable, "-m", "bench.isolated", module, "--result", str(result)]
        returncode = subprocess.run(argv + ["--quick"] * quick, cwd=ROOT,
                                    stdin=subprocess.DEVNULL, check=False).returncode
        try:
            data = json.loads(result.read_text())
        except (OSError, ValueError):
            raise ModuleFailed(f"its process exited with status {returncode} "
                               "and wrote no figures") from None
    if "error" in data:
        raise ModuleFailed(data["error"])
    return Figures.from_json(data)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.isolated",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("module", help="a module with collect(*, quick), e.g. bench.owner_local")
    parser.add_argument("--result", type=Path, required=True,
                        help="where the figures are written, as JSON")
    parser.add_argument("--quick", action="store_true", help="small sizes")
    args = parser.parse_args(argv)
    sys.stdout.flush()
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # the module's output is not a result
    # What an earlier module wrote (a PostgreSQL server's last checkpoint, the
    # peers' files) reaches the disk now, not while this module measures.
    os.sync()
    try:
        figures = importlib.import_module(args.module).collect(quick=args.quick)
    except Exception:
        traceback.print_exc()
        args.result.write_text(json.dumps({"error": failure_reason()}))
        return 1
    args.result.write_text(json.dumps(figures.to_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
