"""The operations the API serves, defined once.

Every operation is one ``Operation`` in ``OPERATIONS``: its name (the
``JobService`` method and the Durable Object RPC method), its HTTP method and
path, how an HTTP request becomes its arguments, how its result becomes the
HTTP answer, how its arguments and result cross RPC (as text, see
``tickwork.api.rpc``) and its description for the OpenAPI document. The
HTTP routes (``routes.py``), the RPC stubs and the object's RPC methods
(``rpc.py``), the host scopes (``service.py``) and
``docs/reference/openapi.json`` are all built from this table.

Adding an operation: its plan in ``tickwork.lifecycle.operations``, one line
declaring it in ``tickwork.lifecycle.surface.JobOperations`` (which gives
every runtime, ``JobService`` and both clients its typed method), and its
entry here (with the client's ``to_http`` and ``from_http``). A test holds
the declarations and this table together.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from tickwork._version import VERSION
from tickwork.api import wire
from tickwork.api.wire import ApiError
from tickwork.directory import (
    DEFAULT_OWNER_PAGE,
    MAX_OWNER_PAGE,
    SORTS,
    OwnerQuery,
    page_from_wire,
    page_to_wire,
)
from tickwork.lifecycle.operations import (
    DEFAULT_HISTORY_MS,
    MAX_DEAD_LETTER_PAGE,
    MAX_HISTORY_POINTS,
    MAX_JOB_PAGE,
    READ_SETTLED_MAX_LIMIT,
    cancel_lane,
    check_history_args,
    find_jobs_request,
    list_jobs_request,
    redrive_dead_letters,
)
from tickwork.lifecycle.surface import Declared, JobOperations, declared_operations
from tickwork.model.errors import IngestConflict, InvalidArgument, InvalidJob
from tickwork.model.history import HISTORY_BUCKETS
from tickwork.model.jobs import (
    MAX_ATTEMPTS,
    MAX_BACKOFF_FACTOR,
    MAX_DELAY_MS,
    MAX_INGEST_BATCH,
    MAX_LANE_LENGTH,
    MAX_SAFE_INTEGER,
    MIN_RUN_AT_MS,
    Job,
    check_id,
    check_reason,
    check_text,
    replay_flags,
    validate_job,
    validate_jobs,
)
from tickwork.model.limits import (
    LIMIT_KINDS,
    MAX_RUNNING_LIMIT,
    check_limit_key,
    check_limit_kind,
    validate_limit,
)
from tickwork.model.outcomes import OUTCOMES, QueueBacklog, QueueStatus
from tickwork.model.rate_limits import (
    MAX_RATE_PERIOD_MS,
    MAX_RATE_STARTS,
    validate_rate_limit,
)
from tickwork.model.retention import (
    MAX_KEEP_MS,
    MIN_KEEP_MS,
    check_policy_queue,
    validate_policy,
)
from tickwork.model.schedules import MAX_CATCH_UP, MAX_SCHEDULE_NAME, validate_schedule


@dataclass(frozen=True, slots=True)
class Reply:
    """An HTTP answer, before a host encodes it."""

    status: int
    body: Any


#: ``decode(path_args, body) -> (service arguments, context for the reply)``,
#: validating everything (the whole request is valid once it returns).
Decode = Callable[[Sequence[str], Any], tuple[tuple[Any, ...], Any]]
#: ``reply(arguments, context, result) -> Reply``.
Answer = Callable[[tuple[Any, ...], Any, Any], Reply]


#: The operations every surface declares (``tickwork.lifecycle.surface``), by name.
DECLARED: Final = declared_operations(JobOperations)


def _runtime_method(declared: Declared[Any, Any]) -> Callable[..., Any]:
    """``perform(runtime, *arguments)`` of a declared operation: the
    runtime's method of its name (each argument passed by name)."""
    name = declared.name

    def perform(runtime: Any, *arguments: Any) -> Any:
        return declared.call_with(getattr(runtime, name), arguments)

    parameters = [inspect.Parameter("runtime", inspect.Parameter.POSITIONAL_ONLY),
                  *(parameter.replace(kind=inspect.Parameter.POSITIONAL_ONLY)
                    for parameter in declared.signature.parameters.values())]
    perform.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    return perform


def _derived(runtime: Any, *arguments: Any) -> Any:
    """``Operation.perform``'s default: stands for the one ``__post_init__``
    derives from the operation's declaration (never called)."""
    raise AssertionError("a declared operation's perform is derived in __post_init__")


@dataclass(frozen=True, slots=True)
class Operation:
    """One operation of the API; see the module doc."""

    name: str
    method: str
    path: tuple[str, ...]
    summary: str
    decode: Decode
    reply: Answer
    #: ``perform(runtime, *arguments)``: the runtime method (sync or async).
    #: Derived for an operation of ``JobOperations`` (the runtime's method of
    #: its name); given only for the others.
    perform: Callable[..., Any] = _derived
    #: Its result as JSON data, and back (what an RPC reply carries).
    result_to_wire: Callable[[Any], Any] = lambda result: result
    result_from_wire: Callable[[Any], Any] = lambda result: result
    #: Its arguments as RPC sends them (str, bool or JSON text), and back.
    args_to_rpc: Callable[[tuple[Any, ...]], tuple[Any, ...]] = lambda args: args
    args_from_rpc: Callable[[tuple[Any, ...]], tuple[Any, ...]] = lambda args: args
    #: Whether it may create an owner's store (tickwork serve): ingest, and
    #: pause (a queue may be paused before its first job).
    creates_owner: bool = False
    #: OpenAPI: the request body's schema (POST), the query parameters (GET:
    #: name -> (schema, description)), and the answers by status.
    body_schema: Mapping[str, Any] | None = None
    query_params: Mapping[str, tuple[Mapping[str, Any], str]] = field(default_factory=dict)
    #: The query parameters a request must give (the others have defaults).
    required_query: tuple[str, ...] = ()
    answers: Mapping[int, str] = field(default_factory=dict)
    #: The reply body's shape, for the reference docs.
    reply_shape: str = ""
    #: The client's side (``tickwork.client``): the request for some arguments,
    #: ``to_http(args) -> (path arguments, body or None)``, which ``decode``
    #: turns back into the same arguments; and the result from an answer that
    #: is not a refusal, ``from_http(body) -> result``.
    to_http: Callable[[tuple[Any, ...]], tuple[tuple[str, ...], Any]] = (
        lambda args: (tuple(args), None))
    from_http: Callable[[Any], Any] = lambda body: body
    #: The refusal code that means "no result" (None) rather than an error.
    none_when: str | None = None
    #: Safe to send again when its reply was lost: a read, or a write whose ids
    #: make the second one a replay (ingest, cancel). Purge and fail_lane are
    #: not: a second call may take jobs the first did not.
    idempotent: bool = False

    def __post_init__(self) -> None:
        declared = DECLARED.get(self.name)
        if (declared is None) == (self.perform is _derived):
            raise TypeError(f"operation {self.name!r}: give perform exactly when it is not "
                            "declared in tickwork.lifecycle.surface.JobOperations")
        if declared is not None:
            object.__setattr__(self, "perform", _runtime_method(declared))

    @property
    def arity(self) -> int:
        """How many arguments it takes (``perform``'s, but the runtime)."""
        return len(inspect.signature(self.perform).parameters) - 1

    @property
    def writes(self) -> bool:
        """Whether it may change the scope's jobs: a declared write, or ingest
        (the one undeclared operation that writes; it creates an owner)."""
        declared = DECLARED.get(self.name)
        return declared.writes if declared is not None else self.creates_owner

    @property
    def path_params(self) -> tuple[str, ...]:
        return tuple(part[1:-1] for part in self.path if part.startswith("{"))

    def match(self, segments: Sequence[str]) -> list[str] | None:
        """The path arguments when ``segments`` (after the scope) are this
        operation's path, else None."""
        if len(segments) != len(self.path):
            return None
        args: list[str] = []
        for pattern, segment in zip(self.path, segments, strict=True):
            if pattern.startswith("{"):
                args.append(segment)
            elif pattern != segment:
                return None
        return args


# ------------------------------------------------------------------ ingest


