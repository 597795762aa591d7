-- tickwork owner-local: concurrency limits per queue and per lane. Applied
-- by the runtime itself on first open, like 0002. No job row changes.
--
-- One row per queue or lane with a limit of its own: at most max_running of
-- its jobs run at once. A queue without a row runs one job at a time (the
-- serial queue head, as before this table existed); a lane without a row
-- has no limit of its own. Every claim reads this table inside its own
-- statement, so a change is obeyed by the next claim, and two claims can
-- never both take a limit's last place (one writer, one statement).
CREATE TABLE tickwork_limits (
    kind TEXT NOT NULL CHECK (kind IN ('queue', 'lane')),
    key TEXT NOT NULL,
    max_running INTEGER NOT NULL CHECK (max_running BETWEEN 1 AND 10000),
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (kind, key)
);

-- No index of running jobs by lane: a claim that must count a lane's running
-- jobs (only when the lane has a limit row) walks every running entry of
-- tickwork_jobs_running, which on one owner are the claims its slots execute
-- (at most its concurrency) and any a crash left for recovery. An index by
-- lane would be kept up to date by every claim and settlement, limits or
-- not: measured, it cost the serial no-op tick about 2.7% more instructions
-- (callgrind) even for jobs it held no entry for. D1, shared by many
-- workers, has one (its 0013).
