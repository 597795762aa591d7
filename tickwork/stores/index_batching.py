"""When the owner-local store writes the index entries no claim needs (schemas 0009, 0010).

A job's row carries two flags. ``listed``: the row is in the indexes of
unsettled jobs by queue and by lane, and in its queue's pick order. ``filed``:
its settlement is in the history indexes (by queue, by outcome, by lane, the
dead letters) and out of the indexes of unsettled jobs. Every read of
unsettled jobs also reads the unlisted rows, and every read of settled
history the unfiled ones, so no answer depends on either flag: they decide
only how many pages a commit writes. Written each in its row's own commit,
these entries double the WAL frames of an ingest and of a drained job
(docs/explanation/architecture.md has the figures).

This module holds every decision about the flags, so that the store, the
lifecycle and the statements read as if they were not there:

* when rows are listed: every ``LIST_EVERY`` inserts (batched), or in each
  insert's own commit (plain);
* which statements a settlement runs: ones that file the row, or (batched,
  and only where the caller lets the filing wait: ``drain()``'s settlements)
  ones that leave it unfiled, filed every ``FILE_EVERY`` of them in the
  commit of the last;
* the counters behind both, per store.

A runtime with a concurrent lane uses the plain policy: its claims check
that each candidate heads its queue, and with rows waiting for a batch that
check would read past them for every candidate. So does a store while any
queue is wide (``IndexBatching.one_at_a_time``): a claim that takes turns
reads a lane's rows for every lane it passes in the line, and a claim's
commit reads them again to keep the line (counted in SQLite VM steps, a
claim in a wide queue took about 2.4 times as many batched as plain, and a
job's ingest, claim and settlement together 1.6 times, listing and filing
included).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from tickwork.ports.database import SyncDatabase
from tickwork.stores.sql import sqlite as sql

logger = logging.getLogger(__name__)

#: How many rows a batched store inserts before it lists them, and how many
#: settlements it leaves unfiled before it files them. Every read of
#: unsettled jobs by queue or lane reads the unlisted ones too, and every
#: read of settled history the unfiled ones, so these bound that cost; the
#: saving is near its limit well before 100.
LIST_EVERY = 100
FILE_EVERY = 100


@dataclass(frozen=True, slots=True)
class Settlements:
    """The statements of a claim's settlement (cancelled or not; the settled
    row returned, or only its sequence, or only counted), all filing the row
    or all leaving it unfiled."""

    claim: sql.Statement
    cancelled_claim: sql.Statement
    claim_record: sql.Statement
    cancelled_claim_record: sql.Statement
    claim_counted: sql.Statement
    cancelled_claim_counted: sql.Statement


def _settlements(*templates: sql.Template) -> Settlements:
    return Settlements(*(sql.render_owner_local(template, *sql.SETTLE_PARAMS)
                         for template in templates))


#: The settlements every store runs: the row is filed in the settling commit.
FILING = _settlements(
    sql.SETTLE_CLAIM, sql.SETTLE_CANCELLED_CLAIM, sql.SETTLE_CLAIM_RECORD,
    sql.SETTLE_CANCELLED_CLAIM_RECORD, sql.SETTLE_CLAIM_COUNTED,
    sql.SETTLE_CANCELLED_CLAIM_COUNTED)
#: The deferred part: the same settlements leaving the row unfiled.
DEFERRED = _settlements(
    sql.SETTLE_CLAIM_UNFILED, sql.SETTLE_CANCELLED_CLAIM_UNFILED,
    sql.SETTLE_CLAIM_RECORD_UNFILED, sql.SETTLE_CANCELLED_CLAIM_RECORD_UNFILED,
    sql.SETTLE_CLAIM_UNFILED_COUNTED, sql.SETTLE_CANCELLED_CLAIM_UNFILED_COUNTED)
_LIST_NEW_ROWS = sql.render_owner_local(sql.LIST_NEW_ROWS)
_NOTE_LISTED = sql.render_owner_local(sql.NOTE_LISTED)
_FILE_SETTLED = sql.render_owner_local(sql.FILE_SETTLED)

#: When a failed listing was last logged (monotonic seconds), and how many
#: failures were not logged since: at most one line a minute.
_listing_failures: list[float] = [-1e9, 0]


def _log_listing_failure(error: Exception) -> None:
    now = time.monotonic()
    if now - _listing_failures[0] < 60:
        _listing_failures[1] += 1
        return
    skipped = int(_listing_failures[1])
    _listing_failures[:] = [now, 0]
    logger.warning("tickwork: listing new jobs failed (%s: %s); they stay unlisted, still read, "
                   "and are listed at a later insert%s", type(error).__name__, error,
                   f" ({skipped} more such failures not logged)" if skipped else "")


class IndexBatching:
    """One store's policy for its index entries: ``batched`` (the default of
    a runtime without a concurrent lane) or plain (every row listed in its
    insert's commit and filed in its settlement's).

    A new policy lists at its first insert and files at its first deferred
    settlement, so it also takes in what a store before it (a process that
    ended) left unlisted or unfiled."""

    def __init__(self, database: SyncDatabase, *, batched: bool) -> None:
        self.database = database
        self._batched = batched  # the policy the store was opened with
        self.batched = batched  # the policy in force
        self._list_every = LIST_EVERY if batched else 1
        self._unlisted = self._list_every  # rows inserted since the last listing
        self._unfiled = FILE_EVERY  # deferred settlements since the last filing

    def one_at_a_time(self, plain: bool) -> None:
        """Use the plain policy (``plain``), or the policy the store was
        opened with again. Going plain, the rows waiting for a batch are
        listed and filed now, in the caller's transaction where it has one."""
        batched = self._batched and not plain
        if batched == self.batched:
            return
        self.batched = batched
        self._list_every = LIST_EVERY if batched else 1
        if not batched:
            self.list_rows()
            self.file_rows()

    # ------------------------------------------------------------- listing

    def insert(self, write: Callable[[], bool]) -> bool:
        """Run ``write`` (one insert: whether it stored a row) and count its
        row; a plain policy lists it in the same commit."""
        if self.batched:
            return self._write_and_count(write)
        return self.database.atomic(lambda: self._write_and_count(write))

    def _write_and_count(self, write: Callable[[], bool]) -> bool:
        if not write():
            return False
        self.inserted(1)
        return True

    def inserted(self, count: int) -> None:
        """Count ``count`` rows inserted unlisted; list them all once enough have come.

        Listing only moves rows into the indexes: every read also reads the
        unlisted rows, so nothing depends on it having run. It may run after
        an insert already committed by itself, and then its failure must not
        turn a stored job into a failed ingest (a caller told "failed" would
        retry and get "duplicate", and nothing would announce the job): the
        rows stay unlisted and the next insert lists them. Inside a larger
        transaction, a failure that broke that transaction still fails its
        commit, so nothing is reported stored that is not."""
        self._unlisted += count
        if self._unlisted >= self._list_every:
            try:
                self.list_rows()
            except Exception as error:
                _log_listing_failure(error)

    def list_rows(self) -> None:
        """Put every unlisted row into the indexes of unsettled jobs, and note
        the sequence listed through, in one transaction."""
        def list_rows() -> None:
            self.database.mutate(_LIST_NEW_ROWS.text, ())
            self.database.mutate(_NOTE_LISTED.text, ())

        self.database.atomic(list_rows)
        self._unlisted = 0

    # -------------------------------------------------------------- filing

    def settlements(self, may_defer: bool) -> Settlements:
        """The statements a settlement runs: the deferred ones where the
        caller lets the filing wait (``may_defer``) and the policy batches,
        else the filing ones."""
        return DEFERRED if may_defer and self.batched else FILING

    def settled(self, statements: Settlements) -> None:
        """Note a settlement that ran ``statements`` and changed its row; after
        the ``FILE_EVERY``-th deferred one, file them all (in the caller's
        transaction, where it has one)."""
        if statements is not DEFERRED:
            return
        self._unfiled += 1
        if self._unfiled >= FILE_EVERY:
            self.file_rows()

    def file_rows(self) -> None:
        """File every settled row left unfiled: into the history indexes, out
        of the indexes of unsettled jobs, in one statement."""
        self.database.mutate(_FILE_SETTLED.text, ())
        self._unfiled = 0
