-- tickwork owner-local: new jobs enter the indexes of unsettled jobs, and
-- settled ones the history indexes, in batches. Applied by the runtime
-- itself on first open, like 0002. Every row keeps every value; every row
-- is listed and every settled row filed at once.
--
-- Why: a commit writes every b-tree it changes to the WAL, a frame per
-- changed page. An ingest changed seven (the row, the job id's unique
-- index, the AUTOINCREMENT counter, the claim's order, the queue's waiting
-- jobs, and the unsettled jobs by queue and by lane) and a settlement seven
-- (the row, the running index, those two again, and the three history
-- indexes by queue, by outcome and by lane). Entries written a batch at a
-- time share the pages they change (docs/explanation/architecture.md has
-- what that saves). So a row now carries two flags:
--
-- * listed: 0 for a row inserted after the last listing; 1 once it is in
--   the indexes of unsettled jobs by queue and by lane. The runtime lists
--   every new row at once every LIST_EVERY inserts (one statement, and the
--   sequence listed through kept in tickwork_meta as 'listed_through';
--   tickwork/stores/index_batching.py decides when).
--   Rows come in sequence order, so the unlisted rows are exactly those
--   after 'listed_through': a read of unsettled jobs also reads them, by
--   the primary key (at most a few hundred rows).
-- * filed: 0 while a job is queued or running and, for a settlement made
--   by drain(), for a while after it settles; 1 once its settlement is in
--   the history indexes. The indexes of unsettled jobs hold the listed rows
--   with filed = 0, so the drain's settlement leaves them alone, and the
--   history indexes every filed row. drain() files up to FILE_EVERY
--   settled rows at once, in the commit of a later settlement. Between the
--   two a settled row is in tickwork_jobs_unfiled: every read of settled
--   history reads that index too. Every other settlement files its row in its own
--   statement, as before.
--
-- What a read returns does not depend on either flag.

ALTER TABLE tickwork_jobs ADD COLUMN listed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tickwork_jobs ADD COLUMN filed INTEGER NOT NULL DEFAULT 0
    CHECK (filed = 0 OR state = 'settled');

DROP INDEX tickwork_jobs_queue_pending;
DROP INDEX tickwork_jobs_lane_pending;
DROP INDEX tickwork_jobs_queue_settled;
DROP INDEX tickwork_jobs_queue_outcomes;
DROP INDEX tickwork_jobs_lane_settled;
DROP INDEX tickwork_jobs_dead;

UPDATE tickwork_jobs SET listed = 1, filed = (state = 'settled');
INSERT INTO tickwork_meta (key, value)
SELECT 'listed_through', CAST(coalesce(max(sequence), 0) AS TEXT) FROM tickwork_jobs;

-- Unsettled jobs (and the drain's settlements not filed yet), by queue and
-- by lane, in enqueue order, once listed.
CREATE INDEX tickwork_jobs_queue_pending
    ON tickwork_jobs (queue, sequence)
    WHERE listed = 1 AND filed = 0;
CREATE INDEX tickwork_jobs_lane_pending
    ON tickwork_jobs (lane, sequence)
    WHERE listed = 1 AND filed = 0;
-- Filed settlements: as 0007 and 0008 made them, for filed rows.
CREATE INDEX tickwork_jobs_queue_settled
    ON tickwork_jobs (queue, settled_at, sequence)
    WHERE filed = 1;
CREATE INDEX tickwork_jobs_queue_outcomes
    ON tickwork_jobs (queue, outcome, settled_at, sequence)
    WHERE filed = 1;
CREATE INDEX tickwork_jobs_lane_settled
    ON tickwork_jobs (lane, settled_at, sequence)
    WHERE filed = 1;
CREATE INDEX tickwork_jobs_dead
    ON tickwork_jobs (queue, settled_at, sequence)
    WHERE filed = 1
      AND (outcome = 'failed' OR outcome = 'outcome_unknown' OR outcome = 'interrupted');
-- Settlements not filed yet (few: drain() files them every FILE_EVERY settlements).
CREATE INDEX tickwork_jobs_unfiled
    ON tickwork_jobs (queue, settled_at, sequence)
    WHERE filed = 0 AND state = 'settled';
