"""``python -m tickwork <command>``."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["demo"]:
        from .demo import main as demo

        return demo(args[1:])
    print("usage: python -m tickwork demo", file=sys.stderr)
    print("  demo   run the engine end to end on sqlite3 and print every job's outcome",
          file=sys.stderr)
    return 0 if args[:1] in (["-h"], ["--help"]) else 2


if __name__ == "__main__":
    raise SystemExit(main())
