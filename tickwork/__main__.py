"""``python -m tickwork <command>`` (also installed as ``tickwork``).

    demo      run the engine end to end on sqlite3 and print every job's outcome
    serve     serve the /v1 job API locally (sqlite3 per owner, optional PostgreSQL)
    inspect   show queues or one job through the HTTP API

CPython only. Each command's modules are imported when it runs.
"""

from __future__ import annotations

import argparse
import sys

COMMANDS = {
    "demo": "run the engine end to end on sqlite3 and print every job's outcome",
    "serve": "serve the /v1 job API on this machine (sqlite3 per owner, optional PostgreSQL)",
    "inspect": "show queues or one job in the terminal, through the HTTP API",
}


def build_parser() -> argparse.ArgumentParser:
    from tickwork.hosts.cpython import inspect_cli, serve

    parser = argparse.ArgumentParser(
        prog="tickwork", description="tickwork: a durable job engine.",
        epilog="Run 'tickwork <command> --help' for a command's options.")
    commands = parser.add_subparsers(dest="command", metavar="<command>", required=True)
    commands.add_parser("demo", help=COMMANDS["demo"], description=COMMANDS["demo"])
    serve.add_arguments(commands.add_parser(
        "serve", help=COMMANDS["serve"], description=serve.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter))
    inspect_cli.add_arguments(commands.add_parser(
        "inspect", help=COMMANDS["inspect"], description=inspect_cli.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["demo"] and {"-h", "--help"}.isdisjoint(args[1:]):
        # Straight to the demo, without importing the host modules: the
        # README's first command, unchanged since before the other commands.
        from tickwork.demo import main as demo

        return demo(args[1:])
    # "demo --help" (or -h) ends here: argparse prints the demo's help and
    # exits 0, so only serve and inspect get past this line.
    options = build_parser().parse_args(args)
    if options.command == "serve":
        from tickwork.hosts.cpython import serve

        return serve.main(options)
    assert options.command == "inspect", options.command
    from tickwork.hosts.cpython import inspect_cli

    return inspect_cli.main(options)


if __name__ == "__main__":
    raise SystemExit(main())
