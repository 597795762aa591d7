-- tickwork owner-local: rate limits per queue and per lane. Applied by the
-- runtime itself on first open, like 0002. No job row changes.
--
-- One row per queue or lane with a rate limit (a token bucket: starts per
-- period_ms, burst at once) or a hold (an executor's RateLimited: no job of
-- the key starts before held_until), or both. The bucket is stored as GCRA
-- (tickwork.model.rate_limits): next_start, the earliest next start in
-- units of 1/starts ms, so every step is exact integer arithmetic. A claim
-- reads the rows of its candidate's queue and lane inside its own
-- statement (by primary key), and the store spends the start it took in
-- the claim's own transaction (SPEND_RATE), while any bucket is stored:
-- one writer, one transaction, so two claims can never both take a
-- bucket's last start. Not a trigger, as D1's 0014 has: measured with
-- callgrind on a serial no-op tick, rate limits stored or not, D1's trigger
-- cost every claim about 21,700 more instructions, and 16,000 with a WHEN
-- that first asks whether any bucket is stored.
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
