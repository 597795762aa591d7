"""Every statement of the SQLite family, one source for the owner-local store and D1.

Both are SQLite with the same job columns and indexes (the owner-local table
lacks only D1's lease column and its lease index). So each statement is
written once, as a ``Template``, and rendered for a ``Target``:

* ``OWNER_LOCAL`` (Python's sqlite3, a Durable Object's storage): the clock
  is a bound value (``:now`` is the runtime's clock), and a claim has no
  lease: it is fenced on its token alone, and its liveness is asked of the
  host;
* ``D1``: the clock is database time, unless ``:now`` overrides it (tests),
  so every lease is judged by one clock whatever the workers' clocks say;
  a claim carries a lease, and every transition out of ``running`` is also
  fenced on it.

A template names its parameters (``:name``) and lists them in binding order;
rendering turns them into ``?N`` (D1 takes no named parameters) and drops
those the target's text does not use. The text's ``{now}`` and the lease
fragments (``{set_lease}``, ``{lease_live}``, ``{lease_dead}``,
``{clear_lease}``, ``{suspect}``) are the only parts that differ per target.
``{exclude}`` stays in an owner-local text for the store to fill with the
tokens of the claims it executes (numbered after the named parameters).

Each statement is one atomic mutation or read; the comment above it says
what it guarantees. No statement binds more than a handful of values (the
owner-local probes add one per claim the runtime executes), far inside the
limit of 100 of both D1 and Durable Object storage.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tickwork.model.jobs import ValidJob
from tickwork.model.limits import MAX_RUNNING_LIMIT
from tickwork.model.schedules import ValidSchedule
from tickwork.stores.rows import CARGO as CARGO_ROWS
from tickwork.stores.rows import CARGO_COLUMNS, JOB_COLUMNS, JOB_SELECT, Columns
from tickwork.stores.rows import CLAIM as CLAIM_ROWS
from tickwork.stores.rows import JOB as JOB_ROWS
from tickwork.stores.rows import SEQUENCE as SEQUENCE_ROWS


@dataclass(frozen=True, slots=True)
class Target:
    """A store of the SQLite family: how it tells time and whether claims have leases."""

    name: str
    now: str
    leases: bool


OWNER_LOCAL: Final = Target("owner-local", now=":now", leases=False)
#: Database time in epoch milliseconds, unless :now overrides it. SQLite keeps
#: 'now' fixed within one statement, so every use in a statement agrees.
D1: Final = Target(
    "d1", leases=True,
    now="coalesce(:now, CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER))")


#: A dead letter's outcome, as each store's tickwork_jobs_dead index states
#: it (a query must say it alike for SQLite to use that index): owner-local's
#: 0008 writes it as a chain of "=", which SQLite compares in place instead of
#: building a b-tree of the three values on every settlement; D1's schema
#: keeps the IN list.
DEAD_OUTCOME_CHAIN = ("(outcome = 'failed' OR outcome = 'outcome_unknown'"
                      " OR outcome = 'interrupted')")
DEAD_OUTCOME_LIST = "outcome IN ('failed', 'outcome_unknown', 'interrupted')"

#: What a statement of unsettled jobs says for SQLite to use D1's indexes of
#: unsettled jobs by queue and by lane (owner-local's: PENDING_LISTED).
PENDING_STATES = "state IN ('queued', 'running')"
#: A queue's waiting job that can head it: in the ready set.
HEAD_READY = "state = 'queued' AND due_at IS NULL"


# ------------------------------------------ the deferred part (owner-local)
#
# Owner-local schemas 0009 and 0010 write the index entries no claim needs
# in batches: a row is "listed" once it is in the indexes of unsettled jobs
# (by queue, by lane, and its queue's pick order), and "filed" once its
# settlement is in the history indexes. When the batches run is decided in
# one place, tickwork.stores.index_batching. A read of the owner-local store
# also reads the rows waiting for a batch, through the fragments of this
# section and the {pending}, {file} and {unfile} fragments (empty on D1), so
# no answer depends on the batches; an owner-local statement that differs
# from D1's only for this is named *_LOCAL and built from them. The
# statements that run the batches close the settlements section.

#: What a statement of unsettled jobs says for SQLite to use the owner-local
#: indexes of unsettled jobs by queue and by lane: they hold every listed,
#: unfiled row (queued, running, and the drain's settlements not filed yet:
#: the statement still names the states it wants).
PENDING_LISTED = "listed = 1 AND filed = 0"

#: Owner-local (0009): the sequence every row up to which is listed. The rows
#: after it are the unlisted ones (at most a few hundred): a read of
#: unsettled jobs also reads them, through the primary key (NOT INDEXED: no
#: index of queued jobs may be walked instead).
LISTED_THROUGH = ("coalesce((SELECT CAST(value AS INTEGER) FROM tickwork_meta"
                  " WHERE key = 'listed_through'), 0)")
UNLISTED = f"tickwork_jobs NOT INDEXED WHERE sequence > {LISTED_THROUGH}"
#: Owner-local (0009): the settlements not filed yet (a few dozen rows at
#: most), which a read of settled history also reads.
UNFILED = "tickwork_jobs INDEXED BY tickwork_jobs_unfiled WHERE filed = 0 AND state = 'settled'"
#: Owner-local (0010): a queue's listed, unfiled rows in pick order (queued,
#: running, and the drain's settlements not filed yet: a read names the
#: state it wants, and reads the unlisted rows too).
QUEUE_ORDER = f"tickwork_jobs INDEXED BY tickwork_jobs_queue_order WHERE {PENDING_LISTED}"
#: Owner-local (0015): a lane's listed, unfiled rows of one queue in pick
#: order, those waiting for their time apart (due_at is in the key). The
#: index exists while a queue is wide (LANE_ORDER_INDEX).
LANE_ORDER = f"tickwork_jobs INDEXED BY tickwork_jobs_lane_order WHERE {PENDING_LISTED}"


#: Owner-local (0009): what a read of settled rows says (before its state) for
#: SQLite to use the history indexes, which hold the filed rows only.
FILED = "filed = 1 AND "


def queue_rows(select: str, where: str) -> str:
    """Owner-local (0010): ``select`` over one queue's unsettled rows that
    match ``where`` (which names the queue and the state): the listed ones
    from the queue order index, then the unlisted ones."""
    return f"""SELECT {select} FROM {QUEUE_ORDER} AND {where}
    UNION ALL
    SELECT {select} FROM {UNLISTED} AND {where}"""


def queue_head(queue: str, ready: str) -> str:
    """Owner-local (0010): the sequence of queue ``queue``'s first job in pick
    order that matches ``ready``. From the queue order index (stepping over
    the queue's running jobs and unfiled settlements ahead of it), and
    among the unlisted rows only while there are any (asked once per
    statement)."""
    return first_in_pick_order(QUEUE_ORDER, f"queue = {queue} AND {ready}")


def first_in_pick_order(indexed: str, where: str) -> str:
    """Owner-local: the sequence of the first row matching ``where`` in pick
    order (priority desc, sequence), from ``indexed`` (a ``FROM ... WHERE``
    over an index of listed rows in that order) and from the unlisted rows,
    which are read only while there are any (asked once per statement)."""
    listed = f"""SELECT {{columns}} FROM {indexed} AND {where}
            ORDER BY priority DESC, sequence
            LIMIT 1"""
    return f"""CASE WHEN NOT EXISTS (SELECT 1 FROM {UNLISTED})
    THEN ({listed.format(columns="sequence")})
    ELSE (
        SELECT sequence FROM (
            SELECT * FROM ({listed.format(columns="sequence, priority")})
            UNION ALL
            SELECT sequence, priority FROM {UNLISTED} AND {where})
        ORDER BY priority DESC, sequence
        LIMIT 1) END"""


def merged_page(indexed: str, few: str, order: str, limit: str) -> str:
    """An owner-local page (0009) read from two sets of rows: the first
    ``limit`` in ``order`` of ``indexed`` (a ``FROM ... WHERE`` walked in
    ``order`` by its index), and every row of ``few`` (the rows not listed or
    not filed yet: a few dozen at most), merged into one page in ``order``.
    ``order`` names result columns only."""
    return f"""
SELECT * FROM (
    SELECT {JOB_SELECT} FROM {indexed}
    ORDER BY {order}
    LIMIT {limit})
UNION ALL
SELECT {JOB_SELECT} FROM {few}
ORDER BY {order}
LIMIT {limit}
"""


def settled_page(index: str, where: str, order: str, limit: str) -> str:
    """Settled jobs matching ``where``: the filed ones through ``index`` (a
    history index), and the unfiled ones."""
    return merged_page(f"tickwork_jobs INDEXED BY {index} WHERE {where} AND filed = 1",
                       f"{UNFILED} AND {where}", order, limit)


#: A job a claim could take, but for limits: queued, due, not cancelled, in
#: a queue that is not paused (the work HAS_PENDING_WORK's first probe asks for).
READY_UNPAUSED = (f"{HEAD_READY} AND cancellation_id IS NULL"
                  " AND queue NOT IN (SELECT queue FROM tickwork_paused_queues)")
#: Whether the queue or lane of the rate row ``rate`` has such a job, per
#: store: the walk of the key's entries in an index of its unsettled jobs
#: up to its first ready one (D1: the queue's waiting index, or the lane's
#: pending one); owner-local (0009, 0010) also reads its unlisted rows.
RATE_KEY_READY_D1 = f"""CASE rate.kind
        WHEN 'queue' THEN EXISTS (
            SELECT 1 FROM tickwork_jobs INDEXED BY tickwork_jobs_queue_waiting
            WHERE queue = rate.key AND {READY_UNPAUSED})
        ELSE EXISTS (
            SELECT 1 FROM tickwork_jobs INDEXED BY tickwork_jobs_lane_pending
            WHERE lane = rate.key AND {PENDING_STATES} AND {READY_UNPAUSED}) END"""
RATE_KEY_READY_LOCAL = f"""CASE rate.kind
        WHEN 'queue' THEN EXISTS (
            SELECT 1 FROM {QUEUE_ORDER} AND queue = rate.key AND {READY_UNPAUSED})
        ELSE EXISTS (
            SELECT 1 FROM tickwork_jobs INDEXED BY tickwork_jobs_lane_pending
            WHERE lane = rate.key AND {PENDING_LISTED} AND {READY_UNPAUSED}) END
        OR EXISTS (SELECT 1 FROM {UNLISTED} AND {READY_UNPAUSED}
                   AND CASE rate.kind WHEN 'queue' THEN queue ELSE lane END = rate.key)"""


def _fragments(target: Target) -> dict[str, str]:
    now = target.now
    if not target.leases:
        # No lease: a running claim is live until the host's probe says otherwise.
        # A settlement files its row ({file}) unless it says otherwise (the
        # drain's, see FILE_SETTLED); a redrive takes it out ({unfile}).
        return {"now": now, "set_lease": "", "lease_live": "", "lease_dead": "",
                "clear_lease": "", "live_claim": "state = 'running'",
                "suspect": "state = 'running' {exclude}", "dead_outcome": DEAD_OUTCOME_CHAIN,
                "pending": PENDING_LISTED, "file": ", filed = 1", "unfile": ", filed = 0",
                "filed": FILED,
                "lane_running": LANE_RUNNING_LOCAL.format(lane="candidate.lane"),
                "rate_key_ready": RATE_KEY_READY_LOCAL,
                "turn_best": lane_best_local("turn.queue", "turn.lane"),
                "turn_lane_running": LANE_RUNNING_LOCAL.format(lane="turn.lane")}
    return {
        "now": now,
        "dead_outcome": DEAD_OUTCOME_LIST,
        "pending": PENDING_STATES, "file": "", "unfile": "", "filed": "",
        "lane_running": LANE_RUNNING_D1.format(lane="candidate.lane"),
        "rate_key_ready": RATE_KEY_READY_D1,
        "turn_best": lane_best_d1("turn.queue", "turn.lane"),
        "turn_lane_running": LANE_RUNNING_D1.format(lane="turn.lane"),
        # A claim's lease ends :lease_ms after it is taken.
        "set_lease": f", lease_expires_at = {now} + :lease_ms",
        "lease_live": f"AND lease_expires_at > {now}",
        "lease_dead": f"AND lease_expires_at <= {now}",
        "clear_lease": ", lease_expires_at = NULL",
        "live_claim": f"state = 'running' AND lease_expires_at > {now}",
        "suspect": f"state = 'running' AND lease_expires_at <= {now}",
    }


def _resolved_fragments(target: Target) -> dict[str, str]:
    # Fragments hold {now}: fill it in them first (keeping {exclude} for the
    # store), then they fill the text.
    return {key: value if key == "now"
            else value.replace("{exclude}", "{{exclude}}").format(now=target.now)
            for key, value in _fragments(target).items()}


#: The D1 text of every lease fragment (what the owner-local text lacks).
def lease_fragments() -> tuple[str, ...]:
    resolved = _resolved_fragments(D1)
    return tuple(resolved[key] for key in ("set_lease", "lease_live", "lease_dead",
                                           "clear_lease"))


@dataclass(frozen=True, slots=True)
class Statement:
    """A template rendered for one target: the text (``?N`` placeholders),
    the parameters in binding order, and the result columns."""

    name: str
    text: str
    params: tuple[str, ...]
    columns: Columns | None


_PARAMETER = re.compile(r":([a-z_]+)\b")


@dataclass(frozen=True, slots=True)
class Template:
    """One statement of the family, before it is rendered for a target."""

    name: str
    text: str
    params: tuple[str, ...] = ()
    columns: Columns | None = None
    targets: tuple[Target, ...] = (OWNER_LOCAL, D1)

    def expand(self, target: Target) -> str:
        """The text for ``target``, its parameters still named."""
        if target not in self.targets:
            raise ValueError(f"{self.name} is not a statement of the {target.name} store")
        return self.text.format(**_resolved_fragments(target))

    def render(self, target: Target) -> Statement:
        text = self.expand(target)
        used = set(_PARAMETER.findall(text))
        unknown = used - set(self.params)
        if unknown:
            raise ValueError(f"{self.name}: parameters {sorted(unknown)} are not declared")
        params = tuple(name for name in self.params if name in used)
        numbers = {name: f"?{position}" for position, name in enumerate(params, start=1)}
        text = _PARAMETER.sub(lambda match: numbers[match.group(1)], text)
        return Statement(self.name, text.strip() + "\n", params, self.columns)


_local = (OWNER_LOCAL,)
_d1 = (D1,)


def render_owner_local(template: Template, *binds: str) -> Statement:
    """``template`` for the owner-local store, checked to bind ``binds`` in
    that order (the order its caller passes the values in)."""
    statement = template.render(OWNER_LOCAL)
    if statement.params != binds:
        raise AssertionError(f"{template.name} binds {statement.params}, not {binds}")
    return statement

#: Claims take no job of a paused queue (one probe of the paused table's key).
NOT_PAUSED = """AND NOT EXISTS (
          SELECT 1 FROM tickwork_paused_queues AS paused
          WHERE paused.queue = candidate.queue)"""

# ---------------------------------------------------------------- ingest

# When a new job becomes due, by the store's clock at ingest: at run_at if
# that is still ahead, after delay_ms if that is positive, else at once
# (NULL: a job due at once never enters the due-time index). Written so that
# a job that names no time never reads the clock here (D1's clock is an
# expression evaluated per use).
DUE_AT = ("CASE WHEN :run_at IS NOT NULL THEN (CASE WHEN :run_at > {now} THEN :run_at END)"
          " WHEN :delay_ms > 0 THEN {now} + :delay_ms END")

#: What every insert of a job binds, in this order.
JOB_PARAMS = ("job_id", "queue", "lane", "priority", "payload_json", "max_recoveries",
              "run_at", "delay_ms", "retry_json", "now")

# A new job_id inserts one queued row and returns its sequence; an existing
# one inserts nothing and returns no row, and the lifecycle compares cargo
# (identical -> duplicate, different -> conflict). The UNIQUE index on job_id
# makes this race-free.
_INSERT_JOB = f"""
INSERT INTO tickwork_jobs
    (job_id, queue, lane, priority, payload_json, max_recoveries, run_at, delay_ms,
     retry_json, due_at, state, enqueued_at)
VALUES (:job_id, :queue, :lane, :priority, :payload_json, :max_recoveries, :run_at,
        :delay_ms, :retry_json, {DUE_AT}, 'queued', {{now}})
"""
INSERT_JOB = Template("insert_job", _INSERT_JOB + """ON CONFLICT (job_id) DO NOTHING
RETURNING sequence
""", JOB_PARAMS, SEQUENCE_ROWS)


def at_once(template: Template) -> Template:
    """``template`` for a job that names no time and no retry policy (the
    common case): run_at, delay_ms, retry_json and due_at are NULL literals,
    so it binds three values fewer and computes nothing; otherwise the very
    same statement."""
    text = (template.text.replace(DUE_AT, "NULL").replace(":run_at", "NULL")
            .replace(":delay_ms", "NULL").replace(":retry_json", "NULL"))
    params = tuple(name for name in template.params
                   if name not in ("run_at", "delay_ms", "retry_json"))
    return Template(f"{template.name}_at_once", text, params, template.columns,
                    template.targets)


INSERT_JOB_AT_ONCE = at_once(INSERT_JOB)
#: What an insert of a job that names no time and no retry binds, in this order.
JOB_PARAMS_AT_ONCE = INSERT_JOB_AT_ONCE.params

# ----------------------------------------------------------------- reads

SELECT_JOB = Template("select_job", f"""
SELECT {JOB_SELECT} FROM tickwork_jobs WHERE job_id = :job_id
""", ("job_id",), JOB_ROWS)

# A stored job's identity and cargo: a replay is compared with the stored
# payload text as it is, without decoding it.
SELECT_CARGO = Template("select_cargo", f"""
SELECT {', '.join(CARGO_COLUMNS)} FROM tickwork_jobs WHERE job_id = :job_id
""", ("job_id",), CARGO_ROWS)

# A queue's head: its running job if any, else its ready job (in the ready
# set: due_at cleared) with the highest priority, oldest first. A job waiting
# for its time holds no queue; it becomes a head when a tick moves it into
# the ready set (PROMOTE_DUE), a durable change a projector sees. Two index
# probes, never a scan of other queues. Owner-local (0010) finds the ready
# job in the queue order index, stepping over the queue's running jobs and
# unfiled settlements ahead of it, and among the unlisted rows while there
# are any (asked once per statement).
# A wide queue (a limit above one) runs several: the head is the one that
# has run longest (a sort of at most its limit's rows).
_RUNNING_HEAD = f"""
SELECT * FROM (
    SELECT {JOB_SELECT} FROM tickwork_jobs
    WHERE queue = :queue AND state = 'running'
    ORDER BY started_at, sequence
    LIMIT 1)"""
SELECT_QUEUE_HEAD = Template("select_queue_head", f"""{_RUNNING_HEAD}
UNION ALL
SELECT * FROM (
    SELECT {JOB_SELECT} FROM tickwork_jobs
    WHERE queue = :queue AND {HEAD_READY}
    ORDER BY priority DESC, sequence
    LIMIT 1)
LIMIT 1
""", ("queue",), JOB_ROWS, _d1)

# A job with its current claim token and whether that claim is live (running,
# and on D1 its lease unexpired, by database time): the careful settlement
# decides from this.
SELECT_CLAIM = Template("select_claim", f"""
SELECT {JOB_SELECT}, claim_token, {{live_claim}} AS lease_live
FROM tickwork_jobs WHERE sequence = :sequence
""", ("sequence", "now"), CLAIM_ROWS)

# Status of every queue: job counts by (queue, state, outcome), a queued job
# still waiting for its time (not yet in the ready set) counted as state
# 'delayed'. Costly on purpose and said so: no index holds every row's queue
# and outcome, so this reads every row of the table, the whole settled
# history included (and sorts the groups), O(all jobs ever kept). For a
# dashboard now and then, not for a hot path; QUEUE_STATUS reads one queue
# from the indexes. A paused queue adds a row in state 'paused' (so it is
# listed even without jobs).
STATUS = Template("status", """
SELECT queue,
       CASE WHEN state = 'queued' AND due_at IS NOT NULL THEN 'delayed' ELSE state END
           AS state,
       outcome, count(*) AS n
FROM tickwork_jobs
GROUP BY 1, 2, 3
UNION ALL
SELECT queue, 'paused', NULL, 1 FROM tickwork_paused_queues
""", (), Columns("queue", "state", "outcome", "n"))

# Status of one queue, one row: queued (in the ready set), running and
# delayed (waiting for their time) counts, then the queue's settled jobs by
# outcome, counted from the queue_outcomes index alone (its key starts with
# (queue, outcome): schema 0007 owner-local, 0009 on D1); the cost grows with
# the queue's own jobs, never with other queues'. On D1 the queued and
# delayed counts come from the queue_waiting index alone (it holds due_at);
# owner-local (0010) reads them from the queue order index and the unlisted
# rows, reading each row's state from the table, and also counts the
# queue's settlements not filed yet (tickwork_jobs_unfiled, 0009: a few
# dozen rows at most). Columns: queued, running, delayed, paused (0 or 1),
# then one count per outcome in tickwork.model.outcomes.OUTCOMES order.
_QUEUE_STATUS = """
SELECT
    {queued} AS queued,
    (SELECT count(*) FROM tickwork_jobs INDEXED BY tickwork_jobs_running
     WHERE queue = :queue AND state = 'running') AS running,
    {delayed} AS delayed,
    EXISTS (SELECT 1 FROM tickwork_paused_queues WHERE queue = :queue) AS paused,
    count(CASE WHEN outcome = 'completed' THEN 1 END) AS completed,
    count(CASE WHEN outcome = 'failed' THEN 1 END) AS failed,
    count(CASE WHEN outcome = 'cancelled' THEN 1 END) AS cancelled,
    count(CASE WHEN outcome = 'outcome_unknown' THEN 1 END) AS outcome_unknown,
    count(CASE WHEN outcome = 'interrupted' THEN 1 END) AS interrupted
FROM {settled}
"""
_QUEUE_STATUS_COLUMNS = Columns("queued", "running", "delayed", "paused", "completed", "failed",
                                "cancelled", "outcome_unknown", "interrupted")


def _waiting_count_d1(due: str) -> str:
    return f"""(SELECT count(*) FROM tickwork_jobs INDEXED BY tickwork_jobs_queue_waiting
     WHERE queue = :queue AND state = 'queued' AND due_at {due})"""


def _waiting_count_local(due: str) -> str:
    return f"""(SELECT count(*) FROM (
    {queue_rows("1", f"queue = :queue AND state = 'queued' AND due_at {due}")}))"""


QUEUE_STATUS = Template("queue_status", _QUEUE_STATUS.format(
    queued=_waiting_count_d1("IS NULL"), delayed=_waiting_count_d1("IS NOT NULL"),
    settled="""tickwork_jobs
    INDEXED BY tickwork_jobs_queue_outcomes
WHERE queue = :queue AND state = 'settled'"""), ("queue",), _QUEUE_STATUS_COLUMNS, _d1)
QUEUE_STATUS_LOCAL = Template("queue_status", _QUEUE_STATUS.format(
    queued=_waiting_count_local("IS NULL"), delayed=_waiting_count_local("IS NOT NULL"),
    settled=f"""(
    SELECT outcome FROM tickwork_jobs INDEXED BY tickwork_jobs_queue_outcomes
    WHERE queue = :queue AND filed = 1
    UNION ALL
    SELECT outcome FROM {UNFILED} AND queue = :queue)"""),
    ("queue",), _QUEUE_STATUS_COLUMNS, _local)

# The backlog of every queue with unsettled jobs, for gauges a scrape reads
# (tickwork.metrics): per queue, jobs ready to run, waiting for their time,
# running, and when the oldest ready job became ready (READY_SINCE). Only
# unsettled rows are read, never the settled history, so its cost grows
# with the backlog alone: on D1 the queue_pending index (0009, state in
# queued/running) in queue order, so the groups need no sort; owner-local
# (0010) the queue order index (listed, unfiled rows: it also holds the
# drain's settlements not filed yet, which the state test skips) and the
# unlisted rows. A cancelled job still queued is none of these: the next
# tick settles it without running it. Columns: queue, ready, delayed,
# running, ready_since (NULL without a ready job).
_BACKLOG_COUNTS = """
SELECT queue,
       count(CASE WHEN ready THEN 1 END) AS ready,
       count(CASE WHEN state = 'queued' AND cancellation_id IS NULL AND due_at IS NOT NULL
                  THEN 1 END) AS delayed,
       count(CASE WHEN state = 'running' THEN 1 END) AS running,
       min(CASE WHEN ready THEN {ready_since} END) AS ready_since
FROM ({rows})
GROUP BY queue
"""
#: When a ready job became ready (epoch ms): a first attempt when it was
#: first due (enqueued, or its run_at / delay came); a retried one when its
#: back-off ended (the history entry's due_at), a redriven one at its latest
#: redrive; a retry recorded before entries carried due_at, no earlier than
#: that attempt ended.
READY_SINCE = """CASE WHEN history_json IS NULL
     THEN max(enqueued_at, coalesce(run_at, 0), enqueued_at + coalesce(delay_ms, 0))
     ELSE coalesce(json_extract(history_json, '$[#-1].due_at'),
                   (SELECT max(redriven_at) FROM tickwork_redrives AS redrive
                    WHERE redrive.job_id = row_job_id),
                   json_extract(history_json, '$[#-1].ended_at'), enqueued_at) END"""
_BACKLOG_ROW = ("queue, state, due_at, cancellation_id, job_id AS row_job_id, history_json, "
                "enqueued_at, "
                "run_at, delay_ms, (state = 'queued' AND cancellation_id IS NULL "
                "AND due_at IS NULL) AS ready")
_BACKLOG_COLUMNS = Columns("queue", "ready", "delayed", "running", "ready_since")
BACKLOG = Template("backlog", _BACKLOG_COUNTS.format(ready_since=READY_SINCE, rows=f"""
    SELECT {_BACKLOG_ROW}
    FROM tickwork_jobs INDEXED BY tickwork_jobs_queue_pending
    WHERE state IN ('queued', 'running')
    ORDER BY queue"""), (), _BACKLOG_COLUMNS, _d1)
BACKLOG_LOCAL = Template("backlog", _BACKLOG_COUNTS.format(ready_since=READY_SINCE, rows=f"""
    SELECT {_BACKLOG_ROW} FROM {QUEUE_ORDER}
      AND (state = 'queued' OR state = 'running')
    UNION ALL
    SELECT {_BACKLOG_ROW} FROM {UNLISTED}
      AND (state = 'queued' OR state = 'running')"""), (), _BACKLOG_COLUMNS, _local)

# ------------------------------------------------------ rate limits, read
#
# A queue or lane is rate-held at now while its row in tickwork_rate_limits
# (owner-local and D1 0014) has a hold in force (held_until > now) or a
# bucket with no start left (next_start > now * starts: GCRA, see
# tickwork.model.rate_limits). The claims take no job whose queue or lane is
# rate-held; the start a claim takes is spent by D1's trigger (its 0014) or
# by the owner-local store (SPEND_RATE). What a held key costs: a claim, and
# HAS_PENDING_WORK, step over each of its ready jobs that comes before the
# job they find in pick order, as over a paused queue's (measured on
# sqlite3 with 10,000 of them ahead: about 6 ms per claim, 9 ms per
# has_pending_work, against 35 us and 6 us with none).


def rate_free(job: str) -> str:
    """Neither the queue nor the lane of the row ``job`` (an alias) is
    rate-held at {now}. Whether the table has any row is asked once per
    statement (SQLite evaluates an uncorrelated subquery once), so without
    rate limits a candidate costs nothing more; with them, two probes of
    the primary key (kind, key) per candidate. CAST: a Durable Object binds
    now as a REAL, and now * starts (about 4e17) must be an exact integer."""
    return f"""CASE WHEN NOT EXISTS (SELECT 1 FROM tickwork_rate_limits) THEN 1
       ELSE NOT EXISTS (
          SELECT 1 FROM tickwork_rate_limits AS rate
          WHERE ((rate.kind = 'queue' AND rate.key = {job}.queue)
                 OR (rate.kind = 'lane' AND rate.key = {job}.lane))
            AND (rate.held_until > {{now}}
                 OR rate.next_start > CAST({{now}} AS INTEGER) * rate.starts)) END"""


#: The claims' conjunct: the candidate's queue and lane are not rate-held.
RATE_FREE = rate_free("candidate")

# When the first rate-held key that holds back a job a claim could
# otherwise take is released (NULL: none): the later of its hold and its
# bucket's next start (ms, rounded up), over the keys rate-held at now that
# have a ready job in a queue not paused ({rate_key_ready}). A scan of the
# rate rows (a handful; none without rate limits), and for each held one a
# walk of its key's index up to a ready job. A job may be held by its
# queue's row and its lane's: then the earlier release wakes a tick that
# finds it still held, and the next read says the later one.
RATE_RELEASE = """SELECT min(max(rate.held_until,
                  coalesce((rate.next_start + rate.starts - 1) / rate.starts, 0)))
            FROM tickwork_rate_limits AS rate
            WHERE (rate.held_until > {now}
                   OR rate.next_start > CAST({now} AS INTEGER) * rate.starts)
              AND ({rate_key_ready})"""

# Work for a tick now: a ready job of a queue that is not paused, a job due
# but not yet moved into the ready set, a cancelled job to settle, or a
# running claim, or a schedule slot that has come. A job waiting for its
# time is not: NEXT_DUE says when it will be. Written as five probes so each
# uses its partial index (runnable, cancel_pending, due, running, the
# schedules' next); the first steps over the ready jobs of paused queues
# that come first in pick order. Concurrency limits need no term: a ready
# job a limit holds has a running job in its queue or lane (a limit is at
# least 1), and a running claim is work already (the fourth probe), exactly
# as a serial queue's waiting jobs are while its head runs; once nothing
# runs, no limit holds a job. So limits never make a host wake for a job no
# claim can take. Rate limits can hold a job while nothing runs: the first
# probe steps over the ready jobs of rate-held queues and lanes as over
# those of paused queues (RATE_RELEASE says when they are released).
HAS_PENDING_WORK = Template("has_pending_work", f"""
SELECT EXISTS (SELECT 1 FROM tickwork_jobs AS ready
               WHERE {READY_UNPAUSED} AND {rate_free("ready")})
    OR EXISTS (SELECT 1 FROM tickwork_jobs
               WHERE state = 'queued' AND cancellation_id IS NOT NULL)
    OR EXISTS (SELECT 1 FROM tickwork_jobs
               WHERE state = 'queued' AND due_at IS NOT NULL AND due_at <= {{now}})
    OR EXISTS (SELECT 1 FROM tickwork_jobs WHERE state = 'running')
    OR EXISTS (SELECT 1 FROM tickwork_schedules WHERE paused = 0 AND next_at <= {{now}})
        AS pending
""", ("now",), Columns("pending"))

# The earliest due time of a job still waiting for it (NULL: none waits):
# when the next tick has work, for a host's alarm or timer. One probe of the
# due index.
NEXT_DUE = Template("next_due", """
SELECT due_at FROM tickwork_jobs
WHERE state = 'queued' AND due_at IS NOT NULL
ORDER BY due_at
LIMIT 1
""", (), Columns("due_at"))

# When a tick next has work, in one read: HAS_PENDING_WORK, the earliest of
# NEXT_DUE, the next schedule slot and RATE_RELEASE, and the store's clock
# (database time on D1), so a host compares like with like; and the next
# slot alone (a shared runtime keeps it, to know when its ticks must fill
# slots). So a Durable Object's alarm, and a drain's sleep, wake when a
# rate limit next lets a held job start, and nothing polls before.
NEXT_WORK = Template("next_work", f"""
SELECT ({HAS_PENDING_WORK.text.strip().removeprefix("SELECT").removesuffix("AS pending")})
           AS pending,
       (SELECT min(at) FROM (
            SELECT ({NEXT_DUE.text.strip()}) AS at
            UNION ALL
            SELECT (SELECT next_at FROM tickwork_schedules WHERE paused = 0
                    ORDER BY next_at LIMIT 1)
            UNION ALL
            SELECT ({RATE_RELEASE}))) AS next_due,
       {{now}} AS now,
       (SELECT next_at FROM tickwork_schedules WHERE paused = 0
        ORDER BY next_at LIMIT 1) AS next_slot
""", ("now",), Columns("pending", "next_due", "now", "next_slot"))

# The next rate release alone (RATE_RELEASE), for an owner-local runtime's
# parked slots (Parking.due_in_ms), read when a tick finds nothing to claim.
NEXT_WAITS = Template("next_waits", f"""
SELECT ({NEXT_DUE.text.strip()}) AS next_due, ({RATE_RELEASE}) AS released_at
""", ("now",), Columns("next_due", "released_at"), _local)

# Waiting jobs whose time has come join the ready set (due_at cleared: the
# runnable index holds only such jobs, so a claim never steps over a job
# that is not due, however many wait). Up to :limit per statement, earliest
# first; claims order them like any job (priority desc, oldest first).
# Every runtime runs this before it claims (owner-local: when its cached
# earliest due time has passed, with the projection of the queues it moved;
# D1: in the claim's batch; PostgreSQL: in the claim's transaction, before
# its queue locks: see stores/sql/postgres.py).
#: Most waiting jobs one PROMOTE_DUE moves (the PostgreSQL claim moves as many).
PROMOTE_BATCH = 1000

_PROMOTE_DUE = """
UPDATE tickwork_jobs SET due_at = NULL
WHERE sequence IN (
    SELECT sequence FROM tickwork_jobs
    WHERE state = 'queued' AND due_at IS NOT NULL AND due_at <= {now}
    ORDER BY due_at
    LIMIT :limit)
"""
PROMOTE_DUE = Template("promote_due", _PROMOTE_DUE, ("now", "limit"), None, _d1)
# The owner-local form: also says which queues it moved jobs into (for the
# projector; a queue appears once per job), and which jobs (their lanes
# join the lines of wide queues).
PROMOTE_DUE_QUEUES = Template("promote_due_queues", _PROMOTE_DUE + "RETURNING queue, sequence\n",
                              ("now", "limit"), Columns("queue", "sequence"), _local)

LANE_HAS_PENDING = Template("lane_has_pending", """
SELECT EXISTS (
    SELECT 1 FROM tickwork_jobs WHERE lane = :lane AND state IN ('queued', 'running')) AS more
""", ("lane",), Columns("more"), _d1)
LANE_HAS_PENDING_LOCAL = Template("lane_has_pending", f"""
SELECT EXISTS (
    SELECT 1 FROM tickwork_jobs INDEXED BY tickwork_jobs_lane_pending
    WHERE lane = :lane AND {{pending}} AND state <> 'settled')
    OR EXISTS (SELECT 1 FROM {UNLISTED} AND lane = :lane AND state <> 'settled') AS more
""", ("lane",), Columns("more"), _local)


# The latest settlement of a queue (transactional read_latest_settled_job).
SELECT_LATEST_SETTLED = Template("select_latest_settled", settled_page(
    "tickwork_jobs_queue_settled", "queue = :queue",
    "settled_at DESC, sequence DESC", "1"), ("queue",), JOB_ROWS, _local)

SELECT_QUEUE_HEAD_LOCAL = Template("select_queue_head", f"""{_RUNNING_HEAD}
UNION ALL
SELECT * FROM (
    SELECT {JOB_SELECT} FROM tickwork_jobs
    WHERE sequence = {queue_head(":queue", HEAD_READY)})
LIMIT 1
""", ("queue",), JOB_ROWS, _local)

# The jobs of a queue a claim takes before the job at (:priority,
# :sequence): ready (queued, due, not cancelled) and earlier in pick order,
# at most :limit (the queue's free places), for explain. D1 walks the
# queue's waiting index from the queue's best job; the owner-local form
# reads the queue order index and the unlisted rows (0010).
_READY = f"{HEAD_READY} AND cancellation_id IS NULL"
_AHEAD = "(priority > :priority OR (priority = :priority AND sequence < :sequence))"
READY_AHEAD = Template("ready_ahead", f"""
SELECT job_id FROM tickwork_jobs
WHERE queue = :queue AND {_READY} AND {_AHEAD}
ORDER BY priority DESC, sequence
LIMIT :limit
""", ("queue", "priority", "sequence", "limit"), Columns("job_id"), _d1)
READY_AHEAD_LOCAL = Template("ready_ahead", f"""
SELECT job_id FROM (
    {queue_rows("job_id, priority, sequence", f"queue = :queue AND {_READY} AND {_AHEAD}")})
ORDER BY priority DESC, sequence
LIMIT :limit
""", ("queue", "priority", "sequence", "limit"), Columns("job_id"), _local)

# ----------------------------------------------------------------- claims
#
# Concurrency limits (tickwork_limits, owner-local and D1 0013) hold inside
# every claim below: a candidate is taken only while its queue runs fewer
# jobs than the queue's limit (1 without a row: the serial queue head) and
# its lane fewer than the lane's limit (no row: no lane limit). The claim
# reads the rows in its own statement, so a put or delete is obeyed by the
# very next claim, and since a store runs one statement at a time (D1, a
# Durable Object) or inside one write transaction (sqlite3), two claims can
# never both take a limit's last place. Each condition is one conjunct of
# the candidate's WHERE. Fair turns (below) change which job of a wide
# queue a claim takes, not which queue: the walk of the queue's line
# starts from the job these conjuncts find.
#
# Rate limits (tickwork_rate_limits, owner-local and D1 0014) are one more
# conjunct, RATE_FREE: the candidate's queue and lane are not rate-held at
# the claim's now. The start is spent in the claim's own statement on D1
# (its 0014's trigger, on the row the claim marks running) and in the
# claim's own transaction owner-local (SPEND_RATE, run by the store while a
# bucket is stored): so two claims can never both take a bucket's last
# start either. A candidate held by a rate limit holds no other: the walk
# passes over it, as over a lane at its limit. A claim put back unstarted
# keeps its start spent.

#: The queue has no running job: one probe of tickwork_jobs_running. The
#: whole test for a queue without a limit row, as before limits existed.
QUEUE_IDLE = """NOT EXISTS (
          SELECT 1 FROM tickwork_jobs AS busy
          WHERE busy.queue = candidate.queue AND busy.state = 'running')"""


def queue_limit_allows(taken: str) -> str:
    """The candidate's queue has a limit row above ``taken`` (an expression
    of the places already taken), looked up by primary key."""
    return f"""EXISTS (
          SELECT 1 FROM tickwork_limits AS queue_limit
          WHERE queue_limit.kind = 'queue' AND queue_limit.key = candidate.queue
            AND queue_limit.max_running > {taken})"""


#: How many of the candidate's queue's jobs run: its range of
#: tickwork_jobs_running, which the claims keep within the queue's limit
#: (beyond it only after a limit was lowered, never past MAX_RUNNING_LIMIT).
QUEUE_RUNNING = """(SELECT count(*) FROM tickwork_jobs AS busy INDEXED BY tickwork_jobs_running
             WHERE busy.queue = candidate.queue AND busy.state = 'running')"""

# The queue has room: idle (the common case, and all a queue without a limit
# row can be), or running fewer than its limit row allows. CASE fixes the
# order: the row and the count are only read when the queue runs a job
# already (measured with callgrind, it also costs a serial tick fewer
# instructions than the same test written with OR).
QUEUE_HAS_ROOM = f"""CASE WHEN {QUEUE_IDLE} THEN 1
       ELSE {queue_limit_allows(QUEUE_RUNNING)} END"""

#: How many of lane ``lane``'s jobs run, per store. D1 (0013) walks the
#: lane's running entries: those whose lane is not their queue from
#: tickwork_jobs_lane_running, plus those of the queue of the lane's name
#: that name no other lane from tickwork_jobs_running (a job that names no
#: lane is in the lane of its queue's name, and writes no entry in the
#: first). The owner-local store has no lane index (its 0013 says why): it
#: walks every running entry of the owner (tickwork_jobs_running), which are
#: at most the claims its slots execute, plus any a crash left for recovery.
LANE_RUNNING_D1 = """((SELECT count(*) FROM tickwork_jobs AS lane_busy
                     INDEXED BY tickwork_jobs_lane_running
                 WHERE lane_busy.lane = {lane} AND lane_busy.state = 'running'
                   AND lane_busy.lane <> lane_busy.queue)
              + (SELECT count(*) FROM tickwork_jobs AS lane_busy
                     INDEXED BY tickwork_jobs_running
                 WHERE lane_busy.queue = {lane} AND lane_busy.state = 'running'
                   AND lane_busy.lane = {lane}))"""
LANE_RUNNING_LOCAL = """(SELECT count(*) FROM tickwork_jobs AS lane_busy
                     INDEXED BY tickwork_jobs_running
                 WHERE lane_busy.state = 'running' AND lane_busy.lane = {lane})"""



def lane_has_room(lane: str, running: str) -> str:
    """The lane ``lane`` has room: no lane row for it (one primary-key probe,
    of a table that is empty unless limits are set), or fewer of its jobs
    run (``running``: LANE_RUNNING_D1 or LANE_RUNNING_LOCAL) than the row
    allows."""
    return f"""NOT EXISTS (
          SELECT 1 FROM tickwork_limits AS lane_limit
          WHERE lane_limit.kind = 'lane' AND lane_limit.key = {lane}
            AND lane_limit.max_running <= {running})"""


#: The candidate's lane has room ({lane_running}: per store).
LANE_HAS_ROOM = lane_has_room("candidate.lane", "{lane_running}")

# ------------------------------------------------------------ fair turns
#
# Fair turns (schema: owner-local and D1 0015). A queue is wide while its
# limit row allows more than one running job; a wide queue keeps a line of
# its lanes that have a ready job (queued, due, not cancelled) in
# tickwork_turns, a lower turn nearer the front. The rule, in every claim:
#
# * the global pick is as before: the first startable job in global order
#   (priority desc, oldest first; startable: ready, queue not paused, queue
#   and lane with room, neither rate-held);
# * if its queue is wide, the claim takes instead the best ready job
#   (priority desc, oldest first) of the first lane in the queue's line that
#   has one and whose lane has room and is not rate-held (the walk,
#   fair_walk: one probe per lane it passes over, O(log n + lanes passed
#   over) however deep a lane's backlog); the queue's own conditions hold
#   already, the global pick found a startable job in it. Should no lane
#   in the line have one (a line missing a lane, which the statements
#   below never leave), the global pick;
# * in the claim's transaction (owner-local: the store runs LEAVE_LINE and
#   BACK_OF_LINE; D1: its 0015 trigger runs the same two), the lane that
#   started goes to the back of the line if it still has a ready job, or
#   leaves it; the lanes ahead of it that have no ready job leave too. A
#   lane passed over at its lane limit or rate-held keeps its place.
#
# A lane joins at the back when a job of it becomes ready and it is not in
# the line (owner-local: JOIN_LINE, run by the store after each change that
# makes jobs ready; D1: the triggers of its 0015, since producers insert
# jobs with their own statements); a queue that becomes wide gets every
# lane with a ready job, in order of its oldest (WIDEN_LINE); one that
# stops being wide loses its line (DROP_LINE). So a tenant with 10,000
# ready jobs does not hold back a tenant with one. Priority orders jobs
# within a lane, not lanes; across queues the global pick chooses.

def wide(queue: str) -> str:
    """Whether the queue ``queue`` (an expression) is wide: one primary-key
    probe of tickwork_limits."""
    return f"""EXISTS (SELECT 1 FROM tickwork_limits AS wide
                   WHERE wide.kind = 'queue' AND wide.key = {queue} AND wide.max_running > 1)"""


def _lane_ready(queue: str, lane: str) -> str:
    """A job of the lane's in the queue that a claim could take: queued,
    due, not cancelled."""
    return (f"queue = {queue} AND lane = {lane} AND due_at IS NULL AND state = 'queued'"
            " AND cancellation_id IS NULL")


def lane_best_d1(queue: str, lane: str, further: str = "") -> str:
    """D1 (0015): the sequence of the best ready job of lane ``lane`` in
    queue ``queue`` (NULL: none; ``further``: a condition more), from
    tickwork_jobs_lane_ready, which holds exactly the ready jobs: one probe."""
    return f"""(SELECT sequence FROM tickwork_jobs INDEXED BY tickwork_jobs_lane_ready
            WHERE {_lane_ready(queue, lane)}{further}
            ORDER BY priority DESC, sequence
            LIMIT 1)"""


def lane_best_local(queue: str, lane: str, further: str = "") -> str:
    """Owner-local (0015): the same, from tickwork_jobs_lane_order (a probe
    of the lane's due range, stepping over its running jobs and unfiled
    settlements) and the unlisted rows."""
    return f"({first_in_pick_order(LANE_ORDER, _lane_ready(queue, lane) + further)})"


def _lane_best(target: Target) -> Callable[..., str]:
    return lane_best_local if target is OWNER_LOCAL else lane_best_d1


def fair_walk(queue: str, lanes: str = "") -> str:
    """The sequence of the job a claim takes in the wide queue ``queue``:
    the best ready job ({turn_best}, per store) of the first lane in its
    line (``lanes``: a further condition on the lane ``turn.lane``) that has
    one and whose lane has room and is not rate-held; NULL when none has.
    The walk reads the line from the front through its (queue, turn) index
    and stops at that lane (the inner LIMIT keeps SQLite from merging the
    two levels, so each lane's best job is looked up once, as the walk
    reaches it)."""
    return f"""(SELECT best FROM (
            SELECT turn.turn, {{turn_best}} AS best
            FROM tickwork_turns AS turn INDEXED BY tickwork_turns_order
            WHERE turn.queue = {queue}{lanes}
              AND {lane_has_room("turn.lane", "{turn_lane_running}")}
              AND {rate_free("turn")}
            ORDER BY turn.turn
            LIMIT -1)
        WHERE best IS NOT NULL
        LIMIT 1)"""


def taking_turns(pick: str, lanes: str = "") -> str:
    """The sequence a claim takes, from ``pick`` (a SELECT of a candidate's
    ``{pick_columns}``: sequence, and queue): the pick itself while no line
    has a lane (asked once per statement: a claim with no wide queue at work
    costs one probe more), or the pick's queue is not wide; else the walk
    of its line (``lanes``: which lanes it may take), or the pick should
    the walk find nothing."""
    plain = pick.replace("{pick_columns}", "")
    with_queue = pick.replace("{pick_columns}", ", candidate.queue")
    return f"""CASE WHEN NOT EXISTS (SELECT 1 FROM tickwork_turns) THEN ({plain})
    ELSE (
    SELECT CASE WHEN {wide("pick.queue")}
                THEN coalesce({fair_walk("pick.queue", lanes)}, pick.sequence)
                ELSE pick.sequence END
    FROM ({with_queue}) AS pick) END"""


# Claim: picks the first runnable job in global order (priority desc, oldest
# first) whose queue and lane have room and whose queue is not paused, and
# marks it running under the private token :token (on D1 with a lease of
# :lease_ms), in one statement. In a queue without a limit row the first
# such job is its queue's head: any better job of the same queue would come
# earlier and be just as free. {guard} is empty (CLAIM) or _CLAIM_GUARD;
# {pick} is _PICK, or in the forms that take turns (taking_turns) the fair
# walk from it.
_PICK = f"""SELECT candidate.sequence{{pick_columns}} FROM tickwork_jobs AS candidate
    WHERE candidate.state = 'queued' AND candidate.cancellation_id IS NULL
      AND candidate.due_at IS NULL
      AND {QUEUE_HAS_ROOM}
      AND {LANE_HAS_ROOM}
      AND {RATE_FREE}
      {NOT_PAUSED}
    ORDER BY candidate.priority DESC, candidate.sequence
    LIMIT 1"""
_CLAIM = f"""
UPDATE tickwork_jobs
SET state = 'running', claim_token = :token, started_at = {{now}}{{set_lease}}
WHERE sequence = {{pick}}
{{guard}}
RETURNING {JOB_SELECT}
"""

# The tick's fast path: claim only when no suspect claim (owner-local: a
# running claim this runtime does not execute; D1: an expired lease) and no
# cancelled job waits, so the common tick is a single statement. When it
# claims nothing, the tick probes for what must come first.
_CLAIM_GUARD = """
  AND NOT EXISTS (SELECT 1 FROM tickwork_jobs WHERE {suspect})
  AND NOT EXISTS (SELECT 1 FROM tickwork_jobs
                  WHERE state = 'queued' AND cancellation_id IS NOT NULL)"""


def _claim(name: str, guard: str, pick: str, targets: tuple[Target, ...]) -> Template:
    return Template(name, _CLAIM.replace("{guard}", guard).replace("{pick}", pick),
                    ("token", "now", "lease_ms"), JOB_ROWS, targets)


_PLAIN_PICK = "(\n    " + _PICK.replace("{pick_columns}", "") + ")"
#: The claims of an owner without a wide queue (the store knows: see
#: OwnerLocalStore), as they were before fair turns.
CLAIM = _claim("claim", "", _PLAIN_PICK, _local)
CLAIM_IF_CLEAR = _claim("claim_if_clear", _CLAIM_GUARD, _PLAIN_PICK, _local)
#: The claims that take turns: every D1 claim; an owner's while it has a
#: wide queue.
CLAIM_TAKING_TURNS = _claim("claim_taking_turns", "", taking_turns(_PICK), (OWNER_LOCAL, D1))
CLAIM_IF_CLEAR_TAKING_TURNS = _claim("claim_if_clear_taking_turns", _CLAIM_GUARD,
                                     taking_turns(_PICK), (OWNER_LOCAL, D1))


def counted(template: Template) -> Template:
    """``template`` without its RETURNING clause, for the owner-local store
    over a database that says how many rows a write changed
    (``Sqlite3Database.mutate_count``). SQLite runs RETURNING as a trigger
    program that buffers the rows in an ephemeral table and reads them back:
    on ``:memory:`` (callgrind) it cost a settlement about 28,000
    instructions, and the claim 15,000 more than reading its row back by
    its token afterwards does (CLAIMED_BY_TOKEN)."""
    head, returning, _ = template.text.rpartition("RETURNING ")
    if not returning:
        raise ValueError(f"{template.name} has no RETURNING clause")
    return Template(f"{template.name}_counted", head.rstrip() + "\n", template.params, None,
                    _local)


CLAIM_IF_CLEAR_COUNTED = counted(CLAIM_IF_CLEAR)
CLAIM_IF_CLEAR_TAKING_TURNS_COUNTED = counted(CLAIM_IF_CLEAR_TAKING_TURNS)
# The inserts, counted: an insert changes one row (stored) or none (the
# job_id is taken), which is all the store asks of its RETURNING row.
INSERT_JOB_COUNTED = counted(INSERT_JOB)
INSERT_JOB_AT_ONCE_COUNTED = counted(INSERT_JOB_AT_ONCE)

# Owner-local: spend one start of the buckets of the queue and the lane of
# the job a claim just took at :now, in the claim's transaction (the store
# runs it only while a bucket is stored; D1's trigger does the same inside
# the claim). Two probes of the primary key; the GCRA step of
# tickwork.model.rate_limits.next_start_after, CAST as in RATE_FREE.
SPEND_RATE = Template("spend_rate", """
UPDATE tickwork_rate_limits
SET next_start = max(next_start, CAST(:now AS INTEGER) * starts - (burst - 1) * period_ms)
                 + period_ms
