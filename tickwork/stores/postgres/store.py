"""PostgresStore: the shared-store port over a psycopg 3 async connection pool.

Each method is one statement in its own transaction (autocommit), except
failing a lane (the failure and
the "more?" read). The tick's claims and settlements of every runtime on the
pool go through one coalescer (``batching.py``): whatever is waiting when a
commit starts travels in one call of tickwork_settle_then_claim.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from tickwork.lifecycle import Settlement
from tickwork.lifecycle.requests import ClaimView, JobListing, Suspect
from tickwork.model.history import COUNTS, DEPTH_CAP, MAX_SAMPLED_QUEUES, HistoryRow
from tickwork.model.jobs import MAX_ID_LENGTH, JobRecord, ValidJob, replay_flags
from tickwork.model.limits import ConcurrencyLimit, LimitKind, in_order
from tickwork.model.rate_limits import RateLimit, rate_in_order
from tickwork.model.retention import SCOPE_KEY, RetentionPolicy, StorageReport
from tickwork.model.schedules import StoredSchedule, ValidSchedule
from tickwork.ports.shared_store import CancelWrite, RenewAnswer
from tickwork.stores.postgres.arrays import bigint_array, text_array
from tickwork.stores.postgres.batching import Coalescer
from tickwork.stores.postgres.connection import autocommit_connection
from tickwork.stores.rows import (
    CARGO,
    CLAIM,
    JOB,
    limit_row,
    rate_limit_row,
    retention_row,
    schedule_row,
)
from tickwork.stores.schema_version import (
    POSTGRES_MIGRATIONS,
    POSTGRES_SCHEMA_VERSION,
    check_schema_version,
)
from tickwork.stores.sql import postgres as sql
from tickwork.stores.sql.sqlite import id_prefix_range

LATEST_MIGRATION = "schema/postgres/" + POSTGRES_MIGRATIONS[-1]

#: Most claims and settlements one shared commit carries.
MAX_BATCH = 128


@dataclass(frozen=True, slots=True)
class _ClaimRequest:
    token: str
    lease_ms: int
    now: int | None
    guarded: bool


@dataclass(frozen=True, slots=True)
class _SettleRequest:
    sequence: int
    token: str
    settlement: Settlement
    now: int | None
    then_claim: _ClaimRequest | None = None  # a worker loop's next claim


_Answer = JobRecord | bool | None | tuple[bool, JobRecord | None]


def settle_then_claim_params(
    settles: Sequence[tuple[int, str, Settlement]], claim_tokens: Sequence[str], *,
    lease_ms: int, now: int | None,
) -> dict[str, Any]:
    """SETTLE_THEN_CLAIM's parameters: settle each ``(sequence, token,
    settlement)`` (in the order given, which is the order their rows are
    locked), then claim one job under each token, each for ``lease_ms``."""
    return {
        "sequences": bigint_array([sequence for sequence, _, _ in settles]),
        "settle_tokens": text_array([token for _, token, _ in settles]),
        "outcomes": text_array([settlement.outcome for _, _, settlement in settles]),
        "reasons": text_array([settlement.failure_reason for _, _, settlement in settles]),
        "errors": text_array([settlement.error_json for _, _, settlement in settles]),
        "claim_tokens": text_array(claim_tokens),
        "lease_ms": lease_ms,
        "scan": sql.claim_scan(len(claim_tokens)),
        "now": now,
    }


class PostgresStore:
    """One per pool: every runtime on the pool shares its coalescers."""

    schema_version = POSTGRES_SCHEMA_VERSION

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        # Claims and settlements waiting at the same time share one
        # transaction: settlements first (freeing their queues), then claims.
        self._commits: Coalescer[_ClaimRequest | _SettleRequest, _Answer] = (
            Coalescer(self._commit_many, max_batch=MAX_BATCH, max_in_flight=2))

    def _connection(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """A pooled connection in autocommit mode (see connection.py)."""
        return autocommit_connection(self.pool)

    async def _rows(self, statement: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        async with self._connection() as conn:
            cursor = await conn.execute(statement, params, prepare=True)
            return await cursor.fetchall() if cursor.description else []

    async def _one_job(self, statement: str, params: dict[str, Any]) -> JobRecord | None:
        rows = await self._rows(statement, params)
        return JOB.job(rows[0]) if rows else None

    async def check_schema(self) -> None:
        try:
            rows = await self._rows(sql.SCHEMA_VERSION, {})
        except Exception as error:
            if getattr(error, "sqlstate", None) != "42P01":  # undefined_table
                raise
            rows = []
        stored = int(rows[0][0]) if rows else 0
        check_schema_version(stored, database="PostgreSQL", folder="schema/postgres",
                             apply_with="tickwork migrate postgres applies them; "
                                        "or psql -f each, in order",
                             migrations=POSTGRES_MIGRATIONS)

    async def insert(self, job: ValidJob, now: int | None) -> bool:
        return bool(await self._rows(sql.INSERT_JOB, job_params(job, now)))

    async def insert_many(self, jobs: list[ValidJob], now: int | None) -> list[bool] | None:
        params = {
            "job_ids": text_array([job.job_id for job in jobs]),
            "queues": text_array([job.queue for job in jobs]),
            "lanes": text_array([job.lane for job in jobs]),
            "priorities": bigint_array([job.priority for job in jobs]),
            "payloads": text_array([job.payload_json for job in jobs]),
            "max_recoveries": bigint_array([job.max_recoveries for job in jobs]),
            "run_ats": bigint_array([job.run_at for job in jobs]),
            "delays": bigint_array([job.delay_ms for job in jobs]),
            "retries": text_array([job.retry_json for job in jobs]),
            "now": now,
        }
        # One transaction: insert the new ids, read the cargo of the others,
        # decide; a conflict (IngestConflict raised in the block) rolls back
        # every insert. Overlapping lists ingested concurrently in different
        # orders can deadlock; PostgreSQL then fails one of them.
        try:
            async with self._connection() as conn, conn.transaction():
                cursor = await conn.execute(sql.INSERT_JOBS, params, prepare=True)
                inserted = {row[0] for row in await cursor.fetchall()}
                skipped = [job.job_id for job in jobs if job.job_id not in inserted]
                stored: dict[str, ValidJob] = {}
                if skipped:
                    cursor = await conn.execute(sql.SELECT_CARGO_MANY, {"job_ids": skipped})
                    stored = {cargo.job_id: cargo for cargo in
                              map(CARGO.cargo, await cursor.fetchall())}
                flags = replay_flags(jobs, stored)
                if {job.job_id for job, new in zip(jobs, flags, strict=True) if new} != inserted:
                    # A skipped id vanished before step 2 read it (purged).
                    raise _Undecided
        except _Undecided:
            return None
        return flags

    async def find(self, job_id: str) -> JobRecord | None:
        return await self._one_job(sql.SELECT_JOB, {"job_id": job_id})

    async def find_cargo(self, job_id: str) -> ValidJob | None:
        rows = await self._rows(sql.SELECT_CARGO, {"job_id": job_id})
        return ValidJob(*rows[0]) if rows else None

    async def queue_head(self, queue: str) -> JobRecord | None:
        return await self._one_job(sql.SELECT_QUEUE_HEAD, {"queue": queue})

    async def ready_ahead(self, queue: str, priority: int, sequence: int,
                          limit: int) -> list[str]:
        rows = await self._rows(sql.READY_AHEAD, {"queue": queue, "priority": priority,
                                                  "sequence": sequence, "limit": limit})
        return [row[0] for row in rows]

    async def has_pending_work(self, now: int | None) -> bool:
        return bool((await self._rows(sql.HAS_PENDING_WORK, {"now": now}))[0][0])

    async def next_work(self, now: int | None) -> tuple[Any, ...]:
        return (await self._rows(sql.NEXT_WORK, {"now": now}))[0]

    async def backlog(self) -> list[tuple[Any, ...]]:
        return await self._rows(sql.BACKLOG, {})

    async def status_groups(self) -> list[tuple[Any, ...]]:
        return await self._rows(sql.STATUS, {})

    async def queue_counts(self, queue: str) -> tuple[Any, ...]:
        return (await self._rows(sql.QUEUE_STATUS, {"queue": queue}))[0]

    # ------------------------------------------------------------ claims

    async def claim(
        self, token: str, lease_ms: int, now: int | None, *, guarded: bool
    ) -> JobRecord | None:
        request = _ClaimRequest(token, lease_ms, now, guarded)
        if not guarded:
            # The exact form, for ticks that probed first; rare.
            params = {"token": token, "lease_ms": lease_ms, "now": now}
            return await self._one_job(sql.CLAIM_ONE, params)
        answer = await self._commits.submit(request)
        assert answer is None or isinstance(answer, JobRecord)
        return answer

    async def _commit_many(
        self, requests: list[_ClaimRequest | _SettleRequest]
    ) -> list[_Answer]:
        """Every waiting settlement and claim in one statement (one commit).

        Settlements go first, so the queues they free can be claimed by the
        claims of the same commit (including a worker loop's next claim).
        Requests with different clocks or leases (tests only) need separate
        calls; they then share one transaction.
        """
        settled: dict[int, bool] = {}
        claimed: dict[int, JobRecord | None] = {}
        settles = [(i, r) for i, r in enumerate(requests) if isinstance(r, _SettleRequest)]
        claims = [(i, r) for i, r in enumerate(requests) if isinstance(r, _ClaimRequest)]
        claims += [(i, r.then_claim) for i, r in settles if r.then_claim is not None]
        calls = _calls(settles, claims)
        async with self._connection() as conn, contextlib.AsyncExitStack() as stack:
            if len(calls) > 1:
                await stack.enter_async_context(conn.transaction())
            for settle_group, claim_group in calls:
                await self._settle_then_claim(conn, settle_group, claim_group,
                                              settled, claimed)
        answers: list[_Answer] = []
        for index, request in enumerate(requests):
            if isinstance(request, _ClaimRequest):
                answers.append(claimed[index])
            elif request.then_claim is None:
                answers.append(settled[index])
            else:
                answers.append((settled[index], claimed[index]))
        return answers

    async def _settle_then_claim(
        self,
        conn: Any,
        settles: list[tuple[int, _SettleRequest]],
        claims: list[tuple[int, _ClaimRequest]],
        settled: dict[int, bool],
        claimed: dict[int, JobRecord | None],
    ) -> None:
        ordered = sorted(settles, key=lambda item: item[1].sequence)
        first_claim = claims[0][1] if claims else None
        now = (first_claim.now if first_claim is not None
               else ordered[0][1].now)
        params = settle_then_claim_params(
            [(r.sequence, r.token, r.settlement) for _, r in ordered],
            [r.token for _, r in claims],
            lease_ms=first_claim.lease_ms if first_claim is not None else 0, now=now)
        cursor = await conn.execute(sql.SETTLE_THEN_CLAIM, params, prepare=True)
        rows = await cursor.fetchall()
        # A job has one current claim, so only its token's request can match;
        # a stale claim of the same job in the same batch learns it did not.
        columns = sql.SETTLE_THEN_CLAIM_COLUMNS
        sequence_of = columns.index["sequence"]
        settled_token = columns.index["settled_token"]
        claim_index = columns.index["claim_index"]
        written = {(row[sequence_of], row[settled_token]) for row in rows
                   if row[settled_token] is not None}
        for index, request in settles:
            settled[index] = (request.sequence, request.token) in written
        found: dict[int, JobRecord] = {
            row[claim_index]: columns.job(row) for row in rows if row[claim_index] is not None}
        for position, (index, _) in enumerate(claims, start=1):
            claimed[index] = found.get(position)

    async def probe(self, now: int | None) -> tuple[Suspect | None, bool]:
        row = (await self._rows(sql.PROBE, {"now": now}))[0]
        columns = sql.PROBE_COLUMNS
        cancelled_waiting = bool(columns.value(row, "cancelled_waiting"))
        if columns.value(row, "job_id") is None:
            return None, cancelled_waiting
        suspect = Suspect(columns.job(row), columns.value(row, "claim_token"),
                          lease_expired=True)
        return suspect, cancelled_waiting

    async def claim_or_probe(
        self, token: str, lease_ms: int, now: int | None
    ) -> tuple[JobRecord | None, tuple[Suspect | None, bool]]:
        job = await self.claim(token, lease_ms, now, guarded=True)
        if job is not None:
            return job, (None, False)
        return None, await self.probe(now)

    async def requeue_expired(self, sequence: int, token: str, now: int | None) -> bool:
        params = {"sequence": sequence, "token": token, "now": now}
        return bool(await self._rows(sql.REQUEUE_EXPIRED, params))

    async def release_claim(self, sequence: int, token: str) -> bool:
        params = {"sequence": sequence, "token": token}
        return bool(await self._rows(sql.RELEASE_CLAIM, params))

    async def settle_expired(
        self, sequence: int, token: str, settlement: Settlement, now: int | None
    ) -> JobRecord | None:
        params = {"sequence": sequence, "token": token, "now": now,
                  "outcome": settlement.outcome, "reason": settlement.failure_reason,
                  "error_json": settlement.error_json}
        return await self._one_job(sql.SETTLE_EXPIRED, params)

    # ------------------------------------------------------- settlements

    async def settle(
        self, sequence: int, token: str, settlement: Settlement, now: int | None,
        *, cancelled: bool,
    ) -> bool:
        if cancelled:
            params = {"sequence": sequence, "token": token, "now": now,
                      "outcome": settlement.outcome, "reason": settlement.failure_reason,
                      "error_json": settlement.error_json}
            return bool(await self._rows(sql.SETTLE_CANCELLED, params))
        answer = await self._commits.submit(_SettleRequest(sequence, token, settlement, now))
        return bool(answer)

    async def settle_and_claim(
        self, sequence: int, token: str, settlement: Settlement, now: int | None,
        *, next_token: str, lease_ms: int,
    ) -> tuple[bool, JobRecord | None]:
        then = _ClaimRequest(next_token, lease_ms, now, guarded=True)
        answer = await self._commits.submit(
            _SettleRequest(sequence, token, settlement, now, then_claim=then))
        return cast("tuple[bool, JobRecord | None]", answer)

    async def read_claim(self, sequence: int, now: int | None) -> ClaimView | None:
        rows = await self._rows(sql.SELECT_CLAIM, {"sequence": sequence, "now": now})
        if not rows:
            return None
        row = rows[0]
        return ClaimView(CLAIM.job(row), CLAIM.value(row, "claim_token"),
                         bool(CLAIM.value(row, "lease_live")))

    async def renew(
        self, sequence: int, token: str, lease_ms: int, now: int | None
    ) -> RenewAnswer:
        params = {"sequence": sequence, "token": token, "lease_ms": lease_ms, "now": now}
        rows = await self._rows(sql.RENEW, params)
        if not rows:
            return "lost"
        return "cancelled" if rows[0][0] else "held"

    async def settle_next_cancelled(self, now: int | None) -> JobRecord | None:
        return await self._one_job(sql.SETTLE_NEXT_CANCELLED, {"now": now})

    async def record_cancellation(
        self, job_id: str, cancellation_id: str, mode: CancelWrite
    ) -> bool:
        statement = (sql.RECORD_CANCELLATION_IF_QUEUED if mode == "only_if_queued"
                     else sql.RECORD_CANCELLATION)
        params = {"job_id": job_id, "cancellation_id": cancellation_id}
        return bool(await self._rows(statement, params))

    async def fail_lane(
        self, lane: str, reason: str, limit: int, now: int | None
    ) -> tuple[list[JobRecord], bool]:
        params = {"lane": lane, "reason": reason, "limit": limit, "now": now}
        async with self._connection() as conn, conn.transaction():
            cursor = await conn.execute(sql.FAIL_LANE, params)
            failed = [JOB.job(row) for row in await cursor.fetchall()]
            cursor = await conn.execute(sql.LANE_HAS_PENDING, {"lane": lane})
            row = await cursor.fetchone()
        assert row is not None
        return failed, bool(row[0])

    async def purge(self, queue: str) -> int:
        async with self._connection() as conn:
            cursor = await conn.execute(sql.PURGE_QUEUE, {"queue": queue})
            return int(cursor.rowcount)

    async def pause_queue(self, queue: str, now: int | None) -> bool:
        return bool(await self._rows(sql.PAUSE_QUEUE, {"queue": queue, "now": now}))

    async def resume_queue(self, queue: str) -> bool:
        return bool(await self._rows(sql.RESUME_QUEUE, {"queue": queue}))

    async def queue_paused(self, queue: str) -> bool:
        rows = await self._rows(sql.QUEUE_PAUSED, {"queue": queue})
        return bool(rows[0][0])

    async def retry(
        self, sequence: int, token: str, settlement: Settlement, delay_ms: int,
        now: int | None,
    ) -> JobRecord | None:
        params = {"sequence": sequence, "token": token, "now": now, "delay_ms": delay_ms,
                  "outcome": settlement.outcome, "reason": settlement.failure_reason,
                  "error_json": settlement.error_json, "error_line": settlement.error_line}
        return await self._one_job(sql.RETRY_CLAIM, params)

    async def dead_letters(
        self, queue: str, before: tuple[int, int], limit: int
    ) -> list[JobRecord]:
        params = {"queue": queue, "before_settled": before[0], "before_sequence": before[1],
                  "limit": limit}
        return [JOB.job(row) for row in await self._rows(sql.DEAD_LETTERS, params)]

    async def list_jobs(
        self, listing: JobListing, after: tuple[int, int], limit: int
    ) -> list[JobRecord]:
        statement = sql.LIST_JOBS[listing.shape]
        params = {"value": listing.value, "outcome": listing.outcome,
                  "after_settled": after[0], "after_sequence": after[1], "limit": limit}
        return [JOB.job(row) for row in await self._rows(statement, params)]

    async def jobs_by_id_prefix(
        self, prefix: str, after: str | None, limit: int
    ) -> list[JobRecord]:
        low, high = id_prefix_range(prefix, MAX_ID_LENGTH)
        statement = (sql.JOBS_BY_ID_PREFIX_FIRST if after is None
                     else sql.JOBS_BY_ID_PREFIX_NEXT)
        params = {"low": low if after is None else after, "high": high, "limit": limit}
        return [JOB.job(row) for row in await self._rows(statement, params)]

    async def redrive_applied(self, job_id: str, redrive_id: str) -> bool:
        rows = await self._rows(sql.REDRIVE_APPLIED, {"job_id": job_id, "redrive_id": redrive_id})
        return bool(rows[0][0])

    async def redrive(self, job_id: str, redrive_id: str, now: int | None) -> JobRecord | None:
        return await self._one_job(sql.REDRIVE, {"job_id": job_id, "redrive_id": redrive_id,
                                                 "now": now})


    # ------------------------------------------------------ history over time

    async def history(self, queue: str, since: int, until: int,
                      bucket_ms: int) -> list[tuple[Any, ...]] | None:
        params = {"queue": queue, "since": since, "until": until, "bucket_ms": bucket_ms}
        rows = await self._rows(sql.HISTORY, params)
        if rows or (await self._rows(sql.HISTORY_KNOWN, {"queue": queue}))[0][0]:
            return rows
        return None

    async def add_history(self, rows: Sequence[HistoryRow]) -> None:
        if not rows:
            return
        params: dict[str, Any] = {"queues": text_array([row.queue for row in rows]),
                                  "minutes": bigint_array([row.minute for row in rows])}
        for column, name in enumerate(COUNTS):
            params[name] = bigint_array([row.values()[column] for row in rows])
        async with self._connection() as conn:
            await conn.execute(sql.ADD_HISTORY_COUNTS, params)

    async def sample_history(self, now: int | None, since: int,
                             queues: Sequence[str]) -> None:
        async with self._connection() as conn:
            await conn.execute(sql.SAMPLE_HISTORY, {
                "now": now, "since": since, "queues": text_array(sorted(set(queues))),
                "max_queues": MAX_SAMPLED_QUEUES, "depth_limit": DEPTH_CAP + 1})

    async def prune_history(self, now: int | None, keep_ms: int, limit: int) -> int:
        async with self._connection() as conn:
            cursor = await conn.execute(sql.PRUNE_HISTORY,
                                        {"now": now, "keep_ms": keep_ms, "limit": limit})
            return int(cursor.rowcount)

    # ------------------------------------------------------------ schedules

    async def store_now(self, now: int | None) -> int:
        return int((await self._rows(sql.STORE_NOW, {"now": now}))[0][0])

    async def find_schedule(self, name: str) -> StoredSchedule | None:
        rows = await self._rows(sql.SELECT_SCHEDULE, {"name": name})
        return schedule_row(rows[0]) if rows else None

    async def list_schedules(self) -> list[StoredSchedule]:
        return [schedule_row(row) for row in await self._rows(sql.LIST_SCHEDULES, {})]

    async def create_schedule(self, schedule: ValidSchedule, next_at: int,
                              now: int | None) -> bool:
        params = {"name": schedule.name, "spec_json": schedule.spec_json, "next_at": next_at,
                  "now": now}
        return bool(await self._rows(sql.CREATE_SCHEDULE, params))

    async def replace_schedule(self, schedule: ValidSchedule, old_spec_json: str,
                               next_at: int, now: int | None) -> bool:
        params = {"name": schedule.name, "spec_json": schedule.spec_json, "next_at": next_at,
                  "old_spec_json": old_spec_json, "now": now}
        return bool(await self._rows(sql.REPLACE_SCHEDULE, params))

    async def pause_schedule(self, name: str, now: int | None) -> bool:
        return bool(await self._rows(sql.PAUSE_SCHEDULE, {"name": name, "now": now}))

    async def resume_schedule(self, name: str, spec_json: str, next_at: int,
                              now: int | None) -> bool:
        params = {"name": name, "spec_json": spec_json, "next_at": next_at, "now": now}
        return bool(await self._rows(sql.RESUME_SCHEDULE, params))

    async def delete_schedule(self, name: str) -> bool:
        return bool(await self._rows(sql.DELETE_SCHEDULE, {"name": name}))

    async def due_schedules(self, now: int | None) -> tuple[list[StoredSchedule], int | None]:
        rows = await self._rows(sql.DUE_SCHEDULES, {"now": now})
        column = sql.DUE_SCHEDULES_COLUMNS.index["now"]
        return [schedule_row(row) for row in rows], int(rows[0][column]) if rows else None

    async def next_slot(self) -> int | None:
        value = (await self._rows(sql.NEXT_SLOT, {}))[0][0]
        return None if value is None else int(value)

    async def fire_slots(self, schedule: ValidSchedule, slots: Sequence[int], next_at: int,
                         now: int | None) -> tuple[list[ValidJob], int | None]:
        created = []
        async with self._connection() as conn, conn.transaction():
            for slot in slots:
                job = schedule.slot_job(slot)
                cursor = await conn.execute(sql.FIRE_SLOT, {
                    "job_id": job.job_id, "queue": job.queue, "lane": job.lane,
                    "priority": job.priority, "payload_json": job.payload_json,
                    "max_recoveries": job.max_recoveries, "run_at": job.run_at,
                    "retry_json": job.retry_json, "now": now, "name": schedule.name,
                    "spec_json": schedule.spec_json})
                if await cursor.fetchall():
                    created.append(job)
            await conn.execute(sql.ADVANCE_SCHEDULE, {
                "next_at": next_at, "name": schedule.name, "spec_json": schedule.spec_json})
            row = await (await conn.execute(sql.NEXT_SLOT)).fetchone()
        assert row is not None
        return created, None if row[0] is None else int(row[0])

    # ------------------------------------------------------------ retention

    async def retention_policies(self) -> list[RetentionPolicy]:
        return [retention_row(row) for row in await self._rows(sql.LIST_RETENTION, {})]

    async def put_retention(self, policy: RetentionPolicy, now: int | None) -> bool:
        return bool(await self._rows(sql.PUT_RETENTION, {
            "queue": SCOPE_KEY if policy.queue is None else policy.queue,
            "keep_completed_ms": policy.keep_completed_ms,
            "keep_failed_ms": policy.keep_failed_ms, "now": now}))

    async def delete_retention(self, queue: str | None) -> bool:
        return bool(await self._rows(sql.DELETE_RETENTION,
                                     {"queue": SCOPE_KEY if queue is None else queue}))

    # --------------------------------------------------- concurrency limits

    async def limits(self) -> list[ConcurrencyLimit]:
        return in_order(limit_row(row) for row in await self._rows(sql.LIST_LIMITS, {}))

    async def put_limit(self, limit: ConcurrencyLimit, now: int | None) -> bool:
        params = {"kind": limit.kind, "key": limit.key, "max_running": limit.max_running,
                  "now": now}
        if limit.kind != "queue":
            return bool(await self._rows(sql.PUT_LIMIT, params))
        # A queue's line follows in the same transaction (LINE_AFTER_LIMIT,
        # in a snapshot newer than the limits' lock PUT_LIMIT took), even
        # when nothing changed: storing a limit again mends its line.
        async with self._connection() as conn, conn.transaction():
            cursor = await conn.execute(sql.PUT_LIMIT, params, prepare=True)
            changed = bool(await cursor.fetchall())
            await conn.execute(sql.LINE_AFTER_LIMIT, {"queue": limit.key}, prepare=True)
        return changed

    async def delete_limit(self, kind: LimitKind, key: str) -> bool:
        params = {"kind": kind, "key": key}
        if kind != "queue":
            return bool(await self._rows(sql.DELETE_LIMIT, params))
        # A serial queue's line goes (LINE_AFTER_LIMIT), when a limit went:
        # DELETE_LIMIT took the limits' lock only then.
        async with self._connection() as conn, conn.transaction():
            cursor = await conn.execute(sql.DELETE_LIMIT, params, prepare=True)
            deleted = bool(await cursor.fetchall())
            if deleted:
                await conn.execute(sql.LINE_AFTER_LIMIT, {"queue": key}, prepare=True)
        return deleted

    async def running_jobs(self, kind: LimitKind, key: str, limit: int) -> list[str]:
        statement = sql.RUNNING_IN_QUEUE if kind == "queue" else sql.RUNNING_IN_LANE
        return [str(row[0]) for row in
                await self._rows(statement, {"key": key, "limit": limit})]

    # ---------------------------------------------------------- rate limits

    async def rate_limits(self, now: int | None) -> list[RateLimit]:
        return rate_in_order(rate_limit_row(row) for row in
                             await self._rows(sql.LIST_RATE_LIMITS, {"now": now}))

    async def put_rate_limit(self, limit: RateLimit, now: int | None) -> bool:
        return bool(await self._rows(sql.PUT_RATE_LIMIT, {
            "kind": limit.kind, "key": limit.key, "starts": limit.starts,
            "period_ms": limit.period_ms, "burst": limit.burst, "now": now}))

    async def delete_rate_limit(self, kind: LimitKind, key: str, now: int | None) -> bool:
        rows = await self._rows(sql.DELETE_RATE_LIMIT, {"kind": kind, "key": key, "now": now})
        return bool(rows and rows[0][0])

    async def put_back_rate_limited(
        self, sequence: int, token: str, kind: LimitKind, key: str, until: int,
        now: int | None,
    ) -> JobRecord | None:
        return await self._one_job(sql.PUT_BACK_RATE_LIMITED, {
            "sequence": sequence, "token": token, "kind": kind, "key": key,
            "until": until, "now": now})

    async def settled_queues(self) -> list[str]:
        return [str(row[0]) for row in await self._rows(sql.SETTLED_QUEUES, {})]

    async def prune_settled(self, queue: str, completed_before: int | None,
                            failed_before: int | None, limit: int) -> int:
        rows = await self._rows(sql.PRUNE, {
            "queue": queue, "completed_before": completed_before,
            "failed_before": failed_before, "limit": limit})
        return int(rows[0][0])

    async def storage_usage(self) -> StorageReport:
        size, *counts = (await self._rows(sql.STORAGE_USAGE, {}))[0]
        return StorageReport(int(size), {table: int(count) for table, count in
                                         zip(sql.STORAGE_TABLES, counts, strict=True)})


class _Undecided(Exception):
    """Rolls back an ingest_many transaction that could not decide."""


def _calls(
    settles: list[tuple[int, _SettleRequest]], claims: list[tuple[int, _ClaimRequest]]
) -> list[tuple[list[tuple[int, _SettleRequest]], list[tuple[int, _ClaimRequest]]]]:
    """Group requests into function calls that each have one clock and one lease.

    In production every request uses database time and the runtime's lease,
    so this is one call. Tests that mix clocks get one call per clock (the
    settlements first), run in one transaction.
    """
    clocks = {request.now for _, request in settles} | {request.now for _, request in claims}
    leases = {request.lease_ms for _, request in claims}
    if len(clocks) <= 1 and len(leases) <= 1:
        return [(settles, claims)]
    calls: list[tuple[list[tuple[int, _SettleRequest]], list[tuple[int, _ClaimRequest]]]] = []
    for now in dict.fromkeys(request.now for _, request in settles):
        calls.append(([item for item in settles if item[1].now == now], []))
    for key in dict.fromkeys((request.lease_ms, request.now) for _, request in claims):
        calls.append(([], [item for item in claims if (item[1].lease_ms, item[1].now) == key]))
    return calls

def job_params(job: ValidJob, now: int | None) -> dict[str, Any]:
    return {"job_id": job.job_id, "queue": job.queue, "lane": job.lane,
            "priority": job.priority, "payload_json": job.payload_json,
            "max_recoveries": job.max_recoveries, "run_at": job.run_at,
            "delay_ms": job.delay_ms, "retry_json": job.retry_json, "now": now}


_STORES: weakref.WeakKeyDictionary[Any, PostgresStore] = weakref.WeakKeyDictionary()


def store_for(pool: Any) -> PostgresStore:
    """The store (and its coalescers) shared by every runtime on ``pool``."""
    try:
        store = _STORES.get(pool)
    except TypeError:  # not weak-referenceable: no sharing across runtimes
        return PostgresStore(pool)
    if store is None:
        store = PostgresStore(pool)
        _STORES[pool] = store
    return store
