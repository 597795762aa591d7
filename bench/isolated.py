"""One benchmark module's ``collect`` in a process of its own.

    python -m bench.isolated bench.owner_local --result /tmp/figures.json [--quick]

``python -m bench`` starts this once per module and run, so that what one
module leaves behind (objects, threads, caches, a warm allocator) does not
weigh on the next one's figures. Everything the module prints goes to
stderr (file descriptor 1 is pointed at 2, so child processes of the module
follow); the figures, or the reason there are none, go to ``--result`` as
JSON: ``{"rows": [...], "points": [...]}`` or ``{"error": "..."}``.
Exit status 0 when the module gave figures, 1 when it raised.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path


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
    try:
        collect = importlib.import_module(args.module).collect
        figures = collect(quick=args.quick)
    except Exception:
        traceback.print_exc()
        reason = traceback.format_exc().strip().splitlines()[-1]
        args.result.write_text(json.dumps({"error": reason}))
        return 1
    args.result.write_text(json.dumps(figures.to_json()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
