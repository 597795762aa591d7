-- tickwork shared job table for Cloudflare D1 (SQLite).
-- Apply with `wrangler d1 migrations apply <DB>` (migrations_dir = "schema/d1").
-- The runtime never migrates; it refuses to open until this file has run.
--
-- Times are integer milliseconds since the epoch, taken from the database
-- clock by the statements themselves (tickwork/stores/sql/sqlite.py).

CREATE TABLE tickwork_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- * sequence: enqueue order; AUTOINCREMENT so a deleted tail is never reused.
-- * claim_token: private random token of the current claim (recovery clears
--   it, so a stale execution never mistakes a later write for its own). Every transition
--   out of 'running' is fenced on it and on lease_expires_at, so a stale or
--   replaced claim can never renew, settle or requeue the job.
-- * lease_expires_at: database time at which a running claim is presumed
--   dead; renewals move it forward only while it is still in the future.
-- * The CHECKs repeat the validation the Python API does, because
--   enqueue_from_select inserts rows that never passed through Python.
CREATE TABLE tickwork_jobs (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL UNIQUE CHECK (length(job_id) BETWEEN 1 AND 256),
    queue TEXT NOT NULL CHECK (length(queue) BETWEEN 1 AND 256),
    lane TEXT NOT NULL CHECK (length(lane) BETWEEN 1 AND 512),
    priority INTEGER NOT NULL CHECK (typeof(priority) = 'integer'
        AND priority BETWEEN -9007199254740991 AND 9007199254740991),
    payload_json TEXT NOT NULL CHECK (json_valid(payload_json)),
    max_recoveries INTEGER CHECK (max_recoveries IS NULL OR (typeof(max_recoveries) = 'integer'
        AND max_recoveries BETWEEN 0 AND 9007199254740991)),
    state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'settled')),
    outcome TEXT CHECK (outcome IN
        ('completed', 'failed', 'cancelled', 'outcome_unknown', 'interrupted')),
    failure_reason TEXT,
    claim_token TEXT,
    lease_expires_at INTEGER,
    recoveries INTEGER NOT NULL DEFAULT 0,
    cancellation_id TEXT,
    enqueued_at INTEGER NOT NULL,
    started_at INTEGER,
    settled_at INTEGER,
    CHECK ((state = 'settled') = (outcome IS NOT NULL)),
    CHECK (state <> 'running' OR (claim_token IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- Claim scan: runnable jobs in global pick order (priority desc, oldest first).
CREATE INDEX tickwork_jobs_runnable
    ON tickwork_jobs (priority DESC, sequence)
    WHERE state = 'queued' AND cancellation_id IS NULL;

-- A queue's waiting jobs in head order: read_queue_head, purge.
CREATE INDEX tickwork_jobs_queue_waiting
    ON tickwork_jobs (queue, priority DESC, sequence)
    WHERE state = 'queued';

-- At most one running job per queue. The claim already never picks a busy
-- queue (D1 runs one statement at a time); this makes a violation an error
-- instead of a second concurrent run.
CREATE UNIQUE INDEX tickwork_jobs_running
    ON tickwork_jobs (queue)
    WHERE state = 'running';

-- Expired leases, oldest first: the recovery probe.
CREATE INDEX tickwork_jobs_lease
    ON tickwork_jobs (lease_expires_at, sequence)
    WHERE state = 'running';

-- Cancelled jobs still queued: settled by the next tick without running.
CREATE INDEX tickwork_jobs_cancel_pending
    ON tickwork_jobs (sequence)
    WHERE state = 'queued' AND cancellation_id IS NOT NULL;

-- Failing a lane: a lane's unsettled jobs, oldest first.
CREATE INDEX tickwork_jobs_lane_pending
    ON tickwork_jobs (lane, sequence)
    WHERE state IN ('queued', 'running');

-- A replayed enqueue with the same job_id but different cargo must fail the
-- whole batch it is in. The enqueue statements turn such a replay into an
-- UPDATE of the cargo columns, which this trigger refuses.
CREATE TRIGGER tickwork_jobs_cargo_is_immutable
BEFORE UPDATE OF queue, lane, priority, payload_json, max_recoveries ON tickwork_jobs
FOR EACH ROW
WHEN OLD.queue IS NOT NEW.queue OR OLD.lane IS NOT NEW.lane
    OR OLD.priority IS NOT NEW.priority OR OLD.payload_json IS NOT NEW.payload_json
    OR OLD.max_recoveries IS NOT NEW.max_recoveries
BEGIN
    SELECT RAISE(ABORT, 'tickwork_ingest_conflict: a job with this job_id exists with different cargo');
END;

INSERT INTO tickwork_meta (key, value) VALUES ('schema_version', '1');
