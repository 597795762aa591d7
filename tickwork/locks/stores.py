"""The job lock's three stores: a sqlite3 connection, a D1 binding, a psycopg pool.

Each store is recognised by its shape, never by importing its driver (Workers
load this module, and it must import neither sqlite3 nor psycopg):

* a D1 binding has ``prepare`` and ``batch`` (either Workers SDK shape, or a
  ``tickwork.stores.d1.binding.D1Binding``);
* a psycopg 3 ``AsyncConnectionPool`` has ``connection()``;
* a sqlite3 ``Connection`` has synchronous ``execute`` and ``commit`` and an
  ``in_transaction`` flag.

Every method is one atomic step: one statement, or (to record a slot with the
release) one D1 batch, one sqlite3 transaction or one PostgreSQL statement.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import Any, Protocol

from tickwork.locks.statements import (
    POSTGRES_SLOT_LOCK,
    LockStatements,
    postgres_statements,
    sqlite_statements,
    table_ddl,
)
from tickwork.model.errors import InvalidArgument
from tickwork.stores.d1.binding import D1Binding
from tickwork.stores.postgres.connection import autocommit_connection


class LockStore(Protocol):
    """What ``JobLock`` needs from a database. ``now`` is the clock override."""

    kind: str
    migration: str | None  # where the default tables come from, if not created here

    async def ensure_tables(self) -> None: ...

    async def acquire(
        self, name: str, owner: str, ttl_ms: int, slot: str | None, now: int | None
    ) -> int | None:
        """The new fence if the lock was taken, else None."""

    async def renew(self, name: str, owner: str, extra_ms: int, now: int | None) -> bool:
        """True while ``owner`` still holds a live lock (now extended)."""

    async def release(
        self, name: str, owner: str, fence: int, slot: str | None, now: int | None
    ) -> bool:
        """Record ``slot`` (if any) as done and free the lock if ``owner`` holds it.

        True when the lock was still ours and is now free.
        """

    async def why_not(self, name: str, slot: str | None, now: int | None) -> tuple[bool, bool]:
        """(slot already done, lock held by a live owner)."""

    async def prune_slots(self, older_than_ms: int, name: str | None, now: int | None) -> int: ...


def lock_store_for(store: object, table: str) -> LockStore:
    """The adapter for ``store``, recognised by shape; InvalidArgument if none fits."""
    if isinstance(store, D1Binding):
        return D1LockStore(store, table)
    if callable(getattr(store, "prepare", None)) and callable(getattr(store, "batch", None)):
        return D1LockStore(D1Binding(store), table)
    if callable(getattr(store, "connection", None)):
        return PostgresLockStore(store, table)
    execute = getattr(store, "execute", None)
    if callable(execute) and callable(getattr(store, "commit", None)) \
            and hasattr(store, "in_transaction"):
        if inspect.iscoroutinefunction(execute):
            raise InvalidArgument(
                "store", "an async connection is not supported: pass a psycopg "
                         "AsyncConnectionPool (or a sqlite3 connection, or a D1 binding)")
        return Sqlite3LockStore(store, table)
    raise InvalidArgument(
        "store", f"must be a sqlite3 connection, a D1 binding or a psycopg 3 "
                 f"AsyncConnectionPool, got {type(store).__name__}")


# --------------------------------------------------------------------- sqlite3


class Sqlite3LockStore:
    """A CPython ``sqlite3.Connection``; synchronous calls, each committed at once.

    The connection may be in autocommit mode (``isolation_level=None``,
    recommended) or Python's default; either way every lock write commits
    before the call returns, so other connections see it. A connection that
    is inside a transaction of its own is refused (our write would not be
    visible until the caller commits), and so is ``autocommit=False``.
    """

    kind: str = "sqlite3"
    migration: str | None = None

    def __init__(self, conn: Any, table: str) -> None:
        self._conn = conn
        self._table = table
        self._sql: LockStatements = sqlite_statements(table)
        self._tables_ready = False

    def _check_usable(self) -> None:
        if getattr(self._conn, "autocommit", None) is False:
            raise InvalidArgument(
                "store", "a sqlite3 connection opened with autocommit=False never commits on "
                         "its own; open it with isolation_level=None")
        if self._conn.in_transaction:
            raise InvalidArgument(
                "store", "the sqlite3 connection is inside an open transaction; a lock must "
                         "commit by itself to be seen by other processes, so use a connection "
                         "that is not inside one")

    def _transaction(self, steps: list[tuple[str, tuple[Any, ...]]]) -> list[tuple[Any, ...]]:
        """Run ``steps`` in one committed transaction; the last step's rows."""
        return self._run(steps)[0]

    def _run(self, steps: list[tuple[str, tuple[Any, ...]]]) -> tuple[list[tuple[Any, ...]], int]:
        """``steps`` in one committed transaction: the last step's rows and row count.

        Several steps run inside BEGIN IMMEDIATE (the write lock first, so
        the transaction never has to upgrade); a single statement commits by
        itself (autocommit) or right after it ran (Python's implicit BEGIN).
        """
        self._check_usable()
        conn = self._conn
        if len(steps) > 1:
            conn.execute("BEGIN IMMEDIATE")
        try:
            rows: list[tuple[Any, ...]] = []
            count = 0
            for sql, params in steps:
                cursor = conn.execute(sql, params)
                rows = cursor.fetchall()  # before COMMIT: RETURNING rows come as it runs
                count = cursor.rowcount
            if conn.in_transaction:
                conn.commit()
        except BaseException:
            if conn.in_transaction:
                conn.rollback()
            raise
        return rows, count

    async def ensure_tables(self) -> None:
        if self._tables_ready:
            return
        self._transaction([(ddl, ()) for ddl in
                           table_ddl("sqlite", self._table, if_not_exists=True)])
        self._tables_ready = True

    async def acquire(
        self, name: str, owner: str, ttl_ms: int, slot: str | None, now: int | None
    ) -> int | None:
        rows = self._transaction([(self._sql.acquire, (now, name, owner, ttl_ms, slot))])
        return int(rows[0][0]) if rows else None

    async def renew(self, name: str, owner: str, extra_ms: int, now: int | None) -> bool:
        return bool(self._transaction([(self._sql.renew, (now, name, owner, extra_ms))]))

    async def release(
        self, name: str, owner: str, fence: int, slot: str | None, now: int | None
    ) -> bool:
        steps: list[tuple[str, tuple[Any, ...]]] = [(self._sql.release, (now, name, owner))]
        if slot is not None:
            steps.insert(0, (self._sql.record_slot, (now, name, slot, fence)))
        return bool(self._transaction(steps))

    async def why_not(self, name: str, slot: str | None, now: int | None) -> tuple[bool, bool]:
        row = self._transaction([(self._sql.why_not, (now, name, slot))])[0]
        return bool(row[0]), bool(row[1])

    async def prune_slots(self, older_than_ms: int, name: str | None, now: int | None) -> int:
        return self._run([(self._sql.prune_slots, (now, older_than_ms, name))])[1]


