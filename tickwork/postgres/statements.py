"""Every SQL statement the PostgreSQL runtime runs (psycopg ``%(name)s`` parameters).

One statement per transition (the claim adds an advisory-lock statement in
the same transaction). ``{now}`` is database time in epoch milliseconds,
evaluated once per statement (an InitPlan), unless the test clock override
``%(now)s`` is given. Several statements act on many claims at once: they
are how concurrent ticks share one commit (see ``batching.py``).
"""

from __future__ import annotations

NOW = "(SELECT coalesce(%(now)s::bigint, tickwork_now_ms()))"

JOB_COLUMNS = (
    "job_id, queue, lane, priority, payload_json, max_recoveries, state, outcome, "
    "failure_reason, sequence, recoveries, enqueued_at, started_at, settled_at, cancellation_id"
)


def _qualified(alias: str) -> str:
    return ", ".join(f"{alias}.{name.strip()}" for name in JOB_COLUMNS.split(","))


SCHEMA_VERSION = "SELECT value FROM tickwork_meta WHERE key = 'schema_version'"

# Ingest: a new job_id inserts one queued row; an existing one writes nothing
# and returns no row (the runtime then compares cargo).
INSERT_JOB = f"""
INSERT INTO tickwork_jobs
    (job_id, queue, lane, priority, payload_json, max_recoveries, state, enqueued_at)
VALUES (%(job_id)s, %(queue)s, %(lane)s, %(priority)s, %(payload_json)s,
        %(max_recoveries)s, 'queued', {NOW})
ON CONFLICT (job_id) DO NOTHING
RETURNING sequence
"""

# enqueue(conn, job) in the caller's transaction: an identical replay matches
# the upsert's WHERE nothing and writes nothing; other cargo becomes an UPDATE
# of the cargo columns, which tickwork_jobs_cargo_is_immutable refuses,
# failing the caller's transaction.
ENQUEUE = f"""
INSERT INTO tickwork_jobs AS stored
    (job_id, queue, lane, priority, payload_json, max_recoveries, state, enqueued_at)
VALUES (%(job_id)s, %(queue)s, %(lane)s, %(priority)s, %(payload_json)s,
        %(max_recoveries)s, 'queued', {NOW})
ON CONFLICT (job_id) DO UPDATE SET
    queue = excluded.queue, lane = excluded.lane, priority = excluded.priority,
    payload_json = excluded.payload_json, max_recoveries = excluded.max_recoveries
WHERE (stored.queue, stored.lane, stored.priority, stored.payload_json, stored.max_recoveries)
      IS DISTINCT FROM
      (excluded.queue, excluded.lane, excluded.priority, excluded.payload_json,
       excluded.max_recoveries)
"""

SELECT_JOB = f"SELECT {JOB_COLUMNS} FROM tickwork_jobs WHERE job_id = %(job_id)s"

SELECT_CARGO = """
SELECT job_id, queue, lane, priority, payload_json, max_recoveries
FROM tickwork_jobs WHERE job_id = %(job_id)s
"""

SELECT_QUEUE_HEAD = f"""
(SELECT {JOB_COLUMNS} FROM tickwork_jobs WHERE queue = %(queue)s AND state = 'running' LIMIT 1)
UNION ALL
(SELECT {JOB_COLUMNS} FROM tickwork_jobs WHERE queue = %(queue)s AND state = 'queued'
 ORDER BY priority DESC, sequence LIMIT 1)
LIMIT 1
"""

HAS_PENDING_WORK = """
SELECT EXISTS (SELECT 1 FROM tickwork_jobs WHERE state = 'queued')
    OR EXISTS (SELECT 1 FROM tickwork_jobs WHERE state = 'running')
"""

# Claims serialise on this transaction-scoped advisory lock, taken by its own
# statement first so that the claim statement's snapshot (taken after the
# lock is granted) sees every claim committed before it: two claims can then
# never both find one queue free. Settlements, renewals and recovery do not
# take it; each is fenced on its own row.
CLAIM_LOCK = "SELECT pg_advisory_xact_lock(7361626972690001)"

