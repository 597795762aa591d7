"""Every SQL statement the owner-local runtime runs, one per transition.

Each statement is a single atomic mutation or read; the comment above it says
what it guarantees. Placeholders are ``?`` or ``?NNN`` (SQLite and Durable
Object storage both accept them); no statement binds more than a handful of
values (the probes add one per claim this runtime is executing), far inside
the Durable Object limit of 100.
"""

from __future__ import annotations

# The columns every read returns, in JobRecord order (see store.decode_job).
JOB_COLUMNS = (
    "job_id, queue, lane, priority, payload_json, max_recoveries, state, outcome, "
    "failure_reason, sequence, recoveries, enqueued_at, started_at, settled_at, cancellation_id"
)

# Ingest. A new job_id inserts one queued row and returns its sequence; an
# existing one inserts nothing and returns no row, and the caller compares
# cargo (identical -> duplicate, different -> conflict). The UNIQUE index on
# job_id makes this race-free.
INSERT_JOB = """
INSERT INTO tickwork_jobs
    (job_id, queue, lane, priority, payload_json, max_recoveries, state, enqueued_at)
VALUES (?, ?, ?, ?, ?, ?, 'queued', ?)
ON CONFLICT (job_id) DO NOTHING
RETURNING sequence
"""

SELECT_JOB = f"SELECT {JOB_COLUMNS} FROM tickwork_jobs WHERE job_id = ?"

# A stored job's identity and cargo, in ValidJob order: a replay is compared
# with the stored canonical payload text as it is, without decoding it.
SELECT_CARGO = """
SELECT job_id, queue, lane, priority, payload_json, max_recoveries
FROM tickwork_jobs WHERE job_id = ?
"""

# A queue's head: its running job if any, else its waiting job with the
# highest priority, oldest first. Two index probes, never a scan.
SELECT_QUEUE_HEAD = f"""
SELECT * FROM (
    SELECT {JOB_COLUMNS} FROM tickwork_jobs
    WHERE queue = ?1 AND state = 'running'
    LIMIT 1)
UNION ALL
SELECT * FROM (
    SELECT {JOB_COLUMNS} FROM tickwork_jobs
    WHERE queue = ?1 AND state = 'queued'
    ORDER BY priority DESC, sequence
    LIMIT 1)
LIMIT 1
"""

SELECT_LATEST_SETTLED = f"""
SELECT {JOB_COLUMNS} FROM tickwork_jobs
WHERE queue = ? AND state = 'settled'
ORDER BY settled_at DESC, sequence DESC
LIMIT 1
"""

# Claim. Picks the first runnable job in global order (priority desc, oldest
# first) whose queue has no running job, and marks it running under a fresh
# claim token, in one statement. The first such job is its queue's head:
# any better job of the same queue would come earlier and be just as free.
# {guard} is empty (CLAIM_NEXT) or CLAIM_GUARD.
_CLAIM = f"""
UPDATE tickwork_jobs
SET state = 'running', claim_token = ?, started_at = ?
WHERE sequence = (
    SELECT candidate.sequence FROM tickwork_jobs AS candidate
    WHERE candidate.state = 'queued' AND candidate.cancellation_id IS NULL
      AND NOT EXISTS (
          SELECT 1 FROM tickwork_jobs AS busy
          WHERE busy.queue = candidate.queue AND busy.state = 'running')
    ORDER BY candidate.priority DESC, candidate.sequence
    LIMIT 1)
{{guard}}
RETURNING {JOB_COLUMNS}
"""

CLAIM_NEXT = _CLAIM.format(guard="")

# The tick's fast path: claim only when TICK_PROBE would find nothing to do
# first (no running claim outside {exclude}, no cancelled job waiting), so the
# common tick is one statement. When it claims nothing, the tick probes.
CLAIM_GUARD = """
  AND NOT EXISTS (SELECT 1 FROM tickwork_jobs WHERE state = 'running' {exclude})
  AND NOT EXISTS (SELECT 1 FROM tickwork_jobs
                  WHERE state = 'queued' AND cancellation_id IS NOT NULL)
"""
CLAIM_NEXT_IF_CLEAR = _CLAIM.format(guard=CLAIM_GUARD)

