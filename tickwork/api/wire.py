"""The JSON shapes of the HTTP API and of the Durable Object RPC.

One codec for both: the Worker, the local host and ``JobOwner`` all speak
these shapes, so a job read through any of them looks the same. Over RPC
the same shapes travel as JSON text (``to_json_text``), so nothing is
converted on the way. Decoding is
strict: unknown keys and wrong types are refused with an error naming the
field, never coerced.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import parse_qsl

from tickwork.model.errors import IngestConflict, InvalidArgument, InvalidJob, TickworkError
from tickwork.model.failures import summary_from_value, summary_to_value
from tickwork.model.jobs import (
    MAX_INGEST_BATCH,
    MAX_LANE_LENGTH,
    Attempt,
    Job,
    JobRecord,
    Recovery,
    Retry,
    check_text,
)
from tickwork.model.limits import ConcurrencyLimit, check_limit_kind
from tickwork.model.outcomes import (
    CancelResult,
    DeadLetters,
    DeadLettersRedriven,
    FailLaneResult,
    HistoryPoint,
    JobPage,
    LaneCancelled,
    QueueBacklog,
    QueueHistory,
    QueueStatus,
    RedriveResult,
)
from tickwork.model.rate_limits import RateLimit
from tickwork.model.retention import RetentionPolicy, StorageReport
from tickwork.model.schedules import Schedule, ScheduledJob, ScheduleRecord
from tickwork.model.waiting import Hold, JobWait

_JOB_KEYS = ("job_id", "queue", "lane", "priority", "payload", "recovery", "run_at",
             "delay_ms", "retry")
#: A retry policy's fields; only ``attempts`` is required.
_RETRY_KEYS = ("attempts", "base_delay_ms", "factor", "max_delay_ms", "jitter",
               "retry_unknown")
_REQUIRED_JOB_KEYS = ("job_id", "queue")


class ApiError(TickworkError):
    """A request the API refuses: ``status`` is the HTTP status, ``code`` a
    stable machine-readable name, ``field`` the offending input if any, and
    ``headers`` any the answer needs (``retry-after`` on a 503, ``allow`` on
    a 405)."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None,
                 headers: Mapping[str, str] | None = None,
                 details: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = dict(headers or {})
        #: More of the error object, for a client to rebuild the engine's error
        #: (an ingest conflict's ``job_id`` and ``fields``).
        self.details = dict(details or {})

    def to_wire(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        error.update(self.details)
        return {"error": error}


def error_for(error: BaseException) -> ApiError | None:
    """The API error for an exception the engine raises on bad input, else None."""
    if isinstance(error, ApiError):
        return error
    if isinstance(error, InvalidJob):
        return ApiError(400, "invalid_job", str(error), error.field)
    if isinstance(error, InvalidArgument):
        return ApiError(400, "invalid_argument", str(error), error.field)
    if isinstance(error, IngestConflict):
        return ApiError(409, "ingest_conflict", str(error), "job_id",
                        details={"job_id": error.job_id, "fields": list(error.fields)})
    return None


def refusal_from_wire(status: int, body: object) -> Exception | None:
    """The error a refusal's body stands for, as the engine raised it, or None
    when ``body`` is not a tickwork refusal (``{"error": {"code", "message"}}``).

    ``invalid_job``, ``invalid_argument`` and an ``ingest_conflict`` naming its
    job become ``InvalidJob``, ``InvalidArgument`` and ``IngestConflict`` again
    (the same message, field and fields); every other refusal is an
    ``ApiError`` with the status, code and field it was sent with.
    """
    error = body.get("error") if isinstance(body, Mapping) else None
    if not isinstance(error, Mapping):
        return None
    code, message = error.get("code"), error.get("message")
    if not isinstance(code, str) or not isinstance(message, str):
        return None
    field = error.get("field")
    field = field if isinstance(field, str) else None
    if code in ("invalid_job", "invalid_argument") and field is not None \
            and message.startswith(f"{field}: "):
        kind = InvalidJob if code == "invalid_job" else InvalidArgument
        return kind(field, message[len(field) + 2:])
    job_id, conflicting = error.get("job_id"), error.get("fields")
    if code == "ingest_conflict" and isinstance(job_id, str) and isinstance(conflicting, list) \
            and all(isinstance(name, str) for name in conflicting):
        return IngestConflict(job_id, tuple(conflicting))
    details = {key: value for key, value in error.items()
               if key not in ("code", "message", "field")}
    return ApiError(status, code, message, field, details=details)


# ------------------------------------------------------------------ decoding


def job_from_wire(value: object, where: str = "") -> Job:
    """A Job from its JSON object. ``lane`` defaults to the queue name,
    ``priority`` to 0, ``payload`` to null, ``recovery``, ``run_at``,
    ``delay_ms`` and ``retry`` to none; every field is validated as the
    engine validates any job (``Job`` itself checks them).

    ``where`` is the object's place in the request body ("" when the body is
    the job itself, ``jobs[3]`` inside a list): a refusal names a field by
    its path from the body (``retry.attempts``, ``jobs[3].retry.attempts``),
    as the engine's own refusals are named (see ``tickwork.api.operations``)."""
    if not isinstance(value, Mapping):
        raise InvalidJob(where or "body", f"must be a JSON object, got {_json_type(value)}")
    unknown = sorted(str(key) for key in value if key not in _JOB_KEYS)
    if unknown:
        raise InvalidJob(where or "body", f"unknown field(s) {', '.join(unknown)}; "
                                          f"a job has {', '.join(_JOB_KEYS)}")
    missing = [key for key in _REQUIRED_JOB_KEYS if key not in value]
    if missing:
        raise InvalidJob(_path(where, missing[0]), "is required")
    recovery = value.get("recovery")
    if recovery is not None:
        recovery = _recovery_from_wire(recovery, _path(where, "recovery"))
    retry = value.get("retry")
    if retry is not None:
        retry = _retry_from_wire(retry, _path(where, "retry"))
    queue = value["queue"]
    lane = value.get("lane", queue)
    try:
        if lane is None:  # Job() would take None for the queue; JSON null is no lane
            check_text("lane", lane, MAX_LANE_LENGTH, InvalidJob)
        return Job(
            job_id=value["job_id"],
            queue=queue,
            lane=lane,
            priority=value.get("priority", 0),
            payload=value.get("payload"),
            recovery=recovery,
            run_at=value.get("run_at"),
            delay_ms=value.get("delay_ms"),
            retry=retry,
        )
    except InvalidJob as refused:  # named by its path from the body
        raise InvalidJob(_path(where, refused.field), refused.problem) from None


def _path(where: str, name: str) -> str:
    """``name`` inside the object at ``where`` ("" for the body itself)."""
    return f"{where}.{name}" if where else name


def _retry_from_wire(value: object, where: str) -> Retry:
    # The engine validates each value (naming retry.<field>); here only the
    # shape: an object with attempts and known keys.
    if not isinstance(value, Mapping):
        raise InvalidJob(where, f"must be null or a JSON object, got {_json_type(value)}")
    unknown = sorted(str(key) for key in value if key not in _RETRY_KEYS)
    if unknown:
        raise InvalidJob(where, f"unknown field(s) {', '.join(unknown)}; "
                                f"a retry policy has {', '.join(_RETRY_KEYS)}")
    if "attempts" not in value:
        raise InvalidJob(f"{where}.attempts", "is required")
    defaults = Retry(1)
    return Retry(**{key: value.get(key, getattr(defaults, key)) for key in _RETRY_KEYS})


def _recovery_from_wire(value: object, where: str) -> Recovery:
    if not isinstance(value, Mapping) or set(value) != {"max_recoveries"}:
        raise InvalidJob(where, 'must be null or {"max_recoveries": <integer>}')
    return Recovery(value["max_recoveries"])


def jobs_from_wire(value: object) -> tuple[list[Job], bool]:
    """The jobs of an enqueue body: one job object, or ``{"jobs": [...]}``.

    Returns the jobs and whether the body was a list (the reply mirrors it).
    """
    if isinstance(value, Mapping) and "jobs" in value:
        if set(value) != {"jobs"}:
            extra = sorted(str(key) for key in value if key != "jobs")
            raise InvalidArgument("body", f"unknown field(s) {', '.join(extra)} next to jobs")
        items = value["jobs"]
        if not isinstance(items, list):
            raise InvalidArgument("jobs", f"must be a list, got {_json_type(items)}")
        if not 1 <= len(items) <= MAX_INGEST_BATCH:
            raise InvalidArgument(
                "jobs", f"must hold 1 to {MAX_INGEST_BATCH} jobs, got {len(items)}")
        return [job_from_wire(item, f"jobs[{index}]") for index, item in enumerate(items)], True
    return [job_from_wire(value)], False


def urlencoded_fields(text: str, where: str, *, max_fields: int,
                      strict: bool = True) -> dict[str, str]:
    """The fields of a query string or a urlencoded form (``where`` names
    which); a malformed text, or a field given twice, is refused by name."""
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=strict,
                          errors="strict", max_num_fields=max_fields)
    except (ValueError, UnicodeDecodeError) as error:
        raise ApiError(400, "invalid_argument", f"{where}: is malformed: {error}",
                       where) from None
    found: dict[str, str] = {}
    for name, value in pairs:
        if name in found:
            raise ApiError(400, "invalid_argument", f"{name}: is given more than once", name)
        found[name] = value
    return found


