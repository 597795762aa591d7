"""A faithful CPython stand-in for a SQLite-backed Durable Object's ``ctx.storage``.

Python Workers cannot start on these machines, so the Durable Object glue is
tested against this. It is built to reproduce the runtime's rules, not to be
lenient: where the real runtime would silently corrupt a value, the stand-in
raises :class:`StricterThanWorkersError` instead (see "Deliberate deviations").

Two result shapes, chosen per instance with ``sdk=``:

``"builtin"``
    The ``workers`` module built into workerd passes ``ctx`` through
    untouched, so ``ctx.storage`` and everything it returns are raw JsProxies
    (confirmed: workerd ``src/pyodide/internal/workers-api/src/workers/_workers.py``
    ``_wrap_subclass`` only patches ``waitUntil`` and wraps ``env``).
    ``toArray()`` gives a JS Array (``length``, ``len()``, indexing,
    iteration, ``to_py()``); rows are plain JS objects (``row.col``,
    ``row.to_py()``, not subscriptable); ``raw()`` yields JS Arrays; SQL NULL
    reads as ``pyodide.ffi.jsnull``.

``"external"``
    PyPI ``workers-runtime-sdk`` wraps ``ctx.storage`` in ``_BindingWrapper``
    (confirmed: workers-py ``packages/runtime-sdk/src/workers/entrypoints.py``
    ``DurableObjectContext``; ``_BindingWrapper`` in ``_workers.py``). This
    module ports that wrapper's behaviour (:class:`_BindingWrapper`): every
    argument goes through ``python_to_rpc`` (``None`` -> JS null, ``bytes`` ->
    Uint8Array, ``tuple``/``bytearray`` -> TypeError), every result through
    ``python_from_rpc`` (``to_py()``, then JS null -> ``None``, dicts become
    ``JsDict`` -- a dict with attribute access), and a result that is still a
    JsProxy is wrapped again. Consequences that are reproduced on purpose:
    ``toArray()`` is a ``list`` of ``JsDict``; ``raw()`` yields lists; BLOBs
    come back as ``memoryview``; and a non-callable attribute is cached on the
    wrapper at first access (``__getattr__`` does ``setattr``), so
    ``cursor.rowsRead`` read before the cursor is consumed stays stale, and
    ``storage.sql.databaseSize`` is frozen after its first read.

Rules reproduced (M = measured in a real workerd, see "Measured in real workerd"
in ``python-workers-facts.md``; C = confirmed in source/docs via the search
tool; A = assumption). Where a measurement and anything else here disagree,
the measurement wins.

* C ``sql.exec(query, *bindings)`` runs at once and returns a cursor;
  ``toArray()``, ``one()``, ``raw()``, ``next()``, iteration, ``columnNames``,
  ``rowsRead``, ``rowsWritten``. ``one()`` raises ``Error: Expected exactly one
  result from SQL query, but got no results.`` / ``... multiple results.``
  (workerd ``src/workerd/api/sql.c++``).
* C Several statements separated by ``;`` run in order; the bindings apply to
  the last one and the cursor is the last one's (developers.cloudflare.com
  durable-objects/api/sql-storage).
* C ``BEGIN``/``COMMIT``/``ROLLBACK``/``END``/``SAVEPOINT``/``RELEASE`` are
  refused by SQLite's authorizer (any case, after comments), with workerd's
  message (``SqlStorage::allowTransactions`` in sql.c++). Reproduced with a
  real SQLite authorizer, so exactly the statements SQLite classifies as
  transaction/savepoint statements are refused.
* C Names starting with ``_cf_`` are refused (``isAllowedName``; the
  action-code -> table-name mapping of sql.c++ ``getAuthorizorTableName``),
  error ``not authorized: SQLITE_AUTH``.
* C/A ``PRAGMA user_version`` is refused (facts file; old workerd denied every
  PRAGMA). A: the allow-list :data:`ALLOWED_PRAGMAS` of read-only/harmless
  pragmas is a guess at workerd's current one.
* C At most 100 bound parameters (``SQLITE_LIMIT_VARIABLE_NUMBER`` = 100). M:
  the error names SQLite's error offset, ``too many SQL variables at offset
  207: SQLITE_ERROR`` (found here by :func:`first_variable_beyond`). A: the
  other limits in :data:`SQLITE_LIMITS` follow the facts file (100 KB
  statement, 2 MB value or row, 100 columns, compound SELECT of 5).
* C Bindings are ``kj::Maybe<OneOf<bytes, String, double>>``: JS null and
  undefined bind NULL (M: binding Python None, which crosses as undefined,
  stores NULL), an ArrayBuffer/TypedArray binds a BLOB, a string TEXT, a
  number a *double* -- so every integer is bound as REAL (``typeof(?)`` is
  ``'real'``; into a TEXT column 5 is stored as ``'5.0'``). M: a bool becomes
  a string (``True`` stores the TEXT ``'true'``). M: a BigInt -- every Python
  int outside the strict bounds ``-(2**53 - 1) < n < 2**53 - 1``, the bounds
  included -- makes the call throw ``TypeError: Cannot convert a BigInt value
  to a number`` (workerd ``jsg/value.h`` OneOfWrapper, sql.c++ ``mapBindings``).
* C Results: INTEGER is cast to double, so reads lose precision beyond 2**53;
  Pyodide then turns a number into ``int`` when ``Number.isSafeInteger`` and
  ``float`` otherwise. So INTEGER columns read back as Python ``int`` (not
  float) within +-(2**53 - 1), and a REAL holding ``2.0`` also reads back as
  ``int`` 2 (pyodide ``src/core/js2python.js``). NULL -> JS null -> ``jsnull``
  (builtin) / ``None`` (external). BLOB -> ArrayBuffer.
* C ``transactionSync(fn)``: ``SAVEPOINT _cf_sync_savepoint_<depth>``, run fn,
  ``RELEASE``; on an exception ``ROLLBACK TO`` and rethrow. So it nests, and
  returns fn's result -- after a round trip through JS (a float with an
  integral value comes back as ``int``) (workerd ``actor-state.c++``).
* C Alarms: ``setAlarm(ms | Date)``, ``getAlarm()`` (null when unset),
  ``deleteAlarm()``, all returning promises; a non-finite time raises
  ``TypeError: The value cannot be converted because it is not a valid Date.``
  and the time is truncated to whole milliseconds (jsg ``DateWrapper``). Kept
  in a ``_cf_METADATA`` table (A: modelled on workerd's sqlite-metadata), so
  it persists with the database and is rolled back with a transaction.
* C ``databaseSize`` = (page_count - freelist_count) * page_size (sql.c++).

Deliberate deviations (the stand-in is stricter; all raise
:class:`StricterThanWorkersError`, a ``TypeError``). Only for what was not
measured: where the runtime was measured to accept something (None, a bool),
the stand-in accepts it too, and tickwork's own rules (bind JS null, bind
booleans as 1/0) are checked by the tests that watch what tickwork binds.

* Binding raw ``bytes`` (built-in SDK) or any other object. The runtime
  coerces these to *strings* (WebIDL union conversion falls back to String):
  ``b'ab'`` (a PyProxy) -> ``"b'ab'"``, a list -> ``'1,2'``. With the built-in
  SDK pass ``pyodide.ffi.to_js(b)`` (a Uint8Array) for a BLOB; the external
  SDK converts ``bytes`` itself.
* An ``async`` fn, or any awaitable result, in ``transactionSync``. The
  runtime would return the un-run coroutine after committing an empty
  savepoint, so nothing the coroutine writes would be inside the transaction.
* ``exec`` with keyword arguments (Pyodide would pass them as one trailing JS
  object, which would be coerced to ``'[object Object]'``), or a non-``str`` query.
* ``reject_undefined_binding=True`` (not the default) refuses Python None, for
  a test that wants to see an accidental undefined.

Not modelled (lenient): rows are fetched eagerly, so a cursor is a snapshot
(the real cursor steps lazily, and an unconsumed one can block ``DROP TABLE``
with ``SQLITE_LOCKED``); ``rowsRead`` counts rows handed out, not rows SQLite
scanned; outside ``transactionSync`` every statement autocommits (the runtime
batches writes until the next ``await``); the KV API, ``sync()``,
``deleteAll()``, ``prepare()`` and ``ingest()`` are absent.
"""

