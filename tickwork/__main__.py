"""``python -m tickwork <command>`` (also installed as ``tickwork``).

    demo      run the engine end to end on sqlite3 and print every job's outcome
    serve     serve the /v1 job API locally (sqlite3 per owner, optional PostgreSQL)
    inspect   show queues or one job through the HTTP API
    jobs      list, cancel and redrive jobs through the HTTP API
    queues    show, pause and resume queues, set their retention and limits (HTTP API)
    schedules list, pause, resume and delete schedules through the HTTP API
    schema    write the package's migrations (d1 or postgres) into a directory
    migrate   apply the pending PostgreSQL migrations (or print their SQL)
    worker    run PostgreSQL's shared-queue jobs, without the HTTP API

CPython only. Each command's modules are imported when it runs.
"""

from __future__ import annotations

import argparse
import re
import sys

COMMANDS = {
    "demo": "run the engine end to end on sqlite3 and print every job's outcome",
    "serve": "serve the /v1 job API on this machine (sqlite3 per owner, optional PostgreSQL)",
    "inspect": "show queues or one job in the terminal, through the HTTP API",
    "jobs": "list, cancel and redrive jobs through the HTTP API",
    "queues": "show, pause and resume queues, set their retention and limits (HTTP API)",
    "schedules": "list, pause, resume and delete schedules through the HTTP API",
    "schema": "write this version's migrations (d1 or postgres) into a directory",
    "migrate": "apply this version's pending PostgreSQL migrations, or print their SQL",
    "worker": "run the jobs of PostgreSQL's shared queues (no HTTP API)",
}


def plain_text(doc: str | None) -> str:
    """A module docstring as terminal help: its reST literals (``x``) as plain x."""
    return re.sub(r"``([^`]+)``", r"\1", doc or "")


def build_parser() -> argparse.ArgumentParser:
    from tickwork import __version__
    from tickwork.hosts.cpython import inspect_cli, serve

    parser = argparse.ArgumentParser(
        prog="tickwork", description="tickwork: a durable job engine.",
        epilog="Run 'tickwork <command> --help' for a command's options.")
    parser.add_argument("--version", action="version", version=f"tickwork {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="<command>", required=True)
    commands.add_parser("demo", help=COMMANDS["demo"], description=COMMANDS["demo"])
    serve.add_arguments(commands.add_parser(
        "serve", help=COMMANDS["serve"], description=plain_text(serve.__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter))
    inspect_cli.add_arguments(commands.add_parser(
        "inspect", help=COMMANDS["inspect"], description=plain_text(inspect_cli.__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter))
    from tickwork.hosts.cpython import actions_cli

    for name in actions_cli.COMMANDS:
        actions_cli.add_arguments(name, commands.add_parser(
            name, help=COMMANDS[name], description=plain_text(actions_cli.__doc__),
            formatter_class=argparse.RawDescriptionHelpFormatter))
    schema = commands.add_parser("schema", help=COMMANDS["schema"],
                                 description=COMMANDS["schema"] + (
                                     ": the files wrangler d1 migrations apply (or your "
                                     "PostgreSQL tool) reads. Existing files that differ "
                                     "are refused, never overwritten."))
    schema.add_argument("dialect", choices=("d1", "postgres"))
    schema.add_argument("directory", help="where to write them (created if missing)")
    from tickwork.hosts.cpython import migrate_cli, worker_cli

    for name, module in (("migrate", migrate_cli), ("worker", worker_cli)):
        module.add_arguments(commands.add_parser(
            name, help=COMMANDS[name], description=plain_text(module.__doc__),
            formatter_class=argparse.RawDescriptionHelpFormatter))
    return parser


def write_schema(dialect: str, directory: str) -> int:
    """Write the migrations of ``dialect`` into ``directory``; 1 if a file there differs."""
    from pathlib import Path

    from tickwork.schemas import migrations

    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    found = migrations(dialect)  # type: ignore[arg-type]
    differing = [m.name for m in found if (target / m.name).exists()
                 and (target / m.name).read_text(encoding="utf-8") != m.sql]
    if differing:
        print(f"tickwork schema: {', '.join(differing)} in {target} differ from this "
              "version's; nothing written", file=sys.stderr)
        return 1
    for migration in found:
        path = target / migration.name
        if not path.exists():
            path.write_text(migration.sql, encoding="utf-8")
            print(f"wrote {path}")
    return 0


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
    if options.command == "schema":
        return write_schema(options.dialect, options.directory)
    if options.command == "migrate":
        from tickwork.hosts.cpython import migrate_cli

        return migrate_cli.main(options)
    if options.command == "worker":
        from tickwork.hosts.cpython import worker_cli

        return worker_cli.main(options)
    if options.command in ("jobs", "queues", "schedules"):
        from tickwork.hosts.cpython import actions_cli

        return actions_cli.main(options)
    assert options.command == "inspect", options.command
    from tickwork.hosts.cpython import inspect_cli

    return inspect_cli.main(options)


if __name__ == "__main__":
    raise SystemExit(main())
