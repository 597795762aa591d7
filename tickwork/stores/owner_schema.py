"""The owner-local schema, created and versioned by the runtime itself.

A Durable Object has no migration tool and no ``PRAGMA user_version``, so the
version lives in ``tickwork_meta`` and every runtime construction runs
``ensure_schema`` (idempotent; a handful of no-op statements once created).

``SCHEMA_SQL`` is ``schema/owner_local/0001_tickwork_jobs.sql`` and
``DUE_TIMES_SQL`` is ``0002_due_times.sql``, ``PAUSED_QUEUES_SQL``
``0003_paused_queues.sql``, ``RETRIES_SQL`` ``0004_retries.sql``,
``SCHEDULES_SQL`` ``0005_schedules.sql``, ``ERROR_SUMMARIES_SQL``
``0006_error_summaries.sql``, ``BROWSE_SQL`` ``0007_browse.sql``,
``LIGHT_CHECKS_SQL`` ``0008_light_checks.sql``, ``BATCHED_ENTRIES_SQL``
``0009_batched_entries.sql``, ``BATCHED_QUEUE_ORDER_SQL``
``0010_batched_queue_order.sql``, ``RETENTION_SQL`` ``0011_retention.sql``,
``HISTORY_SQL`` ``0012_history.sql``, ``LIMITS_SQL`` ``0013_limits.sql``,
``RATE_LIMITS_SQL`` ``0014_rate_limits.sql`` and ``TURNS_SQL``
``0015_turns.sql``, character for character (the tests pin them equal):
the package cannot read those files inside a Worker, so the text
lives here too, and the files are where people read it beside the D1 and
PostgreSQL schemas. A database written by an older tickwork is
upgraded in place on first open, step by step, in one transaction.
"""

from __future__ import annotations

from tickwork.model.errors import SchemaError
from tickwork.ports.database import SyncDatabase
from tickwork.schemas import split_statements

SCHEMA_VERSION = 15

#: schema/owner_local/0001_tickwork_jobs.sql
SCHEMA_SQL = """-- tickwork owner-local job table: one owner's jobs in its own SQLite database
-- (a Durable Object's storage, or a sqlite3 file).
-- Not applied by a migration tool: OwnerRuntime creates it itself on first
-- use (tickwork/stores/owner_schema.py holds this very text, and the tests
-- pin the two equal). It is here so every store's DDL is in schema/.
--
-- The table is D1's (schema/d1) without leases: an owner-local claim is
-- fenced on its token alone and its liveness is asked of the host, so there
-- is no lease_expires_at and no lease index. Python validates every job
-- before it is stored, and no producer SQL writes here, so the column CHECKs
-- and the cargo trigger D1 needs for enqueue_from_select are left out.
--
-- * sequence: enqueue order. AUTOINCREMENT so a purged tail is never reused
--   and "after_sequence" paging stays monotonic.
-- * claim_token: the private token of the latest claim. Every transition out
--   of 'running' is fenced on it, so a stale claim can never settle or
--   requeue a job another claim (or a failed lane) already moved.
-- * cancellation_id: the one durable cancellation a job can carry.
-- Times are integer milliseconds since the epoch, from the runtime's clock.

CREATE TABLE IF NOT EXISTS tickwork_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS tickwork_jobs (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL UNIQUE,
    queue TEXT NOT NULL,
    lane TEXT NOT NULL,
    priority INTEGER NOT NULL,
    payload_json TEXT NOT NULL,
    max_recoveries INTEGER,
    state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'settled')),
    outcome TEXT CHECK (outcome IN
        ('completed', 'failed', 'cancelled', 'outcome_unknown', 'interrupted')),
    failure_reason TEXT,
    claim_token TEXT,
    recoveries INTEGER NOT NULL DEFAULT 0,
    cancellation_id TEXT,
    enqueued_at INTEGER NOT NULL,
    started_at INTEGER,
    settled_at INTEGER,
    CHECK ((state = 'settled') = (outcome IS NOT NULL)),
    CHECK (state <> 'running' OR claim_token IS NOT NULL)
);

-- Claim scan: runnable jobs in global pick order (priority desc, oldest
-- first). The claim walks it from the front and stops at the first job whose
-- queue is free, so it costs O(log n), not O(queue depth).
CREATE INDEX IF NOT EXISTS tickwork_jobs_runnable
    ON tickwork_jobs (priority DESC, sequence)
    WHERE state = 'queued' AND cancellation_id IS NULL;

-- A queue's waiting jobs in head order: read_queue_head, purge.
CREATE INDEX IF NOT EXISTS tickwork_jobs_queue_waiting
    ON tickwork_jobs (queue, priority DESC, sequence)
    WHERE state = 'queued';

-- Running claims are few; this makes "is this queue busy?" and the liveness
-- probe index lookups. (Not UNIQUE, unlike D1's: one writer, and the claim
-- never picks a busy queue.)
CREATE INDEX IF NOT EXISTS tickwork_jobs_running
    ON tickwork_jobs (queue)
    WHERE state = 'running';

-- Cancelled jobs still queued: settled by the next tick without running.
CREATE INDEX IF NOT EXISTS tickwork_jobs_cancel_pending
    ON tickwork_jobs (sequence)
    WHERE state = 'queued' AND cancellation_id IS NOT NULL;

-- Failing a lane: a lane's unsettled jobs, oldest first. state is not in the
-- key, so a claim (queued -> running) does not touch this index.
CREATE INDEX IF NOT EXISTS tickwork_jobs_lane_pending
    ON tickwork_jobs (lane, sequence)
    WHERE state IN ('queued', 'running');

-- A queue's settled jobs, newest last: read_latest_settled_job, and the
-- settled counts of queue_status (D1's is (queue, outcome), 0003).
CREATE INDEX IF NOT EXISTS tickwork_jobs_queue_settled
    ON tickwork_jobs (queue, settled_at, sequence)
    WHERE state = 'settled';
"""

