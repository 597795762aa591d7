-- tickwork: browsing jobs a page at a time (list_jobs), for PostgreSQL (13+).
-- Apply after 0008. CREATE INDEX blocks writes to tickwork_jobs while it
-- builds; on a large live table you may instead run each CREATE INDEX as
-- CREATE INDEX CONCURRENTLY (outside a transaction block), then the rest.
--
-- Only indexes: no row changes. Every page of list_jobs is one range scan
-- of one of them (or of an index the schema already had), O(log n + page)
-- however many jobs are stored.
--
-- A queue's queued and running jobs in enqueue order. state is not in the
-- key, so a claim (queued -> running) does not touch this index; ingest adds
-- an entry and settlement removes it (like tickwork_jobs_lane_pending).
CREATE INDEX tickwork_jobs_queue_pending
    ON tickwork_jobs (queue, sequence)
    WHERE state IN ('queued', 'running');

-- A queue's settled jobs of one outcome in settlement order (the failures
-- among a long completed history). Its first two columns are 0003's
-- (queue, outcome) index, which it replaces for queue_status's counts.
CREATE INDEX tickwork_jobs_queue_outcomes
    ON tickwork_jobs (queue, outcome, settled_at, sequence)
    WHERE state = 'settled';

-- A queue's settled jobs in settlement order, whatever their outcome: the
-- name of 0003's index, now keyed as on the owner-local store.
DROP INDEX tickwork_jobs_queue_settled;
CREATE INDEX tickwork_jobs_queue_settled
    ON tickwork_jobs (queue, settled_at, sequence)
    WHERE state = 'settled';

-- A lane's settled jobs in settlement order (its queued and running ones
-- go through tickwork_jobs_lane_pending).
CREATE INDEX tickwork_jobs_lane_settled
    ON tickwork_jobs (lane, settled_at, sequence)
    WHERE state = 'settled';

UPDATE tickwork_meta SET value = '9' WHERE key = 'schema_version';
