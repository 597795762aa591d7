"""The directory of owners in D1 (``tickwork_owners``, schema/d1/0012): its SQL and its store.

Each ``JobOwner`` writes its own row (``publish``, one statement); the
Worker's ``GET /v1/owners`` reads a page (``list_owners``, one statement).
See ``tickwork.directory`` for what a summary says and
``tickwork.cloudflare.owner_directory`` for when an owner writes it.

Costs (D1 bills rows read and rows written):

* ``publish``: one statement, at most once a minute per owner and only
  while the owner changes; an idle owner writes nothing. D1 counts a row
  written for the row and one for each index whose column the statement
  sets, whether or not its value changed (measured on Miniflare: the
  upsert, 6; an UPDATE setting one indexed column, 2). So the first write
  (the registration) is the upsert, 6 rows, and every later one an UPDATE
  of only what changed since the owner's previous write: 1 row, plus 1 per
  changed value (the last activity, and the counts that moved).
* a page by key, or by one sort without a prefix: one range scan of the
  primary key or of that sort's index, ``limit + 1`` rows read
  (O(log n + page) however many owners there are);
* a page by a count with a prefix: the prefix's own owners (m) read from
  the primary key's range and sorted, O(m log m): the prefix narrows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any, Final

from tickwork.directory import OwnerPage, OwnerQuery, OwnerSummary, page_from_rows, prefix_end
from tickwork.model.errors import SchemaError
from tickwork.stores.d1.binding import D1Binding

#: The migration that makes the table.
LATEST_MIGRATION: Final = "schema/d1/0012_owner_directory.sql"

#: The columns every page reads, in OwnerSummary's order.
_COLUMNS: Final = ("owner, queued, running, overdue, dead_letters, last_activity_at, "
                   "summarised_at")

#: Each sort's column and index (schema/d1/0012).
SORT_COLUMNS: Final = {"queued": "queued", "running": "running", "overdue": "overdue",
                       "dead_letters": "dead_letters", "last_activity": "last_activity_at"}

# One owner's summary: the first one registers the owner (registered_at
# stays what it was then); a later one replaces the counts. An older
# summary never replaces a newer one (a retried write that lost a race with
# the next), and the last activity never goes back. ?1 owner, ?2 when the
# counts were read, ?3 last activity, ?4-?7 queued, running, overdue,
# dead letters.
PUBLISH: Final = """
INSERT INTO tickwork_owners (owner, registered_at, summarised_at, last_activity_at,
                             queued, running, overdue, dead_letters)