#: schema/owner_local/0002_due_times.sql (pinned equal like SCHEMA_SQL)
DUE_TIMES_SQL = """-- tickwork owner-local: jobs with a due time (run_at / delay_ms).
-- Applied by the runtime itself, in the same transaction as the version
-- bump, the first time a newer tickwork opens an older database (every
-- deployed Durable Object upgrades in place this way). Existing rows keep
-- every value: their new columns are NULL, which means "due at once",
-- exactly what they were.
--
-- * run_at, delay_ms: when the job was asked to run (epoch ms, or a delay
--   from ingest by the runtime's clock); part of the job's cargo, compared
--   as asked on replay.
-- * due_at: while the job waits for its time, when it becomes due; cleared
--   when it does (the tick moves due jobs into the ready set).
ALTER TABLE tickwork_jobs ADD COLUMN run_at INTEGER;
ALTER TABLE tickwork_jobs ADD COLUMN delay_ms INTEGER;
ALTER TABLE tickwork_jobs ADD COLUMN due_at INTEGER;

-- The claim scan holds only jobs that are due: a claim never steps over a
-- job waiting for its time, however many wait.
DROP INDEX tickwork_jobs_runnable;
CREATE INDEX tickwork_jobs_runnable
    ON tickwork_jobs (priority DESC, sequence)
    WHERE state = 'queued' AND cancellation_id IS NULL AND due_at IS NULL;

-- A queue's waiting jobs in head order, with their due times, so a queue's
-- due and delayed counts come from the index alone.
DROP INDEX tickwork_jobs_queue_waiting;
CREATE INDEX tickwork_jobs_queue_waiting
    ON tickwork_jobs (queue, priority DESC, sequence, due_at)
    WHERE state = 'queued';

-- Jobs waiting for their time, earliest first: moving due jobs into the
-- ready set, and the next due time a host's alarm or timer is armed for.
CREATE INDEX tickwork_jobs_due
    ON tickwork_jobs (due_at)
    WHERE state = 'queued' AND due_at IS NOT NULL;
"""

#: schema/owner_local/0003_paused_queues.sql (pinned equal like SCHEMA_SQL)
PAUSED_QUEUES_SQL = """-- tickwork owner-local: paused queues.
-- Applied by the runtime itself on first open, like 0002.
--
-- A queue named here is paused: no tick claims its jobs (running ones
-- finish; cancellations and lane failures still settle). Pausing inserts
-- the row, resuming deletes it, so both are idempotent.
CREATE TABLE tickwork_paused_queues (
    queue TEXT NOT NULL PRIMARY KEY,
    paused_at INTEGER NOT NULL
);
"""

