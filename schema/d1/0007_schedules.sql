-- tickwork: durable schedules, for Cloudflare D1 (SQLite). Apply after 0006.
-- Plain statements only (D1 applies the file as one unit).
--
-- * spec_json: the schedule as canonical JSON (cron or every_ms, catch_up,
--   the job template); a replace changes it, and every slot's insert is
--   fenced on it, so a slot computed from an older definition adds nothing.
-- * next_at: the first slot that has no job yet (epoch ms). A tick creates
--   the jobs of the slots up to now and moves it past now, in one
--   transaction; each slot's job id is the name and the slot, so no slot
--   gets two jobs.
CREATE TABLE tickwork_schedules (
    name TEXT NOT NULL PRIMARY KEY,
    spec_json TEXT NOT NULL,
    next_at INTEGER NOT NULL,
    paused INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

-- The earliest next slot of the schedules that run: when a tick next has a
-- slot to fill, for the host's alarm or timer.
CREATE INDEX tickwork_schedules_next
    ON tickwork_schedules (next_at)
    WHERE paused = 0;

UPDATE tickwork_meta SET value = '7' WHERE key = 'schema_version';
