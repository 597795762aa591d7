-- tickwork: rate limits per queue and per lane, for PostgreSQL (13+).
-- Apply after 0016. It adds a table; no job row changes.
--
-- One row per queue or lane with a rate limit or a hold
-- (tickwork.model.rate_limits, which says why the bucket is stored so):
--
-- * The bucket: starts per period_ms, burst at once (all three NULL for a
--   key that only has a hold). next_start is the GCRA's earliest next
--   start in units of 1/starts ms (0: full): a claim at now is allowed when
--   next_start <= now * starts and moves it to
--   greatest(next_start, now * starts - (burst - 1) * period_ms) + period_ms.
--   All bigint: now * starts reaches about 4e17.
-- * held_until: an executor's RateLimited, no start before it (epoch ms;
--   0: none). A hold no longer in force is left in place (the next one
--   overwrites it); nothing reads it as a hold.
-- * updated_at: when the bucket (or, for a row that only has a hold, the
--   row) was stored (epoch ms).
CREATE TABLE tickwork_rate_limits (
    kind text NOT NULL CHECK (kind IN ('queue', 'lane')),
    key text NOT NULL,
    starts bigint CHECK (starts BETWEEN 1 AND 100000),
    period_ms bigint CHECK (period_ms BETWEEN 1 AND 2678400000),
    burst bigint CHECK (burst BETWEEN 1 AND 100000),
    next_start bigint NOT NULL DEFAULT 0 CHECK (next_start >= 0),
    held_until bigint NOT NULL DEFAULT 0,
    updated_at bigint NOT NULL,
    PRIMARY KEY (kind, key),
    CHECK ((starts IS NULL) = (period_ms IS NULL) AND (starts IS NULL) = (burst IS NULL))
);

UPDATE tickwork_meta SET value = '17' WHERE key = 'schema_version';