# The exact claim of one job, for a tick that probed first: walks the runnable
# index in global order and stops at the first job whose queue has no running
# job, which is that queue's head. Waits (FOR UPDATE) rather than skip a head.
CLAIM_ONE = f"""
WITH picked AS (
    SELECT candidate.sequence FROM tickwork_jobs AS candidate
    WHERE candidate.state = 'queued' AND candidate.cancellation_id IS NULL
      AND NOT EXISTS (SELECT 1 FROM tickwork_jobs AS busy
                      WHERE busy.queue = candidate.queue AND busy.state = 'running')
    ORDER BY candidate.priority DESC, candidate.sequence
    LIMIT 1
    FOR UPDATE)
UPDATE tickwork_jobs AS job
SET state = 'running', claim_token = (%(tokens)s::text[])[1],
    started_at = {NOW}, lease_expires_at = {NOW} + %(lease_ms)s::bigint
FROM picked
WHERE job.sequence = picked.sequence AND job.state = 'queued' AND job.cancellation_id IS NULL
RETURNING {_qualified("job")}, 1
"""

# Claim up to cardinality(tokens) ready queue heads, one per queue, in global
# order (priority desc, oldest first), each under its own private token and a
# fresh lease. `scan` bounds how far down the runnable index the batch looks;
# the first job of a queue in that prefix is that queue's head (ticks that get
# nothing probe and then use CLAIM_ONE, which has no bound). Only heads are
# candidates; FOR UPDATE SKIP LOCKED passes over a head another transaction is
# changing (a cancellation, a refusal) instead of waiting, and re-checks the
# state of the rows it locks. {guard}: see CLAIM_IF_CLEAR.
_CLAIM = f"""
WITH scan AS (
    SELECT sequence, queue, priority FROM tickwork_jobs
    WHERE state = 'queued' AND cancellation_id IS NULL
    ORDER BY priority DESC, sequence
    LIMIT %(scan)s),
heads AS (
    SELECT DISTINCT ON (queue) sequence, queue FROM scan
    ORDER BY queue, priority DESC, sequence),
picked AS (
    SELECT job.sequence, job.priority FROM tickwork_jobs AS job
    WHERE job.sequence IN (
            SELECT heads.sequence FROM heads
            WHERE NOT EXISTS (SELECT 1 FROM tickwork_jobs AS busy
                              WHERE busy.queue = heads.queue AND busy.state = 'running'))
      AND job.state = 'queued' AND job.cancellation_id IS NULL
      {{guard}}
    ORDER BY job.priority DESC, job.sequence
    LIMIT cardinality(%(tokens)s::text[])
    FOR UPDATE SKIP LOCKED),
numbered AS (
    SELECT sequence, row_number() OVER (ORDER BY priority DESC, sequence) AS n FROM picked)
UPDATE tickwork_jobs AS job
SET state = 'running', claim_token = (%(tokens)s::text[])[numbered.n],
    started_at = {NOW}, lease_expires_at = {NOW} + %(lease_ms)s::bigint
FROM numbered
WHERE job.sequence = numbered.sequence
RETURNING {_qualified("job")}, numbered.n
"""
# The tick's fast path claims only when no lease has expired and no cancelled
# job waits (those come first); otherwise the ticks probe.
CLAIM_IF_CLEAR = _CLAIM.format(guard=f"""
      AND NOT EXISTS (SELECT 1 FROM tickwork_jobs
                      WHERE state = 'running' AND lease_expires_at <= {NOW})
      AND NOT EXISTS (SELECT 1 FROM tickwork_jobs
                      WHERE state = 'queued' AND cancellation_id IS NOT NULL)""")

# The oldest expired claim (with its token), and whether a cancelled job is
# still queued, in one read from small partial indexes.
PROBE = f"""
SELECT {_qualified("expired")}, expired.claim_token,
       EXISTS (SELECT 1 FROM tickwork_jobs
               WHERE state = 'queued' AND cancellation_id IS NOT NULL)
FROM (SELECT 1) AS one LEFT JOIN LATERAL (
    SELECT * FROM tickwork_jobs
    WHERE state = 'running' AND lease_expires_at <= {NOW}
    ORDER BY lease_expires_at, sequence LIMIT 1) AS expired ON true
"""

# Recovery of an expired claim, fenced on the token and on the lease still
# being expired (a claim renewed, settled or recovered meanwhile matches nothing).
REQUEUE_EXPIRED = f"""
UPDATE tickwork_jobs
SET state = 'queued', started_at = NULL, lease_expires_at = NULL, recoveries = recoveries + 1
WHERE sequence = %(sequence)s AND state = 'running' AND claim_token = %(token)s
  AND lease_expires_at <= {NOW}
RETURNING sequence
"""

SETTLE_EXPIRED = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = %(outcome)s, failure_reason = %(reason)s, settled_at = {NOW}
WHERE sequence = %(sequence)s AND state = 'running' AND claim_token = %(token)s
  AND lease_expires_at <= {NOW}
