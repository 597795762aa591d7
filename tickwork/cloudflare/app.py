"""The Worker's side: the /v1 API over a Worker's bindings, and the cron firing.

``handle_fetch(env, request, executors=..., domain_statements=...,
on_shared_write=...)`` answers one request; ``run_cron(env, controller,
executors=...)`` runs one cron firing. ``executors`` is the deployment's ``(env) -> Executor``
(an ``ExecutorRegistry`` builder); ``TickworkWorker`` (``tickwork.cloudflare``)
wires both into a ``WorkerEntrypoint``.

Bindings (see ``wrangler.toml``):

* ``TICKWORK_TOKEN`` (a secret: ``wrangler secret put TICKWORK_TOKEN``): the
  bearer token of every /v1 route but health. Missing: those routes answer
  503 (fail closed).
* ``JOB_OWNERS``: the ``JobOwner`` Durable Object namespace. ``/v1/owners/{owner}/...``
  goes to ``RpcService(env.JOB_OWNERS.getByName(owner))``.
* ``DB``: the D1 database of the shared queues (``/v1/shared/...``) and of
  the directory of owners (``GET /v1/owners``, the ``tickwork_owners`` table
  each ``JobOwner`` writes its row to), with ``schema/d1`` applied
  (``wrangler d1 migrations apply DB``).

Requests: the head is checked first (``JobApi.refuse_early``: token, then
route and method, then a declared content-length over the limit, 413), so a
refused request's body is never buffered or parsed: it is drained (up to
``REFUSED_BODY_DRAIN_BYTES``) or cancelled, so its 4xx reaches the client
and a keep-alive connection stays usable (``discard_body``). Only an
accepted request's body is read (and its size checked again).

Shared enqueue commits the jobs together with the deployment's own rows:
the optional ``domain_statements(env, jobs)`` returns D1 statements, and
``D1Runtime.ingest_many(jobs, before=statements)`` sends them first in the
jobs' ONE ``db.batch`` (one round trip, one transaction): both commit, or
neither does. A job replayed with other cargo fails the whole batch (409
``ingest_conflict``, none of the domain rows stored); a failing domain
statement stores no job (500: the error is the deployment's own).

The API's ``D1Runtime`` is kept per D1 binding for the isolate's life
(``api_runtime``), so only an isolate's first shared request pays the
schema-check query.

A cron firing (``run_cron``) fills the schedule slots and prunes under
``JobLock(env.DB)``, one slot per firing, so overlapping or repeated firings
do that work once; then it drains the shared D1 queues within ``CRON_DRAIN``
without the lock (``tickwork.cloudflare.shared_drains``: every claim is
fenced, and the drain after a write and the pump drain at the same time).
Budget, against D1's 1,000 queries per invocation (Workers Paid) and 30 s
per query:

* the drain costs 1 query for the schema check, 2 for the first claim (a
  batch of claim and probe), then 2 per job (each settlement and the next
  claim share a batch), and 1 for the next-work read after it; a rare tick
  that recovers an expired lease or settles a cancelled job costs up to 3
  more; renewals cost 1 per job per 10 s of its run time; the lock and its
  slot work cost about 8 (tables, acquire, slots, prune, release);
* so ``CRON_MAX_TICKS = 100`` is at most ~6 queries a tick even on the slow
  path, about 600 plus renewals: well inside 1,000. The common path is ~2
  a job (~200). Each webhook job adds one ``fetch`` subrequest.
* ``CRON_CONCURRENCY = 4`` loops drain at once (``drain(concurrency=)``):
  up to 4 jobs of different queues run together, each under its own lease
  (a queue's jobs still run one at a time). The ticks are shared out between
  the loops, so the query budget above is the same. A webhook job's fetch
  is one of the 6 connections an invocation may have waiting for response
  headers at once (Cloudflare queues a seventh until one answers), so 4
  leaves room for D1. ``TICKWORK_CRON_CONCURRENCY`` (1 to
  ``MAX_DRAIN_CONCURRENCY``) changes it; 1 runs one job at a time.
* ``CRON_BUDGET_MS = 20_000`` stops claiming after 20 s (a claim already
  taken still runs: a webhook is bounded by its 30 s timeout), inside the
  cron's 30 s CPU limit (the drain mostly waits on I/O, which is not CPU)
  and far inside the 15 min wall-clock limit of a scheduled event.
* the prune pass (``tickwork.runtimes.pruning``) costs 3 queries, 1 per
  queue with settled history and 1 more per queue with jobs to delete, per
  batch of 500 (at most 4 batches): a few dozen with a dozen queues.
* The Workers Free plan allows 50 queries per invocation: set the variables
  ``TICKWORK_CRON_MAX_TICKS = "10"`` (and maybe ``TICKWORK_CRON_BUDGET_MS``)
  in ``[vars]``; ~6 a tick x 10 + ~10 stays under 50.

Errors: the API answers refusals itself (4xx with ``{"error": {...}}``);
anything unexpected becomes a 500 ``internal_error`` whose body names no
internals, while the traceback goes to the Worker's log.
"""

