"""Every SQL statement the PostgreSQL runtime runs (psycopg ``%(name)s`` parameters).

One statement per transition. The hot path, settlements and claims of many
ticks at once, is SETTLE_THEN_CLAIM: a call of the schema's
tickwork_settle_then_claim function (its SQL and comments live in
schema/postgres/0010_queue_claims.sql), which is how concurrent ticks share
one commit (see ``batching.py``). ``{NOW}`` is database time in epoch
milliseconds, evaluated once per statement (an InitPlan), unless the test
clock override ``%(now)s`` is given.
"""

from __future__ import annotations

from typing import Final

from tickwork.stores.rows import CARGO_COLUMNS, JOB_SELECT, Columns, select_list
from tickwork.stores.rows import JOB_COLUMNS as NAMES

NOW = "(SELECT coalesce(%(now)s::bigint, tickwork_now_ms()))"

# The job columns and their decoding are the same for every store
# (tickwork.stores.rows); the statements below select them by name.


def _qualified(alias: str) -> str:
    return select_list(NAMES, alias)


SCHEMA_VERSION = "SELECT value FROM tickwork_meta WHERE key = 'schema_version'"

# When a new job becomes due, by database time at ingest: at run_at if that
# is still ahead, after delay_ms if that is positive, else at once (NULL: a
# job due at once never enters the due-time index). ``{run_at}`` and
# ``{delay_ms}`` name where the values come from.
_DUE_AT = ("CASE WHEN {run_at} IS NOT NULL THEN (CASE WHEN {run_at} > {now} THEN {run_at} END)"
           " WHEN {delay_ms} > 0 THEN {now} + {delay_ms} END")
_BOUND_DUE_AT = _DUE_AT.format(run_at="%(run_at)s::bigint", delay_ms="%(delay_ms)s::bigint",
                               now=NOW)

# Fair turns (schema/postgres/0018_turns.sql): every statement that makes
# jobs ready (queued, due, not cancelled) has the jobs it wrote return these
# columns, in a CTE named ``job``, and ends its WITH list with
# _JOIN_LINES, which joins the lanes of those in wide queues (a queue limit
# above 1) to their lines, in sequence order (tickwork_join_line, which
# locks or inserts each lane's row; 0018 says why). The main query reads
# ``joined`` (one row, always: an aggregate), so the CTE runs. While no
# queue is wide, the InitPlan's probe of tickwork_limits stops it: no row
# reaches the aggregate, and tickwork_join_line (STRICT) is not called.
_READY_COLUMNS = "sequence, queue, lane, state, due_at, cancellation_id"
_JOIN_LINES = """joined AS (
    SELECT tickwork_join_line(array_agg(ready.queue ORDER BY ready.sequence),
                              array_agg(ready.lane ORDER BY ready.sequence)) AS joined
    FROM job AS ready
    WHERE (SELECT EXISTS (SELECT 1 FROM tickwork_limits
                          WHERE kind = 'queue' AND max_running > 1))
      AND ready.state = 'queued' AND ready.due_at IS NULL AND ready.cancellation_id IS NULL
      AND EXISTS (SELECT 1 FROM tickwork_limits AS limited
                  WHERE limited.kind = 'queue' AND limited.key = ready.queue
                    AND limited.max_running > 1))"""

# Ingest: a new job_id inserts one queued row; an existing one writes nothing
# and returns no row (the runtime then compares cargo). Its lane joins its
# wide queue's line (_JOIN_LINES).
INSERT_JOB = f"""
WITH job AS (
    INSERT INTO tickwork_jobs
        (job_id, queue, lane, priority, payload_json, max_recoveries, run_at, delay_ms,
         retry_json, due_at, state, enqueued_at)
    VALUES (%(job_id)s, %(queue)s, %(lane)s, %(priority)s, %(payload_json)s,
            %(max_recoveries)s, %(run_at)s, %(delay_ms)s, %(retry_json)s, {_BOUND_DUE_AT},
            'queued', {NOW})
    ON CONFLICT (job_id) DO NOTHING
    RETURNING {_READY_COLUMNS}),
{_JOIN_LINES}
SELECT job.sequence FROM job CROSS JOIN joined
"""

# enqueue(conn, job) in the caller's transaction: an identical replay matches
# the upsert's WHERE nothing and writes nothing; other cargo becomes an UPDATE
# of the cargo columns, which tickwork_jobs_cargo_is_immutable refuses,
# failing the caller's transaction. A new job's lane joins its wide queue's
# line (_JOIN_LINES), its row locked until the caller commits.
ENQUEUE = f"""
WITH job AS (
    INSERT INTO tickwork_jobs AS stored
        (job_id, queue, lane, priority, payload_json, max_recoveries, run_at, delay_ms,
         retry_json, due_at, state, enqueued_at)
    VALUES (%(job_id)s, %(queue)s, %(lane)s, %(priority)s, %(payload_json)s,
            %(max_recoveries)s, %(run_at)s, %(delay_ms)s, %(retry_json)s, {_BOUND_DUE_AT},
            'queued', {NOW})
    ON CONFLICT (job_id) DO UPDATE SET
        queue = excluded.queue, lane = excluded.lane, priority = excluded.priority,
        payload_json = excluded.payload_json, max_recoveries = excluded.max_recoveries,
        run_at = excluded.run_at, delay_ms = excluded.delay_ms, retry_json = excluded.retry_json
    WHERE (stored.queue, stored.lane, stored.priority, stored.payload_json,
           stored.max_recoveries, stored.run_at, stored.delay_ms, stored.retry_json)
          IS DISTINCT FROM
          (excluded.queue, excluded.lane, excluded.priority, excluded.payload_json,
           excluded.max_recoveries, excluded.run_at, excluded.delay_ms, excluded.retry_json)
    RETURNING {_READY_COLUMNS}),
{_JOIN_LINES}
SELECT job.sequence FROM job CROSS JOIN joined
"""

# ingest_many, step 1 of one transaction: insert the jobs whose job_id is new,
# in list order (their sequences follow it), skipping every id that exists,
# including one inserted by an earlier row of the same list. Returns the
# inserted ids. A concurrent transaction inserting the same id makes this
# wait for its outcome (the unique index), so step 2 then sees its row. The
# lanes of the new ready jobs join their wide queues' lines, in list order
# (_JOIN_LINES).
INSERT_JOBS = f"""
WITH job AS (
    INSERT INTO tickwork_jobs
        (job_id, queue, lane, priority, payload_json, max_recoveries, run_at, delay_ms,
         retry_json, due_at, state, enqueued_at)
    SELECT given.job_id, given.queue, given.lane, given.priority, given.payload_json,
           given.max_recoveries, given.run_at, given.delay_ms, given.retry_json,
           {_DUE_AT.format(run_at="given.run_at", delay_ms="given.delay_ms", now=NOW)},
           'queued', {NOW}
    FROM unnest(%(job_ids)s::text[], %(queues)s::text[], %(lanes)s::text[],
                %(priorities)s::bigint[], %(payloads)s::text[], %(max_recoveries)s::bigint[],
                %(run_ats)s::bigint[], %(delays)s::bigint[], %(retries)s::text[])
         WITH ORDINALITY AS given(job_id, queue, lane, priority, payload_json, max_recoveries,
                                  run_at, delay_ms, retry_json, ord)
    ORDER BY given.ord
    ON CONFLICT (job_id) DO NOTHING
    RETURNING job_id, {_READY_COLUMNS}),
{_JOIN_LINES}
SELECT job.job_id FROM job CROSS JOIN joined
"""

