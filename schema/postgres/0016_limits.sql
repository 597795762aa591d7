-- tickwork: concurrency limits per queue and per lane, for PostgreSQL (13+).
-- Apply after 0015. It adds a table and two indexes and drops one; no job
-- row changes.
--
-- One row per queue or lane with a limit of its own (tickwork.model.limits):
-- at most max_running jobs of that queue, or of that lane across every
-- queue, run at once. A queue without a row runs one job at a time (the
-- serial queue head, as before this file); a lane without a row has no
-- limit of its own. updated_at: when the row was stored (epoch ms).
CREATE TABLE tickwork_limits (
    kind text NOT NULL CHECK (kind IN ('queue', 'lane')),
    key text NOT NULL,
    max_running integer NOT NULL CHECK (max_running BETWEEN 1 AND 10000),
    updated_at bigint NOT NULL,
    PRIMARY KEY (kind, key)
);

-- A queue may now run several jobs at once, so the unique index of 0001
-- (one running job per queue) goes. Claims still serialise per queue on
-- the queue's advisory lock and count what runs under it.
DROP INDEX tickwork_jobs_running;

-- A queue's running jobs, oldest start first: counting them stops after
-- the queue's limit (at most 10,000 entries), and running_jobs lists them.
-- Same name as the index it replaces, which plans and tests refer to.
CREATE INDEX tickwork_jobs_running
    ON tickwork_jobs (queue, started_at, sequence)
    WHERE state = 'running';

-- A lane's running jobs, oldest start first, for its limit and
-- running_jobs (tickwork_jobs_lane_pending holds the lane's queued jobs
-- too, so a count there is not bounded by the limit).
CREATE INDEX tickwork_jobs_lane_running
    ON tickwork_jobs (lane, started_at, sequence)
    WHERE state = 'running';

UPDATE tickwork_meta SET value = '16' WHERE key = 'schema_version';
