-- tickwork: rate limits per queue and per lane, for Cloudflare D1
-- (SQLite). Apply with `wrangler d1 migrations apply <DB>` after 0013.
-- Plain statements only (D1 applies the file as one unit). No job row
-- changes.
--
-- One row per queue or lane with a rate limit (a token bucket: starts per
-- period_ms, burst at once) or a hold (an executor's RateLimited: no job of
-- the key starts before held_until), or both, across every Worker that
-- claims from this database. The bucket is stored as GCRA
-- (tickwork.model.rate_limits): next_start, the earliest next start in
-- units of 1/starts ms, so every step is exact integer arithmetic. A claim
-- reads the rows of its candidate's queue and lane inside its own
-- statement (by primary key), and the trigger below spends the start in
-- that same statement; D1 runs one statement at a time, so two claims can
-- never both take a bucket's last start.
CREATE TABLE tickwork_rate_limits (
    kind TEXT NOT NULL CHECK (kind IN ('queue', 'lane')),
    key TEXT NOT NULL,
    -- The bucket: all three NULL for a key that only has a hold.
    starts INTEGER CHECK (starts BETWEEN 1 AND 100000),
    period_ms INTEGER CHECK (period_ms BETWEEN 1 AND 2678400000),
    burst INTEGER CHECK (burst BETWEEN 1 AND 100000),
    -- GCRA: the earliest next start, in units of 1/starts ms (0: full).
    next_start INTEGER NOT NULL DEFAULT 0,
    -- An executor's RateLimited: no start before this (epoch ms; 0: none).
    held_until INTEGER NOT NULL DEFAULT 0,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (kind, key),
    CHECK ((starts IS NULL) = (period_ms IS NULL) AND (starts IS NULL) = (burst IS NULL))
);

-- Every claim spends one start of its job's queue's bucket and of its
-- lane's, where each has one: a claim is the only statement that sets
-- started_at to a time (the put-backs clear it), and a settlement does not
-- name the column, so no other statement runs this trigger. started_at is
-- the claim's now (database time unless a test gives one). Two primary-key
-- probes of a table that is empty unless rate limits are set.
CREATE TRIGGER tickwork_rate_limits_spend
AFTER UPDATE OF started_at ON tickwork_jobs
FOR EACH ROW
WHEN NEW.started_at IS NOT NULL
BEGIN
    UPDATE tickwork_rate_limits
    SET next_start = max(next_start,
                         CAST(NEW.started_at AS INTEGER) * starts - (burst - 1) * period_ms)
                     + period_ms
    WHERE ((kind = 'queue' AND key = NEW.queue) OR (kind = 'lane' AND key = NEW.lane))
      AND starts IS NOT NULL;
END;

UPDATE tickwork_meta SET value = '14' WHERE key = 'schema_version';