#: schema/owner_local/0004_retries.sql (pinned equal like SCHEMA_SQL)
RETRIES_SQL = """-- tickwork owner-local: retries with backoff, attempt history, dead letters
-- and redrive. Applied by the runtime itself on first open, like 0002.
-- Existing rows keep every value: a job without a retry policy is on its
-- first attempt with no history, exactly what every job was.
--
-- * retry_json: the job's retry policy as canonical JSON (cargo), or NULL.
-- * attempt: which attempt the job is on (1-based; a redrive starts again).
-- * history_json: the attempts before this one, a JSON array of at most 20
--   {attempt, outcome, reason, started_at, ended_at[, redrive_id]}, oldest
--   first; NULL until the first retry or redrive.
ALTER TABLE tickwork_jobs ADD COLUMN retry_json TEXT;
ALTER TABLE tickwork_jobs ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;
ALTER TABLE tickwork_jobs ADD COLUMN history_json TEXT;

-- A queue's dead letters (settled failed, outcome_unknown or interrupted),
-- in settlement order: listing them newest first, a page at a time, costs
-- O(log n + page) however much completed history the queue keeps.
CREATE INDEX tickwork_jobs_dead
    ON tickwork_jobs (queue, settled_at, sequence)
    WHERE state = 'settled' AND outcome IN ('failed', 'outcome_unknown', 'interrupted');

-- Every redrive id applied to a job, so a replay of any of them (not only
-- the latest) is answered "replayed" and never starts another chain.
CREATE TABLE tickwork_redrives (
    job_id TEXT NOT NULL,
    redrive_id TEXT NOT NULL,
    redriven_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, redrive_id)
);
"""

#: schema/owner_local/0005_schedules.sql (pinned equal like SCHEMA_SQL)
SCHEDULES_SQL = """-- tickwork owner-local: durable schedules. Applied by the runtime itself on
-- first open, like 0002.
--
-- * spec_json: the schedule as canonical JSON (cron or every_ms, catch_up,
--   the job template); a replace changes it, and every slot's insert is
--   fenced on it, so a slot computed from an older definition adds nothing.
-- * next_at: the first slot that has no job yet (epoch ms). A tick creates
--   the jobs of the slots up to now and moves it past now, in one
--   transaction; each slot's job id is the name and the slot, so no slot
--   gets two jobs.
CREATE TABLE tickwork_schedules (
    name TEXT NOT NULL PRIMARY KEY,
    spec_json TEXT NOT NULL,
    next_at INTEGER NOT NULL,
    paused INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

-- The earliest next slot of the schedules that run: when a tick next has a
-- slot to fill, for the host's alarm or timer.
CREATE INDEX tickwork_schedules_next
    ON tickwork_schedules (next_at)
    WHERE paused = 0;
"""

#: schema/owner_local/0006_error_summaries.sql (pinned equal like SCHEMA_SQL)
ERROR_SUMMARIES_SQL = """-- tickwork owner-local: error summaries. Applied by the runtime itself on
-- first open, like 0002. Existing rows keep every value: their error_json is
-- NULL, "no error kept", which is what tickwork knew of them.
--
-- * error_json: what the latest ended attempt's executor raised, as JSON
--   {type, message, traceback} (at most 200, 2,000 and 8,000 characters),
--   or NULL when it did not raise. History entries keep its short line
--   ("Type: message", at most 300 characters) as their "error".
ALTER TABLE tickwork_jobs ADD COLUMN error_json TEXT;
"""