# ingest_many, step 2: the stored cargo of the ids step 1 skipped (a fresh
# snapshot, so a row a concurrent transaction committed meanwhile is seen),
# which the runtime compares before the transaction commits.
SELECT_CARGO_MANY = f"""
SELECT {', '.join(CARGO_COLUMNS)}
FROM tickwork_jobs WHERE job_id = ANY(%(job_ids)s::text[])
"""

SELECT_JOB = f"SELECT {JOB_SELECT} FROM tickwork_jobs WHERE job_id = %(job_id)s"

SELECT_CARGO = f"""
SELECT {', '.join(CARGO_COLUMNS)}
FROM tickwork_jobs WHERE job_id = %(job_id)s
"""

SELECT_QUEUE_HEAD = f"""
(SELECT {JOB_SELECT} FROM tickwork_jobs WHERE queue = %(queue)s AND state = 'running'
 ORDER BY started_at, sequence LIMIT 1)
UNION ALL
(SELECT {JOB_SELECT} FROM tickwork_jobs WHERE queue = %(queue)s AND state = 'queued'
   AND due_at IS NULL
 ORDER BY priority DESC, sequence LIMIT 1)
LIMIT 1
"""

# The jobs of a queue a claim takes before the job at (priority, sequence):
# ready (queued, due, not cancelled) and earlier in pick order, at most
# %(limit)s (the queue's free places), for explain. A serial queue: a walk of
# the queue's waiting index from its best job. A wide queue (a limit above
# 1) takes turns (0018): with no limit or arrival in between, the next
# claims take each lane's best job in line order, then each lane's second,
# and so on; so a job's place is (its rank in its lane, its lane's place in
# the line), and the jobs before it are those of a lower rank, and those of
# its rank in lanes before its own (its lane at the back when the line does
# not hold it). Read per lane of the line, its first min(limit, rank) jobs
# (tickwork_jobs_lane_ready): O(lanes x limit), not the queue's backlog.
READY_AHEAD = """
WITH wide AS (
    SELECT EXISTS (SELECT 1 FROM tickwork_limits
                   WHERE kind = 'queue' AND key = %(queue)s AND max_running > 1) AS wide),
mine AS (
    SELECT target.lane,
           coalesce((SELECT line.turn FROM tickwork_turns AS line
                     WHERE line.queue = %(queue)s AND line.lane = target.lane),
                    9223372036854775807) AS turn,
           1 + (SELECT count(*) FROM (
                    SELECT 1 FROM tickwork_jobs AS before
                    WHERE before.queue = %(queue)s AND before.lane = target.lane
                      AND before.state = 'queued' AND before.cancellation_id IS NULL
                      AND before.due_at IS NULL
                      AND (before.priority > %(priority)s OR (before.priority = %(priority)s
                                                              AND before.sequence < %(sequence)s))
                    LIMIT %(limit)s) AS counted) AS rank
    FROM tickwork_jobs AS target
    WHERE target.sequence = %(sequence)s AND (SELECT wide FROM wide))
(SELECT job_id FROM tickwork_jobs
 WHERE NOT (SELECT wide FROM wide)
   AND queue = %(queue)s AND state = 'queued' AND due_at IS NULL AND cancellation_id IS NULL
   AND (priority > %(priority)s OR (priority = %(priority)s AND sequence < %(sequence)s))
 ORDER BY priority DESC, sequence
 LIMIT %(limit)s)
UNION ALL
(SELECT ahead.job_id
 FROM mine
 CROSS JOIN LATERAL (
     SELECT line.lane, line.turn FROM tickwork_turns AS line WHERE line.queue = %(queue)s
     UNION ALL
     SELECT mine.lane, mine.turn WHERE mine.turn = 9223372036854775807) AS line
 CROSS JOIN LATERAL (
     SELECT ranked.job_id, row_number() OVER (ORDER BY ranked.priority DESC,
                                                       ranked.sequence) AS rank
     FROM (SELECT job.job_id, job.priority, job.sequence FROM tickwork_jobs AS job
           WHERE job.queue = %(queue)s AND job.lane = line.lane AND job.state = 'queued'
             AND job.cancellation_id IS NULL AND job.due_at IS NULL
           ORDER BY job.priority DESC, job.sequence
           LIMIT least(%(limit)s, mine.rank)) AS ranked) AS ahead
 WHERE (ahead.rank, line.turn, line.lane) < (mine.rank, mine.turn, mine.lane)
 ORDER BY ahead.rank, line.turn, line.lane
 LIMIT %(limit)s)
"""

# Status of every queue: job counts by (queue, state, outcome), a queued job
# still waiting for its time counted as state 'delayed'. It reads every row of the table (no
# index holds every job's queue and outcome), the whole settled history
# included; its cost grows with every job ever kept. A paused queue adds a
# row in state 'paused'.
STATUS = """
SELECT queue,
       CASE WHEN state = 'queued' AND due_at IS NOT NULL THEN 'delayed' ELSE state END,
       outcome, count(*)
FROM tickwork_jobs
GROUP BY 1, 2, 3
UNION ALL
SELECT queue, 'paused', NULL, 1 FROM tickwork_paused_queues
"""

# Status of one queue, one row, from indexes only: queued and running counts
# from partial indexes of waiting jobs (queue_waiting) and of running jobs
# (the planner may take running or lease, both small); then its settled jobs
# per outcome from queue_outcomes (schema/postgres/0009_browse.sql):
# an index-only scan of the queue's own entries once VACUUM has set the
# visibility map, an index or bitmap scan of them before. Columns: queued
# (in the ready set), running, delayed (waiting for their time), paused,
# then one count per outcome in tickwork.model.outcomes.OUTCOMES order.
QUEUE_STATUS = """
SELECT
    (SELECT count(*) FROM tickwork_jobs WHERE queue = %(queue)s AND state = 'queued'
       AND due_at IS NULL),
    (SELECT count(*) FROM tickwork_jobs WHERE queue = %(queue)s AND state = 'running'),
    (SELECT count(*) FROM tickwork_jobs WHERE queue = %(queue)s AND state = 'queued'
       AND due_at IS NOT NULL),
    EXISTS (SELECT 1 FROM tickwork_paused_queues WHERE queue = %(queue)s),
    count(*) FILTER (WHERE outcome = 'completed'),
    count(*) FILTER (WHERE outcome = 'failed'),
    count(*) FILTER (WHERE outcome = 'cancelled'),
    count(*) FILTER (WHERE outcome = 'outcome_unknown'),
    count(*) FILTER (WHERE outcome = 'interrupted')
FROM tickwork_jobs
WHERE queue = %(queue)s AND state = 'settled'
"""