WHERE ((kind = 'queue' AND key = :queue) OR (kind = 'lane' AND key = :lane))
  AND starts IS NOT NULL
""", ("now", "queue", "lane"), None, _local)

# Whether any bucket is stored (owner-local: whether claims must spend).
HAS_BUCKETS = Template("has_buckets", """
SELECT EXISTS (SELECT 1 FROM tickwork_rate_limits WHERE starts IS NOT NULL) AS buckets
""", (), Columns("buckets"), _local)

# The job a counted claim just took, by its fresh token: a walk of the
# running index, which after a claim-if-clear holds the claim just taken and
# the claims this runtime executes, nothing else.
CLAIMED_BY_TOKEN = Template("claimed_by_token", f"""
SELECT {JOB_SELECT} FROM tickwork_jobs INDEXED BY tickwork_jobs_running
WHERE state = 'running' AND claim_token = :token
""", ("token",), JOB_ROWS, _local)

# ------------------------------------------------------------- the line
#
# The statements that keep a wide queue's line (see "fair turns" above).
# The owner-local store runs them in the transaction of the change, while
# any wide queue exists; D1's triggers (its 0015) run the same texts of
# LEAVE_LINE, BACK_OF_LINE and joining, for the row they fire on (NEW).
# The next turn of a queue is its highest plus one: one probe of the
# (queue, turn) index.


def _next_turn(queue: str) -> str:
    return f"coalesce((SELECT max(turn) FROM tickwork_turns WHERE queue = {queue}), 0) + 1"


def leave_line(queue: str, lane: str, target: Target) -> str:
    """After a start in lane ``lane`` of queue ``queue``: the lane leaves the
    line, and so does every lane ahead of it that has no ready job (the walk
    passed over them; one at its lane limit or rate-held has a ready job and
    keeps its place). One range of the (queue, turn) index, up to the lane
    that started, and a probe per lane in it."""
    best = _lane_best(target)("tickwork_turns.queue", "tickwork_turns.lane")
    return f"""DELETE FROM tickwork_turns
