-- tickwork: concurrency limits per queue and per lane, for Cloudflare D1
-- (SQLite). Apply with `wrangler d1 migrations apply <DB>` after 0012.
-- Plain statements only (D1 applies the file as one unit). No job row
-- changes.
--
-- One row per queue or lane with a limit of its own: at most max_running of
-- its jobs run at once, across every Worker that claims from this database.
-- A queue without a row runs one job at a time (the serial queue head, as
-- before this table existed); a lane without a row has no limit of its
-- own. Every claim reads this table inside its own statement, and D1 runs
-- one statement at a time, so a change is obeyed by the next claim and two
-- claims can never both take a limit's last place.
CREATE TABLE tickwork_limits (
    kind TEXT NOT NULL CHECK (kind IN ('queue', 'lane')),
    key TEXT NOT NULL,
    max_running INTEGER NOT NULL CHECK (max_running BETWEEN 1 AND 10000),
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (kind, key)
);

-- A queue may now run several jobs at once: its running index can no longer
-- be UNIQUE. The claims count a queue's running jobs through it (they only
-- count when the queue has one running job already and a limit row).
DROP INDEX tickwork_jobs_running;
CREATE INDEX tickwork_jobs_running
    ON tickwork_jobs (queue)
    WHERE state = 'running';

-- A lane's running jobs, oldest start first, for counting them against the
-- lane's limit (a walk of the lane's running entries, never of its queued
-- ones) and for naming them. Only the jobs whose lane is not their queue's
-- name: a job that names no lane (its lane is its queue) is counted through
-- tickwork_jobs_running of the queue of that name instead, so the common
-- job writes no entry here when it is claimed and settled.
CREATE INDEX tickwork_jobs_lane_running
    ON tickwork_jobs (lane, started_at, sequence)
    WHERE state = 'running' AND lane <> queue;

UPDATE tickwork_meta SET value = '13' WHERE key = 'schema_version';