# -------------------------------------------------------------------------- D1


class D1LockStore:
    """A D1 binding: one statement per step, one batch for release with a slot."""

    kind: str = "d1"
    migration: str | None = "schema/d1/0002_job_locks.sql"

    def __init__(self, d1: D1Binding, table: str) -> None:
        self._d1 = d1
        self._sql = sqlite_statements(table)

    async def ensure_tables(self) -> None:
        return None  # from the migration (or table_ddl for another name)

    async def acquire(
        self, name: str, owner: str, ttl_ms: int, slot: str | None, now: int | None
    ) -> int | None:
        rows = await self._d1.query(self._sql.acquire, (now, name, owner, ttl_ms, slot))
        return int(rows[0][0]) if rows else None

    async def renew(self, name: str, owner: str, extra_ms: int, now: int | None) -> bool:
        return bool(await self._d1.query(self._sql.renew, (now, name, owner, extra_ms)))

    async def release(
        self, name: str, owner: str, fence: int, slot: str | None, now: int | None
    ) -> bool:
        if slot is None:
            return bool(await self._d1.query(self._sql.release, (now, name, owner)))
        # One batch: D1 runs it as one transaction, so nobody can find the
        # lock free while the slot is still unrecorded.
        _, released = await self._d1.batch(
            [(self._sql.record_slot, (now, name, slot, fence)),
             (self._sql.release, (now, name, owner))],
            [(), ("fence",)],
        )
        return bool(released)

    async def why_not(self, name: str, slot: str | None, now: int | None) -> tuple[bool, bool]:
        row = (await self._d1.query(self._sql.why_not, (now, name, slot)))[0]
        return bool(row[0]), bool(row[1])

    async def prune_slots(self, older_than_ms: int, name: str | None, now: int | None) -> int:
        return await self._d1.run(self._sql.prune_slots, (now, older_than_ms, name))


