"""Python's ``sqlite3`` as an owner: the embedded default.

The module never imports ``sqlite3`` itself (Workers cannot load it); it
only calls methods of the connection the host hands in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ..errors import TickworkError
from .base import Row, SqlValue

T = TypeVar("T")


class Sqlite3Owner:
    """Wraps a ``sqlite3.Connection`` (a file or ``:memory:``).

    Transactions are explicit: outside a host transaction ``atomic`` runs
    ``BEGIN IMMEDIATE`` ... ``COMMIT``; inside one (``connection.in_transaction``)
    it uses a SAVEPOINT, so the host's own writes and the job commit together
    when the host commits. The connection must not use ``autocommit=False``
    (Python 3.12+), which keeps a transaction open forever and would never
    let the engine's writes commit on their own.
    """

    def __init__(self, connection: Any) -> None:
        if getattr(connection, "autocommit", None) is False:
            raise TickworkError(
                "Sqlite3Owner needs a connection with autocommit=True or the default "
                "legacy transaction control; autocommit=False never commits engine writes"
            )
        self.connection = connection
        self._depth = 0

    def query(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        rows: list[Row] = self.connection.execute(sql, params).fetchall()
        return rows

    def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None:
        self.connection.execute(sql, params).fetchall()

    def mutate(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        connection = self.connection
        if connection.in_transaction or _autocommits(connection):
            # Joins the open transaction, or autocommits by itself.
            return self.query(sql, params)
        # Legacy transaction control opens a transaction implicitly before
        # a write; close it so the statement is durable when we return.
        try:
            rows = self.query(sql, params)
        except BaseException:
            if connection.in_transaction:
                connection.rollback()
            raise
        connection.commit()
        return rows

    def atomic(self, fn: Callable[[], T]) -> T:
        connection = self.connection
        if connection.in_transaction:
            return self._savepoint(fn)
        connection.execute("BEGIN IMMEDIATE")
        try:
            result = fn()
        except BaseException:
            # Some errors (SQLITE_FULL, ...) already ended the transaction.
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        # Plain COMMIT (not connection.commit()) behaves the same under every
        # transaction-control mode Python offers.
        connection.execute("COMMIT")
        return result

    def _savepoint(self, fn: Callable[[], T]) -> T:
        name = f"tickwork_{self._depth}"
        connection = self.connection
        connection.execute(f"SAVEPOINT {name}")
        self._depth += 1
        try:
            result = fn()
        except BaseException:
            if connection.in_transaction:
                connection.execute(f"ROLLBACK TO {name}")
                connection.execute(f"RELEASE {name}")
            raise
        finally:
            self._depth -= 1
        connection.execute(f"RELEASE {name}")
        return result


def _autocommits(connection: Any) -> bool:
    """True when a lone statement commits by itself on this connection."""
    # Python 3.12+ autocommit=True, or isolation_level=None on any version.
    return getattr(connection, "autocommit", None) is True or connection.isolation_level is None
