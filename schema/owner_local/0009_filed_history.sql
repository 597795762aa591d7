-- tickwork owner-local: settled jobs enter the history indexes in batches.
-- Applied by the runtime itself on first open, like 0002. Every row keeps
-- every value; every settled row is filed at once.
--
-- Why: a commit writes every b-tree it changes to the WAL, a frame per
-- changed page, and a settlement changed seven (the row, the running index,
-- the two indexes of unsettled jobs by queue and by lane, and the three of
-- settled history by queue, by outcome and by lane). A drain settles a job
-- and claims the next in one commit per job: that commit wrote 11 frames,
-- against 2 for a queue that deletes its rows (docs/explanation/
-- benchmarks.md). Now a row carries "filed": 0 while it is queued or running
-- and, for a settlement made by drain(), for a while after it settles; 1
-- once its settlement is in the history indexes. The indexes of unsettled
-- jobs hold every row with filed = 0, so the drain's settlement leaves them
-- alone (its key and condition do not change), and the history indexes hold
-- every row with filed = 1, which drain() sets for up to 100 settled rows at
-- once in the commit of a later settlement. Between the two, a settled row
-- is in tickwork_jobs_unfiled: every read of settled history reads that
-- index too (it holds one owner's last few dozen settlements at most), so
-- nothing a read returns changes. Every other settlement files its row in
-- its own statement, as before.

ALTER TABLE tickwork_jobs ADD COLUMN filed INTEGER NOT NULL DEFAULT 0
    CHECK (filed = 0 OR state = 'settled');

DROP INDEX tickwork_jobs_queue_pending;
DROP INDEX tickwork_jobs_lane_pending;
DROP INDEX tickwork_jobs_queue_settled;
DROP INDEX tickwork_jobs_queue_outcomes;
DROP INDEX tickwork_jobs_lane_settled;
DROP INDEX tickwork_jobs_dead;

UPDATE tickwork_jobs SET filed = 1 WHERE state = 'settled';

-- Unsettled jobs (and the drain's settlements not filed yet), by queue and
-- by lane, in enqueue order.
CREATE INDEX tickwork_jobs_queue_pending
    ON tickwork_jobs (queue, sequence)
    WHERE filed = 0;
CREATE INDEX tickwork_jobs_lane_pending
    ON tickwork_jobs (lane, sequence)
    WHERE filed = 0;
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
-- Settlements not filed yet (few: drain() files them every 100 settlements).
CREATE INDEX tickwork_jobs_unfiled
    ON tickwork_jobs (queue, settled_at, sequence)
    WHERE filed = 0 AND state = 'settled';
