"""The SQL of the job lock, for the SQLite dialect (sqlite3 and D1) and PostgreSQL.

Two tables per lock table name ``T``:

* ``T``: one row per lock name, never deleted. ``owner`` is the private
  random token of the current holder (NULL once released), ``fence`` counts
  acquisitions, ``expires_at`` is the end of the lease in database time.
  Because the row outlives every holder, the fence never goes back.
* ``T_slots``: one row per (name, slot) whose run succeeded. Its presence
  refuses every later acquisition for that slot.

Every time is epoch milliseconds taken from the database clock by the
statement itself, through the same expression the shared runtimes use
(``tickwork.stores.sql.sqlite.D1``, ``tickwork.stores.sql.postgres.NOW``): the
first parameter overrides it for deterministic tests and is NULL otherwise.
No statement ever compares a time computed in Python.

Table names are validated by the caller (``check_table``) and double-quoted
here, so they can never carry SQL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from tickwork.model.errors import InvalidArgument
from tickwork.model.jobs import MAX_SAFE_INTEGER
from tickwork.stores.sql.postgres import NOW as POSTGRES_NOW
from tickwork.stores.sql.sqlite import d1_clock

Dialect = Literal["sqlite", "postgres"]

DEFAULT_TABLE = "tickwork_job_locks"
SLOTS_SUFFIX = "_slots"

#: Lowercase so an unquoted name in a migration and our quoted one agree on
#: PostgreSQL; 40 characters so every derived name fits PostgreSQL's 63.
_TABLE_NAME = re.compile(r"[a-z_][a-z0-9_]{0,39}")


def check_table(table: object) -> str:
    if not isinstance(table, str) or _TABLE_NAME.fullmatch(table) is None:
        raise InvalidArgument(
            "table",
            f"must be a lowercase SQL identifier of 1 to 40 characters "
            f"([a-z_][a-z0-9_]*), got {table!r}",
        )
    return table


def _quoted(identifier: str) -> str:
    return f'"{identifier}"'


@dataclass(frozen=True, slots=True)
class LockStatements:
    """Every statement for one lock table in one dialect."""

    acquire: str
    renew: str
    release: str
    record_slot: str
    why_not: str
    prune_slots: str


# ---------------------------------------------------------------- SQLite / D1
# ?1 is always the clock override (NULL: database time). SQLite keeps 'now'
# fixed within a statement, so every use of it in one statement agrees.
SQLITE_NOW = d1_clock("?1")

_SQLITE_DDL = """
CREATE TABLE {exists}{locks} (
    name TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 256),
    owner TEXT,
    fence INTEGER NOT NULL CHECK (fence >= 1),
    acquired_at INTEGER NOT NULL,
    expires_at INTEGER,
    released_at INTEGER,
    CHECK ((owner IS NULL) = (expires_at IS NULL))
);
CREATE TABLE {exists}{slots} (
    name TEXT NOT NULL,
    slot TEXT NOT NULL CHECK (length(slot) BETWEEN 1 AND 256),
    fence INTEGER NOT NULL,
    completed_at INTEGER NOT NULL,
    PRIMARY KEY (name, slot)
);
CREATE INDEX {exists}{slots_index} ON {slots} (completed_at);
"""

_POSTGRES_DDL = """
CREATE TABLE {exists}{locks} (
    name text PRIMARY KEY CHECK (char_length(name) BETWEEN 1 AND 256),
    owner text,
    fence bigint NOT NULL CHECK (fence >= 1),
    acquired_at bigint NOT NULL,
    expires_at bigint,
    released_at bigint,
    CHECK ((owner IS NULL) = (expires_at IS NULL))
);
CREATE TABLE {exists}{slots} (
    name text NOT NULL,
    slot text NOT NULL CHECK (char_length(slot) BETWEEN 1 AND 256),
    fence bigint NOT NULL,
    completed_at bigint NOT NULL,
    PRIMARY KEY (name, slot)
);
CREATE INDEX {exists}{slots_index} ON {slots} (completed_at);
"""


def table_ddl(dialect: Dialect, table: str = DEFAULT_TABLE, *,
              if_not_exists: bool = False) -> list[str]:
    """The statements creating lock table ``table`` and its slot table.

    ``dialect`` is ``"sqlite"`` (also D1) or ``"postgres"``. The default
    table ships in the migrations ``schema/*/0002_job_locks.sql``; use this
    for a lock table of another name.
    """
    table = check_table(table)
    if dialect not in ("sqlite", "postgres"):
        raise InvalidArgument("dialect", f"must be 'sqlite' or 'postgres', got {dialect!r}")
    template = _SQLITE_DDL if dialect == "sqlite" else _POSTGRES_DDL
    text = template.format(
        exists="IF NOT EXISTS " if if_not_exists else "",
        locks=_quoted(table),
        slots=_quoted(table + SLOTS_SUFFIX),
        slots_index=_quoted(table + SLOTS_SUFFIX + "_completed"),
    )
    return [part.strip() for part in text.split(";") if part.strip()]


def sqlite_statements(table: str) -> LockStatements:
    locks, slots = _quoted(table), _quoted(table + SLOTS_SUFFIX)
    slot_done = f"EXISTS (SELECT 1 FROM {slots} WHERE name = ?2 AND slot = ?5)"
    return LockStatements(
        # ?2 name, ?3 owner token, ?4 ttl_ms, ?5 slot (NULL: none).
        # No row: insert fence 1. A row that is released or expired (by the
        # database clock): take it over, fence + 1. A live row, or a slot
        # that already succeeded: no row is written and none is returned.
        # One statement, so two callers can never both see the lock free.
        acquire=f"""
INSERT INTO {locks} (name, owner, fence, acquired_at, expires_at)
SELECT ?2, ?3, 1, {SQLITE_NOW}, min({SQLITE_NOW} + ?4, {MAX_SAFE_INTEGER})
WHERE NOT {slot_done}
ON CONFLICT (name) DO UPDATE SET
    owner = excluded.owner, fence = {locks}.fence + 1,
    acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, released_at = NULL
WHERE ({locks}.owner IS NULL OR {locks}.expires_at <= excluded.acquired_at)
  AND NOT {slot_done}
RETURNING fence
""",
        # ?2 name, ?3 owner, ?4 extra_ms. Extends only a lease that is still
        # ours and still live, and never shortens it.
        renew=f"""
UPDATE {locks} SET expires_at = max(expires_at, min({SQLITE_NOW} + ?4, {MAX_SAFE_INTEGER}))
WHERE name = ?2 AND owner = ?3 AND expires_at > {SQLITE_NOW}
RETURNING fence
""",
        # ?2 name, ?3 owner. Frees the lock only while our token holds it;
        # the row (and its fence) stays.
        release=f"""
UPDATE {locks} SET owner = NULL, expires_at = NULL, released_at = {SQLITE_NOW}
WHERE name = ?2 AND owner = ?3
RETURNING fence
""",
        # ?2 name, ?3 slot, ?4 fence of the run that succeeded.
        record_slot=f"""
INSERT INTO {slots} (name, slot, fence, completed_at) VALUES (?2, ?3, ?4, {SQLITE_NOW})
ON CONFLICT (name, slot) DO NOTHING
""",
        # ?2 name, ?3 slot: why an acquisition found nothing to take.
        why_not=f"""
SELECT EXISTS (SELECT 1 FROM {slots} WHERE name = ?2 AND slot = ?3),
       EXISTS (SELECT 1 FROM {locks} WHERE name = ?2 AND owner IS NOT NULL
               AND expires_at > {SQLITE_NOW})
""",
        # ?2 age in ms, ?3 name (NULL: every name).
        prune_slots=f"""
DELETE FROM {slots} WHERE completed_at <= {SQLITE_NOW} - ?2 AND (?3 IS NULL OR name = ?3)
""",
    )


# ------------------------------------------------------------------ PostgreSQL
# %(now)s is the clock override; the NOW expression is an InitPlan, evaluated
# once per statement.

#: Serialises the acquisitions and the successful releases of runs that
#: carry a slot, per lock name. Taken by its own statement first, so the
#: next statement's snapshot sees every slot recorded before it (see
#: ``tickwork.locks.stores``).
POSTGRES_SLOT_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0))"


def postgres_statements(table: str) -> LockStatements:
    locks, slots = _quoted(table), _quoted(table + SLOTS_SUFFIX)
    slot_done = (f"EXISTS (SELECT 1 FROM {slots} "
                 "WHERE name = %(name)s AND slot = %(slot)s::text)")
    return LockStatements(
        acquire=f"""
INSERT INTO {locks} AS held (name, owner, fence, acquired_at, expires_at)
SELECT %(name)s::text, %(owner)s::text, 1, clock.now,
       least(clock.now + %(ttl_ms)s::bigint, {MAX_SAFE_INTEGER})
FROM (SELECT {POSTGRES_NOW} AS now) AS clock
WHERE NOT {slot_done}
ON CONFLICT (name) DO UPDATE SET
    owner = excluded.owner, fence = held.fence + 1,
    acquired_at = excluded.acquired_at, expires_at = excluded.expires_at, released_at = NULL
WHERE (held.owner IS NULL OR held.expires_at <= excluded.acquired_at)
  AND NOT {slot_done}
RETURNING held.fence
""",
        renew=f"""
UPDATE {locks} AS held
SET expires_at = greatest(held.expires_at,
                          least(clock.now + %(extra_ms)s::bigint, {MAX_SAFE_INTEGER}))
FROM (SELECT {POSTGRES_NOW} AS now) AS clock
WHERE held.name = %(name)s AND held.owner = %(owner)s AND held.expires_at > clock.now
RETURNING held.fence
""",
        # With a slot, the slot record and the release are one statement (one
        # transaction): no other caller can find the lock free and the slot
        # unrecorded in between.
        release=f"""
WITH clock AS (SELECT {POSTGRES_NOW} AS now),
done AS (
    INSERT INTO {slots} (name, slot, fence, completed_at)
    SELECT %(name)s::text, %(slot)s::text, %(fence)s::bigint, clock.now FROM clock
    WHERE %(slot)s::text IS NOT NULL
    ON CONFLICT (name, slot) DO NOTHING
)
UPDATE {locks} AS held SET owner = NULL, expires_at = NULL, released_at = clock.now
FROM clock
WHERE held.name = %(name)s AND held.owner = %(owner)s
RETURNING held.fence
""",
        record_slot="",  # part of ``release`` on PostgreSQL
        why_not=f"""
SELECT {slot_done},
       EXISTS (SELECT 1 FROM {locks} WHERE name = %(name)s AND owner IS NOT NULL
               AND expires_at > {POSTGRES_NOW})
""",
        prune_slots=f"""
DELETE FROM {slots}
WHERE completed_at <= {POSTGRES_NOW} - %(older_than_ms)s::bigint
  AND (%(name)s::text IS NULL OR name = %(name)s::text)
""",
    )
