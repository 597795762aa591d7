"""The directory of owners: every owner with a summary of its jobs, a page at a time.

An operator with thousands of owners needs to find the one that is failing.
Each host keeps a directory of its owners, each with an ``OwnerSummary``
(queued, running, overdue and dead-letter counts, and when it last did
something), and lists it by key or by any of those, largest first, in pages,
optionally only the keys that start with a prefix (``OwnerQuery``):

* on Cloudflare there is no way to list a namespace's Durable Objects, so
  each ``JobOwner`` registers itself in D1 (``tickwork_owners``, migration
  0012) and rewrites its summary at most once a minute while something
  changes (``tickwork.cloudflare.owner_directory``);
* ``tickwork serve`` lists its data directory, each owner's summary read
  from its file at most once a minute (``tickwork.hosts.cpython.directory``).

Either way a summary is as of its ``summarised_at``: up to
``SUMMARY_INTERVAL_MS`` old, never a read of every owner per request.

This module is the model both share: the summary, the query (validated
here, so every host refuses the same input), the cursor, and the order of a
page. Pure Python (the Worker loads it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from tickwork.model.errors import InvalidArgument
from tickwork.model.jobs import MAX_ID_LENGTH
from tickwork.model.outcomes import QueueBacklog

#: A summary is read again at most this often (milliseconds), and only
#: when something changed since the last one.
SUMMARY_INTERVAL_MS: Final = 60_000

#: Dead letters are counted up to this many: a summary reads at most this
#: many entries of the dead letters' index, however long the history.
#: A count at the cap means "at least this many".
DEAD_LETTER_COUNT_CAP: Final = 10_000

#: Owners per page: the default and the most a page may ask for.
DEFAULT_OWNER_PAGE: Final = 50
MAX_OWNER_PAGE: Final = 200

#: What a page may be sorted by. "key" goes in code point order, the others
#: largest first (the most recent activity first), ties by key from the last.
SORTS: Final = ("key", "queued", "running", "overdue", "dead_letters", "last_activity")


@dataclass(frozen=True, slots=True)
class OwnerCounts:
    """An owner's jobs as a summary counts them.

    ``queued``: waiting jobs (ready, or waiting for their time; not the
    cancelled ones a tick is about to settle); ``overdue``: those whose time
    has come and that have not started (a paused queue's, or ones a busy
    owner has not reached yet); ``running``: claimed; ``dead_letters``:
    settled failed, outcome_unknown or interrupted and not redriven, counted
    up to ``DEAD_LETTER_COUNT_CAP``."""

    queued: int
    running: int
    overdue: int
    dead_letters: int


def counts_from_backlog(backlogs: Iterable[QueueBacklog], dead_letters: int) -> OwnerCounts:
    """An owner's counts from its queues' backlog and its dead-letter count."""
    queued = running = overdue = 0
    for backlog in backlogs:
        queued += backlog.ready + backlog.delayed
        overdue += backlog.ready
        running += backlog.running
    return OwnerCounts(queued, running, overdue, min(dead_letters, DEAD_LETTER_COUNT_CAP))


@dataclass(frozen=True, slots=True)
class OwnerSummary:
    """One owner in the directory: its key, counts as of ``summarised_at``
    (epoch ms) and ``last_activity_at`` (epoch ms: when it last stored, ran
    or settled a job or changed a queue, as its host saw it)."""

    key: str
    queued: int
    running: int
    overdue: int
    dead_letters: int
    last_activity_at: int
    summarised_at: int

    @classmethod
    def of(cls, key: str, counts: OwnerCounts, *, last_activity_at: int,
           summarised_at: int) -> OwnerSummary:
        return cls(key, counts.queued, counts.running, counts.overdue, counts.dead_letters,
                   last_activity_at, summarised_at)

    def sort_value(self, sort: str) -> int:
        """The value a page sorted by ``sort`` (not "key") orders this owner by."""
        if sort == "last_activity":
            return self.last_activity_at
        if sort not in _COUNT_SORTS:
            raise ValueError(f"{sort!r} sorts by no value")
        value: int = getattr(self, sort)
        return value


#: The sorts by one of the counts (each is the summary's field of its name).
_COUNT_SORTS: Final = frozenset({"queued", "running", "overdue", "dead_letters"})


@dataclass(frozen=True, slots=True)
class OwnerPage:
    """One page of the directory; ``cursor`` asks for the next one (None on
    the last page)."""

    owners: list[OwnerSummary]
    cursor: str | None


@dataclass(frozen=True, slots=True)
class OwnerQuery:
    """Which page of the directory: the owners whose key starts with
    ``prefix`` ("" for all), in ``sort`` order, ``limit`` of them after
    ``cursor`` (the previous page's). Validated when made: a bad value
    raises ``InvalidArgument`` naming it."""

    prefix: str = ""
    sort: str = "key"
    cursor: str | None = None
    limit: int = DEFAULT_OWNER_PAGE

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str) or len(self.prefix) > MAX_ID_LENGTH:
            raise InvalidArgument("prefix", f"must be a string of at most {MAX_ID_LENGTH} "
                                            "characters")
        if self.sort not in SORTS:
            raise InvalidArgument("sort", f"must be one of {', '.join(SORTS)}, "
                                          f"got {str(self.sort)[:40]!r}")
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) \
                or not 1 <= self.limit <= MAX_OWNER_PAGE:
            raise InvalidArgument("limit", f"must be an integer from 1 to {MAX_OWNER_PAGE}, "
                                           f"got {self.limit!r}")
        if self.cursor is not None:
            self.position()  # refused now, before any host reads anything

    def position(self) -> tuple[int | None, str] | None:
        """Where the page starts: after ``(value, key)`` (value None when
        sorted by key), from the cursor; None for the first page. A cursor
        names its sort, so one from a page of another sort is refused."""
        cursor = self.cursor
        if cursor is None:
            return None
        if not isinstance(cursor, str):
            raise InvalidArgument("cursor", "must be a string")
        sort, colon, rest = cursor.partition(":")
        if not colon or sort != self.sort:
            raise InvalidArgument("cursor", f"is not a cursor of a page sorted by {self.sort}")
        if self.sort == "key":
            value, key = None, rest
        else:
            digits, colon, key = rest.partition(":")
            if not colon or not digits.isascii() or not digits.isdigit() or len(digits) > 16:
                raise InvalidArgument("cursor", f"is not a cursor of a page sorted by "
                                                f"{self.sort}")
            value = int(digits)
        if not 1 <= len(key) <= MAX_ID_LENGTH:
            raise InvalidArgument("cursor", "names no owner key")
        return value, key

    def cursor_after(self, summary: OwnerSummary) -> str:
        """The cursor of the page after one that ends with ``summary``:
        ``key:<key>``, or ``<sort>:<value>:<key>``."""
        if self.sort == "key":
            return "key:" + summary.key
        return f"{self.sort}:{summary.sort_value(self.sort)}:{summary.key}"


def prefix_end(prefix: str) -> str | None:
    """The least string above every string that starts with ``prefix``, in
    code point order (= UTF-8 byte order, SQLite's BINARY collation); None
    when there is none (an empty prefix, or one of only U+10FFFF). So
    ``prefix <= key < prefix_end(prefix)`` is "key starts with prefix", a
    range an index can scan."""
    characters = list(prefix)
    while characters:
        last = ord(characters.pop())
        if last < 0x10FFFF:
            following = last + 1
            if 0xD800 <= following <= 0xDFFF:  # surrogates are no characters
                following = 0xE000
            return "".join(characters) + chr(following)
    return None


def page_of(summaries: Iterable[OwnerSummary], query: OwnerQuery) -> OwnerPage:
    """The page ``query`` asks for, from every summary of the directory
    (``tickwork serve``'s, in memory): in the same order, with the same
    cursors, as D1's statements give it (``tickwork.cloudflare.owner_directory``)."""
    position = query.position()
    matching = [summary for summary in summaries if summary.key.startswith(query.prefix)]
    if query.sort == "key":
        ordered = sorted(matching, key=lambda summary: summary.key)
        if position is not None:
            ordered = [summary for summary in ordered if summary.key > position[1]]
    else:
        def order(summary: OwnerSummary) -> tuple[int, str]:
            return summary.sort_value(query.sort), summary.key

        ordered = sorted(matching, key=order, reverse=True)
        if position is not None:
            after = (position[0], position[1])
            ordered = [summary for summary in ordered if order(summary) < after]
    return page_from_rows(ordered[:query.limit + 1], query)


def page_from_rows(rows: Sequence[OwnerSummary], query: OwnerQuery) -> OwnerPage:
    """A page from up to ``limit + 1`` summaries in page order (one more
    than the page says that there is a next page)."""
    owners = list(rows[:query.limit])
    more = len(rows) > query.limit
    return OwnerPage(owners, query.cursor_after(owners[-1]) if more and owners else None)


def summary_to_wire(summary: OwnerSummary) -> dict[str, object]:
    return {"key": summary.key, "queued": summary.queued, "running": summary.running,
            "overdue": summary.overdue, "dead_letters": summary.dead_letters,
            "last_activity_at": summary.last_activity_at,
            "summarised_at": summary.summarised_at}


def summary_from_wire(value: dict[str, object]) -> OwnerSummary:
    def number(name: str) -> int:
        found = value[name]
        if isinstance(found, bool) or not isinstance(found, int):
            raise TypeError(f"{name} is not an integer")
        return found

    key = value["key"]
    if not isinstance(key, str):
        raise TypeError("key is not a string")
    return OwnerSummary(key, number("queued"), number("running"), number("overdue"),
                        number("dead_letters"), number("last_activity_at"),
                        number("summarised_at"))


def page_to_wire(page: OwnerPage) -> dict[str, object]:
    """A page as the API answers it: ``{"owners": [...], "cursor"}``."""
    return {"owners": [summary_to_wire(summary) for summary in page.owners],
            "cursor": page.cursor}


def page_from_wire(value: object) -> OwnerPage:
    """A page from the API's answer (TypeError/KeyError for another shape)."""
    if not isinstance(value, dict) or not isinstance(value.get("owners"), list):
        raise TypeError("not a page of owners")
    cursor = value.get("cursor")
    if cursor is not None and not isinstance(cursor, str):
        raise TypeError("cursor is not a string")
    return OwnerPage([summary_from_wire(item) for item in value["owners"]], cursor)