# Settle a claim. Fenced on the exact claim token and the running state: a
# claim whose lane failed, or that was recovered or re-claimed in the
# meantime, matches no row, so exactly one terminal outcome is ever written
# per job. Fenced on the cancellation too: SETTLE_CLAIM matches no row once a
# cancellation is recorded, so the lifecycle can apply the cancellation rule
# (settlement_under_cancellation) to durable truth and settle again with
# SETTLE_CANCELLED_CLAIM, which matches only while the cancellation is there.
# {returning}: the _RECORD forms return the settled job for the projector;
# the others only the sequence, all the hot path needs to know it landed.
_SETTLE = """
UPDATE tickwork_jobs
SET state = 'settled', outcome = ?, failure_reason = ?, settled_at = ?
WHERE sequence = ? AND state = 'running' AND claim_token = ? AND cancellation_id {cancelled}
RETURNING {returning}
"""
SETTLE_CLAIM = _SETTLE.format(cancelled="IS NULL", returning="sequence")
SETTLE_CLAIM_RECORD = _SETTLE.format(cancelled="IS NULL", returning=JOB_COLUMNS)
SETTLE_CANCELLED_CLAIM = _SETTLE.format(cancelled="IS NOT NULL", returning="sequence")
SETTLE_CANCELLED_CLAIM_RECORD = _SETTLE.format(cancelled="IS NOT NULL", returning=JOB_COLUMNS)

# Recovery settles a disappeared claim (interrupted, or cancelled) and
# releases its token, fenced on the token and the running state: should the
# claim's executor still finish somewhere, its tick finds the claim no longer
# its own and reports claim_replaced instead of this settlement. (Failing a
# lane keeps the token: that executor's tick reports the failure it was
# stopped by.)
SETTLE_RECOVERED_CLAIM = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = ?, failure_reason = ?, settled_at = ?, claim_token = NULL
WHERE sequence = ? AND state = 'running' AND claim_token = ?
RETURNING {JOB_COLUMNS}
"""

# Recovery: put a disappeared claim back in its queue, counting the recovery
# and releasing the token (as above). Fenced like SETTLE_CLAIM.
REQUEUE_CLAIM = f"""
UPDATE tickwork_jobs
SET state = 'queued', started_at = NULL, claim_token = NULL, recoveries = recoveries + 1
WHERE sequence = ? AND state = 'running' AND claim_token = ?
RETURNING {JOB_COLUMNS}
"""

# What a tick must look at before claiming, in one read: the running claim to
# ask the liveness probe about, and whether any cancelled job is still queued.
# The claim is the oldest one not executed by this runtime (the tokens it is
# executing are appended as NOT IN values) that comes after the cursor
# (started_at, sequence), wrapping around to the oldest: a claim whose
# execution is alive elsewhere, or whose probe fails, then cannot keep the
# claims behind it from ever being looked at. Both are small-index probes.
TICK_PROBE = """
SELECT
    coalesce(
        (SELECT sequence FROM tickwork_jobs
         WHERE state = 'running' {exclude} AND (started_at, sequence) > (?, ?)
         ORDER BY started_at, sequence
         LIMIT 1),
        (SELECT sequence FROM tickwork_jobs
         WHERE state = 'running' {exclude}
         ORDER BY started_at, sequence
         LIMIT 1)),
    EXISTS (SELECT 1 FROM tickwork_jobs
            WHERE state = 'queued' AND cancellation_id IS NOT NULL)
