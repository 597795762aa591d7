"""The database port: the only thing a synchronous SQLite store has to provide.

A database executes statements and runs a function atomically. It makes no
lifecycle decisions; those live in ``tickwork.lifecycle`` and the runtime.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeAlias, TypeVar, runtime_checkable

#: Values tickwork binds: TEXT, INTEGER (within +-(2**53 - 1)), REAL, BLOB, NULL.
SqlValue: TypeAlias = str | int | float | bytes | None
#: A result row, columns in the order the statement selected them. Integers may
#: arrive as floats (JS numbers); NULL is always None.
Row: TypeAlias = tuple[Any, ...]

T = TypeVar("T")


class SyncDatabase(Protocol):
    """A synchronous SQLite capability."""

    def query(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        """Run one statement and return all its rows (also for RETURNING)."""
        ...

    def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None:
        """Run one statement whose rows, if any, are not needed."""
        ...

    def mutate(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        """Run one write statement and return its rows (RETURNING).

        Outside a transaction the statement commits on its own: a single
        statement is atomic, so it needs no BEGIN/COMMIT around it. Inside
        ``atomic`` (or a host transaction) it joins that transaction.
        """
        ...

    def atomic(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` so that all its writes commit together or not at all.

        Nests: inside a transaction the host (or an outer ``atomic``) opened,
        it rolls back only ``fn``'s writes when ``fn`` raises, and re-raises.
        """
        ...


@runtime_checkable
class CountingDatabase(SyncDatabase, Protocol):
    """A SyncDatabase that can also say how many rows a write changed.

    Optional: the owner-local store runs its inserts, hot claim and
    settlements without RETURNING on a database that has it (SQLite runs
    RETURNING as a trigger program buffering its rows, about a quarter of
    those statements' cost), and with RETURNING on any other (the Durable
    Object's storage).
    """

    def mutate_count(self, sql: str, params: Sequence[SqlValue] = ()) -> int:
        """Run one write statement without RETURNING, like ``mutate`` (it
        commits on its own outside a transaction), and return how many rows
        it changed."""
        ...


@runtime_checkable
class SizedDatabase(SyncDatabase, Protocol):
    """A SyncDatabase that can say how large it is without reading its rows.

    Optional: an owner's storage report (``tickwork.lifecycle.operations.storage``)
    gives the size of a database that has it, and None otherwise."""

    def size_bytes(self) -> int:
        """The bytes of the pages in use: (page_count - freelist_count) x
        page_size, a Durable Object's ``ctx.storage.sql.databaseSize``. Pages
        a delete freed leave it at once, though the file keeps them."""
        ...
