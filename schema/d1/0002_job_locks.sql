-- tickwork job locks for Cloudflare D1 (SQLite): JobLock (tickwork.locks).
-- Apply with `wrangler d1 migrations apply <DB>` after 0001. Plain statements
-- only: D1 refuses transaction statements and applies the file as one unit.
--
-- tickwork_job_locks: one row per lock name, never deleted, so the fence
-- (a counter of acquisitions) never goes back.
-- * owner: the current holder's private random token; NULL once released.
-- * expires_at: end of the lease in database time (epoch ms); NULL once
--   released. Taking the lock over requires owner IS NULL or expires_at <= now.
CREATE TABLE tickwork_job_locks (
    name TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 256),
    owner TEXT,
    fence INTEGER NOT NULL CHECK (fence >= 1),
    acquired_at INTEGER NOT NULL,
    expires_at INTEGER,
    released_at INTEGER,
    CHECK ((owner IS NULL) = (expires_at IS NULL))
);

-- tickwork_job_locks_slots: the (name, slot) pairs whose run succeeded. A row
-- here refuses every later acquisition for that slot; JobLock.prune_slots
-- deletes old rows (by completed_at, database time).
CREATE TABLE tickwork_job_locks_slots (
    name TEXT NOT NULL,
    slot TEXT NOT NULL CHECK (length(slot) BETWEEN 1 AND 256),
    fence INTEGER NOT NULL,
    completed_at INTEGER NOT NULL,
    PRIMARY KEY (name, slot)
);

CREATE INDEX tickwork_job_locks_slots_completed ON tickwork_job_locks_slots (completed_at);

UPDATE tickwork_meta SET value = '2' WHERE key = 'schema_version';
