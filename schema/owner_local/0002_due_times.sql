-- tickwork owner-local: jobs with a due time (run_at / delay_ms).
-- Applied by the runtime itself, in the same transaction as the version
-- bump, the first time a newer tickwork opens an older database (every
-- deployed Durable Object upgrades in place this way). Existing rows keep
-- every value: their new columns are NULL, which means "due at once",
-- exactly what they were.
--
-- * run_at, delay_ms: when the job was asked to run (epoch ms, or a delay
--   from ingest by the runtime's clock); part of the job's cargo, compared
--   as asked on replay.
-- * due_at: while the job waits for its time, when it becomes due; cleared
--   when it does (the tick moves due jobs into the ready set).
ALTER TABLE tickwork_jobs ADD COLUMN run_at INTEGER;
ALTER TABLE tickwork_jobs ADD COLUMN delay_ms INTEGER;
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
-- ready set, and the next due time a host's alarm or timer is armed for.
CREATE INDEX tickwork_jobs_due
    ON tickwork_jobs (due_at)
    WHERE state = 'queued' AND due_at IS NOT NULL;