#: schema/owner_local/0007_browse.sql (pinned equal like SCHEMA_SQL)
BROWSE_SQL = """-- tickwork owner-local: browsing jobs a page at a time (list_jobs). Applied
-- by the runtime itself on first open, like 0002. Only indexes: no row
-- changes. Every page of list_jobs is one range scan of one of them (or of
-- an index it already had), O(log n + page) however many jobs are stored.
--
-- A queue's queued and running jobs in enqueue order. state is not in the
-- key, so a claim (queued -> running) does not touch this index; ingest adds
-- an entry and settlement removes it (like tickwork_jobs_lane_pending).
CREATE INDEX tickwork_jobs_queue_pending
    ON tickwork_jobs (queue, sequence)
    WHERE state IN ('queued', 'running');

-- A queue's settled jobs of one outcome in settlement order (the failures
-- among a long completed history). It also covers queue_status's counts per
-- outcome, which no longer read a row each.
CREATE INDEX tickwork_jobs_queue_outcomes
    ON tickwork_jobs (queue, outcome, settled_at, sequence)
    WHERE state = 'settled';

-- A lane's settled jobs in settlement order (its queued and running ones
-- go through tickwork_jobs_lane_pending).
CREATE INDEX tickwork_jobs_lane_settled
    ON tickwork_jobs (lane, settled_at, sequence)
    WHERE state = 'settled';
"""

#: schema/owner_local/0008_light_checks.sql (pinned equal like SCHEMA_SQL)
LIGHT_CHECKS_SQL = """-- tickwork owner-local: the same table and indexes, with every constraint
-- and index condition written without a list of three or more values.
-- Applied by the runtime itself on first open, like 0002. Every row keeps
-- every value, its sequence and the AUTOINCREMENT high-water mark.
--
-- Why: SQLite evaluates "x IN ('a', 'b', 'c')" (three or more constants) by
-- building a temporary b-tree of the values, every time a statement
-- evaluates it. The CHECKs on state and outcome run on every insert and on
-- every claim and settlement (they change state), and tickwork_jobs_dead's
-- condition on every settlement: measured on sqlite3 :memory:, a third of a
-- raw insert's instructions and of a raw claim+settle's went to building
-- those b-trees. The same conditions as chains of "=" are compared in place.
-- A CHECK cannot be altered in SQLite, so the table is rebuilt (SQLite's
-- documented way: create, copy, drop, rename), inside the upgrade's one
-- transaction, and its indexes made again (the dead letters' one as a chain
-- of "=", which DEAD_LETTERS spells out so the planner proves it applies).

CREATE TABLE tickwork_jobs_0008 (
    sequence INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL UNIQUE,
    queue TEXT NOT NULL,
    lane TEXT NOT NULL,
    priority INTEGER NOT NULL,
    payload_json TEXT NOT NULL,
    max_recoveries INTEGER,
    state TEXT NOT NULL CHECK (state = 'queued' OR state = 'running' OR state = 'settled'),
    outcome TEXT CHECK (outcome = 'completed' OR outcome = 'failed' OR outcome = 'cancelled'
        OR outcome = 'outcome_unknown' OR outcome = 'interrupted'),
    failure_reason TEXT,
    claim_token TEXT,
    recoveries INTEGER NOT NULL DEFAULT 0,
    cancellation_id TEXT,
    enqueued_at INTEGER NOT NULL,
    started_at INTEGER,
    settled_at INTEGER,
    run_at INTEGER,
    delay_ms INTEGER,
    due_at INTEGER,
    retry_json TEXT,
    attempt INTEGER NOT NULL DEFAULT 1,
    history_json TEXT,
    error_json TEXT,
    CHECK ((state = 'settled') = (outcome IS NOT NULL)),
    CHECK (state <> 'running' OR claim_token IS NOT NULL)
);

INSERT INTO tickwork_jobs_0008
    (sequence, job_id, queue, lane, priority, payload_json, max_recoveries, state, outcome,
     failure_reason, claim_token, recoveries, cancellation_id, enqueued_at, started_at,
     settled_at, run_at, delay_ms, due_at, retry_json, attempt, history_json, error_json)
SELECT sequence, job_id, queue, lane, priority, payload_json, max_recoveries, state, outcome,
       failure_reason, claim_token, recoveries, cancellation_id, enqueued_at, started_at,
       settled_at, run_at, delay_ms, due_at, retry_json, attempt, history_json, error_json
FROM tickwork_jobs ORDER BY sequence;

-- The high-water mark: when the newest jobs were purged, the old table's
-- AUTOINCREMENT counter is above every stored sequence. A placeholder row at
-- that sequence carries it over (the new table's counter never goes back),
-- and is deleted at once (no job_id is empty).
INSERT INTO tickwork_jobs_0008 (sequence, job_id, queue, lane, priority, payload_json, state,
                                enqueued_at)
SELECT seq, '', '', '', 0, '', 'queued', 0 FROM sqlite_sequence
WHERE name = 'tickwork_jobs'
  AND seq > (SELECT coalesce(max(sequence), 0) FROM tickwork_jobs);
DELETE FROM tickwork_jobs_0008 WHERE job_id = '';

DROP TABLE tickwork_jobs;
ALTER TABLE tickwork_jobs_0008 RENAME TO tickwork_jobs;

-- Every index again, as 0001-0007 left it, but the dead letters'.
CREATE INDEX tickwork_jobs_runnable
    ON tickwork_jobs (priority DESC, sequence)
    WHERE state = 'queued' AND cancellation_id IS NULL AND due_at IS NULL;
CREATE INDEX tickwork_jobs_queue_waiting
    ON tickwork_jobs (queue, priority DESC, sequence, due_at)
    WHERE state = 'queued';
CREATE INDEX tickwork_jobs_running
    ON tickwork_jobs (queue)
    WHERE state = 'running';
CREATE INDEX tickwork_jobs_cancel_pending
    ON tickwork_jobs (sequence)
    WHERE state = 'queued' AND cancellation_id IS NOT NULL;
CREATE INDEX tickwork_jobs_lane_pending
    ON tickwork_jobs (lane, sequence)
    WHERE state IN ('queued', 'running');
CREATE INDEX tickwork_jobs_queue_settled
    ON tickwork_jobs (queue, settled_at, sequence)
    WHERE state = 'settled';
CREATE INDEX tickwork_jobs_due
    ON tickwork_jobs (due_at)
    WHERE state = 'queued' AND due_at IS NOT NULL;
CREATE INDEX tickwork_jobs_dead
    ON tickwork_jobs (queue, settled_at, sequence)
    WHERE state = 'settled'
      AND (outcome = 'failed' OR outcome = 'outcome_unknown' OR outcome = 'interrupted');
CREATE INDEX tickwork_jobs_queue_pending
    ON tickwork_jobs (queue, sequence)
    WHERE state IN ('queued', 'running');
CREATE INDEX tickwork_jobs_queue_outcomes
    ON tickwork_jobs (queue, outcome, settled_at, sequence)
    WHERE state = 'settled';
CREATE INDEX tickwork_jobs_lane_settled
    ON tickwork_jobs (lane, settled_at, sequence)
    WHERE state = 'settled';
"""