from __future__ import annotations

import contextlib
import datetime
import inspect
import math
import os
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any, Literal

from .pyodide_ffi import (
    MAX_SAFE_INTEGER,
    JsArray,
    JsBigInt,
    JsBuffer,
    JsDate,
    JsDoubleProxy,
    JsException,
    JsIterator,
    JsNull,
    JsObject,
    JsPromise,
    JsProxy,
    PyProxy,
    create_proxy,
    js_to_py,
    jsnull,
    object_from_entries,
    py_to_js,
    to_js,
)

Sdk = Literal["builtin", "external"]

#: workerd's message for BEGIN/SAVEPOINT & co. (``SqlStorage::allowTransactions``).
TRANSACTION_ERROR_MESSAGE = (
    "To execute a transaction, please use the state.storage.transaction() or "
    "state.storage.transactionSync() APIs instead of the SQL BEGIN TRANSACTION or SAVEPOINT "
    "statements. The JavaScript API is safer because it will automatically roll back on "
    "exceptions, and because it interacts correctly with Durable Objects' automatic atomic "
    "write coalescing."
)
#: ``Cursor::one()`` messages (sql.c++).
ONE_NO_RESULTS = "Expected exactly one result from SQL query, but got no results."
ONE_MULTIPLE_RESULTS = "Expected exactly one result from SQL query, but got multiple results."
#: A: wording of workerd's binding-count and empty-query errors.
WRONG_BINDING_COUNT = "Wrong number of parameter bindings for SQL query."
NO_STATEMENT = "SQL code did not contain a statement."
BIGINT_BINDING = "Cannot convert a BigInt value to a number"
INVALID_DATE = "The value cannot be converted because it is not a valid Date."