"""

SELECT_CLAIM = f"SELECT {JOB_COLUMNS}, claim_token FROM tickwork_jobs WHERE sequence = ?"

# Settle the oldest cancelled job that is still queued, without running it.
# Its queue's head may be busy; cancellation does not wait for it.
SETTLE_NEXT_CANCELLED = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = 'cancelled', failure_reason = NULL, settled_at = ?
WHERE sequence = (
    SELECT sequence FROM tickwork_jobs
    WHERE state = 'queued' AND cancellation_id IS NOT NULL
    ORDER BY sequence
    LIMIT 1)
RETURNING {JOB_COLUMNS}
"""

# Record a cancellation: only the first id sticks, a settled job is never
# touched, and with only_if_queued a started job is not either. The lifecycle
# decided from a read; this fence makes the write match nothing if that
# decision no longer holds. Returns the queue (for the projector).
_RECORD_CANCELLATION = """
UPDATE tickwork_jobs SET cancellation_id = ?
WHERE job_id = ? AND cancellation_id IS NULL AND {states}
RETURNING queue
"""
RECORD_CANCELLATION = _RECORD_CANCELLATION.format(states="state <> 'settled'")
RECORD_CANCELLATION_IF_QUEUED = _RECORD_CANCELLATION.format(states="state = 'queued'")

# Failing a lane: settle up to ?3 of the lane's unsettled jobs as failed,
# running ones first, then waiting ones oldest first. Settled history and
# other lanes are not matched. Running jobs come from the small running
# index; waiting ones from the lane index (the repeated state IN term lets
# SQLite prove that partial index applies).
FAIL_LANE = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = 'failed', failure_reason = ?2, settled_at = ?4
WHERE sequence IN (
    SELECT sequence FROM (
        SELECT sequence FROM tickwork_jobs INDEXED BY tickwork_jobs_running
        WHERE state = 'running' AND lane = ?1
        ORDER BY sequence LIMIT ?3)
    UNION ALL
    SELECT sequence FROM (
        SELECT sequence FROM tickwork_jobs INDEXED BY tickwork_jobs_lane_pending
        WHERE lane = ?1 AND state IN ('queued', 'running') AND state = 'queued'
        ORDER BY sequence LIMIT ?3)
    LIMIT ?3)
RETURNING {JOB_COLUMNS}
"""

LANE_HAS_PENDING = """
SELECT EXISTS (
    SELECT 1 FROM tickwork_jobs WHERE lane = ? AND state IN ('queued', 'running'))
"""

# Purge: delete one queue's waiting jobs; running and settled rows stay.
PURGE_QUEUE = """
DELETE FROM tickwork_jobs WHERE queue = ? AND state = 'queued'
RETURNING sequence
"""

# The read statements below (and JOB_COLUMNS, SELECT_QUEUE_HEAD) serve D1 as
# well (tickwork.stores.sql.d1 imports them): D1 is SQLite, and both schemas
# have these columns and indexes. Columns are named (AS ...) because D1 and
# Durable Object results are objects keyed by column name.

# Status of every queue: job counts by (queue, state, outcome). Costly on
# purpose and said so: no index holds every row's queue and outcome, so this
# reads every row of the table, the whole settled history included (and
# sorts the groups), O(all jobs ever kept). For a dashboard now and then,
# not for a hot path; QUEUE_STATUS reads one queue from the indexes.
STATUS = """
SELECT queue, state, outcome, count(*) AS n FROM tickwork_jobs
GROUP BY queue, state, outcome
"""

# Status of one queue, one row: queued and running counts from the
# queue_waiting and running indexes (counted from the index alone), then the
# queue's settled jobs by outcome, found through the queue_settled index.
# Owner-local, outcome is not in that index, so each settled row of the queue
# is looked up: the cost grows with the queue's own settled history, never
# with other queues'. On D1 the index is (queue, outcome)
# (schema/d1/0003_settled_by_queue.sql): counted from the index alone.
# Columns: queued, running, then one count per outcome in
# tickwork.model.outcomes.OUTCOMES order.
QUEUE_STATUS = """
SELECT
    (SELECT count(*) FROM tickwork_jobs INDEXED BY tickwork_jobs_queue_waiting
     WHERE queue = ?1 AND state = 'queued') AS queued,
    (SELECT count(*) FROM tickwork_jobs INDEXED BY tickwork_jobs_running
     WHERE queue = ?1 AND state = 'running') AS running,
    count(CASE WHEN outcome = 'completed' THEN 1 END) AS completed,
    count(CASE WHEN outcome = 'failed' THEN 1 END) AS failed,
    count(CASE WHEN outcome = 'cancelled' THEN 1 END) AS cancelled,
    count(CASE WHEN outcome = 'outcome_unknown' THEN 1 END) AS outcome_unknown,
    count(CASE WHEN outcome = 'interrupted' THEN 1 END) AS interrupted
