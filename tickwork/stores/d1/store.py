"""D1Store: the shared-store port over a D1 binding, one statement per method."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tickwork.lifecycle import Settlement
from tickwork.lifecycle.requests import ClaimView, Suspect
from tickwork.model.jobs import JobRecord, ValidJob, replay_flags, stored_cargo
from tickwork.ports.shared_store import (
    CancelWrite,
    RenewAnswer,
    claim_view_from_row,
    probe_from_row,
)
from tickwork.stores.d1.binding import D1Binding
from tickwork.stores.owner_local import decode_job
from tickwork.stores.schema_version import MIGRATIONS, check_schema_version
from tickwork.stores.sql import d1 as sql

#: The schema this package's statements need, and the migration that creates it.
LATEST_MIGRATION = "schema/d1/" + MIGRATIONS[-1]

_JOB_COLUMN_NAMES = tuple(name.strip() for name in sql.JOB_COLUMNS.split(","))
_PROBE_COLUMN_NAMES = (*_JOB_COLUMN_NAMES, "claim_token", "cancelled_waiting")


class D1Store:
    def __init__(self, db: Any) -> None:
        self.d1 = D1Binding(db)

    async def _one_job(self, statement: str, values: Sequence[Any]) -> JobRecord | None:
        rows = await self.d1.query(statement, values)
        return decode_job(rows[0]) if rows else None

    async def check_schema(self) -> None:
        try:
            rows = await self.d1.query(sql.SCHEMA_VERSION)
        except Exception as error:
            if "no such table" not in str(error):
                raise
            rows = []
        stored = int(rows[0][0]) if rows else 0
        check_schema_version(stored, database="D1", folder="schema/d1",
                             apply_with="wrangler d1 migrations apply <DB>")

    async def insert(self, job: ValidJob, now: int | None) -> bool:
        rows = await self.d1.query(sql.INSERT_JOB, (now, *_job_values(job)))
        return bool(rows)

    async def insert_many(
        self, jobs: list[ValidJob], now: int | None, *, before: Sequence[Any] = ()
    ) -> list[bool] | None:
        """``SharedStore.insert_many``; ``before``: statements already prepared
        on this database that run first in the same batch (their results are
        ignored), so they commit with the jobs or not at all."""
        leading = list(before)
        # One batch, one round trip: the caller's statements, then one per job.
        try:
            results = await self.d1.batch(
                [*leading, *((sql.INGEST, (now, *_job_values(job))) for job in jobs)],
                [*([None] * len(leading)), *([("sequence",)] * len(jobs))],
            )
        except Exception as error:
            if "tickwork_ingest_conflict" not in str(error):
                raise
            # The trigger failed the batch; nothing was written. Name the job
            # and fields from what is stored (a second round trip, on the
            # conflict path only): replay_flags raises the IngestConflict.
            rows = await self.d1.query(
                sql.SELECT_CARGO_MANY, (json.dumps([job.job_id for job in jobs]),))
            replay_flags(jobs, {row[0]: stored_cargo(*row) for row in rows})
            return None  # the conflicting job is gone now (purged): try again
        return [bool(rows) for rows in results[len(leading):]]

    async def find(self, job_id: str) -> JobRecord | None:
        return await self._one_job(sql.SELECT_JOB, (job_id,))

    async def find_cargo(self, job_id: str) -> ValidJob | None:
        rows = await self.d1.query(sql.SELECT_CARGO, (job_id,))
        return stored_cargo(*rows[0]) if rows else None

    async def queue_head(self, queue: str) -> JobRecord | None:
        return await self._one_job(sql.SELECT_QUEUE_HEAD, (queue,))

    async def has_pending_work(self) -> bool:
        rows = await self.d1.query(sql.HAS_PENDING_WORK)
        return bool(rows[0][0])

    async def status_groups(self) -> list[tuple[Any, ...]]:
        return await self.d1.query(sql.STATUS)

    async def queue_counts(self, queue: str) -> tuple[Any, ...]:
        return (await self.d1.query(sql.QUEUE_STATUS, (queue,)))[0]

    async def claim(
        self, token: str, lease_ms: int, now: int | None, *, guarded: bool
    ) -> JobRecord | None:
        statement = sql.CLAIM_IF_CLEAR if guarded else sql.CLAIM
        return await self._one_job(statement, (now, token, lease_ms))

    async def probe(self, now: int | None) -> tuple[Suspect | None, bool]:
        return probe_from_row((await self.d1.query(sql.PROBE, (now,)))[0])

    async def claim_or_probe(
        self, token: str, lease_ms: int, now: int | None
    ) -> tuple[JobRecord | None, tuple[Suspect | None, bool]]:
        # One batch, one round trip: an idle tick costs the same as a claim.
        claimed, probed = await self.d1.batch(
            [(sql.CLAIM_IF_CLEAR, (now, token, lease_ms)), (sql.PROBE, (now,))],
            [_JOB_COLUMN_NAMES, _PROBE_COLUMN_NAMES],
        )
        if claimed:
            return decode_job(claimed[0]), (None, False)
        return None, probe_from_row(probed[0])

    async def requeue_expired(self, sequence: int, token: str, now: int | None) -> bool:
        return bool(await self.d1.query(sql.REQUEUE_EXPIRED, (now, sequence, token)))

    async def settle_expired(
        self, sequence: int, token: str, settlement: Settlement, now: int | None
    ) -> JobRecord | None:
        return await self._one_job(
            sql.SETTLE_EXPIRED,
            (now, sequence, token, settlement.outcome, settlement.failure_reason),
        )

    async def settle(
        self, sequence: int, token: str, settlement: Settlement, now: int | None,
        *, cancelled: bool,
    ) -> bool:
        statement = sql.SETTLE_CANCELLED if cancelled else sql.SETTLE
        values = (now, sequence, token, settlement.outcome, settlement.failure_reason)
        return bool(await self.d1.query(statement, values))

    async def settle_and_claim(
        self, sequence: int, token: str, settlement: Settlement, now: int | None,
        *, next_token: str, lease_ms: int,
    ) -> tuple[bool, JobRecord | None]:
        # One batch: the settlement, then the next claim, in one round trip.
        settled, claimed = await self.d1.batch(
            [(sql.SETTLE, (now, sequence, token, settlement.outcome,
                           settlement.failure_reason)),
             (sql.CLAIM_IF_CLEAR, (now, next_token, lease_ms))],
            [("sequence",), _JOB_COLUMN_NAMES],
        )
        return bool(settled), decode_job(claimed[0]) if claimed else None

    async def read_claim(self, sequence: int, now: int | None) -> ClaimView | None:
        rows = await self.d1.query(sql.SELECT_CLAIM, (now, sequence))
        if not rows:
            return None
        return claim_view_from_row(rows[0])

    async def renew(
        self, sequence: int, token: str, lease_ms: int, now: int | None
    ) -> RenewAnswer:
        rows = await self.d1.query(sql.RENEW, (now, sequence, token, lease_ms))
        if not rows:
            return "lost"
        return "cancelled" if rows[0][0] else "held"

    async def settle_next_cancelled(self, now: int | None) -> JobRecord | None:
        return await self._one_job(sql.SETTLE_NEXT_CANCELLED, (now,))

    async def record_cancellation(
        self, job_id: str, cancellation_id: str, mode: CancelWrite
    ) -> bool:
        statement = (sql.RECORD_CANCELLATION_IF_QUEUED if mode == "only_if_queued"
                     else sql.RECORD_CANCELLATION)
        return bool(await self.d1.query(statement, (cancellation_id, job_id)))

    async def fail_lane(
        self, lane: str, reason: str, limit: int, now: int | None
    ) -> tuple[list[JobRecord], bool]:
        refused, remaining = await self.d1.batch(
            [(sql.FAIL_LANE, (now, lane, reason, limit)), (sql.LANE_HAS_PENDING, (lane,))],
            [_JOB_COLUMN_NAMES, ("more",)],
        )
        return [decode_job(row) for row in refused], bool(remaining[0][0])

    async def purge(self, queue: str) -> int:
        return await self.d1.run(sql.PURGE_QUEUE, (queue,))


def _job_values(job: ValidJob) -> tuple[Any, ...]:
    return (job.job_id, job.queue, job.lane, job.priority, job.payload_json, job.max_recoveries)
