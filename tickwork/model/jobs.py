"""Jobs as callers hand them in, and as the engine stores and reports them.

Validation lives here so every runtime (owner-local, D1, PostgreSQL) accepts
exactly the same jobs and stores exactly the same canonical cargo.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, NamedTuple, TypeAlias

from tickwork.model.errors import IngestConflict, InvalidArgument, InvalidJob
from tickwork.model.failures import ErrorSummary

#: Largest integer a Durable Object (JS double) stores exactly.
MAX_SAFE_INTEGER = 2**53 - 1
MAX_ID_LENGTH = 256
MAX_LANE_LENGTH = 512
MAX_REASON_LENGTH = 256
#: ingest_many takes at most this many jobs per call (one transaction or batch).
MAX_INGEST_BATCH = 100
#: Longest delay a job may ask for (about 2,854 centuries): far beyond any use,
#: and small enough that "now + delay" stays an integer JS stores exactly.
MAX_DELAY_MS = 2**53 // 1000
#: Most attempts a retry policy may allow (each one a claim and an execution).
MAX_ATTEMPTS = 1000
#: Largest factor by which a retry policy's backoff may grow per attempt.
MAX_BACKOFF_FACTOR = 100.0
#: How many earlier attempts a job's history keeps (the oldest are dropped).
MAX_HISTORY = 20
#: The earliest ``run_at``: 2001-01-01T00:00:00Z in epoch milliseconds. An
#: earlier value is almost always seconds where milliseconds are meant
#: (``int(time.time())``), which would be a date in January 1970: the job
#: would run at once instead of when it was asked to.
MIN_RUN_AT_MS = 978_307_200_000

#: A run_at from ``MIN_RUN_AT_MS // 1000`` (2001 in seconds) up to this one
#: (10**11 s is the year 5138) is refused as seconds; from here up to
#: MIN_RUN_AT_MS it reads as milliseconds of 1973-2000, refused as too early.
_SECONDS_BELOW = 10**11
_UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)

JobState: TypeAlias = Literal["queued", "running", "settled"]
Outcome: TypeAlias = Literal["completed", "failed", "cancelled", "outcome_unknown", "interrupted"]


@dataclass(frozen=True, slots=True)
class Recovery:
    """How often a job whose execution disappeared may be put back in its queue."""

    max_recoveries: int


@dataclass(frozen=True, slots=True)
class Retry:
    """Retry a failed attempt after a backoff, up to ``attempts`` attempts in all.

    Attempt ``n`` (1-based) that fails is retried after
    ``min(max_delay_ms, base_delay_ms * factor ** (n - 1))`` milliseconds,
    less up to ``jitter`` of it at random (0: exact; 1: anywhere from 0 to
    the full delay), unless its executor asked for a delay of its own
    (``Failed(retry_after_ms=...)``). An ``outcome_unknown`` attempt may have
    had its effect, so it is retried only with ``retry_unknown=True``.
    Cancelled, interrupted (crash recovery, see ``Recovery``) and lane-failed
    jobs are never retried.
    """

    attempts: int
    base_delay_ms: int = 1000
    factor: float = 2.0
    max_delay_ms: int = 3_600_000
    jitter: float = 0.0
    retry_unknown: bool = False


class Attempt(NamedTuple):
    """One earlier attempt of a job: how it ended, and when.

    ``redrive_id`` is set on the last attempt of a chain a redrive started
    over (the attempt numbers then begin again at 1). ``error`` is
    ``"Type: message"`` of the exception the attempt's executor raised, cut
    to ``MAX_ERROR_LINE`` (300) characters, or None (it did not raise, or
    the entry was written before tickwork kept errors).
    """

    attempt: int
    outcome: Outcome
    failure_reason: str | None
    started_at: int | None
    ended_at: int
    redrive_id: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True, init=False)
class Job:
    """A unit of work. ``payload`` is opaque JSON; tickwork never looks inside it.

    Only ``job_id`` and ``queue`` are required; the rest default as over
    HTTP: ``lane`` to the queue, ``priority`` to 0, ``payload`` to None.

    A job is due at once, unless it names when: ``run_at`` (epoch ms, or an
    aware ``datetime``) or ``delay_ms`` (ms, or a ``timedelta``, from the
    moment it is stored, by the store's clock: database time on D1 and
    PostgreSQL), never both; a ``datetime`` or ``timedelta`` is kept as
    whole milliseconds, rounded down. Until it is due it waits: no tick
    claims it, and it holds no queue. ``retry`` opts in to retries of failed
    attempts (see ``Retry``).

    Every field is validated here, by the rules ingest applies (ingest checks
    again: a payload may have changed since), so a bad job raises
    ``InvalidJob`` naming the field where it is built.
    """

    job_id: str
    queue: str
    lane: str
    priority: int
    payload: Any
    recovery: Recovery | None
    run_at: int | None
    delay_ms: int | None
    retry: Retry | None

    def __init__(self, job_id: str, queue: str, lane: str | None = None, priority: int = 0,
                 payload: Any = None, recovery: Recovery | None = None,
                 run_at: int | datetime | None = None,
                 delay_ms: int | timedelta | None = None,
                 retry: Retry | None = None) -> None:
        # Frozen: fields are set through object.__setattr__, then checked by
        # validate_job itself, so construction and ingest share every rule.
        setattr_ = object.__setattr__
        setattr_(self, "job_id", job_id)
        setattr_(self, "queue", queue)
        setattr_(self, "lane", queue if lane is None else lane)
        setattr_(self, "priority", priority)
        setattr_(self, "payload", payload)
        setattr_(self, "recovery", recovery)
        setattr_(self, "run_at", run_at)
        setattr_(self, "delay_ms", delay_ms)
        setattr_(self, "retry", retry)
        valid = validate_job(self)
        # A datetime or timedelta is kept as the milliseconds it stands for.
        setattr_(self, "run_at", valid.run_at)
        setattr_(self, "delay_ms", valid.delay_ms)


class JobRecord(NamedTuple):
    """A stored job as the engine reports it: an immutable snapshot.

    Timestamps are epoch milliseconds. A NamedTuple rather than a frozen
    dataclass because records are built on every claim and a tuple is built
    several times faster; fields are read by name.
    """

    job_id: str
    queue: str
    lane: str
    priority: int
    payload: Any
    recovery: Recovery | None
    state: JobState
    outcome: Outcome | None
    failure_reason: str | None
    sequence: int
    recoveries: int
    enqueued_at: int
    started_at: int | None
    settled_at: int | None
    cancellation_id: str | None = None
    #: When the job was asked to run: epoch ms, or a delay from ingest (cargo).
    run_at: int | None = None
    delay_ms: int | None = None
    #: While the job waits for its time: when it becomes due. None once it is
    #: due (or when it never waited): it is then claimable like any job.
    due_at: int | None = None
    #: The job's retry policy (cargo), if it has one.
    retry: Retry | None = None
    #: The attempt this is (1 for the first; a redrive starts again at 1).
    attempt: int = 1
    #: The attempts before this one, oldest first, at most ``MAX_HISTORY``.
    history: tuple[Attempt, ...] = ()
    #: What the latest ended attempt's executor raised (type, message,
    #: traceback, capped), or None when it did not raise. A job queued for
    #: its next attempt (a retry, a redrive) keeps the ended attempt's.
    error: ErrorSummary | None = None


@dataclass(frozen=True, slots=True)
class ValidJob:
    """A validated job with its canonical payload text, ready to store or compare."""

    job_id: str
    queue: str
    lane: str
    priority: int
    payload_json: str
    max_recoveries: int | None
    run_at: int | None = None
    delay_ms: int | None = None
    #: The retry policy as canonical JSON (``retry_json``), or None.
    retry_json: str | None = None


def check_text(field: str, value: object, max_length: int, error: type[InvalidArgument]) -> str:
    if not isinstance(value, str):
        raise error(field, f"must be a string, got {type(value).__name__}")
    if not 1 <= len(value) <= max_length:
        raise error(field, f"must be 1 to {max_length} characters, got {len(value)}")
    if not value.isascii():
        _require_utf8(field, value, error)
    return value


def _require_utf8(field: str, text: str, error: type[InvalidArgument]) -> None:
    # A lone surrogate ("\ud800") is a valid Python str but no valid UTF-8;
    # SQLite (and JS) could not store it faithfully.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as problem:
        raise error(field, f"contains a lone surrogate at index {problem.start}, "
                           "which is not valid Unicode text") from None


def check_id(field: str, value: object) -> str:
    """A job id, queue name or cancellation id passed to an operation."""
    return check_text(field, value, MAX_ID_LENGTH, InvalidArgument)


def check_cancel_args(job_id: object, cancellation_id: object, only_if_queued: object) -> None:
    """The arguments of cancel(), shared by every runtime."""
    check_id("job_id", job_id)
    check_id("cancellation_id", cancellation_id)
    if not isinstance(only_if_queued, bool):
        raise InvalidArgument("only_if_queued", "must be a bool")


def check_safe_int(field: str, value: object, error: type[InvalidArgument], minimum: int,
                   maximum: int = MAX_SAFE_INTEGER) -> int:
    """``value`` as an int within ``minimum`` and ``maximum`` (by default the
    largest integer every store keeps exactly); the refusal states the range."""
    # bool is an int subclass; True as a priority is almost certainly a bug.
    if not isinstance(value, int) or isinstance(value, bool):
        raise error(field, f"must be an integer, got {type(value).__name__}")
    if not minimum <= value <= maximum:
        raise error(field, f"must be within {minimum} and {maximum}, got {value}")
    return value


def check_reason(field: str, value: object) -> str:
    """A failure reason is a short code, stored and reported verbatim."""
    return check_text(field, value, MAX_REASON_LENGTH, InvalidArgument)


#: Canonical JSON: sorted keys, no spaces. Made once: ``json.dumps`` with
#: these options would build a new encoder on every call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                              allow_nan=False)


def _one_shot_encoder() -> Any:
    """The C encoder ``_CANONICAL.encode`` builds on every call, built once
    (a third of a small payload's encoding time went to building it), or
    None where the json C accelerator is missing. No circular-reference
    markers: a payload reaches it only after ``_reject_non_json`` walked it,
    and a cycle is refused there (it nests deeper than 200 levels)."""
    from json import encoder

    make = getattr(encoder, "c_make_encoder", None)
    if make is None:  # pragma: no cover - every CPython and Pyodide has _json
        return None
    return make(None, _CANONICAL.default, encoder.encode_basestring, None, ":", ",",
                True, False, False)


_ENCODE = _one_shot_encoder()


def canonical_json(payload: Any) -> str:
    """Serialise a payload canonically (sorted keys, no spaces) or raise InvalidJob.

    Canonical text makes replay comparison independent of dict key order.
    """
    _reject_non_json(payload)
    try:
        text = _CANONICAL.encode(payload) if _ENCODE is None else "".join(_ENCODE(payload, 0))
    except (TypeError, ValueError) as error:  # pragma: no cover - _reject_non_json is stricter
        raise InvalidJob("payload", f"is not JSON-serialisable: {error}") from None
    if not text.isascii():
        _require_utf8("payload", text, InvalidJob)
    return text


def _reject_non_json(value: Any) -> None:
    """Refuse a payload that is not plain JSON, naming where the problem is."""
    if not _plain_json(value, 0):
        _explain_non_json(value)  # raises, naming the first problem
        raise AssertionError("payload refused but not explained")  # pragma: no cover


def _plain_json(value: Any, depth: int) -> bool:
    # The check alone, the same rules as _explain_non_json: it builds no path
    # text for every item of a payload that turns out fine.
    if depth > 200:
        return False
    if value is None or isinstance(value, (str, bool, int)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return all(_plain_json(item, depth + 1) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _plain_json(item, depth + 1)
                   for key, item in value.items())
    return False


def _explain_non_json(value: Any, path: str = "payload", depth: int = 0) -> None:
    # Walk the value ourselves so the error names where the problem is, and so
    # that non-string keys (which json.dumps would silently stringify) and
    # NaN/Infinity (which are not JSON) are refused instead of altered.
    if depth > 200:
        raise InvalidJob("payload", "is nested too deeply (more than 200 levels)")
    if value is None or isinstance(value, (str, bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidJob("payload", f"{path} is {value!r}, which JSON cannot represent")
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _explain_non_json(item, f"{path}[{index}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidJob("payload", f"{path} has a non-string key {key!r}")
            _explain_non_json(item, f"{path}[{key!r}]", depth + 1)
        return
    raise InvalidJob("payload", f"{path} is a {type(value).__name__}, which is not JSON")


def check_run_at(value: object, field: str = "run_at") -> int:
    """A due time as epoch milliseconds: an int from ``MIN_RUN_AT_MS`` (2001)
    on, or an aware ``datetime`` (rounded down to the millisecond)."""
    if isinstance(value, datetime):
        if value.utcoffset() is None:
            raise InvalidJob(field, f"is a naive datetime ({value.isoformat()}); give it a "
                                    "timezone, e.g. datetime.now(timezone.utc)")
        if value < _UNIX_EPOCH + MIN_RUN_AT_MS * _ONE_MS:
            raise InvalidJob(field, f"must be 2001-01-01T00:00:00Z or later, "
                                    f"got {value.isoformat()}")
        value = (value - _UNIX_EPOCH) // _ONE_MS
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidJob(field, f"must be an integer (epoch milliseconds) or an aware "
                                f"datetime, got {type(value).__name__}")
    if MIN_RUN_AT_MS // 1000 <= value < _SECONDS_BELOW:
        raise InvalidJob(field, f"must be epoch milliseconds; {value} looks like seconds "
                                "(multiply by 1000)")
    if not MIN_RUN_AT_MS <= value <= MAX_SAFE_INTEGER:
        raise InvalidJob(field, f"must be epoch milliseconds within {MIN_RUN_AT_MS} "
                                f"(2001-01-01T00:00:00Z) and {MAX_SAFE_INTEGER}, got {value}")
    return value


def check_delay_ms(value: object, field: str = "delay_ms") -> int:
    """A delay in milliseconds: an int, or a ``timedelta`` (rounded down to
    the millisecond), 0 to ``MAX_DELAY_MS``."""
    if isinstance(value, timedelta):
        value = value // _ONE_MS
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidJob(field, f"must be an integer (milliseconds) or a timedelta, "
                                f"got {type(value).__name__}")
    return check_safe_int(field, value, InvalidJob, 0, MAX_DELAY_MS)


def validate_job(job: object) -> ValidJob:
    """Check every field of ``job``; raise InvalidJob naming the first bad one."""
    if not isinstance(job, Job):
        raise InvalidJob("job", f"must be a tickwork.Job, got {type(job).__name__}")
    job_id = check_text("job_id", job.job_id, MAX_ID_LENGTH, InvalidJob)
    queue = check_text("queue", job.queue, MAX_ID_LENGTH, InvalidJob)
    lane = check_text("lane", job.lane, MAX_LANE_LENGTH, InvalidJob)
    priority = check_safe_int("priority", job.priority, InvalidJob, -MAX_SAFE_INTEGER)
    max_recoveries: int | None = None
    if job.recovery is not None:
        if not isinstance(job.recovery, Recovery):
            got = type(job.recovery).__name__
            raise InvalidJob("recovery", f"must be a tickwork.Recovery or None, got {got}")
        max_recoveries = check_safe_int(
            "recovery.max_recoveries", job.recovery.max_recoveries, InvalidJob, 0
        )
    run_at = delay_ms = None
    if job.run_at is not None:
        run_at = check_run_at(job.run_at)
    if job.delay_ms is not None:
        if run_at is not None:
            raise InvalidJob("delay_ms", "cannot be combined with run_at: give one of the two")
        delay_ms = check_delay_ms(job.delay_ms)
    retry_json = None if job.retry is None else retry_policy_json(job.retry, "retry")
    return ValidJob(job_id, queue, lane, priority, canonical_json(job.payload), max_recoveries,
                    run_at, delay_ms, retry_json)


def _check_number(field: str, value: object, minimum: float, maximum: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise InvalidJob(field, f"must be a number, got {type(value).__name__}")
    if not (math.isfinite(value) and minimum <= value <= maximum):
        raise InvalidJob(field, f"must be within {minimum} and {maximum}, got {value!r}")
    return float(value)


def check_retry(policy: object, field: str = "retry") -> Retry:
    """A valid retry policy, or InvalidJob naming the bad field."""
    if not isinstance(policy, Retry):
        raise InvalidJob(field, f"must be a tickwork.Retry or None, got {type(policy).__name__}")
    attempts = check_safe_int(f"{field}.attempts", policy.attempts, InvalidJob, 1,
                              MAX_ATTEMPTS)
    base = check_safe_int(f"{field}.base_delay_ms", policy.base_delay_ms, InvalidJob, 0,
                          MAX_DELAY_MS)
    cap = check_safe_int(f"{field}.max_delay_ms", policy.max_delay_ms, InvalidJob, 0,
                         MAX_DELAY_MS)
    if cap < base:
        raise InvalidJob(f"{field}.max_delay_ms",
                         f"must be at least base_delay_ms ({base}), got {cap}")
    factor = _check_number(f"{field}.factor", policy.factor, 1.0, MAX_BACKOFF_FACTOR)
    jitter = _check_number(f"{field}.jitter", policy.jitter, 0.0, 1.0)
    if not isinstance(policy.retry_unknown, bool):
        raise InvalidJob(f"{field}.retry_unknown", "must be a bool")
    return Retry(attempts, base, factor, cap, jitter, policy.retry_unknown)


def retry_policy_json(policy: object, field: str = "retry") -> str:
    """A retry policy validated and written as canonical JSON (as stored)."""
    valid = check_retry(policy, field)
    return _CANONICAL.encode({
        "attempts": valid.attempts, "base_delay_ms": valid.base_delay_ms,
        "factor": valid.factor, "jitter": valid.jitter, "max_delay_ms": valid.max_delay_ms,
        "retry_unknown": valid.retry_unknown})


def retry_from_json(text: str) -> Retry:
    """The retry policy stored as ``retry_json``."""
    return retry_from_value(json.loads(text))


def retry_from_value(value: Mapping[str, Any]) -> Retry:
    """A retry policy from its stored JSON object (``retry_json`` decoded)."""
    return Retry(value["attempts"], value["base_delay_ms"], float(value["factor"]),
                 value["max_delay_ms"], float(value["jitter"]), value["retry_unknown"])


def history_from_json(text: str | None) -> tuple[Attempt, ...]:
    """A job's attempt history as stored (``history_json``, a JSON array)."""
    if text is None:
        return ()
    return tuple(
        Attempt(entry["attempt"], entry["outcome"], entry.get("reason"),
                entry.get("started_at"), entry["ended_at"], entry.get("redrive_id"),
                entry.get("error"))
        for entry in json.loads(text))


# ValidJob fields that make up a job's cargo, with the names errors report.
_CARGO_FIELDS = (
    ("queue", "queue"),
    ("lane", "lane"),
    ("priority", "priority"),
    ("payload_json", "payload"),
    ("max_recoveries", "recovery"),
    # A delay is compared as it was asked for, not as the due time it
    # resolved to: the same delay_ms replayed later is a duplicate (and
    # does not move the due time); run_at vs delay_ms always differs.
    ("run_at", "run_at"),
    ("delay_ms", "delay_ms"),
    ("retry_json", "retry"),
)


def stored_cargo(stored: ValidJob) -> ValidJob:
    """A stored job's cargo as ``validate_job`` would produce it, for replay checks.

    Jobs tickwork stores itself hold canonical payload text already; a row a
    producer's SQL inserted (D1 ``enqueue_from_select``) holds its own text,
    with its own key order, so it is made canonical here: a replay compares
    equal whatever key order either side used.
    """
    try:
        canonical = canonical_json(json.loads(stored.payload_json))
    except (ValueError, InvalidJob):  # not something ingest could have stored
        return stored
    return ValidJob(stored.job_id, stored.queue, stored.lane, stored.priority, canonical,
                    stored.max_recoveries, stored.run_at, stored.delay_ms, stored.retry_json)


def cargo_differences(new: ValidJob, stored: ValidJob) -> tuple[str, ...]:
    """Names of the fields in which a replayed job differs from the stored one."""
    return tuple(name for field, name in _CARGO_FIELDS
                 if getattr(new, field) != getattr(stored, field))


def validate_jobs(jobs: object) -> list[ValidJob]:
    """Check the argument of ingest_many: a list (or tuple) of 1 to
    ``MAX_INGEST_BATCH`` jobs, every one of them valid.

    A bad list raises InvalidArgument("jobs"); a bad job raises InvalidJob
    naming its index and field, e.g. ``jobs[3].priority`` (``jobs[3]`` when
    it is no Job at all).
    """
    if not isinstance(jobs, (list, tuple)):
        raise InvalidArgument("jobs", f"must be a list of tickwork.Job, got {type(jobs).__name__}")
    if not jobs:
        raise InvalidArgument("jobs", "must hold at least one job")
    if len(jobs) > MAX_INGEST_BATCH:
        raise InvalidArgument(
            "jobs", f"must hold at most {MAX_INGEST_BATCH} jobs per call, got {len(jobs)}")
    valid: list[ValidJob] = []
    for index, job in enumerate(jobs):
        try:
            valid.append(validate_job(job))
        except InvalidJob as error:
            field = f"jobs[{index}]" if error.field == "job" else f"jobs[{index}].{error.field}"
            raise InvalidJob(field, error.problem) from None
    return valid


def replay_flags(jobs: list[ValidJob], stored: Mapping[str, ValidJob]) -> list[bool]:
    """What ingesting ``jobs`` in order does, given the stored cargo of their ids.

    Per job: True when it is new (inserted), False for an identical replay,
    of the stored job or of an earlier job of the list with the same id.
    Raises IngestConflict for the first job whose cargo differs.
    """
    known = dict(stored)
    flags: list[bool] = []
    for job in jobs:
        earlier = known.get(job.job_id)
        if earlier is None:
            known[job.job_id] = job
            flags.append(True)
            continue
        differences = cargo_differences(job, earlier)
        if differences:
            raise IngestConflict(job.job_id, differences)
        flags.append(False)
    return flags