def _decode_ingest(args: Sequence[str], body: Any) -> tuple[tuple[Any, ...], Any]:
    jobs, as_list = wire.jobs_from_wire(body)
    # Validate everything here, before any service (a Durable Object, a
    # file) is touched: every host refuses exactly the same bodies.
    valid = validate_jobs(jobs) if as_list else [validate_job(jobs[0])]
    for job in valid:
        if job.job_id in (".", ".."):
            raise InvalidJob("job_id", f"{job.job_id!r} cannot be addressed in a URL path")
    try:
        replay_flags(valid, {})
    except IngestConflict as conflict:
        raise ApiError(409, "ingest_conflict",
                       f"job {conflict.job_id!r} appears twice in this request with a "
                       f"different {', '.join(conflict.fields)}", "jobs",
                       details={"job_id": conflict.job_id,
                                "fields": list(conflict.fields)}) from None
    return (jobs,), as_list


def _reply_ingest(args: tuple[Any, ...], as_list: Any, statuses: Any) -> Reply:
    jobs: list[Job] = args[0]
    results = [{"job_id": job.job_id, "status": status}
               for job, status in zip(jobs, statuses, strict=True)]
    if as_list:
        return Reply(200, {"jobs": results})
    return Reply(201 if statuses[0] == "queued" else 200, results[0])


def _ingest_to_http(args: tuple[Any, ...]) -> tuple[tuple[str, ...], Any]:
    validate_jobs(args[0])  # what is no Job cannot be written as one (named errors)
    return (), {"jobs": [wire.job_to_wire(job) for job in args[0]]}