WHERE queue = {queue}
  AND turn <= (SELECT turn FROM tickwork_turns WHERE queue = {queue} AND lane = {lane})
  AND (lane = {lane} OR {best} IS NULL)"""


def back_of_line(queue: str, lane: str, target: Target) -> str:
    """Then the lane that started joins at the back, if it still has a ready
    job and its queue is wide (LEAVE_LINE took it out first)."""
    return f"""INSERT INTO tickwork_turns (queue, lane, turn)
SELECT {queue}, {lane}, {_next_turn(queue)}
WHERE {wide(queue)} AND {_lane_best(target)(queue, lane)} IS NOT NULL"""


def join_line(queue: str, lane: str) -> str:
    """A lane not in the line joins at the back (D1's triggers, for a job
    that became ready in a wide queue)."""
    return f"""INSERT INTO tickwork_turns (queue, lane, turn)
SELECT {queue}, {lane}, {_next_turn(queue)}
WHERE NOT EXISTS (SELECT 1 FROM tickwork_turns WHERE queue = {queue} AND lane = {lane})"""


#: After a claim in a wide queue, in its transaction (owner-local; D1's
#: trigger tickwork_turns_after_start runs the same for the claimed row).
LEAVE_LINE = Template("leave_line", leave_line(":queue", ":lane", OWNER_LOCAL),
                      ("queue", "lane"), None, _local)
BACK_OF_LINE = Template("back_of_line", back_of_line(":queue", ":lane", OWNER_LOCAL),
                        ("queue", "lane"), None, _local)

# Owner-local: the lanes of the jobs at :sequences (a JSON array, in the
# order the jobs became ready: sequence order) that are ready in a wide
# queue join its line at the back, in that order, unless already in it.
# One statement for a change that made several jobs ready (a promotion, an
# ingest_many); a primary-key probe per job.
JOIN_LINE = Template("join_line", f"""
INSERT INTO tickwork_turns (queue, lane, turn)
SELECT job.queue, job.lane, {_next_turn("job.queue")} + entry.key
FROM json_each(:sequences) AS entry
JOIN tickwork_jobs AS job ON job.sequence = entry.value
WHERE job.due_at IS NULL AND job.state = 'queued' AND job.cancellation_id IS NULL
  AND {wide("job.queue")}
