"""When a runtime writes its history tally and samples its queues.

A runtime counts each durable transition it reports into a
``tickwork.model.history.HistoryTally`` (``HistoryKeeper.count``, called from
its ``_report``), and writes the tally with one upsert (``add_history``) at
points where it holds no store connection or transaction:

* in its tick and drain steps, before the step, once the minute of the
  oldest pending count has turned (``due``);
* after a declared write operation, once that minute has turned (a
  producer that never ticks still writes its counts);
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
from tickwork.model.history import MINUTE_MS, HistoryRow, HistoryTally, counted_column
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


class HistoryKeeper:
    """A runtime's tally, and when its flushes and samples are due (by the
    runtime's clock, in epoch ms)."""

    __slots__ = ("_next_sample", "_sampled_minute", "tally")

    def __init__(self) -> None:
        self.tally = HistoryTally()
        # The start of the minute after the last sample; None before the
        # first (which the first flush takes, whenever it runs).
        self._next_sample: int | None = None
        self._sampled_minute: int | None = None

    def count(self, report: Report, at: int) -> None:
        """Count the transition ``report`` stands for, at ``at``; never raises
        for what it does not count."""
        subject = report.subject
        job = getattr(subject, "job", subject)  # a Held claim carries its job
        settlement = report.settlement
        outcome = None
        if settlement is not None:
            outcome = settlement.outcome
        elif isinstance(job, JobRecord) and job.state == "settled":
            outcome = job.outcome
        column = counted_column(report.kind, outcome, report.reason)
        if column is None:
            return
        queue = report.queue if job is None else job.queue
        if queue is not None:
            self.tally.count(queue, at, column)

    def due(self, now: int) -> bool:
        """Whether a step's flush is due: the minute of the oldest pending
        count has turned, or a sample's minute has come."""
        flush_at = self.tally.flush_at
        if flush_at is not None and now >= flush_at:
            return True
        next_sample = self._next_sample
        return next_sample is not None and now >= next_sample

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
        return Flush(rows, sample, since, sorted({row.queue for row in rows}))

    def add_failed(self, flush: Flush) -> None:
        """The flush's counts were not written: keep them for the next one."""
        self.tally.put_back(flush.rows)
