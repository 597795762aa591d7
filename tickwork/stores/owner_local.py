"""The owner-local job table: its statements, run on a ``SyncDatabase``.

The statements are the SQLite family's (``tickwork.stores.sql.sqlite``),
rendered for the owner-local target; each method runs one of them and
decodes the rows by column name. No lifecycle decisions here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tickwork.lifecycle import Settlement
from tickwork.lifecycle.requests import JobListing
from tickwork.model.errors import IngestConflict
from tickwork.model.history import DEPTH_CAP, MAX_SAMPLED_QUEUES, HistoryRow
from tickwork.model.jobs import MAX_ID_LENGTH, JobRecord, ValidJob, cargo_differences
from tickwork.model.limits import ConcurrencyLimit, LimitKind, in_order
from tickwork.model.rate_limits import RateLimit, rate_in_order
from tickwork.model.retention import SCOPE_KEY, RetentionPolicy, StorageReport
from tickwork.model.schedules import StoredSchedule, ValidSchedule
from tickwork.ports.database import CountingDatabase, Row, SizedDatabase, SyncDatabase
from tickwork.stores.index_batching import IndexBatching
from tickwork.stores.rows import (
    CARGO,
    CLAIM,
    JOB,
    Columns,
    decode_job,
    limit_row,
    rate_limit_row,
    retention_row,
    schedule_row,
)
from tickwork.stores.sql import sqlite as sql
from tickwork.stores.sql.sqlite import history_rows_json

_render = sql.render_owner_local

_INSERT_JOB = _render(sql.INSERT_JOB, *sql.JOB_PARAMS)
_INSERT_JOB_AT_ONCE = _render(sql.INSERT_JOB_AT_ONCE, *sql.JOB_PARAMS_AT_ONCE)
_INSERT_JOB_COUNTED = _render(sql.INSERT_JOB_COUNTED, *sql.JOB_PARAMS)
_INSERT_JOB_AT_ONCE_COUNTED = _render(sql.INSERT_JOB_AT_ONCE_COUNTED,
                                      *sql.JOB_PARAMS_AT_ONCE)
_SELECT_JOB = _render(sql.SELECT_JOB, "job_id")
_SELECT_CARGO = _render(sql.SELECT_CARGO, "job_id")
_SELECT_QUEUE_HEAD = _render(sql.SELECT_QUEUE_HEAD_LOCAL, "queue")
_READY_AHEAD = _render(sql.READY_AHEAD_LOCAL, "queue", "priority", "sequence", "limit")
_READY_AHEAD_TAKING_TURNS = _render(sql.READY_AHEAD_TAKING_TURNS_LOCAL, "queue", "priority",
                                    "sequence", "limit")
_SELECT_LATEST_SETTLED = _render(sql.SELECT_LATEST_SETTLED, "queue")
_SELECT_CLAIM = _render(sql.SELECT_CLAIM, "sequence")
_SETTLE = sql.SETTLE_PARAMS
_CLAIMED_BY_TOKEN = _render(sql.CLAIMED_BY_TOKEN, "token")
_SPEND_RATE = _render(sql.SPEND_RATE, "now", "queue", "lane")
_HAS_BUCKETS = _render(sql.HAS_BUCKETS)
_ANY_WIDE_QUEUE = _render(sql.ANY_WIDE_QUEUE)
_JOIN_LINE = _render(sql.JOIN_LINE, "sequences")
_LEAVE_LINE = _render(sql.LEAVE_LINE, "queue", "lane")
_BACK_OF_LINE = _render(sql.BACK_OF_LINE, "queue", "lane")
_WIDEN_LINE = _render(sql.WIDEN_LINE_LOCAL, "queue", "max_running")
_DROP_LINE = _render(sql.DROP_LINE, "queue")
_LANE_ORDER_INDEX = _render(sql.LANE_ORDER_INDEX)
_NO_LANE_ORDER_INDEX = _render(sql.NO_LANE_ORDER_INDEX)
_SETTLE_RECOVERED_CLAIM = _render(sql.SETTLE_RECOVERED_CLAIM, *_SETTLE)
_REQUEUE_CLAIM = _render(sql.REQUEUE_CLAIM, "sequence", "token")
_RELEASE_CLAIM = _render(sql.RELEASE_CLAIM, "sequence", "token")
_RETRY_CLAIM = _render(sql.RETRY_CLAIM, "now", "delay_ms", "error_json", "outcome",
                       "failure_reason", "error_line", "sequence", "token")
_REDRIVE_APPLIED = _render(sql.REDRIVE_APPLIED, "job_id", "redrive_id")
_REDRIVE_JOB = _render(sql.REDRIVE_JOB, "redrive_id", "job_id")
_NOTE_REDRIVE = _render(sql.NOTE_REDRIVE, "redrive_id", "now", "job_id")
_DEAD_LETTERS = _render(sql.DEAD_LETTERS_LOCAL, "queue", "before_settled", "before_sequence",
                        "limit")
_SCHEMA_VERSION = _render(sql.SCHEMA_VERSION)
_JOBS_BY_ID_PREFIX_FIRST = _render(sql.JOBS_BY_ID_PREFIX_FIRST, "low", "high", "limit")
_JOBS_BY_ID_PREFIX_NEXT = _render(sql.JOBS_BY_ID_PREFIX_NEXT, "low", "high", "limit")
_DEAD_LETTER_COUNT = _render(sql.DEAD_LETTER_COUNT_LOCAL, "cap")
_LIST_JOBS = {key: template.render(sql.OWNER_LOCAL)
              for key, template in sql.LIST_JOBS_LOCAL.items()}
_SELECT_SCHEDULE = _render(sql.SELECT_SCHEDULE, "name")
_LIST_SCHEDULES = _render(sql.LIST_SCHEDULES)
_CREATE_SCHEDULE = _render(sql.CREATE_SCHEDULE, "name", "spec_json", "next_at", "now")
_REPLACE_SCHEDULE = _render(sql.REPLACE_SCHEDULE, "spec_json", "next_at", "now", "name",
                            "old_spec_json")
_PAUSE_SCHEDULE = _render(sql.PAUSE_SCHEDULE, "now", "name")
_RESUME_SCHEDULE = _render(sql.RESUME_SCHEDULE, "next_at", "now", "name", "spec_json")
_DELETE_SCHEDULE = _render(sql.DELETE_SCHEDULE, "name")
_DUE_SCHEDULES = _render(sql.DUE_SCHEDULES, "now")
_NEXT_SLOT = _render(sql.NEXT_SLOT)
_FIRE_SLOT = _render(sql.FIRE_SLOT, *sql.FIRE_SLOT.params)
_ADVANCE_SCHEDULE = _render(sql.ADVANCE_SCHEDULE, "next_at", "name", "spec_json")
_RECORD_CANCELLATION = _render(sql.RECORD_CANCELLATION, "cancellation_id", "job_id")
_RECORD_CANCELLATION_IF_QUEUED = _render(sql.RECORD_CANCELLATION_IF_QUEUED,
                                         "cancellation_id", "job_id")
_FAIL_LANE = _render(sql.FAIL_LANE_LOCAL, "lane", "reason", "limit", "now")
_LANE_HAS_PENDING = _render(sql.LANE_HAS_PENDING_LOCAL, "lane")
_PURGE_QUEUE = _render(sql.PURGE_QUEUE_COUNTED, "queue")
_PAUSE_QUEUE = _render(sql.PAUSE_QUEUE, "queue", "now")
_RESUME_QUEUE = _render(sql.RESUME_QUEUE, "queue")
_QUEUE_PAUSED = _render(sql.QUEUE_PAUSED, "queue")
_HAS_PENDING_WORK = _render(sql.HAS_PENDING_WORK, "now")
_NEXT_DUE = _render(sql.NEXT_DUE)
_NEXT_WORK = _render(sql.NEXT_WORK, "now")
_NEXT_WAITS = _render(sql.NEXT_WAITS, "now")
_PROMOTE_DUE = _render(sql.PROMOTE_DUE_QUEUES, "now", "limit")
_STATUS = _render(sql.STATUS)
_BACKLOG = _render(sql.BACKLOG_LOCAL)
_QUEUE_STATUS = _render(sql.QUEUE_STATUS_LOCAL, "queue")
_READ_SETTLED = _render(sql.READ_SETTLED, "after_sequence", "limit")
_LIST_RETENTION = _render(sql.LIST_RETENTION)
_PUT_RETENTION = _render(sql.PUT_RETENTION, "queue", "keep_completed_ms", "keep_failed_ms",
                         "now")
_DELETE_RETENTION = _render(sql.DELETE_RETENTION, "queue")
_LIST_LIMITS = _render(sql.LIST_LIMITS)
_PUT_LIMIT = _render(sql.PUT_LIMIT, "kind", "key", "max_running", "now")
_DELETE_LIMIT = _render(sql.DELETE_LIMIT, "kind", "key")
_LIST_RATE_LIMITS = _render(sql.LIST_RATE_LIMITS, "now")
_PUT_RATE_LIMIT = _render(sql.PUT_RATE_LIMIT, "kind", "key", "starts", "period_ms", "burst",
                          "now")
_DELETE_RATE_LIMIT = _render(sql.DELETE_RATE_LIMIT, "kind", "key", "now")
_HOLD_RATE_LIMITED = _render(sql.HOLD_RATE_LIMITED, "kind", "key", "until", "now")
_PUT_BACK_RATE_LIMITED = _render(sql.PUT_BACK_RATE_LIMITED, "sequence", "token")
_RUNNING_IN = {"queue": _render(sql.RUNNING_IN_QUEUE, "key", "limit"),
               "lane": _render(sql.RUNNING_IN_LANE_LOCAL, "key", "limit")}
_SETTLED_QUEUES = _render(sql.SETTLED_QUEUES)
_PRUNABLE = _render(sql.PRUNABLE, "queue", "completed_before", "failed_before", "limit")
_PRUNE_REDRIVES = _render(sql.PRUNE_REDRIVES, "job_ids", "completed_before", "failed_before")
_PRUNE_JOBS = _render(sql.PRUNE_JOBS, "job_ids", "completed_before", "failed_before")
_STORAGE_ROWS = _render(sql.STORAGE_ROWS)
_READ_SETTLED_OUTSIDE_LANE = _render(sql.READ_SETTLED_OUTSIDE_LANE,
                                     "after_sequence", "limit", "lane")
_HISTORY = _render(sql.HISTORY, "bucket_ms", "queue", "since", "until")
_HISTORY_KNOWN = _render(sql.HISTORY_KNOWN, "queue")
_ADD_HISTORY_COUNTS = _render(sql.ADD_HISTORY_COUNTS, "rows")
_SAMPLE_HISTORY = _render(sql.SAMPLE_HISTORY_LOCAL, "max_queues", "queues", "since", "now",
                          "depth_limit")
_PRUNE_HISTORY = _render(sql.PRUNE_HISTORY, "now", "keep_ms", "limit")


@dataclass(frozen=True, slots=True)
class Partition:
    """The jobs one ticker selects from, and the statements that select them.

    ``bind`` goes in front of every statement's own values: nothing for
    ``EVERY_JOB`` (the plain statements), the concurrent lane for the
    partitioned ones. The claim-if-clear and probe texts still hold
    ``{exclude}`` (see ``OwnerLocalStore``). ``claim_next_if_clear_counted``
    is claim-if-clear without RETURNING, for a database that counts the rows
    a write changed; only ``EVERY_JOB`` has it (after its claim the running
    index holds only this runtime's claims, so the claim's row is found by
    its token in a few steps; a partition's may hold the other partition's).
    ``taking_turns``: the same partition with the claims that take turns in
    wide queues (``tickwork.stores.sql.sqlite``, "fair turns"), which the
    store runs while any queue is wide.
    """

    name: str
    bind: tuple[str, ...]
    claim_next: sql.Statement
    claim_next_if_clear: sql.Statement
    tick_probe: sql.Statement
    settle_next_cancelled: sql.Statement
    claim_next_if_clear_counted: sql.Statement | None = None
    taking_turns: Partition | None = None


_TICK_PROBE = _render(sql.TICK_PROBE, "after_started", "after_sequence")
_SETTLE_NEXT_CANCELLED = _render(sql.SETTLE_NEXT_CANCELLED, "now")
#: A runtime without a concurrent lane: one ticker, every job.
EVERY_JOB = Partition(
    "every job", (), _render(sql.CLAIM, "token", "now"),
    _render(sql.CLAIM_IF_CLEAR, "token", "now"), _TICK_PROBE, _SETTLE_NEXT_CANCELLED,
    _render(sql.CLAIM_IF_CLEAR_COUNTED, "token", "now"),
    Partition("every job", (), _render(sql.CLAIM_TAKING_TURNS, "token", "now"),
              _render(sql.CLAIM_IF_CLEAR_TAKING_TURNS, "token", "now"), _TICK_PROBE,
              _SETTLE_NEXT_CANCELLED,
              _render(sql.CLAIM_IF_CLEAR_TAKING_TURNS_COUNTED, "token", "now")))


def _partition_statements(claim: sql.Template, claim_if_clear: sql.Template,
                          probe: sql.Template,
                          settle_next_cancelled: sql.Template
                          ) -> tuple[sql.Statement, sql.Statement, sql.Statement, sql.Statement]:
    return (_render(claim, "lane", "token", "now"),
            _render(claim_if_clear, "lane", "token", "now"),
            _render(probe, "lane", "after_started", "after_sequence"),
            _render(settle_next_cancelled, "lane", "now"))


_OUTSIDE_LANE = _partition_statements(
    sql.CLAIM_OUTSIDE_LANE, sql.CLAIM_OUTSIDE_LANE_IF_CLEAR, sql.TICK_PROBE_OUTSIDE_LANE,
    sql.SETTLE_NEXT_CANCELLED_OUTSIDE_LANE)
_OUTSIDE_LANE_TAKING_TURNS = _partition_statements(
    sql.CLAIM_OUTSIDE_LANE_TAKING_TURNS, sql.CLAIM_OUTSIDE_LANE_IF_CLEAR_TAKING_TURNS,
    sql.TICK_PROBE_OUTSIDE_LANE, sql.SETTLE_NEXT_CANCELLED_OUTSIDE_LANE)
_IN_LANE = _partition_statements(
    sql.CLAIM_IN_LANE, sql.CLAIM_IN_LANE_IF_CLEAR, sql.TICK_PROBE_IN_LANE,
    sql.SETTLE_NEXT_CANCELLED_IN_LANE)
_IN_LANE_TAKING_TURNS = _partition_statements(
    sql.CLAIM_IN_LANE_TAKING_TURNS, sql.CLAIM_IN_LANE_IF_CLEAR_TAKING_TURNS,
    sql.TICK_PROBE_IN_LANE, sql.SETTLE_NEXT_CANCELLED_IN_LANE)


def outside_lane(lane: str) -> Partition:
    """The serial ticker of a runtime whose concurrent lane is ``lane``."""
    return Partition("serial", (lane,), *_OUTSIDE_LANE,
                     taking_turns=Partition("serial", (lane,), *_OUTSIDE_LANE_TAKING_TURNS))


def inside_lane(lane: str) -> Partition:
    """The concurrent ticker: only the jobs of ``lane``."""
    return Partition("concurrent", (lane,), *_IN_LANE,
                     taking_turns=Partition("concurrent", (lane,), *_IN_LANE_TAKING_TURNS))


class OwnerLocalStore:
    """The owner-local job table, one method per statement.

    When the index entries no claim needs are written is the ``IndexBatching``
    policy's to decide (``tickwork.stores.index_batching``): in batches
    (``batched``, the default) or each in its row's own commit."""

    def __init__(self, database: SyncDatabase, *, batched: bool = True) -> None:
        self.database = database
        self._batching = IndexBatching(database, batched=batched)
        self._texts: dict[tuple[str, int], str] = {}
        # How many rows a write changed, if the database says so (a
        # CountingDatabase, such as Sqlite3Database): then the inserts, the hot
        # claim and the settlements run without RETURNING.
        self._count: Callable[[str, Sequence[Any]], int] | None = (
            database.mutate_count if isinstance(database, CountingDatabase) else None)
        # Whether a rate limit's bucket is stored, so a claim must spend a
        # start (None: not read yet; read again after a delete). Known here
        # because the owner-local contract has one writer, this store: the
        # claim of an owner without buckets runs as it did before them.
        self._buckets: bool | None = None
        # Whether any queue is wide, so claims take turns and the store keeps
        # the lines (None: not read yet; read again after a queue's limit
        # went down or away). Known here for the same reason: the claims and
        # writes of an owner without a wide queue run as before fair turns.
        self._wide: bool | None = None

    # The statements these two run return JOB rows (job columns first).
    def _read_one(self, statement: sql.Statement, params: Sequence[Any]) -> JobRecord | None:
        rows = self.database.query(statement.text, params)
        return decode_job(rows[0]) if rows else None

    def _write_one(self, statement: sql.Statement, params: Sequence[Any]) -> JobRecord | None:
        rows = self.database.mutate(statement.text, params)
        return decode_job(rows[0]) if rows else None

    def _changed(self, statement: sql.Statement, counted: sql.Statement,
                 params: Sequence[Any]) -> bool:
        """Whether a write changed a row: ``counted`` (``statement`` without
        its RETURNING) where the database counts changed rows, else
        ``statement`` and whether it returned one."""
        count = self._count
        if count is not None:
            return count(counted.text, params) > 0
        return bool(self.database.mutate(statement.text, params))

    def _excluding(self, statement: sql.Statement, count: int) -> str:
        """The statement's text with its {exclude} filled for ``count`` claim
        tokens, bound after its own parameters (cached per count)."""
        key = (statement.name, count)
        text = self._texts.get(key)
        if text is None:
            exclude = ""
            if count:
                first = len(statement.params) + 1
                marks = ", ".join(f"?{number}" for number in range(first, first + count))
                exclude = f"AND claim_token NOT IN ({marks})"
            text = self._texts[key] = statement.text.replace("{exclude}", exclude)
        return text

    # ----------------------------------------------------------------- reads

    def find(self, job_id: str) -> JobRecord | None:
        return self._read_one(_SELECT_JOB, (job_id,))

    def find_cargo(self, job_id: str) -> ValidJob | None:
        """The stored job's identity and cargo, as validate_job would produce them."""
        rows = self.database.query(_SELECT_CARGO.text, (job_id,))
        return CARGO.cargo(rows[0]) if rows else None

    def queue_head(self, queue: str) -> JobRecord | None:
        return self._read_one(_SELECT_QUEUE_HEAD, (queue,))

    def ready_ahead(self, queue: str, priority: int, sequence: int, limit: int) -> list[str]:
        """The ids of up to ``limit`` jobs of ``queue`` a claim takes before
        the job at (``priority``, ``sequence``), in pick order; in a wide
        queue, in the order its lanes take turns."""
        statement = _READY_AHEAD_TAKING_TURNS if self._taking_turns() else _READY_AHEAD
        rows = self.database.query(statement.text, (queue, priority, sequence, limit))
        return [row[0] for row in rows]

    def latest_settled(self, queue: str) -> JobRecord | None:
        return self._read_one(_SELECT_LATEST_SETTLED, (queue,))

    def find_claim(self, sequence: int) -> tuple[JobRecord, str] | None:
        """A job with its current claim token (the runtime's private fence)."""
        rows = self.database.query(_SELECT_CLAIM.text, (sequence,))
        if not rows:
            return None
        return CLAIM.job(rows[0]), CLAIM.value(rows[0], "claim_token")

    def read_settled(
        self, after_sequence: int, limit: int, excluding_lane: str | None
    ) -> list[JobRecord]:
        """Settled jobs after ``after_sequence`` in enqueue order, up to the
        first unsettled one; without ``excluding_lane``'s jobs, if given."""
        if excluding_lane is None:
            rows = self.database.query(_READ_SETTLED.text, (after_sequence, limit))
        else:
            rows = self.database.query(_READ_SETTLED_OUTSIDE_LANE.text,
                                       (after_sequence, limit, excluding_lane))
        return [JOB.job(row) for row in rows]

    def lane_has_pending(self, lane: str) -> bool:
        return bool(self._value(_LANE_HAS_PENDING, (lane,), "more"))

    def has_pending_work(self, now: int) -> bool:
        return bool(self._value(_HAS_PENDING_WORK, (now,), "pending"))

    def next_due(self) -> int | None:
        """The earliest due time of a job still waiting for it, if any."""
        rows = self.database.query(_NEXT_DUE.text)
        return int(rows[0][0]) if rows else None

    def next_work(self, now: int) -> Row:
        """(pending, the earliest due time of a waiting job or None, now), one read."""
        return self.database.query(_NEXT_WORK.text, (now,))[0][:3]

    def next_waits(self, now: int) -> tuple[int | None, int | None]:
        """In one read: the earliest due time of a job still waiting for it
        (``next_due``), and when a rate limit next lets a job it holds at
        ``now`` start (the earliest release of a rate-held queue or lane with
        a ready job); each None when there is none."""
        next_due, released_at = self.database.query(_NEXT_WAITS.text, (now,))[0][:2]
        return (None if next_due is None else int(next_due),
                None if released_at is None else int(released_at))

    def promote_due(self, now: int, limit: int) -> set[str]:
        """Move up to ``limit`` jobs whose time has come into the ready set
        (their lanes join their wide queues' lines, in sequence order); the
        queues they are in."""
        def promote() -> set[str]:
            rows = self.database.mutate(_PROMOTE_DUE.text, (now, limit))
            self._join(sorted(int(row[1]) for row in rows))
            return {str(row[0]) for row in rows}

        return self.database.atomic(promote) if self._taking_turns() else promote()

    def status_groups(self) -> list[Row]:
        """(queue, state, outcome, count) of every group of jobs (a full scan)."""
        return self.database.query(_STATUS.text)

    def backlog(self) -> list[Row]:
        """(queue, ready, delayed, running, ready_since) of every queue with
        unsettled jobs, from the indexes of unsettled jobs."""
        return self.database.query(_BACKLOG.text)

    def queue_counts(self, queue: str) -> Row:
        """(queued, running, delayed, paused (0 or 1), then settled per outcome
        in OUTCOMES order)."""
        return self.database.query(_QUEUE_STATUS.text, (queue,))[0]

    def dead_letter_count(self, cap: int) -> int:
        """How many dead letters the owner holds (every queue's), up to about
        ``cap``: at most ``cap`` filed ones are counted, plus the unfiled."""
        return int(self._value(_DEAD_LETTER_COUNT, (cap,), "dead_letters"))

    def schema_version(self) -> int:
        """The schema version the database holds (a storage read)."""
        return int(self._value(_SCHEMA_VERSION, (), "value"))

    def _value(self, statement: sql.Statement, params: Sequence[Any], name: str) -> Any:
        columns: Columns | None = statement.columns
        assert columns is not None
        return columns.value(self.database.query(statement.text, params)[0], name)

    # ------------------------------------------------------ history over time

    def history(self, queue: str, since: int, until: int, bucket_ms: int) -> list[Row] | None:
        """The queue's history rows in [since, until) summed per ``bucket_ms``:
        (bucket, enqueued, started, completed, failed, cancelled, retried,
        depth, oldest_age_ms), oldest first; None when the queue has no
        history row at all (tickwork has not seen it)."""
        rows = self.database.query(_HISTORY.text, (bucket_ms, queue, since, until))
        if rows or self._value(_HISTORY_KNOWN, (queue,), "known"):
            return rows
        return None

    def add_history(self, rows: Sequence[HistoryRow]) -> None:
        """Add a tally's rows (in (queue, minute) order) to the stored ones:
        one statement."""
        if rows:
            self.database.mutate(_ADD_HISTORY_COUNTS.text, (history_rows_json(rows),))

    def sample_history(self, now: int, since: int, queues: Sequence[str]) -> None:
        """Write each queue's depth (up to DEPTH_CAP + 1) and its head job's
        wait into the row of ``now``'s minute: the queues with waiting jobs
        (at most MAX_SAMPLED_QUEUES), ``queues``, and those sampled non-empty
        since ``since`` (0 once emptied). One statement, bounded whatever
        the backlog."""
        self.database.mutate(_SAMPLE_HISTORY.text, (
            MAX_SAMPLED_QUEUES, json.dumps(sorted(set(queues))), since, now, DEPTH_CAP + 1))

    def prune_history(self, now: int, keep_ms: int, limit: int) -> int:
        """Delete up to ``limit`` of the oldest history rows older than
        ``keep_ms`` before ``now``; how many went."""
        return len(self.database.mutate(_PRUNE_HISTORY.text, (now, keep_ms, limit)))

    # ---------------------------------------------------------------- ingest

    def insert(self, job: ValidJob, now: int) -> bool:
        """Insert a new queued job; False when the job_id already exists."""
        if job.run_at is None and job.delay_ms is None and job.retry_json is None:
            statement, counted = _INSERT_JOB_AT_ONCE, _INSERT_JOB_AT_ONCE_COUNTED
            params: tuple[Any, ...] = (job.job_id, job.queue, job.lane, job.priority,
                                       job.payload_json, job.max_recoveries, now)
        else:
            statement, counted = _INSERT_JOB, _INSERT_JOB_COUNTED
            params = (job.job_id, job.queue, job.lane, job.priority, job.payload_json,
                      job.max_recoveries, job.run_at, job.delay_ms, job.retry_json, now)
        if not self._taking_turns():
            return self._batching.insert(lambda: self._changed(statement, counted, params))

        def insert_and_join() -> bool:
            rows = self.database.mutate(statement.text, params)
            if rows:
                self._join((int(rows[0][0]),))
            return bool(rows)

        return self._batching.insert(lambda: self.database.atomic(insert_and_join))

    def list_new_rows(self) -> None:
        """Put every unlisted row into the indexes of unsettled jobs, and note
        the sequence listed through, in one transaction."""
        self._batching.list_rows()

    def insert_many(
        self, jobs: Sequence[ValidJob], now: int, inserted: Callable[[ValidJob], None]
    ) -> list[bool]:
        """Insert the new jobs of ``jobs``, in order, in one transaction:
        per job True (inserted; ``inserted(job)`` is called inside the
        transaction) or False (an identical replay, of a stored job or of an
        earlier job of the list); IngestConflict rolls all of them back."""

        def insert_all() -> list[bool]:
            # In list order, so the first job that conflicts is the one named
            # (and nothing after it is even tried).
            known: dict[str, ValidJob] = {}
            flags: list[bool] = []
            for job in jobs:
                earlier = known.get(job.job_id)
                if earlier is None:
                    if self.insert(job, now):
                        known[job.job_id] = job
                        inserted(job)
                        flags.append(True)
                        continue
                    earlier = self.find_cargo(job.job_id)
                    assert earlier is not None  # the insert conflicted on it, in this transaction
                    known[job.job_id] = earlier
                differences = cargo_differences(job, earlier)
                if differences:
                    raise IngestConflict(job.job_id, differences)
                flags.append(False)
            return flags

        return self.database.atomic(insert_all)

    # ---------------------------------------------------------------- claims

    def _spends(self) -> bool:
        """Whether a claim must spend a start (a bucket is stored)."""
        buckets = self._buckets
        if buckets is None:
            buckets = self._buckets = bool(self.database.query(_HAS_BUCKETS.text)[0][0])
        return buckets

    def _spent(self, job: JobRecord | None, now: int) -> JobRecord | None:
        """Spend a start of the claimed ``job``'s queue's and lane's buckets
        (in the claim's transaction); ``job``."""
        if job is not None:
            self.database.mutate(_SPEND_RATE.text, (now, job.queue, job.lane))
        return job

    def _taking_turns(self) -> bool:
        """Whether any queue is wide: then claims take turns, the store keeps
        the lines, it lists and files every row at once (see
        ``IndexBatching.one_at_a_time``), and the index of a lane's jobs the
        claims read exists (``sql.LANE_ORDER_INDEX``); it is dropped
        otherwise, so a serial owner writes no entry of it."""
        wide = self._wide
        if wide is None:
            wide = self._wide = bool(self.database.query(_ANY_WIDE_QUEUE.text)[0][0])
            self.database.execute(_LANE_ORDER_INDEX.text if wide else _NO_LANE_ORDER_INDEX.text)
            self._batching.one_at_a_time(wide)
        return wide

    def _join(self, sequences: Sequence[int]) -> None:
        """The lanes of the jobs at ``sequences`` (in sequence order) that are
        ready in a wide queue join its line, if not in it (in the caller's
        transaction; only while any queue is wide)."""
        if sequences and self._taking_turns():
            self.database.mutate(_JOIN_LINE.text, (json.dumps(list(sequences)),))

    def _joined(self, job: JobRecord | None) -> JobRecord | None:
        if job is not None:
            self._join((job.sequence,))
        return job

    def _ready_again(self, write: Callable[[], JobRecord | None]) -> JobRecord | None:
        """Run ``write`` (a change that makes its job ready again: the job,
        or None) and let the job's lane join its line, in one transaction."""
        if not self._taking_turns():
            return write()
        return self.database.atomic(lambda: self._joined(write()))

    def _took_turn(self, job: JobRecord) -> None:
        """After a claim of ``job`` (while any queue is wide), in its
        transaction: its lane leaves the line of a wide queue, with the
        lanes ahead of it that have no ready job, and goes to the back if
        it still has one."""
        self.database.mutate(_LEAVE_LINE.text, (job.queue, job.lane))
        self.database.mutate(_BACK_OF_LINE.text, (job.queue, job.lane))

    def _claimed(self, claim: Callable[[Partition], JobRecord | None], partition: Partition,
                 now: int) -> JobRecord | None:
        """Run ``claim`` on ``partition`` (its statements that take turns,
        while any queue is wide), with what a claim does in its transaction:
        the start spent, while any bucket is stored; the line kept, while
        any queue is wide (an owner with neither runs the claim alone)."""
        turns, spends = self._taking_turns(), self._spends()
        chosen = partition.taking_turns if turns and partition.taking_turns else partition

        def claim_in_transaction() -> JobRecord | None:
            job = claim(chosen)
            if job is not None:
                if spends:
                    self._spent(job, now)
                if turns:
                    self._took_turn(job)
            return job

        return self.database.atomic(claim_in_transaction)

    def claim_next(self, partition: Partition, token: str, now: int) -> JobRecord | None:
        if not self._spends() and not self._taking_turns():
            return self._write_one(partition.claim_next, (*partition.bind, token, now))
        return self._claimed(lambda chosen: self._write_one(
            chosen.claim_next, (*chosen.bind, token, now)), partition, now)

    def claim_next_if_clear(
        self, partition: Partition, token: str, now: int, exclude_tokens: Sequence[str]
    ) -> JobRecord | None:
        """Claim like claim_next, but only when probe() would report nothing."""
        if not self._spends() and not self._taking_turns():  # the claim alone
            return self._claim_if_clear(partition, token, now, exclude_tokens)
        return self._claimed(lambda chosen: self._claim_if_clear(
            chosen, token, now, exclude_tokens), partition, now)

    def _claim_if_clear(
        self, partition: Partition, token: str, now: int, exclude_tokens: Sequence[str]
    ) -> JobRecord | None:
        params: tuple[str | int, ...] = (*partition.bind, token, now, *exclude_tokens)
        counted, count = partition.claim_next_if_clear_counted, self._count
        if counted is None or count is None:
            text = self._excluding(partition.claim_next_if_clear, len(exclude_tokens))
            rows = self.database.mutate(text, params)
            return decode_job(rows[0]) if rows else None
        if not count(self._excluding(counted, len(exclude_tokens)), params):
            return None
        # Found unless another writer moved it in between (the owner-local
        # contract rules that out; the claim would then be a suspect).
        return self._read_one(_CLAIMED_BY_TOKEN, (token,))

    def probe(
        self, partition: Partition, exclude_tokens: Sequence[str], after: tuple[int, int]
    ) -> tuple[int | None, bool]:
        """(the partition's running claim to probe: the first after ``after``
        in (started_at, sequence) order, wrapping, skipping ``exclude_tokens``;
        whether any cancelled job of the partition is still queued)"""
        statement = partition.tick_probe
        text = self._excluding(statement, len(exclude_tokens))
        row = self.database.query(text, (*partition.bind, *after, *exclude_tokens))[0]
        columns = statement.columns
        assert columns is not None
        return columns.value(row, "suspect"), bool(columns.value(row, "cancelled_waiting"))

    # ----------------------------------------------------------- settlements

    def settle_claim(
        self, sequence: int, token: str, settlement: Settlement, now: int, *, cancelled: bool,
        file: bool = True,
    ) -> bool:
        """Settle the claim; False when it is no longer the job's current claim,
        or its cancellation is not (``cancelled=False``: is) recorded.
        ``file=False`` lets the row's history entries wait for a batch, if
        the store's ``IndexBatching`` makes batches (then a later settlement
        writes them, in the caller's transaction)."""
        params = (settlement.outcome, settlement.failure_reason, settlement.error_json, now,
                  sequence, token)
        statements = self._batching.settlements(may_defer=not file)
        if cancelled:
            settled = self._changed(statements.cancelled_claim,
                                    statements.cancelled_claim_counted, params)
        else:
            settled = self._changed(statements.claim, statements.claim_counted, params)
        if settled:
            self._batching.settled(statements)
        return settled

    def settle_claim_record(
        self, sequence: int, token: str, settlement: Settlement, now: int, *, cancelled: bool,
        file: bool = True,
    ) -> JobRecord | None:
        """settle_claim, returning the settled job (for the projector)."""
        statements = self._batching.settlements(may_defer=not file)
        statement = statements.cancelled_claim_record if cancelled else statements.claim_record
        params = (settlement.outcome, settlement.failure_reason, settlement.error_json, now,
                  sequence, token)
        job = self._write_one(statement, params)
        if job is not None:
            self._batching.settled(statements)
        return job

    def file_settled(self) -> None:
        """File every settled row left unfiled: into the history indexes, out
        of the indexes of unsettled jobs, in one statement."""
        self._batching.file_rows()

    def settle_next_cancelled(self, partition: Partition, now: int) -> JobRecord | None:
        return self._write_one(partition.settle_next_cancelled, (*partition.bind, now))

    def settle_recovered_claim(
        self, sequence: int, token: str, settlement: Settlement, now: int
    ) -> JobRecord | None:
        """Settle a claim whose execution is gone, releasing its token."""
        params = (settlement.outcome, settlement.failure_reason, settlement.error_json, now,
                  sequence, token)
        return self._write_one(_SETTLE_RECOVERED_CLAIM, params)

    def requeue_claim(self, sequence: int, token: str) -> JobRecord | None:
        return self._ready_again(lambda: self._write_one(_REQUEUE_CLAIM, (sequence, token)))

    def release_claim(self, sequence: int, token: str) -> JobRecord | None:
        """Put back a claim taken ahead that never started (no recovery counted)."""
        return self._ready_again(lambda: self._write_one(_RELEASE_CLAIM, (sequence, token)))

    def retry_claim(
        self, sequence: int, token: str, settlement: Settlement, delay_ms: int, now: int
    ) -> JobRecord | None:
        """Put the claim's job back to queued as its next attempt, due
        ``delay_ms`` after ``now``; None when it is no longer the job's claim
        or a cancellation is recorded."""
        return self._write_one(_RETRY_CLAIM, (
            now, delay_ms, settlement.error_json, settlement.outcome,
            settlement.failure_reason, settlement.error_line, sequence, token))

    # ----------------------------------------------- dead letters, redrive

    def dead_letters(self, queue: str, before: tuple[int, int], limit: int) -> list[JobRecord]:
        rows = self.database.query(_DEAD_LETTERS.text, (queue, *before, limit))
        return [JOB.job(row) for row in rows]

    def list_jobs(self, listing: JobListing, after: tuple[int, int],
                  limit: int) -> list[JobRecord]:
        statement = _LIST_JOBS[listing.shape]
        rows = self.database.query(statement.text,
                                   sql.listing_values(statement, listing, after, limit))
        return [JOB.job(row) for row in rows]

    def jobs_by_id_prefix(self, prefix: str, after: str | None,
                          limit: int) -> list[JobRecord]:
        """Up to ``limit`` jobs whose id starts with ``prefix``, in id order,
        past the id ``after`` when given (one range of the job_id index)."""
        low, high = sql.id_prefix_range(prefix, MAX_ID_LENGTH)
        statement = _JOBS_BY_ID_PREFIX_FIRST if after is None else _JOBS_BY_ID_PREFIX_NEXT
        rows = self.database.query(statement.text, (low if after is None else after, high,
                                                    limit))
        return [JOB.job(row) for row in rows]

    def redrive_applied(self, job_id: str, redrive_id: str) -> bool:
        return bool(self._value(_REDRIVE_APPLIED, (job_id, redrive_id), "applied"))

    def redrive(self, job_id: str, redrive_id: str, now: int) -> JobRecord | None:
        """Queue a dead letter again as a new attempt chain and remember the
        redrive id, in one transaction; None when it no longer applies."""

        def redrive_and_note() -> JobRecord | None:
            job = self._write_one(_REDRIVE_JOB, (redrive_id, job_id))
            if job is not None:
                self.database.mutate(_NOTE_REDRIVE.text, (redrive_id, now, job_id))
            return self._joined(job)

        return self.database.atomic(redrive_and_note)

    # ------------------------------------------------- cancel, fail, purge

    def record_cancellation(
        self, job_id: str, cancellation_id: str, only_if_queued: bool
    ) -> str | None:
        """Write the job's first cancellation; its queue, or None when it no
        longer applies (nothing written)."""
        statement = _RECORD_CANCELLATION_IF_QUEUED if only_if_queued else _RECORD_CANCELLATION
        rows = self.database.mutate(statement.text, (cancellation_id, job_id))
        return str(rows[0][0]) if rows else None

    def fail_lane(self, lane: str, reason: str, limit: int, now: int) -> list[JobRecord]:
        """Settle up to ``limit`` of the lane's jobs as failed, running ones
        chosen first; the failed jobs, in no particular order (RETURNING's)."""
        rows = self.database.mutate(_FAIL_LANE.text, (lane, reason, limit, now))
        return [JOB.job(row) for row in rows]

    def purge_queue(self, queue: str) -> int:
        return len(self.database.mutate(_PURGE_QUEUE.text, (queue,)))

    def pause_queue(self, queue: str, now: int) -> bool:
        return bool(self.database.mutate(_PAUSE_QUEUE.text, (queue, now)))

    def resume_queue(self, queue: str) -> bool:
        return bool(self.database.mutate(_RESUME_QUEUE.text, (queue,)))

    def queue_paused(self, queue: str) -> bool:
        return bool(self._value(_QUEUE_PAUSED, (queue,), "paused"))

    # ------------------------------------------------------------ schedules

    def find_schedule(self, name: str) -> StoredSchedule | None:
        rows = self.database.query(_SELECT_SCHEDULE.text, (name,))
        return schedule_row(rows[0]) if rows else None

    def list_schedules(self) -> list[StoredSchedule]:
        return [schedule_row(row) for row in self.database.query(_LIST_SCHEDULES.text)]

    def create_schedule(self, schedule: ValidSchedule, next_at: int, now: int) -> bool:
        return bool(self.database.mutate(_CREATE_SCHEDULE.text,
                                         (schedule.name, schedule.spec_json, next_at, now)))

    def replace_schedule(self, schedule: ValidSchedule, old_spec_json: str, next_at: int,
                         now: int) -> bool:
        return bool(self.database.mutate(
            _REPLACE_SCHEDULE.text,
            (schedule.spec_json, next_at, now, schedule.name, old_spec_json)))

    def pause_schedule(self, name: str, now: int) -> bool:
        return bool(self.database.mutate(_PAUSE_SCHEDULE.text, (now, name)))

    def resume_schedule(self, name: str, spec_json: str, next_at: int, now: int) -> bool:
        return bool(self.database.mutate(_RESUME_SCHEDULE.text,
                                         (next_at, now, name, spec_json)))

    def delete_schedule(self, name: str) -> bool:
        return bool(self.database.mutate(_DELETE_SCHEDULE.text, (name,)))

    def due_schedules(self, now: int) -> list[StoredSchedule]:
        return [schedule_row(row) for row in self.database.query(_DUE_SCHEDULES.text, (now,))]

    def next_slot(self) -> int | None:
        """When the next slot of a running schedule comes, if any."""
        rows = self.database.query(_NEXT_SLOT.text)
        return int(rows[0][0]) if rows else None

    def fire_slots(self, schedule: ValidSchedule, slots: Sequence[int], next_at: int,
                   now: int) -> list[ValidJob]:
        """The jobs of ``slots`` and the schedule's advance, in one
        transaction; the jobs created, in slot order."""

        def fire() -> list[ValidJob]:
            created, sequences = [], []
            for slot in slots:
                job = schedule.slot_job(slot)
                rows = self.database.mutate(_FIRE_SLOT.text, sql.fire_slot_values(
                    job, now, schedule))
                if rows:
                    created.append(job)
                    sequences.append(int(rows[0][1]))
            self.database.mutate(_ADVANCE_SCHEDULE.text,
                                 (next_at, schedule.name, schedule.spec_json))
            self._join(sequences)
            self._batching.inserted(len(created))
            return created

        return self.database.atomic(fire)

    # ------------------------------------------------------------ retention

    def retention_policies(self) -> list[RetentionPolicy]:
        """Every stored policy, by queue (the scope's default with queue None)."""
        return [retention_row(row) for row in self.database.query(_LIST_RETENTION.text)]

    def put_retention(self, policy: RetentionPolicy, now: int) -> bool:
        """Store ``policy``; False (nothing written) when the same is stored."""
        return bool(self.database.mutate(_PUT_RETENTION.text, (
            SCOPE_KEY if policy.queue is None else policy.queue, policy.keep_completed_ms,
            policy.keep_failed_ms, now)))

    def delete_retention(self, queue: str | None) -> bool:
        """Remove ``queue``'s policy (None: the scope's default); whether there was one."""
        return bool(self.database.mutate(_DELETE_RETENTION.text,
                                         (SCOPE_KEY if queue is None else queue,)))

    # --------------------------------------------------- concurrency limits

    def limits(self) -> list[ConcurrencyLimit]:
        """Every stored limit: queues first, then lanes, each by key."""
        return in_order(limit_row(row) for row in self.database.query(_LIST_LIMITS.text))

    def put_limit(self, limit: ConcurrencyLimit, now: int) -> bool:
        """Store ``limit`` (replacing its kind and key's); False, nothing
        written, when the same ``max_running`` is stored already. The next
        claim obeys it: every claim reads the limits in its own statement.
        A queue that becomes wide gets its line (every lane with a ready
        job, oldest first); one that stops being wide loses it; in the same
        transaction (and the first wide queue, the index of a lane's jobs
        its claims read: ``sql.LANE_ORDER_INDEX``)."""
        values = (limit.kind, limit.key, limit.max_running, now)
        if limit.kind != "queue":
            return bool(self.database.mutate(_PUT_LIMIT.text, values))

        def put() -> bool:
            self.database.mutate(_WIDEN_LINE.text, (limit.key, limit.max_running))
            changed = bool(self.database.mutate(_PUT_LIMIT.text, values))
            self.database.mutate(_DROP_LINE.text, (limit.key,))
            if limit.max_running > 1:
                self.database.execute(_LANE_ORDER_INDEX.text)
            return changed

        changed = self.database.atomic(put)
        if limit.max_running > 1:
            self._wide = True
            self._batching.one_at_a_time(True)
        else:  # this queue is not wide: whether another is is read again
            self._wide = None  # (and the index of a lane's jobs dropped if none is)
        return changed

    def delete_limit(self, kind: LimitKind, key: str) -> bool:
        """Remove the limit of ``kind`` on ``key``; whether there was one (a
        queue's line goes with it, in the same transaction)."""
        if kind != "queue":
            return bool(self.database.mutate(_DELETE_LIMIT.text, (kind, key)))

        def delete() -> bool:
            deleted = bool(self.database.mutate(_DELETE_LIMIT.text, (kind, key)))
            self.database.mutate(_DROP_LINE.text, (key,))
            return deleted

        deleted = self.database.atomic(delete)
        self._wide = None  # the last wide queue may be gone: the next claim reads it
        return deleted

    def running_jobs(self, kind: LimitKind, key: str, limit: int) -> list[str]:
        """The ids of up to ``limit`` running jobs of the queue or lane
        ``key``, oldest start first."""
        return [str(row[0]) for row in self.database.query(_RUNNING_IN[kind].text, (key, limit))]

    # ---------------------------------------------------------- rate limits

    def rate_limits(self, now: int) -> list[RateLimit]:
        """Every key with a bucket or a hold in force at ``now``: queues
        first, then lanes, each by key, with the bucket's next start (ms,
        rounded up) and the hold (None when none is in force)."""
        return rate_in_order(rate_limit_row(row) for row in
                             self.database.query(_LIST_RATE_LIMITS.text, (now,)))

    def put_rate_limit(self, limit: RateLimit, now: int) -> bool:
        """Store the bucket of ``limit`` on its kind and key, keeping the
        key's hold (a new bucket starts full, a changed one keeps the time
        of its next allowed start); False, nothing written, when the same
        three are stored already. The next claim obeys it."""
        changed = bool(self.database.mutate(_PUT_RATE_LIMIT.text, (
            limit.kind, limit.key, limit.starts, limit.period_ms, limit.burst, now)))
        self._buckets = True  # stored now, or already (the claims spend from here on)
        return changed

    def delete_rate_limit(self, kind: LimitKind, key: str, now: int) -> bool:
        """Remove the bucket and the hold of ``kind`` on ``key``; whether
        either was there (a hold that has passed by ``now`` does not count)."""
        rows = self.database.mutate(_DELETE_RATE_LIMIT.text, (kind, key, now))
        self._buckets = None  # the last one may be gone: the next claim reads it
        return bool(rows and rows[0][0])

    def put_back_rate_limited(self, sequence: int, token: str, kind: LimitKind, key: str,
                              until: int, now: int) -> JobRecord | None:
        """Hold ``kind`` on ``key`` until ``until`` (a later hold stays) and
        put the claim's job back to queued without using an attempt, in one
        transaction. The put-back is fenced like ``retry_claim``; the hold
        is written either way. The job as put back, or None."""

        def hold_and_put_back() -> JobRecord | None:
            self.database.mutate(_HOLD_RATE_LIMITED.text, (kind, key, until, now))
            return self._joined(self._write_one(_PUT_BACK_RATE_LIMITED, (sequence, token)))

        return self.database.atomic(hold_and_put_back)

    def settled_queues(self) -> list[str]:
        """Every queue with filed settled jobs, by name."""
        return [str(row[0]) for row in self.database.query(_SETTLED_QUEUES.text)]

    def prune_settled(self, queue: str, completed_before: int | None,
                      failed_before: int | None, limit: int) -> int:
        """Delete up to ``limit`` of ``queue``'s filed settled jobs past their
        cutoff (see ``PruneSettled``) and their redrive ids, in one
        transaction; how many jobs were deleted."""

        def prune() -> int:
            ids = [row[0] for row in self.database.query(
                _PRUNABLE.text, (queue, completed_before, failed_before, limit))]
            if not ids:
                return 0
            job_ids = json.dumps(ids)
            self.database.mutate(_PRUNE_REDRIVES.text, (job_ids, completed_before, failed_before))
            return len(self.database.mutate(_PRUNE_JOBS.text,
                                             (job_ids, completed_before, failed_before)))

        return self.database.atomic(prune)

    def storage_usage(self) -> StorageReport:
        """The database's size, when it can say (``SizedDatabase``), and each
        table's row count (one statement reading every row)."""
        counts = self.database.query(_STORAGE_ROWS.text)[0]
        size = self.database.size_bytes() if isinstance(self.database, SizedDatabase) else None
        return StorageReport(size, {table: int(count) for table, count in
                                    zip(sql.STORAGE_TABLES, counts, strict=True)})
