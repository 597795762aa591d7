"""Every SQL statement the owner-local runtime runs, one per transition.

Each statement is a single atomic mutation or read; the comment above it says
what it guarantees. Placeholders are ``?`` or ``?NNN`` (SQLite and Durable
Object storage both accept them); no statement binds more than a handful of
values (the probes add one per claim this runtime is executing), far inside
the Durable Object limit of 100.
"""

from __future__ import annotations

# The columns every read returns, in JobRecord order (see store.decode_job).
JOB_COLUMNS = (
    "job_id, queue, lane, priority, payload_json, max_recoveries, state, outcome, "
    "failure_reason, sequence, recoveries, enqueued_at, started_at, settled_at, cancellation_id"
)

# Ingest. A new job_id inserts one queued row and returns its sequence; an
# existing one inserts nothing and returns no row, and the caller compares
# cargo (identical -> duplicate, different -> conflict). The UNIQUE index on
# job_id makes this race-free.
INSERT_JOB = """
INSERT INTO tickwork_jobs
    (job_id, queue, lane, priority, payload_json, max_recoveries, state, enqueued_at)
VALUES (?, ?, ?, ?, ?, ?, 'queued', ?)
ON CONFLICT (job_id) DO NOTHING
RETURNING sequence
"""

SELECT_JOB = f"SELECT {JOB_COLUMNS} FROM tickwork_jobs WHERE job_id = ?"

# A stored job's identity and cargo, in ValidJob order: a replay is compared
# with the stored canonical payload text as it is, without decoding it.
SELECT_CARGO = """
SELECT job_id, queue, lane, priority, payload_json, max_recoveries
FROM tickwork_jobs WHERE job_id = ?
"""

# A queue's head: its running job if any, else its waiting job with the
# highest priority, oldest first. Two index probes, never a scan.
SELECT_QUEUE_HEAD = f"""
SELECT * FROM (
    SELECT {JOB_COLUMNS} FROM tickwork_jobs
    WHERE queue = ?1 AND state = 'running'
    LIMIT 1)
UNION ALL
SELECT * FROM (
    SELECT {JOB_COLUMNS} FROM tickwork_jobs
    WHERE queue = ?1 AND state = 'queued'
    ORDER BY priority DESC, sequence
    LIMIT 1)
LIMIT 1
"""

SELECT_LATEST_SETTLED = f"""
SELECT {JOB_COLUMNS} FROM tickwork_jobs
WHERE queue = ? AND state = 'settled'
ORDER BY settled_at DESC, sequence DESC
LIMIT 1
"""

# Claim. Picks the first runnable job in global order (priority desc, oldest
# first) whose queue has no running job, and marks it running under a fresh
# claim token, in one statement. The first such job is its queue's head:
# any better job of the same queue would come earlier and be just as free.
# {guard} is empty (CLAIM_NEXT) or CLAIM_GUARD.
_CLAIM = f"""
UPDATE tickwork_jobs
SET state = 'running', claim_token = ?, started_at = ?
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

CLAIM_NEXT = _CLAIM.format(guard="")

# The tick's fast path: claim only when TICK_PROBE would find nothing to do
# first (no running claim outside {exclude}, no cancelled job waiting), so the
# common tick is one statement. When it claims nothing, the tick probes.
CLAIM_GUARD = """
  AND NOT EXISTS (SELECT 1 FROM tickwork_jobs WHERE state = 'running' {exclude})
  AND NOT EXISTS (SELECT 1 FROM tickwork_jobs
                  WHERE state = 'queued' AND cancellation_id IS NOT NULL)