VALUES (?1, ?2, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (owner) DO UPDATE SET
    summarised_at = excluded.summarised_at,
    last_activity_at = max(tickwork_owners.last_activity_at, excluded.last_activity_at),
    queued = excluded.queued, running = excluded.running, overdue = excluded.overdue,
    dead_letters = excluded.dead_letters
WHERE excluded.summarised_at >= tickwork_owners.summarised_at
"""


#: The columns a later write may set, each with the value it sets it to
#: (the last activity never goes back). Each has an index: setting it costs
#: one row written more.
_UPDATABLE: Final = {
    "last_activity_at": "max(last_activity_at, ?{n})",
    "queued": "?{n}", "running": "?{n}", "overdue": "?{n}", "dead_letters": "?{n}"}


@cache
def update_statement(changed: tuple[str, ...]) -> str:
    """A later write: the ``changed`` columns (in ``_UPDATABLE``'s order)
    and ``summarised_at``, only if this summary is not older than the
    stored one. ?1 owner, ?2 when the counts were read, ?3... the changed
    values in order. It changes no row when the row is gone (the caller
    then registers again) or newer."""
    sets = ["summarised_at = ?2"] + [
        f"{column} = {_UPDATABLE[column].format(n=number)}"
        for number, column in enumerate(changed, start=3)]
    return (f"UPDATE tickwork_owners SET {', '.join(sets)}\n"
            "WHERE owner = ?1 AND summarised_at <= ?2\n")


def changed_columns(before: OwnerSummary, after: OwnerSummary) -> tuple[str, ...]:
    """The columns whose value differs between two summaries of one owner."""
    values = {"last_activity_at": lambda summary: summary.last_activity_at,
              "queued": lambda summary: summary.queued,
              "running": lambda summary: summary.running,
              "overdue": lambda summary: summary.overdue,
              "dead_letters": lambda summary: summary.dead_letters}
    return tuple(column for column in _UPDATABLE
                 if values[column](before) != values[column](after))


@cache
def page_statement(sort: str, *, after: bool, prefix: bool, end: bool) -> str:
    """The statement of one page: ``sort``, from the cursor's position
    (``after``), only keys from ``prefix`` up to ``end`` (``prefix_end``).

    Parameters: ?1 the limit (one more than the page), ?2 and ?3 the
    cursor's (value, owner) (by key: ?3 the owner), ?4 the prefix, ?5 its
    end. By key: the primary key's range after the cursor, in key order.
    By a sort without a prefix: its index scanned backwards from the
    cursor's (value, owner), largest first, ties by key from the last
    (INDEXED BY: a missing index is an error, never a silent scan of the
    table). By a sort with a prefix: the prefix's range of the primary key,
    sorted (the unary ``+`` keeps the planner off the sort's index, which
    would read every owner outside the prefix too).
    """
    where = []
    if sort == "key":
        source = "tickwork_owners"
        if after:
            where.append("owner > ?3")
        order = "owner"
    else:
        column = SORT_COLUMNS[sort]
        if prefix:
            source = "tickwork_owners"
            value = f"+{column}"
        else:
            source = f"tickwork_owners INDEXED BY tickwork_owners_by_{sort}"
            value = column
        if after:
            where.append(f"({value}, owner) < (?2, ?3)")
        order = f"{value} DESC, owner DESC"
    if prefix:
        where.append("owner >= ?4")
        if end:
            where.append("owner < ?5")
    condition = f"\nWHERE {' AND '.join(where)}" if where else ""
    return f"SELECT {_COLUMNS}\nFROM {source}{condition}\nORDER BY {order}\nLIMIT ?1\n"


def page_values(query: OwnerQuery) -> tuple[str, list[Any]]:
    """The statement of ``query``'s page and its values (numbered as it binds them)."""
    position = query.position()
    end = prefix_end(query.prefix) if query.prefix else None
    text = page_statement(query.sort, after=position is not None, prefix=bool(query.prefix),
                          end=end is not None)
    value, owner = (None, "") if position is None else position
    values: list[Any] = [query.limit + 1, value if value is not None else 0, owner,
                         query.prefix, end if end is not None else ""]
    # Bind only up to the highest number the statement uses (D1 refuses
    # values it has no parameter for).
    used = max(number for number in range(1, 6) if f"?{number}" in text)
    return text, values[:used]


class D1OwnerDirectory:
    """The directory of owners on a D1 binding (``env.DB``)."""

    def __init__(self, db: Any) -> None:
        self.binding = D1Binding(db)

    async def list_owners(self, query: OwnerQuery) -> OwnerPage:
        """The page ``query`` asks for (one statement; see the module doc).
        Without migration 0012 it raises ``SchemaError`` naming it."""
        text, values = page_values(query)
        try:
            rows = await self.binding.query(text, values)
        except Exception as error:
            if "no such table: tickwork_owners" in str(error):
                raise SchemaError(
                    "the D1 database has no directory of owners: apply "
                    f"{LATEST_MIGRATION} (wrangler d1 migrations apply DB)") from None
            raise
        return page_from_rows([_summary(row) for row in rows], query)

    async def publish(self, summary: OwnerSummary,
                      previous: OwnerSummary | None = None) -> None:
        """Write one owner's row: register it (``previous`` None), or set
        what changed since ``previous``, the owner's last write (one
        statement; a row that is gone is registered again)."""
        if previous is not None and previous.key == summary.key:
            changed = changed_columns(previous, summary)
            values = [getattr(summary, column) for column in changed]
            if await self.binding.run(update_statement(changed),
                                      [summary.key, summary.summarised_at, *values]):
                return
        await self.binding.run(PUBLISH, (
            summary.key, summary.summarised_at, summary.last_activity_at, summary.queued,
            summary.running, summary.overdue, summary.dead_letters))


def _summary(row: Sequence[Any]) -> OwnerSummary:
    owner, queued, running, overdue, dead_letters, last_activity_at, summarised_at = row
    return OwnerSummary(str(owner), int(queued), int(running), int(overdue), int(dead_letters),
                        int(last_activity_at), int(summarised_at))