#: schema/owner_local/0009_batched_entries.sql (pinned equal like SCHEMA_SQL)
BATCHED_ENTRIES_SQL = """-- tickwork owner-local: new jobs enter the indexes of unsettled jobs, and
-- settled ones the history indexes, in batches. Applied by the runtime
-- itself on first open, like 0002. Every row keeps every value; every row
-- is listed and every settled row filed at once.
--
-- Why: a commit writes every b-tree it changes to the WAL, a frame per
-- changed page. An ingest changed seven (the row, the job id's unique
-- index, the AUTOINCREMENT counter, the claim's order, the queue's waiting
-- jobs, and the unsettled jobs by queue and by lane) and a settlement seven
-- (the row, the running index, those two again, and the three history
-- indexes by queue, by outcome and by lane). Entries written a batch at a
-- time share the pages they change (docs/explanation/architecture.md has
-- what that saves). So a row now carries two flags:
--
-- * listed: 0 for a row inserted after the last listing; 1 once it is in
--   the indexes of unsettled jobs by queue and by lane. The runtime lists
--   every new row at once every LIST_EVERY inserts (one statement, and the
--   sequence listed through kept in tickwork_meta as 'listed_through';
--   tickwork/stores/index_batching.py decides when).
--   Rows come in sequence order, so the unlisted rows are exactly those
--   after 'listed_through': a read of unsettled jobs also reads them, by
--   the primary key (at most a few hundred rows).
-- * filed: 0 while a job is queued or running and, for a settlement made
--   by drain(), for a while after it settles; 1 once its settlement is in
--   the history indexes. The indexes of unsettled jobs hold the listed rows
--   with filed = 0, so the drain's settlement leaves them alone, and the
--   history indexes every filed row. drain() files up to FILE_EVERY
--   settled rows at once, in the commit of a later settlement. Between the
--   two a settled row is in tickwork_jobs_unfiled: every read of settled
--   history reads that index too. Every other settlement files its row in its own
--   statement, as before.
--
-- What a read returns does not depend on either flag.

ALTER TABLE tickwork_jobs ADD COLUMN listed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tickwork_jobs ADD COLUMN filed INTEGER NOT NULL DEFAULT 0
    CHECK (filed = 0 OR state = 'settled');

DROP INDEX tickwork_jobs_queue_pending;
DROP INDEX tickwork_jobs_lane_pending;
DROP INDEX tickwork_jobs_queue_settled;
DROP INDEX tickwork_jobs_queue_outcomes;
DROP INDEX tickwork_jobs_lane_settled;
DROP INDEX tickwork_jobs_dead;

UPDATE tickwork_jobs SET listed = 1, filed = (state = 'settled');
INSERT INTO tickwork_meta (key, value)
SELECT 'listed_through', CAST(coalesce(max(sequence), 0) AS TEXT) FROM tickwork_jobs;

-- Unsettled jobs (and the drain's settlements not filed yet), by queue and
-- by lane, in enqueue order, once listed.
CREATE INDEX tickwork_jobs_queue_pending
    ON tickwork_jobs (queue, sequence)
    WHERE listed = 1 AND filed = 0;
CREATE INDEX tickwork_jobs_lane_pending
    ON tickwork_jobs (lane, sequence)
    WHERE listed = 1 AND filed = 0;
-- Filed settlements: as 0007 and 0008 made them, for filed rows.
CREATE INDEX tickwork_jobs_queue_settled
    ON tickwork_jobs (queue, settled_at, sequence)
    WHERE filed = 1;
CREATE INDEX tickwork_jobs_queue_outcomes
    ON tickwork_jobs (queue, outcome, settled_at, sequence)
    WHERE filed = 1;
CREATE INDEX tickwork_jobs_lane_settled
    ON tickwork_jobs (lane, settled_at, sequence)
    WHERE filed = 1;
CREATE INDEX tickwork_jobs_dead
    ON tickwork_jobs (queue, settled_at, sequence)
    WHERE filed = 1
      AND (outcome = 'failed' OR outcome = 'outcome_unknown' OR outcome = 'interrupted');
-- Settlements not filed yet (few: drain() files them every FILE_EVERY settlements).
CREATE INDEX tickwork_jobs_unfiled
    ON tickwork_jobs (queue, settled_at, sequence)
    WHERE filed = 0 AND state = 'settled';
"""