MAX_BOUND_PARAMETERS = 100
SQLITE_LIMITS: dict[int, int] = {
    sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER: MAX_BOUND_PARAMETERS,
    sqlite3.SQLITE_LIMIT_SQL_LENGTH: 100_000,
    sqlite3.SQLITE_LIMIT_LENGTH: 2_000_000,
    sqlite3.SQLITE_LIMIT_COLUMN: 100,
    sqlite3.SQLITE_LIMIT_COMPOUND_SELECT: 5,
}
#: A: pragmas let through (everything else, e.g. ``user_version``, is refused).
ALLOWED_PRAGMAS = frozenset(
    {
        "data_version",
        "defer_foreign_keys",
        "foreign_key_check",
        "foreign_key_list",
        "foreign_keys",
        "index_info",
        "index_list",
        "index_xinfo",
        "integrity_check",
        "optimize",
        "quick_check",
        "table_info",
        "table_list",
        "table_xinfo",
    }
)

# Which authorizer argument names the table for each action (sql.c++
# getAuthorizorTableName): 1 = arg1, 2 = arg2.
_TABLE_ARGUMENT: dict[int, int] = {
    sqlite3.SQLITE_CREATE_INDEX: 2,
    sqlite3.SQLITE_CREATE_TABLE: 1,
    sqlite3.SQLITE_CREATE_TEMP_INDEX: 2,
    sqlite3.SQLITE_CREATE_TEMP_TABLE: 1,
    sqlite3.SQLITE_CREATE_TEMP_TRIGGER: 2,
    sqlite3.SQLITE_CREATE_TRIGGER: 2,
    sqlite3.SQLITE_DELETE: 1,
    sqlite3.SQLITE_DROP_INDEX: 2,
    sqlite3.SQLITE_DROP_TABLE: 1,
    sqlite3.SQLITE_DROP_TEMP_INDEX: 2,
    sqlite3.SQLITE_DROP_TEMP_TABLE: 1,
    sqlite3.SQLITE_DROP_TEMP_TRIGGER: 2,
    sqlite3.SQLITE_DROP_TRIGGER: 2,
    sqlite3.SQLITE_INSERT: 1,
    sqlite3.SQLITE_READ: 1,
    sqlite3.SQLITE_UPDATE: 1,
    sqlite3.SQLITE_ALTER_TABLE: 2,
    sqlite3.SQLITE_ANALYZE: 1,
    sqlite3.SQLITE_CREATE_VTABLE: 1,
    sqlite3.SQLITE_DROP_VTABLE: 1,
}

_METADATA_TABLE = "_cf_METADATA"
_ALARM_KEY = 1


class StricterThanWorkersError(TypeError):
    """The stand-in refuses something the real runtime would accept but
    mishandle (see "Deliberate deviations" in the module docstring)."""


class EvictedStorageError(RuntimeError):
    """This storage object was replaced by :meth:`FakeDurableObjectStorage.reopen`."""


