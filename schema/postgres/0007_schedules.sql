-- tickwork: durable schedules, for PostgreSQL (13+). Apply after 0006.
--
-- * spec_json: the schedule as canonical JSON (cron or every_ms, catch_up,
--   the job template); a replace changes it, and every slot's insert is
--   fenced on it, so a slot computed from an older definition adds nothing.
-- * next_at: the first slot that has no job yet (epoch ms). A drain creates
--   the jobs of the slots up to now and moves it past now, in one
--   transaction; each slot's job id is the name and the slot, so no slot
--   gets two jobs, whichever workers fire it at once.
CREATE TABLE tickwork_schedules (
    name text PRIMARY KEY,
    spec_json text NOT NULL CHECK (spec_json::jsonb IS NOT NULL),
    next_at bigint NOT NULL,
    paused boolean NOT NULL DEFAULT false,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
);

-- The earliest next slot of the schedules that run.
CREATE INDEX tickwork_schedules_next
    ON tickwork_schedules (next_at)
    WHERE NOT paused;

UPDATE tickwork_meta SET value = '7' WHERE key = 'schema_version';
