"""docs/reference/command-line.md lists exactly the options the parsers have.

The page cannot drift from the commands: every (sub)command has its section,
headed ``## `tickwork <command> [<action>]```, whose tables name each of
its options and positional arguments (a table row starting with a
backticked name), and nothing else; the options every API command shares
are named once, in their own section. The exit codes are the ones
``tickwork.hosts.cpython.api_commands`` defines.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

from tickwork.__main__ import build_parser
from tickwork.hosts.cpython import actions_cli
from tickwork.hosts.cpython.api_commands import EXIT_CODES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "command-line.md"
COMMON_SECTION = "Options of every API command"
API_COMMANDS = {"inspect", *actions_cli.COMMANDS}

Command = tuple[str, ...]


def commands(parser: argparse.ArgumentParser, path: Command = ()
             ) -> Iterator[tuple[Command, argparse.ArgumentParser]]:
    """Every parser that runs something (a leaf), and the top-level one."""
    subcommands = [action for action in parser._actions
                   if isinstance(action, argparse._SubParsersAction)]
    if not subcommands or not path:
        yield path, parser
    for action in subcommands:
        for name, child in action.choices.items():
            yield from commands(child, (*path, name))


def names(parser: argparse.ArgumentParser) -> set[str]:
    """Its options (long forms) and positional arguments (as METAVAR)."""
    found = set()
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            found.add(max(action.option_strings, key=len))
        else:
            found.add(action.metavar if isinstance(action.metavar, str)
                      else action.dest.upper())
    return found


def sections(text: str) -> dict[str, str]:
    """Each ``##`` or ``###`` section's text, by its heading."""
    parts = re.split(r"^#{2,3} (.+)$", text, flags=re.MULTILINE)
    return {heading.strip(): body for heading, body in zip(parts[1::2], parts[2::2],
                                                            strict=True)}


def documented(section: str) -> set[str]:
    """The names a section's table rows start with (``| `--limit N` |`` is --limit)."""
    return {cell.split()[0] for cell in re.findall(r"^\| `([^`]+)`", section, re.MULTILINE)}


def test_every_command_and_option_is_on_the_page() -> None:
    text = PAGE.read_text(encoding="utf-8")
    found = sections(text)
    every = dict(commands(build_parser()))
    api_actions = [parser for path, parser in every.items()
                   if path and path[0] in actions_cli.COMMANDS]
    common = set.intersection(*(names(parser) for parser in api_actions))
    assert {"--url", "--token", "--owner", "--shared", "--json"} <= common
    assert documented(found[COMMON_SECTION]) == common

    for path, parser in every.items():
        heading = "`" + " ".join(("tickwork", *path)) + "`"
        assert heading in found, f"no section {heading} on {PAGE.name}"
        expected = names(parser)
        if path and path[0] in API_COMMANDS:
            expected -= common
        assert documented(found[heading]) == expected, heading
        if len(path) == 1 or (path and path[0] in actions_cli.COMMANDS):
            assert f"[`tickwork {path[0]}`](#" in text, f"tickwork {path[0]} not in the table"
    unknown = {heading for heading in found if heading.startswith("`tickwork")} - {
        "`" + " ".join(("tickwork", *path)) + "`" for path in every}
    assert not unknown, f"sections for commands that do not exist: {unknown}"


def test_the_exit_codes_are_the_ones_the_commands_use() -> None:
    table = sections(PAGE.read_text(encoding="utf-8"))["Exit codes"]
    listed = [int(code) for code in re.findall(r"^\| (\d+) \|", table, re.MULTILINE)]
    assert listed == [code for code, _ in EXIT_CODES]
