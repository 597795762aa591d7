-- tickwork: jobs with a due time (run_at / delay_ms), for Cloudflare D1 (SQLite).
-- Apply with `wrangler d1 migrations apply <DB>` after 0003. Plain statements
-- only: D1 refuses transaction statements and applies the file as one unit.
-- Existing rows keep every value: their new columns are NULL, which means
-- "due at once", exactly what they were.
--
-- * run_at, delay_ms: when the job was asked to run (epoch ms, or a delay
--   from ingest by database time); part of the job's cargo, compared as
--   asked on replay.
-- * due_at: while the job waits for its time, when it becomes due; cleared
--   when it does (the claim's batch moves due jobs into the ready set).
ALTER TABLE tickwork_jobs ADD COLUMN run_at INTEGER CHECK (run_at IS NULL OR
    (typeof(run_at) = 'integer' AND run_at BETWEEN 0 AND 9007199254740991));
ALTER TABLE tickwork_jobs ADD COLUMN delay_ms INTEGER CHECK (delay_ms IS NULL OR
    (typeof(delay_ms) = 'integer' AND delay_ms BETWEEN 0 AND 9007199254740)
    AND (run_at IS NULL OR delay_ms IS NULL));
ALTER TABLE tickwork_jobs ADD COLUMN due_at INTEGER;

-- The claim scan holds only jobs that are due: a claim never steps over a
-- job waiting for its time, however many wait.
DROP INDEX tickwork_jobs_runnable;
CREATE INDEX tickwork_jobs_runnable
    ON tickwork_jobs (priority DESC, sequence)
    WHERE state = 'queued' AND cancellation_id IS NULL AND due_at IS NULL;

-- A queue's waiting jobs in head order, with their due times, so a queue's
-- due and delayed counts come from the index alone.
DROP INDEX tickwork_jobs_queue_waiting;
CREATE INDEX tickwork_jobs_queue_waiting
    ON tickwork_jobs (queue, priority DESC, sequence, due_at)
    WHERE state = 'queued';

-- Jobs waiting for their time, earliest first: moving due jobs into the
-- ready set, and the next due time a host's timer is armed for.
CREATE INDEX tickwork_jobs_due
    ON tickwork_jobs (due_at)
    WHERE state = 'queued' AND due_at IS NOT NULL;

-- The cargo now includes run_at and delay_ms.
DROP TRIGGER tickwork_jobs_cargo_is_immutable;
CREATE TRIGGER tickwork_jobs_cargo_is_immutable
BEFORE UPDATE OF queue, lane, priority, payload_json, max_recoveries, run_at, delay_ms
ON tickwork_jobs
FOR EACH ROW
WHEN OLD.queue IS NOT NEW.queue OR OLD.lane IS NOT NEW.lane
    OR OLD.priority IS NOT NEW.priority OR OLD.payload_json IS NOT NEW.payload_json
    OR OLD.max_recoveries IS NOT NEW.max_recoveries
    OR OLD.run_at IS NOT NEW.run_at OR OLD.delay_ms IS NOT NEW.delay_ms
BEGIN
    SELECT RAISE(ABORT, 'tickwork_ingest_conflict: a job with this job_id exists with different cargo');
END;

UPDATE tickwork_meta SET value = '4' WHERE key = 'schema_version';
