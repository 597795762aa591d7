-- tickwork: the directory of owners, for Cloudflare D1 (SQLite). Apply with
-- `wrangler d1 migrations apply <DB>` after 0009 (0010 and 0011 are other
-- D1 migrations' numbers; apply whichever your package lists, in order).
-- Plain statements only: D1 refuses transaction statements and applies the
-- file as one unit. It adds a table and its indexes; no job row changes.
--
-- Cloudflare cannot list the Durable Objects of a namespace, so each
-- JobOwner registers itself here: one row per owner, written by the owner
-- (tickwork/cloudflare/owner_directory.py) after it first stored a job, and
-- updated with its summary at most once a minute (SUMMARY_INTERVAL_MS), and
-- only while something changed. The owner's own storage is the truth; a row
-- is a summary as of summarised_at, which the owner rewrites whole.
--
-- * owner: the key the Worker addresses the owner by (getByName). BINARY
--   collation: pages by key go in UTF-8 byte order, which is code point
--   order, as tickwork serve lists its owners.
-- * queued: waiting jobs (in the ready set or waiting for their time);
--   overdue: those whose time has come and that have not started; running:
--   claimed; dead_letters: settled failed, outcome_unknown or interrupted
--   and not redriven, counted up to a cap (10,000) so a summary's cost is
--   bounded. last_activity_at: when the owner last stored, ran or settled a
--   job or changed a queue (epoch ms); summarised_at: when the counts were read.
-- * WITHOUT ROWID: the primary key is the table, so a read by key is one
--   b-tree descent and each index entry is (sort column, owner).
CREATE TABLE tickwork_owners (
    owner TEXT NOT NULL PRIMARY KEY CHECK (length(owner) BETWEEN 1 AND 256),
    registered_at INTEGER NOT NULL,
    summarised_at INTEGER NOT NULL,
    last_activity_at INTEGER NOT NULL,
    queued INTEGER NOT NULL CHECK (queued >= 0),
    running INTEGER NOT NULL CHECK (running >= 0),
    overdue INTEGER NOT NULL CHECK (overdue >= 0),
    dead_letters INTEGER NOT NULL CHECK (dead_letters >= 0)
) WITHOUT ROWID;

-- One index per sort of the directory's pages. Each page in a count's (or
-- the last activity's) order, largest first, ties by key from the last, is
-- one backward range scan of its index after the cursor's (value, owner):
-- O(log n + page) rows read whatever the number of owners. Paging by key
-- is a range scan of the primary key. D1 counts a row written for the row
-- and one for each index whose column a statement sets (measured on
-- Miniflare): an owner's first write, an upsert, costs 6; each later one
-- sets only the values that changed since its previous write
-- (tickwork/stores/d1/owner_directory.py), 1 plus one per changed value.
CREATE INDEX tickwork_owners_by_queued ON tickwork_owners (queued, owner);
CREATE INDEX tickwork_owners_by_running ON tickwork_owners (running, owner);
CREATE INDEX tickwork_owners_by_overdue ON tickwork_owners (overdue, owner);
CREATE INDEX tickwork_owners_by_dead_letters ON tickwork_owners (dead_letters, owner);
CREATE INDEX tickwork_owners_by_last_activity ON tickwork_owners (last_activity_at, owner);

UPDATE tickwork_meta SET value = '12' WHERE key = 'schema_version';
