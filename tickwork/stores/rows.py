"""Result rows, decoded by column name, for every store and dialect.

Each statement declares the columns it returns as a ``Columns``; a store
decodes a row through that declaration (``columns.job(row)``,
``columns.value(row, "claim_token")``), never by a bare position, so a column
added to a statement cannot silently shift what another column means. D1
batch results, which arrive as objects keyed by name, are read through the
same names (``Columns.names``).

Stores hand rows over as plain Python values: ints as int, SQL NULL as None
(``tickwork._pyodide`` normalises the JS side).
"""

from __future__ import annotations

import json
import json.scanner
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any, Final

from tickwork.model.failures import summary_from_json
from tickwork.model.jobs import (
    JobRecord,
    Recovery,
    ValidJob,
    history_from_json,
    retry_from_json,
)
from tickwork.model.limits import ConcurrencyLimit, check_limit_kind
from tickwork.model.rate_limits import RateLimit
from tickwork.model.retention import SCOPE_KEY, RetentionPolicy
from tickwork.model.schedules import StoredSchedule

#: The columns of a job, in ``JobRecord`` field order (payload_json decodes
#: to ``payload``, max_recoveries to ``recovery``).
JOB_COLUMNS: Final = (
    "job_id", "queue", "lane", "priority", "payload_json", "max_recoveries", "state",
    "outcome", "failure_reason", "sequence", "recoveries", "enqueued_at", "started_at",
    "settled_at", "cancellation_id", "run_at", "delay_ms", "due_at",
    "retry_json", "attempt", "history_json", "error_json",
)

#: A job's identity and cargo, in ``ValidJob`` field order (replay checks).
CARGO_COLUMNS: Final = ("job_id", "queue", "lane", "priority", "payload_json",
                        "max_recoveries", "run_at", "delay_ms", "retry_json")

#: ``JOB_COLUMNS`` as a select list.
JOB_SELECT: Final = ", ".join(JOB_COLUMNS)

_decoder = json.JSONDecoder()
_scan_json: Any = json.scanner.make_scanner(_decoder)  # type: ignore[arg-type]


def _decode_json(text: str) -> Any:
    """``json.loads(text)``, at a third of its cost for the compact JSON the
    stores hold: the decoder's C scanner reads the value at once, and only
    text it does not take whole (leading or trailing whitespace, or not
    JSON) goes through the full decoder, which also raises its errors."""
    try:
        value, end = _scan_json(text, 0)
    except StopIteration:
        return _decoder.decode(text)
    if end != len(text):
        return _decoder.decode(text)
    return value


def select_list(columns: Sequence[str], alias: str) -> str:
    """``columns`` as a select list qualified by ``alias`` (``alias.job_id, ...``)."""
    return ", ".join(f"{alias}.{name}" for name in columns)


#: What JobRecord(...) runs (a NamedTuple has no __new__ of its own to
#: skip), called directly: every claim builds a record.
_record = tuple.__new__


def _job(values: Sequence[Any]) -> JobRecord:
    """A JobRecord from the job columns' values, in ``JOB_COLUMNS`` order."""
    max_recoveries, retry_json, history_json = values[5], values[18], values[20]
    return _record(JobRecord, (
        values[0], values[1], values[2], values[3], _decode_json(values[4]),
        None if max_recoveries is None else Recovery(max_recoveries),
        # state and outcome as stored (the table's CHECKs hold them to
        # JobState and Outcome; no typing.cast call per decoded row).
        values[6], values[7],
        values[8], values[9], values[10], values[11], values[12], values[13], values[14],
        values[15], values[16], values[17],
        None if retry_json is None else retry_from_json(retry_json), values[19],
        () if history_json is None else history_from_json(history_json),
        None if values[21] is None else summary_from_json(values[21]),
    ))


class Columns:
    """The result columns of one statement, by name."""

    __slots__ = ("_job_values", "_prefix", "index", "names")

    def __init__(self, *names: str) -> None:
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate result column in {names}")
        self.names = names
        self.index = {name: position for position, name in enumerate(names)}
        self._job_values: Callable[[Sequence[Any]], Sequence[Any]] | None = None
        self._prefix = False
        if all(name in self.index for name in JOB_COLUMNS):
            positions = [self.index[name] for name in JOB_COLUMNS]
            # The common layout, job columns first, needs no reordering.
            self._prefix = positions == list(range(len(JOB_COLUMNS)))
            self._job_values = itemgetter(*positions)

    def job(self, row: Sequence[Any]) -> JobRecord:
        """The job in ``row``."""
        if self._prefix:
            return _job(row)
        values = self._job_values
        if values is None:
            raise ValueError(f"these columns hold no job: {self.names}")
        return _job(values(row))

    def value(self, row: Sequence[Any], name: str) -> Any:
        """The value of column ``name`` in ``row``."""
        return row[self.index[name]]

    def cargo(self, row: Sequence[Any]) -> ValidJob:
        """The identity and cargo in ``row`` (columns ``CARGO_COLUMNS``), as stored."""
        index = self.index
        return ValidJob(*(row[index[name]] for name in CARGO_COLUMNS))

    def __repr__(self) -> str:
        return f"Columns{self.names}"


#: The rows of a statement that returns one job.
JOB: Final = Columns(*JOB_COLUMNS)
#: A job's identity and cargo.
CARGO: Final = Columns(*CARGO_COLUMNS)
#: A job with its current claim token, and whether that claim is live.
CLAIM: Final = Columns(*JOB_COLUMNS, "claim_token", "lease_live")
#: Only the sequence (a write that landed).
SEQUENCE: Final = Columns("sequence")


#: The job in a row of ``JOB`` columns (``JOB_COLUMNS`` first): ``_job``
#: itself, so a store's hot read makes one call, not two.
decode_job: Final[Callable[[Sequence[Any]], JobRecord]] = _job


def schedule_row(row: Sequence[Any]) -> StoredSchedule:
    """A schedule row (name, spec_json, next_at, paused, created_at,
    updated_at first) as stored, on every store."""
    return StoredSchedule(str(row[0]), str(row[1]), int(row[2]), bool(row[3]), int(row[4]),
                          int(row[5]))


def retention_row(row: Sequence[Any]) -> RetentionPolicy:
    """A policy row (queue, keep_completed_ms, keep_failed_ms, updated_at),
    as stored on every store: queue '' is the scope's default (None here)."""
    queue = str(row[0])
    return RetentionPolicy(None if queue == SCOPE_KEY else queue,
                           None if row[1] is None else int(row[1]),
                           None if row[2] is None else int(row[2]), int(row[3]))


def limit_row(row: Sequence[Any]) -> ConcurrencyLimit:
    """A limit row (kind, key, max_running, updated_at), as stored on every store."""
    return ConcurrencyLimit(check_limit_kind(row[0]), str(row[1]), int(row[2]), int(row[3]))


def rate_limit_row(row: Sequence[Any]) -> RateLimit:
    """A rate row (kind, key, starts, period_ms, burst, next_start_at,
    held_until, updated_at), as every store lists it: the bucket's three
    and its next start None for a key that only has a hold."""
    def optional(value: Any) -> int | None:
        return None if value is None else int(value)

    starts = optional(row[2])
    return RateLimit(check_limit_kind(row[0]), str(row[1]), starts, optional(row[3]),
                     optional(row[4]), None if starts is None else int(row[5]),
                     optional(row[6]), int(row[7]))
