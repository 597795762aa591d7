-- tickwork owner-local: retention policies. Applied by the runtime itself on
-- first open, like 0002.
--
-- One row per queue with a policy of its own, and one under the queue name
-- '' (no queue has it) for the owner's default. Each time is in ms after a
-- job settled; NULL keeps that kind of settled job forever. Without a row
-- for '' the default is built in (tickwork.model.retention: completed and
-- cancelled jobs 7 days, failed, outcome_unknown and interrupted ones 30).
--
-- No new index: a prune batch walks tickwork_jobs_queue_outcomes (queue,
-- outcome, settled_at, sequence), one range per queue and outcome, so it
-- reads the rows it deletes and no other.
CREATE TABLE tickwork_retention (
    queue TEXT NOT NULL PRIMARY KEY,
    keep_completed_ms INTEGER CHECK (keep_completed_ms > 0),
    keep_failed_ms INTEGER CHECK (keep_failed_ms > 0),
    updated_at INTEGER NOT NULL
);

-- A store that already holds settled jobs keeps them: an upgrade must not
-- delete history its owner never chose to let go. Such a store gets a
-- default of "keep forever" (NULL, NULL); set_retention(None, ...) or
-- clear_retention(None) (the built-in default) changes it. A new store has
-- no settled jobs here, so it starts on the built-in default.
INSERT INTO tickwork_retention (queue, keep_completed_ms, keep_failed_ms, updated_at)
SELECT '', NULL, NULL, CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
WHERE EXISTS (SELECT 1 FROM tickwork_jobs WHERE state = 'settled');
