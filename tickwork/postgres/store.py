"""PostgresStore: the shared-store port over a psycopg 3 async connection pool.

Each method is one statement in its own transaction, except the claim (an
advisory lock statement, then the claim, one commit) and lane refusal (the
refusal and the "more?" read, one commit). Claims and settlements of
concurrent ticks in this process go through coalescers (``batching.py``) and
share statements and commits.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import AsyncIterator, Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from ..errors import SchemaError
from ..jobs import JobRecord, ValidJob
from ..lifecycle import Settlement
from ..local.store import decode_job
from ..shared.port import CancelWrite, ClaimView, ExpiredClaim, RenewAnswer
from . import statements as sql
from .batching import Coalescer

SCHEMA_VERSION = 1
LATEST_MIGRATION = "schema/postgres/0001_tickwork_jobs.sql"

#: Most claims or settlements one statement carries.
MAX_BATCH = 64


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


class PostgresStore:
    """One per pool: every runtime on the pool shares its coalescers."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        # Claims and settlements waiting at the same time share one
        # transaction: settlements first (freeing their queues), then claims.
        self._commits: Coalescer[_ClaimRequest | _SettleRequest, _Answer] = (
            Coalescer(self._commit_many, max_batch=2 * MAX_BATCH, max_in_flight=1))
        self.claims_batched = 0
        self.settlements_batched = 0

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[Any]:
        """A pooled connection in autocommit mode (restored when it goes back).

        Each single statement is then its own transaction with no BEGIN/COMMIT
        round trips; multi-statement transactions are explicit and pipelined.
        """
        async with self.pool.connection() as conn:
            restore = not conn.autocommit
            if restore:
                await conn.set_autocommit(True)
            try:
                yield conn
            finally:
                if restore and not conn.closed:
                    await conn.set_autocommit(False)

    async def _rows(self, statement: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        async with self._connection() as conn:
            cursor = await conn.execute(statement, params, prepare=True)
            return await cursor.fetchall() if cursor.description else []

    async def _one_job(self, statement: str, params: dict[str, Any]) -> JobRecord | None:
        rows = await self._rows(statement, params)
        return decode_job(rows[0]) if rows else None

    async def check_schema(self) -> None:
        try:
            rows = await self._rows(sql.SCHEMA_VERSION, {})
        except Exception as error:
            if getattr(error, "sqlstate", None) != "42P01":  # undefined_table
                raise
            rows = []
        stored = int(rows[0][0]) if rows else 0
        if stored < SCHEMA_VERSION:
            raise SchemaError(
                f"the PostgreSQL database has tickwork schema version {stored}, this package "
                f"needs {SCHEMA_VERSION}: apply the migrations in schema/postgres up to "
                f"{LATEST_MIGRATION}; opening a runtime never migrates"
            )
        if stored > SCHEMA_VERSION:
            raise SchemaError(
                f"the PostgreSQL database has tickwork schema version {stored}; this package "
                f"understands up to {SCHEMA_VERSION}: upgrade tickwork"
            )

    async def insert(self, job: ValidJob, now: int | None) -> bool:
        return bool(await self._rows(sql.INSERT_JOB, job_params(job, now)))

    async def find(self, job_id: str) -> JobRecord | None:
        return await self._one_job(sql.SELECT_JOB, {"job_id": job_id})

    async def find_cargo(self, job_id: str) -> ValidJob | None:
        rows = await self._rows(sql.SELECT_CARGO, {"job_id": job_id})
        return ValidJob(*rows[0]) if rows else None

    async def queue_head(self, queue: str) -> JobRecord | None:
        return await self._one_job(sql.SELECT_QUEUE_HEAD, {"queue": queue})

    async def has_pending_work(self) -> bool:
        return bool((await self._rows(sql.HAS_PENDING_WORK, {}))[0][0])

    # ------------------------------------------------------------ claims

    async def claim(
        self, token: str, lease_ms: int, now: int | None, *, guarded: bool
    ) -> JobRecord | None:
        request = _ClaimRequest(token, lease_ms, now, guarded)
        if not guarded:
            # The exact form, for ticks that probed first; rare.
            async with self._connection() as conn, conn.pipeline(), conn.transaction():
                found = await self._claim_in(conn, [request], scan=None)
            return found[0]
        answer = await self._commits.submit(request)
        assert answer is None or isinstance(answer, JobRecord)
        return answer

    async def _commit_many(
        self, requests: list[_ClaimRequest | _SettleRequest]
    ) -> list[_Answer]:
        """One transaction (one commit) for every waiting settlement and claim.

        Settlements go first, so the queues they free can be claimed by the
        claims of the same commit (including a worker loop's next claim).
        """
        settled: dict[int, bool] = {}
        claimed: dict[int, JobRecord | None] = {}
        settles = [(i, r) for i, r in enumerate(requests) if isinstance(r, _SettleRequest)]
        claims = [(i, r) for i, r in enumerate(requests) if isinstance(r, _ClaimRequest)]
        claims += [(i, r.then_claim) for i, r in settles if r.then_claim is not None]
        async with self._connection() as conn, conn.pipeline(), conn.transaction():
            for indexes, group in _grouped(settles, lambda r: r.now):
                written = await self._settle_in(conn, group, sql.SETTLE_MANY)
                settled.update(zip(indexes, written, strict=True))
            for indexes, claim_group in _grouped(claims, lambda r: (r.lease_ms, r.now)):
                found = await self._claim_in(
                    conn, claim_group, scan=4 * len(claim_group) + 32)
                claimed.update(zip(indexes, found, strict=True))
        self.claims_batched += bool(claims)
        self.settlements_batched += bool(settles)
        answers: list[_Answer] = []
        for index, request in enumerate(requests):
            if isinstance(request, _ClaimRequest):
                answers.append(claimed[index])
            elif request.then_claim is None:
                answers.append(settled[index])
            else:
                answers.append((settled[index], claimed[index]))
        return answers

    async def _claim_in(
        self, conn: Any, requests: list[_ClaimRequest], *, scan: int | None
    ) -> list[JobRecord | None]:
        """Claim for ``requests`` on ``conn``, inside the caller's transaction."""
        first = requests[0]
        params = {
            "tokens": [request.token for request in requests],
            "lease_ms": first.lease_ms,
            "now": first.now,
            "scan": scan,
        }
        statement = sql.CLAIM_IF_CLEAR if first.guarded else sql.CLAIM_ONE
        await conn.execute(sql.CLAIM_LOCK)
        cursor = await conn.execute(statement, params, prepare=True)
        rows = await cursor.fetchall()
        found: list[JobRecord | None] = [None] * len(requests)
        for row in rows:
            found[row[-1] - 1] = decode_job(row[:-1])
        return found

    async def probe(self, now: int | None) -> tuple[ExpiredClaim | None, bool]:
        row = (await self._rows(sql.PROBE, {"now": now}))[0]
        cancelled_waiting = bool(row[-1])
        if row[0] is None:
            return None, cancelled_waiting
        return ExpiredClaim(decode_job(row[:-2]), row[-2]), cancelled_waiting

    async def claim_or_probe(
        self, token: str, lease_ms: int, now: int | None
    ) -> tuple[JobRecord | None, tuple[ExpiredClaim | None, bool]]:
        job = await self.claim(token, lease_ms, now, guarded=True)
        if job is not None:
            return job, (None, False)
        return None, await self.probe(now)

    async def requeue_expired(self, sequence: int, token: str, now: int | None) -> bool:
        params = {"sequence": sequence, "token": token, "now": now}
        return bool(await self._rows(sql.REQUEUE_EXPIRED, params))

    async def settle_expired(
        self, sequence: int, token: str, settlement: Settlement, now: int | None
    ) -> JobRecord | None:
        params = {"sequence": sequence, "token": token, "now": now,
                  "outcome": settlement.outcome, "reason": settlement.failure_reason}
        return await self._one_job(sql.SETTLE_EXPIRED, params)

    # ------------------------------------------------------- settlements

    async def settle(
        self, sequence: int, token: str, settlement: Settlement, now: int | None,
        *, cancelled: bool,
    ) -> bool:
        request = _SettleRequest(sequence, token, settlement, now)
        if cancelled:
            async with self._connection() as conn:
                return (await self._settle_in(conn, [request], sql.SETTLE_MANY_CANCELLED))[0]
        return bool(await self._commits.submit(request))

    async def _settle_in(
        self, conn: Any, requests: list[_SettleRequest], statement: str
    ) -> list[bool]:
        ordered = sorted(requests, key=lambda request: request.sequence)
        params = {
            "sequences": [request.sequence for request in ordered],
            "tokens": [request.token for request in ordered],
            "outcomes": [request.settlement.outcome for request in ordered],
            "reasons": [request.settlement.failure_reason for request in ordered],
            "now": requests[0].now,
        }
        cursor = await conn.execute(statement, params, prepare=True)
        rows = await cursor.fetchall()
        # A job has one current claim, so only its token's request can match;
        # a stale claim of the same job in the same batch learns it did not.
        written = {(row[0], row[1]) for row in rows}
        return [(request.sequence, request.token) in written for request in requests]

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
        return ClaimView(decode_job(row[:-2]), row[-2], bool(row[-1]))

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

    async def refuse_lane(
        self, lane: str, reason: str, limit: int, now: int | None
    ) -> tuple[list[JobRecord], bool]:
        params = {"lane": lane, "reason": reason, "limit": limit, "now": now}
        async with self._connection() as conn, conn.transaction():
            cursor = await conn.execute(sql.REFUSE_LANE, params)
            refused = [decode_job(row) for row in await cursor.fetchall()]
            cursor = await conn.execute(sql.LANE_HAS_PENDING, {"lane": lane})
            row = await cursor.fetchone()
        assert row is not None
        return refused, bool(row[0])

    async def purge(self, queue: str) -> int:
        async with self._connection() as conn:
            cursor = await conn.execute(sql.PURGE_QUEUE, {"queue": queue})
            return int(cursor.rowcount)


Item = TypeVar("Item")


def _grouped(
    items: list[tuple[int, Item]], key: Callable[[Item], Hashable]
) -> list[tuple[list[int], list[Item]]]:
    """Requests that can share one statement (same clock and lease), in order."""
    groups: dict[Hashable, tuple[list[int], list[Item]]] = {}
    for index, item in items:
        indexes, members = groups.setdefault(key(item), ([], []))
        indexes.append(index)
        members.append(item)
    return list(groups.values())


def job_params(job: ValidJob, now: int | None) -> dict[str, Any]:
    return {"job_id": job.job_id, "queue": job.queue, "lane": job.lane,
            "priority": job.priority, "payload_json": job.payload_json,
            "max_recoveries": job.max_recoveries, "now": now}


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