FROM tickwork_jobs INDEXED BY tickwork_jobs_queue_settled
WHERE queue = ?1 AND state = 'settled'
"""

# Written as two probes so each uses its partial index.
HAS_PENDING_WORK = """
SELECT EXISTS (SELECT 1 FROM tickwork_jobs WHERE state = 'queued')
    OR EXISTS (SELECT 1 FROM tickwork_jobs WHERE state = 'running')
"""


# ----------------------------------------------------------------------------
# Partitioned ticks (a runtime opened with a concurrent lane).
#
# Such a runtime has two tick slots: the serial slot selects jobs outside the
# concurrent lane (lane <> ?1), the concurrent slot only jobs in it
# (lane = ?1). The statements below are the partitioned forms of CLAIM_NEXT,
# CLAIM_NEXT_IF_CLEAR, TICK_PROBE and SETTLE_NEXT_CANCELLED; a runtime without
# a concurrent lane keeps using the statements above, unchanged.
#
# Binding: ?1 is always the concurrent lane and comes first in the text; the
# other fixed values are numbered after it (?2, ?3, ...), and the {exclude}
# lists of claim tokens use bare ``?``, which SQLite numbers on from the
# largest number already used. So every partitioned statement binds
# (lane, <the values its unpartitioned form binds, in the same order>).
#
# {op} is ``=`` (the concurrent slot) or ``<>`` (the serial slot).
# ----------------------------------------------------------------------------

# Claim within a partition. Marks running, under a fresh claim token, the
# best job (priority desc, oldest first) of the slot's partition that heads
# its queue across lanes, in one statement. {candidates} picks it;
# {guard} is empty or _PARTITION_CLAIM_GUARD.
_PARTITION_CLAIM = f"""
UPDATE tickwork_jobs
SET state = 'running', claim_token = ?2, started_at = ?3
WHERE sequence = {{candidates}}
{{guard}}
RETURNING {JOB_COLUMNS}
"""

# A candidate heads its queue: the queue has no running job (in either
# partition) and no runnable job of the queue, in any lane, comes before it.
# Unlike in CLAIM_NEXT, coming first in a walk does not prove this: the
# better job may be in the other partition, which the walk skips. Costs one
# probe of the running index and one of the queue-waiting index. A cancelled
# queued job never runs, so it holds no queue; its own slot settles it.
_HEADS_ITS_QUEUE = """
      AND NOT EXISTS (
          SELECT 1 FROM tickwork_jobs AS busy
          WHERE busy.queue = candidate.queue AND busy.state = 'running')
      AND candidate.sequence = (
          SELECT head.sequence FROM tickwork_jobs AS head
          WHERE head.queue = candidate.queue AND head.state = 'queued'
            AND head.cancellation_id IS NULL
          ORDER BY head.priority DESC, head.sequence
          LIMIT 1)"""

# The serial slot walks the runnable index in pick order, as CLAIM_NEXT does,
# and stops at the first job outside the concurrent lane that heads its
# queue. What it steps over: concurrent-lane jobs ahead of that job, and jobs
# of held queues (as CLAIM_NEXT does).
_SERIAL_PICK = f"""(
    SELECT candidate.sequence FROM tickwork_jobs AS candidate
        INDEXED BY tickwork_jobs_runnable
    WHERE candidate.state = 'queued' AND candidate.cancellation_id IS NULL
      AND candidate.lane <> ?1 {_HEADS_ITS_QUEUE}
    ORDER BY candidate.priority DESC, candidate.sequence
    LIMIT 1)"""

# The concurrent slot has no index in its lane's pick order (the schema has
# none keyed by lane and priority), so it looks in three steps, each only if
# the one before found nothing:
#   1. does its lane have a runnable job at all? One probe of the lane index
#      (the repeated state IN term lets SQLite prove that partial index
#      applies): an idle concurrent lane costs next to nothing, however deep
#      the serial backlog;
#   2. the first 64 runnable jobs in global pick order: the best of its jobs
#      among them that heads its queue. They are a prefix of the pick order,
#      so a job found here is the best one overall; this is the common case;
#   3. else all of its lane's pending jobs, from the lane index, ordered.
# coalesce and CASE evaluate their arms only as needed. So the concurrent
# slot's cost grows with its own lane's backlog at worst, never with the
# serial backlog.
_CONCURRENT_PICK = f"""(CASE WHEN EXISTS (
    SELECT 1 FROM tickwork_jobs INDEXED BY tickwork_jobs_lane_pending
    WHERE lane = ?1 AND state IN ('queued', 'running')
      AND state = 'queued' AND cancellation_id IS NULL)
THEN coalesce(
    (SELECT candidate.sequence FROM (
        SELECT sequence, queue, lane, priority FROM tickwork_jobs
            INDEXED BY tickwork_jobs_runnable
        WHERE state = 'queued' AND cancellation_id IS NULL
        ORDER BY priority DESC, sequence
        LIMIT 64) AS candidate
     WHERE candidate.lane = ?1 {_HEADS_ITS_QUEUE}
     ORDER BY candidate.priority DESC, candidate.sequence
     LIMIT 1),
    (SELECT candidate.sequence FROM tickwork_jobs AS candidate
        INDEXED BY tickwork_jobs_lane_pending
     WHERE candidate.lane = ?1 AND candidate.state IN ('queued', 'running')
       AND candidate.state = 'queued' AND candidate.cancellation_id IS NULL
       {_HEADS_ITS_QUEUE}
     ORDER BY candidate.priority DESC, candidate.sequence
     LIMIT 1))
END)"""

# The partitioned fast path: claim only when PARTITION_TICK_PROBE would find
# nothing to do first in this partition (no running claim of the partition
# outside {exclude}, no cancelled job of the partition waiting). The other
# slot's claims and cancellations are not this slot's business.
_PARTITION_CLAIM_GUARD = """
  AND NOT EXISTS (SELECT 1 FROM tickwork_jobs
                  WHERE state = 'running' AND lane {op} ?1 {exclude})
  AND NOT EXISTS (SELECT 1 FROM tickwork_jobs
                  WHERE state = 'queued' AND cancellation_id IS NOT NULL AND lane {op} ?1)
