"""``tickwork migrate postgres``: bring a PostgreSQL database to this package's schema.

    tickwork migrate postgres [--dsn DSN] [--sql]

Applies the migrations the database lacks, in order, from the ones this
package ships (the files ``tickwork schema postgres DIR`` writes), then
prints the schema version reached. Without ``--dsn`` it reads
``$DATABASE_URL``. Needs psycopg 3: ``pip install 'tickwork[postgres]'``.

* Every migration records its number as ``schema_version`` in
  ``tickwork_meta``; that number says what a database already has, so a
  second run applies nothing, and a database migrated by hand (``psql -f``)
  up to some version gets only the rest.
* The pending migrations run in one transaction: all of them are applied,
  or none.
* The transaction first takes a PostgreSQL advisory lock, so a second
  ``tickwork migrate`` started meanwhile (another deploy, another replica)
  waits, then finds the work done.
* A database at a newer schema version than this package knows is refused:
  upgrade tickwork (an older package never downgrades a schema).

``--sql`` applies nothing: it prints the SQL of the pending migrations (of
every migration when no DSN is given), each headed by a comment naming its
file, for your own migration tool, e.g. ``psql --single-transaction -f -``.

Exit status: 0 when the database is at this package's schema version (or the
SQL was printed), 1 for an error (one line on stderr), 2 for bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from tickwork.hosts.cpython.common import error_line, redact_dsn, stderr
from tickwork.schemas import Migration, migrations
from tickwork.stores.schema_version import POSTGRES_MIGRATIONS
from tickwork.stores.sql import postgres as postgres_sql

#: Where the DSN comes from when --dsn is absent.
DSN_ENV = "DATABASE_URL"

#: The advisory lock every ``tickwork migrate postgres`` takes in its transaction:
#: the bytes of "tickmigr". A one-bigint key, so it never meets the claims'
#: per-queue locks (two-int keys) whatever the queue names hash to.
MIGRATE_LOCK_KEY = int.from_bytes(b"tickmigr", "big")

#: How long to wait for PostgreSQL to accept the connection, unless the DSN says.
CONNECT_TIMEOUT_S = 15

INSTALL_HINT = "needs psycopg 3: pip install 'tickwork[postgres]'"


class MigrateError(Exception):
    """What went wrong, as the one line the command prints."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dialect", choices=("postgres",),
                        help="the database to migrate (D1 is migrated by wrangler d1 "
                             "migrations apply; see tickwork schema d1)")
    parser.add_argument("--dsn", metavar="DSN",
                        help=f"the PostgreSQL database, e.g. postgresql://user@host/db "
                             f"(default ${DSN_ENV})")
    parser.add_argument("--sql", action="store_true",
                        help="print the pending migrations' SQL instead of applying it "
                             "(every migration's when there is no DSN)")


def main(options: argparse.Namespace) -> int:
    try:
        return migrate(options.dsn or os.environ.get(DSN_ENV) or None, sql_only=options.sql)
    except MigrateError as error:
        stderr(f"tickwork migrate: {error}")
        return 1
    except KeyboardInterrupt:  # the transaction, if any, was never committed
        stderr("tickwork migrate: interrupted; nothing was applied")
        return 130


def migrate(dsn: str | None, *, sql_only: bool = False,
            write: Callable[[str], None] | None = None,
            log: Callable[[str], None] | None = None) -> int:
    """Apply (or with ``sql_only`` print) the pending migrations of ``dsn``.

    ``write`` receives stdout's text, ``log`` stderr's lines. Raises
    MigrateError with a one-line message for anything that went wrong.
    """
    out = write or _stdout
    err = log or stderr
    known = package_migrations()
    if sql_only and dsn is None:
        out(render_sql(known))
        return 0
    if dsn is None:
        raise MigrateError(f"no database: pass --dsn DSN or set ${DSN_ENV}")
    psycopg = _import_psycopg()
    connection = _connect(psycopg, dsn)
    try:
        if sql_only:
            stored = _stored_version(connection)
            out(render_sql(_pending(known, stored)))
            return 0
        applied, version = _apply(psycopg, connection, known, err)
    finally:
        connection.close()
    if applied:
        for migration in applied:
            out(f"applied {migration.name}\n")
        out(f"PostgreSQL schema at version {version}, this package's latest "
            f"({len(applied)} migration{'s' if len(applied) != 1 else ''} applied)\n")
    else:
        out(f"PostgreSQL schema at version {version}, this package's latest "
            f"(up to date: nothing to apply)\n")
    return 0