ORDER BY entry.key
ON CONFLICT (queue, lane) DO NOTHING
""", ("sequences",), None, _local)

# A queue that becomes wide (run before the put of its limit, in its
# transaction or batch: only a queue that was not wide, given a limit
# above one): every lane with a ready job in it joins, in order of its
# oldest ready job (that job's sequence, past the queue's turns, is its
# turn). Reads the queue's ready jobs once, O(its backlog): a change of
# limits, not a claim.
_WIDEN_LINE = f"""
INSERT INTO tickwork_turns (queue, lane, turn)
SELECT :queue, lane,
       min(sequence) + coalesce((SELECT max(turn) FROM tickwork_turns WHERE queue = :queue), 0)
FROM ({{rows}})
WHERE :max_running > 1 AND NOT {wide(":queue")}
GROUP BY lane
ON CONFLICT (queue, lane) DO NOTHING
"""
_QUEUE_READY = f"queue = :queue AND {HEAD_READY} AND cancellation_id IS NULL"
WIDEN_LINE = Template("widen_line", _WIDEN_LINE.replace("{rows}", f"""
    SELECT lane, sequence FROM tickwork_jobs INDEXED BY tickwork_jobs_lane_ready
    WHERE {_QUEUE_READY}"""), ("queue", "max_running"), None, _d1)
WIDEN_LINE_LOCAL = Template("widen_line", _WIDEN_LINE.replace(
    "{rows}", queue_rows("lane, sequence", _QUEUE_READY)), ("queue", "max_running"), None,
    _local)

# A queue that is not wide (after the put or the delete of its limit, in
# its transaction or batch) has no line: its rows go.
DROP_LINE = Template("drop_line", f"""
DELETE FROM tickwork_turns WHERE queue = :queue AND NOT {wide(":queue")}
""", ("queue",))

# Owner-local (0015): a lane's jobs in a queue in pick order, for the
# claims' walk: its best ready job, or whether it has one, in one probe
# (due_at in the key: a ready job's is NULL, so the jobs waiting for their
# time are a range apart). Written in the batches of 0009, like 0010's
# queue order: a row enters when it is listed and leaves when it is filed,
# so neither a claim nor a settlement writes it; every read also reads the
# unlisted rows (LANE_ORDER), and steps over the lane's running jobs and
# unfiled settlements (a few). The store creates it when a queue becomes
# wide and drops it once none is (its 0015 says why), in the transaction of
# the change: a serial owner's rows write no entry.
LANE_ORDER_INDEX = Template("lane_order_index", f"""
CREATE INDEX IF NOT EXISTS tickwork_jobs_lane_order
    ON tickwork_jobs (queue, lane, due_at, priority DESC, sequence)
    WHERE {PENDING_LISTED}
""", (), None, _local)
NO_LANE_ORDER_INDEX = Template("no_lane_order_index", """
DROP INDEX IF EXISTS tickwork_jobs_lane_order
""", (), None, _local)


def lane_rows(select: str, where: str, target: Target) -> str:
    """``select`` over the ready jobs of one lane in one queue that match
    ``where`` (which names the queue, the lane and readiness), in index
    order per part: D1's tickwork_jobs_lane_ready; owner-local's
    tickwork_jobs_lane_order, then the unlisted rows."""
    if target is D1:
        return (f"SELECT {select} FROM tickwork_jobs INDEXED BY tickwork_jobs_lane_ready"
                f" WHERE {where}")
    return f"""SELECT {select} FROM {LANE_ORDER} AND {where}
    UNION ALL
    SELECT {select} FROM {UNLISTED} AND {where}"""


def _ready_ahead_taking_turns(serial: str, target: Target) -> str:
    """READY_AHEAD, taking turns in a wide queue: the claims take one job of
    each lane in line order, then a second of each, and so on (ignoring
    limits and arrivals). So the jobs ahead of the job at :sequence (rank r
    in its lane, the lane at turn p, or at the back when not in the line)
    are each lane's r best, and the (r + 1)-th of the lanes before p; the
    first :limit of them in (round, turn) order. ``walk`` reads each lane's
    jobs in pick order, one probe a step, up to the rounds that can count
    (at most :limit): O(lanes x :limit x log n), an explain's read, not a
    claim's. A queue that is not wide: ``serial`` (the pick order), with its
    sort key, so one statement answers either."""
    best = _lane_best(target)
    lane = "target_job.lane"
    ready = _lane_ready(":queue", lane)
    rank = f"""(SELECT count(*) FROM (
                {lane_rows("1", f"{ready} AND priority > :priority", target)}
                UNION ALL
                {lane_rows("1", f"{ready} AND priority = :priority AND sequence < :sequence",
                           target)}
                LIMIT :limit))"""
    # The lane's next job after the walk's: the same priority and later,
    # else the next lower priority (two ranges of the lane's index).
    following = f"""coalesce(
                {best("walk.queue", "walk.lane",
                      " AND priority = walk.priority AND sequence > walk.sequence")},
                {best("walk.queue", "walk.lane", " AND priority < walk.priority")})"""
    return f"""
WITH RECURSIVE target AS (
    SELECT {rank} AS rank,
           coalesce((SELECT turn FROM tickwork_turns
                     WHERE queue = :queue AND lane = {lane}), 9223372036854775807) AS turn
    FROM tickwork_jobs AS target_job WHERE target_job.sequence = :sequence),
walk(queue, lane, turn, round, priority, sequence, job_id) AS (
    SELECT line.queue, line.lane, line.turn, 0, job.priority, job.sequence, job.job_id
    FROM target, tickwork_turns AS line INDEXED BY tickwork_turns_order
    JOIN tickwork_jobs AS job ON job.sequence = {best("line.queue", "line.lane")}
    WHERE line.queue = :queue AND {wide(":queue")}
    UNION ALL
    SELECT walk.queue, walk.lane, walk.turn, walk.round + 1, job.priority, job.sequence,
           job.job_id
    FROM walk, target
    JOIN tickwork_jobs AS job ON job.sequence = {following}
    WHERE walk.round < target.rank AND walk.round + 1 < :limit)
SELECT job_id FROM (
    SELECT job_id, round AS first_key, walk.turn AS second_key FROM walk, target
    WHERE round < target.rank OR (round = target.rank AND walk.turn < target.turn)
    UNION ALL
    SELECT job_id, -priority, sequence FROM ({serial})
    WHERE NOT {wide(":queue")})
ORDER BY first_key, second_key
LIMIT :limit
"""


_READY_AHEAD_PARAMS = ("queue", "priority", "sequence", "limit")
READY_AHEAD_TAKING_TURNS = Template("ready_ahead_taking_turns", _ready_ahead_taking_turns(
    READY_AHEAD.text.replace("SELECT job_id FROM", "SELECT job_id, priority, sequence FROM", 1),
    D1), _READY_AHEAD_PARAMS, Columns("job_id"), _d1)
READY_AHEAD_TAKING_TURNS_LOCAL = Template("ready_ahead_taking_turns", _ready_ahead_taking_turns(
    READY_AHEAD_LOCAL.text.replace("SELECT job_id FROM", "SELECT job_id, priority, sequence FROM",
                                   1), OWNER_LOCAL), _READY_AHEAD_PARAMS, Columns("job_id"),
    _local)

# Owner-local: whether any queue is wide (the store's cache: only then does
# it keep lines and claim taking turns).
ANY_WIDE_QUEUE = Template("any_wide_queue", """
SELECT EXISTS (SELECT 1 FROM tickwork_limits WHERE kind = 'queue' AND max_running > 1) AS wide
""", (), Columns("wide"), _local)

# ------------------------------------------------------------ settlements

# Settle a claim. Fenced on the exact claim token and the running state (and
# on D1 an unexpired lease, by database time): a claim whose lane failed, or
# that was recovered, re-claimed or let expire, matches no row, so exactly
# one terminal outcome is ever written per job. Fenced on the cancellation
# too: SETTLE_CLAIM matches no row once a cancellation is recorded, so the
# lifecycle applies the cancellation rule (settlement_under_cancellation) to
# the durable record and settles with SETTLE_CANCELLED_CLAIM, which matches
# only while the cancellation is there. The _RECORD forms (owner-local, for
# the projector) return the settled job; the others only the sequence, all
# the hot path needs to know it landed. error_json is the attempt's error
# summary (NULL when its executor did not raise), replacing an earlier
# attempt's: the record holds the latest ended attempt's.
_SETTLE = """
UPDATE tickwork_jobs
SET state = 'settled', outcome = :outcome, failure_reason = :failure_reason,
    error_json = :error_json, settled_at = {{now}}{filing}
WHERE sequence = :sequence AND state = 'running' AND claim_token = :token {{lease_live}}
  AND cancellation_id {cancelled}
RETURNING {returning}
"""
#: What every settlement binds, in this order.
SETTLE_PARAMS = ("outcome", "failure_reason", "error_json", "now", "sequence", "token")
SETTLE_CLAIM = Template("settle_claim", _SETTLE.format(
    cancelled="IS NULL", returning="sequence", filing="{file}"), SETTLE_PARAMS, SEQUENCE_ROWS)
SETTLE_CANCELLED_CLAIM = Template("settle_cancelled_claim", _SETTLE.format(
    cancelled="IS NOT NULL", returning="sequence", filing="{file}"),
    SETTLE_PARAMS, SEQUENCE_ROWS)
SETTLE_CLAIM_RECORD = Template("settle_claim_record", _SETTLE.format(
    cancelled="IS NULL", returning=JOB_SELECT, filing="{file}"), SETTLE_PARAMS, JOB_ROWS,
    _local)
SETTLE_CANCELLED_CLAIM_RECORD = Template("settle_cancelled_claim_record", _SETTLE.format(
    cancelled="IS NOT NULL", returning=JOB_SELECT, filing="{file}"), SETTLE_PARAMS, JOB_ROWS,
    _local)
SETTLE_CLAIM_COUNTED = counted(SETTLE_CLAIM)
SETTLE_CANCELLED_CLAIM_COUNTED = counted(SETTLE_CANCELLED_CLAIM)

# Settle the oldest cancelled job that is still queued, without running it.
# Its queue's head may be busy; cancellation does not wait for it.
SETTLE_NEXT_CANCELLED = Template("settle_next_cancelled", f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = 'cancelled', failure_reason = NULL, error_json = NULL,
    settled_at = {{now}}{{file}}
WHERE sequence = (
    SELECT sequence FROM tickwork_jobs
    WHERE state = 'queued' AND cancellation_id IS NOT NULL
    ORDER BY sequence
    LIMIT 1)
RETURNING {JOB_SELECT}
""", ("now",), JOB_ROWS)

# ------------------------------ the deferred part: the batches (owner-local)
#
# The settlements that leave their row unfiled, and the statements that list
# and file rows in batches (schemas 0009, 0010). Only
# tickwork.stores.index_batching runs them.


def _unfiled(template: Template) -> Template:
    """An owner-local settlement that leaves its row unfiled (filed stays 0,
    as it is while the job runs): drain()'s, which FILE_SETTLED files later."""
    text = template.text.replace("{file}", "")
    assert text != template.text, template.name
    return Template(f"{template.name}_unfiled", text, template.params, template.columns, _local)


SETTLE_CLAIM_UNFILED = _unfiled(SETTLE_CLAIM)
SETTLE_CANCELLED_CLAIM_UNFILED = _unfiled(SETTLE_CANCELLED_CLAIM)
SETTLE_CLAIM_RECORD_UNFILED = _unfiled(SETTLE_CLAIM_RECORD)
SETTLE_CANCELLED_CLAIM_RECORD_UNFILED = _unfiled(SETTLE_CANCELLED_CLAIM_RECORD)
SETTLE_CLAIM_UNFILED_COUNTED = counted(SETTLE_CLAIM_UNFILED)
SETTLE_CANCELLED_CLAIM_UNFILED_COUNTED = counted(SETTLE_CANCELLED_CLAIM_UNFILED)

# List every row not listed yet (both statements in one transaction): the rows after
# LISTED_THROUGH enter the indexes of unsettled jobs by queue and by lane (the
# settled and filed ones among them stay out), a batch at a time, and
# LISTED_THROUGH moves to the last of them. A job enqueued later gets a
# higher sequence (AUTOINCREMENT), so the unlisted rows stay those after it.
LIST_NEW_ROWS = Template("list_new_rows", f"""
UPDATE tickwork_jobs SET listed = 1 WHERE sequence > {LISTED_THROUGH}
""", (), None, _local)
NOTE_LISTED = Template("note_listed", """
INSERT OR REPLACE INTO tickwork_meta (key, value)
SELECT 'listed_through', CAST(coalesce(max(sequence), 0) AS TEXT) FROM tickwork_jobs
""", (), None, _local)

# File every settled row not filed yet (in the commit of a settlement that
# left its row unfiled, the last of a batch): the rows leave the
# indexes of unsettled jobs and tickwork_jobs_unfiled and enter the history
# indexes, a batch at a time, so a batch's entries share the pages they
# change. INDEXED BY: the indexes of unsettled jobs also hold every unfiled
# row (with every queued and running one); tickwork_jobs_unfiled holds only
# these.
FILE_SETTLED = Template("file_settled", """
UPDATE tickwork_jobs INDEXED BY tickwork_jobs_unfiled
SET filed = 1
WHERE filed = 0 AND state = 'settled'
""", (), None, _local)

# --------------------------------------------------------------- recovery