from __future__ import annotations

import inspect
import math
import traceback
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from workers import Response  # type: ignore[import-not-found, unused-ignore]

from tickwork import Job
from tickwork._pyodide import load_jsnull
from tickwork.api import MAX_BODY_BYTES, ApiRequest, ApiResponse, JobApi, RpcService, RuntimeService
from tickwork.api.wire import ApiError
from tickwork.cloudflare.bindings import NoWake, binding, event_log, log, log_error, owner_stub
from tickwork.cloudflare.shared_drains import (
    CRON_DRAIN,
    SharedDrain,
    SharedWriteWake,
    drain_shared,
    shared_writes_seen,
)
from tickwork.directory import OwnerPage, OwnerQuery
from tickwork.locks import JobLock, LockRun
from tickwork.model.errors import SchemaError
from tickwork.model.outcomes import IngestStatus
from tickwork.ports.host import Executor
from tickwork.runtimes.d1 import D1Runtime
from tickwork.stores.d1.owner_directory import D1OwnerDirectory

__all__ = [
    "CRON_BUDGET_MS",
    "CRON_CONCURRENCY",
    "CRON_LOCK_NAME",
    "CRON_LOCK_RENEW_MS",
    "CRON_LOCK_TTL_MS",
    "CRON_MAX_TICKS",
    "REFUSED_BODY_DRAIN_BYTES",
    "ApiOwnerDirectory",
    "CronFiring",
    "D1SharedJobs",
    "DomainHook",
    "ExecutorFactory",
    "api_runtime",
    "build_api",
    "cron_slot",
    "discard_body",
    "handle_fetch",
    "read_request",
    "run_cron",
    "to_response",
]

#: Ticks per cron firing (see the module doc for the query budget).
CRON_MAX_TICKS = CRON_DRAIN.max_ticks
#: Stop claiming new jobs after this long in one firing.
CRON_BUDGET_MS = CRON_DRAIN.budget_ms
#: Drain loops a firing runs at once (see the module doc).
CRON_CONCURRENCY = CRON_DRAIN.concurrency
#: The cron firing's lock (its slot work and pruning; the name dates from when it
#: also covered the drain, and is kept so deployments keep their lock rows).
CRON_LOCK_NAME = "tickwork-cron-drain"
CRON_LOCK_TTL_MS = 120_000
CRON_LOCK_RENEW_MS = 30_000

#: A refused request's body is drained up to this many bytes, else cancelled
#: (see ``discard_body``): every body the API could take, and then some.
REFUSED_BODY_DRAIN_BYTES = 4 * MAX_BODY_BYTES

#: The 500 body: nothing about what failed inside.
INTERNAL_ERROR = ApiResponse(500, {"error": {"code": "internal_error",
                                             "message": "internal error"}})

#: ``domain_statements(env, jobs)``: D1 statements (or an awaitable of them)
#: that commit in the same batch as the jobs of a shared ingest.
DomainHook = Callable[[Any, Sequence[Job]], Any]
#: ``executors(env)``: the deployment's executor of every job.
ExecutorFactory = Callable[[Any], Executor]


def api_token(env: Any) -> str | None:
    token = binding(env, "TICKWORK_TOKEN")
    return token if isinstance(token, str) and token else None