"""
CLAIM_NEXT_IF_CLEAR = _CLAIM.format(guard=CLAIM_GUARD)

# Settle a claim. Fenced on the exact claim token and the running state: a
# claim that was refused, recovered or re-claimed in the meantime matches no
# row, so exactly one terminal outcome is ever written per job.
# {guard}: the _UNLESS_CANCELLED forms also match no row once a cancellation
# is recorded, so the runtime can apply the cancellation rule
# (lifecycle.settlement_under_cancellation) to durable truth and settle again.
# {returning}: the _RECORD forms return the settled job for the projector;
# the others only the sequence, all the hot path needs to know it landed.
_SETTLE = """
UPDATE tickwork_jobs
SET state = 'settled', outcome = ?, failure_reason = ?, settled_at = ?
WHERE sequence = ? AND state = 'running' AND claim_token = ? {guard}
RETURNING {returning}
"""
_UNLESS_CANCELLED = "AND cancellation_id IS NULL"
SETTLE_CLAIM = _SETTLE.format(guard="", returning="sequence")
SETTLE_CLAIM_RECORD = _SETTLE.format(guard="", returning=JOB_COLUMNS)
SETTLE_CLAIM_UNLESS_CANCELLED = _SETTLE.format(guard=_UNLESS_CANCELLED, returning="sequence")
SETTLE_CLAIM_RECORD_UNLESS_CANCELLED = _SETTLE.format(
    guard=_UNLESS_CANCELLED, returning=JOB_COLUMNS)

# Recovery: put a disappeared claim back in its queue, counting the recovery.
# Fenced like SETTLE_CLAIM.
REQUEUE_CLAIM = f"""
UPDATE tickwork_jobs
SET state = 'queued', started_at = NULL, recoveries = recoveries + 1
WHERE sequence = ? AND state = 'running' AND claim_token = ?
RETURNING {JOB_COLUMNS}
"""

# What a tick must look at before claiming, in one read: the running claim to
# ask the liveness probe about, and whether any cancelled job is still queued.
# The claim is the oldest one not executed by this runtime (the tokens it is
# executing are appended as NOT IN values) that comes after the cursor
# (started_at, sequence), wrapping around to the oldest: a claim whose
# execution is alive elsewhere, or whose probe fails, then cannot keep the
# claims behind it from ever being looked at. Both are small-index probes.
TICK_PROBE = """
SELECT
    coalesce(
        (SELECT sequence FROM tickwork_jobs
         WHERE state = 'running' {exclude} AND (started_at, sequence) > (?, ?)
         ORDER BY started_at, sequence
         LIMIT 1),
        (SELECT sequence FROM tickwork_jobs
         WHERE state = 'running' {exclude}
         ORDER BY started_at, sequence
         LIMIT 1)),
    EXISTS (SELECT 1 FROM tickwork_jobs
            WHERE state = 'queued' AND cancellation_id IS NOT NULL)
"""

SELECT_CLAIM = f"SELECT {JOB_COLUMNS}, claim_token FROM tickwork_jobs WHERE sequence = ?"

# Settle the oldest cancelled job that is still queued, without running it.
# Its queue's head may be busy; cancellation does not wait for it.
SETTLE_NEXT_CANCELLED = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = 'cancelled', failure_reason = NULL, settled_at = ?
WHERE sequence = (
    SELECT sequence FROM tickwork_jobs
    WHERE state = 'queued' AND cancellation_id IS NOT NULL
    ORDER BY sequence
    LIMIT 1)
RETURNING {JOB_COLUMNS}
"""

# Record a cancellation. Only the first id sticks; a settled job is never
# touched. The caller decided from SELECT_JOB in the same transaction.
RECORD_CANCELLATION = """
UPDATE tickwork_jobs SET cancellation_id = ?
WHERE job_id = ? AND cancellation_id IS NULL AND state <> 'settled'
RETURNING sequence
"""

# Lane refusal: settle up to ?3 of the lane's unsettled jobs as failed,
# running ones first, then waiting ones oldest first. Settled history and
# other lanes are not matched. Running jobs come from the small running
# index; waiting ones from the lane index (the repeated state IN term lets
# SQLite prove that partial index applies).
REFUSE_LANE_BATCH = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = 'failed', failure_reason = ?2, settled_at = ?4
WHERE sequence IN (
    SELECT sequence FROM (
        SELECT sequence FROM tickwork_jobs INDEXED BY tickwork_jobs_running
        WHERE state = 'running' AND lane = ?1
        ORDER BY sequence LIMIT ?3)
    UNION ALL
    SELECT sequence FROM (
        SELECT sequence FROM tickwork_jobs INDEXED BY tickwork_jobs_lane_pending
        WHERE lane = ?1 AND state IN ('queued', 'running') AND state = 'queued'
        ORDER BY sequence LIMIT ?3)
    LIMIT ?3)
RETURNING {JOB_COLUMNS}
"""

LANE_HAS_PENDING = """
SELECT EXISTS (
    SELECT 1 FROM tickwork_jobs WHERE lane = ? AND state IN ('queued', 'running'))
"""

# Purge: delete one queue's waiting jobs; running and settled rows stay.
PURGE_QUEUE = """
DELETE FROM tickwork_jobs WHERE queue = ? AND state = 'queued'
RETURNING sequence
"""

# Written as two probes so each uses its partial index.
HAS_PENDING_WORK = """
SELECT EXISTS (SELECT 1 FROM tickwork_jobs WHERE state = 'queued')
    OR EXISTS (SELECT 1 FROM tickwork_jobs WHERE state = 'running')
"""