# The backlog of every queue with unsettled jobs, for gauges a scrape reads
# (tickwork.metrics): per queue, jobs ready to run, waiting for their time,
# running, and when the oldest ready job became ready (the rule of
# tickwork.stores.sql.sqlite.READY_SINCE: first due, else the last retry's
# due_at, else the latest redrive, else the last attempt's end). Only
# unsettled rows are read, through the queue_pending index (0009, state in
# queued/running), never the settled history: its cost grows with the
# backlog alone. A cancelled job still queued is none of these (the next
# claim settles it). Columns: queue, ready, delayed, running, ready_since.
BACKLOG = """
SELECT queue,
       count(*) FILTER (WHERE state = 'queued' AND cancellation_id IS NULL
                        AND due_at IS NULL),
       count(*) FILTER (WHERE state = 'queued' AND cancellation_id IS NULL
                        AND due_at IS NOT NULL),
       count(*) FILTER (WHERE state = 'running'),
       min(CASE WHEN history_json IS NULL
                THEN greatest(enqueued_at, run_at, enqueued_at + coalesce(delay_ms, 0))
                ELSE coalesce((history_json::jsonb -> -1 ->> 'due_at')::bigint,
                              (SELECT max(redriven_at) FROM tickwork_redrives AS redrive
                               WHERE redrive.job_id = job.job_id),
                              (history_json::jsonb -> -1 ->> 'ended_at')::bigint,
                              enqueued_at) END)
           FILTER (WHERE state = 'queued' AND cancellation_id IS NULL AND due_at IS NULL)
FROM tickwork_jobs AS job
WHERE state IN ('queued', 'running')
GROUP BY queue
"""

# When the rate limit row ``rate`` next lets a start through (0017's
# tickwork_rate_limits_release index, whose expression this is): the key is
# rate-held while this is above now.
_RELEASED_AT = ("greatest({rate}.held_until,"
                " ({rate}.next_start + {rate}.starts - 1) / {rate}.starts)")
_RELEASE = _RELEASED_AT.format(rate="rate")

# Work for a tick now: a job due (ready, or due but not yet moved into the
# ready set), a cancelled job to settle, or a running claim; a job waiting
# for its time is not, nor a ready job whose queue or lane is rate-held (no
# claim could take it: a host would wake for it at once, again and again).
# Four probes, each of its own partial index; the ready job's rate terms are
# a primary-key probe each, for the first ready job (each next one only
# while the ones before it are held or paused).
_PENDING = f"""(
       EXISTS (SELECT 1 FROM tickwork_jobs AS job
               WHERE state = 'queued' AND cancellation_id IS NULL AND due_at IS NULL
                 AND queue NOT IN (SELECT queue FROM tickwork_paused_queues)
                 AND NOT EXISTS (SELECT 1 FROM tickwork_rate_limits AS rate
                                 WHERE rate.kind = 'queue' AND rate.key = job.queue
                                   AND {_RELEASE} > {NOW})
                 AND NOT EXISTS (SELECT 1 FROM tickwork_rate_limits AS rate
                                 WHERE rate.kind = 'lane' AND rate.key = job.lane
                                   AND {_RELEASE} > {NOW}))
    OR EXISTS (SELECT 1 FROM tickwork_jobs
               WHERE state = 'queued' AND cancellation_id IS NOT NULL)
    OR EXISTS (SELECT 1 FROM tickwork_jobs
               WHERE state = 'queued' AND due_at IS NOT NULL AND due_at <= {NOW})
    OR EXISTS (SELECT 1 FROM tickwork_jobs WHERE state = 'running')
    OR EXISTS (SELECT 1 FROM tickwork_schedules WHERE NOT paused AND next_at <= {NOW}))"""
HAS_PENDING_WORK = f"SELECT {_PENDING}"

# When a tick next has work, in one read: pending now, the earliest due time
# of a waiting job (one probe of the due index), of a schedule's slot, and
# of a rate-held key's release where a ready job waits for it (in a queue
# not paused): the held keys in release order (tickwork_rate_limits_release,
# above now), each asked for a ready job through the queue's waiting index
# or the lane's pending one, up to the first that has one. And database time.
NEXT_WORK = f"""
SELECT {_PENDING},
       (SELECT min(at) FROM (
            SELECT (SELECT due_at FROM tickwork_jobs WHERE state = 'queued'
                    AND due_at IS NOT NULL ORDER BY due_at LIMIT 1) AS at
            UNION ALL
            SELECT (SELECT next_at FROM tickwork_schedules WHERE NOT paused
                    ORDER BY next_at LIMIT 1)
            UNION ALL
            SELECT (SELECT {_RELEASE} FROM tickwork_rate_limits AS rate
                    WHERE {_RELEASE} > {NOW}
                      AND CASE WHEN rate.kind = 'queue' THEN
                              rate.key NOT IN (SELECT queue FROM tickwork_paused_queues)
                              AND EXISTS (SELECT 1 FROM tickwork_jobs AS job
                                          WHERE job.queue = rate.key AND job.state = 'queued'
                                            AND job.cancellation_id IS NULL
                                            AND job.due_at IS NULL)
                          ELSE EXISTS (SELECT 1 FROM tickwork_jobs AS job
                                       WHERE job.lane = rate.key AND job.state = 'queued'
                                         AND job.cancellation_id IS NULL
                                         AND job.due_at IS NULL
                                         AND job.queue NOT IN (
                                             SELECT queue FROM tickwork_paused_queues)) END
                    ORDER BY {_RELEASE} LIMIT 1)) AS next_times),
       {NOW},
       (SELECT min(next_at) FROM tickwork_schedules WHERE NOT paused)
"""

# Claims lock the queues they claim, not one global lock: the transaction
# that makes a job of a queue running holds that queue's advisory lock
# (1954048881, hashtext(queue)) until it commits, and reads the queue's head
# and running jobs only once the lock is granted, in a fresh snapshot; a
# claim of a job whose lane has a limit holds the lane's lock the same way
# (0016_limits.sql). Both claim paths are functions of the schema
# (schema/postgres/0010_queue_claims.sql, where each step is commented,
# 0016_limits.sql, which adds the limits, 0017 the rate limits, and
# 0018_turns.sql, where a wide queue's lanes take turns and the claim keeps
# the queue's line), since a single client statement could not read after
# its own lock is granted. Settlements, renewals and recovery take no lock;
# each is fenced on its own row (a recovery's lane joins its line,
# _JOIN_LINES).

# Group commit: settlements, then claims, in one statement and one commit.
# Rows: settled pairs (settled_token set) and claimed jobs (claim_index set).
# %(scan)s bounds how many runnable entries the claim walks looking for free
# queue heads it can lock (queues other claimers hold are passed over).
# The function's statements run generic plans (0011_generic_claim_plans.sql):
# not re-planned for each call's arguments. A claim that comes up short (a
# queue it locked had its head claimed meanwhile) walks again for what it is
# missing, up to four passes (0012_claim_passes.sql): a short answer then
# means no more free heads were found, or a guard (an expired lease, a
# cancelled job waiting) stopped the claim, or four passes all came up short.
SETTLE_THEN_CLAIM_COLUMNS: Final = Columns(*NAMES, "claim_index", "settled_token")


def claim_scan(claims: int) -> int:
    """SETTLE_THEN_CLAIM's %(scan)s for ``claims`` claims: room to pass over
    the queue heads other pools are claiming."""
    return 8 * claims + 256


SETTLE_THEN_CLAIM = f"""
SELECT {JOB_SELECT}, claim_index, settled_token
FROM tickwork_settle_then_claim(
    %(sequences)s::bigint[], %(settle_tokens)s::text[], %(outcomes)s::text[],
    %(reasons)s::text[], %(errors)s::text[], %(claim_tokens)s::text[], %(lease_ms)s::bigint,
    %(scan)s::integer, %(now)s::bigint)
"""