"""

# TICK_PROBE within a partition: the running claim of this partition to ask
# the liveness probe about (round robin after the (started_at, sequence)
# cursor, skipping {exclude}), and whether a cancelled job of this partition
# is still queued. A claim of the other partition is never probed: it belongs
# to the other slot, which may be executing it right now.
_PARTITION_TICK_PROBE = """
SELECT
    coalesce(
        (SELECT sequence FROM tickwork_jobs
         WHERE state = 'running' AND lane {op} ?1 {exclude}
           AND (started_at, sequence) > (?, ?)
         ORDER BY started_at, sequence
         LIMIT 1),
        (SELECT sequence FROM tickwork_jobs
         WHERE state = 'running' AND lane {op} ?1 {exclude}
         ORDER BY started_at, sequence
         LIMIT 1)),
    EXISTS (SELECT 1 FROM tickwork_jobs
            WHERE state = 'queued' AND cancellation_id IS NOT NULL AND lane {op} ?1)
"""

# SETTLE_NEXT_CANCELLED within a partition: the oldest cancelled job of this
# partition that is still queued settles cancelled without running, even
# while its queue's head is busy (in either slot).
_PARTITION_SETTLE_NEXT_CANCELLED = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = 'cancelled', failure_reason = NULL, settled_at = ?2
WHERE sequence = (
    SELECT sequence FROM tickwork_jobs
    WHERE state = 'queued' AND cancellation_id IS NOT NULL AND lane {{op}} ?1
    ORDER BY sequence
    LIMIT 1)
RETURNING {JOB_COLUMNS}
"""