#: schema/owner_local/0010_batched_queue_order.sql (pinned equal like SCHEMA_SQL)
BATCHED_QUEUE_ORDER_SQL = """-- tickwork owner-local: a queue's jobs in pick order,
-- indexed in the batches of 0009. Applied by the runtime itself on first
-- open, like 0002.
--
-- Why: tickwork_jobs_queue_waiting held the queued jobs by (queue,
-- priority, sequence), so every ingest added an entry and every claim took
-- one away: a page more in each of the two commits a drained job makes.
-- Its successor holds the same keys for the rows 0009 keeps in the indexes
-- of unsettled jobs (listed, not filed), so a row enters it when it is
-- listed and leaves it when it is filed, in the batches of 0009, and
-- neither a claim nor a settlement writes it.
--
-- What it costs: a read of a queue's waiting jobs (its head, its counts, a
-- purge, the concurrent lane's head check) reads each row's state from the
-- table, steps over the queue's running jobs and the settlements not filed
-- yet (a few dozen at most), and reads the unlisted rows by the primary key.

DROP INDEX tickwork_jobs_queue_waiting;
CREATE INDEX tickwork_jobs_queue_order
    ON tickwork_jobs (queue, priority DESC, sequence, due_at)
    WHERE listed = 1 AND filed = 0;
"""

#: schema/owner_local/0011_retention.sql (pinned equal like SCHEMA_SQL)
RETENTION_SQL = """-- tickwork owner-local: retention policies. Applied by the runtime itself on
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
"""

