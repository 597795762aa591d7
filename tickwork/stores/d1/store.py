"""D1Store: the shared-store port over a D1 binding, one statement (or batch) per method.

The statements are the SQLite family's (``tickwork.stores.sql.sqlite``),
rendered for D1: database time, claims with leases.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tickwork.lifecycle import Settlement
from tickwork.lifecycle.requests import ClaimView, JobListing, Suspect
from tickwork.model.history import DEPTH_CAP, MAX_SAMPLED_QUEUES, HistoryRow
from tickwork.model.jobs import (
    MAX_ID_LENGTH,
    JobRecord,
    ValidJob,
    replay_flags,
    stored_cargo,
)
from tickwork.model.limits import ConcurrencyLimit, LimitKind, in_order
from tickwork.model.rate_limits import RateLimit, rate_in_order
from tickwork.model.retention import SCOPE_KEY, RetentionPolicy, StorageReport
from tickwork.model.schedules import StoredSchedule, ValidSchedule
from tickwork.ports.shared_store import CancelWrite, RenewAnswer
from tickwork.stores.d1.binding import D1Binding
from tickwork.stores.rows import (
    CARGO,
    CLAIM,
    JOB,
    SEQUENCE,
    Columns,
    limit_row,
    rate_limit_row,
    retention_row,
    schedule_row,
)
from tickwork.stores.schema_version import MIGRATIONS, check_schema_version
from tickwork.stores.schema_version import SCHEMA_VERSION as NEEDED_VERSION
from tickwork.stores.sql import sqlite as sql

#: The schema this package's statements need, and the migration that creates it.
LATEST_MIGRATION = "schema/d1/" + MIGRATIONS[-1]


def _render(template: sql.Template, *binds: str) -> sql.Statement:
    """``template`` for D1, checked to bind ``binds`` in that order (the
    order the methods below pass their values in)."""
    statement = template.render(sql.D1)
    if statement.params != binds:
        raise AssertionError(f"{template.name} binds {statement.params}, not {binds}")
    return statement


_JOB = sql.JOB_PARAMS
_SETTLE = ("outcome", "failure_reason", "error_json", "now", "sequence", "token")
SCHEMA_VERSION = _render(sql.SCHEMA_VERSION)
HISTORY = _render(sql.HISTORY, "bucket_ms", "queue", "since", "until")
HISTORY_KNOWN = _render(sql.HISTORY_KNOWN, "queue")
ADD_HISTORY_COUNTS = _render(sql.ADD_HISTORY_COUNTS, "rows")
SAMPLE_HISTORY = _render(sql.SAMPLE_HISTORY, "max_queues", "queues", "since", "now",
                         "depth_limit")
PRUNE_HISTORY = _render(sql.PRUNE_HISTORY, "now", "keep_ms", "limit")
INSERT_JOB = _render(sql.INSERT_JOB, *_JOB)
ENQUEUE = _render(sql.ENQUEUE, *_JOB)
INGEST = _render(sql.INGEST, *_JOB)
# The same three for a job that names no time: two binds fewer.
_AT_ONCE = sql.JOB_PARAMS_AT_ONCE
INSERT_JOB_AT_ONCE = _render(sql.INSERT_JOB_AT_ONCE, *_AT_ONCE)
ENQUEUE_AT_ONCE = _render(sql.ENQUEUE_AT_ONCE, *_AT_ONCE)
INGEST_AT_ONCE = _render(sql.INGEST_AT_ONCE, *_AT_ONCE)
SELECT_CARGO_MANY = _render(sql.SELECT_CARGO_MANY, "job_ids")
SELECT_JOB = _render(sql.SELECT_JOB, "job_id")
SELECT_CARGO = _render(sql.SELECT_CARGO, "job_id")
SELECT_QUEUE_HEAD = _render(sql.SELECT_QUEUE_HEAD, "queue")
READY_AHEAD = _render(sql.READY_AHEAD_TAKING_TURNS, "queue", "priority", "sequence", "limit")
SELECT_CLAIM = _render(sql.SELECT_CLAIM, "sequence", "now")
HAS_PENDING_WORK = _render(sql.HAS_PENDING_WORK, "now")
NEXT_WORK = _render(sql.NEXT_WORK, "now")
PROMOTE_DUE = _render(sql.PROMOTE_DUE, "now", "limit")
STATUS = _render(sql.STATUS)
BACKLOG = _render(sql.BACKLOG)
QUEUE_STATUS = _render(sql.QUEUE_STATUS, "queue")
CLAIM_ONE = _render(sql.CLAIM_TAKING_TURNS, "token", "now", "lease_ms")
CLAIM_IF_CLEAR = _render(sql.CLAIM_IF_CLEAR_TAKING_TURNS, "token", "now", "lease_ms")
PROBE = _render(sql.PROBE, "now")
REQUEUE_EXPIRED = _render(sql.REQUEUE_CLAIM, "now", "sequence", "token")
RELEASE_CLAIM = _render(sql.RELEASE_CLAIM, "sequence", "token")
SETTLE_EXPIRED = _render(sql.SETTLE_RECOVERED_CLAIM, *_SETTLE)
SETTLE = _render(sql.SETTLE_CLAIM, *_SETTLE)
SETTLE_CANCELLED = _render(sql.SETTLE_CANCELLED_CLAIM, *_SETTLE)
RENEW = _render(sql.RENEW, "now", "sequence", "token", "lease_ms")
SETTLE_NEXT_CANCELLED = _render(sql.SETTLE_NEXT_CANCELLED, "now")
RECORD_CANCELLATION = _render(sql.RECORD_CANCELLATION, "cancellation_id", "job_id")
RECORD_CANCELLATION_IF_QUEUED = _render(sql.RECORD_CANCELLATION_IF_QUEUED,
                                        "cancellation_id", "job_id")
FAIL_LANE = _render(sql.FAIL_LANE, "lane", "reason", "limit", "now")
LANE_HAS_PENDING = _render(sql.LANE_HAS_PENDING, "lane")
PURGE_QUEUE = _render(sql.PURGE_QUEUE, "queue")
PAUSE_QUEUE = _render(sql.PAUSE_QUEUE, "queue", "now")
RESUME_QUEUE = _render(sql.RESUME_QUEUE, "queue")
QUEUE_PAUSED = _render(sql.QUEUE_PAUSED, "queue")
RETRY_CLAIM = _render(sql.RETRY_CLAIM, "now", "delay_ms", "error_json", "outcome",
                      "failure_reason", "error_line", "sequence", "token")
REDRIVE_APPLIED = _render(sql.REDRIVE_APPLIED, "job_id", "redrive_id")
REDRIVE_JOB = _render(sql.REDRIVE_JOB, "redrive_id", "job_id")
NOTE_REDRIVE = _render(sql.NOTE_REDRIVE, "redrive_id", "now", "job_id")
JOBS_BY_ID_PREFIX_FIRST = _render(sql.JOBS_BY_ID_PREFIX_FIRST, "low", "high", "limit")
JOBS_BY_ID_PREFIX_NEXT = _render(sql.JOBS_BY_ID_PREFIX_NEXT, "low", "high", "limit")
DEAD_LETTERS = _render(sql.DEAD_LETTERS, "queue", "before_settled", "before_sequence", "limit")
LIST_JOBS = {key: template.render(sql.D1) for key, template in sql.LIST_JOBS.items()}
STORE_NOW = _render(sql.STORE_NOW, "now")
SELECT_SCHEDULE = _render(sql.SELECT_SCHEDULE, "name")
LIST_SCHEDULES = _render(sql.LIST_SCHEDULES)
CREATE_SCHEDULE = _render(sql.CREATE_SCHEDULE, "name", "spec_json", "next_at", "now")
REPLACE_SCHEDULE = _render(sql.REPLACE_SCHEDULE, "spec_json", "next_at", "now", "name",
                           "old_spec_json")
PAUSE_SCHEDULE = _render(sql.PAUSE_SCHEDULE, "now", "name")
RESUME_SCHEDULE = _render(sql.RESUME_SCHEDULE, "next_at", "now", "name", "spec_json")
DELETE_SCHEDULE = _render(sql.DELETE_SCHEDULE, "name")
DUE_SCHEDULES = _render(sql.DUE_SCHEDULES, "now")
NEXT_SLOT = _render(sql.NEXT_SLOT)
FIRE_SLOT = _render(sql.FIRE_SLOT, *sql.FIRE_SLOT.params)
ADVANCE_SCHEDULE = _render(sql.ADVANCE_SCHEDULE, "next_at", "name", "spec_json")


LIST_RETENTION = _render(sql.LIST_RETENTION)
PUT_RETENTION = _render(sql.PUT_RETENTION, "queue", "keep_completed_ms", "keep_failed_ms", "now")
DELETE_RETENTION = _render(sql.DELETE_RETENTION, "queue")
SETTLED_QUEUES = _render(sql.SETTLED_QUEUES)
LIST_LIMITS = _render(sql.LIST_LIMITS)
PUT_LIMIT = _render(sql.PUT_LIMIT, "kind", "key", "max_running", "now")
DELETE_LIMIT = _render(sql.DELETE_LIMIT, "kind", "key")
WIDEN_LINE = _render(sql.WIDEN_LINE, "queue", "max_running")
DROP_LINE = _render(sql.DROP_LINE, "queue")
LIST_RATE_LIMITS = _render(sql.LIST_RATE_LIMITS, "now")
PUT_RATE_LIMIT = _render(sql.PUT_RATE_LIMIT, "kind", "key", "starts", "period_ms", "burst",
                         "now")
DELETE_RATE_LIMIT = _render(sql.DELETE_RATE_LIMIT, "kind", "key", "now")
HOLD_RATE_LIMITED = _render(sql.HOLD_RATE_LIMITED, "kind", "key", "until", "now")
PUT_BACK_RATE_LIMITED = _render(sql.PUT_BACK_RATE_LIMITED, "sequence", "token", "now")
RUNNING_IN = {"queue": _render(sql.RUNNING_IN_QUEUE, "key", "limit"),
              "lane": _render(sql.RUNNING_IN_LANE, "key", "limit")}
PRUNABLE = _render(sql.PRUNABLE, "queue", "completed_before", "failed_before", "limit")
PRUNE_REDRIVES = _render(sql.PRUNE_REDRIVES, "job_ids", "completed_before", "failed_before")
PRUNE_JOBS = _render(sql.PRUNE_JOBS, "job_ids", "completed_before", "failed_before")
STORAGE_ROWS = _render(sql.STORAGE_ROWS)


def _names(statement: sql.Statement) -> tuple[str, ...]:
    columns: Columns | None = statement.columns
    assert columns is not None
    return columns.names


class D1Store:
    schema_version = NEEDED_VERSION

    def __init__(self, db: Any) -> None:
        self.d1 = D1Binding(db)

    async def _one_job(self, statement: sql.Statement,
                       values: Sequence[Any]) -> JobRecord | None:
        rows = await self.d1.query(statement.text, values)
        return JOB.job(rows[0]) if rows else None

    async def check_schema(self) -> None:
        try:
            rows = await self.d1.query(SCHEMA_VERSION.text)
        except Exception as error:
            if "no such table" not in str(error):
                raise
            rows = []
        stored = int(rows[0][0]) if rows else 0
        check_schema_version(stored, database="D1", folder="schema/d1",
                             apply_with="wrangler d1 migrations apply <DB>")

    async def insert(self, job: ValidJob, now: int | None) -> bool:
        rows = await self.d1.query(*job_statement(job, now, INSERT_JOB, INSERT_JOB_AT_ONCE))
        return bool(rows)

    async def insert_many(
        self, jobs: list[ValidJob], now: int | None, *, before: Sequence[Any] = ()
    ) -> list[bool] | None:
        """``SharedStore.insert_many``; ``before``: statements already prepared
        on this database that run first in the same batch (their results are
        ignored), so they commit with the jobs or not at all."""
        leading = list(before)
        if not leading and not jobs:
            return []  # D1 refuses an empty batch ("No SQL statements detected")
        # One batch, one round trip: the caller's statements, then one per job.
        try:
            results = await self.d1.batch(
                [*leading, *(job_statement(job, now, INGEST, INGEST_AT_ONCE) for job in jobs)],
                [*([None] * len(leading)), *([SEQUENCE.names] * len(jobs))],
            )
        except Exception as error:
            if "tickwork_ingest_conflict" not in str(error):
                raise
            # The trigger failed the batch; nothing was written. Name the job
            # and fields from what is stored (a second round trip, on the
            # conflict path only): replay_flags raises the IngestConflict.
            rows = await self.d1.query(
                SELECT_CARGO_MANY.text, (json.dumps([job.job_id for job in jobs]),))
            stored = [stored_cargo(CARGO.cargo(row)) for row in rows]
            replay_flags(jobs, {cargo.job_id: cargo for cargo in stored})
            return None  # the conflicting job is gone now (purged): try again
        return [bool(rows) for rows in results[len(leading):]]

    async def find(self, job_id: str) -> JobRecord | None:
        return await self._one_job(SELECT_JOB, (job_id,))

    async def find_cargo(self, job_id: str) -> ValidJob | None:
        rows = await self.d1.query(SELECT_CARGO.text, (job_id,))
        return stored_cargo(CARGO.cargo(rows[0])) if rows else None

    async def queue_head(self, queue: str) -> JobRecord | None:
        return await self._one_job(SELECT_QUEUE_HEAD, (queue,))

    async def ready_ahead(self, queue: str, priority: int, sequence: int,
                          limit: int) -> list[str]:
        rows = await self.d1.query(READY_AHEAD.text, (queue, priority, sequence, limit))
        return [row[0] for row in rows]

    async def has_pending_work(self, now: int | None) -> bool:
        rows = await self.d1.query(HAS_PENDING_WORK.text, (now,))
        return bool(rows[0][0])

    async def next_work(self, now: int | None) -> tuple[Any, ...]:
        return (await self.d1.query(NEXT_WORK.text, (now,)))[0]

    async def backlog(self) -> list[tuple[Any, ...]]:
        return await self.d1.query(BACKLOG.text)

    async def status_groups(self) -> list[tuple[Any, ...]]:
        return await self.d1.query(STATUS.text)

    async def queue_counts(self, queue: str) -> tuple[Any, ...]:
        return (await self.d1.query(QUEUE_STATUS.text, (queue,)))[0]

    async def claim(
        self, token: str, lease_ms: int, now: int | None, *, guarded: bool
    ) -> JobRecord | None:
        statement = CLAIM_IF_CLEAR if guarded else CLAIM_ONE
        # One batch (one round trip, one transaction): due jobs join the
        # ready set, then the claim.
        _, claimed = await self.d1.batch(
            [_promote(now), (statement.text, (token, now, lease_ms))],
            [None, _names(statement)])
        return JOB.job(claimed[0]) if claimed else None

    async def probe(self, now: int | None) -> tuple[Suspect | None, bool]:
        return _probed((await self.d1.query(PROBE.text, (now,)))[0])

    async def claim_or_probe(
        self, token: str, lease_ms: int, now: int | None
    ) -> tuple[JobRecord | None, tuple[Suspect | None, bool]]:
        # One batch, one round trip: an idle tick costs the same as a claim.
        # Due jobs join the ready set first.
        _, claimed, probed = await self.d1.batch(
            [_promote(now), (CLAIM_IF_CLEAR.text, (token, now, lease_ms)),
             (PROBE.text, (now,))],
            [None, _names(CLAIM_IF_CLEAR), _names(PROBE)],
        )
        if claimed:
            return JOB.job(claimed[0]), (None, False)
        return None, _probed(probed[0])

    async def requeue_expired(self, sequence: int, token: str, now: int | None) -> bool:
        return bool(await self.d1.query(REQUEUE_EXPIRED.text, (now, sequence, token)))

    async def release_claim(self, sequence: int, token: str) -> bool:
        return bool(await self.d1.query(RELEASE_CLAIM.text, (sequence, token)))

    async def settle_expired(
        self, sequence: int, token: str, settlement: Settlement, now: int | None
    ) -> JobRecord | None:
        return await self._one_job(
            SETTLE_EXPIRED,
            (settlement.outcome, settlement.failure_reason, settlement.error_json, now,
             sequence, token))

    async def settle(
        self, sequence: int, token: str, settlement: Settlement, now: int | None,
        *, cancelled: bool,
    ) -> bool:
        statement = SETTLE_CANCELLED if cancelled else SETTLE
        values = (settlement.outcome, settlement.failure_reason, settlement.error_json, now,
                  sequence, token)
        return bool(await self.d1.query(statement.text, values))

    async def settle_and_claim(
        self, sequence: int, token: str, settlement: Settlement, now: int | None,
        *, next_token: str, lease_ms: int,
    ) -> tuple[bool, JobRecord | None]:
        # One batch: the settlement, due jobs into the ready set, then the
        # next claim, in one round trip.
        settled, _, claimed = await self.d1.batch(
            [(SETTLE.text, (settlement.outcome, settlement.failure_reason,
                            settlement.error_json, now, sequence, token)),
             _promote(now),
             (CLAIM_IF_CLEAR.text, (next_token, now, lease_ms))],
            [_names(SETTLE), None, _names(CLAIM_IF_CLEAR)],
        )
        return bool(settled), JOB.job(claimed[0]) if claimed else None

    async def read_claim(self, sequence: int, now: int | None) -> ClaimView | None:
        rows = await self.d1.query(SELECT_CLAIM.text, (sequence, now))
        if not rows:
            return None
        row = rows[0]
        return ClaimView(CLAIM.job(row), CLAIM.value(row, "claim_token"),
                         bool(CLAIM.value(row, "lease_live")))

    async def renew(
        self, sequence: int, token: str, lease_ms: int, now: int | None
    ) -> RenewAnswer:
        rows = await self.d1.query(RENEW.text, (now, sequence, token, lease_ms))
        if not rows:
            return "lost"
        return "cancelled" if rows[0][0] else "held"

    async def settle_next_cancelled(self, now: int | None) -> JobRecord | None:
        return await self._one_job(SETTLE_NEXT_CANCELLED, (now,))

    async def record_cancellation(
        self, job_id: str, cancellation_id: str, mode: CancelWrite
    ) -> bool:
        statement = (RECORD_CANCELLATION_IF_QUEUED if mode == "only_if_queued"
                     else RECORD_CANCELLATION)
        return bool(await self.d1.query(statement.text, (cancellation_id, job_id)))

    async def fail_lane(
        self, lane: str, reason: str, limit: int, now: int | None
    ) -> tuple[list[JobRecord], bool]:
        # One batch of two statements (one round trip, one transaction): the
        # failure, then whether any unsettled job of the lane remains.
        failed, remaining = await self.d1.batch(
            [(FAIL_LANE.text, (lane, reason, limit, now)), (LANE_HAS_PENDING.text, (lane,))],
            [_names(FAIL_LANE), _names(LANE_HAS_PENDING)],
        )
        return [JOB.job(row) for row in failed], bool(remaining[0][0])

    async def purge(self, queue: str) -> int:
        return await self.d1.run(PURGE_QUEUE.text, (queue,))

    async def pause_queue(self, queue: str, now: int | None) -> bool:
        return bool(await self.d1.query(PAUSE_QUEUE.text, (queue, now)))

    async def resume_queue(self, queue: str) -> bool:
        return bool(await self.d1.query(RESUME_QUEUE.text, (queue,)))

    async def queue_paused(self, queue: str) -> bool:
        rows = await self.d1.query(QUEUE_PAUSED.text, (queue,))
        return bool(rows[0][0])

    async def retry(
        self, sequence: int, token: str, settlement: Settlement, delay_ms: int,
        now: int | None,
    ) -> JobRecord | None:
        return await self._one_job(RETRY_CLAIM, (
            now, delay_ms, settlement.error_json, settlement.outcome,
            settlement.failure_reason, settlement.error_line, sequence, token))

    async def dead_letters(
        self, queue: str, before: tuple[int, int], limit: int
    ) -> list[JobRecord]:
        rows = await self.d1.query(DEAD_LETTERS.text, (queue, *before, limit))
        return [JOB.job(row) for row in rows]

    async def list_jobs(
        self, listing: JobListing, after: tuple[int, int], limit: int
    ) -> list[JobRecord]:
        statement = LIST_JOBS[listing.shape]
        rows = await self.d1.query(statement.text,
                                   sql.listing_values(statement, listing, after, limit))
        return [JOB.job(row) for row in rows]

    async def jobs_by_id_prefix(
        self, prefix: str, after: str | None, limit: int
    ) -> list[JobRecord]:
        low, high = sql.id_prefix_range(prefix, MAX_ID_LENGTH)
        statement = JOBS_BY_ID_PREFIX_FIRST if after is None else JOBS_BY_ID_PREFIX_NEXT
        rows = await self.d1.query(statement.text, (low if after is None else after, high,
                                                    limit))
        return [JOB.job(row) for row in rows]

    async def redrive_applied(self, job_id: str, redrive_id: str) -> bool:
        rows = await self.d1.query(REDRIVE_APPLIED.text, (job_id, redrive_id))
        return bool(rows[0][0])

    async def redrive(self, job_id: str, redrive_id: str, now: int | None) -> JobRecord | None:
        # One batch (one round trip, one transaction): the job queued again,
        # then its redrive id remembered (only if the first statement applied it).
        redriven, _ = await self.d1.batch(
            [(REDRIVE_JOB.text, (redrive_id, job_id)),
             (NOTE_REDRIVE.text, (redrive_id, now, job_id))],
            [_names(REDRIVE_JOB), None])
        return JOB.job(redriven[0]) if redriven else None


    # ------------------------------------------------------ history over time

    async def history(self, queue: str, since: int, until: int,
                      bucket_ms: int) -> list[tuple[Any, ...]] | None:
        rows = await self.d1.query(HISTORY.text, (bucket_ms, queue, since, until))
        if rows or (await self.d1.query(HISTORY_KNOWN.text, (queue,)))[0][0]:
            return rows
        return None

    async def add_history(self, rows: Sequence[HistoryRow]) -> None:
        if rows:
            await self.d1.run(ADD_HISTORY_COUNTS.text, (sql.history_rows_json(rows),))

    async def sample_history(self, now: int | None, since: int,
                             queues: Sequence[str]) -> None:
        await self.d1.run(SAMPLE_HISTORY.text, (
            MAX_SAMPLED_QUEUES, json.dumps(sorted(set(queues))), since, now, DEPTH_CAP + 1))

    async def prune_history(self, now: int | None, keep_ms: int, limit: int) -> int:
        return len(await self.d1.query(PRUNE_HISTORY.text, (now, keep_ms, limit)))

    # ------------------------------------------------------------ schedules

    async def store_now(self, now: int | None) -> int:
        return int((await self.d1.query(STORE_NOW.text, (now,)))[0][0])

    async def find_schedule(self, name: str) -> StoredSchedule | None:
        rows = await self.d1.query(SELECT_SCHEDULE.text, (name,))
        return schedule_row(rows[0]) if rows else None

    async def list_schedules(self) -> list[StoredSchedule]:
        return [schedule_row(row) for row in await self.d1.query(LIST_SCHEDULES.text, ())]

    async def create_schedule(self, schedule: ValidSchedule, next_at: int,
                              now: int | None) -> bool:
        return bool(await self.d1.query(CREATE_SCHEDULE.text,
                                        (schedule.name, schedule.spec_json, next_at, now)))

    async def replace_schedule(self, schedule: ValidSchedule, old_spec_json: str,
                               next_at: int, now: int | None) -> bool:
        return bool(await self.d1.query(
            REPLACE_SCHEDULE.text,
            (schedule.spec_json, next_at, now, schedule.name, old_spec_json)))

    async def pause_schedule(self, name: str, now: int | None) -> bool:
        return bool(await self.d1.query(PAUSE_SCHEDULE.text, (now, name)))

    async def resume_schedule(self, name: str, spec_json: str, next_at: int,
                              now: int | None) -> bool:
        return bool(await self.d1.query(RESUME_SCHEDULE.text,
                                        (next_at, now, name, spec_json)))

    async def delete_schedule(self, name: str) -> bool:
        return bool(await self.d1.query(DELETE_SCHEDULE.text, (name,)))

    async def due_schedules(self, now: int | None) -> tuple[list[StoredSchedule], int | None]:
        rows = await self.d1.query(DUE_SCHEDULES.text, (now,))
        columns = DUE_SCHEDULES.columns
        assert columns is not None
        due_now = int(columns.value(rows[0], "now")) if rows else None
        return [schedule_row(row) for row in rows], due_now

    async def next_slot(self) -> int | None:
        rows = await self.d1.query(NEXT_SLOT.text, ())
        return int(rows[0][0]) if rows else None

    async def fire_slots(self, schedule: ValidSchedule, slots: Sequence[int], next_at: int,
                         now: int | None) -> tuple[list[ValidJob], int | None]:
        # One batch (one round trip, one transaction): every slot's job, the
        # schedule's advance, then when the next slot of any schedule comes.
        jobs = [schedule.slot_job(slot) for slot in slots]
        statements = [(FIRE_SLOT.text, sql.fire_slot_values(job, now, schedule)) for job in jobs]
        statements.append((ADVANCE_SCHEDULE.text,
                           (next_at, schedule.name, schedule.spec_json)))
        statements.append((NEXT_SLOT.text, ()))
        results = await self.d1.batch(
            statements, [_names(FIRE_SLOT)] * len(slots) + [None, _names(NEXT_SLOT)])
        next_slot = results[-1]
        return ([job for job, rows in zip(jobs, results[:-2], strict=True) if rows],
                int(next_slot[0][0]) if next_slot else None)

    # ------------------------------------------------------------ retention

    async def retention_policies(self) -> list[RetentionPolicy]:
        return [retention_row(row) for row in await self.d1.query(LIST_RETENTION.text, ())]

    async def put_retention(self, policy: RetentionPolicy, now: int | None) -> bool:
        return bool(await self.d1.query(PUT_RETENTION.text, (
            SCOPE_KEY if policy.queue is None else policy.queue, policy.keep_completed_ms,
            policy.keep_failed_ms, now)))

    async def delete_retention(self, queue: str | None) -> bool:
        return bool(await self.d1.query(DELETE_RETENTION.text,
                                        (SCOPE_KEY if queue is None else queue,)))

    # --------------------------------------------------- concurrency limits

    async def limits(self) -> list[ConcurrencyLimit]:
        return in_order(limit_row(row) for row in await self.d1.query(LIST_LIMITS.text, ()))

    async def put_limit(self, limit: ConcurrencyLimit, now: int | None) -> bool:
        values = (limit.kind, limit.key, limit.max_running, now)
        if limit.kind != "queue":
            return bool(await self.d1.query(PUT_LIMIT.text, values))
        # One batch (one transaction): a queue that becomes wide gets its
        # line, the limit, and a queue no longer wide loses its line.
        _, put, _ = await self.d1.batch(
            [(WIDEN_LINE.text, (limit.key, limit.max_running)), (PUT_LIMIT.text, values),
             (DROP_LINE.text, (limit.key,))],
            [None, _names(PUT_LIMIT), None])
        return bool(put)

    async def delete_limit(self, kind: LimitKind, key: str) -> bool:
        if kind != "queue":
            return bool(await self.d1.query(DELETE_LIMIT.text, (kind, key)))
        # One batch: the limit, then the queue's line.
        deleted, _ = await self.d1.batch(
            [(DELETE_LIMIT.text, (kind, key)), (DROP_LINE.text, (key,))],
            [_names(DELETE_LIMIT), None])
        return bool(deleted)

    async def running_jobs(self, kind: LimitKind, key: str, limit: int) -> list[str]:
        return [str(row[0]) for row in await self.d1.query(RUNNING_IN[kind].text, (key, limit))]

    # ---------------------------------------------------------- rate limits

    async def rate_limits(self, now: int | None) -> list[RateLimit]:
        return rate_in_order(rate_limit_row(row) for row in
                             await self.d1.query(LIST_RATE_LIMITS.text, (now,)))

    async def put_rate_limit(self, limit: RateLimit, now: int | None) -> bool:
        return bool(await self.d1.query(PUT_RATE_LIMIT.text, (
            limit.kind, limit.key, limit.starts, limit.period_ms, limit.burst, now)))

    async def delete_rate_limit(self, kind: LimitKind, key: str, now: int | None) -> bool:
        rows = await self.d1.query(DELETE_RATE_LIMIT.text, (kind, key, now))
        return bool(rows and rows[0][0])

    async def put_back_rate_limited(
        self, sequence: int, token: str, kind: LimitKind, key: str, until: int,
        now: int | None,
    ) -> JobRecord | None:
        # One batch (one round trip, one transaction): the hold, written
        # whatever the put-back finds, then the fenced put-back.
        _, put_back = await self.d1.batch(
            [(HOLD_RATE_LIMITED.text, (kind, key, until, now)),
             (PUT_BACK_RATE_LIMITED.text, (sequence, token, now))],
            [None, _names(PUT_BACK_RATE_LIMITED)])
        return JOB.job(put_back[0]) if put_back else None

    async def settled_queues(self) -> list[str]:
        return [str(row[0]) for row in await self.d1.query(SETTLED_QUEUES.text, ())]

    async def prune_settled(self, queue: str, completed_before: int | None,
                            failed_before: int | None, limit: int) -> int:
        # Two round trips: the batch's ids (one indexed read), then one D1
        # batch (one transaction) deleting their redrive ids and the jobs,
        # each fenced on the job still being settled past its cutoff.
        ids = [row[0] for row in await self.d1.query(
            PRUNABLE.text, (queue, completed_before, failed_before, limit))]
        if not ids:
            return 0
        values = (json.dumps(ids), completed_before, failed_before)
        _, deleted = await self.d1.batch(
            [(PRUNE_REDRIVES.text, values), (PRUNE_JOBS.text, values)],
            [None, _names(PRUNE_JOBS)])
        return len(deleted)

    async def storage_usage(self) -> StorageReport:
        # No size: D1 reports it in each result's meta (size_after) and in
        # `wrangler d1 info`, which D1Binding does not read.
        counts = (await self.d1.query(STORAGE_ROWS.text, ()))[0]
        return StorageReport(None, {table: int(count) for table, count in
                                    zip(sql.STORAGE_TABLES, counts, strict=True)})


def _probed(row: tuple[Any, ...]) -> tuple[Suspect | None, bool]:
    """A PROBE row: the oldest expired claim, if any, and whether a cancelled job waits."""
    columns = PROBE.columns
    assert columns is not None
    cancelled_waiting = bool(columns.value(row, "cancelled_waiting"))
    if columns.value(row, "job_id") is None:
        return None, cancelled_waiting
    return (Suspect(columns.job(row), columns.value(row, "claim_token"), lease_expired=True),
            cancelled_waiting)


def job_statement(job: ValidJob, now: int | None, timed: sql.Statement,
                  at_once: sql.Statement) -> tuple[str, tuple[Any, ...]]:
    """``(text, values)`` inserting ``job``: ``at_once`` (INSERT_JOB_AT_ONCE,
    ENQUEUE_AT_ONCE, INGEST_AT_ONCE) when it names no time and no retry
    policy, else ``timed``."""
    if job.run_at is None and job.delay_ms is None and job.retry_json is None:
        return at_once.text, (job.job_id, job.queue, job.lane, job.priority, job.payload_json,
                              job.max_recoveries, now)
    return timed.text, (job.job_id, job.queue, job.lane, job.priority, job.payload_json,
                        job.max_recoveries, job.run_at, job.delay_ms, job.retry_json, now)


def _promote(now: int | None) -> tuple[str, tuple[Any, ...]]:
    return PROMOTE_DUE.text, (now, sql.PROMOTE_BATCH)