def _partitioned(template: str, op: str, **parts: str) -> str:
    # format() does not re-read substituted text, so {exclude} inside a part
    # survives for the store to fill in.
    return template.format(op=op, **parts)


CLAIM_OUTSIDE_LANE = _partitioned(_PARTITION_CLAIM, "<>", candidates=_SERIAL_PICK,
                                  guard="")
CLAIM_OUTSIDE_LANE_IF_CLEAR = _partitioned(
    _PARTITION_CLAIM, "<>", candidates=_SERIAL_PICK,
    guard=_partitioned(_PARTITION_CLAIM_GUARD, "<>", exclude="{exclude}"))
CLAIM_IN_LANE = _partitioned(_PARTITION_CLAIM, "=", candidates=_CONCURRENT_PICK, guard="")
CLAIM_IN_LANE_IF_CLEAR = _partitioned(
    _PARTITION_CLAIM, "=", candidates=_CONCURRENT_PICK,
    guard=_partitioned(_PARTITION_CLAIM_GUARD, "=", exclude="{exclude}"))
TICK_PROBE_OUTSIDE_LANE = _partitioned(_PARTITION_TICK_PROBE, "<>", exclude="{exclude}")
TICK_PROBE_IN_LANE = _partitioned(_PARTITION_TICK_PROBE, "=", exclude="{exclude}")
SETTLE_NEXT_CANCELLED_OUTSIDE_LANE = _partitioned(_PARTITION_SETTLE_NEXT_CANCELLED, "<>")
SETTLE_NEXT_CANCELLED_IN_LANE = _partitioned(_PARTITION_SETTLE_NEXT_CANCELLED, "=")

# The settled feed (read_settled): settled jobs in enqueue order after
# ?1, at most ?2, cut by a prefix fence. The page is the first ?2 jobs after
# ?1 in sequence order, whatever their state: a walk of the primary key from
# ?1, so it costs the page size (plus, in a runtime with a concurrent lane,
# the concurrent-lane rows it steps over: {partition} is empty, or
# ``AND lane <> ?3`` to keep the serial partition only). Only the part of the
# page before its first unsettled job (queued or running) is returned, so a
# settlement is withheld until every earlier job of the partition has settled
# or been purged (a purged job is deleted and holds nothing back), and pages
# read one after another are a gap-free prefix of the partition in enqueue
# order. One statement, so the page and its fence come from one snapshot.
# Binds (after_sequence, limit[, concurrent lane]).
_READ_SETTLED = f"""
WITH page AS (
    SELECT {JOB_COLUMNS} FROM tickwork_jobs
    WHERE sequence > ?1 {{partition}}
    ORDER BY sequence
    LIMIT ?2)
SELECT {JOB_COLUMNS} FROM page
WHERE sequence < coalesce(
    (SELECT min(sequence) FROM page WHERE state <> 'settled'), 9223372036854775807)
ORDER BY sequence
"""
READ_SETTLED = _READ_SETTLED.format(partition="")
READ_SETTLED_OUTSIDE_LANE = _READ_SETTLED.format(partition="AND lane <> ?3")