def fields(body: object, where: str, required: tuple[str, ...],
           optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """The named fields of a JSON object body, refusing unknown or missing ones."""
    if not isinstance(body, Mapping):
        raise InvalidArgument(where, f"must be a JSON object, got {_json_type(body)}")
    allowed = required + optional
    unknown = sorted(str(key) for key in body if key not in allowed)
    if unknown:
        raise InvalidArgument(where, f"unknown field(s) {', '.join(unknown)}; "
                                     f"expected {', '.join(allowed)}")
    for key in required:
        if key not in body:
            raise InvalidArgument(key, "is required")
    return dict(body)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


# ------------------------------------------------------------------ encoding


def job_to_wire(job: Job | JobRecord) -> dict[str, Any]:
    """A job's cargo as the API shows it (what ``job_from_wire`` reads back)."""
    return {
        "job_id": job.job_id,
        "queue": job.queue,
        "lane": job.lane,
        "priority": job.priority,
        "payload": job.payload,
        "recovery": recovery_to_wire(job.recovery),
        "run_at": job.run_at,
        "delay_ms": job.delay_ms,
        "retry": None if job.retry is None else retry_to_wire(job.retry),
    }


def recovery_to_wire(recovery: Recovery | None) -> dict[str, Any] | None:
    return None if recovery is None else {"max_recoveries": recovery.max_recoveries}


def retry_to_wire(policy: Retry) -> dict[str, Any]:
    return {key: getattr(policy, key) for key in _RETRY_KEYS}


def to_json_text(value: Any) -> str:
    """``value`` as compact JSON text (what crosses Durable Object RPC)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def jobs_from_rpc(text: object) -> list[Job]:
    """The jobs of ``JobOwner.ingest``: the JSON text of a list of 1 to
    ``MAX_INGEST_BATCH`` job objects (``job_to_wire``'s shape), decoded as
    strictly as an HTTP body (``job_from_wire``)."""
    if not isinstance(text, str):
        raise InvalidArgument("jobs", f"must be the JSON text of a list of jobs, "
                                      f"got {type(text).__name__}")
    try:
        items = json.loads(text)
    except ValueError as error:
        raise InvalidArgument("jobs", f"is not JSON: {error}") from None
    if not isinstance(items, list) or not 1 <= len(items) <= MAX_INGEST_BATCH:
        raise InvalidArgument(
            "jobs", f"must be a JSON list of 1 to {MAX_INGEST_BATCH} jobs")
    return [job_from_wire(item, f"jobs[{index}]") for index, item in enumerate(items)]


def record_to_wire(job: JobRecord) -> dict[str, Any]:
    return {
        **job_to_wire(job),
        "state": job.state,
        "outcome": job.outcome,
        "failure_reason": job.failure_reason,
        "cancellation_id": job.cancellation_id,
        "sequence": job.sequence,
        "recoveries": job.recoveries,
        "enqueued_at": job.enqueued_at,
        "started_at": job.started_at,
        "settled_at": job.settled_at,
        "due_at": job.due_at,
        "attempt": job.attempt,
        "history": [_attempt_to_wire(entry) for entry in job.history],
        "error": None if job.error is None else summary_to_value(job.error),
    }


def _attempt_to_wire(entry: Attempt) -> dict[str, Any]:
    return {"attempt": entry.attempt, "outcome": entry.outcome,
            "failure_reason": entry.failure_reason, "started_at": entry.started_at,
            "ended_at": entry.ended_at, "redrive_id": entry.redrive_id, "error": entry.error}


def record_from_wire(value: Mapping[str, Any]) -> JobRecord:
    recovery, retry = value.get("recovery"), value.get("retry")
    return JobRecord(
        job_id=value["job_id"],
        queue=value["queue"],
        lane=value["lane"],
        priority=value["priority"],
        payload=value.get("payload"),
        recovery=None if recovery is None else Recovery(recovery["max_recoveries"]),
        state=value["state"],
        outcome=value.get("outcome"),
        failure_reason=value.get("failure_reason"),
        sequence=value["sequence"],
        recoveries=value["recoveries"],
        enqueued_at=value["enqueued_at"],
        started_at=value.get("started_at"),
        settled_at=value.get("settled_at"),
        cancellation_id=value.get("cancellation_id"),
        run_at=value.get("run_at"),
        delay_ms=value.get("delay_ms"),
        due_at=value.get("due_at"),
        retry=None if retry is None else Retry(**retry),
        attempt=value.get("attempt", 1),
        history=tuple(Attempt(entry["attempt"], entry["outcome"], entry.get("failure_reason"),
                              entry.get("started_at"), entry["ended_at"],
                              entry.get("redrive_id"), entry.get("error"))
                      for entry in value.get("history", ())),
        error=summary_from_value(value.get("error")),
    )


def status_to_wire(status: QueueStatus) -> dict[str, Any]:
    return {
        "queue": status.queue,
        "queued": status.queued,
        "running": status.running,
        "settled": status.settled,
        "outcomes": dict(status.outcomes),
        "delayed": status.delayed,
        "paused": status.paused,
    }


def status_from_wire(value: Mapping[str, Any]) -> QueueStatus:
    return QueueStatus(
        queue=value["queue"],
        queued=value["queued"],
        running=value["running"],
        settled=value["settled"],
        outcomes=dict(value["outcomes"]),
        delayed=value.get("delayed", 0),
        paused=value.get("paused", False),
    )


def backlog_to_wire(backlog: QueueBacklog) -> dict[str, Any]:
    return {
        "queue": backlog.queue,
        "ready": backlog.ready,
        "delayed": backlog.delayed,
        "running": backlog.running,
        "oldest_ready_at": backlog.oldest_ready_at,
        "oldest_ready_age_ms": backlog.oldest_ready_age_ms,
        "read_at": backlog.read_at,
    }


def backlog_from_wire(value: Mapping[str, Any]) -> QueueBacklog:
    return QueueBacklog(queue=value["queue"], ready=value["ready"], delayed=value["delayed"],
                        running=value["running"], oldest_ready_at=value["oldest_ready_at"],
                        read_at=value["read_at"])


def redriven_to_wire(result: DeadLettersRedriven) -> dict[str, Any]:
    return {"queue": result.queue, "redriven": result.redriven, "replayed": result.replayed,
            "refused": result.refused, "cursor": result.cursor}


def redriven_from_wire(value: Mapping[str, Any]) -> DeadLettersRedriven:
    return DeadLettersRedriven(queue=value["queue"], redriven=value["redriven"],
                               replayed=value["replayed"], refused=value["refused"],
                               cursor=value["cursor"])


def job_wait_to_wire(result: JobWait) -> dict[str, Any]:
    # "text" is the hold in words, for a reader of the raw JSON; a client
    # rebuilds it from the kind.
    return {"job_id": result.job_id, "state": result.state, "read_at": result.read_at,
            "holds": [{"kind": hold.kind, "until": hold.until, "job_ids": list(hold.job_ids),
                       "limit": hold.limit, "text": hold.describe()}
                      for hold in result.holds]}


def job_wait_from_wire(value: Mapping[str, Any]) -> JobWait:
    return JobWait(value["job_id"], value["state"],
                   tuple(Hold(hold["kind"], hold["until"], tuple(hold["job_ids"]),
                              hold.get("limit"))
                         for hold in value["holds"]), value["read_at"])


def lane_cancelled_to_wire(result: LaneCancelled) -> dict[str, Any]:
    return {"lane": result.lane, "cancelled": result.cancelled, "replayed": result.replayed,
            "skipped": result.skipped, "cursor": result.cursor}


def lane_cancelled_from_wire(value: Mapping[str, Any]) -> LaneCancelled:
    return LaneCancelled(lane=value["lane"], cancelled=value["cancelled"],
                         replayed=value["replayed"], skipped=value["skipped"],
                         cursor=value["cursor"])


def cancel_to_wire(result: CancelResult) -> dict[str, Any]:
    return {"job_id": result.job_id, "status": result.status}


def cancel_from_wire(value: Mapping[str, Any]) -> CancelResult:
    return CancelResult(value["status"], value["job_id"])


def fail_lane_to_wire(result: FailLaneResult) -> dict[str, Any]:
    return {"settled": result.settled, "more": result.more}


def fail_lane_from_wire(value: Mapping[str, Any]) -> FailLaneResult:
    return FailLaneResult(value["settled"], value["more"])


def redrive_to_wire(result: RedriveResult) -> dict[str, Any]:
    return {"job_id": result.job_id, "status": result.status, "reason": result.reason}


def redrive_from_wire(value: Mapping[str, Any]) -> RedriveResult:
    return RedriveResult(value["status"], value["job_id"], value.get("reason"))


def dead_letters_to_wire(page: DeadLetters) -> dict[str, Any]:
    return {"jobs": [record_to_wire(job) for job in page.jobs], "cursor": page.cursor}


def dead_letters_from_wire(value: Mapping[str, Any]) -> DeadLetters:
    return DeadLetters([record_from_wire(job) for job in value["jobs"]], value["cursor"])


#: A history point's fields on the wire, in order (``at`` first).
HISTORY_FIELDS = ("at", "enqueued", "started", "completed", "failed", "cancelled", "retried",
                  "depth", "oldest_age_ms", "depth_capped")


def history_to_wire(history: QueueHistory) -> dict[str, Any]:
    return {"queue": history.queue, "bucket": history.bucket, "since": history.since,
            "read_at": history.read_at,
            "points": [{name: getattr(point, name) for name in HISTORY_FIELDS}
                       for point in history.points]}


def history_from_wire(value: Mapping[str, Any]) -> QueueHistory:
    return QueueHistory(value["queue"], value["bucket"], value["since"], value["read_at"],
                        [HistoryPoint(**{name: point[name] for name in HISTORY_FIELDS})
                         for point in value["points"]])


def job_page_to_wire(page: JobPage) -> dict[str, Any]:
    return {"jobs": [record_to_wire(job) for job in page.jobs], "cursor": page.cursor}


def job_page_from_wire(value: Mapping[str, Any]) -> JobPage:
    return JobPage([record_from_wire(job) for job in value["jobs"]], value["cursor"])


# ---------------------------------------------------------------- schedules

_SCHEDULE_KEYS = ("name", "cron", "every_ms", "catch_up", "job")
_TEMPLATE_KEYS = ("queue", "lane", "priority", "payload", "recovery", "retry")


def schedule_from_wire(value: object) -> Schedule:
    """A Schedule from its JSON object (``job``'s ``lane`` defaults to its
    queue, like a job's); the engine then validates every field."""
    given = fields(value, "body", ("name", "job"), ("cron", "every_ms", "catch_up"))
    template = given["job"]
    if not isinstance(template, Mapping):
        raise InvalidArgument("job", f"must be a JSON object, got {_json_type(template)}")
    unknown = sorted(str(key) for key in template if key not in _TEMPLATE_KEYS)
    if unknown:
        raise InvalidArgument("job", f"unknown field(s) {', '.join(unknown)}; a scheduled "
                                     f"job has {', '.join(_TEMPLATE_KEYS)}")
    if "queue" not in template:
        raise InvalidArgument("job.queue", "is required")
    recovery, retry = template.get("recovery"), template.get("retry")
    queue = template["queue"]
    try:
        job = ScheduledJob(
            queue, template.get("lane", queue), template.get("priority", 0),
            template.get("payload"),
            None if recovery is None else _recovery_from_wire(recovery, "job.recovery"),
            None if retry is None else _retry_from_wire(retry, "job.retry"))
    except InvalidJob as error:
        raise InvalidArgument(error.field, error.problem) from None
    return Schedule(given["name"], job, given.get("cron"), given.get("every_ms"),
                    given.get("catch_up", 1))


def schedule_to_wire(schedule: Schedule) -> dict[str, Any]:
    job = schedule.job
    return {
        "name": schedule.name, "cron": schedule.cron, "every_ms": schedule.every_ms,
        "catch_up": schedule.catch_up,
        "job": {"queue": job.queue, "lane": job.lane, "priority": job.priority,
                "payload": job.payload, "recovery": recovery_to_wire(job.recovery),
                "retry": None if job.retry is None else retry_to_wire(job.retry)},
    }


def schedule_record_to_wire(record: ScheduleRecord) -> dict[str, Any]:
    return {**schedule_to_wire(record.schedule), "next_at": record.next_at,
            "paused": record.paused, "created_at": record.created_at,
            "updated_at": record.updated_at}


def schedule_record_from_wire(value: Mapping[str, Any]) -> ScheduleRecord:
    schedule = {key: value[key] for key in _SCHEDULE_KEYS}
    return ScheduleRecord(schedule_from_wire(schedule), value["next_at"], value["paused"],
                          value["created_at"], value["updated_at"])


def limit_to_wire(limit: ConcurrencyLimit) -> dict[str, Any]:
    """A concurrency limit as JSON."""
    return {"kind": limit.kind, "key": limit.key, "max_running": limit.max_running,
            "updated_at": limit.updated_at}


def limit_from_wire(value: Mapping[str, Any]) -> ConcurrencyLimit:
    return ConcurrencyLimit(check_limit_kind(value["kind"]), value["key"],
                            value["max_running"], value["updated_at"])


_RATE_FIELDS: Final = ("kind", "key", "starts", "period_ms", "burst", "next_start_at",
                       "held_until", "updated_at")


def rate_limit_to_wire(limit: RateLimit) -> dict[str, Any]:
    """A rate limit (or a key's hold) as JSON: its bucket (null for a key
    that only has a hold), when it next allows a start, and its hold."""
    return {name: getattr(limit, name) for name in _RATE_FIELDS}


def rate_limit_from_wire(value: Mapping[str, Any]) -> RateLimit:
    return RateLimit(check_limit_kind(value["kind"]),
                     *(value[name] for name in _RATE_FIELDS[1:]))


def retention_to_wire(policy: RetentionPolicy) -> dict[str, Any]:
    """A retention policy as JSON (``queue`` null: the scope's default;
    ``updated_at`` null: the built-in default)."""
    return {"queue": policy.queue, "keep_completed_ms": policy.keep_completed_ms,
            "keep_failed_ms": policy.keep_failed_ms, "updated_at": policy.updated_at}


def retention_from_wire(value: Mapping[str, Any]) -> RetentionPolicy:
    return RetentionPolicy(value["queue"], value["keep_completed_ms"], value["keep_failed_ms"],
                           value["updated_at"])


def storage_to_wire(report: StorageReport) -> dict[str, Any]:
    return {"size_bytes": report.size_bytes, "rows": dict(report.rows)}


def storage_from_wire(value: Mapping[str, Any]) -> StorageReport:
    return StorageReport(value["size_bytes"], dict(value["rows"]))