# Recovery of a claim whose execution is gone (owner-local: the probe said
# so; D1: its lease expired). Fenced on the token and the running state (and
# on D1 on the lease still being expired), so a claim that was renewed,
# settled or recovered by someone else in between matches nothing. Both
# release the token: should the claim's executor still finish somewhere, its
# late settlement finds the job no longer under its claim and reports
# claim_replaced, instead of taking the recovery's settlement (or a later
# lane failure) for its own. (Failing a lane keeps the token: the executor's
# tick then reports the failure it was stopped by.)
REQUEUE_CLAIM = Template("requeue_claim", f"""
UPDATE tickwork_jobs
SET state = 'queued', started_at = NULL, claim_token = NULL{{clear_lease}},
    recoveries = recoveries + 1
WHERE sequence = :sequence AND state = 'running' AND claim_token = :token {{lease_dead}}
RETURNING {JOB_SELECT}
""", ("now", "sequence", "token"), JOB_ROWS)

# Put back a claim a drain took ahead and never started: a drain claims the
# next job in the transaction (or batch) of the previous settlement, and
# when the loop ends before running it (interrupted, its host or store
# failed between jobs) or, owner-local, a cancellation or lane failure
# reached it first, the claim goes back as it was. Fenced on the token and
# the running state like the recovery's requeue, but no recovery is counted:
# no execution began. On D1 it drops the lease with the token.
RELEASE_CLAIM = Template("release_claim", f"""
UPDATE tickwork_jobs
SET state = 'queued', started_at = NULL, claim_token = NULL{{clear_lease}}
WHERE sequence = :sequence AND state = 'running' AND claim_token = :token
RETURNING {JOB_SELECT}
""", ("sequence", "token"), JOB_ROWS)

SETTLE_RECOVERED_CLAIM = Template("settle_recovered_claim", f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = :outcome, failure_reason = :failure_reason,
    error_json = :error_json, settled_at = {{now}}, claim_token = NULL{{file}}
WHERE sequence = :sequence AND state = 'running' AND claim_token = :token {{lease_dead}}
RETURNING {JOB_SELECT}
""", SETTLE_PARAMS, JOB_ROWS)

# ------------------------------------------------- retries, dead letters

#: Appends the attempt that just ended to history_json, keeping the newest
#: MAX_HISTORY (20) entries (one is dropped at most: one is added at a time).
#: SET expressions read the row as it was, so started_at and attempt are
#: the ended attempt's. {entry} is the json_object of the entry.
_APPEND_HISTORY = """json_insert(
        CASE WHEN json_array_length(coalesce(history_json, '[]')) >= 20
             THEN json_remove(history_json, '$[0]')
             ELSE coalesce(history_json, '[]') END,
        '$[#]', {entry})"""

#: The short line of the row's error_json ("Type: message", at most 300
#: characters, as ErrorSummary.line), or NULL. substr counts characters.
_ERROR_LINE = ("CASE WHEN error_json IS NULL THEN NULL ELSE substr("
               "json_extract(error_json, '$.type') || ': ' || "
               "json_extract(error_json, '$.message'), 1, 300) END")

# A failed attempt with attempts left (the lifecycle decided, by the job's
# policy): the job goes back to queued, due :delay_ms from now, as its next
# attempt, with the ended attempt in its history. Fenced exactly like
# SETTLE_CLAIM (token, running, on D1 a live lease, no cancellation): a
# claim that is no longer the job's matches no row, and a cancellation
# recorded meanwhile makes the lifecycle settle it cancelled instead. The
# job keeps its sequence, so once due it is its queue's head again. It keeps
# the ended attempt's error summary in error_json (NULL when it did not
# raise), and its history entry the short "Type: message" (:error_line).
# 'ended_at' is CAST: a Durable Object binds every JS number as a REAL, which
# a column's INTEGER affinity turns back into an integer but JSON text keeps
# as "1796523995185.0" (measured in workerd).
# Returns the job (its due_at and attempt), for the tick's result.
RETRY_CLAIM = Template("retry_claim", f"""
UPDATE tickwork_jobs
SET state = 'queued', started_at = NULL, claim_token = NULL{{clear_lease}},
    attempt = attempt + 1, due_at = {{now}} + :delay_ms, error_json = :error_json,
    history_json = {_APPEND_HISTORY.format(entry=(
        "json_object('attempt', attempt, 'outcome', :outcome, 'reason', :failure_reason, "
        "'started_at', started_at, 'ended_at', CAST({now} AS INTEGER), 'error', :error_line, "
        "'due_at', CAST({now} + :delay_ms AS INTEGER))"))}
WHERE sequence = :sequence AND state = 'running' AND claim_token = :token {{lease_live}}
  AND cancellation_id IS NULL
RETURNING {JOB_SELECT}
""", ("now", "delay_ms", "error_json", "outcome", "failure_reason", "error_line", "sequence",
      "token"), JOB_ROWS)

# Whether a redrive id was applied to the job before (redrives are kept per
# job, forever, so any earlier id replays, not only the latest).
REDRIVE_APPLIED = Template("redrive_applied", """
SELECT EXISTS (SELECT 1 FROM tickwork_redrives
               WHERE job_id = :job_id AND redrive_id = :redrive_id) AS applied
""", ("job_id", "redrive_id"), Columns("applied"))

# Redrive, step 1: a dead letter goes back to queued, due at once, as a new
# attempt chain (attempt 1, no recoveries counted), its last attempt kept in
# its history with the redrive id. Fenced on what the lifecycle decided
# from: still settled with a dead outcome and no cancellation, and this id
# not applied (a concurrent redrive with the same id matches nothing). The
# job keeps its sequence: it runs before jobs enqueued after it. It keeps
# error_json (the last attempt's error, until the next attempt ends), and the
# history entry the error's short line.
REDRIVE_JOB = Template("redrive_job", f"""
UPDATE tickwork_jobs
SET state = 'queued', outcome = NULL, failure_reason = NULL, started_at = NULL,
    settled_at = NULL, claim_token = NULL, due_at = NULL, attempt = 1, recoveries = 0{{unfile}},
    history_json = {_APPEND_HISTORY.format(entry=(
        "json_object('attempt', attempt, 'outcome', outcome, 'reason', failure_reason, "
        "'started_at', started_at, 'ended_at', settled_at, 'redrive_id', :redrive_id, "
        "'error', " + _ERROR_LINE + ")"))}
WHERE job_id = :job_id AND state = 'settled'
  AND outcome IN ('failed', 'outcome_unknown', 'interrupted') AND cancellation_id IS NULL
  AND NOT EXISTS (SELECT 1 FROM tickwork_redrives
                  WHERE job_id = :job_id AND redrive_id = :redrive_id)
RETURNING {JOB_SELECT}
""", ("redrive_id", "job_id"), JOB_ROWS)

# Redrive, step 2, in the same transaction (owner-local) or batch (D1):
# remember the id, if step 1 applied it (then the job's newest history
# entry carries it); a replay finds the row there and writes nothing.
NOTE_REDRIVE = Template("note_redrive", """
INSERT INTO tickwork_redrives (job_id, redrive_id, redriven_at)
SELECT job_id, :redrive_id, {now} FROM tickwork_jobs
WHERE job_id = :job_id AND state = 'queued'
  AND json_extract(history_json, '$[#-1].redrive_id') = :redrive_id
ON CONFLICT (job_id, redrive_id) DO NOTHING
""", ("redrive_id", "now", "job_id"))

# A queue's dead letters, newest settlement first, one page after the
# cursor (:before_settled, :before_sequence), through the partial index of
# dead letters (tickwork_jobs_dead): O(log n + page) whatever the history.
# Owner-local also reads the queue's settlements not filed yet.
_DEAD_LETTERS_PARAMS = ("queue", "before_settled", "before_sequence", "limit")
_DEAD_LETTER = """queue = :queue AND {dead_outcome}
  AND (settled_at, sequence) < (:before_settled, :before_sequence)"""
_DEAD_LETTER_ORDER = "settled_at DESC, sequence DESC"
DEAD_LETTERS = Template("dead_letters", f"""
SELECT {JOB_SELECT} FROM tickwork_jobs
WHERE {_DEAD_LETTER} AND state = 'settled'
ORDER BY {_DEAD_LETTER_ORDER}
LIMIT :limit
""", _DEAD_LETTERS_PARAMS, JOB_ROWS, _d1)
DEAD_LETTERS_LOCAL = Template("dead_letters", settled_page(
    "tickwork_jobs_dead", _DEAD_LETTER, _DEAD_LETTER_ORDER, ":limit"),
    _DEAD_LETTERS_PARAMS, JOB_ROWS, _local)

# An owner's dead letters (every queue's), counted up to :cap for its
# summary in the directory of owners (tickwork.directory): the filed ones
# through the partial index of dead letters, at most :cap entries of it, so
# the cost is bounded however long the history; then the settlements not
# filed yet (a few dozen rows at most). Owner-local only: D1's shared
# queues have no directory.
DEAD_LETTER_COUNT_LOCAL = Template("dead_letter_count", f"""
SELECT (SELECT count(*) FROM (
            SELECT 1 FROM tickwork_jobs INDEXED BY tickwork_jobs_dead
            WHERE filed = 1 AND {DEAD_OUTCOME_CHAIN}
            LIMIT :cap))
     + (SELECT count(*) FROM {UNFILED} AND {DEAD_OUTCOME_CHAIN}) AS dead_letters
""", ("cap",), Columns("dead_letters"), _local)

# ------------------------------------------------------------ browsing
# list_jobs: one statement per (by, state, outcome given, order), each a
# range scan of the index named in it (INDEXED BY: a missing index is an
# error, never a silent table scan), so a page costs O(log n + page):
#   queue queued   tickwork_jobs_queue_pending  (queue, sequence)
#   queue running  tickwork_jobs_running        (queue) + rowid (sequence)
#   queue settled  tickwork_jobs_queue_settled  (queue, settled_at, sequence)
#   ... outcome    tickwork_jobs_queue_outcomes (queue, outcome, settled_at, sequence)
#   lane queued    tickwork_jobs_lane_pending   (lane, sequence)
#   lane running   tickwork_jobs_running        every running claim (few), filtered
#   lane settled   tickwork_jobs_lane_settled   (lane, settled_at, sequence)
#   ... outcome    the same, filtered on outcome (reads past the lane's
#                  settlements of other outcomes)
# The page starts strictly past :after_settled/:after_sequence (the last job
# of the previous page) in the listing's order. On D1 "state IN (...) AND
# state = ..." lets SQLite use the partial index of queued and running jobs;
# owner-local's pages of queued and settled jobs also read the rows not
# listed or not filed yet (merged_page).
_LISTING_INDEX = {
    ("queue", "queued", False): "tickwork_jobs_queue_pending",
    ("queue", "running", False): "tickwork_jobs_running",
    ("queue", "settled", False): "tickwork_jobs_queue_settled",
    ("queue", "settled", True): "tickwork_jobs_queue_outcomes",
    ("lane", "queued", False): "tickwork_jobs_lane_pending",
    ("lane", "running", False): "tickwork_jobs_running",
    ("lane", "settled", False): "tickwork_jobs_lane_settled",
    ("lane", "settled", True): "tickwork_jobs_lane_settled",
}
_LISTING_STATE = {
    "queued": "state IN ('queued', 'running') AND state = 'queued'",
    "running": "state = 'running'",
    "settled": "state = 'settled'",
}


def _listing(by: str, state: str, outcome: bool, newest: bool, target: Target) -> Template:
    """The listing's statement for ``target``; owner-local's queued and settled
    listings also read the rows not listed or not filed yet (0009)."""
    index = _LISTING_INDEX[(by, state, outcome)]
    further, direction = ("<", "DESC") if newest else (">", "ASC")
    where = f"{by} = :value"
    if outcome:
        where += " AND outcome = :outcome"
    if state == "settled":
        where += f" AND (settled_at, sequence) {further} (:after_settled, :after_sequence)"
        order = f"settled_at {direction}, sequence {direction}"
    else:
        where += f" AND sequence {further} :after_sequence"
        order = f"sequence {direction}"
    name = f"list_{by}_{state}{'_outcome' if outcome else ''}_{'newest' if newest else 'oldest'}"
    params = ("value", "outcome", "after_settled", "after_sequence", "limit")
    if target == OWNER_LOCAL and state == "settled":
        text = settled_page(index, where, order, ":limit")
    elif target == OWNER_LOCAL and state == "queued":
        where += " AND state = 'queued'"
        text = merged_page(f"tickwork_jobs INDEXED BY {index} WHERE {where} AND {PENDING_LISTED}",
                           f"{UNLISTED} AND {where}", order, ":limit")
    else:
        text = f"""
SELECT {JOB_SELECT} FROM tickwork_jobs INDEXED BY {index}
WHERE {where} AND {_LISTING_STATE[state]}
ORDER BY {order}
LIMIT :limit
"""
    return Template(name, text, params, JOB_ROWS, (target,))


_LISTINGS = [(by, state, outcome, newest) for by, state, outcome in _LISTING_INDEX
             for newest in (True, False)]
#: JobListing.shape (by, state, outcome given, newest first) -> its statement,
#: for D1 and for owner-local.
LIST_JOBS: Final = {shape: _listing(*shape, D1) for shape in _LISTINGS}
LIST_JOBS_LOCAL: Final = {shape: _listing(*shape, OWNER_LOCAL) for shape in _LISTINGS}


def listing_values(statement: Statement, listing: Any, after: tuple[int, int],
                   limit: int) -> tuple[Any, ...]:
    """The values ``statement`` (a rendered LIST_JOBS entry) binds, in its order."""
    named = {"value": listing.value, "outcome": listing.outcome, "after_settled": after[0],
             "after_sequence": after[1], "limit": limit}
    return tuple(named[name] for name in statement.params)

# ------------------------------------------------------ finding by id
# jobs_by_id_prefix: the jobs whose id starts with a prefix, in id order (a
# job id's UTF-8 bytes, so code point order, as on PostgreSQL with COLLATE
# "C"), a page at a time. The prefix becomes a range of the job_id UNIQUE
# index (``id_prefix_range``): a page costs O(log n + page) however many
# jobs are stored, on owner-local and D1 alike (the index is written with
# the row, so no unlisted or unfiled rows to merge). The first page starts
# at the prefix (>=), the next ones strictly past the previous page's last id.


def id_prefix_range(prefix: str, longest: int) -> tuple[str, str]:
    """The bounds ``[low, high)`` holding exactly the ids of at most
    ``longest`` characters that start with ``prefix``: ``high`` is the prefix
    followed by more U+10FFFF (the last code point) than such an id has room
    for, so it sorts after each of them and before any id past the prefix."""
    return prefix, prefix + "\U0010ffff" * (longest + 1 - len(prefix))


def _by_id_prefix(further: str) -> Template:
    return Template(f"jobs_by_id_prefix_{'first' if further == '>=' else 'next'}", f"""
SELECT {JOB_SELECT} FROM tickwork_jobs
WHERE job_id {further} :low AND job_id < :high
ORDER BY job_id
LIMIT :limit
""", ("low", "high", "limit"), JOB_ROWS)


#: The first page of a prefix, and the pages after an id.
JOBS_BY_ID_PREFIX_FIRST: Final = _by_id_prefix(">=")
JOBS_BY_ID_PREFIX_NEXT: Final = _by_id_prefix(">")

# -------------------------------------------------------------- schedules

#: A schedule's row, as every schedule read returns it.
SCHEDULE_ROWS = Columns("name", "spec_json", "next_at", "paused", "created_at", "updated_at")
_SCHEDULE_SELECT = ", ".join(SCHEDULE_ROWS.names)

SELECT_SCHEDULE = Template("select_schedule", f"""
SELECT {_SCHEDULE_SELECT} FROM tickwork_schedules WHERE name = :name
""", ("name",), SCHEDULE_ROWS)

LIST_SCHEDULES = Template("list_schedules", f"""
SELECT {_SCHEDULE_SELECT} FROM tickwork_schedules ORDER BY name
""", (), SCHEDULE_ROWS)

# Create: a new name inserts one row (RETURNING says so); an existing name
# (created meanwhile) inserts nothing, and the lifecycle reads again.
CREATE_SCHEDULE = Template("create_schedule", """
INSERT INTO tickwork_schedules (name, spec_json, next_at, paused, created_at, updated_at)
VALUES (:name, :spec_json, :next_at, 0, {now}, {now})
ON CONFLICT (name) DO NOTHING
RETURNING name
""", ("name", "spec_json", "next_at", "now"), Columns("name"))

# Replace: fenced on the definition the lifecycle read (a concurrent
# replace matches nothing, and it reads again); it starts afresh from the
# next slot after now, running (a paused schedule stays paused).
REPLACE_SCHEDULE = Template("replace_schedule", """
UPDATE tickwork_schedules SET spec_json = :spec_json, next_at = :next_at, updated_at = {now}
WHERE name = :name AND spec_json = :old_spec_json
RETURNING name
""", ("spec_json", "next_at", "now", "name", "old_spec_json"), Columns("name"))

PAUSE_SCHEDULE = Template("pause_schedule", """
UPDATE tickwork_schedules SET paused = 1, updated_at = {now}
WHERE name = :name AND paused = 0
RETURNING name
""", ("now", "name"), Columns("name"))

# Resume: from the next slot after now (the slots of the pause are not
# caught up), fenced on the definition the lifecycle computed it from.
RESUME_SCHEDULE = Template("resume_schedule", """
UPDATE tickwork_schedules SET paused = 0, next_at = :next_at, updated_at = {now}
WHERE name = :name AND paused = 1 AND spec_json = :spec_json
RETURNING name
""", ("next_at", "now", "name", "spec_json"), Columns("name"))

DELETE_SCHEDULE = Template("delete_schedule", """
DELETE FROM tickwork_schedules WHERE name = :name RETURNING name
""", ("name",), Columns("name"))

# The schedules with a slot to fill (oldest first, then by name, so every
# store creates their jobs in one order; a batch at a time), and the store's
# clock they were judged by, in one read.
DUE_SCHEDULES = Template("due_schedules", f"""
SELECT {_SCHEDULE_SELECT}, {{now}} AS now FROM tickwork_schedules
WHERE paused = 0 AND next_at <= {{now}}
ORDER BY next_at, name
LIMIT 100
""", ("now",), Columns(*SCHEDULE_ROWS.names, "now"))

# When the next slot of a running schedule comes (NULL: none).
NEXT_SLOT = Template("next_slot", """
SELECT next_at FROM tickwork_schedules WHERE paused = 0 ORDER BY next_at LIMIT 1
""", (), Columns("next_at"))

# One slot's job. Inserted only while the schedule is as the lifecycle read
# it (same definition, running, this slot not yet passed: a lagging node
# that computed the same slot adds nothing, even if the job was purged
# since), and never twice (the job id is the name and the slot: an
# existing id is left as it is). Due at its slot, which has come.
FIRE_SLOT = Template("fire_slot", """
INSERT INTO tickwork_jobs
    (job_id, queue, lane, priority, payload_json, max_recoveries, run_at, retry_json,
     state, enqueued_at)
SELECT :job_id, :queue, :lane, :priority, :payload_json, :max_recoveries, :run_at,
       :retry_json, 'queued', {now}
FROM tickwork_schedules
WHERE name = :name AND spec_json = :spec_json AND paused = 0 AND next_at <= :run_at
ON CONFLICT (job_id) DO NOTHING
RETURNING queue, sequence
""", ("job_id", "queue", "lane", "priority", "payload_json", "max_recoveries", "run_at",
      "retry_json", "now", "name", "spec_json"), Columns("queue", "sequence"))

def fire_slot_values(job: ValidJob, now: int | None,
                     schedule: ValidSchedule) -> tuple[Any, ...]:
    """FIRE_SLOT's values for ``job`` (a slot's), in its binding order."""
    return (job.job_id, job.queue, job.lane, job.priority, job.payload_json,
            job.max_recoveries, job.run_at, job.retry_json, now, schedule.name,
            schedule.spec_json)


# After the slots' jobs, in the same transaction or batch: the schedule's
# next slot moves past now, forward only.
ADVANCE_SCHEDULE = Template("advance_schedule", """
UPDATE tickwork_schedules SET next_at = :next_at
WHERE name = :name AND spec_json = :spec_json AND next_at < :next_at
""", ("next_at", "name", "spec_json"))

# The store's clock (database time on D1), for a schedule's next slot.
STORE_NOW = Template("store_now", "SELECT {now} AS now", ("now",), Columns("now"))

# ------------------------------------------------------- pause, resume

# Pause: one row per paused queue; RETURNING says whether this call paused
# it (no row: it was paused already, nothing written).
PAUSE_QUEUE = Template("pause_queue", """
INSERT INTO tickwork_paused_queues (queue, paused_at) VALUES (:queue, {now})
ON CONFLICT (queue) DO NOTHING
RETURNING queue
""", ("queue", "now"), Columns("queue"))

# Resume: the row goes; RETURNING says whether the queue was paused.
RESUME_QUEUE = Template("resume_queue", """
DELETE FROM tickwork_paused_queues WHERE queue = :queue
RETURNING queue
""", ("queue",), Columns("queue"))

# Whether the queue is paused: one primary-key lookup (explain asks it;
# queue_status's counts would read the queue's settled history too).
QUEUE_PAUSED = Template("queue_paused", """
SELECT EXISTS (SELECT 1 FROM tickwork_paused_queues WHERE queue = :queue) AS paused
""", ("queue",), Columns("paused"))

# --------------------------------------------------- cancel, fail, purge

# Record a cancellation: only the first id sticks, a settled job is never
# touched, and with only_if_queued a started job is not either. The lifecycle
# decided from a read; this fence makes the write match nothing if that
# decision no longer holds. Returns the queue (for the projector).
_RECORD_CANCELLATION = """
UPDATE tickwork_jobs SET cancellation_id = :cancellation_id
WHERE job_id = :job_id AND cancellation_id IS NULL AND {states}
RETURNING queue
"""
RECORD_CANCELLATION = Template(
    "record_cancellation", _RECORD_CANCELLATION.format(states="state <> 'settled'"),
    ("cancellation_id", "job_id"), Columns("queue"))
RECORD_CANCELLATION_IF_QUEUED = Template(
    "record_cancellation_if_queued", _RECORD_CANCELLATION.format(states="state = 'queued'"),
    ("cancellation_id", "job_id"), Columns("queue"))

# Failing a lane: settle up to :limit of the lane's unsettled jobs as failed,
# running ones first, then waiting ones oldest first. Settled history and
# other lanes are not matched. Running jobs come from the small running
# index; waiting ones from the lane index (the {pending} term lets SQLite
# prove that partial index applies; owner-local's also holds the lane's
# settlements not filed yet, which the state term passes over), and on
# owner-local then its unlisted ones (all enqueued after every listed one).
_FAIL_LANE = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = 'failed', failure_reason = :reason, error_json = NULL,
    settled_at = {{now}}{{file}}
WHERE sequence IN (
    SELECT sequence FROM (
        SELECT sequence FROM tickwork_jobs INDEXED BY tickwork_jobs_running
        WHERE state = 'running' AND lane = :lane
        ORDER BY sequence LIMIT :limit)
    UNION ALL
    SELECT sequence FROM (
        SELECT sequence FROM tickwork_jobs INDEXED BY tickwork_jobs_lane_pending
        WHERE lane = :lane AND {{pending}} AND state = 'queued'
        ORDER BY sequence LIMIT :limit){{unlisted}}
    LIMIT :limit)
RETURNING {JOB_SELECT}
"""
_FAIL_LANE_PARAMS = ("lane", "reason", "limit", "now")
FAIL_LANE = Template("fail_lane", _FAIL_LANE.replace("{unlisted}", ""), _FAIL_LANE_PARAMS,
                     JOB_ROWS, _d1)
