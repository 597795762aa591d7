"""Every SQL statement the owner-local runtime runs, one per transition.

Each statement is a single atomic mutation or read; the comment above it says
what it guarantees. Placeholders are positional ``?`` (SQLite and Durable
Object storage both accept them); no statement binds more than 6 values, far
inside the Durable Object limit of 100.
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
CLAIM_NEXT = f"""
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
RETURNING {JOB_COLUMNS}
"""

# Settle a claim. Fenced on the exact claim token and the running state: a
# claim that was refused, recovered or re-claimed in the meantime matches no
# row, so exactly one terminal outcome is ever written per job.
SETTLE_CLAIM = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = ?, failure_reason = ?, settled_at = ?
WHERE sequence = ? AND state = 'running' AND claim_token = ?
RETURNING {JOB_COLUMNS}
"""

# Recovery: put a disappeared claim back in its queue, counting the recovery.
# Fenced like SETTLE_CLAIM.
REQUEUE_CLAIM = f"""
UPDATE tickwork_jobs
SET state = 'queued', started_at = NULL, recoveries = recoveries + 1
WHERE sequence = ? AND state = 'running' AND claim_token = ?
RETURNING {JOB_COLUMNS}
"""

# Recovery probe: the oldest running claim, skipping the claims this runtime
# is executing right now (their tokens are appended as NOT IN values).
SELECT_OLDEST_CLAIM = f"""
SELECT {JOB_COLUMNS}, claim_token FROM tickwork_jobs
WHERE state = 'running' {{exclude}}
ORDER BY started_at, sequence
LIMIT 1
"""

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
# other lanes are not matched.
REFUSE_LANE_BATCH = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = 'failed', failure_reason = ?2, settled_at = ?4
WHERE sequence IN (
    SELECT sequence FROM (
        SELECT sequence FROM tickwork_jobs
        WHERE lane = ?1 AND state = 'running'
        ORDER BY sequence LIMIT ?3)
    UNION ALL
    SELECT sequence FROM (
        SELECT sequence FROM tickwork_jobs
        WHERE lane = ?1 AND state = 'queued'
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
