"""Every SQL statement the D1 runtime runs (SQLite dialect, ``?NNN`` parameters).

One statement per transition; each is atomic on its own because D1 runs one
statement (or one batch) at a time against a single SQLite database. In
every statement that reads the clock, ``?1`` is the test clock override: NULL
means database time, so every lease is judged by one clock whatever the
workers' clocks say. No statement binds more than 8 values, far inside D1's
limit of 100.
"""

from __future__ import annotations

# Reads whose SQLite text is the owner-local store's, on the same columns and
# indexes (see tickwork.stores.sql.sqlite): job columns, a queue's head, the
# status counts (QUEUE_STATUS reads schema 0003's covering index here) and
# the pending-work probe.
from tickwork.stores.sql.sqlite import HAS_PENDING_WORK as HAS_PENDING_WORK
from tickwork.stores.sql.sqlite import JOB_COLUMNS as JOB_COLUMNS
from tickwork.stores.sql.sqlite import QUEUE_STATUS as QUEUE_STATUS
from tickwork.stores.sql.sqlite import SELECT_QUEUE_HEAD as SELECT_QUEUE_HEAD
from tickwork.stores.sql.sqlite import STATUS as STATUS

# Database time in epoch milliseconds, unless ?1 overrides it. SQLite keeps
# 'now' fixed within one statement, so every use in a statement agrees.
NOW = "coalesce(?1, CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER))"


SCHEMA_VERSION = "SELECT value FROM tickwork_meta WHERE key = 'schema_version'"

# Ingest: a new job_id inserts one queued row and returns its sequence; an
# existing one writes nothing and returns no row (the runtime compares cargo).
INSERT_JOB = f"""
INSERT INTO tickwork_jobs
    (job_id, queue, lane, priority, payload_json, max_recoveries, state, enqueued_at)
VALUES (?2, ?3, ?4, ?5, ?6, ?7, 'queued', {NOW})
ON CONFLICT (job_id) DO NOTHING
RETURNING sequence
"""

# Two payload texts that differ only in key order (enqueue_from_select keeps
# the producer's; tickwork stores sorted keys) are the same payload: every
# node of one, by path, type and scalar value, is a node of the other. Only
# evaluated when the texts differ (a replay of a job of the other path).
_PAYLOADS_DIFFER = """(
       EXISTS (SELECT fullkey, type, atom FROM json_tree(tickwork_jobs.payload_json)
               EXCEPT SELECT fullkey, type, atom FROM json_tree(excluded.payload_json))
    OR EXISTS (SELECT fullkey, type, atom FROM json_tree(excluded.payload_json)
               EXCEPT SELECT fullkey, type, atom FROM json_tree(tickwork_jobs.payload_json)))"""

# Enqueue inside a producer's batch: an identical replay matches the upsert's
# WHERE nothing and writes nothing; a replay with other cargo becomes an UPDATE
# of the cargo columns, which the tickwork_jobs_cargo_is_immutable trigger
# aborts, failing the producer's whole batch. A payload whose text differs
# only in key order is the same cargo: no UPDATE, no abort.
_ON_REPLAY = f"""
ON CONFLICT (job_id) DO UPDATE SET
    queue = excluded.queue, lane = excluded.lane, priority = excluded.priority,
    payload_json = excluded.payload_json, max_recoveries = excluded.max_recoveries
WHERE queue IS NOT excluded.queue OR lane IS NOT excluded.lane
   OR priority IS NOT excluded.priority
   OR (payload_json IS NOT excluded.payload_json AND {_PAYLOADS_DIFFER})
   OR max_recoveries IS NOT excluded.max_recoveries
"""

ENQUEUE = f"""
INSERT INTO tickwork_jobs
    (job_id, queue, lane, priority, payload_json, max_recoveries, state, enqueued_at)
VALUES (?2, ?3, ?4, ?5, ?6, ?7, 'queued', {NOW})
{_ON_REPLAY}
"""

# ingest_many: one ENQUEUE per job, all in one db.batch (one round trip, one
# transaction). RETURNING gives a row only for an inserted job: an identical
# replay (of a stored job, or of an earlier statement of the same batch)
# writes and returns nothing, and other cargo makes the trigger abort the
# whole batch.
INGEST = ENQUEUE + "RETURNING sequence\n"

