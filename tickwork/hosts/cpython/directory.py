"""The directory of owners of ``tickwork serve``: its data directory, with a summary per owner.

Every owner file of the data directory is an owner (``owners.py``): the
start-up scan learns each file's key, and an owner created later is added
when its file is made, so the keys are known without listing the directory
per request. Each owner's summary (``tickwork.directory.OwnerSummary``) is
read from its file and kept:

* read again only when the file changed (its size and modification time,
  and its -wal's: every write of the owner's runtime changes one) and the
  kept summary is at least ``SUMMARY_INTERVAL_MS`` old; a file that did not
  change keeps its counts (its ready set changes only by a write) and only
  their "as of" time moves;
* read through the owner's open runtime when it is open, else through a
  short-lived connection of its own (one open, two reads: the backlog from
  the indexes of unsettled jobs and the dead letters up to the cap; the
  owner is not opened, so the bound on open owners is untouched);
* ``last_activity_at`` is the file's latest modification time.

Costs: a page by key is a binary search in the sorted keys, then the page's
summaries (each read at most once a minute): O(log n + page). A page by a
count needs every owner's summary (the prefix's, with a prefix): the first
one after start-up reads every file once; later ones look at each file's
size and time (a ``stat``) at most once a minute and read only the files
that changed, then sort in memory, O(n log n) for n owners.
"""

from __future__ import annotations

import bisect
import os
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from tickwork.directory import (
    DEAD_LETTER_COUNT_CAP,
    SUMMARY_INTERVAL_MS,
    OwnerCounts,
    OwnerPage,
    OwnerQuery,
    OwnerSummary,
    counts_from_backlog,
    page_from_rows,
    page_of,
    prefix_end,
)
from tickwork.model.outcomes import queue_backlogs_from_rows
from tickwork.ports.host import wall_clock_ms
from tickwork.stores import Sqlite3Database
from tickwork.stores.owner_local import OwnerLocalStore

#: ``(size, mtime_ns)`` of the file and of its -wal (zeros without one).
Signature = tuple[int, int, int, int]

#: The counts of an owner that is open now (its runtime's ``owner_counts``),
#: or None when it is not open.
OpenCounts = Callable[[str], "OwnerCounts | None"]


@dataclass(frozen=True, slots=True)
class _Kept:
    summary: OwnerSummary
    signature: Signature


class DataDirectoryOwners:
    """The owners of one data directory, listed a page at a time (``GET /v1/owners``)."""

    def __init__(self, open_counts: OpenCounts, *, clock: Callable[[], int] = wall_clock_ms,
                 log: Callable[[str], None] | None = None) -> None:
        self._open_counts = open_counts
        self._clock = clock
        self._log = log
        self._paths: dict[str, Path] = {}
        self._keys: list[str] = []  # sorted (code point order)
        self._kept: dict[str, _Kept] = {}

    def add(self, key: str, path: Path) -> None:
        """An owner file (found at start-up, or just made)."""
        if key not in self._paths:
            bisect.insort(self._keys, key)
        self._paths[key] = path

    def __len__(self) -> int:
        return len(self._keys)

    async def list_owners(self, query: OwnerQuery) -> OwnerPage:
        """The page ``query`` asks for (see the module doc for its cost)."""
        now = self._clock()
        keys = self._keys
        low = bisect.bisect_left(keys, query.prefix)
        end = prefix_end(query.prefix) if query.prefix else None
        high = len(keys) if end is None else bisect.bisect_left(keys, end)
        if query.sort == "key":
            position = query.position()
            if position is not None:
                low = max(low, bisect.bisect_right(keys, position[1]))
            rows: list[OwnerSummary] = []
            for key in keys[low:high]:  # a copy: a gone file's key is dropped meanwhile
                if len(rows) > query.limit:
                    break
                if (summary := self.summary(key, now)) is not None:
                    rows.append(summary)
            return page_from_rows(rows, query)
        summaries = [summary for key in keys[low:high]
                     if (summary := self.summary(key, now)) is not None]
        return page_of(summaries, query)

    def summary(self, key: str, now: int) -> OwnerSummary | None:
        """Owner ``key``'s summary, read again if its file changed and the
        kept one is a minute old; None (and the key forgotten) when its file
        is gone."""
        path = self._paths[key]
        kept = self._kept.get(key)
        if kept is not None and now - kept.summary.summarised_at < SUMMARY_INTERVAL_MS:
            return kept.summary
        signature = _signature(path)
        if signature is None:  # the file is gone (removed by hand): so is the owner
            self._forget(key)
            return None
        if kept is not None and kept.signature == signature:
            summary = replace(kept.summary, summarised_at=now)  # unchanged since
        else:
            try:
                counts = self._open_counts(key) or read_counts(path, now)
            except sqlite3.Error as error:  # one unreadable owner must not fail the page
                if self._log is not None:
                    self._log(f"tickwork serve: cannot read the summary of owner {key!r}: "
                              f"{error}")
                return kept.summary if kept is not None else None
            summary = OwnerSummary.of(key, counts, last_activity_at=_modified_ms(signature),
                                      summarised_at=now)
        self._kept[key] = _Kept(summary, signature)
        return summary


    def _forget(self, key: str) -> None:
        del self._paths[key]
        self._keys.pop(bisect.bisect_left(self._keys, key))
        self._kept.pop(key, None)


def read_counts(path: Path, now: int) -> OwnerCounts:
    """An owner's counts, read from its file on a connection of their own
    (only reads; the file's own settings and rows are left as they are)."""
    # mode=rw: a file removed meanwhile is an error, never made again empty.
    connection = sqlite3.connect(path.as_uri() + "?mode=rw", uri=True, isolation_level=None)
    try:
        store = OwnerLocalStore(Sqlite3Database(connection))
        dead_letters = store.dead_letter_count(DEAD_LETTER_COUNT_CAP)
        backlog = queue_backlogs_from_rows(store.backlog(), now)
    finally:
        connection.close()
    return counts_from_backlog(backlog, dead_letters)


def _signature(path: Path) -> Signature | None:
    try:
        main = os.stat(path)
    except FileNotFoundError:
        return None
    try:
        wal = os.stat(f"{path}-wal")
        wal_part = (wal.st_size, wal.st_mtime_ns)
    except FileNotFoundError:
        wal_part = (0, 0)
    return main.st_size, main.st_mtime_ns, *wal_part


def _modified_ms(signature: Signature) -> int:
    return max(signature[1], signature[3]) // 1_000_000