# ---------------------------------------------------------------------------
# The database (shared by every storage object opened over it by ``reopen``)
# ---------------------------------------------------------------------------
class _Database:
    def __init__(self, path: str) -> None:
        self.path = path
        # cached_statements=0: every statement is prepared afresh, so the
        # authorizer sees every one (a cached statement would skip it).
        self.connection = sqlite3.connect(path, isolation_level=None, cached_statements=0)
        for category, value in SQLITE_LIMITS.items():
            self.connection.setlimit(category, value)
        self.admin = False
        self.denied_transaction = False
        self.transaction_depth = 0
        self.connection.set_authorizer(self._authorize)

    @property
    def in_memory(self) -> bool:
        return self.path == ":memory:" or self.path.startswith("file::memory:")

    def close(self) -> None:
        self.connection.close()

    # -- authorizer -----------------------------------------------------------
    def _authorize(
        self, action: int, arg1: str | None, arg2: str | None, _db: str | None, _src: str | None
    ) -> int:
        if self.admin:
            return sqlite3.SQLITE_OK
        which = _TABLE_ARGUMENT.get(action)
        table = (arg1 if which == 1 else arg2) if which else None
        if table is not None and table.startswith("_cf_"):
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_PRAGMA:
            if (arg1 or "").lower() not in ALLOWED_PRAGMAS:
                return sqlite3.SQLITE_DENY
            if arg2 is not None and arg2.startswith("_cf_"):
                return sqlite3.SQLITE_DENY
        if action in (sqlite3.SQLITE_TRANSACTION, sqlite3.SQLITE_SAVEPOINT):
            self.denied_transaction = True
            return sqlite3.SQLITE_DENY
        if action in (sqlite3.SQLITE_ATTACH, sqlite3.SQLITE_DETACH):
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    @contextlib.contextmanager
    def trusted(self) -> Iterator[sqlite3.Connection]:
        """Run the stand-in's own statements past the authorizer."""
        previous = self.admin
        self.admin = True
        try:
            yield self.connection
        finally:
            self.admin = previous

    # -- user statements ----------------------------------------------------------
    def run(self, query: str, values: list[Any]) -> _JsCursor:
        statements = split_statements(query)
        if not statements:
            raise JsException("Error", NO_STATEMENT)
        cursor = self.connection.cursor()
        statement = statements[0]
        try:
            for statement in statements[:-1]:
                self._execute(cursor, statement, [])
                cursor.fetchall()
            statement = statements[-1]
            before = self.connection.total_changes
            self._execute(cursor, statement, values)
            columns = [column[0] for column in cursor.description or ()]
            rows = [tuple(_sqlite_to_js(value) for value in row) for row in cursor.fetchall()]
            written = self.connection.total_changes - before
        except sqlite3.Error as error:
            raise self._translate(error, statement) from None
        finally:
            cursor.close()
        return _JsCursor(columns, rows, written)

    def _execute(self, cursor: sqlite3.Cursor, statement: str, values: list[Any]) -> None:
        self.denied_transaction = False
        cursor.execute(statement, values)

    def _translate(self, error: sqlite3.Error, statement: str) -> JsException:
        if self.denied_transaction:
            return JsException("Error", TRANSACTION_ERROR_MESSAGE)
        text = str(error)
        if isinstance(error, sqlite3.ProgrammingError) and "number of bindings" in text:
            return JsException("Error", WRONG_BINDING_COUNT)
        code = getattr(error, "sqlite_errorname", None) or "SQLITE_ERROR"
        if text == "too many SQL variables":
            # workerd appends SQLite's error offset (measured: "too many SQL
            # variables at offset 207: SQLITE_ERROR"); Python's sqlite3 does
            # not expose it, so it is found the way SQLite's parser finds it.
            offset = first_variable_beyond(statement, MAX_BOUND_PARAMETERS)
            if offset is not None:
                text = f"{text} at offset {offset}"
        return JsException("Error", f"{text}: {code}")

    # -- savepoints for transactionSync ---------------------------------------------
    def trusted_execute(self, statement: str) -> None:
        with self.trusted() as connection:
            connection.execute(statement)

    # -- metadata ---------------------------------------------------------------
    def database_size(self) -> int:
        with self.trusted() as connection:
            pages = connection.execute("PRAGMA page_count").fetchone()[0]
            free = connection.execute("PRAGMA freelist_count").fetchone()[0]
            page_size = connection.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * page_size)

    def get_alarm(self) -> int | None:
        with self.trusted() as connection:
            exists = connection.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (_METADATA_TABLE,)
            ).fetchone()
            if exists is None:
                return None
            row = connection.execute(
                f"SELECT value FROM {_METADATA_TABLE} WHERE key = ?", (_ALARM_KEY,)
            ).fetchone()
        return None if row is None else row[0]  # stored as a whole number of ms

    def set_alarm(self, millis: int | None) -> None:
        with self.trusted() as connection:
            if millis is None:
                if self.get_alarm() is not None:
                    connection.execute(
                        f"DELETE FROM {_METADATA_TABLE} WHERE key = ?", (_ALARM_KEY,)
                    )
                return
            connection.execute(
                f"CREATE TABLE IF NOT EXISTS {_METADATA_TABLE} "
                "(key INTEGER PRIMARY KEY, value INTEGER NOT NULL)"
            )
            connection.execute(
                f"INSERT OR REPLACE INTO {_METADATA_TABLE} (key, value) VALUES (?, ?)",
                (_ALARM_KEY, millis),
            )


def _sqlite_to_js(value: Any) -> Any:
    """A column value as workerd hands it to JS (``Cursor::iteratorImpl``)."""
    if value is None:
        return jsnull
    if isinstance(value, int):
        return float(value)  # int64 -> double: precision is lost beyond 2**53
    if isinstance(value, bytes):
        return JsBuffer(value, kind="ArrayBuffer")
    return value  # float, str


def _skip_space_and_comments(text: str) -> str:
    while True:
        stripped = text.lstrip()
        if stripped.startswith("--"):
            newline = stripped.find("\n")
            text = "" if newline == -1 else stripped[newline + 1 :]
        elif stripped.startswith("/*"):
            end = stripped.find("*/", 2)
            text = "" if end == -1 else stripped[end + 2 :]
        else:
            return stripped


def split_statements(query: str) -> list[str]:
    """Split SQL text into statements the way SQLite's tokenizer would (so
    ``;`` inside strings, comments and trigger bodies does not split), dropping
    empty ones."""
    pieces: list[str] = []
    start = 0
    search = 0
    while (semicolon := query.find(";", search)) != -1:
        candidate = query[start : semicolon + 1]
        if sqlite3.complete_statement(candidate):
            pieces.append(candidate)
            start = semicolon + 1
        search = semicolon + 1
    pieces.append(query[start:])
    return [piece for piece in pieces if _skip_space_and_comments(piece) not in ("", ";")]


