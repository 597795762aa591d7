"""The package-owned SQL schemas of the shared runtimes, for any migration tool.

The files live in ``schema/d1`` (``wrangler d1 migrations`` format) and
``schema/postgres`` at the top of the repository, and ship inside the package
(``tickwork/_schema`` points there). Opening a runtime never applies them;
``tickwork migrate postgres`` applies PostgreSQL's (see its module,
``tickwork.hosts.cpython.migrate_cli``).

    from tickwork.schemas import migrations
    for migration in migrations("postgres"):
        print(migration.name)       # 0001_tickwork_jobs.sql
        run(migration.sql)          # with your tool, in order
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Literal

from tickwork.model.errors import InvalidArgument

Dialect = Literal["d1", "postgres"]


@dataclass(frozen=True, slots=True)
class Migration:
    name: str  # file name; the number prefix gives the order
    sql: str

    def statements(self) -> list[str]:
        """The file split into single statements (for drivers that run one at a time)."""
        return split_statements(self.sql)


def migrations(dialect: Dialect) -> list[Migration]:
    """Every migration of ``dialect``, in the order to apply them."""
    if dialect not in ("d1", "postgres"):
        raise InvalidArgument("dialect", f"must be 'd1' or 'postgres', got {dialect!r}")
    folder = resources.files("tickwork").joinpath("_schema", dialect)
    found = sorted(
        (entry.name, entry.read_text(encoding="utf-8"))
        for entry in folder.iterdir()
        if entry.name.endswith(".sql")
    )
    return [Migration(name, text) for name, text in found]


def split_statements(sql: str) -> list[str]:
    """Split SQL text on top-level semicolons.

    Understands ``--`` comments, quoted strings and identifiers, PostgreSQL
    dollar-quoted bodies, and SQLite trigger bodies (``BEGIN ... END``).
    """
    statements: list[str] = []
    current: list[str] = []
    index, length = 0, len(sql)
    depth = 0  # BEGIN ... END nesting inside CREATE TRIGGER
    word = ""
    while index < length:
        char = sql[index]
        if char == "-" and sql.startswith("--", index):
            end = sql.find("\n", index)
            index = length if end < 0 else end
            continue
        if char in ("'", '"'):
            end = index + 1
            while end < length:
                if sql[end] == char:
                    if end + 1 < length and sql[end + 1] == char:
                        end += 2
                        continue
                    break
                end += 1
            current.append(sql[index : end + 1])
            index = end + 1
            word = ""
            continue
        if char == "$":
            close = sql.find("$", index + 1)
            tag = sql[index : close + 1] if close > 0 else ""
            if tag and (tag == "$$" or tag[1:-1].isidentifier()):
                end = sql.find(tag, close + 1)
                end = length if end < 0 else end + len(tag)
                current.append(sql[index:end])
                index = end
                continue
        if char.isalnum() or char == "_":
            word += char
        else:
            upper = word.upper()
            if upper in ("BEGIN", "CASE") and _in_trigger(current):
                depth += 1
            elif upper == "END" and depth:
                depth -= 1
            word = ""
        if char == ";" and depth == 0:
            text = "".join(current).strip()
            if text:
                statements.append(text)
            current = []
        else:
            current.append(char)
        index += 1
    text = "".join(current).strip()
    if text:
        statements.append(text)
    return statements


def _in_trigger(current: list[str]) -> bool:
    return "CREATE TRIGGER" in " ".join("".join(current).upper().split())