# ------------------------------------------------------------- shared jobs


class D1SharedJobs(RuntimeService):
    """The shared queues on D1; ingest commits with the domain statements in one batch."""

    def __init__(self, runtime: D1Runtime, env: Any,
                 domain_statements: DomainHook | None = None) -> None:
        super().__init__(runtime)
        self.env = env
        self.domain_statements = domain_statements

    async def ingest(self, jobs: Sequence[Job]) -> list[IngestStatus]:
        before: list[Any] = []
        if self.domain_statements is not None:
            # JobApi has validated every job, and refused a conflict inside the
            # request, before any service is called: the hook sees valid jobs.
            made = self.domain_statements(self.env, list(jobs))
            if inspect.isawaitable(made):
                made = await made
            before = list(made or [])
        statuses: list[IngestStatus] = await self.runtime.ingest_many(jobs, before=before)
        return statuses


#: The API's runtime per D1 binding, for the isolate's life (see api_runtime).
_API_RUNTIMES: OrderedDict[tuple[str, int], D1Runtime] = OrderedDict()
#: Bindings remembered at once; an isolate normally sees one.
_MAX_API_RUNTIMES = 8


def api_runtime(env: Any, db: Any, executors: ExecutorFactory) -> D1Runtime:
    """The API's ``D1Runtime`` over ``db``, made once per binding in this isolate.

    A runtime checks the schema before its first operation; keeping it saves
    that query on every later request. The API never runs jobs, so its
    executors (built from the first request's env) are never called. Keyed
    by the JS object's identity (``js_id``) where there is one; the runtime
    holds the binding, so a key is never reused while it is remembered.
    """
    js_id = getattr(db, "js_id", None)
    key = ("js", js_id) if isinstance(js_id, int) else ("py", id(db))
    runtime = _API_RUNTIMES.get(key)
    if runtime is not None:
        _API_RUNTIMES.move_to_end(key)
        return runtime
    runtime = D1Runtime(db, execute=executors(env), wake=SharedWriteWake(),
                        on_event=event_log(env))
    _API_RUNTIMES[key] = runtime
    while len(_API_RUNTIMES) > _MAX_API_RUNTIMES:
        _API_RUNTIMES.popitem(last=False)
    return runtime


# --------------------------------------------------------------------- API


class ApiOwnerDirectory(D1OwnerDirectory):
    """The directory of owners as the API reads it: a database without the
    directory's migration answers 503 ``not_ready`` naming it (not a 500)."""

    async def list_owners(self, query: OwnerQuery) -> OwnerPage:
        try:
            return await super().list_owners(query)
        except SchemaError as error:
            raise ApiError(503, "not_ready", str(error)) from None


def build_api(env: Any, *, executors: ExecutorFactory,
              domain_statements: DomainHook | None = None) -> JobApi:
    """The /v1 API over ``env``'s bindings (a scope whose binding is missing
    answers 404 ``scope_not_configured``)."""
    namespace = binding(env, "JOB_OWNERS")
    db = binding(env, "DB")
    owners = None
    if namespace is not None:
        def owners(owner: str) -> RpcService:
            return RpcService(owner_stub(namespace, owner))
    shared = directory = None
    if db is not None:
        shared = D1SharedJobs(api_runtime(env, db, executors), env, domain_statements)
        directory = ApiOwnerDirectory(db)
    return JobApi(token=api_token(env), owners=owners, shared=shared, directory=directory)


async def handle_fetch(env: Any, request: Any, *, executors: ExecutorFactory,
                       domain_statements: DomainHook | None = None,
                       on_shared_write: Callable[[], object] | None = None) -> Any:
    """Answer one HTTP request (``WorkerEntrypoint.fetch``). ``on_shared_write()``
    is called once the answer is built when the request made a write that
    may have made shared work due (``tickwork.cloudflare.shared_drains``)."""
    try:
        api = build_api(env, executors=executors, domain_statements=domain_statements)
        adapted = await read_request(request, api)
        with shared_writes_seen() as shared_write:
            answer = adapted if isinstance(adapted, ApiResponse) else await api.handle(adapted)
        await _flush_api_history(env, executors)
        if on_shared_write is not None and shared_write():
            on_shared_write()
    except Exception:
        log_error("internal error answering a request:\n" + traceback.format_exc())
        answer = INTERNAL_ERROR
        # A body left unread breaks the client's next request on the same
        # connection (see discard_body): drop it, as for a refusal.
        if _method(request) not in ("GET", "HEAD") and not _body_used(request):
            await discard_body(request, None)
    return to_response(answer)


