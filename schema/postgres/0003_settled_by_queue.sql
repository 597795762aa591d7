-- tickwork: a queue's settled jobs by outcome, for PostgreSQL (13+).
-- Apply after 0002.
--
-- queue_status(queue) counts the queue's settled jobs per outcome from this
-- index (an index-only scan once VACUUM has set the visibility map; an index
-- scan of the queue's own rows before that) instead of a sequential scan of
-- the table. Each settlement writes one entry here. CREATE INDEX blocks
-- writes to tickwork_jobs while it builds; on a large live table you may
-- instead run the same statement as CREATE INDEX CONCURRENTLY (outside a
-- transaction block), then the UPDATE below.
CREATE INDEX tickwork_jobs_queue_settled
    ON tickwork_jobs (queue, outcome)
    WHERE state = 'settled';

UPDATE tickwork_meta SET value = '3' WHERE key = 'schema_version';
