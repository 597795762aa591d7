-- tickwork: fair turns between the lanes of a wide queue (a limit above
-- one), for Cloudflare D1 (SQLite). Apply with `wrangler d1 migrations
-- apply <DB>` after 0014. Plain statements only (D1 applies the file as one
-- unit). No job row changes.
--
-- A wide queue keeps a line of its lanes with a ready job (queued, due,
-- not cancelled): a row per lane, a lower turn nearer the front. A claim
-- in a wide queue takes the best job of the first lane in the line that
-- can start one (tickwork/stores/sql/sqlite.py, "fair turns", has the rule
-- and the claims), so a tenant with 10,000 ready jobs does not hold back a
-- tenant with one. The triggers below keep the line exact in the
-- statement that changes a job, whichever Worker runs it and whether it is
-- tickwork's statement or a producer's own insert: a lane is in a wide
-- queue's line exactly while it has a ready job there (or, until a claim
-- of the queue passes it, after its last one was cancelled or failed).
-- D1 runs one statement at a time, so two claims never see one line in two
-- states. A serial queue has no line.
CREATE TABLE tickwork_turns (
    queue TEXT NOT NULL,
    lane TEXT NOT NULL,
    turn INTEGER NOT NULL,
    PRIMARY KEY (queue, lane)
) WITHOUT ROWID;

-- A queue's line from the front (the claim's walk), and its back (the next
-- turn: one probe for max(turn)).
CREATE INDEX tickwork_turns_order ON tickwork_turns (queue, turn);

-- The ready jobs of a lane in a queue, in pick order: a lane's best job,
-- or whether it has one, in one probe, whatever the backlog of the lanes
-- ahead of it. Every ready job has an entry (an ingest writes one, a claim
-- takes it away).
CREATE INDEX tickwork_jobs_lane_ready
    ON tickwork_jobs (queue, lane, priority DESC, sequence)
    WHERE state = 'queued' AND cancellation_id IS NULL AND due_at IS NULL;

-- A job inserted ready (tickwork's ingest, a schedule's slot, a producer's
-- own insert) in a wide queue: its lane joins the line at the back, unless
-- it is in it. The WHEN costs an insert in a queue that is not wide one
-- primary-key probe of tickwork_limits.
CREATE TRIGGER tickwork_turns_join_on_insert
AFTER INSERT ON tickwork_jobs
FOR EACH ROW
WHEN NEW.due_at IS NULL
  AND EXISTS (SELECT 1 FROM tickwork_limits AS wide
              WHERE wide.kind = 'queue' AND wide.key = NEW.queue AND wide.max_running > 1)
BEGIN
    INSERT INTO tickwork_turns (queue, lane, turn)
    SELECT NEW.queue, NEW.lane,
           coalesce((SELECT max(turn) FROM tickwork_turns WHERE queue = NEW.queue), 0) + 1
    WHERE NOT EXISTS (SELECT 1 FROM tickwork_turns WHERE queue = NEW.queue AND lane = NEW.lane);
END;

-- A job that becomes ready in a wide queue (its time came, a claim was
-- recovered, put back or released, a dead letter redriven): the same. A
-- claim or a settlement (state changes, to running or settled) stops at
-- the WHEN's first term.
CREATE TRIGGER tickwork_turns_join_when_ready
AFTER UPDATE OF state, due_at ON tickwork_jobs
FOR EACH ROW
WHEN NEW.state = 'queued' AND NEW.due_at IS NULL AND NEW.cancellation_id IS NULL
  AND (OLD.state <> 'queued' OR OLD.due_at IS NOT NULL)
  AND EXISTS (SELECT 1 FROM tickwork_limits AS wide
              WHERE wide.kind = 'queue' AND wide.key = NEW.queue AND wide.max_running > 1)
BEGIN
    INSERT INTO tickwork_turns (queue, lane, turn)
    SELECT NEW.queue, NEW.lane,
           coalesce((SELECT max(turn) FROM tickwork_turns WHERE queue = NEW.queue), 0) + 1
    WHERE NOT EXISTS (SELECT 1 FROM tickwork_turns WHERE queue = NEW.queue AND lane = NEW.lane);
END;

-- A claim in a wide queue (a claim is the only statement that sets
-- started_at to a time: see 0014's trigger), in the claim's own statement:
-- the lane that started leaves the line with every lane ahead of it that
-- has no ready job left, then goes to the back if it still has one. A lane
-- passed over at its lane limit or rate-held keeps its place. A claim in a
-- queue that is not wide costs one primary-key probe of tickwork_limits.
CREATE TRIGGER tickwork_turns_after_start
AFTER UPDATE OF started_at ON tickwork_jobs
FOR EACH ROW
WHEN NEW.started_at IS NOT NULL
  AND EXISTS (SELECT 1 FROM tickwork_limits AS wide
              WHERE wide.kind = 'queue' AND wide.key = NEW.queue AND wide.max_running > 1)
BEGIN
    DELETE FROM tickwork_turns
    WHERE queue = NEW.queue
      AND turn <= (SELECT turn FROM tickwork_turns WHERE queue = NEW.queue AND lane = NEW.lane)
      AND (lane = NEW.lane OR (SELECT sequence FROM tickwork_jobs INDEXED BY tickwork_jobs_lane_ready
                WHERE queue = tickwork_turns.queue AND lane = tickwork_turns.lane
                  AND due_at IS NULL AND state = 'queued' AND cancellation_id IS NULL
                ORDER BY priority DESC, sequence
                LIMIT 1) IS NULL);
    INSERT INTO tickwork_turns (queue, lane, turn)
    SELECT NEW.queue, NEW.lane,
           coalesce((SELECT max(turn) FROM tickwork_turns WHERE queue = NEW.queue), 0) + 1
    WHERE EXISTS (SELECT 1 FROM tickwork_limits AS wide
                  WHERE wide.kind = 'queue' AND wide.key = NEW.queue AND wide.max_running > 1)
      AND (SELECT sequence FROM tickwork_jobs INDEXED BY tickwork_jobs_lane_ready
           WHERE queue = NEW.queue AND lane = NEW.lane
             AND due_at IS NULL AND state = 'queued' AND cancellation_id IS NULL
           ORDER BY priority DESC, sequence
           LIMIT 1) IS NOT NULL;
END;

-- The queues already wide when this runs get their line: every lane with a
-- ready job, in order of its oldest ready job (its sequence is its turn).
INSERT INTO tickwork_turns (queue, lane, turn)
SELECT queue, lane, min(sequence) FROM tickwork_jobs
WHERE state = 'queued' AND due_at IS NULL AND cancellation_id IS NULL
  AND queue IN (SELECT key FROM tickwork_limits WHERE kind = 'queue' AND max_running > 1)
GROUP BY queue, lane;

UPDATE tickwork_meta SET value = '15' WHERE key = 'schema_version';
