-- tickwork: a queue's settled jobs by outcome, for Cloudflare D1 (SQLite).
-- Apply with `wrangler d1 migrations apply <DB>` after 0002. Plain statements
-- only: D1 refuses transaction statements and applies the file as one unit.
--
-- queue_status(queue) counts the queue's settled jobs per outcome from this
-- index alone (a covering index: state is its WHERE, queue and outcome its
-- key), instead of reading every row of the table. Each settlement writes
-- one entry here. Building it reads the whole table once (billed as rows
-- read on D1).
CREATE INDEX tickwork_jobs_queue_settled
    ON tickwork_jobs (queue, outcome)
    WHERE state = 'settled';

UPDATE tickwork_meta SET value = '3' WHERE key = 'schema_version';
