-- tickwork: retries with backoff, attempt history, dead letters and
-- redrive, for Cloudflare D1 (SQLite). Apply after 0005. Plain statements
-- only (D1 applies the file as one unit). Existing rows keep every value: a
-- job without a retry policy is on its first attempt with no history,
-- exactly what every job was.
--
-- * retry_json: the job's retry policy as canonical JSON (cargo), or NULL.
-- * attempt: which attempt the job is on (1-based; a redrive starts again).
-- * history_json: the attempts before this one, a JSON array of at most 20
--   {attempt, outcome, reason, started_at, ended_at[, redrive_id]}, oldest
--   first; NULL until the first retry or redrive.
ALTER TABLE tickwork_jobs ADD COLUMN retry_json TEXT
    CHECK (retry_json IS NULL OR json_valid(retry_json));
ALTER TABLE tickwork_jobs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1
    CHECK (typeof(attempt) = 'integer' AND attempt >= 1);
ALTER TABLE tickwork_jobs ADD COLUMN history_json TEXT;

-- A queue's dead letters (settled failed, outcome_unknown or interrupted),
-- in settlement order: listing them newest first, a page at a time, costs
-- O(log n + page) however much completed history the queue keeps.
CREATE INDEX tickwork_jobs_dead
    ON tickwork_jobs (queue, settled_at, sequence)
    WHERE state = 'settled' AND outcome IN ('failed', 'outcome_unknown', 'interrupted');

-- Every redrive id applied to a job, so a replay of any of them (not only
-- the latest) is answered "replayed" and never starts another chain.
CREATE TABLE tickwork_redrives (
    job_id TEXT NOT NULL,
    redrive_id TEXT NOT NULL,
    redriven_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, redrive_id)
);

-- The cargo now includes the retry policy.
DROP TRIGGER tickwork_jobs_cargo_is_immutable;
CREATE TRIGGER tickwork_jobs_cargo_is_immutable
BEFORE UPDATE OF queue, lane, priority, payload_json, max_recoveries, run_at, delay_ms,
    retry_json
ON tickwork_jobs
FOR EACH ROW
WHEN OLD.queue IS NOT NEW.queue OR OLD.lane IS NOT NEW.lane
    OR OLD.priority IS NOT NEW.priority OR OLD.payload_json IS NOT NEW.payload_json
    OR OLD.max_recoveries IS NOT NEW.max_recoveries
    OR OLD.run_at IS NOT NEW.run_at OR OLD.delay_ms IS NOT NEW.delay_ms
    OR OLD.retry_json IS NOT NEW.retry_json
BEGIN
    SELECT RAISE(ABORT, 'tickwork_ingest_conflict: a job with this job_id exists with different cargo');
END;

UPDATE tickwork_meta SET value = '6' WHERE key = 'schema_version';
