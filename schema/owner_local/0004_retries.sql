-- tickwork owner-local: retries with backoff, attempt history, dead letters
-- and redrive. Applied by the runtime itself on first open, like 0002.
-- Existing rows keep every value: a job without a retry policy is on its
-- first attempt with no history, exactly what every job was.
--
-- * retry_json: the job's retry policy as canonical JSON (cargo), or NULL.
-- * attempt: which attempt the job is on (1-based; a redrive starts again).
-- * history_json: the attempts before this one, a JSON array of at most 20
--   {attempt, outcome, reason, started_at, ended_at[, redrive_id]}, oldest
--   first; NULL until the first retry or redrive.
ALTER TABLE tickwork_jobs ADD COLUMN retry_json TEXT;
ALTER TABLE tickwork_jobs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;
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
