"""When a runtime writes its history tally and samples its queues.

A runtime counts each durable transition it reports into a
``tickwork.model.history.HistoryTally`` (``HistoryKeeper.count``, called from
its ``_report``), and writes the tally with one upsert (``add_history``) at
points where it holds no store connection or transaction:

* in its tick and drain steps, before the step, once a count has landed
  in a later minute than the oldest pending one, or after the next
  sample's minute has come (``flush_due``: set as counts land, so a step
  reads no clock for it);
* after a declared write operation, on the same flag (a producer that
  never ticks still writes its counts);
* after each host loop (``flush_history()``, called where the hosts call
  ``prune_if_due``), and when a host closes;
* before it answers its own ``history()`` read, so a caller sees its own counts.

Each flush that writes counts after the minute has turned, or the first
flush of a runtime, also samples the queues' depth and head wait
(``sample_history``, one bounded statement), at most once a minute. A flush
that fails is logged; its counts go back into the tally for the next one
(bounded: ``HistoryTally.put_back``), and the tick, claim or request it ran
beside goes on.

Pure Python: runs on Pyodide as well.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final

from tickwork.lifecycle.requests import Report
from tickwork.model.history import (
    COUNTS,
    MINUTE_MS,
    HistoryRow,
    HistoryTally,
    counted_column,
)
from tickwork.model.jobs import JobRecord

__all__ = ["Flush", "HistoryKeeper", "logger"]

#: Where a flush or a sample that failed is logged (never raised).
logger = logging.getLogger("tickwork.history")

#: ``due`` of a keeper with nothing pending and no sample planned.
_NEVER: Final = float("inf")


@dataclass(frozen=True, slots=True)
class Flush:
    """What one flush writes: the tally's rows, and whether it samples
    (``since``: the minute of the previous sample, ``queues``: those the rows
    name)."""

    rows: list[HistoryRow]
    sample: bool
    since: int
    queues: list[str]


#: The count each kind of report adds to (an index into COUNTS), but
#: ``settled`` (by its outcome) and ``requeued`` (a redrive's only);
#: ``counted_column`` is the rule, these tables its fast form.
_KIND_COLUMNS: Final = {kind: counted_column(kind, None, None)
                        for kind in ("ingested", "retried")}
_STARTED: Final = COUNTS.index("started")
_SETTLED_COLUMNS: Final = {outcome: counted_column("settled", outcome, None)
                           for outcome in ("completed", "failed", "outcome_unknown",
                                           "interrupted", "cancelled")}
_REDRIVEN: Final = counted_column("requeued", None, "redrive")


class HistoryKeeper:
    """A runtime's tally, and when its flushes and samples are due (by the
    runtime's clock, in epoch ms).

    ``flush_due`` turns true when a count lands at or after the moment a
    flush is due (the start of the minute after the oldest pending count,
    or the next sample's minute): a step reads that flag, not the clock.
    """

    __slots__ = ("_due_at", "_next_sample", "_not_before", "_rows", "_sampled_minute",
                 "flush_due", "tally")

    def __init__(self) -> None:
        self.tally = HistoryTally()
        self._rows = self.tally.rows  # the tally's own dict, read on the hot path
        # The start of the minute after the last sample; None before the
        # first (which the first flush takes, whenever it runs).
        self._next_sample: int | None = None
        self._sampled_minute: int | None = None
        self._due_at: float = _NEVER
        # After a flush failed, the next is not due before this (a store
        # that is down is not asked again at every step).
        self._not_before = 0
        self.flush_due = False

    def count(self, report: Report, at: int) -> None:
        """Count the transition ``report`` stands for, at ``at`` (on every
        transition's path: a few dict lookups, no I/O)."""
        kind = report.kind
        subject = report.subject
        job = getattr(subject, "job", subject)  # a Held claim carries its job
        if kind == "settled":
            settlement = report.settlement
            if settlement is not None:
                column = _SETTLED_COLUMNS.get(settlement.outcome)
            elif isinstance(job, JobRecord):
                column = _SETTLED_COLUMNS.get(job.outcome or "")
            else:
                return
        else:
            column = _KIND_COLUMNS.get(kind)
            if column is None:
                if kind != "requeued" or report.reason != "redrive":
                    return
                column = _REDRIVEN
        if column is None:
            return
        queue = report.queue if job is None else job.queue
        if queue is None:
            return
        minute = at - at % MINUTE_MS
        row = self._rows.get((queue, minute))
        if row is None:
            self._add(queue, at, column)
        else:
            row[column] += 1
        if job is not subject:
            # The end of an attempt this runtime ran (a Held claim, not a
            # stored record): the attempt started, in its own minute.
            started_at = job.started_at
            if row is not None and (started_at is None
                                    or started_at - started_at % MINUTE_MS == minute):
                row[_STARTED] += 1
            else:
                self._add(queue, at if started_at is None else started_at, _STARTED)
        if at >= self._due_at:
            self.flush_due = True

    def _add(self, queue: str, at: int, column: int) -> None:
        row = self._rows.get((queue, at - at % MINUTE_MS))
        if row is None:  # the first count of a (queue, minute)
            self.tally.count(queue, at, column)
            self._plan()
        else:
            row[column] += 1

    def begin(self, now: int, *, sample: bool = True) -> Flush | None:
        """The flush to run now (the tally's rows taken out of it), or None
        when there is nothing to write or sample; ``sample=False`` writes
        the counts and leaves a sample that is due for a later flush."""
        minute = now - now % MINUTE_MS
        sample = sample and (self._next_sample is None or now >= self._next_sample)
        if not len(self.tally) and not sample:
            return None
        rows = self.tally.take()
        since = minute - MINUTE_MS if self._sampled_minute is None else self._sampled_minute
        if sample:
            # Taken as done before it runs: a store that fails is asked again
            # next minute, not at every step.
            self._sampled_minute, self._next_sample = minute, minute + MINUTE_MS
        self._plan()
        return Flush(rows, sample, since, sorted({row.queue for row in rows}))

    def add_failed(self, flush: Flush, now: int) -> None:
        """The flush's counts were not written: keep them for the next one,
        due a minute later at the earliest."""
        self.tally.put_back(flush.rows)
        self._not_before = now + MINUTE_MS
        self._plan()

    def _plan(self) -> None:
        """When the next flush is due, from the tally and the sample."""
        flush_at = self.tally.flush_at
        next_sample = self._next_sample
        due_at: float = _NEVER if flush_at is None else flush_at
        if next_sample is not None and next_sample < due_at:
            due_at = next_sample
        self._due_at = max(due_at, self._not_before)
        self.flush_due = False