FAIL_LANE_LOCAL = Template("fail_lane", _FAIL_LANE.replace("{unlisted}", f"""
    UNION ALL
    SELECT sequence FROM (
        SELECT sequence FROM {UNLISTED} AND lane = :lane AND state = 'queued'
        ORDER BY sequence LIMIT :limit)"""), _FAIL_LANE_PARAMS, JOB_ROWS, _local)

# Purge: delete one queue's waiting jobs; running and settled rows stay.
# (The owner-local store counts them from RETURNING; D1 from meta.changes.)
# Owner-local (0010) finds them in the queue order index and the unlisted rows.
PURGE_QUEUE = Template("purge_queue", """
DELETE FROM tickwork_jobs WHERE queue = :queue AND state = 'queued'
""", ("queue",), None, _d1)
PURGE_QUEUE_COUNTED = Template("purge_queue_counted", f"""
DELETE FROM tickwork_jobs WHERE sequence IN (
    {queue_rows("sequence", "queue = :queue AND state = 'queued'")})
RETURNING sequence
""", ("queue",), SEQUENCE_ROWS, _local)

# ------------------------------------------------------------- retention
#
# Retention policies (schema: owner-local 0011, D1 0010) and the prune that
# applies them. A prune batch reads one queue's prunable rows through
# tickwork_jobs_queue_outcomes (queue, outcome, settled_at, sequence): one
# range per outcome, ending at the policy's cutoff, so it reads the rows it
# deletes and no others, O(log n + batch) whatever the history kept. Only
# settled rows are ever selected or deleted: every statement below names
# state = 'settled', and the delete is fenced on it again. Owner-local reads
# the filed rows ({filed}): its runtime files the settlements waiting for
# their batch (FILE_SETTLED) before a prune reads.

#: A policy row, as every policy read returns it.
RETENTION_COLUMNS = Columns("queue", "keep_completed_ms", "keep_failed_ms", "updated_at")

# Every stored policy (the scope's default under queue ''), by queue: a
# handful of rows, read by primary key order.
LIST_RETENTION = Template("list_retention", """
SELECT queue, keep_completed_ms, keep_failed_ms, updated_at
FROM tickwork_retention ORDER BY queue
""", (), RETENTION_COLUMNS)

# Store a policy, replacing the queue's: returns its row when anything
# changed, none when the same times were stored already (then nothing is
# written, updated_at included).
PUT_RETENTION = Template("put_retention", """
INSERT INTO tickwork_retention (queue, keep_completed_ms, keep_failed_ms, updated_at)
VALUES (:queue, :keep_completed_ms, :keep_failed_ms, {now})
ON CONFLICT (queue) DO UPDATE SET
    keep_completed_ms = excluded.keep_completed_ms, keep_failed_ms = excluded.keep_failed_ms,
    updated_at = excluded.updated_at
WHERE keep_completed_ms IS NOT excluded.keep_completed_ms
   OR keep_failed_ms IS NOT excluded.keep_failed_ms
RETURNING queue
""", ("queue", "keep_completed_ms", "keep_failed_ms", "now"), Columns("queue"))

# Remove a queue's policy (it follows the scope's default again), or the
# scope's default (the built-in one applies again): a row when there was one.
DELETE_RETENTION = Template("delete_retention", """
DELETE FROM tickwork_retention WHERE queue = :queue RETURNING queue
""", ("queue",), Columns("queue"))

# --------------------------------------------------- concurrency limits
#
# Concurrency limits (schema: owner-local 0013, D1 0013): a row per queue or
# lane with a max_running of its own. The claims read them (see CLAIM); these
# statements list, store and delete them, and name what runs under one.

#: A limit row, as LIST_LIMITS returns it.
LIMIT_COLUMNS = Columns("kind", "key", "max_running", "updated_at")

# Every stored limit, by primary key (a handful of rows; the store puts
# them in the order every surface lists them).
LIST_LIMITS = Template("list_limits", """
SELECT kind, key, max_running, updated_at FROM tickwork_limits
""", (), LIMIT_COLUMNS)

# Store a limit, replacing the kind and key's: a row when anything changed,
# none when the same max_running was stored already (then nothing is
# written, updated_at included). The CHECKs refuse a bad kind or value.
PUT_LIMIT = Template("put_limit", """
INSERT INTO tickwork_limits (kind, key, max_running, updated_at)
VALUES (:kind, :key, :max_running, {now})
ON CONFLICT (kind, key) DO UPDATE SET
    max_running = excluded.max_running, updated_at = excluded.updated_at
WHERE max_running IS NOT excluded.max_running
RETURNING kind
""", ("kind", "key", "max_running", "now"), Columns("kind"))

# Remove a limit: a row when there was one.
DELETE_LIMIT = Template("delete_limit", """
DELETE FROM tickwork_limits WHERE kind = :kind AND key = :key RETURNING kind
""", ("kind", "key"), Columns("kind"))

# Up to :limit running jobs of a queue, oldest start first: the queue's
# entries of tickwork_jobs_running (no more than run at once), sorted.
RUNNING_IN_QUEUE = Template("running_in_queue", """
SELECT job_id FROM tickwork_jobs INDEXED BY tickwork_jobs_running
WHERE queue = :key AND state = 'running'
ORDER BY started_at, sequence
LIMIT :limit
""", ("key", "limit"), Columns("job_id"))

# Up to :limit running jobs of a lane, oldest start first. D1: those whose
# lane is not their queue's name from tickwork_jobs_lane_running (in start
# order, the first :limit), and those of the queue named like the lane whose
# lane is that name (the jobs that name no lane) from tickwork_jobs_running,
# merged. Owner-local: its running entries, the lane's sorted (see
# LANE_RUNNING_LOCAL).
RUNNING_IN_LANE = Template("running_in_lane", """
SELECT job_id FROM (
    SELECT * FROM (
        SELECT job_id, started_at, sequence
        FROM tickwork_jobs INDEXED BY tickwork_jobs_lane_running
        WHERE lane = :key AND state = 'running' AND lane <> queue
        ORDER BY started_at, sequence
        LIMIT :limit)
    UNION ALL
    SELECT job_id, started_at, sequence
    FROM tickwork_jobs INDEXED BY tickwork_jobs_running
    WHERE queue = :key AND state = 'running' AND lane = :key)
ORDER BY started_at, sequence
LIMIT :limit
""", ("key", "limit"), Columns("job_id"), _d1)
RUNNING_IN_LANE_LOCAL = Template("running_in_lane", """
SELECT job_id FROM tickwork_jobs INDEXED BY tickwork_jobs_running
WHERE state = 'running' AND lane = :key
ORDER BY started_at, sequence
LIMIT :limit
""", ("key", "limit"), Columns("job_id"), _local)

# ------------------------------------------------------------ rate limits
#
# Rate limits (schema: owner-local 0014, D1 0014): a row per queue or lane
# with a bucket (starts per period_ms, burst), a hold, or both. The claims
# read them (see CLAIM) and the schema's trigger spends them; these
# statements list, store and delete them, and put back a rate-limited
# claim. Every product with now is CAST: a Durable Object binds numbers as
# REALs, and now * starts (about 4e17) needs an exact integer.

#: A rate row, as LIST_RATE_LIMITS returns it: the bucket's next start in
#: ms (rounded up), never the raw next_start (above 2^53, which D1 returns
#: through a JavaScript number).
RATE_LIMIT_COLUMNS = Columns("kind", "key", "starts", "period_ms", "burst", "next_start_at",
                             "held_until", "updated_at")

# Every row with a bucket, or with a hold in force at now (a hold that has
# passed is as good as none), by primary key (a handful of rows; the store
# puts them in the order every surface lists them). held_until NULL when
# no hold is in force.
LIST_RATE_LIMITS = Template("list_rate_limits", """
SELECT kind, key, starts, period_ms, burst,
       (next_start + starts - 1) / starts AS next_start_at,
       CASE WHEN held_until > {now} THEN held_until END AS held_until,
       updated_at
FROM tickwork_rate_limits
WHERE starts IS NOT NULL OR held_until > {now}
""", ("now",), RATE_LIMIT_COLUMNS)

# Store a bucket, keeping the key's hold: a new row's bucket starts full
# (next_start 0); a changed bucket keeps the time of its next allowed start
# (ms, rounded up) in the new units; a row that only had a hold gets a
# full bucket. A row when anything changed, none when the same three were
# stored already (then nothing is written, updated_at included). The
# CHECKs refuse a bad kind or value.
PUT_RATE_LIMIT = Template("put_rate_limit", """
INSERT INTO tickwork_rate_limits (kind, key, starts, period_ms, burst, next_start, held_until,
                                  updated_at)
VALUES (:kind, :key, :starts, :period_ms, :burst, 0, 0, {now})
ON CONFLICT (kind, key) DO UPDATE SET
    starts = excluded.starts, period_ms = excluded.period_ms, burst = excluded.burst,
    next_start = CASE WHEN starts IS NULL THEN 0
                      ELSE (next_start + starts - 1) / starts * excluded.starts END,
    updated_at = excluded.updated_at
WHERE starts IS NOT excluded.starts OR period_ms IS NOT excluded.period_ms
   OR burst IS NOT excluded.burst
RETURNING kind
""", ("kind", "key", "starts", "period_ms", "burst", "now"), Columns("kind"))

# Remove a key's bucket and hold: a row when there was one, saying whether
# it held anything (a bucket, or a hold still in force at now). Not
# "starts IS NOT NULL": in a DELETE's RETURNING by primary key, SQLite
# 3.40 takes a NULL column for not NULL (measured: IS NOT NULL true, IS
# NULL false); coalesce reads its value.
DELETE_RATE_LIMIT = Template("delete_rate_limit", """
DELETE FROM tickwork_rate_limits WHERE kind = :kind AND key = :key
RETURNING coalesce(starts, 0) > 0 OR held_until > {now} AS in_force
""", ("kind", "key", "now"), Columns("in_force"))

# An executor's RateLimited, step 1: hold the key until :until (a later
# hold already there stays; a new row has no bucket). updated_at moves only
# when the hold does.
HOLD_RATE_LIMITED = Template("hold_rate_limited", """
INSERT INTO tickwork_rate_limits (kind, key, held_until, updated_at)
VALUES (:kind, :key, CAST(:until AS INTEGER), {now})
ON CONFLICT (kind, key) DO UPDATE SET
    held_until = excluded.held_until, updated_at = excluded.updated_at
WHERE held_until < excluded.held_until
""", ("kind", "key", "until", "now"))

# Step 2, in the same transaction (owner-local) or batch (D1): the claim's
# job goes back to queued, due at once (a claimed job has no due time), as
# RELEASE_CLAIM puts a claim back: no attempt used, its history and
# recoveries unchanged, and the start it took not refunded (the executor
# did start). Fenced like RETRY_CLAIM: the token, running, on D1 a live
# lease, and no cancellation recorded (the lifecycle then settles it
# cancelled). Returns the job as put back.
PUT_BACK_RATE_LIMITED = Template("put_back_rate_limited", f"""
UPDATE tickwork_jobs
SET state = 'queued', started_at = NULL, claim_token = NULL{{clear_lease}}
WHERE sequence = :sequence AND state = 'running' AND claim_token = :token {{lease_live}}
  AND cancellation_id IS NULL
RETURNING {JOB_SELECT}
""", ("sequence", "token", "now"), JOB_ROWS)

