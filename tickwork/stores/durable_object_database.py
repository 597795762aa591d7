"""A Durable Object's SQLite storage (``ctx.storage``) as a SyncDatabase.

Runs under Pyodide with either Python Workers SDK:

* the built-in ``workers`` module hands back raw JsProxy results, and SQL
  NULL arrives as ``pyodide.ffi.jsnull`` (truthy, not None);
* the external ``workers-runtime-sdk`` hands back dict-like rows.

Both are normalised here, once, to tuples of plain Python values. The
storage refuses BEGIN/COMMIT/SAVEPOINT, so atomicity comes only from
``transactionSync``, which nests. INTEGER columns read back as ints (Pyodide
turns a whole JS number into an int; an integral float left over is turned
into an int here; every stored integer is kept within +-(2**53 - 1), so none
loses precision). Bindings cross as ``tickwork._pyodide.to_sql_bindings``
makes them: every integer a JS Number, None as JS null, a bool as 1/0.

Every call into JS costs a Pyodide FFI round trip (about 1 us for a no-op
call, 12-18 us for ``SELECT 1`` through ``exec`` and ``toArray()``, measured
by ``bench.durable_object``), which a real object pays beside SQLite's own
work; so a statement costs three: ``exec``, ``toArray()`` and one
``to_py()`` of the whole result, whatever its rows and columns. Column
names, needed only to put a row's values in order, are read once per
statement text and kept (see ``_rows``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from tickwork._pyodide import load_jsnull, to_sql_bindings
from tickwork.model.errors import InvalidArgument
from tickwork.ports.database import Row, SqlValue

T = TypeVar("T")

#: Durable Object SQLite accepts at most this many bound parameters per statement.
MAX_BOUND_PARAMETERS = 100


class DurableObjectDatabase:
    """Wraps ``ctx.storage`` of a SQLite-backed Durable Object."""

    def __init__(self, storage: Any) -> None:
        self.storage = storage
        # The bound JS methods, looked up once: each lookup is a round trip.
        self._sql_exec = storage.sql.exec
        self._transaction_sync = storage.transactionSync
        # Looked up per instance, not at import, so tests can install a
        # stand-in and CPython hosts without Pyodide still import this module.
        self._jsnull = load_jsnull()
        #: Statement text -> its result's column names (fixed by the text:
        #: tickwork's statements name their columns, or select * from a
        #: subquery that does).
        self._names: dict[str, list[str]] = {}

    def query(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        cursor = self._exec(sql, params)
        # Consume the cursor now (it must not outlive the next await), all
        # rows in one conversion: a list of dicts (the external SDK's
        # toArray() already is one).
        array = cursor.toArray()
        to_py = getattr(array, "to_py", None)
        rows = to_py() if to_py is not None else array
        if not rows:
            return []
        return self._rows(sql, cursor, rows)

    def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None:
        self._exec(sql, params).toArray()

    def mutate(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        # Every statement is atomic on its own; inside transactionSync it
        # joins the transaction.
        return self.query(sql, params)

    def size_bytes(self) -> int:
        """``ctx.storage.sql.databaseSize``: workerd's (page_count -
        freelist_count) x page_size, read without touching a row. Read on the
        JS object itself: the external SDK's wrapper keeps the first value of
        a plain attribute it returned (tests/support/fakes/do_storage.py)."""
        sql = self.storage.sql
        wrapped = getattr(sql, "_binding", None)  # the external SDK's wrapped JS object
        source = sql if wrapped is None or callable(wrapped) else wrapped
        return int(source.databaseSize)

    def atomic(self, fn: Callable[[], T]) -> T:
        # fn's result and error cross the JS boundary inside transactionSync;
        # keep both on the Python side so callers see the original objects.
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["result"] = fn()
            except BaseException as error:
                outcome["error"] = error
                raise

        try:
            self._transaction_sync(run)
        except BaseException:
            if "error" in outcome:
                raise outcome["error"] from None
            raise
        result: T = outcome["result"]
        return result

    def _exec(self, sql: str, params: Sequence[SqlValue]) -> Any:
        if len(params) > MAX_BOUND_PARAMETERS:
            raise InvalidArgument(
                "params",
                f"{len(params)} bound parameters; Durable Object SQLite allows "
                f"{MAX_BOUND_PARAMETERS} per statement",
            )
        return self._sql_exec(sql, *to_sql_bindings(params, self._jsnull))

    def _rows(self, sql: str, cursor: Any, rows: list[Any]) -> list[Row]:
        jsnull = self._jsnull
        names = self._names.get(sql)
        keys = list(rows[0])
        if names is None or keys != names:
            names = [str(name) for name in _plain_list(cursor.columnNames)]
            if len(self._names) >= _MAX_KEPT_SHAPES:
                self._names.clear()  # texts built per call (IN lists) must not pile up
            self._names[sql] = names
        if keys == names:
            # The row objects' keys are the columns, in order: take the values
            # as they come. (Not so when two columns share a name or a name
            # looks like an integer, which JS objects order first.)
            return [_plain_row(row.values(), jsnull) for row in rows]
        return [_plain_row([row[name] for name in names], jsnull) for row in rows]


def _plain_row(values: Iterable[Any], jsnull: object | None) -> Row:
    # plain_value of each value, inlined: it runs for every value of every row.
    return tuple([None if value is jsnull else
                  int(value) if type(value) is float and value.is_integer() else value
                  for value in values])


#: At most this many statement texts' column names are kept per object.
_MAX_KEPT_SHAPES = 512


def _plain_list(values: Any) -> Any:
    """A JS array as a Python list in one conversion (the external SDK gives a list)."""
    to_py = getattr(values, "to_py", None)
    return to_py() if to_py is not None else values
