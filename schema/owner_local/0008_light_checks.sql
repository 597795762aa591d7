-- tickwork owner-local: the same table and indexes, with every constraint
-- and index condition written without a list of three or more values.
-- Applied by the runtime itself on first open, like 0002. Every row keeps
-- every value, its sequence and the AUTOINCREMENT high-water mark.
--
-- Why: SQLite evaluates "x IN ('a', 'b', 'c')" (three or more constants) by
-- building a temporary b-tree of the values, every time a statement
-- evaluates it. The CHECKs on state and outcome run on every insert and on
-- every claim and settlement (they change state), and tickwork_jobs_dead's
-- condition on every settlement: measured on sqlite3 :memory:, a third of a
-- raw insert's instructions and of a raw claim+settle's went to building
-- those b-trees. The same conditions as chains of "=" are compared in place.
-- A CHECK cannot be altered in SQLite, so the table is rebuilt (SQLite's
-- documented way: create, copy, drop, rename), inside the upgrade's one
-- transaction, and its indexes made again (the dead letters' one as a chain
-- of "=", which DEAD_LETTERS spells out so the planner proves it applies).

CREATE TABLE tickwork_jobs_0008 (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL UNIQUE,
    queue TEXT NOT NULL,
    lane TEXT NOT NULL,
    priority INTEGER NOT NULL,
    payload_json TEXT NOT NULL,
    max_recoveries INTEGER,
    state TEXT NOT NULL CHECK (state = 'queued' OR state = 'running' OR state = 'settled'),
    outcome TEXT CHECK (outcome = 'completed' OR outcome = 'failed' OR outcome = 'cancelled'
        OR outcome = 'outcome_unknown' OR outcome = 'interrupted'),
    failure_reason TEXT,
    claim_token TEXT,
    recoveries INTEGER NOT NULL DEFAULT 0,
    cancellation_id TEXT,
    enqueued_at INTEGER NOT NULL,
    started_at INTEGER,
    settled_at INTEGER,
    run_at INTEGER,
    delay_ms INTEGER,
    due_at INTEGER,
    retry_json TEXT,
    attempt INTEGER NOT NULL DEFAULT 1,
    history_json TEXT,
    error_json TEXT,
    CHECK ((state = 'settled') = (outcome IS NOT NULL)),
    CHECK (state <> 'running' OR claim_token IS NOT NULL)
);

INSERT INTO tickwork_jobs_0008
    (sequence, job_id, queue, lane, priority, payload_json, max_recoveries, state, outcome,
     failure_reason, claim_token, recoveries, cancellation_id, enqueued_at, started_at,
     settled_at, run_at, delay_ms, due_at, retry_json, attempt, history_json, error_json)
SELECT sequence, job_id, queue, lane, priority, payload_json, max_recoveries, state, outcome,
       failure_reason, claim_token, recoveries, cancellation_id, enqueued_at, started_at,
       settled_at, run_at, delay_ms, due_at, retry_json, attempt, history_json, error_json
FROM tickwork_jobs ORDER BY sequence;

-- The high-water mark: when the newest jobs were purged, the old table's
-- AUTOINCREMENT counter is above every stored sequence. A placeholder row at
-- that sequence carries it over (the new table's counter never goes back),
-- and is deleted at once (no job_id is empty).
INSERT INTO tickwork_jobs_0008 (sequence, job_id, queue, lane, priority, payload_json, state,
                                enqueued_at)
SELECT seq, '', '', '', 0, '', 'queued', 0 FROM sqlite_sequence
WHERE name = 'tickwork_jobs'
  AND seq > (SELECT coalesce(max(sequence), 0) FROM tickwork_jobs);
DELETE FROM tickwork_jobs_0008 WHERE job_id = '';

DROP TABLE tickwork_jobs;
ALTER TABLE tickwork_jobs_0008 RENAME TO tickwork_jobs;

-- Every index again, as 0001-0007 left it, but the dead letters'.
CREATE INDEX tickwork_jobs_runnable
    ON tickwork_jobs (priority DESC, sequence)
    WHERE state = 'queued' AND cancellation_id IS NULL AND due_at IS NULL;
CREATE INDEX tickwork_jobs_queue_waiting
    ON tickwork_jobs (queue, priority DESC, sequence, due_at)
    WHERE state = 'queued';
CREATE INDEX tickwork_jobs_running
    ON tickwork_jobs (queue)
    WHERE state = 'running';
CREATE INDEX tickwork_jobs_cancel_pending
    ON tickwork_jobs (sequence)
    WHERE state = 'queued' AND cancellation_id IS NOT NULL;
CREATE INDEX tickwork_jobs_lane_pending
    ON tickwork_jobs (lane, sequence)
    WHERE state IN ('queued', 'running');
CREATE INDEX tickwork_jobs_queue_settled
    ON tickwork_jobs (queue, settled_at, sequence)
    WHERE state = 'settled';
CREATE INDEX tickwork_jobs_due
    ON tickwork_jobs (due_at)
    WHERE state = 'queued' AND due_at IS NOT NULL;
CREATE INDEX tickwork_jobs_dead
    ON tickwork_jobs (queue, settled_at, sequence)
    WHERE state = 'settled'
      AND (outcome = 'failed' OR outcome = 'outcome_unknown' OR outcome = 'interrupted');
CREATE INDEX tickwork_jobs_queue_pending
    ON tickwork_jobs (queue, sequence)
    WHERE state IN ('queued', 'running');
CREATE INDEX tickwork_jobs_queue_outcomes
    ON tickwork_jobs (queue, outcome, settled_at, sequence)
    WHERE state = 'settled';
CREATE INDEX tickwork_jobs_lane_settled
    ON tickwork_jobs (lane, settled_at, sequence)
    WHERE state = 'settled';