RETURNING {JOB_COLUMNS}
"""

# Settle many live claims in one statement (one commit for all of them). Each
# row is fenced on its own token, an unexpired lease (database time) and the
# cancellation being absent ({cancelled} = IS NULL) or recorded (IS NOT NULL);
# the (sequence, token) pairs that match are returned, the others were not written and their
# ticks take the careful path. Rows are locked in sequence order, like every
# other multi-row write here, so batches cannot deadlock one another.
_SETTLE_MANY = f"""
UPDATE tickwork_jobs AS job
SET state = 'settled', outcome = settle.outcome, failure_reason = settle.reason,
    settled_at = {NOW}
FROM unnest(%(sequences)s::bigint[], %(tokens)s::text[], %(outcomes)s::text[],
            %(reasons)s::text[]) AS settle(sequence, token, outcome, reason)
WHERE job.sequence = settle.sequence AND job.state = 'running'
  AND job.claim_token = settle.token AND job.lease_expires_at > {NOW}
  AND job.cancellation_id {{cancelled}}
RETURNING job.sequence, job.claim_token
"""
SETTLE_MANY = _SETTLE_MANY.format(cancelled="IS NULL")
SETTLE_MANY_CANCELLED = _SETTLE_MANY.format(cancelled="IS NOT NULL")

SELECT_CLAIM = f"""
SELECT {JOB_COLUMNS}, claim_token,
       coalesce(state = 'running' AND lease_expires_at > {NOW}, false)
FROM tickwork_jobs WHERE sequence = %(sequence)s
"""

# Renewal extends a live lease only: after expiry it matches nothing, so an
# in-flight renewal can never resurrect a claim; greatest() keeps a short
# heartbeat from shortening a longer lease. Reports a recorded cancellation.
RENEW = f"""
UPDATE tickwork_jobs
SET lease_expires_at = greatest(lease_expires_at, {NOW} + %(lease_ms)s::bigint)
WHERE sequence = %(sequence)s AND state = 'running' AND claim_token = %(token)s
  AND lease_expires_at > {NOW}
RETURNING cancellation_id IS NOT NULL
"""

SETTLE_NEXT_CANCELLED = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = 'cancelled', failure_reason = NULL, settled_at = {NOW}
WHERE sequence = (
    SELECT sequence FROM tickwork_jobs
    WHERE state = 'queued' AND cancellation_id IS NOT NULL
    ORDER BY sequence LIMIT 1
    FOR UPDATE SKIP LOCKED)
RETURNING {JOB_COLUMNS}
"""

_RECORD_CANCELLATION = """
UPDATE tickwork_jobs SET cancellation_id = %(cancellation_id)s
WHERE job_id = %(job_id)s AND cancellation_id IS NULL AND {states}
RETURNING sequence
"""
RECORD_CANCELLATION = _RECORD_CANCELLATION.format(states="state <> 'settled'")
RECORD_CANCELLATION_IF_QUEUED = _RECORD_CANCELLATION.format(states="state = 'queued'")

# Lane refusal: up to %(limit)s of the lane's unsettled jobs, running first,
# then oldest waiting, locked in sequence order, settled as failed.
REFUSE_LANE = f"""
WITH chosen AS (
    (SELECT sequence FROM tickwork_jobs
     WHERE state = 'running' AND lane = %(lane)s ORDER BY sequence LIMIT %(limit)s)
    UNION ALL
    (SELECT sequence FROM tickwork_jobs
     WHERE lane = %(lane)s AND state = 'queued' ORDER BY sequence LIMIT %(limit)s)
    LIMIT %(limit)s),
locked AS (
    SELECT sequence FROM tickwork_jobs
    WHERE sequence IN (SELECT sequence FROM chosen) AND state <> 'settled'
    ORDER BY sequence
    FOR UPDATE)
UPDATE tickwork_jobs AS job
SET state = 'settled', outcome = 'failed', failure_reason = %(reason)s, settled_at = {NOW}
FROM locked
WHERE job.sequence = locked.sequence AND job.state <> 'settled'
RETURNING {_qualified("job")}
"""

LANE_HAS_PENDING = """
SELECT EXISTS (SELECT 1 FROM tickwork_jobs
               WHERE lane = %(lane)s AND state IN ('queued', 'running'))
"""

PURGE_QUEUE = "DELETE FROM tickwork_jobs WHERE queue = %(queue)s AND state = 'queued'"

# Erasure for a trusted producer SELECT naming queues: every job in them goes.
PURGE_QUEUES = "DELETE FROM tickwork_jobs WHERE queue IN ({select})"
