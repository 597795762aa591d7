"""The index batching policy alone (tickwork.stores.index_batching): when it
lists, when it files, which settlement statements it picks, and what a
failed listing does. The store's rows under it are the contract suite's
(tests/contract) and tests/owner_local/test_filing.py's."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pytest

from tickwork.stores import index_batching
from tickwork.stores.index_batching import (
    DEFERRED,
    FILE_EVERY,
    FILING,
    LIST_EVERY,
    IndexBatching,
    Settlements,
)

T = TypeVar("T")


class RecordingDatabase:
    """A SyncDatabase that runs nothing and notes each write, by its first
    words, with how many transactions deep it came; ``fail`` names a first
    word whose next write raises."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, int]] = []
        self.depth = 0
        self.fail: str | None = None

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        raise AssertionError("the policy reads nothing")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        self.mutate(sql, params)

    def mutate(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        words = " ".join(sql.split()[:3])
        if self.fail is not None and words.startswith(self.fail):
            self.fail = None
            raise RuntimeError(f"{words} failed (injected)")
        self.writes.append((words, self.depth))
        return []

    def atomic(self, fn: Callable[[], T]) -> T:
        self.depth += 1
        try:
            return fn()
        finally:
            self.depth -= 1

    def insert(self) -> bool:
        """What a store's insert does under the policy: one write, one row."""
        self.mutate("INSERT INTO tickwork_jobs VALUES (...)")
        return True

    def listings(self) -> int:
        return sum(words.startswith("UPDATE tickwork_jobs SET") for words, _ in self.writes)

    def filings(self) -> int:
        return sum(words.startswith("UPDATE tickwork_jobs INDEXED") for words, _ in self.writes)


LIST = ("UPDATE tickwork_jobs SET", "INSERT OR REPLACE")


def test_a_batched_policy_lists_at_its_first_insert_then_every_list_every() -> None:
    database = RecordingDatabase()
    batching = IndexBatching(database, batched=True)
    assert batching.insert(database.insert)
    # The first insert lists (what a store before this one left unlisted),
    # in a transaction of its own after the insert.
    assert database.writes == [("INSERT INTO tickwork_jobs", 0), (LIST[0], 1), (LIST[1], 1)]
    for _ in range(LIST_EVERY - 1):
        batching.insert(database.insert)
    assert database.listings() == 1
    batching.insert(database.insert)
    assert database.listings() == 2
    assert database.writes[-3:] == [("INSERT INTO tickwork_jobs", 0), (LIST[0], 1),
                                    (LIST[1], 1)]


def test_a_plain_policy_lists_each_row_in_its_inserts_transaction() -> None:
    database = RecordingDatabase()
    batching = IndexBatching(database, batched=False)
    for _ in range(3):
        assert batching.insert(database.insert)
    # Each insert and its listing share one transaction (the listing's own
    # is nested in it).
    assert database.writes == [("INSERT INTO tickwork_jobs", 1), (LIST[0], 2),
                               (LIST[1], 2)] * 3


@pytest.mark.parametrize("batched", [True, False])
def test_an_insert_that_stored_no_row_is_not_counted(batched: bool) -> None:
    database = RecordingDatabase()
    batching = IndexBatching(database, batched=batched)
    assert batching.insert(lambda: False) is False
    assert database.listings() == 0


def test_rows_inserted_together_count_as_many() -> None:
    """fire_slots inserts several rows in one transaction and counts them at once."""
    database = RecordingDatabase()
    batching = IndexBatching(database, batched=True)
    batching.list_rows()
    batching.inserted(LIST_EVERY - 1)
    assert database.listings() == 1
    batching.inserted(2)
    assert database.listings() == 2
    batching.inserted(LIST_EVERY - 1)
    assert database.listings() == 2


def test_a_failed_listing_is_logged_and_tried_again_at_the_next_insert(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_batching, "_listing_failures", [-1e9, 0])
    database = RecordingDatabase()
    batching = IndexBatching(database, batched=True)
    database.fail = "INSERT OR REPLACE"
    with caplog.at_level(logging.WARNING, logger="tickwork.stores.index_batching"):
        assert batching.insert(database.insert)  # the row is stored: no error
    assert "listing new jobs failed (RuntimeError" in caplog.text
    batching.insert(database.insert)
    assert database.writes[-2:] == [(LIST[0], 1), (LIST[1], 1)]
    # Listed now: the next insert waits for the batch again.
    batching.insert(database.insert)
    assert database.writes[-1] == ("INSERT INTO tickwork_jobs", 0)


def test_listing_failures_are_logged_at_most_once_a_minute(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_batching, "_listing_failures", [-1e9, 0])
    database = RecordingDatabase()
    batching = IndexBatching(database, batched=False)
    with caplog.at_level(logging.WARNING, logger="tickwork.stores.index_batching"):
        for _ in range(3):
            database.fail = "UPDATE tickwork_jobs SET"
            assert batching.insert(database.insert)
    assert caplog.text.count("listing new jobs failed") == 1
    assert index_batching._listing_failures[1] == 2  # the two not logged, counted


@pytest.mark.parametrize(("batched", "may_defer", "expected"), [
    (True, True, DEFERRED), (True, False, FILING), (False, True, FILING),
    (False, False, FILING)])
def test_a_settlement_defers_its_filing_only_where_both_allow_it(
        batched: bool, may_defer: bool, expected: Settlements) -> None:
    batching = IndexBatching(RecordingDatabase(), batched=batched)
    assert batching.settlements(may_defer) is expected


def test_deferred_settlements_are_filed_at_the_first_then_every_file_every() -> None:
    database = RecordingDatabase()
    batching = IndexBatching(database, batched=True)
    batching.settled(DEFERRED)  # the first files what a store before it left
    assert database.filings() == 1
    for _ in range(FILE_EVERY - 1):
        batching.settled(DEFERRED)
        batching.settled(FILING)  # a settlement that filed its own row counts not
    assert database.filings() == 1
    batching.settled(DEFERRED)
    assert database.filings() == 2
    assert database.writes[-1] == ("UPDATE tickwork_jobs INDEXED", 0)  # the caller's transaction


def test_the_deferred_settlements_are_the_filing_ones_without_the_filing() -> None:
    """One family: each deferred statement is its filing twin with the
    ``filed = 1`` assignment taken out, binding the same values."""
    names = Settlements.__dataclass_fields__
    for name in names:
        filing, deferred = getattr(FILING, name), getattr(DEFERRED, name)
        assert ", filed = 1" in filing.text and "filed" not in deferred.text, name
        assert re.sub(r",\s*filed = 1", "", filing.text) == deferred.text, name
        assert filing.params == deferred.params == (
            "outcome", "failure_reason", "error_json", "now", "sequence", "token")
        assert deferred.name == f"{filing.name.removesuffix('_counted')}_unfiled" + (
            "_counted" if filing.name.endswith("_counted") else "")