def package_migrations() -> list[Migration]:
    """The PostgreSQL migrations this package ships, checked against what its runtime needs."""
    found = migrations("postgres")
    names = tuple(migration.name for migration in found)
    if names != POSTGRES_MIGRATIONS:
        # A broken install (files missing from the wheel), never a user error.
        raise MigrateError(f"this installation's PostgreSQL migrations {list(names)} are not "
                           f"the ones its runtime needs {list(POSTGRES_MIGRATIONS)}: "
                           "reinstall tickwork")
    return found


def render_sql(pending: list[Migration]) -> str:
    """The migrations' SQL, one after another, each headed by its file name."""
    return "".join(f"-- tickwork migration {migration.name}\n{migration.sql.rstrip()}\n\n"
                   for migration in pending)


# ------------------------------------------------------------------ database


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError as error:
        raise MigrateError(f"{INSTALL_HINT} ({error})") from None
    return psycopg


def _connect(psycopg: Any, dsn: str) -> Any:
    try:
        settings = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error as error:
        raise MigrateError(f"invalid DSN: {error_line(error)}") from None
    extra = {} if "connect_timeout" in settings else {"connect_timeout": CONNECT_TIMEOUT_S}
    try:
        return psycopg.connect(dsn, autocommit=True, **extra)
    except psycopg.Error as error:
        raise MigrateError(f"cannot connect to PostgreSQL ({redact_dsn(dsn)}): "
                           f"{error_line(error)}") from None


def _stored_version(connection: Any) -> int:
    """The schema_version the database records; 0 before the first migration."""
    try:
        exists = connection.execute("SELECT to_regclass('tickwork_meta') IS NOT NULL")
        if not exists.fetchone()[0]:
            return 0
        row = connection.execute(postgres_sql.SCHEMA_VERSION).fetchone()
    except Exception as error:
        raise MigrateError(f"cannot read the schema version: {error_line(error)}") from None
    if row is None:
        return 0
    try:
        return int(row[0])
    except ValueError:
        raise MigrateError(f"tickwork_meta holds schema_version {row[0]!r}, not a "
                           "number: this database was not migrated by tickwork") from None


def _pending(known: list[Migration], stored: int) -> list[Migration]:
    latest = _number(known[-1])
    if stored > latest:
        raise MigrateError(
            f"the database has tickwork schema version {stored}, newer than this package "
            f"knows (up to {latest}): upgrade tickwork; nothing was changed")
    return [migration for migration in known if _number(migration) > stored]


def _apply(psycopg: Any, connection: Any, known: list[Migration],
           log: Callable[[str], None]) -> tuple[list[Migration], int]:
    """Apply the pending migrations in one transaction under the advisory lock."""
    # Each statement must see what another migrate committed while this one
    # waited for the lock: READ COMMITTED, whatever the server's default.
    connection.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
    current: Migration | None = None
    try:
        with connection.transaction():
            locked = connection.execute("SELECT pg_try_advisory_xact_lock(%s)",
                                        [MIGRATE_LOCK_KEY]).fetchone()[0]
            if not locked:
                log("tickwork migrate: another tickwork migrate is running on this database; "
                    "waiting for it to finish")
                connection.execute("SELECT pg_advisory_xact_lock(%s)", [MIGRATE_LOCK_KEY])
            pending = _pending(known, _stored_version(connection))
            for current in pending:
                connection.execute(current.sql)  # the whole file: no parameters
                recorded = _stored_version(connection)
                if recorded != _number(current):
                    raise MigrateError(
                        f"{current.name} left schema_version at {recorded}, not "
                        f"{_number(current)}; nothing was applied")
            current = None
    except psycopg.Error as error:
        where = f"{current.name} failed" if current is not None else "the migration failed"
        raise MigrateError(f"{where}: {error_line(error)}; nothing was applied "
                           "(the transaction was rolled back)") from None
    return pending, _number(known[-1])


def _number(migration: Migration) -> int:
    """The migration's number, from its file name (0007_schedules.sql is 7)."""
    return int(migration.name.split("_", 1)[0])


def _stdout(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()