# ------------------------------------------------------------------ PostgreSQL


class PostgresLockStore:
    """A psycopg 3 ``AsyncConnectionPool``; each step in its own transaction.

    PostgreSQL's READ COMMITTED gives each statement a snapshot, and an
    ``ON CONFLICT DO UPDATE`` re-checks its WHERE on the latest row version
    but evaluates sub-queries (our "slot already done?") in the older
    snapshot. A slot run's release could then commit between a competing
    acquisition's snapshot and its row lock, and that acquisition would run
    the finished slot again. So acquisitions and releases of runs with a
    slot take a per-name advisory transaction lock in a statement of their
    own first: the next statement's snapshot then sees every slot recorded
    before it. Runs without a slot need no such lock: their acquisition is
    decided on the locked row alone.
    """

    kind: str = "postgres"
    migration: str | None = "schema/postgres/0002_job_locks.sql"

    def __init__(self, pool: Any, table: str) -> None:
        self._pool = pool
        self._table = table
        self._sql = postgres_statements(table)

    def _connection(self) -> contextlib.AbstractAsyncContextManager[Any]:
        return autocommit_connection(self._pool)

    async def _rows(self, sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        async with self._connection() as conn:
            cursor = await conn.execute(sql, params, prepare=True)
            return await cursor.fetchall() if cursor.description else []

    async def _serialised_rows(
        self, name: str, sql: str, params: dict[str, Any]
    ) -> list[tuple[Any, ...]]:
        """``sql`` after the per-name slot lock, in one transaction (one round trip)."""
        key = {"key": f"tickwork_job_lock:{self._table}:{name}"}
        async with self._connection() as conn, conn.pipeline(), conn.transaction():
            await conn.execute(POSTGRES_SLOT_LOCK, key)
            cursor = await conn.execute(sql, params, prepare=True)
            rows: list[tuple[Any, ...]] = await cursor.fetchall()
        return rows

    async def ensure_tables(self) -> None:
        return None  # from the migration (or table_ddl for another name)

    async def acquire(
        self, name: str, owner: str, ttl_ms: int, slot: str | None, now: int | None
    ) -> int | None:
        params = {"name": name, "owner": owner, "ttl_ms": ttl_ms, "slot": slot, "now": now}
        if slot is None:
            rows = await self._rows(self._sql.acquire, params)
        else:
            rows = await self._serialised_rows(name, self._sql.acquire, params)
        return int(rows[0][0]) if rows else None

    async def renew(self, name: str, owner: str, extra_ms: int, now: int | None) -> bool:
        params = {"name": name, "owner": owner, "extra_ms": extra_ms, "now": now}
        return bool(await self._rows(self._sql.renew, params))

    async def release(
        self, name: str, owner: str, fence: int, slot: str | None, now: int | None
    ) -> bool:
        params = {"name": name, "owner": owner, "fence": fence, "slot": slot, "now": now}
        if slot is None:
            return bool(await self._rows(self._sql.release, params))
        return bool(await self._serialised_rows(name, self._sql.release, params))

    async def why_not(self, name: str, slot: str | None, now: int | None) -> tuple[bool, bool]:
        row = (await self._rows(self._sql.why_not, {"name": name, "slot": slot, "now": now}))[0]
        return bool(row[0]), bool(row[1])

    async def prune_slots(self, older_than_ms: int, name: str | None, now: int | None) -> int:
        async with self._connection() as conn:
            cursor = await conn.execute(
                self._sql.prune_slots, {"older_than_ms": older_than_ms, "name": name, "now": now})
            return int(cursor.rowcount)