# After a batch failed on a conflict: the stored cargo of the batch's job ids
# (?1 is a JSON array of them: one bound value however many jobs), so the
# runtime can name the job that conflicted and the fields that differ.
SELECT_CARGO_MANY = """
SELECT job_id, queue, lane, priority, payload_json, max_recoveries
FROM tickwork_jobs WHERE job_id IN (SELECT value FROM json_each(?1))
"""

# enqueue_from_select: the producer's SELECT (its own ?1..?N values; our clock
# override moves to ?N+1) yields the rows. json() normalises the payload text;
# the table's CHECKs validate what Python did not see. "WHERE true" resolves
# SQLite's upsert-after-SELECT parsing ambiguity.
ENQUEUE_FROM_SELECT = """
INSERT INTO tickwork_jobs
    (job_id, queue, lane, priority, payload_json, max_recoveries, state, enqueued_at)
SELECT job_id, queue_name, lane, priority, json(payload_json), recovery_max, 'queued', {now}
FROM ({select}) WHERE true
{on_replay}
"""

SELECT_JOB = f"SELECT {JOB_COLUMNS} FROM tickwork_jobs WHERE job_id = ?1"

SELECT_CARGO = """
SELECT job_id, queue, lane, priority, payload_json, max_recoveries
FROM tickwork_jobs WHERE job_id = ?1
"""

# Claim: the first runnable job in global order (priority desc, oldest first)
# whose queue has no running job becomes running under the private token ?2
# with a lease of ?3 ms, in one statement. That job is its queue's head. D1
# executes statements one at a time, so two workers can never both see the
# same queue free; the unique running index backs this up.
_CLAIM = f"""
UPDATE tickwork_jobs
SET state = 'running', claim_token = ?2, started_at = {NOW}, lease_expires_at = {NOW} + ?3
WHERE sequence = (
    SELECT candidate.sequence FROM tickwork_jobs AS candidate
    WHERE candidate.state = 'queued' AND candidate.cancellation_id IS NULL
      AND NOT EXISTS (
          SELECT 1 FROM tickwork_jobs AS busy
          WHERE busy.queue = candidate.queue AND busy.state = 'running')
    ORDER BY candidate.priority DESC, candidate.sequence
    LIMIT 1)
{{guard}}
RETURNING {JOB_COLUMNS}
"""
CLAIM = _CLAIM.format(guard="")

# The tick's fast path: claim only when no lease has expired and no cancelled
# job waits, so the common tick is a single statement.
CLAIM_IF_CLEAR = _CLAIM.format(guard=f"""
  AND NOT EXISTS (SELECT 1 FROM tickwork_jobs
                  WHERE state = 'running' AND lease_expires_at <= {NOW})
  AND NOT EXISTS (SELECT 1 FROM tickwork_jobs
                  WHERE state = 'queued' AND cancellation_id IS NOT NULL)""")

# The oldest expired claim (with its token) and whether a cancelled job is
# still queued, in one read. Both come from small partial indexes.
PROBE = f"""
SELECT {', '.join('expired.' + c.strip() for c in JOB_COLUMNS.split(','))},
       expired.claim_token,
       EXISTS (SELECT 1 FROM tickwork_jobs
               WHERE state = 'queued' AND cancellation_id IS NOT NULL) AS cancelled_waiting
FROM (SELECT 1) LEFT JOIN (
    SELECT * FROM tickwork_jobs
    WHERE state = 'running' AND lease_expires_at <= {NOW}
    ORDER BY lease_expires_at, sequence LIMIT 1) AS expired ON 1
"""

# Recovery of an expired claim: fenced on the token and on the lease still
# being expired, so a claim that was renewed, settled or recovered by another
# worker in between matches nothing. Both clear the token: the stale
# execution's late settlement then finds a job no longer under its claim and
# reports claim_replaced, instead of taking the recovery's settlement (or a
# later lane failure) for its own.
REQUEUE_EXPIRED = f"""
UPDATE tickwork_jobs
SET state = 'queued', started_at = NULL, lease_expires_at = NULL, claim_token = NULL,
    recoveries = recoveries + 1
WHERE sequence = ?2 AND state = 'running' AND claim_token = ?3 AND lease_expires_at <= {NOW}
RETURNING sequence
"""