def _ingest_to_rpc(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return (wire.to_json_text([wire.job_to_wire(job) for job in args[0]]),)


def _ingest_from_rpc(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return (wire.jobs_from_rpc(args[0]),)


# ------------------------------------------------------- the other operations


def _job_id(args: Sequence[str], body: Any) -> tuple[tuple[Any, ...], Any]:
    return (check_id("job_id", args[0]),), None


def _queue(args: Sequence[str], body: Any) -> tuple[tuple[Any, ...], Any]:
    return (check_id("queue", args[0]),), None


def _nothing(args: Sequence[str], body: Any) -> tuple[tuple[Any, ...], Any]:
    return (), None


def _decode_cancel(args: Sequence[str], body: Any) -> tuple[tuple[Any, ...], Any]:
    job_id = check_id("job_id", args[0])
    given = wire.fields(body, "body", ("cancellation_id",), ("only_if_queued",))
    cancellation_id = check_id("cancellation_id", given["cancellation_id"])
    only_if_queued = given.get("only_if_queued", False)
    if not isinstance(only_if_queued, bool):
        raise InvalidArgument("only_if_queued", "must be true or false")
    return (job_id, cancellation_id, only_if_queued), None


def _decode_queue_action(args: Sequence[str], body: Any) -> tuple[tuple[Any, ...], Any]:
    """A POST on a queue with an empty JSON object body: purge, pause, resume."""
    wire.fields(body, "body", ())
    return (check_id("queue", args[0]),), None


def _decode_fail_lane(args: Sequence[str], body: Any) -> tuple[tuple[Any, ...], Any]:
    lane = check_text("lane", args[0], MAX_LANE_LENGTH, InvalidArgument)
    reason = check_reason("reason", wire.fields(body, "body", ("reason",))["reason"])
    return (lane, reason), None


def _decode_redrive(args: Sequence[str], body: Any) -> tuple[tuple[Any, ...], Any]:
    job_id = check_id("job_id", args[0])
    given = wire.fields(body, "body", ("redrive_id",))
    return (job_id, check_id("redrive_id", given["redrive_id"])), None


def _decode_cancel_lane(args: Sequence[str], body: Any) -> tuple[tuple[Any, ...], Any]:
    given = wire.fields(body, "body", ("cancellation_id",), ("limit", "cursor"))
    arguments = (args[0], given["cancellation_id"], given.get("limit", 100),
                 given.get("cursor"))
    # The plan checks every argument before its first request: run it that far.
    next(cancel_lane(arguments[0], arguments[1], limit=arguments[2], cursor=arguments[3]))
    return arguments, None


def _decode_redrive_dead_letters(args: Sequence[str], body: Any
                                 ) -> tuple[tuple[Any, ...], Any]:
    given = wire.fields(body, "body", ("redrive_id",), ("limit", "cursor"))
    arguments = (check_id("queue", args[0]), given["redrive_id"], given.get("limit", 100),
                 given.get("cursor"))
    # The plan checks every argument before its first request: run it that far.
    next(redrive_dead_letters(arguments[0], arguments[1], limit=arguments[2],
                              cursor=arguments[3]))
    return arguments, None


def _decode_dead_letters(args: Sequence[str], query: Any) -> tuple[tuple[Any, ...], Any]:
    """A GET's query (``limit``, ``cursor``; strings, as sent) as arguments."""
    queue = check_id("queue", args[0])
    given = wire.fields({} if query is None else query, "query", (), ("limit", "cursor"))
    limit = _query_int(given, "limit", 50, 1, MAX_DEAD_LETTER_PAGE)
    cursor = given.get("cursor")
    if cursor is not None and not isinstance(cursor, str):
        raise InvalidArgument("cursor", "must be a string")
    return (queue, limit, cursor), None


def _query_int(given: Mapping[str, Any], name: str, default: int, low: int, high: int) -> int:
    """Query parameter ``name`` (a string of digits, as sent) as an integer
    from ``low`` to ``high``; ``default`` when it is not given."""
    value: Any = given.get(name, str(default))
    if not (isinstance(value, str) and value.isascii() and value.isdigit()
            and len(value) <= 16 and low <= int(value) <= high):
        raise InvalidArgument(name, f"must be an integer from {low} to {high}, got {value!r}")
    return int(value)


def _dead_letters_to_http(args: tuple[Any, ...]) -> tuple[tuple[str, ...], Any]:
    queue, limit, cursor = args
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidArgument("limit", f"must be an integer from 1 to {MAX_DEAD_LETTER_PAGE}, "
                                       f"got {limit!r}")
    if cursor is not None and not isinstance(cursor, str):
        raise InvalidArgument("cursor", f"must be a string, got {type(cursor).__name__}")
    query = {"limit": str(limit)}
    if cursor is not None:
        query["cursor"] = cursor
    return (queue,), query


#: list_jobs's query parameters, in the order of its arguments after limit.
_LIST_FILTERS = ("queue", "lane", "state", "outcome", "order")


def _decode_list_jobs(args: Sequence[str], query: Any) -> tuple[tuple[Any, ...], Any]:
    """A GET's query (strings, as sent) as list_jobs's arguments, every one
    checked as the runtime checks it."""
    given = wire.fields({} if query is None else query, "query", (),
                        (*_LIST_FILTERS, "limit", "cursor"))
    arguments = (given.get("queue"), given.get("lane"), given.get("state", "queued"),
                 given.get("outcome"), given.get("order", "newest"),
                 _query_int(given, "limit", 50, 1, MAX_JOB_PAGE), given.get("cursor"))
    list_jobs_request(*arguments)
    return arguments, None


def _list_jobs_to_http(args: tuple[Any, ...]) -> tuple[tuple[str, ...], Any]:
    list_jobs_request(*args)  # refused here as the server would
    *filters, limit, cursor = args
    query = {name: value for name, value in zip(_LIST_FILTERS, filters, strict=True)
             if value is not None}
    query["limit"] = str(limit)
    if cursor is not None:
        query["cursor"] = cursor
    return (), query


def _decode_find_jobs(args: Sequence[str], query: Any) -> tuple[tuple[Any, ...], Any]:
    """A GET's query as find_jobs's arguments, checked as the runtime checks them."""
    given = wire.fields({} if query is None else query, "query", ("id_prefix",),
                        ("limit", "cursor"))
    arguments = (given["id_prefix"], _query_int(given, "limit", 50, 1, MAX_JOB_PAGE),
                 given.get("cursor"))
    find_jobs_request(*arguments)
    return arguments, None


def _find_jobs_to_http(args: tuple[Any, ...]) -> tuple[tuple[str, ...], Any]:
    find_jobs_request(*args)  # refused here as the server would
    id_prefix, limit, cursor = args
    query = {"id_prefix": id_prefix, "limit": str(limit)}
    if cursor is not None:
        query["cursor"] = cursor
    return (), query


def _decode_history(args: Sequence[str], query: Any) -> tuple[tuple[Any, ...], Any]:
    """A GET's query (``queue``, ``since``, ``bucket``; strings, as sent) as
    history's arguments, checked as the plan checks them."""
    given = wire.fields({} if query is None else query, "query", ("queue",),
                        ("since", "bucket"))
    queue = check_id("queue", given["queue"])
    since = (None if given.get("since") is None
             else _query_int(given, "since", 0, 0, MAX_SAFE_INTEGER))
    bucket = _query_int(given, "bucket", 60, 1, max(HISTORY_BUCKETS))
    check_history_args(since, bucket)
    return (queue, since, bucket), None


def _history_to_http(args: tuple[Any, ...]) -> tuple[tuple[str, ...], Any]:
    queue, since, bucket = args
    check_id("queue", queue)
    check_history_args(since, bucket)  # refused here as the server would
    query = {"queue": queue, "bucket": str(bucket)}
    if since is not None:
        query["since"] = str(since)
    return (), query


def _reply_history(args: tuple[Any, ...], context: Any, history: Any) -> Reply:
    if history is None:
        raise ApiError(404, "queue_not_found",
                       f"no history of queue {args[0]!r}: no job of it changed state in the "
                       "7 days history is kept", "queue")
    return Reply(200, wire.history_to_wire(history))


def _settled_feed(runtime: Any) -> Any:
    """The runtime's read_settled; the shared queues have no settled feed."""
    read_settled = getattr(runtime, "read_settled", None)
    if read_settled is None:
        raise ApiError(404, "not_available", "the settled feed is an owner's: the shared "
                                             "queues have none; use list_jobs")
    return read_settled


def _decode_read_settled(args: Sequence[str], query: Any) -> tuple[tuple[Any, ...], Any]:
    given = wire.fields({} if query is None else query, "query", (),
                        ("limit", "after_sequence"))
    return (_query_int(given, "limit", 100, 1, READ_SETTLED_MAX_LIMIT),
            _query_int(given, "after_sequence", 0, 0, MAX_SAFE_INTEGER)), None


def _decode_ready(args: Sequence[str], query: Any) -> tuple[tuple[Any, ...], Any]:
    wire.fields({} if query is None else query, "query", ())
    return (), None


async def _check_ready(runtime: Any) -> int:
    """The runtime's readiness check (a real read of its store); any failure
    of the store is a 503 naming it, never a 500."""
    try:
        version = runtime.check_ready()
        if inspect.isawaitable(version):
            version = await version
    except Exception as error:
        raise ApiError(503, "not_ready", f"the store did not answer the readiness check: "
                                         f"{type(error).__name__}: {str(error)[:300]}") from None
    return int(version)


def _decode_schedule(args: Sequence[str], body: Any) -> tuple[tuple[Any, ...], Any]:
    schedule = wire.schedule_from_wire(body)
    valid = validate_schedule(schedule)  # refused here, before any store is touched
    if valid.name in (".", ".."):
        raise InvalidArgument("name", f"{valid.name!r} cannot be addressed in a URL path")
    return (schedule,), None


def _schedule_name(args: Sequence[str], body: Any) -> tuple[tuple[Any, ...], Any]:
    wire.fields({} if body is None else body, "body", ())
    return (check_text("name", args[0], MAX_SCHEDULE_NAME, InvalidArgument),), None


def _decode_set_retention(args: Sequence[str], body: Any) -> tuple[tuple[Any, ...], Any]:
    given = wire.fields(body, "body", ("keep_completed_ms", "keep_failed_ms"), ("queue",))
    policy = validate_policy(given.get("queue"), given["keep_completed_ms"],
                             given["keep_failed_ms"])  # refused before any store is touched
    return (policy.queue, policy.keep_completed_ms, policy.keep_failed_ms), None


def _decode_clear_retention(args: Sequence[str], body: Any) -> tuple[tuple[Any, ...], Any]:
    given = wire.fields({} if body is None else body, "body", (), ("queue",))
    return (check_policy_queue(given.get("queue")),), None


def _set_retention_to_http(args: tuple[Any, ...]) -> tuple[tuple[str, ...], Any]:
    policy = validate_policy(*args)  # refused here as the server would
    return (), {"queue": policy.queue, "keep_completed_ms": policy.keep_completed_ms,
                "keep_failed_ms": policy.keep_failed_ms}


def _clear_retention_to_http(args: tuple[Any, ...]) -> tuple[tuple[str, ...], Any]:
    return (), {"queue": check_policy_queue(args[0])}


def _decode_set_limit(args: Sequence[str], body: Any) -> tuple[tuple[Any, ...], Any]:
    given = wire.fields(body, "body", ("kind", "key", "max_running"))
    limit = validate_limit(given["kind"], given["key"], given["max_running"])
    return (limit.kind, limit.key, limit.max_running), None  # refused before any store


def _decode_limit_key(args: Sequence[str], body: Any) -> tuple[tuple[Any, ...], Any]:
    given = wire.fields(body, "body", ("kind", "key"))
    kind = check_limit_kind(given["kind"])
    return (kind, check_limit_key(kind, given["key"])), None


def _set_limit_to_http(args: tuple[Any, ...]) -> tuple[tuple[str, ...], Any]:
    limit = validate_limit(*args)  # refused here as the server would
    return (), {"kind": limit.kind, "key": limit.key, "max_running": limit.max_running}


def _limit_key_to_http(args: tuple[Any, ...]) -> tuple[tuple[str, ...], Any]:
    kind = check_limit_kind(args[0])
    return (), {"kind": kind, "key": check_limit_key(kind, args[1])}


def _decode_set_rate_limit(args: Sequence[str], body: Any) -> tuple[tuple[Any, ...], Any]:
    given = wire.fields(body, "body", ("kind", "key", "starts", "period_ms"), ("burst",))
    limit = validate_rate_limit(given["kind"], given["key"], given["starts"],
                                given["period_ms"], given.get("burst"))
    return (limit.kind, limit.key, limit.starts, limit.period_ms, limit.burst), None


def _set_rate_limit_to_http(args: tuple[Any, ...]) -> tuple[tuple[str, ...], Any]:
    limit = validate_rate_limit(*args)  # refused here as the server would
    return (), {"kind": limit.kind, "key": limit.key, "starts": limit.starts,
                "period_ms": limit.period_ms, "burst": limit.burst}


def _rate_limits_to_wire(limits: list[Any]) -> list[dict[str, Any]]:
    return [wire.rate_limit_to_wire(limit) for limit in limits]


def _rate_limits_from_wire(values: list[Any]) -> list[Any]:
    return [wire.rate_limit_from_wire(value) for value in values]


def _limits_to_wire(limits: list[Any]) -> list[dict[str, Any]]:
    return [wire.limit_to_wire(limit) for limit in limits]


def _limits_from_wire(values: list[Any]) -> list[Any]:
    return [wire.limit_from_wire(value) for value in values]


def _policies_to_wire(policies: list[Any]) -> list[dict[str, Any]]:
    return [wire.retention_to_wire(policy) for policy in policies]


def _policies_from_wire(values: list[Any]) -> list[Any]:
    return [wire.retention_from_wire(value) for value in values]


def _reply_read(args: tuple[Any, ...], context: Any, record: Any) -> Reply:
    if record is None:
        raise ApiError(404, "job_not_found", f"no job {args[0]!r}", "job_id")
    return Reply(200, {"job": wire.record_to_wire(record)})


def _reply_explain(args: tuple[Any, ...], context: Any, result: Any) -> Reply:
    if result is None:
        raise ApiError(404, "job_not_found", f"no job {args[0]!r}", "job_id")
    return Reply(200, wire.job_wait_to_wire(result))


#: Redrive statuses as HTTP: the body always carries the engine's status.
REDRIVE_STATUS: Final = {"redriven": 200, "replayed": 200, "refused": 409, "not_found": 404}

#: Cancel statuses as HTTP: the body always carries the engine's status.
CANCEL_STATUS: Final = {
    "recorded": 200,
    "replayed": 200,
    "already_settled": 409,
    "refused": 409,
    "conflict": 409,
    "not_found": 404,
}


def _optional(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``convert``, passing None through (a result that may be None)."""
    return lambda value: None if value is None else convert(value)


def _optional_record(value: Any) -> Any:
    return None if value is None else wire.record_to_wire(value)


def _optional_record_from(value: Any) -> Any:
    return None if value is None else wire.record_from_wire(value)


def _statuses_to_wire(statuses: list[QueueStatus]) -> list[dict[str, Any]]:
    return [wire.status_to_wire(status) for status in statuses]


def _statuses_from_wire(values: list[Any]) -> list[QueueStatus]:
    return [wire.status_from_wire(value) for value in values]


def _backlogs_to_wire(backlogs: list[QueueBacklog]) -> list[dict[str, Any]]:
    return [wire.backlog_to_wire(backlog) for backlog in backlogs]


def _backlogs_from_wire(values: list[Any]) -> list[QueueBacklog]:
    return [wire.backlog_from_wire(value) for value in values]


def _records_to_wire(records: list[Any]) -> list[dict[str, Any]]:
    return [wire.schedule_record_to_wire(record) for record in records]


def _records_from_wire(values: list[Any]) -> list[Any]:
    return [wire.schedule_record_from_wire(value) for value in values]


def _same(value: Any) -> Any:
    return value


def _each_as_json_text(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(wire.to_json_text(arg) for arg in args)


def _each_from_json_text(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(_json_from_rpc(arg) for arg in args)


def _json_from_rpc(text: Any) -> Any:
    if not isinstance(text, str):
        raise InvalidArgument("arguments", f"must be JSON text, got {type(text).__name__}")
    try:
        return json.loads(text)
    except ValueError as error:
        raise InvalidArgument("arguments", f"is not JSON: {error}") from None


# ---------------------------------------------------------------- schemas
# JSON Schema (OpenAPI 3.1) of the request bodies; the answers' shapes are in
# docs/reference/http-api.md.

JOB_SCHEMA: Final = {
    "type": "object",
    "required": ["job_id", "queue"],
    "additionalProperties": False,
    "properties": {
        "job_id": {"type": "string", "minLength": 1, "maxLength": 256},
        "queue": {"type": "string", "minLength": 1, "maxLength": 256},
        "lane": {"type": "string", "minLength": 1, "maxLength": 512,
                 "description": "defaults to the queue"},
        "priority": {"type": "integer", "minimum": -(2**53 - 1), "maximum": 2**53 - 1,
                     "default": 0},
        "payload": {"description": "any JSON; opaque to tickwork", "default": None},
        "recovery": {"oneOf": [{"type": "null"}, {
            "type": "object", "required": ["max_recoveries"], "additionalProperties": False,
            "properties": {"max_recoveries": {"type": "integer", "minimum": 0}}}]},
        "run_at": {"oneOf": [{"type": "null"}, {
            "type": "integer", "minimum": MIN_RUN_AT_MS, "maximum": 2**53 - 1,
            "description": "epoch ms before which the job is not claimed; from "
                           "2001-01-01 on (an earlier value is refused as likely "
                           "seconds)"}]},
        "delay_ms": {"oneOf": [{"type": "null"}, {
            "type": "integer", "minimum": 0, "maximum": MAX_DELAY_MS,
            "description": "ms after ingest (store's clock) before which the job is not "
                           "claimed; not with run_at"}]},
        "retry": {"oneOf": [{"type": "null"}, {
            "type": "object", "required": ["attempts"], "additionalProperties": False,
            "description": "retry failed attempts after an exponential backoff",
            "properties": {
                "attempts": {"type": "integer", "minimum": 1, "maximum": MAX_ATTEMPTS,
                             "description": "attempts in all, the first included"},
                "base_delay_ms": {"type": "integer", "minimum": 0, "maximum": MAX_DELAY_MS,
                                  "default": 1000},
                "factor": {"type": "number", "minimum": 1, "maximum": MAX_BACKOFF_FACTOR,
                           "default": 2.0},
                "max_delay_ms": {"type": "integer", "minimum": 0, "maximum": MAX_DELAY_MS,
                                 "default": 3_600_000},
                "jitter": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.0},
                "retry_unknown": {"type": "boolean", "default": False}}}]},
    },
}

_INGEST_SCHEMA: Final = {"oneOf": [JOB_SCHEMA, {
    "type": "object", "required": ["jobs"], "additionalProperties": False,
    "properties": {"jobs": {"type": "array", "items": JOB_SCHEMA, "minItems": 1,
                            "maxItems": MAX_INGEST_BATCH}}}]}

_CANCEL_SCHEMA: Final = {
    "type": "object", "required": ["cancellation_id"], "additionalProperties": False,
    "properties": {"cancellation_id": {"type": "string", "minLength": 1, "maxLength": 256},
                   "only_if_queued": {"type": "boolean", "default": False}}}

_FAIL_LANE_SCHEMA: Final = {
    "type": "object", "required": ["reason"], "additionalProperties": False,
    "properties": {"reason": {"type": "string", "minLength": 1, "maxLength": 256}}}

_CANCEL_LANE_SCHEMA: Final = {
    "type": "object", "required": ["cancellation_id"], "additionalProperties": False,
    "properties": {
        "cancellation_id": {"type": "string", "minLength": 1, "maxLength": 256},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_JOB_PAGE, "default": 100},
        "cursor": {"oneOf": [{"type": "null"}, {"type": "string"}],
                   "description": "the cursor of the previous answer"}}}

_EMPTY_SCHEMA: Final = {"type": "object", "additionalProperties": False}

_JOB_PROPERTIES: Final[dict[str, Any]] = JOB_SCHEMA["properties"]  # type: ignore[assignment]

_SCHEDULE_SCHEMA: Final = {
    "type": "object", "required": ["name", "job"], "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": MAX_SCHEDULE_NAME},
        "cron": {"oneOf": [{"type": "null"}, {
            "type": "string", "description": "five fields, UTC; not with every_ms"}]},
        "every_ms": {"oneOf": [{"type": "null"}, {
            "type": "integer", "minimum": 1000, "maximum": MAX_DELAY_MS,
            "description": "whole seconds; slots at its multiples since the epoch"}]},
        "catch_up": {"type": "integer", "minimum": 1, "maximum": MAX_CATCH_UP, "default": 1},
        "job": {"type": "object", "required": ["queue"], "additionalProperties": False,
                "properties": {key: value for key, value in _JOB_PROPERTIES.items()
                               if key not in ("job_id", "run_at", "delay_ms")}},
    }}

_KEEP_SCHEMA: Final = {"oneOf": [{"type": "null", "description": "keep forever"}, {
    "type": "integer", "minimum": MIN_KEEP_MS, "maximum": MAX_KEEP_MS,
    "description": "ms after the job settled"}]}

_POLICY_QUEUE_SCHEMA: Final = {"oneOf": [
    {"type": "null", "description": "the scope's default"},
    {"type": "string", "minLength": 1, "maxLength": 256}], "default": None}

_SET_RETENTION_SCHEMA: Final = {
    "type": "object", "required": ["keep_completed_ms", "keep_failed_ms"],
    "additionalProperties": False,
    "properties": {"queue": _POLICY_QUEUE_SCHEMA,
                   "keep_completed_ms": {**_KEEP_SCHEMA,
                                         "description": "completed and cancelled jobs"},
                   "keep_failed_ms": {**_KEEP_SCHEMA,
                                      "description": "failed, outcome_unknown and "
                                                     "interrupted jobs"}}}

_CLEAR_RETENTION_SCHEMA: Final = {
    "type": "object", "additionalProperties": False,
    "properties": {"queue": _POLICY_QUEUE_SCHEMA}}

_LIMIT_KEY_PROPERTIES: Final[dict[str, Any]] = {
    "kind": {"type": "string", "enum": list(LIMIT_KINDS),
             "description": "queue: the queue named key; lane: the lane named key, across "
                            "every queue"},
    "key": {"type": "string", "minLength": 1, "maxLength": MAX_LANE_LENGTH,
            "description": "a queue name (at most 256 characters) or a lane"}}

_LIMIT_KEY_SCHEMA: Final = {
    "type": "object", "required": ["kind", "key"], "additionalProperties": False,
    "properties": _LIMIT_KEY_PROPERTIES}

_SET_LIMIT_SCHEMA: Final = {
    "type": "object", "required": ["kind", "key", "max_running"],
    "additionalProperties": False,
    "properties": {**_LIMIT_KEY_PROPERTIES,
                   "max_running": {"type": "integer", "minimum": 1,
                                   "maximum": MAX_RUNNING_LIMIT,
                                   "description": "the most jobs that run at once"}}}

_SET_RATE_LIMIT_SCHEMA: Final = {
    "type": "object", "required": ["kind", "key", "starts", "period_ms"],
    "additionalProperties": False,
    "properties": {**_LIMIT_KEY_PROPERTIES,
                   "starts": {"type": "integer", "minimum": 1, "maximum": MAX_RATE_STARTS,
                              "description": "how many jobs may start per period"},
                   "period_ms": {"type": "integer", "minimum": 1,
                                 "maximum": MAX_RATE_PERIOD_MS,
                                 "description": "the period, in milliseconds"},
                   "burst": {"type": ["integer", "null"], "minimum": 1,
                             "maximum": MAX_RATE_STARTS,
                             "description": "how many may start at once after a quiet "
                                            "spell (default: starts)"}}}

_REDRIVE_SCHEMA: Final = {
    "type": "object", "required": ["redrive_id"], "additionalProperties": False,
    "properties": {"redrive_id": {"type": "string", "minLength": 1, "maxLength": 256}}}


_REDRIVE_DEAD_LETTERS_SCHEMA: Final = {
    "type": "object", "required": ["redrive_id"], "additionalProperties": False,
    "properties": {
        "redrive_id": {"type": "string", "minLength": 1, "maxLength": 256},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_DEAD_LETTER_PAGE,
                  "default": 100},
        "cursor": {"oneOf": [{"type": "null"}, {"type": "string"}],
                   "description": "the cursor of the previous answer"}}}


def _schedule_action(name: str, summary: str, answer: str) -> Operation:
    """pause_schedule, resume_schedule, delete_schedule: a POST on a schedule
    whose result says whether it changed anything."""
    action = name.removesuffix("_schedule")
    return Operation(
        name, "POST", ("schedules", "{name}", action), summary, _schedule_name,
        lambda args, context, changed: Reply(200, {"name": args[0], "changed": changed}),
        result_to_wire=_same, result_from_wire=_same, body_schema=_EMPTY_SCHEMA,
        answers={200: answer}, reply_shape='`{"name", "changed"}`',
        to_http=lambda args: ((args[0],), {}), from_http=lambda body: body["changed"],
        idempotent=True)


def _pausing(name: str, summary: str, *, paused: bool, creates_owner: bool = False
             ) -> Operation:
    """``pause`` or ``resume``: a POST on a queue whose result says whether it
    changed anything, answered with the state the queue is now in."""
    return Operation(
        name, "POST", ("queues", "{queue}", name), summary, _decode_queue_action,
        lambda args, context, changed: Reply(200, {"queue": args[0], "paused": paused,
                                                   "changed": changed}),
        result_to_wire=_same, result_from_wire=_same, creates_owner=creates_owner,
        body_schema=_EMPTY_SCHEMA,
        answers={200: f"{'paused' if paused else 'not paused'}; changed says whether "
                      f"this call {'paused' if paused else 'resumed'} it"},
        reply_shape=f'`{{"queue", "paused": {"true" if paused else "false"}, "changed"}}`',
        to_http=lambda args: ((args[0],), {}), from_http=lambda body: body["changed"],
        idempotent=True)


# ------------------------------------------------------------------ the table

OPERATIONS: Final = (
    Operation(
        "ingest", "POST", ("jobs",),
        "Store one job, or up to 100 atomically; a replay of a stored job is a duplicate",
        _decode_ingest, _reply_ingest,
        perform=lambda runtime, jobs: runtime.ingest_many(jobs),
        result_to_wire=_same, result_from_wire=_same,
        args_to_rpc=_ingest_to_rpc, args_from_rpc=_ingest_from_rpc, creates_owner=True,
        body_schema=_INGEST_SCHEMA,
        answers={201: "one new job stored", 200: "a replay, or a list of jobs",
                 400: "an invalid job or body (nothing stored)",
                 409: "a job_id stored (or repeated) with other cargo (nothing stored)"},
        reply_shape='`{"job_id", "status"}`, or `{"jobs": [{"job_id", "status"}, ...]}`',
        to_http=_ingest_to_http,
        from_http=lambda body: [item["status"] for item in body["jobs"]],
        idempotent=True),
    Operation(
        "read", "GET", ("jobs", "{job_id}"), "Read one job",
        _job_id, _reply_read,
        result_to_wire=_optional_record, result_from_wire=_optional_record_from,
        answers={200: "the job", 404: "no such job"},
        reply_shape='`{"job": {...}}`',
        from_http=lambda body: wire.record_from_wire(body["job"]),
        none_when="job_not_found", idempotent=True),
    Operation(
        "explain", "GET", ("jobs", "{job_id}", "why"),
        "Why a job is not running yet: its state and, while queued, every hold that "
        "applies (not due until, queue paused, its queue's running job, the job ahead of "
        "it, the owner busy); none means the next tick may claim it",
        _job_id, _reply_explain,
        result_to_wire=lambda result: None if result is None else wire.job_wait_to_wire(result),
        result_from_wire=lambda value: None if value is None else wire.job_wait_from_wire(value),
        answers={200: "the job's state and holds", 404: "no such job"},
        reply_shape='`{"job_id", "state", "holds": [{"kind", "until", "job_ids", "text"}], '
                    '"read_at"}`',
        from_http=wire.job_wait_from_wire, none_when="job_not_found", idempotent=True),
    Operation(
        "cancel", "POST", ("jobs", "{job_id}", "cancel"),
        "Record a durable cancellation; a running execution is told to stop",
        _decode_cancel,
        lambda args, context, result: Reply(CANCEL_STATUS[result.status],
                                            wire.cancel_to_wire(result)),
        result_to_wire=wire.cancel_to_wire,
        result_from_wire=wire.cancel_from_wire,
        body_schema=_CANCEL_SCHEMA,
        answers={200: "recorded, or replayed", 404: "no such job",
                 409: "already settled, refused (only_if_queued) or another cancellation"},
        reply_shape='`{"job_id", "status"}`',
        to_http=lambda args: ((args[0],), {"cancellation_id": args[1],
                                           "only_if_queued": args[2]}),
        from_http=wire.cancel_from_wire, idempotent=True),
    Operation(
        "status", "GET", ("queues",),
        "Job counts of every queue (reads every stored job)",
        _nothing,
        lambda args, context, result: Reply(200, {"queues": _statuses_to_wire(result)}),
        result_to_wire=_statuses_to_wire, result_from_wire=_statuses_from_wire,
        answers={200: "one entry per queue that has jobs"},
        reply_shape=('`{"queues": [{"queue", "queued", "running", "settled", "outcomes", '
                     '"delayed", "paused"}, ...]}`'),
        from_http=lambda body: _statuses_from_wire(body["queues"]), idempotent=True),
    Operation(
        "queue_status", "GET", ("queues", "{queue}"), "Job counts of one queue",
        _queue,
        lambda args, context, result: Reply(200, {"queue": wire.status_to_wire(result)}),
        result_to_wire=wire.status_to_wire, result_from_wire=wire.status_from_wire,
        answers={200: "the counts (all zero for a queue without jobs)"},
        reply_shape=('`{"queue": {"queue", "queued", "running", "settled", "outcomes", '
                     '"delayed", "paused"}}`'),
        from_http=lambda body: wire.status_from_wire(body["queue"]), idempotent=True),
    Operation(
        "backlog", "GET", ("backlog",),
        "Every queue's ready, delayed and running jobs and how long its oldest ready job "
        "has waited, from the indexes of unsettled jobs only (cheap enough to poll)",
        _nothing,
        lambda args, context, result: Reply(200, {"queues": _backlogs_to_wire(result)}),
        result_to_wire=_backlogs_to_wire, result_from_wire=_backlogs_from_wire,
        answers={200: "one entry per queue with unsettled jobs, by queue name"},
        reply_shape=('`{"queues": [{"queue", "ready", "delayed", "running", '
                     '"oldest_ready_at", "oldest_ready_age_ms", "read_at"}, ...]}`'),
        from_http=lambda body: _backlogs_from_wire(body["queues"]), idempotent=True),
    Operation(
        "read_queue_head", "GET", ("queues", "{queue}", "head"),
        "The queue's running job, else its next waiting one",
        _queue,
        lambda args, context, record: Reply(200, {"queue": args[0],
                                                  "head": _optional_record(record)}),
        result_to_wire=_optional_record, result_from_wire=_optional_record_from,
        answers={200: "the head, or null"},
        reply_shape='`{"queue", "head": {...} or null}`',
        from_http=lambda body: _optional_record_from(body["head"]), idempotent=True),
    Operation(
        "purge", "POST", ("queues", "{queue}", "purge"),
        "Delete the queue's queued jobs; running and settled ones stay",
        _decode_queue_action,
        lambda args, context, deleted: Reply(200, {"queue": args[0], "purged": deleted}),
        result_to_wire=_same, result_from_wire=_same,
        body_schema=_EMPTY_SCHEMA, answers={200: "how many were deleted"},
        reply_shape='`{"queue", "purged"}`',
        to_http=lambda args: ((args[0],), {}), from_http=lambda body: body["purged"]),
    # It may be the first call for an owner (pause before the first job).
    _pausing("pause", "Pause the queue: no tick claims its jobs until it is resumed",
             paused=True, creates_owner=True),
    _pausing("resume", "Resume a paused queue", paused=False),
    Operation(
        "dead_letters", "GET", ("queues", "{queue}", "dead-letters"),
        "One page of the queue's dead letters (failed, outcome_unknown, interrupted), "
        "newest first",
        _decode_dead_letters,
        lambda args, context, page: Reply(200, {"queue": args[0],
                                                **wire.dead_letters_to_wire(page)}),
        result_to_wire=wire.dead_letters_to_wire, result_from_wire=wire.dead_letters_from_wire,
        # The queue, the limit and the cursor (or null) cross RPC as JSON text.
        args_to_rpc=_each_as_json_text, args_from_rpc=_each_from_json_text,
        query_params={
            "limit": ({"type": "integer", "minimum": 1, "maximum": MAX_DEAD_LETTER_PAGE,
                       "default": 50}, "jobs per page"),
            "cursor": ({"type": "string"}, "the cursor of the previous page")},
        answers={200: "up to limit jobs, newest settlement first; cursor (for the next "
                      "page) is null on the last page"},
        reply_shape='`{"queue", "jobs": [{...}, ...], "cursor"}`',
        to_http=_dead_letters_to_http, from_http=wire.dead_letters_from_wire,
        idempotent=True),
    Operation(
        "history", "GET", ("history",),
        "What happened to a queue's jobs over time: per bucket, jobs enqueued, started, "
        "completed, failed, cancelled and retried, and the sampled depth (counted up to "
        "10,000: depth_capped says there were more) and head job's wait",
        _decode_history, _reply_history,
        result_to_wire=_optional(wire.history_to_wire),
        result_from_wire=_optional(wire.history_from_wire),
        # The queue, since (or null) and the bucket cross RPC as JSON text.
        args_to_rpc=_each_as_json_text, args_from_rpc=_each_from_json_text,
        query_params={
            "queue": ({"type": "string"}, "the queue"),
            "since": ({"type": "integer", "minimum": 0},
                      f"epoch ms, not in the future (default: {DEFAULT_HISTORY_MS // 60_000} "
                      "minutes ago)"),
            "bucket": ({"type": "integer", "enum": list(HISTORY_BUCKETS), "default": 60},
                       f"seconds per point; at most {MAX_HISTORY_POINTS} points")},
        answers={200: "every bucket from since's to now's, oldest first",
                 400: "since in the future or too far back for the bucket, or a bucket "
                      "not allowed",
                 404: "no history of the queue"},
        reply_shape=('`{"queue", "bucket", "since", "read_at", "points": [{"at", "enqueued", '
                     '"started", "completed", "failed", "cancelled", "retried", "depth", '
                     '"oldest_age_ms", "depth_capped"}, ...]}`'),
        to_http=_history_to_http, from_http=wire.history_from_wire,
        none_when="queue_not_found", idempotent=True),
    Operation(
        "list_jobs", "GET", ("jobs",),
        "One page of the jobs of a queue or a lane in one state (settled ones "
        "optionally of one outcome), newest or oldest first",
        _decode_list_jobs,
        lambda args, context, page: Reply(200, wire.job_page_to_wire(page)),
        result_to_wire=wire.job_page_to_wire, result_from_wire=wire.job_page_from_wire,
        # Every argument (a string, null or the limit) crosses RPC as JSON text.
        args_to_rpc=_each_as_json_text, args_from_rpc=_each_from_json_text,
        query_params={
            "queue": ({"type": "string"}, "the queue (give exactly one of queue and lane)"),
            "lane": ({"type": "string"}, "the lane"),
            "state": ({"type": "string", "enum": ["queued", "running", "settled"],
                       "default": "queued"}, "the jobs' state"),
            "outcome": ({"type": "string", "enum": list(OUTCOMES)},
                        "only settled jobs of this outcome (state=settled)"),
            "order": ({"type": "string", "enum": ["newest", "oldest"], "default": "newest"},
                      "queued and running jobs go by enqueue order, settled ones by "
                      "settlement"),
            "limit": ({"type": "integer", "minimum": 1, "maximum": MAX_JOB_PAGE,
                       "default": 50}, "jobs per page"),
            "cursor": ({"type": "string"}, "the cursor of the previous page")},
        answers={200: "up to limit jobs; cursor (for the next page) is null on the last "
                      "page"},
        reply_shape='`{"jobs": [{...}, ...], "cursor"}`',
        to_http=_list_jobs_to_http, from_http=wire.job_page_from_wire,
        idempotent=True),
    Operation(
        "find_jobs", "GET", ("jobs-by-id",),
        "One page of the jobs whose id starts with id_prefix, whatever their queue or "
        "state, in id order",
        _decode_find_jobs,
        lambda args, context, page: Reply(200, wire.job_page_to_wire(page)),
        result_to_wire=wire.job_page_to_wire, result_from_wire=wire.job_page_from_wire,
        # The prefix, the limit and the cursor (or null) cross RPC as JSON text.
        args_to_rpc=_each_as_json_text, args_from_rpc=_each_from_json_text,
        query_params={
            "id_prefix": ({"type": "string", "minLength": 1, "maxLength": 256},
                          "the start of the job ids (a whole id finds that job alone, "
                          "and any whose id it begins)"),
            "limit": ({"type": "integer", "minimum": 1, "maximum": MAX_JOB_PAGE,
                       "default": 50}, "jobs per page"),
            "cursor": ({"type": "string"}, "the cursor of the previous page")},
        required_query=("id_prefix",),
        answers={200: "up to limit jobs, by job id (code point order); cursor (for the "
                      "next page) is null on the last page"},
        reply_shape='`{"jobs": [{...}, ...], "cursor"}`',
        to_http=_find_jobs_to_http, from_http=wire.job_page_from_wire,
        idempotent=True),
    Operation(
        "read_settled", "GET", ("settled",),
        "The settled feed of an owner: settled jobs in enqueue order after after_sequence, "
        "stopping before the first job not settled yet",
        _decode_read_settled,
        lambda args, context, jobs: Reply(200, {"jobs": [wire.record_to_wire(job)
                                                         for job in jobs]}),
        perform=lambda runtime, limit, after: _settled_feed(runtime)(limit, after),
        result_to_wire=lambda jobs: [wire.record_to_wire(job) for job in jobs],
        result_from_wire=lambda value: [wire.record_from_wire(job) for job in value],
        # Two integers cross RPC as JSON text (an int near 2**53 would be a BigInt).
        args_to_rpc=_each_as_json_text, args_from_rpc=_each_from_json_text,
        query_params={
            "limit": ({"type": "integer", "minimum": 1, "maximum": READ_SETTLED_MAX_LIMIT,
                       "default": 100}, "jobs at most"),
            "after_sequence": ({"type": "integer", "minimum": 0, "default": 0},
                               "the sequence of the last job read")},
        answers={200: "settled jobs in enqueue order; read on with the last one's sequence",
                 404: "the shared queues have no settled feed (not_available)"},
        reply_shape='`{"jobs": [{...}, ...]}`',
        to_http=lambda args: ((), {"limit": str(args[0]), "after_sequence": str(args[1])}),
        from_http=lambda body: [wire.record_from_wire(job) for job in body["jobs"]],
        idempotent=True),
    Operation(
        "ready", "GET", ("ready",),
        "Readiness: read the scope's store (an owner's storage, or D1 or PostgreSQL) now",
        _decode_ready,
        lambda args, context, schema_version: Reply(200, {
            "ready": True, "schema_version": schema_version, "version": VERSION}),
        perform=_check_ready,
        result_to_wire=_same, result_from_wire=_same,
        answers={200: "the store answered, at the schema version this package needs",
                 503: "the store did not answer, or its schema is not this package's "
                      "(not_ready)"},
        reply_shape='`{"ready": true, "schema_version", "version"}`',
        to_http=lambda args: ((), None), from_http=lambda body: body["schema_version"],
        idempotent=True),
    Operation(
        "redrive", "POST", ("jobs", "{job_id}", "redrive"),
        "Queue a dead letter again as a new attempt chain; replay-safe by redrive_id",
        _decode_redrive,
        lambda args, context, result: Reply(REDRIVE_STATUS[result.status],
                                            wire.redrive_to_wire(result)),
        result_to_wire=wire.redrive_to_wire, result_from_wire=wire.redrive_from_wire,
        body_schema=_REDRIVE_SCHEMA,
        answers={200: "redriven, or replayed", 404: "no such job",
                 409: "refused: reason is not_settled, not_dead or cancellation_recorded"},
        reply_shape='`{"job_id", "status", "reason"}`',
        to_http=lambda args: ((args[0],), {"redrive_id": args[1]}),
        from_http=wire.redrive_from_wire, idempotent=True),
    Operation(
        "redrive_dead_letters", "POST", ("queues", "{queue}", "dead-letters", "redrive"),
        "Redrive one page of the queue's dead letters (up to limit, newest first, after "
        "cursor) under one redrive_id; a job the id was applied to is replayed, never "
        "redriven twice",
        _decode_redrive_dead_letters,
        lambda args, context, result: Reply(200, wire.redriven_to_wire(result)),
        result_to_wire=wire.redriven_to_wire, result_from_wire=wire.redriven_from_wire,
        body_schema=_REDRIVE_DEAD_LETTERS_SCHEMA,
        answers={200: "the page's counts; cursor (for the next page) is null after the "
                      "last"},
        reply_shape='`{"queue", "redriven", "replayed", "refused", "cursor"}`',
        to_http=lambda args: ((args[0],), {"redrive_id": args[1], "limit": args[2],
                                           "cursor": args[3]}),
        from_http=wire.redriven_from_wire, idempotent=True),
    Operation(
        "put_schedule", "POST", ("schedules",),
        "Create a schedule, or replace the one of its name",
        _decode_schedule,
        lambda args, context, status: Reply(201 if status == "created" else 200,
                                            {"name": args[0].name, "status": status}),
        result_to_wire=_same, result_from_wire=_same,
        args_to_rpc=lambda args: (wire.to_json_text(wire.schedule_to_wire(args[0])),),
        args_from_rpc=lambda args: (wire.schedule_from_wire(_json_from_rpc(args[0])),),
        creates_owner=True, body_schema=_SCHEDULE_SCHEMA,
        answers={201: "created", 200: "replaced (afresh from its next slot after now), or "
                                      "unchanged (the same definition)"},
        reply_shape='`{"name", "status"}`',
        to_http=lambda args: ((), wire.schedule_to_wire(args[0])),
        from_http=lambda body: body["status"], idempotent=True),
    Operation(
        "schedules", "GET", ("schedules",), "Every schedule, by name, with its next slot",
        _nothing,
        lambda args, context, records: Reply(200, {"schedules": _records_to_wire(records)}),
        result_to_wire=_records_to_wire, result_from_wire=_records_from_wire,
        answers={200: "the schedules"},
        reply_shape='`{"schedules": [{"name", "cron", "every_ms", "catch_up", "job", '
                    '"next_at", "paused", "created_at", "updated_at"}, ...]}`',
        from_http=lambda body: _records_from_wire(body["schedules"]), idempotent=True),
    _schedule_action("pause_schedule", "Pause a schedule: its slots get no job",
                     "changed says whether this call paused it"),
    _schedule_action("resume_schedule",
                     "Resume a paused schedule from its next slot after now",
                     "changed says whether it was paused"),
    _schedule_action("delete_schedule", "Delete a schedule; the jobs it created stay",
                     "changed says whether there was one"),
    Operation(
        "retention", "GET", ("retention",),
        "Every retention policy in force: the scope's default first, then each queue's own",
        _nothing,
        lambda args, context, policies: Reply(200, {"policies": _policies_to_wire(policies)}),
        result_to_wire=_policies_to_wire, result_from_wire=_policies_from_wire,
        answers={200: "the policies; the default's updated_at is null while it is the "
                      "built-in one"},
        reply_shape='`{"policies": [{"queue", "keep_completed_ms", "keep_failed_ms", '
                    '"updated_at"}, ...]}`',
        from_http=lambda body: _policies_from_wire(body["policies"]), idempotent=True),
    Operation(
        "storage", "GET", ("storage",),
        "What the scope's store holds: its size in bytes (null on D1) and each tickwork "
        "table's row count (reads every row: not for a probe polled every few seconds)",
        _nothing,
        lambda args, context, report: Reply(200, wire.storage_to_wire(report)),
        result_to_wire=wire.storage_to_wire, result_from_wire=wire.storage_from_wire,
        answers={200: "the size (pages in use; a Durable Object's databaseSize) and the "
                      "row counts by table"},
        reply_shape='`{"size_bytes", "rows": {"tickwork_jobs", ...}}`',
        from_http=wire.storage_from_wire, idempotent=True),
    Operation(
        "set_retention", "POST", ("retention",),
        "Keep a queue's settled jobs (or, with queue null, every queue's without a policy "
        "of its own) this long after they settle; null keeps them forever",
        _decode_set_retention,
        lambda args, context, changed: Reply(200, {"queue": args[0], "changed": changed}),
        result_to_wire=_same, result_from_wire=_same,
        # The queue (or null) and the two times (or null) cross RPC as JSON text.
        args_to_rpc=_each_as_json_text, args_from_rpc=_each_from_json_text,
        creates_owner=True, body_schema=_SET_RETENTION_SCHEMA,
        answers={200: "changed says whether this call changed the stored policy",
                 400: "a bad queue or time (nothing stored)"},
        reply_shape='`{"queue", "changed"}`',
        to_http=_set_retention_to_http, from_http=lambda body: body["changed"],
        idempotent=True),
    Operation(
        "clear_retention", "POST", ("retention", "clear"),
        "Remove a queue's retention policy (it follows the default again), or with queue "
        "null the scope's default (the built-in one applies again)",
        _decode_clear_retention,
        lambda args, context, changed: Reply(200, {"queue": args[0], "changed": changed}),
        result_to_wire=_same, result_from_wire=_same,
        args_to_rpc=_each_as_json_text, args_from_rpc=_each_from_json_text,
        body_schema=_CLEAR_RETENTION_SCHEMA,
        answers={200: "changed says whether there was a policy"},
        reply_shape='`{"queue", "changed"}`',
        to_http=_clear_retention_to_http, from_http=lambda body: body["changed"],
        idempotent=True),
    Operation(
        "limits", "GET", ("limits",),
        "Every concurrency limit stored: queues first, then lanes, each by key (a queue "
        "not listed runs one job at a time; a lane not listed has no limit of its own)",
        _nothing,
        lambda args, context, limits: Reply(200, {"limits": _limits_to_wire(limits)}),
        result_to_wire=_limits_to_wire, result_from_wire=_limits_from_wire,
        answers={200: "the limits"},
        reply_shape='`{"limits": [{"kind", "key", "max_running", "updated_at"}, ...]}`',
        from_http=lambda body: _limits_from_wire(body["limits"]), idempotent=True),
    Operation(
        "set_limit", "POST", ("limits",),
        "Let at most max_running jobs of a queue (kind queue) or of a lane across every "
        "queue (kind lane) run at once; running jobs are never stopped",
        _decode_set_limit,
        lambda args, context, changed: Reply(200, {"kind": args[0], "key": args[1],
                                                   "changed": changed}),
        result_to_wire=_same, result_from_wire=_same,
        args_to_rpc=_each_as_json_text, args_from_rpc=_each_from_json_text,
        creates_owner=True, body_schema=_SET_LIMIT_SCHEMA,
        answers={200: "changed says whether this call changed the stored limit",
                 400: "a bad kind, key or max_running (nothing stored)"},
        reply_shape='`{"kind", "key", "changed"}`',
        to_http=_set_limit_to_http, from_http=lambda body: body["changed"],
        idempotent=True),
    Operation(
        "clear_limit", "POST", ("limits", "clear"),
        "Remove a limit: the queue runs one job at a time again, the lane has no limit of "
        "its own",
        _decode_limit_key,
        lambda args, context, changed: Reply(200, {"kind": args[0], "key": args[1],
                                                   "changed": changed}),
        result_to_wire=_same, result_from_wire=_same,
        args_to_rpc=_each_as_json_text, args_from_rpc=_each_from_json_text,
        body_schema=_LIMIT_KEY_SCHEMA,
        answers={200: "changed says whether there was a limit",
                 400: "a bad kind or key"},
        reply_shape='`{"kind", "key", "changed"}`',
        to_http=_limit_key_to_http, from_http=lambda body: body["changed"],
        idempotent=True),
    Operation(
        "rate_limits", "GET", ("rate-limits",),
        "Every rate limit, and every hold an executor's RateLimited put in force: queues "
        "first, then lanes, each by key, with when each next lets a job start",
        _nothing,
        lambda args, context, limits: Reply(200, {"rate_limits":
                                                  _rate_limits_to_wire(limits)}),
        result_to_wire=_rate_limits_to_wire, result_from_wire=_rate_limits_from_wire,
        answers={200: "the rate limits and holds"},
        reply_shape=('`{"rate_limits": [{"kind", "key", "starts", "period_ms", "burst", '
                     '"next_start_at", "held_until", "updated_at"}, ...]}`'),
        from_http=lambda body: _rate_limits_from_wire(body["rate_limits"]),
        idempotent=True),
    Operation(
        "set_rate_limit", "POST", ("rate-limits",),
        "Let a queue (kind queue) or a lane across every queue (kind lane) start at most "
        "starts jobs per period_ms, burst of them at once (default: starts); checked and "
        "spent by every claim",
        _decode_set_rate_limit,
        lambda args, context, changed: Reply(200, {"kind": args[0], "key": args[1],
                                                   "changed": changed}),
        result_to_wire=_same, result_from_wire=_same,
        args_to_rpc=_each_as_json_text, args_from_rpc=_each_from_json_text,
        creates_owner=True, body_schema=_SET_RATE_LIMIT_SCHEMA,
        answers={200: "changed says whether this call changed the stored rate limit",
                 400: "a bad kind, key, starts, period_ms or burst (nothing stored)"},
        reply_shape='`{"kind", "key", "changed"}`',
        to_http=_set_rate_limit_to_http, from_http=lambda body: body["changed"],
        idempotent=True),
    Operation(
        "clear_rate_limit", "POST", ("rate-limits", "clear"),
        "Remove a rate limit and any hold on its key: its jobs start as fast as claims "
        "take them",
        _decode_limit_key,
        lambda args, context, changed: Reply(200, {"kind": args[0], "key": args[1],
                                                   "changed": changed}),
        result_to_wire=_same, result_from_wire=_same,
        args_to_rpc=_each_as_json_text, args_from_rpc=_each_from_json_text,
        body_schema=_LIMIT_KEY_SCHEMA,
        answers={200: "changed says whether there was a rate limit or a hold",
                 400: "a bad kind or key"},
        reply_shape='`{"kind", "key", "changed"}`',
        to_http=_limit_key_to_http, from_http=lambda body: body["changed"],
        idempotent=True),
    Operation(
        "fail_lane", "POST", ("lanes", "{lane}", "fail"),
        "Settle up to 256 of the lane's queued and running jobs as failed",
        _decode_fail_lane,
        lambda args, context, result: Reply(200, {"lane": args[0],
                                                  **wire.fail_lane_to_wire(result)}),
        result_to_wire=wire.fail_lane_to_wire, result_from_wire=wire.fail_lane_from_wire,
        body_schema=_FAIL_LANE_SCHEMA,
        answers={200: "how many were settled, and whether more remain (call again)"},
        reply_shape='`{"lane", "settled", "more"}`',
        to_http=lambda args: ((args[0],), {"reason": args[1]}),
        from_http=wire.fail_lane_from_wire),
    Operation(
        "cancel_lane", "POST", ("lanes", "{lane}", "cancel"),
        "Cancel one page of the lane's queued jobs (up to limit, oldest first, after "
        "cursor) under one cancellation_id; a job that started meanwhile keeps running, "
        "and a replay changes nothing",
        _decode_cancel_lane,
        lambda args, context, result: Reply(200, wire.lane_cancelled_to_wire(result)),
        result_to_wire=wire.lane_cancelled_to_wire,
        result_from_wire=wire.lane_cancelled_from_wire,
        body_schema=_CANCEL_LANE_SCHEMA,
        answers={200: "the page's counts; cursor (for the next page) is null after the "
                      "last"},
        reply_shape='`{"lane", "cancelled", "replayed", "skipped", "cursor"}`',
        to_http=lambda args: ((args[0],), {"cancellation_id": args[1], "limit": args[2],
                                           "cursor": args[3]}),
        from_http=wire.lane_cancelled_from_wire, idempotent=True),
)

#: Operations by name.
BY_NAME: Final = {operation.name: operation for operation in OPERATIONS}


# ------------------------------------------------------ the directory of owners


def _decode_list_owners(args: Sequence[str], query: Any) -> tuple[tuple[Any, ...], Any]:
    """A GET's query (strings, as sent) as one ``OwnerQuery``, checked whole."""
    given = wire.fields({} if query is None else query, "query", (),
                        ("prefix", "sort", "cursor", "limit"))
    limit = _query_int(given, "limit", DEFAULT_OWNER_PAGE, 1, MAX_OWNER_PAGE)
    return (OwnerQuery(given.get("prefix", ""), given.get("sort", "key"), given.get("cursor"),
                       limit),), None


def _list_owners_to_http(args: tuple[Any, ...]) -> tuple[tuple[str, ...], Any]:
    query: OwnerQuery = args[0]
    fields = {"sort": query.sort, "limit": str(query.limit)}
    if query.prefix:
        fields["prefix"] = query.prefix
    if query.cursor is not None:
        fields["cursor"] = query.cursor
    return (), fields


#: ``GET /v1/owners``: one page of the directory of owners. Not a scope's
#: operation (it reads across owners), so it is not in ``OPERATIONS``: the
#: routes, the OpenAPI document and the clients take it from here; each
#: host serves it with its own directory (``JobApi(directory=...)``), whose
#: ``list_owners(query)`` performs it.
LIST_OWNERS: Final = Operation(
    "list_owners", "GET", (),
    "One page of the directory of owners, each with its summary (queued, running, "
    "overdue, dead letters, last activity), by key or largest first",
    _decode_list_owners,
    lambda args, context, page: Reply(200, page_to_wire(page)),
    perform=lambda directory, query: directory.list_owners(query),
    result_to_wire=page_to_wire, result_from_wire=page_from_wire,
    query_params={
        "prefix": ({"type": "string", "maxLength": 256, "default": ""},
                   "only the owners whose key starts with it"),
        "sort": ({"type": "string", "enum": list(SORTS), "default": "key"},
                 "key (in code point order), or a count or last_activity, largest first"),
        "limit": ({"type": "integer", "minimum": 1, "maximum": MAX_OWNER_PAGE,
                   "default": DEFAULT_OWNER_PAGE}, "owners per page"),
        "cursor": ({"type": "string"}, "the cursor of the previous page (same sort)")},
    answers={200: "up to limit owners; cursor (for the next page) is null on the last page; "
                  "each summary is as of its summarised_at (at most a minute old while the "
                  "owner changes)"},
    reply_shape='`{"owners": [{"key", "queued", "running", "overdue", "dead_letters", '
                '"last_activity_at", "summarised_at"}, ...], "cursor"}`',
    to_http=_list_owners_to_http, from_http=page_from_wire, idempotent=True)