# The exact claim of one job, for a tick that probed first: due jobs join
# the ready set, then the first free, unpaused queue head in global order
# is claimed under its queue's lock, waiting for a claim of that queue in
# flight rather than skipping it. No row when no queue has a free head.
CLAIM_ONE = f"""
SELECT {JOB_SELECT}
FROM tickwork_claim_one(%(token)s::text, %(lease_ms)s::bigint, %(now)s::bigint)
"""

# The oldest expired claim (with its token), and whether a cancelled job is
# still queued, in one read from small partial indexes.
PROBE_COLUMNS: Final = Columns(*NAMES, "claim_token", "cancelled_waiting")
PROBE = f"""
SELECT {_qualified("expired")}, expired.claim_token,
       EXISTS (SELECT 1 FROM tickwork_jobs
               WHERE state = 'queued' AND cancellation_id IS NOT NULL) AS cancelled_waiting
FROM (SELECT 1) AS one LEFT JOIN LATERAL (
    SELECT * FROM tickwork_jobs
    WHERE state = 'running' AND lease_expires_at <= {NOW}
    ORDER BY lease_expires_at, sequence LIMIT 1) AS expired ON true
"""

# Recovery of an expired claim, fenced on the token and on the lease still
# being expired (a claim renewed, settled or recovered meanwhile matches nothing).
# Both clear the token: the stale execution's late settlement then finds a
# job that is no longer under its claim and reports claim_replaced, instead
# of taking the recovery's settlement (or a later lane failure) for its own.
# The job is ready again: its lane joins its wide queue's line (_JOIN_LINES).
REQUEUE_EXPIRED = f"""
WITH job AS (
    UPDATE tickwork_jobs
    SET state = 'queued', started_at = NULL, lease_expires_at = NULL, claim_token = NULL,
        recoveries = recoveries + 1
    WHERE sequence = %(sequence)s AND state = 'running' AND claim_token = %(token)s
      AND lease_expires_at <= {NOW}
    RETURNING {_READY_COLUMNS}),
{_JOIN_LINES}
SELECT job.sequence FROM job CROSS JOIN joined
"""

# A claim a drain took ahead and never started, put back as it was (the
# SQLite family's RELEASE_CLAIM says when): fenced on the token and the
# running state, no recovery counted. Its lane joins its wide queue's line
# again if it left it (_JOIN_LINES): at the back, having had its turn.
RELEASE_CLAIM = f"""
WITH job AS (
    UPDATE tickwork_jobs
    SET state = 'queued', started_at = NULL, lease_expires_at = NULL, claim_token = NULL
    WHERE sequence = %(sequence)s AND state = 'running' AND claim_token = %(token)s
    RETURNING {_READY_COLUMNS}),
{_JOIN_LINES}
SELECT job.sequence FROM job CROSS JOIN joined
"""

SETTLE_EXPIRED = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = %(outcome)s, failure_reason = %(reason)s, settled_at = {NOW},
    error_json = %(error_json)s, claim_token = NULL
WHERE sequence = %(sequence)s AND state = 'running' AND claim_token = %(token)s
  AND lease_expires_at <= {NOW}
RETURNING {JOB_SELECT}
"""

# The careful path's second settlement: the claim is live and a cancellation
# is recorded, so the runtime settles by the cancellation rule
# (lifecycle.settlement_under_cancellation), fenced on the token, the lease
# and the cancellation still being there.
SETTLE_CANCELLED = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = %(outcome)s, failure_reason = %(reason)s, settled_at = {NOW},
    error_json = %(error_json)s
WHERE sequence = %(sequence)s AND state = 'running' AND claim_token = %(token)s
  AND lease_expires_at > {NOW} AND cancellation_id IS NOT NULL
RETURNING sequence
"""

SELECT_CLAIM = f"""
SELECT {JOB_SELECT}, claim_token,
       coalesce(state = 'running' AND lease_expires_at > {NOW}, false) AS lease_live
FROM tickwork_jobs WHERE sequence = %(sequence)s
"""

# Renewal extends a live lease only: after expiry it matches nothing, so an
# in-flight renewal can never resurrect a claim; greatest() keeps a short
# heartbeat from shortening a longer lease. Reports a recorded cancellation.
RENEW = f"""
UPDATE tickwork_jobs
SET lease_expires_at = greatest(lease_expires_at, {NOW} + %(lease_ms)s::bigint)
WHERE sequence = %(sequence)s AND state = 'running' AND claim_token = %(token)s
  AND lease_expires_at > {NOW}
RETURNING cancellation_id IS NOT NULL
"""

SETTLE_NEXT_CANCELLED = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = 'cancelled', failure_reason = NULL, error_json = NULL,
    settled_at = {NOW}
WHERE sequence = (
    SELECT sequence FROM tickwork_jobs
    WHERE state = 'queued' AND cancellation_id IS NOT NULL
    ORDER BY sequence LIMIT 1
    FOR UPDATE SKIP LOCKED)
RETURNING {JOB_SELECT}
"""

_RECORD_CANCELLATION = """
UPDATE tickwork_jobs SET cancellation_id = %(cancellation_id)s
WHERE job_id = %(job_id)s AND cancellation_id IS NULL AND {states}
RETURNING sequence
"""
RECORD_CANCELLATION = _RECORD_CANCELLATION.format(states="state <> 'settled'")
RECORD_CANCELLATION_IF_QUEUED = _RECORD_CANCELLATION.format(states="state = 'queued'")

# Failing a lane: up to %(limit)s of the lane's unsettled jobs, running first,
# then oldest waiting, locked in sequence order, settled as failed.
FAIL_LANE = f"""
WITH chosen AS (
    (SELECT sequence FROM tickwork_jobs
     WHERE state = 'running' AND lane = %(lane)s ORDER BY sequence LIMIT %(limit)s)
    UNION ALL
    (SELECT sequence FROM tickwork_jobs
     WHERE lane = %(lane)s AND state = 'queued' ORDER BY sequence LIMIT %(limit)s)
    LIMIT %(limit)s),
locked AS (
    SELECT sequence FROM tickwork_jobs
    WHERE sequence IN (SELECT sequence FROM chosen) AND state <> 'settled'
    ORDER BY sequence
    FOR UPDATE)
UPDATE tickwork_jobs AS job
SET state = 'settled', outcome = 'failed', failure_reason = %(reason)s, error_json = NULL,
    settled_at = {NOW}
FROM locked
WHERE job.sequence = locked.sequence AND job.state <> 'settled'
RETURNING {_qualified("job")}
"""

LANE_HAS_PENDING = """
SELECT EXISTS (SELECT 1 FROM tickwork_jobs
               WHERE lane = %(lane)s AND state IN ('queued', 'running'))
