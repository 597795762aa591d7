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

-- A claim in a wide queue reads a lane's jobs in the queue in pick order
-- through tickwork_jobs_lane_order (queue, lane, due_at, priority DESC,
-- sequence), written in the batches of 0009 like 0010's queue order. That
-- index is not made here: the store creates it when a queue becomes wide
-- and drops it once none is (tickwork/stores/sql/sqlite.py,
-- LANE_ORDER_INDEX), so the rows of an owner without a wide queue write no
-- entry. Measured with callgrind (runs of 3,000 and 1,000 no-op jobs in
-- 50 queues, each job's ingest and tick), the index of every listed row,
-- made here, cost a serial job about 3% more instructions; made by the
-- store while a queue is wide, nothing a run's spread shows.

-- The queues already wide when this runs get their line: every lane with a
-- ready job, in order of its oldest ready job (its sequence is its turn).
INSERT INTO tickwork_turns (queue, lane, turn)
SELECT queue, lane, min(sequence) FROM tickwork_jobs
WHERE state = 'queued' AND due_at IS NULL AND cancellation_id IS NULL
  AND queue IN (SELECT key FROM tickwork_limits WHERE kind = 'queue' AND max_running > 1)
GROUP BY queue, lane;
