"""Runs the owner-local statements on an Owner and decodes the rows.

No lifecycle decisions here: each method is one statement.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, cast

from ..jobs import JobRecord, JobState, Outcome, Recovery, ValidJob
from ..owners.base import Owner, Row
from . import statements as sql


def _int(value: Any) -> int:
    # Durable Object storage returns INTEGER columns as JS doubles.
    return value if isinstance(value, int) else int(value)


def _opt_int(value: Any) -> int | None:
    return None if value is None else _int(value)


def decode_job(row: Row) -> JobRecord:
    max_recoveries = _opt_int(row[5])
    return JobRecord(
        job_id=row[0],
        queue=row[1],
        lane=row[2],
        priority=_int(row[3]),
        payload=json.loads(row[4]),
        recovery=None if max_recoveries is None else Recovery(max_recoveries),
        state=cast(JobState, row[6]),
        outcome=cast("Outcome | None", row[7]),
        failure_reason=row[8],
        sequence=_int(row[9]),
        recoveries=_int(row[10]),
        enqueued_at=_int(row[11]),
        started_at=_opt_int(row[12]),
        settled_at=_opt_int(row[13]),
        cancellation_id=row[14],
    )


def stored_cargo(record: JobRecord) -> ValidJob:
    """The stored job's identity and cargo in the form validate_job produces."""
    return ValidJob(
        record.job_id,
        record.queue,
        record.lane,
        record.priority,
        json.dumps(record.payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False),
        None if record.recovery is None else record.recovery.max_recoveries,
    )


class LocalJobStore:
    """The owner-local job table, one method per statement."""

    def __init__(self, owner: Owner) -> None:
        self.owner = owner

    def _one(self, statement: str, params: Sequence[Any]) -> JobRecord | None:
        rows = self.owner.query(statement, params)
        return decode_job(rows[0]) if rows else None

    def insert(self, job: ValidJob, now: int) -> bool:
        """Insert a new queued job; False when the job_id already exists."""
        rows = self.owner.query(
            sql.INSERT_JOB,
            (job.job_id, job.queue, job.lane, job.priority, job.payload_json,
             job.max_recoveries, now),
        )
        return bool(rows)

    def find(self, job_id: str) -> JobRecord | None:
        return self._one(sql.SELECT_JOB, (job_id,))

    def queue_head(self, queue: str) -> JobRecord | None:
        return self._one(sql.SELECT_QUEUE_HEAD, (queue,))

    def latest_settled(self, queue: str) -> JobRecord | None:
        return self._one(sql.SELECT_LATEST_SETTLED, (queue,))

    def claim_next(self, token: str, now: int) -> JobRecord | None:
        return self._one(sql.CLAIM_NEXT, (token, now))

    def settle_claim(
        self, sequence: int, token: str, outcome: Outcome, reason: str | None, now: int
    ) -> JobRecord | None:
        """Settle the claim; None when the claim is no longer the job's current one."""
        return self._one(sql.SETTLE_CLAIM, (outcome, reason, now, sequence, token))

    def requeue_claim(self, sequence: int, token: str) -> JobRecord | None:
        return self._one(sql.REQUEUE_CLAIM, (sequence, token))

    def oldest_claim(self, exclude_tokens: Sequence[str]) -> tuple[JobRecord, str] | None:
        """The oldest running claim not in ``exclude_tokens``, with its token."""
        exclude = ""
        if exclude_tokens:
            exclude = "AND claim_token NOT IN (" + ", ".join("?" * len(exclude_tokens)) + ")"
        rows = self.owner.query(sql.SELECT_OLDEST_CLAIM.format(exclude=exclude), exclude_tokens)
        if not rows:
            return None
        return decode_job(rows[0]), rows[0][15]

    def settle_next_cancelled(self, now: int) -> JobRecord | None:
        return self._one(sql.SETTLE_NEXT_CANCELLED, (now,))

    def record_cancellation(self, job_id: str, cancellation_id: str) -> bool:
        return bool(self.owner.query(sql.RECORD_CANCELLATION, (cancellation_id, job_id)))

    def refuse_lane_batch(
        self, lane: str, reason: str, limit: int, now: int
    ) -> list[JobRecord]:
        """Settle up to ``limit`` of the lane's jobs as failed; running ones first."""
        rows = self.owner.query(sql.REFUSE_LANE_BATCH, (lane, reason, limit, now))
        records = [decode_job(row) for row in rows]
        # RETURNING has no order; report in the order they were chosen.
        # started_at is set exactly while a job runs (requeue clears it).
        records.sort(key=lambda job: (job.started_at is None, job.sequence))
        return records

    def lane_has_pending(self, lane: str) -> bool:
        return bool(self.owner.query(sql.LANE_HAS_PENDING, (lane,))[0][0])

    def purge_queue(self, queue: str) -> int:
        return len(self.owner.query(sql.PURGE_QUEUE, (queue,)))

    def has_pending_work(self) -> bool:
        return bool(self.owner.query(sql.HAS_PENDING_WORK)[0][0])
