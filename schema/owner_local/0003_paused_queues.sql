-- tickwork owner-local: paused queues.
-- Applied by the runtime itself on first open, like 0002.
--
-- A queue named here is paused: no tick claims its jobs (running ones
-- finish; cancellations and lane failures still settle). Pausing inserts
-- the row, resuming deletes it, so both are idempotent.
CREATE TABLE tickwork_paused_queues (
    queue TEXT NOT NULL PRIMARY KEY,
    paused_at INTEGER NOT NULL
);
