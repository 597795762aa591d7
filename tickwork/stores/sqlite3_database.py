"""Python's ``sqlite3`` as a SyncDatabase: the embedded default.

The module never imports ``sqlite3`` itself (Workers cannot load it); it
only calls methods of the connection the host hands in.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from operator import attrgetter, methodcaller
from typing import Any, TypeVar

from tickwork.model.errors import DatabaseUnusable, TickworkError
from tickwork.ports.database import Row, SqlValue

T = TypeVar("T")


#: What a write reads from its cursor: its rows (RETURNING), or how many
#: rows it changed (C callables: no Python frame per statement).
_ROWS: Callable[[Any], list[Row]] = methodcaller("fetchall")
_ROW_COUNT: Callable[[Any], int] = attrgetter("rowcount")


class Sqlite3Database:
    """Wraps a ``sqlite3.Connection`` (a file or ``:memory:``).

    Transactions are explicit: outside a host transaction ``atomic`` runs
    ``BEGIN IMMEDIATE`` ... ``COMMIT``; inside one (``connection.in_transaction``)
    it uses a SAVEPOINT, so the host's own writes and the job commit together
    when the host commits. The connection must not use ``autocommit=False``
    (Python 3.12+), which keeps a transaction open forever and would never
    let the engine's writes commit on their own.

    A COMMIT can fail (``database is locked`` while another connection holds a
    read transaction in a rollback-journal database, a full disk, I/O
    errors). Then the transaction tickwork began is rolled back before the
    error reaches the caller: the operation failed and wrote nothing, and the
    connection is outside any transaction again, so later writes commit on
    their own instead of joining a transaction that nobody will commit. If
    the ROLLBACK fails too, every later call first tries the ROLLBACK again
    and, while it keeps failing, raises ``DatabaseUnusable`` instead of working
    inside that transaction. A host's own transaction is never committed or
    rolled back here: tickwork's writes inside it use a SAVEPOINT, released
    or rolled back to, and the host ends its transaction.
    """

    def __init__(self, connection: Any) -> None:
        if getattr(connection, "autocommit", None) is False:
            raise TickworkError(
                "Sqlite3Database needs a connection with autocommit=True or the default "
                "legacy transaction control; autocommit=False never commits engine writes"
            )
        self.connection = connection
        self._depth = 0
        # Why the transaction tickwork began is still open (its end failed).
        self._stuck: BaseException | None = None

    def query(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        if self._stuck is not None:
            self._leave_stuck_transaction()
        rows: list[Row] = self.connection.execute(sql, params).fetchall()
        return rows

    def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None:
        if self._stuck is not None:
            self._leave_stuck_transaction()
        self.connection.execute(sql, params).fetchall()

    def mutate(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        rows: list[Row] = self._write(_ROWS, sql, params)
        return rows

    def mutate_count(self, sql: str, params: Sequence[SqlValue] = ()) -> int:
        """``mutate`` for a write without RETURNING: how many rows it changed.

        What makes this a ``CountingDatabase``: the owner-local store runs
        its hot statements through it (see ``tickwork.stores.sql.sqlite.counted``)."""
        connection = self.connection
        if self._stuck is None and (connection.in_transaction
                                    or connection.isolation_level is None):
            # _write's common case, inline (the hot statements come here):
            # the statement joins the open transaction, or commits by itself.
            count: int = connection.execute(sql, params).rowcount
            return count
        changed: int = self._write(_ROW_COUNT, sql, params)
        return changed

    def _write(self, read: Callable[[Any], T], sql: str,
               params: Sequence[SqlValue]) -> T:
        """Run one write and ``read`` its cursor (its rows, or its row count),
        committed when we return."""
        if self._stuck is not None:
            self._leave_stuck_transaction()
        connection = self.connection
        if connection.isolation_level is None or connection.in_transaction \
                or _autocommits(connection):
            # Autocommits by itself, or joins the host's open transaction.
            return read(connection.execute(sql, params))
        # Legacy transaction control opens a transaction implicitly before a
        # write; end it here, so the statement is durable when we return, or
        # rolled back if the statement or its commit failed.
        try:
            result = read(connection.execute(sql, params))
            connection.commit()
        except BaseException as error:
            self._roll_back(error, lambda: connection.rollback())
            raise
        return result

    def size_bytes(self) -> int:
        """Pages in use times the page size (three pragmas: no row is read),
        as a Durable Object measures its ``databaseSize``."""
        connection = self.connection
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        free = connection.execute("PRAGMA freelist_count").fetchone()[0]
        return int((pages - free) * connection.execute("PRAGMA page_size").fetchone()[0])

    def atomic(self, fn: Callable[[], T]) -> T:
        if self._stuck is not None:
            self._leave_stuck_transaction()
        connection = self.connection
        if connection.in_transaction:
            return self._savepoint(fn)
        connection.execute("BEGIN IMMEDIATE")
        try:
            result = fn()
            # Plain COMMIT (not connection.commit()) behaves the same under
            # every transaction-control mode Python offers.
            connection.execute("COMMIT")
        except BaseException as error:
            # fn failed, or the COMMIT did (the transaction is then still
            # open): either way nothing of fn's may stay.
            self._roll_back(error, lambda: connection.execute("ROLLBACK"))
            raise
        return result

    def _savepoint(self, fn: Callable[[], T]) -> T:
        name = f"tickwork_{self._depth}"
        connection = self.connection
        connection.execute(f"SAVEPOINT {name}")
        self._depth += 1
        try:
            result = fn()
            connection.execute(f"RELEASE {name}")
        except BaseException:
            if connection.in_transaction:
                # Undo only fn's writes; the host's transaction stays the host's.
                connection.execute(f"ROLLBACK TO {name}")
                connection.execute(f"RELEASE {name}")
            raise
        finally:
            self._depth -= 1
        return result

    def _roll_back(self, cause: BaseException, roll_back: Callable[[], Any]) -> None:
        """End the transaction tickwork began, after ``cause`` stopped it."""
        if not self.connection.in_transaction:
            return  # some errors (SQLITE_FULL, ...) already ended it
        try:
            roll_back()
        except BaseException as error:
            if self.connection.in_transaction:
                self._stuck = error
                cause.add_note(f"and rolling back failed too ({error}); the database refuses "
                               "all work until a later ROLLBACK succeeds")

    def _leave_stuck_transaction(self) -> None:
        """Roll back the transaction a failed COMMIT and ROLLBACK left open, or refuse."""
        stuck = self._stuck
        if self.connection.in_transaction:
            try:
                self.connection.execute("ROLLBACK")
            except Exception as error:
                raise DatabaseUnusable(
                    "the sqlite3 connection is still inside a transaction tickwork began "
                    f"and could not end (COMMIT and ROLLBACK failed: {stuck}; ROLLBACK "
                    f"again: {error}); nothing reported as written is in it") from error
        self._stuck = None


def _autocommits(connection: Any) -> bool:
    """True when a lone statement commits by itself on this connection."""
    # Python 3.12+ autocommit=True, or isolation_level=None on any version.
    return getattr(connection, "autocommit", None) is True or connection.isolation_level is None