"""

PURGE_QUEUE = "DELETE FROM tickwork_jobs WHERE queue = %(queue)s AND state = 'queued'"

# ------------------------------------------------- retries, dead letters

# The attempt that just ended appended to history_json, keeping the newest 20
# entries (one is dropped at most: one is added at a time). SET expressions
# read the row as it was. {entry} is the jsonb_build_object of the entry.
_APPEND_HISTORY = """((CASE WHEN jsonb_array_length(coalesce(history_json::jsonb, '[]')) >= 20
               THEN history_json::jsonb - 0
               ELSE coalesce(history_json::jsonb, '[]') END)
          || jsonb_build_array({entry}))::text"""

# The short line of the row's error_json ("Type: message", at most 300
# characters, as ErrorSummary.line), or NULL. left() counts characters.
_ERROR_LINE = ("left((error_json::jsonb ->> 'type') || ': ' || "
               "(error_json::jsonb ->> 'message'), 300)")

# A failed attempt with attempts left: back to queued as the next attempt,
# due %(delay_ms)s from now, the ended attempt in its history. Fenced like
# the settlement (token, running, live lease, no cancellation); it keeps its
# sequence, so once due it is its queue's head again. It keeps the ended
# attempt's error summary (error_json), and its history entry the short line.
RETRY_CLAIM = f"""
UPDATE tickwork_jobs
SET state = 'queued', started_at = NULL, lease_expires_at = NULL, claim_token = NULL,
    attempt = attempt + 1, due_at = {NOW} + %(delay_ms)s::bigint,
    error_json = %(error_json)s,
    history_json = {_APPEND_HISTORY.format(entry=(
        "jsonb_build_object('attempt', attempt, 'outcome', %(outcome)s::text, "
        "'reason', %(reason)s::text, 'started_at', started_at, 'ended_at', " + NOW + ", "
        "'error', %(error_line)s::text, 'due_at', " + NOW + " + %(delay_ms)s::bigint)"))}
WHERE sequence = %(sequence)s AND state = 'running' AND claim_token = %(token)s
  AND lease_expires_at > {NOW} AND cancellation_id IS NULL
RETURNING {JOB_SELECT}
"""

REDRIVE_APPLIED = """
SELECT EXISTS (SELECT 1 FROM tickwork_redrives
               WHERE job_id = %(job_id)s AND redrive_id = %(redrive_id)s)
"""

# Redrive: a dead letter back to queued, due at once, as a new attempt chain
# (attempt 1, no recoveries), its last attempt in its history with the
# redrive id, and the id remembered, in one statement. Fenced on still being
# a dead letter without a cancellation and on the id not applied; a
# concurrent redrive waits on the row and then matches nothing. error_json
# stays: the last attempt's error, until the next attempt ends. Its lane
# joins its wide queue's line (_JOIN_LINES).
REDRIVE = f"""
WITH job AS (
    UPDATE tickwork_jobs
    SET state = 'queued', outcome = NULL, failure_reason = NULL, started_at = NULL,
        settled_at = NULL, claim_token = NULL, lease_expires_at = NULL, due_at = NULL,
        attempt = 1, recoveries = 0,
        history_json = {_APPEND_HISTORY.format(entry=(
            "jsonb_build_object('attempt', attempt, 'outcome', outcome, "
            "'reason', failure_reason, 'started_at', started_at, 'ended_at', settled_at, "
            "'redrive_id', %(redrive_id)s::text, 'error', " + _ERROR_LINE + ")"))}
    WHERE job_id = %(job_id)s AND state = 'settled'
      AND outcome IN ('failed', 'outcome_unknown', 'interrupted') AND cancellation_id IS NULL
      AND NOT EXISTS (SELECT 1 FROM tickwork_redrives
                      WHERE job_id = %(job_id)s AND redrive_id = %(redrive_id)s)
    RETURNING {JOB_SELECT}),
noted AS (
    INSERT INTO tickwork_redrives (job_id, redrive_id, redriven_at)
    SELECT job_id, %(redrive_id)s, {NOW} FROM job
    ON CONFLICT (job_id, redrive_id) DO NOTHING),
{_JOIN_LINES}
SELECT {_qualified("job")} FROM job CROSS JOIN joined
"""

# A queue's dead letters, newest settlement first, one page after the cursor,
# through the partial index of dead letters (tickwork_jobs_dead).
DEAD_LETTERS = f"""
SELECT {JOB_SELECT} FROM tickwork_jobs
WHERE queue = %(queue)s AND state = 'settled'
  AND outcome IN ('failed', 'outcome_unknown', 'interrupted')
  AND (settled_at, sequence) < (%(before_settled)s::bigint, %(before_sequence)s::bigint)
ORDER BY settled_at DESC, sequence DESC
LIMIT %(limit)s
"""

# ------------------------------------------------------------ browsing
# list_jobs: the statements of tickwork.stores.sql.sqlite's browsing
# section, for PostgreSQL (see the table of indexes there; the planner picks
# them, and tests/shared/test_postgres_only.py checks its plans on 200,000
# rows). A page starts strictly past the previous page's last job.
_LISTING_STATE = {
    "queued": "state = 'queued'",
    "running": "state = 'running'",
    "settled": "state = 'settled'",
}


def _listing(by: str, state: str, outcome: bool, newest: bool) -> str:
    further, direction = ("<", "DESC") if newest else (">", "ASC")
    where = f"{by} = %(value)s AND {_LISTING_STATE[state]}"
    if outcome:
        where += " AND outcome = %(outcome)s"
    if state == "settled":
        where += (f" AND (settled_at, sequence) {further} "
                  "(%(after_settled)s::bigint, %(after_sequence)s::bigint)")
        order = f"settled_at {direction}, sequence {direction}"
    else:
        where += f" AND sequence {further} %(after_sequence)s::bigint"
        order = f"sequence {direction}"
    return f"""
SELECT {JOB_SELECT} FROM tickwork_jobs
WHERE {where}
ORDER BY {order}
LIMIT %(limit)s
"""


#: JobListing.shape (by, state, outcome given, newest first) -> its statement.
LIST_JOBS: Final = {
    (by, state, outcome, newest): _listing(by, state, outcome, newest)
    for by in ("queue", "lane") for state in ("queued", "running", "settled")
    for outcome in ((False, True) if state == "settled" else (False,))
    for newest in (True, False)}

# ------------------------------------------------------ finding by id
# jobs_by_id_prefix: tickwork.stores.sql.sqlite's statements for PostgreSQL.
# Compared COLLATE "C" (byte order, as SQLite's): under a language's
# collation the ids that start with a prefix need not sort together, and
# 0013's index of job_id COLLATE "C" is what makes the range a range scan.


def _by_id_prefix(further: str) -> str:
    return f"""
SELECT {JOB_SELECT} FROM tickwork_jobs
WHERE job_id COLLATE "C" {further} %(low)s AND job_id COLLATE "C" < %(high)s
ORDER BY job_id COLLATE "C"
LIMIT %(limit)s
"""


#: The first page of a prefix, and the pages after an id.
JOBS_BY_ID_PREFIX_FIRST: Final = _by_id_prefix(">=")
JOBS_BY_ID_PREFIX_NEXT: Final = _by_id_prefix(">")

# -------------------------------------------------------------- schedules
# The statements of tickwork.stores.sql.sqlite's schedules section, for
# PostgreSQL (see the comments there); a replace, pause, resume, slot and
# advance are each fenced on the schedule as the lifecycle read it.

SCHEDULE_COLUMNS: Final = Columns("name", "spec_json", "next_at", "paused", "created_at",
                                  "updated_at")
_SCHEDULE_SELECT = ", ".join(SCHEDULE_COLUMNS.names)

SELECT_SCHEDULE = f"SELECT {_SCHEDULE_SELECT} FROM tickwork_schedules WHERE name = %(name)s"
LIST_SCHEDULES = (f"SELECT {_SCHEDULE_SELECT} FROM tickwork_schedules"
                  ' ORDER BY name COLLATE "C"')
CREATE_SCHEDULE = f"""
INSERT INTO tickwork_schedules (name, spec_json, next_at, paused, created_at, updated_at)
VALUES (%(name)s, %(spec_json)s, %(next_at)s, false, {NOW}, {NOW})
ON CONFLICT (name) DO NOTHING
RETURNING name
"""
REPLACE_SCHEDULE = f"""
UPDATE tickwork_schedules SET spec_json = %(spec_json)s, next_at = %(next_at)s,
    updated_at = {NOW}