async def _flush_api_history(env: Any, executors: ExecutorFactory) -> None:
    """Write the history counted by this request's writes to the shared
    queues (one statement, after the answer is built): the API's runtime
    lives as long as the isolate, which may go at any time after the
    request. Nothing for a request that counted nothing; no sample (the
    cron drain samples). A failure is logged by the runtime and its counts
    wait for the next request."""
    db = binding(env, "DB")
    if db is None:
        return
    runtime = api_runtime(env, db, executors)
    if runtime.history_pending:
        await runtime.flush_history(sample=False)


def _body_used(request: Any) -> bool:
    used = getattr(request, "body_used", None)
    if used is None:
        used = getattr(getattr(request, "js_object", None), "bodyUsed", False)
    return used is True


def _method(request: Any) -> str:
    method = getattr(request, "method", "GET")
    method = getattr(method, "value", method)  # the SDKs' HTTPMethod
    # As the runtime gives it: method names are case-sensitive.
    return str(method)


def _header(request: Any, name: str) -> str | None:
    value = request.headers.get(name)
    # Both SDKs wrap the request: a missing header is None (measured); anything
    # but a str (a raw JS request's jsnull) counts as missing too.
    return value if isinstance(value, str) else None


async def _body(request: Any) -> bytes:
    reader = getattr(request, "bytes", None)
    data = await reader() if callable(reader) else await request.arrayBuffer()
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    return bytes(data.to_bytes())  # a JS ArrayBuffer / Uint8Array


async def discard_body(request: Any, declared: int | None) -> None:
    """Drop the body of a request answered from its head (a refusal).

    Workers do not discard an unread body for us: after a reply, the runtime
    reads on only a little of what is left (64 KiB, for a second) and
    otherwise closes the connection, so the client may see a reset instead
    of its 4xx, and a keep-alive client's next request fails (in
    ``wrangler dev`` a 503 "worker restarted mid-request"). workerd's
    maintainers found that draining the body avoids this and that
    ``body.cancel()`` alone does not. So a body of up to
    ``REFUSED_BODY_DRAIN_BYTES`` is read to its end chunk by chunk and
    dropped (never buffered, never parsed); a longer one (declared, or found
    while draining) is cancelled, and the runtime may close that connection.
    Best effort: a client that went away is not an error.
    """
    stream = getattr(request, "body", None)
    if stream is None or stream is load_jsnull():
        return
    try:
        if declared is not None and declared > REFUSED_BODY_DRAIN_BYTES:
            await stream.cancel()
            return
        reader = stream.getReader()
        seen = 0
        while not (chunk := await reader.read()).done:
            value = chunk.value
            size = getattr(value, "byteLength", None)
            seen += int(size) if isinstance(size, (int, float)) else len(value)
            if seen > REFUSED_BODY_DRAIN_BYTES:
                await reader.cancel()
                return
    except Exception as error:
        log(f"could not discard a refused request's body ({type(error).__name__}: {error})")


#: The request headers the API reads: the token and body ones, and the
#: dashboard's session cookie and same-origin checks.
_FORWARDED_HEADERS = ("authorization", "content-type", "content-length", "cookie", "origin",
                      "sec-fetch-site")


