-- tickwork owner-local job table: one owner's jobs in its own SQLite database
-- (a Durable Object's storage, or a sqlite3 file).
-- Not applied by a migration tool: OwnerRuntime creates it itself on first
-- use (tickwork/stores/owner_schema.py holds this very text, and the tests
-- pin the two equal). It is here so every store's DDL is in schema/.
--
-- The table is D1's (schema/d1) without leases: an owner-local claim is
-- fenced on its token alone and its liveness is asked of the host, so there
-- is no lease_expires_at and no lease index. Python validates every job
-- before it is stored, and no producer SQL writes here, so the column CHECKs
-- and the cargo trigger D1 needs for enqueue_from_select are left out.
--
-- * sequence: enqueue order. AUTOINCREMENT so a purged tail is never reused
--   and "after_sequence" paging stays monotonic.
-- * claim_token: the private token of the latest claim. Every transition out
--   of 'running' is fenced on it, so a stale claim can never settle or
--   requeue a job another claim (or a failed lane) already moved.
-- * cancellation_id: the one durable cancellation a job can carry.
-- Times are integer milliseconds since the epoch, from the runtime's clock.

CREATE TABLE IF NOT EXISTS tickwork_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS tickwork_jobs (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL UNIQUE,
    queue TEXT NOT NULL,
    lane TEXT NOT NULL,
    priority INTEGER NOT NULL,
    payload_json TEXT NOT NULL,
    max_recoveries INTEGER,
    state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'settled')),
    outcome TEXT CHECK (outcome IN
        ('completed', 'failed', 'cancelled', 'outcome_unknown', 'interrupted')),
    failure_reason TEXT,
    claim_token TEXT,
    recoveries INTEGER NOT NULL DEFAULT 0,
    cancellation_id TEXT,
    enqueued_at INTEGER NOT NULL,
    started_at INTEGER,
    settled_at INTEGER,
    CHECK ((state = 'settled') = (outcome IS NOT NULL)),
    CHECK (state <> 'running' OR claim_token IS NOT NULL)
);

-- Claim scan: runnable jobs in global pick order (priority desc, oldest
-- first). The claim walks it from the front and stops at the first job whose
-- queue is free, so it costs O(log n), not O(queue depth).
CREATE INDEX IF NOT EXISTS tickwork_jobs_runnable
    ON tickwork_jobs (priority DESC, sequence)
    WHERE state = 'queued' AND cancellation_id IS NULL;

-- A queue's waiting jobs in head order: read_queue_head, purge.
CREATE INDEX IF NOT EXISTS tickwork_jobs_queue_waiting
    ON tickwork_jobs (queue, priority DESC, sequence)
    WHERE state = 'queued';

-- Running claims are few; this makes "is this queue busy?" and the liveness
-- probe index lookups. (Not UNIQUE, unlike D1's: one writer, and the claim
-- never picks a busy queue.)
CREATE INDEX IF NOT EXISTS tickwork_jobs_running
    ON tickwork_jobs (queue)
    WHERE state = 'running';

-- Cancelled jobs still queued: settled by the next tick without running.
CREATE INDEX IF NOT EXISTS tickwork_jobs_cancel_pending
    ON tickwork_jobs (sequence)
    WHERE state = 'queued' AND cancellation_id IS NOT NULL;

-- Failing a lane: a lane's unsettled jobs, oldest first. state is not in the
-- key, so a claim (queued -> running) does not touch this index.
CREATE INDEX IF NOT EXISTS tickwork_jobs_lane_pending
    ON tickwork_jobs (lane, sequence)
    WHERE state IN ('queued', 'running');

-- A queue's settled jobs, newest last: read_latest_settled_job, and the
-- settled counts of queue_status (D1's is (queue, outcome), 0003).
CREATE INDEX IF NOT EXISTS tickwork_jobs_queue_settled
    ON tickwork_jobs (queue, settled_at, sequence)
    WHERE state = 'settled';