WHERE name = %(name)s AND spec_json = %(old_spec_json)s
RETURNING name
"""
PAUSE_SCHEDULE = f"""
UPDATE tickwork_schedules SET paused = true, updated_at = {NOW}
WHERE name = %(name)s AND NOT paused
RETURNING name
"""
RESUME_SCHEDULE = f"""
UPDATE tickwork_schedules SET paused = false, next_at = %(next_at)s, updated_at = {NOW}
WHERE name = %(name)s AND paused AND spec_json = %(spec_json)s
RETURNING name
"""
DELETE_SCHEDULE = "DELETE FROM tickwork_schedules WHERE name = %(name)s RETURNING name"
DUE_SCHEDULES_COLUMNS: Final = Columns(*SCHEDULE_COLUMNS.names, "now")
DUE_SCHEDULES = f"""
SELECT {_SCHEDULE_SELECT}, {NOW} FROM tickwork_schedules
WHERE NOT paused AND next_at <= {NOW}
ORDER BY next_at, name COLLATE "C"
LIMIT 100
"""
NEXT_SLOT = "SELECT min(next_at) FROM tickwork_schedules WHERE NOT paused"
# A slot's job (ready at once: its run_at has come); its lane joins its wide
# queue's line (_JOIN_LINES).
FIRE_SLOT = f"""
WITH job AS (
    INSERT INTO tickwork_jobs
        (job_id, queue, lane, priority, payload_json, max_recoveries, run_at, retry_json,
         state, enqueued_at)
    SELECT %(job_id)s, %(queue)s, %(lane)s, %(priority)s, %(payload_json)s,
           %(max_recoveries)s, %(run_at)s, %(retry_json)s, 'queued', {NOW}
    FROM tickwork_schedules
    WHERE name = %(name)s AND spec_json = %(spec_json)s AND NOT paused
      AND next_at <= %(run_at)s
    ON CONFLICT (job_id) DO NOTHING
    RETURNING {_READY_COLUMNS}),
{_JOIN_LINES}
SELECT job.queue FROM job CROSS JOIN joined
"""
ADVANCE_SCHEDULE = """
UPDATE tickwork_schedules SET next_at = %(next_at)s
WHERE name = %(name)s AND spec_json = %(spec_json)s AND next_at < %(next_at)s
"""
STORE_NOW = f"SELECT {NOW}"

# Pause: one row per paused queue; a row back says this call paused it.
PAUSE_QUEUE = f"""
INSERT INTO tickwork_paused_queues (queue, paused_at) VALUES (%(queue)s, {NOW})
ON CONFLICT (queue) DO NOTHING
RETURNING queue
"""

# Whether the queue is paused: one primary-key lookup.
QUEUE_PAUSED = "SELECT EXISTS (SELECT 1 FROM tickwork_paused_queues WHERE queue = %(queue)s)"

# Resume: the row goes; a row back says the queue was paused.
RESUME_QUEUE = "DELETE FROM tickwork_paused_queues WHERE queue = %(queue)s RETURNING queue"

# Erasure for a trusted producer SELECT naming queues: every job in them goes.
PURGE_QUEUES = "DELETE FROM tickwork_jobs WHERE queue IN ({select})"

# ------------------------------------------------------------- retention
#
# Retention policies (schema 0013) and the prune that applies them, as on
# SQLite (tickwork.stores.sql.sqlite, "retention"): a batch reads one
# queue's prunable rows through tickwork_jobs_queue_outcomes (queue, outcome,
# settled_at, sequence), one range per outcome ending at the cutoff, so it
# reads the rows it deletes and no others, O(log n + batch). Only settled
# rows are selected or deleted.

# Every stored policy (the scope's default under queue ''), by queue.
LIST_RETENTION = """
SELECT queue, keep_completed_ms, keep_failed_ms, updated_at
FROM tickwork_retention ORDER BY queue
"""

# Store a policy, replacing the queue's: a row back when anything changed,
# none when the same times were stored already (nothing written then).
PUT_RETENTION = f"""
INSERT INTO tickwork_retention AS stored (queue, keep_completed_ms, keep_failed_ms, updated_at)
VALUES (%(queue)s, %(keep_completed_ms)s, %(keep_failed_ms)s, {NOW})
ON CONFLICT (queue) DO UPDATE SET
    keep_completed_ms = excluded.keep_completed_ms, keep_failed_ms = excluded.keep_failed_ms,
    updated_at = excluded.updated_at
WHERE stored.keep_completed_ms IS DISTINCT FROM excluded.keep_completed_ms
   OR stored.keep_failed_ms IS DISTINCT FROM excluded.keep_failed_ms
RETURNING queue
"""

# Remove a queue's policy, or the scope's default: a row back when there was one.
DELETE_RETENTION = "DELETE FROM tickwork_retention WHERE queue = %(queue)s RETURNING queue"

# Every queue with settled history, in name order: a loose index scan of
# tickwork_jobs_queue_settled (each step one seek for the first queue name
# after the last), O(queues x log n) however many jobs each queue holds.
SETTLED_QUEUES = """
WITH RECURSIVE settled(queue) AS (
    SELECT (SELECT queue FROM tickwork_jobs WHERE state = 'settled'
            ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT queue FROM tickwork_jobs
            WHERE state = 'settled' AND queue > settled.queue
            ORDER BY queue LIMIT 1)
    FROM settled WHERE settled.queue IS NOT NULL)
SELECT queue FROM settled WHERE queue IS NOT NULL
"""

# One prune batch of one queue, in one statement (one transaction): up to
# %(limit)s settled jobs past their cutoff (each outcome's index range up to
# its cutoff; a NULL cutoff keeps that kind forever), deleted fenced on still
# being settled past it (a job redriven meanwhile is queued again: READ
# COMMITTED re-checks the row, and it stays), with their redrive ids; how
# many jobs were deleted.
PRUNE = """
WITH doomed AS (
    (SELECT job_id FROM tickwork_jobs
     WHERE state = 'settled' AND queue = %(queue)s
       AND outcome IN ('completed', 'cancelled')
       AND settled_at < %(completed_before)s::bigint
     UNION ALL
     SELECT job_id FROM tickwork_jobs
     WHERE state = 'settled' AND queue = %(queue)s
       AND outcome IN ('failed', 'outcome_unknown', 'interrupted')
       AND settled_at < %(failed_before)s::bigint)
    LIMIT %(limit)s),
gone AS (
    DELETE FROM tickwork_jobs
    WHERE job_id IN (SELECT job_id FROM doomed) AND state = 'settled'
      AND settled_at < CASE WHEN outcome IN ('completed', 'cancelled')
                            THEN %(completed_before)s::bigint
                            ELSE %(failed_before)s::bigint END
    RETURNING job_id),