#: schema/owner_local/0012_history.sql (pinned equal like SCHEMA_SQL)
HISTORY_SQL = """-- tickwork owner-local: the history of every queue over time, a row per
-- queue per minute. Applied by the runtime itself on first open, like 0002.
--
-- One row per queue per minute in which a runtime counted anything or
-- sampled the queue. The runtimes do not count here as each transition
-- commits: each keeps its counts in memory (the jobs table stays the
-- record) and adds them to these rows with one upsert, in (queue, minute)
-- order, once the minute has turned, after each host loop, before it
-- answers a history read, and on close. A process that dies before that
-- loses the counts of its last minute or so.
--
-- * minute: the bucket's start, epoch milliseconds, a multiple of 60,000,
--   by the clock of the runtime that counted the transition.
-- * enqueued: jobs stored, and dead letters redriven. started: attempts
--   begun (a claim taken ahead and put back unstarted is not one).
--   completed, failed (failed, outcome_unknown, interrupted), cancelled:
--   settlements. retried: failed attempts put back for another. Counts
--   only grow: a redrive adds to enqueued and leaves its failure counted.
-- * depth, oldest_age_ms: sampled at most once a minute per runtime with a
--   flush: the queue's waiting jobs counted up to 10,000 (a row holding
--   10,001 means "more"), and how long its head job (the next to run) has
--   been ready; NULL when nothing sampled the queue that minute.
-- Minutes older than 7 days are deleted with retention, a bounded batch at
-- a time, by tickwork_queue_history_minute.

CREATE TABLE tickwork_queue_history (
    queue TEXT NOT NULL,
    minute INTEGER NOT NULL,
    enqueued INTEGER NOT NULL DEFAULT 0,
    started INTEGER NOT NULL DEFAULT 0,
    completed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    cancelled INTEGER NOT NULL DEFAULT 0,
    retried INTEGER NOT NULL DEFAULT 0,
    depth INTEGER,
    oldest_age_ms INTEGER,
    PRIMARY KEY (queue, minute)
) WITHOUT ROWID;

CREATE INDEX tickwork_queue_history_minute ON tickwork_queue_history (minute);
"""

#: schema/owner_local/0013_limits.sql (pinned equal like SCHEMA_SQL)
LIMITS_SQL = """-- tickwork owner-local: concurrency limits per queue and per lane. Applied
-- by the runtime itself on first open, like 0002. No job row changes.
--
-- One row per queue or lane with a limit of its own: at most max_running of
-- its jobs run at once. A queue without a row runs one job at a time (the
-- serial queue head, as before this table existed); a lane without a row
-- has no limit of its own. Every claim reads this table inside its own
-- statement, so a change is obeyed by the next claim, and two claims can
-- never both take a limit's last place (one writer, one statement).
CREATE TABLE tickwork_limits (
    kind TEXT NOT NULL CHECK (kind IN ('queue', 'lane')),
    key TEXT NOT NULL,
    max_running INTEGER NOT NULL CHECK (max_running BETWEEN 1 AND 10000),
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (kind, key)
);

-- No index of running jobs by lane: a claim that must count a lane's running
-- jobs (only when the lane has a limit row) walks every running entry of
-- tickwork_jobs_running, which on one owner are the claims its slots execute
-- (at most its concurrency) and any a crash left for recovery. An index by
-- lane would be kept up to date by every claim and settlement, limits or
-- not: measured, it cost the serial no-op tick about 2.7% more instructions
-- (callgrind) even for jobs it held no entry for. D1, shared by many
-- workers, has one (its 0013).
"""

#: schema/owner_local/0014_rate_limits.sql (pinned equal like SCHEMA_SQL)
RATE_LIMITS_SQL = """-- tickwork owner-local: rate limits per queue and per lane. Applied by the
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
"""