SETTLE_EXPIRED = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = ?4, failure_reason = ?5, settled_at = {NOW}, claim_token = NULL
WHERE sequence = ?2 AND state = 'running' AND claim_token = ?3 AND lease_expires_at <= {NOW}
RETURNING {JOB_COLUMNS}
"""

# Settle a live claim: fenced on the token and an unexpired lease (database
# time), so an expired or replaced claim is rejected, never written. The
# cancellation guard lets the runtime apply the cancellation rule to the
# durable record (SETTLE_CANCELLED) instead of guessing.
_SETTLE = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = ?4, failure_reason = ?5, settled_at = {NOW}
WHERE sequence = ?2 AND state = 'running' AND claim_token = ?3 AND lease_expires_at > {NOW}
  AND cancellation_id {{cancelled}}
RETURNING sequence
"""
SETTLE = _SETTLE.format(cancelled="IS NULL")
SETTLE_CANCELLED = _SETTLE.format(cancelled="IS NOT NULL")

SELECT_CLAIM = f"""
SELECT {JOB_COLUMNS}, claim_token, state = 'running' AND lease_expires_at > {NOW}
FROM tickwork_jobs WHERE sequence = ?2
"""

# Renewal: extends a live lease only. The lease_expires_at > now fence means a
# renewal that arrives after expiry can never resurrect the claim; max() means
# a short heartbeat never shortens a longer lease. Returns whether a
# cancellation is recorded, so the executor learns of it at renewal.
RENEW = f"""
UPDATE tickwork_jobs
SET lease_expires_at = max(lease_expires_at, {NOW} + ?4)
WHERE sequence = ?2 AND state = 'running' AND claim_token = ?3 AND lease_expires_at > {NOW}
RETURNING cancellation_id IS NOT NULL
"""

# Settle the oldest cancelled job still queued, without running it (its
# queue's head may be busy; cancellation does not wait for it).
SETTLE_NEXT_CANCELLED = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = 'cancelled', failure_reason = NULL, settled_at = {NOW}
WHERE sequence = (
    SELECT sequence FROM tickwork_jobs
    WHERE state = 'queued' AND cancellation_id IS NOT NULL
    ORDER BY sequence LIMIT 1)
RETURNING {JOB_COLUMNS}
"""

# Record a cancellation: only the first id sticks, a settled job is never
# touched, and with only_if_queued a started job is not either. The runtime
# decided from a read; this fence makes the write match nothing if that
# decision no longer holds.
_RECORD_CANCELLATION = """
UPDATE tickwork_jobs SET cancellation_id = ?1
WHERE job_id = ?2 AND cancellation_id IS NULL AND {states}
RETURNING sequence
"""
RECORD_CANCELLATION = _RECORD_CANCELLATION.format(states="state <> 'settled'")
RECORD_CANCELLATION_IF_QUEUED = _RECORD_CANCELLATION.format(states="state = 'queued'")

# Failing a lane, one batch of two statements (one round trip, one transaction):
# settle up to ?4 of the lane's unsettled jobs, running first then oldest
# waiting; then ask whether any remain.
FAIL_LANE = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = 'failed', failure_reason = ?3, settled_at = {NOW}
WHERE sequence IN (
    SELECT sequence FROM (
        SELECT sequence FROM tickwork_jobs INDEXED BY tickwork_jobs_running
        WHERE state = 'running' AND lane = ?2
        ORDER BY sequence LIMIT ?4)
    UNION ALL
    SELECT sequence FROM (
        SELECT sequence FROM tickwork_jobs INDEXED BY tickwork_jobs_lane_pending
        WHERE lane = ?2 AND state IN ('queued', 'running') AND state = 'queued'
        ORDER BY sequence LIMIT ?4)
    LIMIT ?4)
RETURNING {JOB_COLUMNS}
"""

LANE_HAS_PENDING = """
SELECT EXISTS (
    SELECT 1 FROM tickwork_jobs WHERE lane = ?1 AND state IN ('queued', 'running')) AS more
"""

# Purge: delete one queue's waiting jobs; running and settled rows stay.
PURGE_QUEUE = "DELETE FROM tickwork_jobs WHERE queue = ?1 AND state = 'queued'"

# Erasure for a trusted producer SELECT naming queues: every job in them goes.
PURGE_QUEUES = "DELETE FROM tickwork_jobs WHERE queue IN ({select})"