redrives AS (
    DELETE FROM tickwork_redrives WHERE job_id IN (SELECT job_id FROM gone))
SELECT count(*) FROM gone
"""

#: The tables a storage report counts, in its order (as on SQLite).
STORAGE_TABLES = ("tickwork_jobs", "tickwork_redrives", "tickwork_schedules",
                  "tickwork_paused_queues", "tickwork_retention", "tickwork_limits",
                  "tickwork_rate_limits", "tickwork_queue_history", "tickwork_turns")

# The storage report: the bytes of every tickwork table this connection sees
# (its heap, indexes and TOAST: pg_total_relation_size, no row read), then
# each table's row count (O(rows), the report's, never a tick's).
STORAGE_USAGE = "SELECT (SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint " \
    "FROM pg_class AS c WHERE c.relkind = 'r' AND c.relname LIKE 'tickwork\\_%%' " \
    "AND pg_table_is_visible(c.oid)), " + ", ".join(
        f"(SELECT count(*) FROM {table})" for table in STORAGE_TABLES)

# ------------------------------------------------------ history over time
#
# tickwork_queue_history (0015): the statements of the SQLite family's
# (tickwork.stores.sql.sqlite, which says what each guarantees), in
# PostgreSQL's spelling. ADD_HISTORY_COUNTS and SAMPLE_HISTORY write their
# rows in (queue, minute) order, so that workers flushing at once wait for
# each other's row locks instead of deadlocking.

HISTORY = """
SELECT minute - minute %% %(bucket_ms)s AS bucket, sum(enqueued)::bigint,
       sum(started)::bigint, sum(completed)::bigint, sum(failed)::bigint,
       sum(cancelled)::bigint, sum(retried)::bigint, max(depth), max(oldest_age_ms)
FROM tickwork_queue_history
WHERE queue = %(queue)s AND minute >= %(since)s AND minute < %(until)s
GROUP BY bucket
ORDER BY bucket
"""

HISTORY_KNOWN = "SELECT EXISTS (SELECT 1 FROM tickwork_queue_history WHERE queue = %(queue)s)"

ADD_HISTORY_COUNTS = """
INSERT INTO tickwork_queue_history AS h
    (queue, minute, enqueued, started, completed, failed, cancelled, retried)
SELECT * FROM unnest(%(queues)s::text[], %(minutes)s::bigint[], %(enqueued)s::bigint[],
                     %(started)s::bigint[], %(completed)s::bigint[], %(failed)s::bigint[],
                     %(cancelled)s::bigint[], %(retried)s::bigint[])
ORDER BY 1, 2
ON CONFLICT (queue, minute) DO UPDATE SET
    enqueued = h.enqueued + excluded.enqueued, started = h.started + excluded.started,
    completed = h.completed + excluded.completed, failed = h.failed + excluded.failed,
    cancelled = h.cancelled + excluded.cancelled, retried = h.retried + excluded.retried
"""

SAMPLE_HISTORY = f"""
WITH RECURSIVE waiting(queue) AS (
    (SELECT queue FROM tickwork_jobs WHERE state = 'queued' ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT job.queue FROM tickwork_jobs AS job
            WHERE job.state = 'queued' AND job.queue > waiting.queue
            ORDER BY job.queue LIMIT 1)
    FROM waiting WHERE waiting.queue IS NOT NULL),
sampled(queue) AS (
    SELECT queue FROM (SELECT queue FROM waiting WHERE queue IS NOT NULL
                       LIMIT %(max_queues)s) AS found
    UNION SELECT unnest(%(queues)s::text[])
    UNION SELECT queue FROM tickwork_queue_history
          WHERE minute >= %(since)s AND depth > 0)
INSERT INTO tickwork_queue_history AS h (queue, minute, depth, oldest_age_ms)
SELECT sampled.queue, {NOW} - {NOW} %% 60000,
       (SELECT count(*) FROM (
            SELECT 1 FROM tickwork_jobs AS job
            WHERE job.queue = sampled.queue AND job.state = 'queued'
            LIMIT %(depth_limit)s) AS counted),
       (SELECT {NOW} - CASE WHEN history_json IS NULL
                THEN greatest(enqueued_at, run_at, enqueued_at + coalesce(delay_ms, 0))
                ELSE coalesce((history_json::jsonb -> -1 ->> 'due_at')::bigint,
                              (SELECT max(redriven_at) FROM tickwork_redrives AS redrive
                               WHERE redrive.job_id = job.job_id),
                              (history_json::jsonb -> -1 ->> 'ended_at')::bigint,
                              enqueued_at) END
        FROM tickwork_jobs AS job
        WHERE job.queue = sampled.queue AND job.state = 'queued' AND job.due_at IS NULL
        ORDER BY job.priority DESC, job.sequence
        LIMIT 1)
FROM sampled
ORDER BY sampled.queue
ON CONFLICT (queue, minute) DO UPDATE SET
    depth = excluded.depth, oldest_age_ms = excluded.oldest_age_ms
"""

PRUNE_HISTORY = f"""
DELETE FROM tickwork_queue_history
WHERE (queue, minute) IN (
    SELECT queue, minute FROM tickwork_queue_history
    WHERE minute < {NOW} - %(keep_ms)s
    ORDER BY minute
    LIMIT %(limit)s)
"""

# ------------------------------------------------------ concurrency limits
#
# tickwork_limits (0016): a queue's or a lane's max_running. The claim
# functions obey them (schema/postgres/0016_limits.sql, which says how and
# with which locks); these statements store, list and remove them, and name
# what runs under one.

# Every stored limit (the store puts them in tickwork.model.limits order).
LIST_LIMITS = "SELECT kind, key, max_running, updated_at FROM tickwork_limits"

# A change of limits first takes the limits' advisory lock (1954048883, 0)
# exclusively: every claim holds it shared until it commits, so the change
# waits for the claims in flight and every later claim sees it (0016).
# Without it, a claim that read "no limit on this lane" (and so took no lane
# lock) could commit beside one obeying the new limit, both in its last place.

# Store a limit, replacing its kind and key's: a row back when it changed,
# none when the same max_running was stored already (nothing written then).
PUT_LIMIT = f"""
INSERT INTO tickwork_limits AS stored (kind, key, max_running, updated_at)
SELECT %(kind)s, %(key)s, %(max_running)s, {NOW}
FROM (SELECT pg_advisory_xact_lock(1954048883, 0)) AS claims_settled
ON CONFLICT (kind, key) DO UPDATE SET
    max_running = excluded.max_running, updated_at = excluded.updated_at
