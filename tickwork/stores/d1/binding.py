"""The edge between Python and a D1 binding (``env.DB``): values in, rows out.

A D1 binding answers in one of two shapes. The built-in Workers SDK hands
back raw JS proxies (``.to_py()``, SQL NULL as ``pyodide.ffi.jsnull``, whole
numbers as ints); the external SDK (``workers-runtime-sdk``) hands back
dict-like rows. Both are normalised here, once, so the store sees plain
Python: lists of rows, ``None`` for NULL, ``int`` for every integral number
(tickwork stores no REALs, and keeps every integer within +-(2**53 - 1)).

Binding goes through ``tickwork._pyodide.to_sql_bindings``: D1 rejects JS
``undefined`` (what Python ``None`` becomes through Pyodide's raw FFI), so
NULL is bound as ``jsnull`` whenever Pyodide is present, and it rejects
BigInts, so every integer crosses as a JS Number (the bounds +-(2**53 - 1)
as the equal float). ``pyodide`` is looked up per instance, not at import,
so CPython hosts and tests with a stand-in both work.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tickwork._pyodide import load_jsnull, load_to_js_for, plain_value, to_sql_bindings

#: D1 accepts at most this many bound parameters per statement.
MAX_BOUND_PARAMETERS = 100


class D1Binding:
    """A D1 database binding with plain-Python answers."""

    def __init__(self, db: Any) -> None:
        self.db = db
        self._jsnull = load_jsnull()
        self._to_js = load_to_js_for(db)

    def prepare(self, sql: str, values: Sequence[Any] = ()) -> Any:
        """A prepared statement with ``values`` bound (for ``query``/``batch``)."""
        if len(values) > MAX_BOUND_PARAMETERS:
            raise ValueError(
                f"{len(values)} bound parameters; D1 allows {MAX_BOUND_PARAMETERS} per statement"
            )
        statement = self.db.prepare(sql)
        if not values:
            return statement
        return statement.bind(*to_sql_bindings(values, self._jsnull))

    async def query(self, sql: str, values: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement; its rows (RETURNING rows for writes) as tuples."""
        result = await self.prepare(sql, values).raw()
        return [tuple(self._value(v) for v in _py(row)) for row in (_py(result) or [])]

    async def run(self, sql: str, values: Sequence[Any] = ()) -> int:
        """Run one write; the number of rows it changed."""
        result = await self.prepare(sql, values).run()
        return int(self._value(_field(_field(result, "meta"), "changes")) or 0)

    async def batch(
        self, statements: Sequence[Any], columns: Sequence[Sequence[str] | None]
    ) -> list[list[tuple[Any, ...]]]:
        """Run statements as one D1 batch (one round trip, all or nothing).

        Each statement is an ``(sql, values)`` pair, prepared here, or a
        statement the caller already prepared on this database
        (``db.prepare(...).bind(...)``), passed through untouched.
        ``columns[i]`` names the result columns of statement i, in the order
        the rows should have (batch rows come back as objects keyed by name);
        None leaves that statement's result unread (its rows are ``[]``).
        """
        prepared = [self.prepare(*item) if isinstance(item, tuple) else item
                    for item in statements]
        results = await self.db.batch(self._js_list(prepared))
        out: list[list[tuple[Any, ...]]] = []
        for result, names in zip(_py(results), columns, strict=True):
            if names is None:
                out.append([])
                continue
            rows = _py(_field(result, "results")) or []
            out.append([tuple(self._value(_field(_py(row), n)) for n in names) for row in rows])
        return out

    def _js_list(self, items: list[Any]) -> Any:
        # The built-in SDK's raw binding wants a JS array; the external SDK
        # takes a Python list.
        return items if self._to_js is None else self._to_js(items)

    def _value(self, value: Any) -> Any:
        return plain_value(value, self._jsnull)


def _py(value: Any) -> Any:
    to_py = getattr(value, "to_py", None)
    return to_py() if callable(to_py) else value


def _field(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)
