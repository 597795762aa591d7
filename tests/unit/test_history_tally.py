"""The history's tally (tickwork.model.history): what each report counts,
and what it keeps while flushes fail."""

from __future__ import annotations

import pytest

from tickwork.model.history import COUNTS, HistoryRow, HistoryTally, counted_column

MINUTE = 60_000


def test_each_kind_of_transition_adds_to_one_count_or_none() -> None:
    assert [COUNTS[column] for column in (
        counted_column("ingested", None, None), counted_column("retried", "failed", "boom"),
        counted_column("settled", "completed", None), counted_column("settled", "failed", "x"),
        counted_column("settled", "outcome_unknown", None),
        counted_column("settled", "interrupted", None),
        counted_column("settled", "cancelled", None),
        counted_column("requeued", None, "redrive"))] == [
        "enqueued", "retried", "completed", "failed", "failed", "failed",
        "cancelled", "enqueued"]
    # A claim counts as started when its attempt ends (HistoryKeeper.count).
    for kind, reason in (("claimed", None), ("requeued", "recovery"), ("cancelled", None),
                         ("refused", "down"), ("purged", None), ("pruned", None)):
        assert counted_column(kind, None, reason) is None, kind


def test_the_tally_drops_its_oldest_minutes_beyond_its_cap(
        caplog: pytest.LogCaptureFixture) -> None:
    tally = HistoryTally(max_rows=3)
    for minute in range(5):
        tally.count("q", minute * MINUTE + 5, 0)
    assert [row.minute for row in tally.pending()] == [2 * MINUTE, 3 * MINUTE, 4 * MINUTE]
    assert tally.dropped == 2 and "dropped the history counts" in caplog.text
    taken = tally.take()
    assert len(tally) == 0 and tally.flush_at is None
    tally.count("q", 4 * MINUTE, 1)
    tally.put_back(taken)  # a failed flush's rows, added to what came since
    assert tally.pending() == [HistoryRow("q", 2 * MINUTE, enqueued=1),
                               HistoryRow("q", 3 * MINUTE, enqueued=1),
                               HistoryRow("q", 4 * MINUTE, enqueued=1, started=1)]
    assert tally.flush_at == 3 * MINUTE


def test_rows_are_taken_in_queue_then_minute_order() -> None:
    tally = HistoryTally()
    for queue, at in (("b", MINUTE), ("a", 2 * MINUTE), ("b", 0), ("a", 0)):
        tally.count(queue, at, 2)
    assert [(row.queue, row.minute) for row in tally.take()] == [
        ("a", 0), ("a", 2 * MINUTE), ("b", 0), ("b", MINUTE)]
