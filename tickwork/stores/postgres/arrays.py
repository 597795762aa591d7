"""Array parameters written as PostgreSQL array literals.

The claim/settle statement takes six arrays and batched ingest nine. Handed
Python lists, psycopg inspects every list to choose an element type and
escapes every element through its generic dumpers: about 50 us of client
CPU per 10-job claim/settle statement, several microseconds per job. Each
statement already casts its array parameters (``%(x)s::text[]``), so a
parameter may instead be the array's text form, built here with one join
(about 5 us for the same statement).

Every text element is double-quoted, with ``\\`` and ``"`` escaped by a
backslash; in PostgreSQL's array syntax that reads back as exactly the
element, commas, braces, spaces, quotes and the word NULL included. Only
Python's None becomes an unquoted NULL.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["bigint_array", "text_array"]


def text_array(values: Iterable[str | None]) -> str:
    """The literal of a ``text[]`` holding ``values`` (None is NULL)."""
    return "{" + ",".join("NULL" if value is None else _quoted(value) for value in values) + "}"


def bigint_array(values: Iterable[int | None]) -> str:
    """The literal of a ``bigint[]`` holding ``values`` (None is NULL)."""
    return "{" + ",".join("NULL" if value is None else _integer(value) for value in values) + "}"


def _integer(value: int) -> str:
    # Exactly int: "%d" would turn 1.5 into 1 and True into 1 without a word.
    if type(value) is not int:
        raise TypeError(f"a bigint[] element must be int or None, not {type(value).__name__}")
    return str(value)


def _quoted(value: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a text[] element must be str or None, not {type(value).__name__}")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