def first_variable_beyond(statement: str, limit: int) -> int | None:
    """The UTF-8 byte offset of the first parameter of ``statement`` whose
    number exceeds ``limit`` (where SQLite reports "too many SQL variables"),
    or None. ``?`` takes the next number after the largest so far, ``?NNN``
    its own, and each distinct ``:name``/``@name``/``$name`` the next one;
    string literals, quoted identifiers and comments are skipped."""
    data = statement.encode("utf-8")
    position, largest, named = 0, 0, set()
    length = len(data)
    while position < length:
        char = data[position:position + 1]
        if char in (b"'", b'"', b"`", b"["):
            closing = b"]" if char == b"[" else char
            end = data.find(closing, position + 1)
            while closing != b"]" and end != -1 and data[end + 1:end + 2] == closing:
                end = data.find(closing, end + 2)  # a doubled quote escapes itself
            position = length if end == -1 else end + 1
            continue
        if data.startswith(b"--", position):
            end = data.find(b"\n", position)
            position = length if end == -1 else end + 1
            continue
        if data.startswith(b"/*", position):
            end = data.find(b"*/", position + 2)
            position = length if end == -1 else end + 2
            continue
        if char in (b"?", b":", b"@", b"$"):
            start = position
            position += 1
            while position < length and (data[position:position + 1].isalnum()
                                         or data[position:position + 1] == b"_"):
                position += 1
            token = data[start + 1:position]
            if char == b"?":
                number = int(token) if token.isdigit() else largest + 1
            elif token and token not in named:
                named.add(token)
                number = largest + 1
            else:
                continue
            largest = max(largest, number)
            if number > limit:
                return start
            continue
        position += 1
    return None


# ---------------------------------------------------------------------------
# The JavaScript side: DurableObjectStorage, SqlStorage, SqlStorageCursor
# ---------------------------------------------------------------------------
class _Handle:
    """What the JS objects of one storage object share."""

    def __init__(self, database: _Database, reject_undefined_binding: bool) -> None:
        self.database = database
        self.reject_undefined_binding = reject_undefined_binding
        self.evicted = False

    def check(self) -> _Database:
        if self.evicted:
            raise EvictedStorageError(
                "this Durable Object storage was evicted (reopened); use the new storage object"
            )
        return self.database


class _JsCursor(JsProxy):
    """``SqlStorageCursor``: the rows of the last statement, handed out once."""

    _js_class = "SqlStorageCursor"

    def __init__(self, columns: list[str], rows: list[tuple[Any, ...]], written: int) -> None:
        self._column_names = JsArray(columns)
        self._columns = columns
        self._rows = rows
        self._position = 0
        self._rows_read = 0
        self._rows_written = written

    # JS properties -----------------------------------------------------------
    @property
    def columnNames(self) -> JsArray:
        return self._column_names

    @property
    def rowsRead(self) -> int:
        return int(js_to_py(float(self._rows_read)))

    @property
    def rowsWritten(self) -> int:
        return int(js_to_py(float(self._rows_written)))

    # JS methods ---------------------------------------------------------------
    def toArray(self) -> JsArray:
        rows: list[JsObject] = []
        while (values := self._take()) is not None:
            rows.append(self._object(values))
        return JsArray(rows)

    def one(self) -> JsObject:
        values = self._take()
        if values is None:
            raise JsException("Error", ONE_NO_RESULTS)
        if self._position < len(self._rows):
            self._position = len(self._rows)
            raise JsException("Error", ONE_MULTIPLE_RESULTS)
        return self._object(values)

    def raw(self) -> JsIterator:
        def arrays() -> Iterator[JsArray]:
            while (values := self._take()) is not None:
                yield JsArray(values)

        return JsIterator(arrays())

    def next(self) -> JsObject:
        values = self._take()
        if values is None:
            return JsObject([("done", True), ("value", None)])
        return JsObject([("done", False), ("value", self._object(values))])

    def __iter__(self) -> Iterator[JsObject]:
        while (values := self._take()) is not None:
            yield self._object(values)

    def __repr__(self) -> str:
        return "[object SqlStorageCursor]"

    # internals -----------------------------------------------------------------
    def _take(self) -> tuple[Any, ...] | None:
        if self._position >= len(self._rows):
            return None
        values = self._rows[self._position]
        self._position += 1
        self._rows_read += 1
        return values

    def _object(self, values: tuple[Any, ...]) -> JsObject:
        # A duplicate column name keeps the last value, as result.set() does.
        return JsObject(zip(self._columns, values, strict=True))