# Every queue with settled history, in name order: one seek of
# tickwork_jobs_queue_settled per queue (each step asks for the first queue
# name after the last one), O(queues x log n) however many jobs each holds.
SETTLED_QUEUES = Template("settled_queues", """
WITH RECURSIVE settled(queue) AS (
    SELECT (SELECT min(queue) FROM tickwork_jobs WHERE {filed}state = 'settled')
    UNION ALL
    SELECT (SELECT min(queue) FROM tickwork_jobs
            WHERE {filed}state = 'settled' AND queue > settled.queue)
    FROM settled WHERE settled.queue IS NOT NULL)
SELECT queue FROM settled WHERE queue IS NOT NULL
""", (), Columns("queue"))

#: A settled row that a prune with cutoffs :completed_before (completed,
#: cancelled) and :failed_before (the rest) deletes; a NULL cutoff keeps its
#: kind forever (a comparison with NULL is never true).
_PRUNABLE = """state = 'settled' AND settled_at < CASE
    WHEN outcome = 'completed' OR outcome = 'cancelled' THEN :completed_before
    ELSE :failed_before END"""
#: The job ids a batch deletes, as the JSON array the statements bind.
_PRUNE_IDS = "job_id IN (SELECT value FROM json_each(:job_ids))"

# Up to :limit of one queue's settled jobs past their policy's cutoff: each
# outcome's range of tickwork_jobs_queue_outcomes, from its oldest entry to
# the cutoff (SQLite seeks each (queue, outcome) pair of the IN lists, then
# walks settled_at up to the bound), so no kept row is read.
PRUNABLE = Template("prunable", """
SELECT job_id FROM tickwork_jobs
WHERE {filed}state = 'settled' AND queue = :queue
  AND outcome IN ('completed', 'cancelled') AND settled_at < :completed_before
UNION ALL
SELECT job_id FROM tickwork_jobs
WHERE {filed}state = 'settled' AND queue = :queue
  AND outcome IN ('failed', 'outcome_unknown', 'interrupted') AND settled_at < :failed_before
LIMIT :limit
""", ("queue", "completed_before", "failed_before", "limit"), Columns("job_id"))

# Prune, step 1, in the batch's transaction (owner-local) or D1 batch: the
# redrive ids of the jobs step 2 deletes (by the primary key's job_id
# prefix), so no row of a pruned job is left behind. Fenced like step 2: a
# job redriven since the batch read it is queued again, and keeps its ids.
PRUNE_REDRIVES = Template("prune_redrives", f"""
DELETE FROM tickwork_redrives WHERE job_id IN (
    SELECT job_id FROM tickwork_jobs WHERE {_PRUNE_IDS} AND {_PRUNABLE})
""", ("job_ids", "completed_before", "failed_before"))

# Prune, step 2: delete the batch's jobs (by the unique job_id index) that
# are still settled past their cutoff; how many were deleted.
PRUNE_JOBS = Template("prune_jobs", f"""
DELETE FROM tickwork_jobs WHERE {_PRUNE_IDS} AND {_PRUNABLE}
RETURNING job_id
""", ("job_ids", "completed_before", "failed_before"), Columns("job_id"))

#: The tables a storage report counts, in its order.
STORAGE_TABLES = ("tickwork_jobs", "tickwork_redrives", "tickwork_schedules",
                  "tickwork_paused_queues", "tickwork_retention", "tickwork_limits",
                  "tickwork_rate_limits", "tickwork_queue_history", "tickwork_turns")

# Each tickwork table's row count, in one statement: every row of each
# table is read (SQLite counts through its smallest index), so O(rows); the
# storage report's, never a tick's.
STORAGE_ROWS = Template("storage_rows", "SELECT " + ",\n       ".join(
    f"(SELECT count(*) FROM {table}) AS {table}" for table in STORAGE_TABLES) + "\n",
    (), Columns(*STORAGE_TABLES))

# ============================================================= owner-local
#
# The tick of an owner-local runtime asks its host about running claims it
# does not execute, round robin; a runtime with a concurrent lane splits the
# table into two partitions, one per ticker.

# What a tick must look at before claiming, in one read: the running claim to
# ask the liveness probe about, and whether any cancelled job is still queued.
# The claim is the oldest one not executed by this runtime ({exclude}: its
# tokens) that comes after the cursor (:after_started, :after_sequence), in
# (started_at, sequence) order, wrapping around to the oldest: a claim whose
# execution is alive elsewhere, or whose probe fails, then cannot keep the
# claims behind it from ever being looked at. Both are small-index probes.
TICK_PROBE = Template("tick_probe", """
SELECT
    coalesce(
        (SELECT sequence FROM tickwork_jobs
         WHERE state = 'running' {{exclude}}
           AND (started_at, sequence) > (:after_started, :after_sequence)
         ORDER BY started_at, sequence
         LIMIT 1),
        (SELECT sequence FROM tickwork_jobs
         WHERE state = 'running' {{exclude}}
         ORDER BY started_at, sequence
         LIMIT 1)) AS suspect,
    EXISTS (SELECT 1 FROM tickwork_jobs
            WHERE state = 'queued' AND cancellation_id IS NOT NULL) AS cancelled_waiting
""", ("after_started", "after_sequence"), Columns("suspect", "cancelled_waiting"), _local)

# The settled feed (read_settled): settled jobs in enqueue order after
# :after_sequence, at most :limit, cut by a prefix fence. The page is the
# first :limit jobs after :after_sequence in sequence order, whatever their
# state: a walk of the primary key, so it costs the page size (plus, in a
# runtime with a concurrent lane, the concurrent-lane rows it steps over:
# {partition} is empty, or ``AND lane <> :lane`` to keep the serial
# partition only). Only the part of the page before its first unsettled job
# (queued or running) is returned, so a settlement is withheld until every
# earlier job of the partition has settled or been purged (a purged job is
# deleted and holds nothing back), and pages read one after another are a
# gap-free prefix of the partition in enqueue order. One statement, so the
# page and its fence come from one snapshot.
_READ_SETTLED = f"""
WITH page AS (
    SELECT {JOB_SELECT} FROM tickwork_jobs
    WHERE sequence > :after_sequence {{partition}}
    ORDER BY sequence
    LIMIT :limit)
SELECT {JOB_SELECT} FROM page
WHERE sequence < coalesce(
    (SELECT min(sequence) FROM page WHERE state <> 'settled'), 9223372036854775807)
ORDER BY sequence
"""
READ_SETTLED = Template("read_settled", _READ_SETTLED.replace("{partition}", ""),
                        ("after_sequence", "limit"), JOB_ROWS, _local)
READ_SETTLED_OUTSIDE_LANE = Template(
    "read_settled_outside_lane", _READ_SETTLED.replace("{partition}", "AND lane <> :lane"),
    ("after_sequence", "limit", "lane"), JOB_ROWS, _local)

# ------------------------------------------------------- partitioned ticks
#
# A runtime opened with a concurrent lane has two tickers: the serial ticker
# selects jobs outside the lane (lane <> :lane), the concurrent ticker only
# jobs in it (lane = :lane). The statements below are the partitioned forms
# of CLAIM, CLAIM_IF_CLEAR, TICK_PROBE and SETTLE_NEXT_CANCELLED; a runtime
# without a concurrent lane uses those, unchanged. Every partitioned
# statement binds :lane first, then what its unpartitioned form binds.
# {op} is ``=`` (the concurrent ticker) or ``<>`` (the serial ticker).
# The *_TAKING_TURNS claims are the store's while a queue is wide (see
# "fair turns"): each ticker takes the turns of the lanes it serves, and in
# a wide queue a lane of the other partition that the line puts ahead
# keeps a place for its own ticker.

# Claim within a partition. Marks running, under a fresh claim token, the
# best job (priority desc, oldest first) of the ticker's partition that heads
# its queue across lanes, in one statement. {candidates} picks it;
# {guard} is empty or _PARTITION_CLAIM_GUARD.
_PARTITION_CLAIM = f"""
UPDATE tickwork_jobs
SET state = 'running', claim_token = :token, started_at = {{{{now}}}}
WHERE sequence = {{candidates}}
{{guard}}
RETURNING {JOB_SELECT}
"""

# A candidate has a place in its queue: the queue runs no job (in either
# partition) and no ready job of the queue, in any lane, comes before it
# (it heads the queue); or the queue's limit row is above its running jobs
# plus the ready jobs ahead of the candidate (it is among the first
# max_running - running ready jobs, so whichever ticker takes those ahead,
# there is room for it too). Unlike in CLAIM, coming first in a walk does
# not prove this: the better job may be in the other partition, which the
# walk skips. The head test costs one probe of the running index and one of
# the queue order index (queue_head); the limit row is read only when that
# fails, and then the jobs ahead are counted from the queue order index
# (two ranges: higher priority, then equal priority and older), at most
# MAX_RUNNING_LIMIT of them. A cancelled queued job never runs, so it holds
# no place; its own ticker settles it. This check runs for every candidate,
# so a runtime with a concurrent lane lists every row as it inserts it (see
# tickwork.stores.owner_local): its reads of unlisted rows find none.
_PARTITION_READY = HEAD_READY + " AND cancellation_id IS NULL"
_AHEAD_IN_QUEUE = f"""(SELECT count(*) FROM (
               SELECT 1 FROM (
                   {queue_rows("1", "queue = candidate.queue AND priority > candidate.priority "
                                    "AND " + _PARTITION_READY)}
                   UNION ALL
                   {queue_rows("1", "queue = candidate.queue AND priority = candidate.priority "
                                    "AND sequence < candidate.sequence AND " + _PARTITION_READY)})
               LIMIT {MAX_RUNNING_LIMIT}))"""
_HEADS_ITS_QUEUE = f"""
      AND (({QUEUE_IDLE}
            AND candidate.sequence = {queue_head("candidate.queue", _PARTITION_READY)})
           OR {queue_limit_allows(QUEUE_RUNNING + " + " + _AHEAD_IN_QUEUE)})
      AND {LANE_HAS_ROOM}
      AND {RATE_FREE}"""

# Taking turns (see "fair turns"), a candidate of a wide queue has a place
# when the queue's limit is above its running jobs plus the lanes of the
# other partition that the line puts ahead of the candidate's lane and that
# could start a job (a ready job, room, not rate-held): each of those takes
# a place first. For the serial ticker that is the concurrent lane, if it
# is ahead (one primary-key probe); the serial lanes ahead of the
# candidate's are its own ticker's to take, and its walk takes the first
# (at or before the candidate's lane, so with a place too). For the
# concurrent ticker, every startable lane ahead of its own (a walk of the
# line up to it). A serial queue: the head test, as without turns.
def _startable_lanes_ahead(lanes: str) -> str:
    return f"""(SELECT count(*) FROM (
               SELECT 1 FROM tickwork_turns AS turn
               WHERE turn.queue = candidate.queue{lanes}
                 AND turn.turn < coalesce(
                     (SELECT own.turn FROM tickwork_turns AS own
                      WHERE own.queue = candidate.queue AND own.lane = candidate.lane),
                     9223372036854775807)
                 AND {lane_has_room("turn.lane", "{turn_lane_running}")}
                 AND {rate_free("turn")}
                 AND {{turn_best}} IS NOT NULL
               LIMIT {MAX_RUNNING_LIMIT}))"""


def _heads_its_queue_taking_turns(other_lanes: str) -> str:
    ahead = _startable_lanes_ahead(other_lanes)
    return f"""
      AND CASE WHEN {wide("candidate.queue")}
               THEN {queue_limit_allows(QUEUE_RUNNING + " + " + ahead)}
               ELSE {QUEUE_IDLE}
                    AND candidate.sequence = {queue_head("candidate.queue", _PARTITION_READY)}
               END
      AND {LANE_HAS_ROOM}
      AND {RATE_FREE}"""


# The serial ticker walks the runnable index in pick order, as CLAIM does, and
# stops at the first job outside the concurrent lane that heads its queue.
# What it steps over: concurrent-lane jobs ahead of that job, and jobs of
# held queues (as CLAIM does).
_SERIAL_CANDIDATES = f"""
    SELECT candidate.sequence{{pick_columns}} FROM tickwork_jobs AS candidate
        INDEXED BY tickwork_jobs_runnable
    WHERE candidate.state = 'queued' AND candidate.cancellation_id IS NULL
      AND candidate.due_at IS NULL AND candidate.lane <> :lane {{heads_its_queue}}
      {NOT_PAUSED}
    ORDER BY candidate.priority DESC, candidate.sequence
    LIMIT 1"""
_SERIAL_PICK = "(" + _SERIAL_CANDIDATES.replace("{pick_columns}", "").replace(
    "{heads_its_queue}", _HEADS_ITS_QUEUE) + ")"
# Taking turns: the first such job's queue, if wide, gives the walk of its
# line, over the lanes outside the concurrent one.
_SERIAL_PICK_TAKING_TURNS = "(" + taking_turns(_SERIAL_CANDIDATES.replace(
    "{heads_its_queue}", _heads_its_queue_taking_turns(" AND turn.lane = :lane")),
    " AND turn.lane <> :lane") + ")"

# The concurrent ticker has no index in its lane's pick order (the schema has
# none keyed by lane and priority), so it looks in three steps, each only if
# the one before found nothing:
#   1. does its lane have a runnable job at all? One probe of the lane index
#      (the {pending} term lets SQLite prove that partial index applies; a
#      drain's unfiled settlements are the serial ticker's, never in this
#      lane): an idle concurrent lane costs next to nothing, however deep
#      the serial backlog;
#   2. the first 64 runnable jobs in global pick order: the best of its jobs
#      among them that heads its queue. They are a prefix of the pick order,
#      so a job found here is the best one overall; this is the common case;
#   3. else all of its lane's pending jobs, from the lane index (and the
#      unlisted ones, by the primary key), ordered.
# coalesce and CASE evaluate their arms only as needed. So the concurrent
# ticker's cost grows with its own lane's backlog at worst, never with the
# serial backlog.
_LANE_READY = "lane = :lane AND state = 'queued' AND cancellation_id IS NULL AND due_at IS NULL"
_CONCURRENT_CANDIDATES = f"""(CASE WHEN EXISTS (
    SELECT 1 FROM tickwork_jobs INDEXED BY tickwork_jobs_lane_pending
    WHERE {{pending}} AND {_LANE_READY})
  OR EXISTS (SELECT 1 FROM {UNLISTED} AND {_LANE_READY})
THEN coalesce(
    (SELECT candidate.sequence FROM (
        SELECT sequence, queue, lane, priority FROM tickwork_jobs
            INDEXED BY tickwork_jobs_runnable
        WHERE state = 'queued' AND cancellation_id IS NULL AND due_at IS NULL
        ORDER BY priority DESC, sequence
        LIMIT 64) AS candidate
     WHERE candidate.lane = :lane {{heads_its_queue}} {NOT_PAUSED}
     ORDER BY candidate.priority DESC, candidate.sequence
     LIMIT 1),
    (SELECT candidate.sequence FROM (
        SELECT sequence, queue, lane, priority FROM tickwork_jobs
            INDEXED BY tickwork_jobs_lane_pending
        WHERE {{pending}} AND {_LANE_READY}
        UNION ALL
        SELECT sequence, queue, lane, priority FROM {UNLISTED} AND {_LANE_READY}) AS candidate
     WHERE true {{heads_its_queue}} {NOT_PAUSED}
     ORDER BY candidate.priority DESC, candidate.sequence
     LIMIT 1))
END)"""

_CONCURRENT_PICK = _CONCURRENT_CANDIDATES.replace("{heads_its_queue}", _HEADS_ITS_QUEUE)
# Taking turns: the concurrent ticker takes one lane's jobs, in pick order,
# so no walk; its candidates in a wide queue have a place after the lanes
# the line puts ahead of theirs.
_CONCURRENT_PICK_TAKING_TURNS = _CONCURRENT_CANDIDATES.replace(
    "{heads_its_queue}", _heads_its_queue_taking_turns(""))

# The partitioned fast path: claim only when PARTITION_TICK_PROBE would find
# nothing to do first in this partition (no running claim of the partition
# outside {exclude}, no cancelled job of the partition waiting). The other
# ticker's claims and cancellations are not this ticker's business.
_PARTITION_CLAIM_GUARD = """
  AND NOT EXISTS (SELECT 1 FROM tickwork_jobs
                  WHERE state = 'running' AND lane {op} :lane {{{{exclude}}}})
  AND NOT EXISTS (SELECT 1 FROM tickwork_jobs
                  WHERE state = 'queued' AND cancellation_id IS NOT NULL AND lane {op} :lane)"""

# TICK_PROBE within a partition: the running claim of this partition to ask
# the liveness probe about (round robin after the cursor, skipping
# {exclude}), and whether a cancelled job of this partition is still queued.
# A claim of the other partition is never probed: it belongs to the other
# ticker, which may be executing it right now.
_PARTITION_TICK_PROBE = """
SELECT
    coalesce(
        (SELECT sequence FROM tickwork_jobs
         WHERE state = 'running' AND lane {op} :lane {{{{exclude}}}}
           AND (started_at, sequence) > (:after_started, :after_sequence)
         ORDER BY started_at, sequence
         LIMIT 1),
        (SELECT sequence FROM tickwork_jobs
         WHERE state = 'running' AND lane {op} :lane {{{{exclude}}}}
         ORDER BY started_at, sequence
         LIMIT 1)) AS suspect,
    EXISTS (SELECT 1 FROM tickwork_jobs
            WHERE state = 'queued' AND cancellation_id IS NOT NULL AND lane {op} :lane)
        AS cancelled_waiting
"""

