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
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from tickwork._pyodide import load_jsnull, plain_value, to_sql_bindings
from tickwork.model.errors import InvalidArgument
from tickwork.ports.database import Row, SqlValue

T = TypeVar("T")

#: Durable Object SQLite accepts at most this many bound parameters per statement.
MAX_BOUND_PARAMETERS = 100


class DurableObjectDatabase:
    """Wraps ``ctx.storage`` of a SQLite-backed Durable Object."""

    def __init__(self, storage: Any) -> None:
        self.storage = storage
        self._sql = storage.sql
        # Looked up per instance, not at import, so tests can install a
        # stand-in and CPython hosts without Pyodide still import this module.
        self._jsnull = load_jsnull()

    def query(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        cursor = self._exec(sql, params)
        names = [str(name) for name in cursor.columnNames]
        # Consume the cursor now: it must not outlive the next await.
        return [self._row(row, names) for row in cursor.toArray()]

    def execute(self, sql: str, params: Sequence[SqlValue] = ()) -> None:
        self._exec(sql, params).toArray()

    def mutate(self, sql: str, params: Sequence[SqlValue] = ()) -> list[Row]:
        # Every statement is atomic on its own; inside transactionSync it
        # joins the transaction.
        return self.query(sql, params)

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
            self.storage.transactionSync(run)
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
        return self._sql.exec(sql, *to_sql_bindings(params, self._jsnull))

    def _row(self, row: Any, names: list[str]) -> Row:
        if not isinstance(row, Mapping):
            to_py = getattr(row, "to_py", None)
            row = to_py() if to_py is not None else {name: getattr(row, name) for name in names}
        return tuple(self._value(row[name]) for name in names)

    def _value(self, value: Any) -> Any:
        return plain_value(value, self._jsnull)