class _JsSqlStorage(JsProxy):
    """``SqlStorage`` (``ctx.storage.sql``)."""

    _js_class = "SqlStorage"

    def __init__(self, handle: _Handle) -> None:
        self._handle = handle

    @property
    def databaseSize(self) -> int:
        return int(js_to_py(float(self._handle.check().database_size())))

    def exec(self, query: Any, *bindings: Any, **options: Any) -> _JsCursor:
        database = self._handle.check()
        if options:
            raise StricterThanWorkersError(
                "sql.exec() got keyword arguments; Pyodide would pass them as one trailing JS "
                "object binding, which the runtime coerces to the string '[object Object]'"
            )
        js_query = py_to_js(query)
        if not isinstance(js_query, str):
            raise StricterThanWorkersError(
                f"sql.exec() query must be a str, got {type(query).__name__}"
            )
        values = [self._binding(py_to_js(value), index) for index, value in enumerate(bindings)]
        return database.run(js_query, values)

    def _binding(self, value: Any, index: int) -> Any:
        """A JS-side binding as SQLite gets it (``kj::Maybe<OneOf<bytes, String, double>>``)."""
        if value is None:
            if self._handle.reject_undefined_binding:
                raise StricterThanWorkersError(
                    f"binding {index} is Python None, which Pyodide passes as JS undefined. "
                    "(workerd binds undefined as NULL, as it does by default here; this "
                    "storage was built with reject_undefined_binding=True.)"
                )
            return None  # measured: binding None stores NULL
        if value is jsnull:
            return None
        if isinstance(value, bool):
            return "true" if value else "false"  # measured: True stores the TEXT 'true'
        if isinstance(value, (float, str)):
            return value
        if isinstance(value, JsBigInt):
            raise JsException("TypeError", BIGINT_BINDING)
        if isinstance(value, JsBuffer):
            return value.to_bytes()
        if isinstance(value, PyProxy) and isinstance(value.obj, (bytes, bytearray, memoryview)):
            raise StricterThanWorkersError(
                f"binding {index} is a raw {type(value.obj).__name__}, which reaches JS as a "
                "PyProxy; the runtime would store its str() as TEXT. Bind "
                "pyodide.ffi.to_js(value) (a Uint8Array) to store a BLOB."
            )
        shown = value.obj if isinstance(value, PyProxy) else value
        raise StricterThanWorkersError(
            f"binding {index} is {type(shown).__name__}; the runtime would coerce it to a "
            "string. Bind str, int, float, a Uint8Array (to_js(bytes)) or jsnull."
        )

    def __repr__(self) -> str:
        return "[object SqlStorage]"


class _JsDurableObjectStorage(JsProxy):
    """``DurableObjectStorage`` (``ctx.storage``) of a SQLite-backed object."""

    _js_class = "DurableObjectStorage"

    def __init__(self, handle: _Handle) -> None:
        self._handle = handle
        self._sql = _JsSqlStorage(handle)

    @property
    def sql(self) -> _JsSqlStorage:
        self._handle.check()
        return self._sql

    def transactionSync(self, callback: Any = None) -> Any:
        database = self._handle.check()
        function = _python_callable(py_to_js(callback))
        if function is None:
            raise JsException(
                "TypeError",
                "Failed to execute 'transactionSync' on 'DurableObjectStorage': "
                "parameter 1 is not of type 'Function'.",
            )
        depth = database.transaction_depth
        name = f"_cf_sync_savepoint_{depth}"
        database.transaction_depth += 1
        try:
            database.trusted_execute(f"SAVEPOINT {name}")
            try:
                result = function()
                if inspect.isawaitable(result):
                    if inspect.iscoroutine(result):
                        result.close()
                    raise StricterThanWorkersError(
                        "transactionSync() callback returned an awaitable: it must be a plain "
                        "synchronous function (the runtime would commit an empty transaction "
                        "and hand back the un-run coroutine)"
                    )
            except BaseException:
                database.trusted_execute(f"ROLLBACK TO {name}")
                database.trusted_execute(f"RELEASE {name}")
                raise
            database.trusted_execute(f"RELEASE {name}")
        finally:
            database.transaction_depth -= 1
        # The result goes back to JS (transactionSync returns it) and from JS
        # to Python again.
        return js_to_py(py_to_js(result))

    def setAlarm(self, scheduledTime: Any = None, options: Any = None) -> JsPromise:
        del options
        database = self._handle.check()
        value = py_to_js(scheduledTime)
        if isinstance(value, JsDate):
            millis = value._millis
        elif isinstance(value, float):
            millis = value
        else:
            return JsPromise(error=JsException(
                "TypeError",
                "Failed to execute 'setAlarm' on 'DurableObjectStorage': "
                "parameter 1 is not of type 'Date'.",
            ))
        if not math.isfinite(millis):
            return JsPromise(error=JsException("TypeError", INVALID_DATE))
        database.set_alarm(int(millis))  # kj::Date keeps whole milliseconds
        return JsPromise(None)

    def getAlarm(self, options: Any = None) -> JsPromise:
        del options
        millis = self._handle.check().get_alarm()
        return JsPromise(jsnull if millis is None else float(millis))

    def deleteAlarm(self, options: Any = None) -> JsPromise:
        del options
        self._handle.check().set_alarm(None)
        return JsPromise(None)

    def __repr__(self) -> str:
        return "[object DurableObjectStorage]"


def _python_callable(value: Any) -> Callable[[], Any] | None:
    """The Python function behind a JS-side callback value, if it is one."""
    if isinstance(value, PyProxy) and callable(value.obj):
        function: Callable[[], Any] = value.obj
        return function
    if isinstance(value, JsDoubleProxy) and callable(value.unwrap()):
        proxied: Callable[[], Any] = value.unwrap()
        return proxied
    return None