# SETTLE_NEXT_CANCELLED within a partition: the oldest cancelled job of this
# partition that is still queued settles cancelled without running, even
# while its queue's head is busy (in either ticker).
_PARTITION_SETTLE_NEXT_CANCELLED = f"""
UPDATE tickwork_jobs
SET state = 'settled', outcome = 'cancelled', failure_reason = NULL, error_json = NULL,
    settled_at = {{{{now}}}}{{{{file}}}}
WHERE sequence = (
    SELECT sequence FROM tickwork_jobs
    WHERE state = 'queued' AND cancellation_id IS NOT NULL AND lane {{op}} :lane
    ORDER BY sequence
    LIMIT 1)
RETURNING {JOB_SELECT}
"""


def _partition_claim(name: str, op: str, candidates: str, guarded: bool) -> Template:
    guard = _PARTITION_CLAIM_GUARD.format(op=op) if guarded else ""
    text = _PARTITION_CLAIM.format(candidates=candidates, guard=guard)
    return Template(name, text, ("lane", "token", "now"), JOB_ROWS, _local)


CLAIM_OUTSIDE_LANE = _partition_claim("claim_outside_lane", "<>", _SERIAL_PICK, False)
CLAIM_OUTSIDE_LANE_IF_CLEAR = _partition_claim("claim_outside_lane_if_clear", "<>",
                                               _SERIAL_PICK, True)
CLAIM_IN_LANE = _partition_claim("claim_in_lane", "=", _CONCURRENT_PICK, False)
CLAIM_IN_LANE_IF_CLEAR = _partition_claim("claim_in_lane_if_clear", "=", _CONCURRENT_PICK, True)
CLAIM_OUTSIDE_LANE_TAKING_TURNS = _partition_claim(
    "claim_outside_lane_taking_turns", "<>", _SERIAL_PICK_TAKING_TURNS, False)
CLAIM_OUTSIDE_LANE_IF_CLEAR_TAKING_TURNS = _partition_claim(
    "claim_outside_lane_if_clear_taking_turns", "<>", _SERIAL_PICK_TAKING_TURNS, True)
CLAIM_IN_LANE_TAKING_TURNS = _partition_claim(
    "claim_in_lane_taking_turns", "=", _CONCURRENT_PICK_TAKING_TURNS, False)
CLAIM_IN_LANE_IF_CLEAR_TAKING_TURNS = _partition_claim(
    "claim_in_lane_if_clear_taking_turns", "=", _CONCURRENT_PICK_TAKING_TURNS, True)
TICK_PROBE_OUTSIDE_LANE = Template(
    "tick_probe_outside_lane", _PARTITION_TICK_PROBE.format(op="<>"),
    ("lane", "after_started", "after_sequence"), TICK_PROBE.columns, _local)
TICK_PROBE_IN_LANE = Template(
    "tick_probe_in_lane", _PARTITION_TICK_PROBE.format(op="="),
    ("lane", "after_started", "after_sequence"), TICK_PROBE.columns, _local)
SETTLE_NEXT_CANCELLED_OUTSIDE_LANE = Template(
    "settle_next_cancelled_outside_lane", _PARTITION_SETTLE_NEXT_CANCELLED.format(op="<>"),
    ("lane", "now"), JOB_ROWS, _local)
SETTLE_NEXT_CANCELLED_IN_LANE = Template(
    "settle_next_cancelled_in_lane", _PARTITION_SETTLE_NEXT_CANCELLED.format(op="="),
    ("lane", "now"), JOB_ROWS, _local)

# =================================================================== D1
#
# D1 is shared by every Worker invocation: leases, renewals, the schema
# check, and the statements a producer puts in its own db.batch.

# The schema version a database holds: D1's runtime checks it before its
# first operation; both stores' readiness checks read it (a real storage read).
SCHEMA_VERSION = Template("schema_version", """
SELECT value FROM tickwork_meta WHERE key = 'schema_version'
""", (), Columns("value"))

# The oldest expired claim (with its token) and whether a cancelled job is
# still queued, in one read. Both come from small partial indexes.
PROBE = Template("probe", f"""
SELECT {', '.join('expired.' + name for name in JOB_COLUMNS)},
       expired.claim_token,
       EXISTS (SELECT 1 FROM tickwork_jobs
               WHERE state = 'queued' AND cancellation_id IS NOT NULL) AS cancelled_waiting
FROM (SELECT 1) LEFT JOIN (
    SELECT * FROM tickwork_jobs
    WHERE state = 'running' AND lease_expires_at <= {{now}}
    ORDER BY lease_expires_at, sequence LIMIT 1) AS expired ON 1
""", ("now",), Columns(*JOB_COLUMNS, "claim_token", "cancelled_waiting"), _d1)

# Renewal: extends a live lease only. The lease_expires_at > now fence means a
# renewal that arrives after expiry can never resurrect the claim; max() means
# a short heartbeat never shortens a longer lease. Returns whether a
# cancellation is recorded, so the executor learns of it at renewal.
RENEW = Template("renew", """
UPDATE tickwork_jobs
SET lease_expires_at = max(lease_expires_at, {now} + :lease_ms)
WHERE sequence = :sequence AND state = 'running' AND claim_token = :token {lease_live}
RETURNING cancellation_id IS NOT NULL AS cancelled
""", ("now", "sequence", "token", "lease_ms"), Columns("cancelled"), _d1)

# Two payload texts that differ only in key order (enqueue_from_select keeps
# the producer's; tickwork stores sorted keys) are the same payload: every
# node of one, by path, type and scalar value, is a node of the other. Only
# evaluated when the texts differ (a replay of a job of the other path).
_PAYLOADS_DIFFER = """(
       EXISTS (SELECT fullkey, type, atom FROM json_tree(tickwork_jobs.payload_json)
               EXCEPT SELECT fullkey, type, atom FROM json_tree(excluded.payload_json))
    OR EXISTS (SELECT fullkey, type, atom FROM json_tree(excluded.payload_json)
               EXCEPT SELECT fullkey, type, atom FROM json_tree(tickwork_jobs.payload_json)))"""

# Enqueue inside a producer's batch: an identical replay matches the upsert's
# WHERE nothing and writes nothing; a replay with other cargo becomes an UPDATE
# of the cargo columns, which the tickwork_jobs_cargo_is_immutable trigger
# aborts, failing the producer's whole batch. A payload whose text differs
# only in key order is the same cargo: no UPDATE, no abort.
ON_REPLAY = f"""
ON CONFLICT (job_id) DO UPDATE SET
    queue = excluded.queue, lane = excluded.lane, priority = excluded.priority,
    payload_json = excluded.payload_json, max_recoveries = excluded.max_recoveries,
    run_at = excluded.run_at, delay_ms = excluded.delay_ms, retry_json = excluded.retry_json
WHERE queue IS NOT excluded.queue OR lane IS NOT excluded.lane
   OR priority IS NOT excluded.priority
   OR (payload_json IS NOT excluded.payload_json AND {_PAYLOADS_DIFFER})
   OR max_recoveries IS NOT excluded.max_recoveries
   OR run_at IS NOT excluded.run_at OR delay_ms IS NOT excluded.delay_ms
   OR retry_json IS NOT excluded.retry_json
"""

ENQUEUE = Template("enqueue", _INSERT_JOB + ON_REPLAY.replace("{", "{{").replace("}", "}}"),
                   JOB_PARAMS, None, _d1)

# ingest_many: one INGEST per job, all in one db.batch (one round trip, one
# transaction). RETURNING gives a row only for an inserted job: an identical
# replay (of a stored job, or of an earlier statement of the same batch)
# writes and returns nothing, and other cargo makes the trigger abort the
# whole batch.
INGEST = Template("ingest", ENQUEUE.text + "RETURNING sequence\n", JOB_PARAMS,
                  SEQUENCE_ROWS, _d1)
ENQUEUE_AT_ONCE = at_once(ENQUEUE)
INGEST_AT_ONCE = at_once(INGEST)

# After a batch failed on a conflict: the stored cargo of the batch's job ids
# (:job_ids is a JSON array of them: one bound value however many jobs), so
# the runtime can name the job that conflicted and the fields that differ.
SELECT_CARGO_MANY = Template("select_cargo_many", f"""
SELECT {', '.join(CARGO_COLUMNS)}
FROM tickwork_jobs WHERE job_id IN (SELECT value FROM json_each(:job_ids))
""", ("job_ids",), CARGO_ROWS, _d1)

# enqueue_from_select: the producer's SELECT ({select}, with its own ?1..?N
# values; tickwork's clock takes ?N+1: {now}) yields the rows. json()
# normalises the payload text; the table's CHECKs validate what Python did
# not see. "WHERE true" resolves SQLite's upsert-after-SELECT parsing
# ambiguity. Rendered per call (``enqueue_from_select``).
ENQUEUE_FROM_SELECT = """
INSERT INTO tickwork_jobs
    (job_id, queue, lane, priority, payload_json, max_recoveries, state, enqueued_at)
SELECT job_id, queue_name, lane, priority, json(payload_json), recovery_max, 'queued', {now}
FROM ({select}) WHERE true
""" + ON_REPLAY.replace("{", "{{").replace("}", "}}")

# Erasure for a trusted producer SELECT naming queues: every job in them goes.
PURGE_QUEUES = "DELETE FROM tickwork_jobs WHERE queue IN ({select})"


def d1_clock(parameter: str) -> str:
    """D1's clock expression with its override bound as ``parameter`` (``?N``)."""
    return D1.now.replace(":now", parameter)

# ------------------------------------------------------ history over time
#
# tickwork_queue_history (owner-local 0012, D1 0011): one row per queue per
# minute. The runtimes count transitions in memory
# (tickwork.model.history.HistoryTally) and write them here with
# ADD_HISTORY_COUNTS; SAMPLE_HISTORY writes the depth and the head's wait;
# HISTORY reads; PRUNE_HISTORY deletes what is past the horizon.

#: The result of HISTORY, one row per bucket that has a row: its start, the
#: counts summed, the highest depth and the longest wait sampled in it.
HISTORY_COLUMNS = Columns("bucket", "enqueued", "started", "completed", "failed", "cancelled",
                          "retried", "depth", "oldest_age_ms")

# One queue's minutes in [:since, :until), summed into buckets of
# :bucket_ms (a multiple of a minute) by the primary key, oldest first.
HISTORY = Template("history", """
SELECT minute - minute % :bucket_ms AS bucket, sum(enqueued) AS enqueued,
       sum(started) AS started, sum(completed) AS completed, sum(failed) AS failed,
       sum(cancelled) AS cancelled, sum(retried) AS retried, max(depth) AS depth,
       max(oldest_age_ms) AS oldest_age_ms
FROM tickwork_queue_history
WHERE queue = :queue AND minute >= :since AND minute < :until
GROUP BY bucket
ORDER BY bucket
""", ("bucket_ms", "queue", "since", "until"), HISTORY_COLUMNS)

# Whether the queue has any history row (a read of the primary key): a
# queue with none is one tickwork has not seen.
HISTORY_KNOWN = Template("history_known", """
SELECT EXISTS (SELECT 1 FROM tickwork_queue_history WHERE queue = :queue) AS known
""", ("queue",), Columns("known"))

# A tally's rows added to the stored ones, in one statement: :rows is a JSON
# array of [queue, minute, enqueued, started, completed, failed, cancelled,
# retried], in (queue, minute) order (one bound value however many rows).
# "WHERE true" resolves SQLite's upsert-after-SELECT parsing ambiguity.
ADD_HISTORY_COUNTS = Template("add_history_counts", """
INSERT INTO tickwork_queue_history
    (queue, minute, enqueued, started, completed, failed, cancelled, retried)
SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
       json_extract(value, '$[2]'), json_extract(value, '$[3]'),
       json_extract(value, '$[4]'), json_extract(value, '$[5]'),
       json_extract(value, '$[6]'), json_extract(value, '$[7]')
FROM json_each(:rows) WHERE true
ON CONFLICT (queue, minute) DO UPDATE SET
    enqueued = enqueued + excluded.enqueued, started = started + excluded.started,
    completed = completed + excluded.completed, failed = failed + excluded.failed,
    cancelled = cancelled + excluded.cancelled, retried = retried + excluded.retried
""", ("rows",))

# The sample of the current minute, with a bounded cost whatever the
# backlog: the queues with waiting jobs found by a skip scan of the queue
# index (one descent per queue, at most :max_queues), those in :queues (a
# JSON array: the ones the flush counted), and those sampled non-empty since
# :since (so an emptied queue is sampled 0); for each, its waiting jobs
# counted up to :depth_limit (an index range of at most that many entries)
# and how long its head job (the next to run; one descent) has been ready,
# by READY_SINCE. Written into the row of the minute {now} is in.
_SAMPLE_HISTORY = """
WITH RECURSIVE waiting(queue) AS (
    SELECT (SELECT queue FROM {waiting} ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT queue FROM {waiting} AND queue > waiting.queue ORDER BY queue LIMIT 1)
    FROM waiting WHERE waiting.queue IS NOT NULL
    LIMIT :max_queues),
sampled(queue) AS (
    SELECT queue FROM waiting WHERE queue IS NOT NULL
    {unlisted}
    UNION SELECT value FROM json_each(:queues)
    UNION SELECT queue FROM tickwork_queue_history WHERE minute >= :since AND depth > 0)
INSERT INTO tickwork_queue_history (queue, minute, depth, oldest_age_ms)
SELECT queue, {{now}} - {{now}} % 60000,
       {depth},
       (SELECT {{now}} - {ready_since} FROM ({head}))
FROM sampled WHERE true
ORDER BY queue
ON CONFLICT (queue, minute) DO UPDATE SET
    depth = excluded.depth, oldest_age_ms = excluded.oldest_age_ms
"""
_SAMPLE_PARAMS = ("max_queues", "queues", "since", "now", "depth_limit")
#: Owner-local (0010): a queue's waiting jobs, up to :depth_limit, counted
#: from its entries in the queue order index without reading each row's
#: state (5 times cheaper, measured): the entries, less the queue's running
#: and unfiled settled rows that are listed (a few: the index holds them
#: too), plus its unlisted queued rows. Up to BUSY_SLACK of those are
#: counted past the limit, so a full count still reads as over it.
_BUSY_SLACK = 1000
_LOCAL_DEPTH = f"""min(:depth_limit, max(0,
           (SELECT count(*) FROM (SELECT 1 FROM {QUEUE_ORDER} AND queue = sampled.queue
                                  LIMIT :depth_limit + {_BUSY_SLACK}))
           - (SELECT count(*) FROM tickwork_jobs INDEXED BY tickwork_jobs_running
              WHERE state = 'running' AND queue = sampled.queue AND {PENDING_LISTED})
           - (SELECT count(*) FROM {UNFILED} AND queue = sampled.queue AND listed = 1))
         + (SELECT count(*) FROM {UNLISTED} AND queue = sampled.queue AND state = 'queued'))"""
_SAMPLE_READY_SINCE = READY_SINCE.replace("{", "{{").replace("}", "}}")
SAMPLE_HISTORY = Template("sample_history", _SAMPLE_HISTORY.format(
    waiting="tickwork_jobs WHERE state = 'queued'", unlisted="",
    depth=("(SELECT count(*) FROM (SELECT 1 FROM tickwork_jobs "
           "WHERE queue = sampled.queue AND state = 'queued' LIMIT :depth_limit))"),
    ready_since=_SAMPLE_READY_SINCE,
    head=("SELECT *, job_id AS row_job_id FROM tickwork_jobs "
          f"WHERE queue = sampled.queue AND {HEAD_READY} ORDER BY priority DESC, sequence "
          "LIMIT 1")), _SAMPLE_PARAMS, None, _d1)
SAMPLE_HISTORY_LOCAL = Template("sample_history", _SAMPLE_HISTORY.format(
    waiting=f"{QUEUE_ORDER} AND state = 'queued'",
    unlisted=f"UNION SELECT queue FROM {UNLISTED} AND state = 'queued'",
    depth=_LOCAL_DEPTH,
    ready_since=_SAMPLE_READY_SINCE,
    head=("SELECT *, job_id AS row_job_id FROM tickwork_jobs "
          f"WHERE sequence = {queue_head('sampled.queue', HEAD_READY)}")),
    _SAMPLE_PARAMS, None, _local)

def history_rows_json(rows: Sequence[Any]) -> str:
    """ADD_HISTORY_COUNTS's :rows: a tally's ``HistoryRow`` s as one JSON array."""
    return json.dumps([[row.queue, row.minute, *row.values()] for row in rows],
                      separators=(",", ":"))


# Up to :limit of the oldest rows before :keep_ms before {now}, by the
# minute index: a bounded batch, however far behind the pruning is.
PRUNE_HISTORY = Template("prune_history", """
DELETE FROM tickwork_queue_history
WHERE (queue, minute) IN (
    SELECT queue, minute FROM tickwork_queue_history
    WHERE minute < {now} - :keep_ms
    ORDER BY minute
    LIMIT :limit)
RETURNING minute
""", ("now", "keep_ms", "limit"), Columns("minute"))
