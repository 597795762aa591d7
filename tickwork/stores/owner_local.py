"""The owner-local job table: runs its statements on a SyncDatabase and decodes the rows.

No lifecycle decisions here: each method is one statement.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from tickwork.lifecycle import Settlement
from tickwork.model.errors import IngestConflict
from tickwork.model.jobs import (
    JobRecord,
    JobState,
    Outcome,
    Recovery,
    ValidJob,
    cargo_differences,
)
from tickwork.ports.database import Row, SyncDatabase
from tickwork.stores.sql import sqlite as sql


def decode_job(row: Row) -> JobRecord:
    # Owners hand back plain Python values: ints as int, NULL as None.
    max_recoveries = row[5]
    return JobRecord(
        row[0],
        row[1],
        row[2],
        row[3],
        json.loads(row[4]),
        None if max_recoveries is None else Recovery(max_recoveries),
        cast(JobState, row[6]),
        cast("Outcome | None", row[7]),
        row[8],
        row[9],
        row[10],
        row[11],
        row[12],
        row[13],
        row[14],
    )


@dataclass(frozen=True, slots=True)
class Partition:
    """The jobs one tick slot selects from, and the statements that select them.

    ``bind`` goes in front of every statement's own values: nothing for
    ``EVERY_JOB`` (the plain statements), the concurrent lane for the
    partitioned ones (see statements.py).
    """

    name: str
    bind: tuple[str, ...]
    claim_next: str
    claim_next_if_clear: str  # {exclude} still to fill
    tick_probe: str  # {exclude} still to fill
    settle_next_cancelled: str


#: A runtime without a concurrent lane: one slot, every job.
EVERY_JOB = Partition("every job", (), sql.CLAIM_NEXT, sql.CLAIM_NEXT_IF_CLEAR,
                      sql.TICK_PROBE, sql.SETTLE_NEXT_CANCELLED)


def outside_lane(lane: str) -> Partition:
    """The serial slot of a runtime whose concurrent lane is ``lane``."""
    return Partition("serial", (lane,), sql.CLAIM_OUTSIDE_LANE, sql.CLAIM_OUTSIDE_LANE_IF_CLEAR,
                     sql.TICK_PROBE_OUTSIDE_LANE, sql.SETTLE_NEXT_CANCELLED_OUTSIDE_LANE)


def inside_lane(lane: str) -> Partition:
    """The concurrent slot: only the jobs of ``lane``."""
    return Partition("concurrent", (lane,), sql.CLAIM_IN_LANE, sql.CLAIM_IN_LANE_IF_CLEAR,
                     sql.TICK_PROBE_IN_LANE, sql.SETTLE_NEXT_CANCELLED_IN_LANE)


class OwnerLocalStore:
    """The owner-local job table, one method per statement."""

    def __init__(self, database: SyncDatabase) -> None:
        self.database = database
        self._statements: dict[tuple[str, int], str] = {}

    def _read_one(self, statement: str, params: Sequence[Any]) -> JobRecord | None:
        rows = self.database.query(statement, params)
        return decode_job(rows[0]) if rows else None

    def _write_one(self, statement: str, params: Sequence[Any]) -> JobRecord | None:
        rows = self.database.mutate(statement, params)
        return decode_job(rows[0]) if rows else None

    def insert(self, job: ValidJob, now: int) -> bool:
        """Insert a new queued job; False when the job_id already exists."""
        rows = self.database.mutate(
            sql.INSERT_JOB,
            (job.job_id, job.queue, job.lane, job.priority, job.payload_json,
             job.max_recoveries, now),
        )
        return bool(rows)

    def find(self, job_id: str) -> JobRecord | None:
        return self._read_one(sql.SELECT_JOB, (job_id,))

    def find_cargo(self, job_id: str) -> ValidJob | None:
        """The stored job's identity and cargo, as validate_job would produce them."""
        rows = self.database.query(sql.SELECT_CARGO, (job_id,))
        return ValidJob(*rows[0]) if rows else None

    def queue_head(self, queue: str) -> JobRecord | None:
        return self._read_one(sql.SELECT_QUEUE_HEAD, (queue,))

    def latest_settled(self, queue: str) -> JobRecord | None:
        return self._read_one(sql.SELECT_LATEST_SETTLED, (queue,))

    def claim_next(self, partition: Partition, token: str, now: int) -> JobRecord | None:
        return self._write_one(partition.claim_next, (*partition.bind, token, now))

    def settle_claim(
        self, sequence: int, token: str, settlement: Settlement, now: int, *, cancelled: bool,
    ) -> bool:
        """Settle the claim; False when it is no longer the job's current claim,
        or its cancellation is not (``cancelled=False``: is) recorded."""
        statement = sql.SETTLE_CANCELLED_CLAIM if cancelled else sql.SETTLE_CLAIM
        params = (settlement.outcome, settlement.failure_reason, now, sequence, token)
        return bool(self.database.mutate(statement, params))

    def settle_claim_record(
        self, sequence: int, token: str, settlement: Settlement, now: int, *, cancelled: bool,
    ) -> JobRecord | None:
        """settle_claim, returning the settled job (for the projector)."""
        statement = sql.SETTLE_CANCELLED_CLAIM_RECORD if cancelled else sql.SETTLE_CLAIM_RECORD
        params = (settlement.outcome, settlement.failure_reason, now, sequence, token)
        return self._write_one(statement, params)

    def settle_recovered_claim(
        self, sequence: int, token: str, settlement: Settlement, now: int
    ) -> JobRecord | None:
        """Settle a claim whose execution is gone, releasing its token."""
        params = (settlement.outcome, settlement.failure_reason, now, sequence, token)
        return self._write_one(sql.SETTLE_RECOVERED_CLAIM, params)

    def requeue_claim(self, sequence: int, token: str) -> JobRecord | None:
        return self._write_one(sql.REQUEUE_CLAIM, (sequence, token))

    def _excluding(self, template: str, count: int) -> str:
        """``template`` with its {exclude} filled for ``count`` claim tokens (cached)."""
        key = (template, count)
        statement = self._statements.get(key)
        if statement is None:
            exclude = ""
            if count:
                exclude = "AND claim_token NOT IN (" + ", ".join("?" * count) + ")"
            statement = self._statements[key] = template.replace("{exclude}", exclude)
        return statement

    def probe(
        self, partition: Partition, exclude_tokens: Sequence[str], after: tuple[int, int]
    ) -> tuple[int | None, bool]:
        """(the partition's running claim to probe: the first after ``after``
        in (started_at, sequence) order, wrapping, skipping ``exclude_tokens``;
        whether any cancelled job of the partition is still queued)"""
        statement = self._excluding(partition.tick_probe, len(exclude_tokens))
        orphan, cancelled = self.database.query(
            statement, (*partition.bind, *exclude_tokens, *after, *exclude_tokens))[0]
        return orphan, bool(cancelled)

    def claim_next_if_clear(
        self, partition: Partition, token: str, now: int, exclude_tokens: Sequence[str]
    ) -> JobRecord | None:
        """Claim like claim_next, but only when probe() would report nothing."""
        statement = self._excluding(partition.claim_next_if_clear, len(exclude_tokens))
        return self._write_one(statement, (*partition.bind, token, now, *exclude_tokens))

    def find_claim(self, sequence: int) -> tuple[JobRecord, str] | None:
        """A job with its current claim token (the runtime's private fence)."""
        rows = self.database.query(sql.SELECT_CLAIM, (sequence,))
        if not rows:
            return None
        return decode_job(rows[0]), rows[0][15]

    def settle_next_cancelled(self, partition: Partition, now: int) -> JobRecord | None:
        return self._write_one(partition.settle_next_cancelled, (*partition.bind, now))

    def read_settled(
        self, after_sequence: int, limit: int, excluding_lane: str | None
    ) -> list[JobRecord]:
        """Settled jobs after ``after_sequence`` in enqueue order, up to the
        first unsettled one; without ``excluding_lane``'s jobs, if given."""
        if excluding_lane is None:
            rows = self.database.query(sql.READ_SETTLED, (after_sequence, limit))
        else:
            rows = self.database.query(
                sql.READ_SETTLED_OUTSIDE_LANE, (after_sequence, limit, excluding_lane))
        return [decode_job(row) for row in rows]

    def record_cancellation(
        self, job_id: str, cancellation_id: str, only_if_queued: bool
    ) -> str | None:
        """Write the job's first cancellation; its queue, or None when it no
        longer applies (nothing written)."""
        statement = (sql.RECORD_CANCELLATION_IF_QUEUED if only_if_queued
                     else sql.RECORD_CANCELLATION)
        rows = self.database.mutate(statement, (cancellation_id, job_id))
        return str(rows[0][0]) if rows else None

    def fail_lane(self, lane: str, reason: str, limit: int, now: int) -> list[JobRecord]:
        """Settle up to ``limit`` of the lane's jobs as failed; running ones first."""
        rows = self.database.mutate(sql.FAIL_LANE, (lane, reason, limit, now))
        records = [decode_job(row) for row in rows]
        # RETURNING has no order; report in the order they were chosen.
        # started_at is set exactly while a job runs (requeue clears it).
        records.sort(key=lambda job: (job.started_at is None, job.sequence))
        return records

    def insert_many(
        self, jobs: Sequence[ValidJob], now: int, inserted: Callable[[ValidJob], None]
    ) -> list[bool]:
        """Insert the new jobs of ``jobs``, in order, in one transaction:
        per job True (inserted; ``inserted(job)`` is called inside the
        transaction) or False (an identical replay, of a stored job or of an
        earlier job of the list); IngestConflict rolls all of them back."""

        def insert_all() -> list[bool]:
            # In list order, so the first job that conflicts is the one named
            # (and nothing after it is even tried).
            known: dict[str, ValidJob] = {}
            flags: list[bool] = []
            for job in jobs:
                earlier = known.get(job.job_id)
                if earlier is None:
                    if self.insert(job, now):
                        known[job.job_id] = job
                        inserted(job)
                        flags.append(True)
                        continue
                    earlier = self.find_cargo(job.job_id)
                    assert earlier is not None  # the insert conflicted on it, in this transaction
                    known[job.job_id] = earlier
                differences = cargo_differences(job, earlier)
                if differences:
                    raise IngestConflict(job.job_id, differences)
                flags.append(False)
            return flags

        return self.database.atomic(insert_all)

    def lane_has_pending(self, lane: str) -> bool:
        return bool(self.database.query(sql.LANE_HAS_PENDING, (lane,))[0][0])

    def purge_queue(self, queue: str) -> int:
        return len(self.database.mutate(sql.PURGE_QUEUE, (queue,)))

    def has_pending_work(self) -> bool:
        return bool(self.database.query(sql.HAS_PENDING_WORK)[0][0])

    def status_groups(self) -> list[Row]:
        """(queue, state, outcome, count) of every group of jobs (a full scan)."""
        return self.database.query(sql.STATUS)

    def queue_counts(self, queue: str) -> Row:
        """(queued, running, then settled per outcome in OUTCOMES order) of one queue."""
        return self.database.query(sql.QUEUE_STATUS, (queue,))[0]