# ---------------------------------------------------------------------------
# The external SDK's wrapper (behaviour of workers-runtime-sdk's
# _BindingWrapper / python_to_rpc / python_from_rpc, re-implemented)
# ---------------------------------------------------------------------------
class JsDict(dict[str, Any]):
    """A dict whose keys also read as attributes (workers-runtime-sdk ``JsDict``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        self[name] = value


def _has_constructor(value: Any) -> bool:
    return hasattr(value, "constructor")


def _is_js_instance(value: Any, class_name: str) -> bool:
    return _has_constructor(value) and value.constructor.name == class_name


def _from_rpc_default_converter(value: Any, _convert: Any, _cache: Any) -> Any:
    if value is jsnull:
        return None
    if not _has_constructor(value):
        return value
    name = value.constructor.name
    if name == "Date":
        return datetime.datetime.fromtimestamp(value.getTime() / 1000)
    if name == "Number":
        return value.valueOf()
    return value


def _replace_jsnull_with_none(value: Any) -> Any:
    if value is jsnull:
        return None
    if isinstance(value, dict):
        return JsDict({key: _replace_jsnull_with_none(item) for key, item in value.items()})
    if isinstance(value, list):
        return [_replace_jsnull_with_none(item) for item in value]
    return value


def python_from_rpc(value: Any) -> Any:
    """``workers.rpc.python_from_rpc`` (what the external SDK returns to you)."""
    if value is jsnull:
        return None
    if not _has_constructor(value):
        return value
    if value.constructor.name == "TestController":
        return None
    return _replace_jsnull_with_none(value.to_py(default_converter=_from_rpc_default_converter))


def _is_iterable(value: Any) -> bool:
    if isinstance(value, (str, bytes)):
        return False
    try:
        iter(value)
    except TypeError:
        return False
    return True


def _raise_on_disabled_type(value: Any) -> None:
    if isinstance(value, _BindingWrapper):
        return
    if callable(value) and not isinstance(value, type):
        return
    if _is_js_instance(value, "RegExp"):
        raise TypeError(f"{value.constructor.name} cannot be sent over RPC.")
    if isinstance(value, (tuple, bytearray)):
        raise TypeError(f"{type(value)} cannot be sent over RPC.")
    if inspect.isawaitable(value):
        raise TypeError(f"Awaitable {type(value)} cannot be sent over RPC.")
    if _is_iterable(value):
        for item in value.values() if isinstance(value, dict) else value:
            _raise_on_disabled_type(item)


def _to_rpc_default_converter(value: Any, _convert: Any, _cache: Any) -> Any:
    if value is None:
        return jsnull
    if isinstance(value, _BindingWrapper):
        return value._binding
    if hasattr(value, "js_object"):
        return value.js_object
    if isinstance(value, datetime.datetime):
        return JsDate(value.timestamp() * 1000)
    if isinstance(value, Exception):
        return JsObject([("message", str(value))])
    if callable(value) and not isinstance(value, type):
        return create_proxy(value)
    _raise_on_disabled_type(value)
    return value


def _replace_none_with_jsnull(value: Any) -> Any:
    if value is None:
        return jsnull
    if isinstance(value, dict):
        return {key: _replace_none_with_jsnull(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_replace_none_with_jsnull(item) for item in value]
    return value


def python_to_rpc(value: Any) -> Any:
    """``workers.rpc.python_to_rpc`` (what the external SDK sends for you)."""
    if value is None:
        return jsnull
    if isinstance(value, _BindingWrapper):
        return value._binding
    value = _replace_none_with_jsnull(value)
    _raise_on_disabled_type(value)
    return to_js(
        value,
        default_converter=_to_rpc_default_converter,
        dict_converter=object_from_entries,
    )


class _BindingWrapper:
    """``workers._workers._BindingWrapper`` around one of the JS objects above."""

    def __init__(self, binding: Any) -> None:
        self._binding = binding

    @property
    def _real_name(self) -> str:
        try:
            return str(self._binding.constructor.name)
        except Exception:
            return type(self).__name__

    def _convert_result(self, result: Any) -> Any:
        converted = python_from_rpc(result)
        if isinstance(converted, JsProxy):
            return self.__class__(converted)
        return converted

    def _getattr_helper(self, name: str) -> Any:
        attr = getattr(self._binding, name)
        if not callable(attr):
            return self._convert_result(attr)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            js_args = [python_to_rpc(arg) for arg in args]
            js_kwargs = {key: python_to_rpc(value) for key, value in kwargs.items()}
            result = attr(*js_args, **js_kwargs)
            then = getattr(result, "then", None)
            if then is not None and callable(then):

                async def await_and_convert() -> Any:
                    return self._convert_result(await result)

                return await_and_convert()
            return self._convert_result(result)

        return wrapper

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_binding":
            raise AttributeError(name)
        result = self._getattr_helper(name)
        # The SDK caches every attribute on the wrapper, values included.
        setattr(self, name, result)
        return result

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, int):
            return self._convert_result(self._binding[key])
        return self._convert_result(getattr(self._binding, key))

    def __iter__(self) -> Iterator[Any]:
        binding = self._binding
        if not hasattr(binding, "__iter__"):
            raise TypeError(f"'{self._real_name}' object is not iterable")
        for item in binding:
            yield self._convert_result(item)

    def __len__(self) -> int:
        binding = self._binding
        if not hasattr(binding, "length"):
            raise TypeError(f"'{self._real_name}' object has no len()")
        return int(binding.length)


# ---------------------------------------------------------------------------
# Public entry point
# ---------------------------------------------------------------------------
class FakeDurableObjectStorage:
    """Stands in for ``ctx.storage`` of a SQLite-backed Durable Object.

    ``path`` is a sqlite file (or ``":memory:"``). Constructing another
    storage over the same file is like a second process opening it (both stay
    usable); :meth:`reopen` is an eviction: it builds the object's next
    incarnation over the same database and makes the old one unusable.

    ``sql``, ``transactionSync`` and the alarm methods behave as the chosen
    SDK (``"builtin"`` or ``"external"``) would show them to Python.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] = ":memory:",
        *,
        sdk: Sdk = "builtin",
        reject_undefined_binding: bool = False,
        _database: _Database | None = None,
    ) -> None:
        if sdk not in ("builtin", "external"):
            raise ValueError(f"sdk must be 'builtin' or 'external', not {sdk!r}")
        self._database = _database if _database is not None else _Database(os.fspath(path))
        self._sdk: Sdk = sdk
        self._handle = _Handle(self._database, reject_undefined_binding)
        self._js = _JsDurableObjectStorage(self._handle)
        self._view: Any = self._js if sdk == "builtin" else _BindingWrapper(self._js)

    # -- identity ------------------------------------------------------------
    @property
    def sdk(self) -> Sdk:
        return self._sdk

    @property
    def path(self) -> str:
        return self._database.path

    @property
    def evicted(self) -> bool:
        return self._handle.evicted

    def __repr__(self) -> str:
        return f"FakeDurableObjectStorage({self.path!r}, sdk={self.sdk!r})"

    # -- the real API (as the SDK shows it) -----------------------------------------
    @property
    def sql(self) -> Any:
        self._handle.check()
        return self._view.sql

    def transactionSync(self, fn: Callable[[], Any]) -> Any:
        self._handle.check()
        return self._view.transactionSync(fn)

    def setAlarm(self, scheduled_time: Any, options: Any = None) -> Any:
        """Awaitable, like the real (``await storage.setAlarm(ms)``)."""
        self._handle.check()
        if options is None:
            return self._view.setAlarm(scheduled_time)
        return self._view.setAlarm(scheduled_time, options)

    def getAlarm(self) -> Any:
        """Awaitable: epoch ms as int, or jsnull (builtin) / None (external) when unset."""
        self._handle.check()
        return self._view.getAlarm()

    def deleteAlarm(self) -> Any:
        """Awaitable."""
        self._handle.check()
        return self._view.deleteAlarm()

    # -- lifecycle ------------------------------------------------------------
    @classmethod
    def reopen(
        cls,
        previous: FakeDurableObjectStorage,
        *,
        sdk: Sdk | None = None,
        reject_undefined_binding: bool | None = None,
    ) -> FakeDurableObjectStorage:
        """Evict ``previous`` and return a new storage over the same database.

        For a file the new object gets a fresh connection (so only committed
        data survives); an in-memory database is handed over as it is.
        """
        database = previous._handle.check()
        if database.transaction_depth:
            raise RuntimeError("cannot evict inside transactionSync()")
        previous._handle.evicted = True
        options: dict[str, Any] = {
            "sdk": sdk if sdk is not None else previous.sdk,
            "reject_undefined_binding": (
                previous._handle.reject_undefined_binding
                if reject_undefined_binding is None
                else reject_undefined_binding
            ),
        }
        if database.in_memory:
            return cls(database.path, _database=database, **options)
        database.close()
        return cls(database.path, **options)

    def close(self) -> None:
        """Close the connection (the object is unusable afterwards)."""
        self._handle.evicted = True
        self._database.close()

    # -- test helpers (not part of the real API) ---------------------------------
    def debug_query(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        """Run SQL with plain sqlite3 semantics, past every rule (for assertions)."""
        with self._database.trusted() as connection:
            return [tuple(row) for row in connection.execute(statement, params)]


__all__ = [
    "ALLOWED_PRAGMAS",
    "MAX_BOUND_PARAMETERS",
    "MAX_SAFE_INTEGER",
    "ONE_MULTIPLE_RESULTS",
    "ONE_NO_RESULTS",
    "SQLITE_LIMITS",
    "TRANSACTION_ERROR_MESSAGE",
    "EvictedStorageError",
    "FakeDurableObjectStorage",
    "JsDict",
    "JsNull",
    "Sdk",
    "StricterThanWorkersError",
    "python_from_rpc",
    "python_to_rpc",
    "split_statements",
]
