-- tickwork job locks for PostgreSQL (13+): JobLock (tickwork.locks).
-- Apply after 0001 (which creates tickwork_now_ms(), the clock every lock
-- statement reads).
--
-- tickwork_job_locks: one row per lock name, never deleted, so the fence
-- (a counter of acquisitions) never goes back.
-- * owner: the current holder's private random token; NULL once released.
-- * expires_at: end of the lease in database time (epoch ms); NULL once
--   released. Taking the lock over requires owner IS NULL or expires_at <= now.
CREATE TABLE tickwork_job_locks (
    name text PRIMARY KEY CHECK (char_length(name) BETWEEN 1 AND 256),
    owner text,
    fence bigint NOT NULL CHECK (fence >= 1),
    acquired_at bigint NOT NULL,
    expires_at bigint,
    released_at bigint,
    CHECK ((owner IS NULL) = (expires_at IS NULL))
);

-- tickwork_job_locks_slots: the (name, slot) pairs whose run succeeded. A row
-- here refuses every later acquisition for that slot; JobLock.prune_slots
-- deletes old rows (by completed_at, database time).
CREATE TABLE tickwork_job_locks_slots (
    name text NOT NULL,
    slot text NOT NULL CHECK (char_length(slot) BETWEEN 1 AND 256),
    fence bigint NOT NULL,
    completed_at bigint NOT NULL,
    PRIMARY KEY (name, slot)
);

CREATE INDEX tickwork_job_locks_slots_completed ON tickwork_job_locks_slots (completed_at);

UPDATE tickwork_meta SET value = '2' WHERE key = 'schema_version';