WHERE stored.max_running <> excluded.max_running
RETURNING key
"""

# Remove a limit: a row back when there was one. The lock is taken
# whenever a row is deleted (the join evaluates it).
DELETE_LIMIT = """
DELETE FROM tickwork_limits
USING (SELECT pg_advisory_xact_lock(1954048883, 0)) AS claims_settled
WHERE kind = %(kind)s AND key = %(key)s
RETURNING key
"""

# A queue's line after its limit was stored or removed, in the same
# transaction, in the statement after PUT_LIMIT's or DELETE_LIMIT's: the
# limits' lock is held exclusively (no claim in flight until commit) and
# this snapshot is newer than its grant. A wide queue (a limit above 1):
# every lane with a ready job that is not in the line joins it, at the
# back, in the order of its oldest ready job (a queue that just became
# wide lines up all of them; one that was wide already has them all, but
# for a lane a producer added while the queue was becoming wide, see
# below); one range of tickwork_jobs_lane_ready, O(the queue's ready
# jobs), a change of limits' cost, never a claim's. A queue that is not
# wide drops its line, but for rows a producer holds (SKIP LOCKED: stale
# rows of a serial queue are never read, and harmless once it is wide
# again).
#
# The one order this cannot fix: a producer whose statement read the
# queue as serial (before the limit committed) and commits after this
# statement's snapshot joins no line, and neither does this statement; that
# lane waits for its next ready job to join (or for the line to have no
# lane that may start a job, the claims' fallback). Producers take no lock
# a change of limits could wait for; storing the limit again mends it.
LINE_AFTER_LIMIT = """
WITH wide AS (
    SELECT EXISTS (SELECT 1 FROM tickwork_limits
                   WHERE kind = 'queue' AND key = %(queue)s AND max_running > 1) AS wide),
dropped AS (
    DELETE FROM tickwork_turns
    WHERE (queue, lane) IN (SELECT line.queue, line.lane FROM tickwork_turns AS line
                            WHERE line.queue = %(queue)s AND NOT (SELECT wide FROM wide)
                            FOR UPDATE SKIP LOCKED))
INSERT INTO tickwork_turns (queue, lane, turn)
SELECT lanes.queue, lanes.lane, nextval('tickwork_turns_turn')
FROM (SELECT queue, lane, min(sequence) AS oldest FROM tickwork_jobs
      WHERE queue = %(queue)s AND state = 'queued' AND cancellation_id IS NULL
        AND due_at IS NULL AND (SELECT wide FROM wide)
      GROUP BY queue, lane
      ORDER BY oldest) AS lanes
ON CONFLICT (queue, lane) DO NOTHING
"""

# Up to %(limit)s running jobs of a queue, oldest start first: a range of
# tickwork_jobs_running, which holds running rows only, so it reads the
# rows it returns and no others.
RUNNING_IN_QUEUE = """
SELECT job_id FROM tickwork_jobs
WHERE queue = %(key)s AND state = 'running'
ORDER BY started_at, sequence
LIMIT %(limit)s
"""

# The same of a lane: its jobs in other queues, a range of
# tickwork_jobs_lane_running (which holds jobs whose lane is not their
# queue's name), and those of the queue of its name, that queue's range of
# tickwork_jobs_running; each read up to %(limit)s, then merged.
RUNNING_IN_LANE = """
SELECT job_id FROM (
    (SELECT job_id, started_at, sequence FROM tickwork_jobs
     WHERE lane = %(key)s AND lane <> queue AND state = 'running'
     ORDER BY started_at, sequence LIMIT %(limit)s)
    UNION ALL
    (SELECT job_id, started_at, sequence FROM tickwork_jobs
     WHERE queue = %(key)s AND lane = %(key)s AND state = 'running'
     ORDER BY started_at, sequence LIMIT %(limit)s)) AS running
ORDER BY started_at, sequence
LIMIT %(limit)s
"""

# ------------------------------------------------------------- rate limits
#
# tickwork_rate_limits (0017): a queue's or a lane's bucket (starts per
# period_ms, burst) and its hold (held_until), on one row by (kind, key);
# the GCRA rule of tickwork.model.rate_limits, in bigint. The claim
# functions check and spend the buckets (schema/postgres/0017_rate_limits.sql
# says how, under which locks); these statements store, list and remove
# them, and put back a rate-limited claim. Each is one primary-key probe
# (the listing reads the whole table, one row per key with a limit).

# Every key with a bucket, or with a hold in force at now: the bucket's next
# start in ms rounded up (next_start is in 1/starts ms), the hold or NULL.
# The store puts them in tickwork.model.rate_limits order.
LIST_RATE_LIMITS = f"""
SELECT kind, key, starts, period_ms, burst,
       CASE WHEN starts IS NOT NULL THEN (next_start + starts - 1) / starts END,
       CASE WHEN held_until > {NOW} THEN held_until END,
       updated_at
FROM tickwork_rate_limits
WHERE starts IS NOT NULL OR held_until > {NOW}
"""

# Store a bucket, keeping the key's hold: a row back when it was written,
# none when the same starts, period_ms and burst were stored already. A new
# bucket (or one where the row only had a hold) starts full; a replaced one
# keeps the time of its next allowed start, in ms rounded up, times the new
# starts. It first takes the limits' lock (1954048883, 0) exclusively, as
# PUT_LIMIT does: every claim holds it shared until it commits, so a claim
# checks and spends one version of the bucket, and one that read "no bucket
# on this lane" (and so took no lane lock) has committed before the bucket
# is stored.
PUT_RATE_LIMIT = f"""
INSERT INTO tickwork_rate_limits AS stored
    (kind, key, starts, period_ms, burst, next_start, held_until, updated_at)
SELECT %(kind)s, %(key)s, %(starts)s, %(period_ms)s, %(burst)s, 0, 0, {NOW}
FROM (SELECT pg_advisory_xact_lock(1954048883, 0)) AS claims_settled
ON CONFLICT (kind, key) DO UPDATE SET
    starts = excluded.starts, period_ms = excluded.period_ms, burst = excluded.burst,
    next_start = CASE WHEN stored.starts IS NULL THEN 0
                      ELSE (stored.next_start + stored.starts - 1) / stored.starts
                           * excluded.starts END,
    updated_at = excluded.updated_at
WHERE (stored.starts, stored.period_ms, stored.burst)
      IS DISTINCT FROM (excluded.starts, excluded.period_ms, excluded.burst)
RETURNING key
"""

# Remove a key's bucket and hold: true when it had a bucket or a hold in
# force by database time, false for an expired hold, no row when none.
DELETE_RATE_LIMIT = f"""
DELETE FROM tickwork_rate_limits
WHERE kind = %(kind)s AND key = %(key)s
RETURNING starts IS NOT NULL OR held_until > {NOW}
"""

# An executor's RateLimited, in one statement: the hold (a later one stored
# stays; a new row has no bucket; updated_at moves only when the hold does)
# is written whatever becomes of the claim (PostgreSQL runs a data-modifying WITH whether or not
# it is read), and the claim goes back to queued, due at once, attempt,
# history and recoveries unchanged; fenced like RETRY_CLAIM (token, running,
# live lease, no cancellation). The job as put back, or no row; its lane
# joins its wide queue's line again (_JOIN_LINES), keeping no earlier place.
PUT_BACK_RATE_LIMITED = f"""
WITH hold AS (
    INSERT INTO tickwork_rate_limits AS stored (kind, key, held_until, updated_at)
    VALUES (%(kind)s, %(key)s, %(until)s, {NOW})
    ON CONFLICT (kind, key) DO UPDATE SET
        held_until = excluded.held_until, updated_at = excluded.updated_at
        WHERE excluded.held_until > stored.held_until),
job AS (
    UPDATE tickwork_jobs
    SET state = 'queued', started_at = NULL, lease_expires_at = NULL, claim_token = NULL
    WHERE sequence = %(sequence)s AND state = 'running' AND claim_token = %(token)s
      AND lease_expires_at > {NOW} AND cancellation_id IS NULL
    RETURNING {JOB_SELECT}),
{_JOIN_LINES}
SELECT {_qualified("job")} FROM job CROSS JOIN joined
"""
