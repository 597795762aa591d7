-- tickwork owner-local: fair turns between the lanes of a wide queue (a
-- limit above one). Applied by the runtime itself on first open, like 0002.
-- No job row changes.
--
-- A wide queue keeps a line of its lanes with a ready job: a row per lane,
-- a lower turn nearer the front. A lane joins at the back (the queue's
-- highest turn plus one) when one of its jobs becomes ready and it is not
-- in the line; a claim in a wide queue takes the best job of the first lane
-- in the line that can start one, and that lane goes to the back, or
-- leaves once it has no ready job (tickwork/stores/sql/sqlite.py, "fair
-- turns", has the rule and every statement). So a tenant with 10,000
-- ready jobs does not hold back a tenant with one. A serial queue has no
-- line. No trigger keeps the line (one cost more on every serial claim):
-- the store runs the line's statements in the transaction of each change
-- that needs them, and only while a wide queue exists (owner-local has one
-- writer, the store, which knows it).
CREATE TABLE tickwork_turns (
    queue TEXT NOT NULL,
    lane TEXT NOT NULL,
    turn INTEGER NOT NULL,
    PRIMARY KEY (queue, lane)
) WITHOUT ROWID;

-- A queue's line from the front (the claim's walk), and its back (the next
-- turn: one probe for max(turn)).
CREATE INDEX tickwork_turns_order ON tickwork_turns (queue, turn);

-- * taking_turns: 1 while the row is in tickwork_jobs_lane_order, which
--   holds the listed, unfiled rows of wide queues only: set as a row is
--   listed (or redriven) in a wide queue, and for a queue's listed rows
--   when it becomes wide or stops being wide. So the rows of serial queues
--   never enter that index: measured with callgrind, an index of every
--   listed row cost a serial no-op job (ingest and tick) about 3.1% more
--   instructions, written in the batches of 0009 as it is.
ALTER TABLE tickwork_jobs ADD COLUMN taking_turns INTEGER NOT NULL DEFAULT 0;

-- A lane's jobs in a wide queue in pick order, for the claim's walk: its
-- best ready job, or whether it has one, in one probe (due_at in the key:
-- a ready job's is NULL, so the jobs waiting for their time are a range
-- apart). Written in the batches of 0009, like 0010's queue order: a row
-- enters when it is listed and leaves when it is filed, so neither a claim
-- nor a settlement writes it; every read also reads the unlisted rows, and
-- steps over the lane's running jobs and unfiled settlements (a few).
CREATE INDEX tickwork_jobs_lane_order
    ON tickwork_jobs (queue, lane, due_at, priority DESC, sequence)
    WHERE listed = 1 AND filed = 0 AND taking_turns = 1;

-- The queues already wide when this runs: their listed rows enter that
-- index, and they get their line: every lane with a ready job, in order of
-- its oldest ready job (its sequence is its turn).
UPDATE tickwork_jobs SET taking_turns = 1
WHERE listed = 1 AND filed = 0
  AND queue IN (SELECT key FROM tickwork_limits WHERE kind = 'queue' AND max_running > 1);
INSERT INTO tickwork_turns (queue, lane, turn)
SELECT queue, lane, min(sequence) FROM tickwork_jobs
WHERE state = 'queued' AND due_at IS NULL AND cancellation_id IS NULL
  AND queue IN (SELECT key FROM tickwork_limits WHERE kind = 'queue' AND max_running > 1)
GROUP BY queue, lane;
