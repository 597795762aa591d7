-- tickwork: paused queues, for Cloudflare D1 (SQLite).
-- Apply after 0004. Plain statements only (D1 applies the file as one unit).
--
-- A queue named here is paused: no claim takes its jobs (running ones
-- finish; cancellations and lane failures still settle). Pausing inserts
-- the row, resuming deletes it, so both are idempotent.
CREATE TABLE tickwork_paused_queues (
    queue TEXT NOT NULL PRIMARY KEY,
    paused_at INTEGER NOT NULL
);

UPDATE tickwork_meta SET value = '5' WHERE key = 'schema_version';
