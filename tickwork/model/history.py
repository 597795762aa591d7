"""History over time: the tally a runtime keeps in memory, and its limits.

Every runtime counts what happens to each queue's jobs per minute in a
``HistoryTally``, fed from the one place it reports each durable transition
(its ``_report``: once per transition, after the commit, never for a change
that rolled back; the same rule as ``tickwork.events``). Now and then the
runtime flushes the tally into ``tickwork_queue_history`` with one upsert
that adds to the minute rows, and samples each queue's depth and the wait of
its head job into the current minute's row (``tickwork.runtimes.history``
says when). The jobs table stays the record: the counts of the last minute
or so live only in memory until they are flushed, and are lost if the
process dies first.

Sans-I/O and pure Python: runs on Pyodide as well.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

__all__ = [
    "COUNTS", "DEPTH_CAP", "HISTORY_BUCKETS", "HISTORY_KEEP_MS", "HISTORY_PRUNE_BATCH",
    "MAX_PENDING_ROWS", "MAX_SAMPLED_QUEUES", "MINUTE_MS", "HistoryRow", "HistoryTally",
    "counted_column",
]

logger = logging.getLogger("tickwork.history")

MINUTE_MS: Final = 60_000
#: The counts of a history row, in the order of its columns.
COUNTS: Final = ("enqueued", "started", "completed", "failed", "cancelled", "retried")
#: How far back history is kept: older minutes are pruned with retention.
HISTORY_KEEP_MS: Final = 7 * 24 * 3_600_000
#: History rows one prune batch deletes at most (the oldest first).
HISTORY_PRUNE_BATCH: Final = 100
#: The bucket sizes a history is read in, in seconds: a minute (as stored),
#: 5 and 15 minutes, an hour.
HISTORY_BUCKETS: Final = (60, 300, 900, 3600)
#: A sample counts a queue's waiting jobs up to this many and stops there
#: (an index scan of at most DEPTH_CAP + 1 entries): a deeper queue is
#: sampled as "more than DEPTH_CAP".
DEPTH_CAP: Final = 10_000
#: A sample looks at this many queues with waiting jobs at most (in name
#: order), besides those the tally counted and those sampled non-empty before.
MAX_SAMPLED_QUEUES: Final = 200
#: (queue, minute) rows a tally holds at most while its flushes fail: beyond
#: it the oldest minutes are dropped (and logged), so a store that stays
#: down never grows a runtime's memory without bound.
MAX_PENDING_ROWS: Final = 10_000

_FAILED_OUTCOMES: Final = frozenset(("failed", "outcome_unknown", "interrupted"))
_ENQUEUED, _STARTED, _COMPLETED, _FAILED, _CANCELLED, _RETRIED = range(6)


def counted_column(kind: str, outcome: str | None, reason: str | None) -> int | None:
    """Which count a reported transition adds to (an index into COUNTS), or
    None for one history does not count: a job stored (``ingested``) or
    redriven (``requeued`` by a redrive) is enqueued; a settlement
    completed, failed (failed, outcome_unknown, interrupted) or cancelled; a
    failed attempt put back for another retried. A recovery's requeue, a
    recorded cancellation (its settlement counts), a lane refusal (each job
    it settles counts), a purge and a prune count nothing.

    ``claimed`` counts nothing either: an attempt is counted ``started``
    (in the minute it started) by the report of its end, its settlement or
    its retry, which every runtime makes whether or not it has an event
    hook (the claim's own report is made only for a hook). So a claim taken
    ahead and put back unstarted is never counted, and an attempt shows as
    started once it has ended."""
    if kind == "ingested":
        return _ENQUEUED
    if kind == "retried":
        return _RETRIED
    if kind == "settled":
        if outcome == "completed":
            return _COMPLETED
        if outcome == "cancelled":
            return _CANCELLED
        if outcome in _FAILED_OUTCOMES:
            return _FAILED
        return None
    if kind == "requeued" and reason == "redrive":
        return _ENQUEUED
    return None


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One (queue, minute) of counts to add to the stored row."""

    queue: str
    minute: int
    enqueued: int = 0
    started: int = 0
    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    retried: int = 0

    def values(self) -> tuple[int, int, int, int, int, int]:
        return (self.enqueued, self.started, self.completed, self.failed, self.cancelled,
                self.retried)


class HistoryTally:
    """The counts not flushed yet, per (queue, minute), and when the runtime
    should flush them.

    ``count`` adds one transition (a dict update: no I/O, no clock read);
    ``take`` hands every pending row over in (queue, minute) order and
    empties the tally; ``put_back`` returns the rows of a flush that failed,
    added to whatever was counted since. ``flush_at`` is the start of the
    minute after the oldest pending count (a flush is due once the minute
    has turned), or None with nothing pending.
    """

    __slots__ = ("dropped", "flush_at", "max_rows", "rows")

    def __init__(self, max_rows: int = MAX_PENDING_ROWS) -> None:
        #: (queue, minute) -> the six counts (read and added to in place by
        #: ``HistoryKeeper.count``; the dict object stays the same one).
        self.rows: dict[tuple[str, int], list[int]] = {}
        self.flush_at: int | None = None
        self.max_rows = max_rows
        #: Rows dropped so far because flushes kept failing (see put_back).
        self.dropped = 0

    def __len__(self) -> int:
        return len(self.rows)

    def count(self, queue: str, at: int, column: int, times: int = 1) -> None:
        """Add ``times`` to count ``column`` of ``queue`` in the minute of ``at``."""
        minute = at - at % MINUTE_MS
        key = (queue, minute)
        row = self.rows.get(key)
        if row is None:
            if len(self.rows) >= self.max_rows:
                self._drop_oldest(1)
            row = self.rows[key] = [0, 0, 0, 0, 0, 0]
            turn = minute + MINUTE_MS
            if self.flush_at is None or turn < self.flush_at:
                self.flush_at = turn
        row[column] += times

    def pending(self) -> list[HistoryRow]:
        """The pending rows in (queue, minute) order, left in the tally."""
        return [HistoryRow(queue, minute, *values)
                for (queue, minute), values in sorted(self.rows.items())]

    def take(self) -> list[HistoryRow]:
        """Every pending row in (queue, minute) order (the order a flush
        writes them in, so that concurrent flushers take row locks in one
        order); the tally is left empty."""
        rows = self.pending()
        self.rows.clear()
        self.flush_at = None
        return rows

    def put_back(self, rows: list[HistoryRow]) -> None:
        """Return the rows of a flush that failed: they are added to what was
        counted since, for the next flush. Beyond ``max_rows`` the oldest
        minutes go, and how many is logged."""
        for row in rows:
            for column, value in enumerate(row.values()):
                if value:
                    self.count(row.queue, row.minute, column, value)

    def _drop_oldest(self, keep_free: int) -> None:
        excess = len(self.rows) + keep_free - self.max_rows
        if excess <= 0:
            return
        oldest = sorted(self.rows, key=lambda key: (key[1], key[0]))[:excess]
        for key in oldest:
            del self.rows[key]
        self.dropped += len(oldest)
        logger.warning("tickwork: dropped the history counts of %d queue-minute(s) not "
                       "flushed (the store kept failing; %d dropped in all)", len(oldest),
                       self.dropped)
        self.flush_at = min((minute for _, minute in self.rows), default=None)
        if self.flush_at is not None:
            self.flush_at += MINUTE_MS