#: schema/owner_local/0015_turns.sql (pinned equal like SCHEMA_SQL)
TURNS_SQL = """-- tickwork owner-local: fair turns between the lanes of a wide queue (a
-- limit above one). Applied by the runtime itself on first open, like 0002.
-- No job row changes.
--
-- A wide queue keeps a line of its lanes with a ready job: a row per lane,
-- a lower turn nearer the front. A lane joins at the back (the queue's
-- highest turn plus one) when one of its jobs becomes ready and it is not
-- in the line; a claim in a wide queue takes the best job of the first lane
-- in the line that can start one, and that lane goes to the back, or
-- leaves once it has no ready job (tickwork/stores/sql/sqlite.py, "fair
-- turns", has the rule and every statement). So a tenant with 10,000
-- ready jobs does not hold back a tenant with one. A serial queue has no
-- line. No trigger keeps the line (one cost more on every serial claim):
-- the store runs the line's statements in the transaction of each change
-- that needs them, and only while a wide queue exists (owner-local has one
-- writer, the store, which knows it).
CREATE TABLE tickwork_turns (
    queue TEXT NOT NULL,
    lane TEXT NOT NULL,
    turn INTEGER NOT NULL,
    PRIMARY KEY (queue, lane)
) WITHOUT ROWID;

-- A queue's line from the front (the claim's walk), and its back (the next
-- turn: one probe for max(turn)).
CREATE INDEX tickwork_turns_order ON tickwork_turns (queue, turn);

-- A claim in a wide queue reads a lane's jobs in the queue in pick order
-- through tickwork_jobs_lane_order (queue, lane, due_at, priority DESC,
-- sequence), written in the batches of 0009 like 0010's queue order. That
-- index is not made here: the store creates it when a queue becomes wide
-- and drops it once none is (tickwork/stores/sql/sqlite.py,
-- LANE_ORDER_INDEX), so the rows of an owner without a wide queue write no
-- entry. Measured with callgrind (runs of 3,000 and 1,000 no-op jobs in
-- 50 queues, each job's ingest and tick), the index of every listed row,
-- made here, cost a serial job about 3% more instructions; made by the
-- store while a queue is wide, nothing a run's spread shows.

-- The queues already wide when this runs get their line: every lane with a
-- ready job, in order of its oldest ready job (its sequence is its turn).
INSERT INTO tickwork_turns (queue, lane, turn)
SELECT queue, lane, min(sequence) FROM tickwork_jobs
WHERE state = 'queued' AND due_at IS NULL AND cancellation_id IS NULL
  AND queue IN (SELECT key FROM tickwork_limits WHERE kind = 'queue' AND max_running > 1)
GROUP BY queue, lane;
"""

#: The statements of SCHEMA_SQL; the first creates tickwork_meta.
SCHEMA_STATEMENTS = tuple(split_statements(SCHEMA_SQL))

#: What takes a database from version N - 1 to N, for N = 1, 2, ...
UPGRADES: tuple[tuple[str, ...], ...] = (
    SCHEMA_STATEMENTS[1:],
    tuple(split_statements(DUE_TIMES_SQL)),
    tuple(split_statements(PAUSED_QUEUES_SQL)),
    tuple(split_statements(RETRIES_SQL)),
    tuple(split_statements(SCHEDULES_SQL)),
    tuple(split_statements(ERROR_SUMMARIES_SQL)),
    tuple(split_statements(BROWSE_SQL)),
    tuple(split_statements(LIGHT_CHECKS_SQL)),
    tuple(split_statements(BATCHED_ENTRIES_SQL)),
    tuple(split_statements(BATCHED_QUEUE_ORDER_SQL)),
    tuple(split_statements(RETENTION_SQL)),
    tuple(split_statements(HISTORY_SQL)),
    tuple(split_statements(LIMITS_SQL)),
    tuple(split_statements(RATE_LIMITS_SQL)),
    tuple(split_statements(TURNS_SQL)),
)
assert len(UPGRADES) == SCHEMA_VERSION


def ensure_schema(database: SyncDatabase) -> None:
    """Create the tables on first use; refuse a schema newer than this package."""

    def apply() -> None:
        database.execute(SCHEMA_STATEMENTS[0])  # tickwork_meta, where the version lives
        rows = database.query("SELECT value FROM tickwork_meta WHERE key = 'schema_version'")
        stored = int(rows[0][0]) if rows else 0
        if stored > SCHEMA_VERSION:
            raise SchemaError(
                f"the tickwork tables were written by schema version {stored}; this "
                f"package understands up to version {SCHEMA_VERSION}: upgrade tickwork"
            )
        if stored == SCHEMA_VERSION:
            return
        # Every step from the stored version on, in this one transaction: an
        # upgrade that fails leaves the database as it was.
        for step in UPGRADES[stored:]:
            for statement in step:
                database.execute(statement)
        database.execute(
            "INSERT OR REPLACE INTO tickwork_meta (key, value) VALUES ('schema_version', ?)",
            (str(SCHEMA_VERSION),),
        )

    database.atomic(apply)