async def read_request(request: Any, api: JobApi) -> ApiRequest | ApiResponse:
    """The Workers ``Request`` (either SDK) as an ``ApiRequest``, or the refusal
    it gets from its head alone: ``api.refuse_early`` runs before the body is
    read, so a request without the token never has its body parsed or
    buffered (``discard_body`` drops it)."""
    method = _method(request)
    url = urlsplit(str(request.url))
    path = url.path or "/"
    headers = {name: value for name in _FORWARDED_HEADERS
               if (value := _header(request, name)) is not None}
    # The dashboard compares a form's Origin with the host the runtime saw.
    headers["host"] = url.netloc
    has_body = method not in ("GET", "HEAD")
    declared = headers.get("content-length") if has_body else None
    length = None
    if declared is not None and declared.strip().isascii() and declared.strip().isdigit():
        length = int(declared)
    refused = api.refuse_early(method, path, headers, length)
    if refused is None and declared is not None and length is None:
        refused = ApiResponse(400, ApiError(400, "bad_content_length",
                                            "content-length is not a number").to_wire())
    if refused is not None:
        if has_body:
            await discard_body(request, length)
        return refused
    # An undeclared or understated body over the limit is refused by api.handle.
    body = await _body(request) if has_body else b""
    return ApiRequest(method=method, path=path, headers=headers, body=body, query=url.query,
                      scheme=url.scheme or "https",
                      client=_header(request, "cf-connecting-ip") or "")


def to_response(answer: ApiResponse) -> Any:
    """An ``ApiResponse`` as a ``workers.Response``, with every header of the
    answer (the dashboard's ``set-cookie`` and ``location`` too)."""
    return Response(answer.encoded(), status=answer.status, headers=answer.all_headers())


# -------------------------------------------------------------------- cron


def cron_slot(controller: Any) -> str | None:
    """The lock slot of one cron firing: ``"<cron>@<scheduledTime>"``, or None
    when the controller carries no usable time (the lock then still keeps
    overlapping firings apart, but cannot tell a repeat of this one)."""
    try:
        scheduled = getattr(controller, "scheduledTime", None)
        cron = getattr(controller, "cron", None)
    except Exception:
        return None
    if isinstance(scheduled, bool) or not isinstance(scheduled, (int, float)) \
            or not math.isfinite(scheduled) or scheduled != int(scheduled):
        return None
    cron_text = cron[:200] if isinstance(cron, str) else ""
    return f"{cron_text}@{int(scheduled)}"


@dataclass(frozen=True, slots=True)
class CronFiring:
    """What one cron firing did: ``lock`` is the run of its once-per-firing
    work (schedule slots and pruning, under ``JobLock``); ``drain`` its drain
    of the shared queues (None without a drain budget), which runs whether
    or not this firing got the lock."""

    lock: LockRun[int]
    drain: SharedDrain | None


async def run_cron(env: Any, controller: Any, *, executors: ExecutorFactory,
                   now: Callable[[], int] | None = None) -> CronFiring | None:
    """One cron firing (``WorkerEntrypoint.scheduled``): fill the schedule
    slots and prune once per firing, under the cron lock, then drain the
    shared D1 queues within ``CRON_DRAIN``, without it: every claim is
    fenced, so this drain may overlap any other (the pump's, a write's,
    another firing's)."""
    db = binding(env, "DB")
    if db is None:
        log("cron: no DB binding, no shared queues to drain")
        return None
    execute = executors(env)
    runtime = D1Runtime(db, execute=execute, wake=NoWake(), now=now,
                        on_event=event_log(env))

    async def once_per_firing(lease: object) -> int:
        # Under the lock: one firing at a time fills the slots and prunes (a
        # fresh runtime per firing, so every firing runs one pass; the pass
        # logs its own failures). A drain fills due slots too; a slot's job
        # is inserted once whoever fills it.
        await runtime.fire_schedules()
        return await runtime.prune_if_due()

    lock = JobLock(db, on_info=log, on_error=log_error, now=now)
    run = await lock.run(CRON_LOCK_NAME, CRON_LOCK_TTL_MS, once_per_firing,
                         renew_every_ms=CRON_LOCK_RENEW_MS, slot=cron_slot(controller))
    if not run.ran:
        log(f"cron: slot work skipped ({run.reason})")
    elif run.lost:
        log_error(f"cron: lock lost while filling slots and pruning: {run.lost}")
    drained = await drain_shared(env, execute, CRON_DRAIN.from_env(env), now=now,
                                 on_event=event_log(env))
    if drained is not None:
        log(f"cron: {len(drained.ticks)} tick(s), {drained.settled} job(s) settled, "
            f"{run.result or 0} settled job(s) pruned")
    return CronFiring(run, drained)
