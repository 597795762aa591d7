"""The dashboard: server-rendered HTML of a scope's queues, behind the API token.

Sans-I/O like the rest of ``tickwork.api``: ``JobApi`` hands it the requests
of its paths and it answers with bytes; it renders and acts only through the
scope's ``JobService``, so the Worker (D1, Durable Objects over RPC) and
``tickwork serve`` (owner files, PostgreSQL) serve the same pages.

Paths (``docs/how-to/use-the-dashboard.md``):

* ``GET /v1/dashboard``: the login form (no job data), or once logged in
  the scope picker; ``POST /v1/dashboard/login`` (form field ``token``)
  sets the session cookie; ``POST /v1/dashboard/logout`` clears it;
  ``GET /v1/dashboard/open?owner=KEY`` redirects to that owner's page.
* ``GET /v1/dashboard/owners?prefix=&sort=&cursor=``: the directory of
  owners (``tickwork.directory``), a page at a time, each owner with its
  summary and a link to its page; sortable by key or any count, searchable
  by key prefix. Same session or bearer as a scope's page.
* ``GET /v1/shared/dashboard``, ``GET /v1/owners/{owner}/dashboard``: a
  scope's page. Needs the session cookie or ``Authorization: Bearer``;
  without either it redirects to the login form (a wrong bearer token: 401).
* ``GET /v1/{scope}/dashboard/jobs/{job_id}``: a job's page (its cargo,
  state, attempts, what it waits for, its actions);
  ``GET /v1/{scope}/dashboard/search?q=...``: an exact job id redirects to
  its page, else the jobs whose id starts with it, a page at a time;
  ``GET /v1/{scope}/dashboard/queues/{queue}/completed``: a queue's
  completed jobs, newest first, a page at a time. Same access as a scope's page.
* ``POST /v1/{scope}/dashboard/actions/{action}``: cancel, cancel_lane,
  pause, resume, redrive, redrive_dead_letters, pause_schedule,
  resume_schedule, set_limit, clear_limit. Needs the session (or bearer)
  and the form's CSRF field; a cross-site request (``Sec-Fetch-Site``, or an
  ``Origin`` of another host) is refused before anything else.
* ``GET /v1/dashboard/static/dashboard.css`` and ``dashboard.js``: open,
  they hold no data.

Security: the session cookie is its expiry and HMAC-SHA256(token, "tickwork
dashboard session <expiry>"), not the token, so a leaked cookie does not
open the JSON API, ends on its own after ``SESSION_MAX_AGE_S`` and rotating
the token ends every session; ``HttpOnly; SameSite=Strict;
Path=/v1``, ``Secure`` over https. The CSRF field is HMAC-SHA256(token,
"tickwork dashboard csrf"), compared in constant time. Every text from the
store is escaped; pages carry a strict Content-Security-Policy (no inline
script or style: the script is served by the host) and ``no-store``.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import json
import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from tickwork.api import wire
from tickwork.api.service import JobService
from tickwork.api.wire import ApiError
from tickwork.directory import DEAD_LETTER_COUNT_CAP, SORTS, OwnerPage, OwnerQuery
from tickwork.lifecycle.operations import MAX_JOB_PAGE
from tickwork.lifecycle.rules import DEAD_OUTCOMES, decide_holds
from tickwork.model.errors import InvalidArgument
from tickwork.model.jobs import (
    MAX_HISTORY,
    MAX_ID_LENGTH,
    MAX_LANE_LENGTH,
    JobRecord,
    check_id,
    check_text,
)
from tickwork.model.limits import (
    DEFAULT_QUEUE_MAX_RUNNING,
    MAX_RUNNING_LIMIT,
    ConcurrencyLimit,
    check_limit_key,
    check_limit_kind,
    check_max_running,
)
from tickwork.model.outcomes import OUTCOMES, JobPage, QueueHistory, QueueStatus
from tickwork.model.rate_limits import (
    MAX_RATE_PERIOD_MS,
    MAX_RATE_STARTS,
    RateLimit,
    rate_limits_for,
    validate_rate_limit,
)
from tickwork.model.schedules import ScheduleRecord
from tickwork.model.waiting import Hold, JobWait

from .dashboard_assets import STATIC

if TYPE_CHECKING:
    from tickwork.api.routes import ApiRequest, DirectoryOfOwners

#: ("shared", None) or ("owner", key), as ``JobApi`` resolves scopes.
Scope = tuple[str, str | None]
#: (status, body, headers): what ``JobApi`` turns into an ``ApiResponse``.
Answer = tuple[int, bytes, dict[str, str]]

COOKIE_NAME = "tickwork_dashboard"
#: How long a session cookie lives (the browser forgets it then).
SESSION_MAX_AGE_S = 12 * 3600
LOGIN_PATH = "/v1/dashboard"
#: The directory of owners' page.
OWNERS_PATH = "/v1/dashboard/owners"
#: Owners per page of the directory.
OWNERS_PER_PAGE = 50
#: How each sort of the directory reads (its column header).
_SORT_LABELS = {"key": "owner", "queued": "queued", "running": "running",
                "overdue": "overdue", "dead_letters": "dead letters",
                "last_activity": "last activity"}
STATIC_PATH = "/v1/dashboard/static"

#: Queues whose jobs are listed (all of them are counted in the table): each
#: costs a few reads (RPC calls to a Durable Object, D1 queries).
MAX_DETAILED_QUEUES = 20
#: Jobs per list on a queue (queued, running, failures, dead letters).
JOBS_PER_LIST = 10
#: Characters of a payload shown (as JSON), and of an error message.
PAYLOAD_EXCERPT = 160
MESSAGE_EXCERPT = 300
TRACEBACK_EXCERPT = 4000
#: A history chart's drawing area in SVG units (the SVG stretches to its box).
CHART_WIDTH = 300
CHART_HEIGHT = 60
#: The counts the throughput chart draws, one line each, in this order.
THROUGHPUT_SERIES = ("enqueued", "completed", "failed", "retried")

ACTIONS = ("cancel", "cancel_lane", "pause", "resume", "redrive", "redrive_dead_letters",
           "pause_schedule", "resume_schedule", "set_limit", "clear_limit", "set_rate_limit",
           "clear_rate_limit")
#: Lane limits the Lanes section lists (by lane); a scope with more says how
#: many, and the API or ``tickwork queues limits`` lists them all.
MAX_LISTED_LANE_LIMITS = 100
#: Jobs a "waits for" cell links by id; it counts the others.
LINKED_PER_CELL = 3
#: Pages of dead letters (100 each) one "Redrive all" redrives at most; a
#: queue with more says so, and the next press goes on.
REDRIVE_ALL_PAGES = 10
#: Pages of queued jobs (100 each) one "Cancel queued jobs" of a lane
#: cancels at most; a lane with more says so, and the next press goes on.
CANCEL_LANE_PAGES = 10
#: Pages (100 each) one press reads at most, those it only replays included.
LANE_PAGES_READ = 50
#: The cancellation id of every cancel the dashboard makes: one per job, so
#: a second click (or a lane's second press) replays the first.
DASHBOARD_CANCELLATION_ID = "dashboard"

SECURITY_HEADERS = {
    "cache-control": "no-store",
    "content-security-policy": (
        "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; "
        "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    "x-content-type-options": "nosniff",
    # Not no-referrer: with it Chromium sends "Origin: null" on the forms' own
    # POSTs, which the same-origin check must refuse. No referrer leaves the host.
    "referrer-policy": "same-origin",
}

_SESSION_LABEL = b"tickwork dashboard session"
_CSRF_LABEL = b"tickwork dashboard csrf"
#: How each empty list of a queue reads.
_NONE = {"head": "no job ready", "queued": "no other job waiting",
         "running": "no other job running", "failures": "no recent failures",
         "dead": "no dead letters", "completed": "no completed jobs"}
#: How an action's result reads in the flash message after it.
_DONE = {"cancel": "Cancel of job", "pause": "Pause of queue", "resume": "Resume of queue",
         "redrive": "Redrive of job",
         "redrive_dead_letters": "Redrive of every dead letter of queue",
         "cancel_lane": "Cancel of every queued job of lane",
         "pause_schedule": "Pause of schedule", "resume_schedule": "Resume of schedule",
         "set_limit_queue": "Limit of queue", "set_limit_lane": "Limit of lane",
         "clear_limit_queue": "Clearing the limit of queue",
         "clear_limit_lane": "Clearing the limit of lane",
         "set_rate_limit_queue": "Rate limit of queue",
         "set_rate_limit_lane": "Rate limit of lane",
         "clear_rate_limit_queue": "Clearing the rate limit of queue",
         "clear_rate_limit_lane": "Clearing the rate limit of lane"}
_RESULTS = {"recorded": "recorded", "replayed": "already done", "conflict": "conflict",
            "refused": "refused", "not_found": "not found",
            "already_settled": "refused: the job is settled already", "redriven": "redriven",
            "changed": "done", "unchanged": "nothing to change",
            "redriven_some_refused": "redriven, but for jobs that carry a cancellation",
            "more": "redriven 1,000; more remain, press again",
            "cancelled": "cancelled; each settles without running",
            "cancelled_some_skipped": "cancelled, but for jobs that started or were "
                                      "cancelled otherwise meanwhile",
            "skipped": "nothing cancelled: every job started or was cancelled otherwise "
                       "meanwhile",
            "none_queued": "no queued jobs in that lane",
            "more_queued": "cancelled 1,000; more remain, press again",
            "limit_set": "set", "limit_kept": "that limit is stored already",
            "limit_cleared": "done", "no_limit": "it had no limit",
            "rate_limit_cleared": "done", "no_rate_limit": "it had no rate limit or hold"}


@dataclass(frozen=True, slots=True)
class DashboardRoute:
    """A dashboard path: ``page`` is home, login, logout, open, static, scope,
    action, job, search or completed; ``scope`` the scope of a scope's page
    or view or an action; ``name`` the static file, the action, the job id
    (job) or the queue (completed)."""

    page: str
    scope: Scope | None = None
    name: str = ""


def is_dashboard_path(raw: Sequence[str]) -> bool:
    """Whether the path after /v1 (``raw`` segments) is under a dashboard."""
    return (raw[:1] == ["dashboard"] or raw[:2] == ["shared", "dashboard"]
            or (raw[:1] == ["owners"] and len(raw) >= 3 and raw[2] == "dashboard"))


def match(raw: Sequence[str], method: str) -> DashboardRoute | None:
    """The dashboard route of the path after /v1 (``raw``: still
    percent-encoded segments), None when it is no dashboard path; an unknown
    dashboard path is refused (404), a wrong method too (405)."""
    if raw[:1] == ["dashboard"]:
        rest = list(raw[1:])
        if not rest:
            return _allowed(method, "GET", DashboardRoute("home"))
        if rest in (["login"], ["logout"]):
            return _allowed(method, "POST", DashboardRoute(rest[0]))
        if rest == ["open"]:
            return _allowed(method, "GET", DashboardRoute("open"))
        if rest == ["owners"]:
            return _allowed(method, "GET", DashboardRoute("owners"))
        if len(rest) == 2 and rest[0] == "static" and rest[1] in STATIC:
            return _allowed(method, "GET", DashboardRoute("static", name=rest[1]))
        raise _no_page(raw)
    if raw[:2] == ["shared", "dashboard"]:
        scope: Scope = ("shared", None)
        tail = list(raw[2:])
    elif raw[:1] == ["owners"] and len(raw) >= 3 and raw[2] == "dashboard":
        scope = ("owner", check_id("owner", _decode(raw[1])))
        tail = list(raw[3:])
    else:
        return None
    if not tail:
        return _allowed(method, "GET", DashboardRoute("scope", scope))
    if len(tail) == 2 and tail[0] == "actions" and tail[1] in ACTIONS:
        return _allowed(method, "POST", DashboardRoute("action", scope, tail[1]))
    view = _job_view_route(scope, tail, method)
    if view is not None:
        return view
    raise _no_page(raw)


class LoginThrottle:
    """Wrong tokens at the login form, counted in windows of ``window_s``:
    at most ``per_client`` from one client address and ``overall`` from all
    of them together; past either, the form answers 429 with
    ``retry-after`` until the window ends, without looking at the token.

    In memory, per process (per isolate on Workers, so an attacker spread
    over isolates gets a multiple of it): it slows guessing down, it does
    not replace a long random token. A successful login forgets its
    client's failures. At most ``MAX_CLIENTS`` addresses are remembered
    (the oldest forgotten first)."""

    MAX_CLIENTS = 10_000

    def __init__(self, *, per_client: int = 5, overall: int = 100,
                 window_s: float = 60.0) -> None:
        self.per_client = per_client
        self.overall = overall
        self.window_s = window_s
        self._clients: OrderedDict[str, list[float]] = OrderedDict()
        self._all = [0.0, 0.0]  # window start, failures in it

    def retry_after(self, client: str, now_s: float) -> int | None:
        """Seconds until ``client`` may try again, or None when it may now."""
        waits = [self._wait(self._all, self.overall, now_s)]
        known = self._clients.get(client)
        if known is not None:
            waits.append(self._wait(known, self.per_client, now_s))
        longest = max((wait for wait in waits if wait is not None), default=None)
        return None if longest is None else max(1, math.ceil(longest))

    def failed(self, client: str, now_s: float) -> None:
        self._count(self._all, now_s)
        entry = self._clients.pop(client, None) or [now_s, 0.0]
        self._count(entry, now_s)
        self._clients[client] = entry
        while len(self._clients) > self.MAX_CLIENTS:
            self._clients.popitem(last=False)

    def succeeded(self, client: str) -> None:
        self._clients.pop(client, None)

    def _count(self, entry: list[float], now_s: float) -> None:
        if now_s - entry[0] >= self.window_s:
            entry[0], entry[1] = now_s, 0.0
        entry[1] += 1

    def _wait(self, entry: list[float], limit: int, now_s: float) -> float | None:
        if now_s - entry[0] >= self.window_s or entry[1] < limit:
            return None
        return entry[0] + self.window_s - now_s


class Dashboard:
    """The dashboard of one API: ``token`` is the API token (None: every
    page but the static files answers 503), ``service(scope)`` resolves a
    scope's ``JobService`` (``JobApi._service``)."""

    def __init__(self, token: bytes | None,
                 service: Callable[[Scope], Awaitable[JobService]], *,
                 now_s: Callable[[], float] = time.time,
                 throttle: LoginThrottle | None = None) -> None:
        self._token = token
        self._service = service
        self._now_s = now_s
        self._csrf = _derive(token, _CSRF_LABEL) if token else ""
        self.throttle = throttle if throttle is not None else LoginThrottle()

    def session_value(self, expires_s: int) -> str:
        """The session cookie's value for a session ending at ``expires_s``
        (epoch seconds): the expiry and its HMAC under the token, so the
        server, not only the browser, ends a session, and nobody without
        the token can make or extend one."""
        assert self._token is not None
        return f"{expires_s}.{_derive(self._token, _SESSION_LABEL + b' %d' % expires_s)}"

    def _valid_session(self, value: str) -> bool:
        expires, _, _ = value.partition(".")
        if not (expires.isascii() and expires.isdigit() and len(expires) <= 12):
            return False
        if int(expires) <= self._now_s():
            return False
        return hmac.compare_digest(value.encode(), self.session_value(int(expires)).encode())

    async def handle(self, route: DashboardRoute, request: ApiRequest) -> Answer:
        """The answer to ``request`` on ``route``; refusals are HTML pages."""
        try:
            return await self._dispatch(route, request)
        except Exception as error:
            refused = wire.error_for(error)
            if refused is None:
                raise
            return _page(refused.status, "Refused", _error_body(refused), refused.headers)

    async def _dispatch(self, route: DashboardRoute, request: ApiRequest) -> Answer:
        if route.page == "static":
            content_type, body = STATIC[route.name]
            return 200, body, {**SECURITY_HEADERS, "content-type": content_type,
                               "cache-control": "max-age=300"}
        if self._token is None:
            raise ApiError(503, "token_not_configured",
                           "the server has no API token configured; set TICKWORK_TOKEN")
        if route.page == "home":
            if self._authenticated(request):
                return _page(200, "Scopes", self._picker())
            return _page(200, "Log in", _login_form(""))
        if route.page == "open":
            return self._open(request)
        if route.page == "owners":
            if not self._authenticated(request):
                return _redirect(LOGIN_PATH)
            return _page(200, "Owners", await self._owners(request.query))
        if route.page == "login":
            return self._login(request)
        if route.page == "logout":
            _same_origin(request)
            return _redirect(LOGIN_PATH, {"set-cookie": _cookie("", 0, request.scheme)})
        assert route.scope is not None
        if route.page == "scope":
            if not self._authenticated(request):
                return _redirect(LOGIN_PATH)
            service = await self._service(route.scope)
            return _page(200, _scope_title(route.scope),
                         await self._render(route.scope, service, request.query))
        if route.page in JOB_VIEWS:
            return await self._job_view(route, request)
        return await self._act(route.scope, route.name, request)

    # ------------------------------------------------------------ sessions

    def _authenticated(self, request: ApiRequest) -> bool:
        """True with a valid session cookie or bearer token, False with
        neither; a wrong bearer token is refused (401)."""
        assert self._token is not None
        header = request.headers.get("authorization")
        if header:
            scheme, _, presented = header.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                    presented.strip().encode(), self._token):
                raise ApiError(401, "unauthorized", "wrong bearer token")
            return True
        cookie = _cookie_value(request.headers.get("cookie", ""))
        return cookie is not None and self._valid_session(cookie)

    def _login(self, request: ApiRequest) -> Answer:
        assert self._token is not None
        _same_origin(request)
        now = self._now_s()
        wait = self.throttle.retry_after(request.client, now)
        if wait is not None:
            return _page(429, "Log in", _login_form(
                f"Too many wrong tokens; try again in {wait} s."), {"retry-after": str(wait)})
        form = _form(request)
        presented = form.get("token", "").strip()
        # Constant time in the token's content; only its length may leak.
        if not presented or not hmac.compare_digest(presented.encode(), self._token):
            self.throttle.failed(request.client, now)
            return _page(401, "Log in", _login_form("Wrong token."))
        self.throttle.succeeded(request.client)
        expires = int(now) + SESSION_MAX_AGE_S
        return _redirect(LOGIN_PATH, {
            "set-cookie": _cookie(self.session_value(expires), SESSION_MAX_AGE_S,
                                  request.scheme)})

    def _open(self, request: ApiRequest) -> Answer:
        query = _query_fields(request.query)
        if query is None:
            raise ApiError(400, "invalid_argument", "query: is malformed", "query")
        owner = query.get("owner", "").strip()
        if query.get("scope") == "shared":
            return _redirect(scope_path(("shared", None)))
        return _redirect(scope_path(("owner", check_id("owner", owner))))

    # ------------------------------------------------------------- actions

    async def _act(self, scope: Scope, action: str, request: ApiRequest) -> Answer:
        # Cross-site first: such a request is refused whatever it carries.
        _same_origin(request)
        if not self._authenticated(request):
            raise ApiError(401, "unauthorized",
                           "not logged in (or the session ended); log in again")
        form = _form(request)
        if not hmac.compare_digest(form.get("csrf", "").encode(), self._csrf.encode()):
            raise ApiError(403, "csrf_mismatch", "the form's CSRF field is missing or "
                                                 "stale; reload the page and try again")
        service = await self._service(scope)
        result: str
        if action == "cancel":
            subject = check_id("job_id", form.get("job_id"))
            # One cancellation id per job: a second click replays the first.
            result = (await service.cancel(subject, DASHBOARD_CANCELLATION_ID)).status
        elif action == "cancel_lane":
            subject = check_text("lane", form.get("lane"), MAX_LANE_LENGTH, InvalidArgument)
            result = await _cancel_lane(service, subject)
        elif action == "redrive":
            subject = check_id("job_id", form.get("job_id"))
            # The form names the settlement it redrives: a double submit
            # replays, a later failure of the same job gets a new redrive.
            redrive_id = check_id("redrive_id", form.get("redrive_id"))
            result = (await service.redrive(subject, redrive_id)).status
        elif action == "redrive_dead_letters":
            subject = check_id("queue", form.get("queue"))
            # Named after the newest dead letter shown: a double submit
            # replays, a later failure makes a new set with a new id.
            redrive_id = check_id("redrive_id", form.get("redrive_id"))
            result = await _redrive_all(service, subject, redrive_id)
        elif action in ("set_limit", "clear_limit"):
            kind = check_limit_kind(form.get("kind"))
            subject = check_limit_key(kind, form.get("key"))
            if action == "set_limit":
                changed = await service.set_limit(kind, subject,
                                                  _max_running(form.get("max_running")))
                result = "limit_set" if changed else "limit_kept"
            else:
                changed = await service.clear_limit(kind, subject)
                result = "limit_cleared" if changed else "no_limit"
            action = f"{action}_{kind}"  # the flash names the kind
        elif action in ("set_rate_limit", "clear_rate_limit"):
            kind = check_limit_kind(form.get("kind"))
            subject = check_limit_key(kind, form.get("key"))
            if action == "set_rate_limit":
                burst = (form.get("burst") or "").strip()
                limit = validate_rate_limit(
                    kind, subject, _whole_number(form.get("starts")),
                    _whole_number(form.get("period_ms")),
                    None if not burst else _whole_number(burst))
                assert limit.starts is not None and limit.period_ms is not None
                changed = await service.set_rate_limit(kind, subject, limit.starts,
                                                       limit.period_ms, limit.burst)
                result = "limit_set" if changed else "limit_kept"
            else:
                changed = await service.clear_rate_limit(kind, subject)
                result = "rate_limit_cleared" if changed else "no_rate_limit"
            action = f"{action}_{kind}"  # the flash names the kind
        elif action in ("pause", "resume"):
            subject = check_id("queue", form.get("queue"))
            changed = await (service.pause(subject) if action == "pause"
                             else service.resume(subject))
            result = "changed" if changed else "unchanged"
        else:
            subject = check_id("name", form.get("name"))
            changed = await (service.pause_schedule(subject) if action == "pause_schedule"
                             else service.resume_schedule(subject))
            result = "changed" if changed else "unchanged"
        # A job's own page asks to come back to it (its forms carry back=job).
        back = (job_path(scope, subject) if form.get("back") == "job"
                and action in ("cancel", "redrive") else scope_path(scope))
        return _redirect(back + "?" + urlencode(
            {"did": action, "result": result, "subject": subject[:200]}))

    # ----------------------------------------------------------- rendering

    def _picker(self) -> str:
        return (
            '<main class="login"><h2>Open a scope</h2>'
            f'<p><a href="{_e(scope_path(("shared", None)))}">Shared queues</a></p>'
            f'<p><a href="{OWNERS_PATH}">All owners</a> (the directory: find an owner '
            "by key prefix, or the ones with dead letters or overdue jobs)</p>"
            '<form method="get" action="/v1/dashboard/open">'
            '<label for="owner">Owner key</label>'
            '<input type="text" id="owner" name="owner" required maxlength="256" '
            'autocomplete="off" autocapitalize="off" spellcheck="false">'
            '<p><button type="submit" class="primary">Open owner</button></p></form>'
            f"{self._logout()}</main>")

    def _logout(self) -> str:
        return ('<form method="post" action="/v1/dashboard/logout" class="inline">'
                f'<input type="hidden" name="csrf" value="{_e(self._csrf)}">'
                '<button type="submit">Log out</button></form>')

    def _button(self, scope: Scope, action: str, label: str, fields: Mapping[str, str],
                confirm: str | None = None, danger: bool = False) -> str:
        hidden = "".join(f'<input type="hidden" name="{_e(name)}" value="{_e(value)}">'
                         for name, value in {"csrf": self._csrf, **fields}.items())
        ask = f' data-confirm="{_e(confirm)}"' if confirm else ""
        css = ' class="danger"' if danger else ""
        return (f'<form method="post" class="inline" '
                f'action="{_e(scope_path(scope))}/actions/{action}"{ask}>{hidden}'
                f'<button type="submit"{css}>{_e(label)}</button></form>')

    async def _owners(self, query_text: str) -> str:
        """The directory of owners: a search by key prefix, a table sortable
        by its headers, and a link to the next page."""
        given = _query_fields(query_text)
        if given is None:
            raise ApiError(400, "invalid_argument", "query: is malformed", "query")
        unknown = sorted(set(given) - {"prefix", "sort", "cursor"})
        if unknown:
            raise InvalidArgument("query", f"unknown parameter(s) {', '.join(unknown)}; "
                                           "expected prefix, sort, cursor")
        query = OwnerQuery(given.get("prefix", ""), given.get("sort", "key") or "key",
                           given.get("cursor") or None, OWNERS_PER_PAGE)
        directory = cast("DirectoryOfOwners", await self._service(("directory", None)))
        page = await directory.list_owners(query)
        parts = [
            "<header>",
            '<h1>tickwork <span class="scope">owners</span></h1>',
            f'<a href="{LOGIN_PATH}">Scopes</a>', self._logout(), "</header><main>",
            _owner_search(query),
            _owners_table(query, page),
            _owner_pager(query, page),
            '<p class="muted">Each summary is as of its time: an owner rewrites it at '
            "most once a minute while its jobs change. Dead letters are counted up to "
            f"{DEAD_LETTER_COUNT_CAP:,}.</p>",
            "</main>",
        ]
        return "".join(parts)

    async def _render(self, scope: Scope, service: JobService, query: str) -> str:
        statuses = sorted(await service.status(), key=lambda status: status.queue)
        schedules = await service.schedules()
        # One read of every limit for the whole page: each queue's section
        # and the Lanes section take theirs from it.
        limits = await service.limits()
        queue_limits = {limit.key: limit for limit in limits if limit.kind == "queue"}
        lane_limits = [limit for limit in limits if limit.kind == "lane"]
        rates = await service.rate_limits()  # the listings' and the section's
        parts = [
            "<header>",
            f'<h1>tickwork <span class="scope">{_e(_scope_title(scope))}</span></h1>',
            '<label class="toggle"><input type="checkbox" id="autorefresh"> '
            "auto-refresh</label>",
            self._search_box(scope),
            f'<a href="{LOGIN_PATH}">Scopes</a>', self._logout(), "</header><main>",
            _flash(query),
            self._queues_table(scope, statuses, queue_limits),
        ]
        detailed = statuses[:MAX_DETAILED_QUEUES]
        if detailed:
            parts.append('<section id="jobs"><h2>Jobs by queue</h2>')
            if len(statuses) > len(detailed):
                parts.append(f'<p class="muted">Jobs of the first {len(detailed)} queues '
                             f"of {len(statuses)}.</p>")
            lanes = {limit.key: limit.max_running for limit in lane_limits}
            for status in detailed:
                parts.append(await self._queue_jobs(scope, service, status,
                                                    queue_limits.get(status.queue), lanes,
                                                    rates))
            parts.append("</section>")
        parts.append(self._schedules_table(scope, schedules))
        parts.append(self._lanes_section(scope, lane_limits))
        parts.append(self._rate_limits_section(scope, rates))
        parts.append("</main>")
        return "".join(parts)

    def _queues_table(self, scope: Scope, statuses: Sequence[QueueStatus],
                      limits: Mapping[str, ConcurrencyLimit]) -> str:
        listed = {status.queue for status in statuses}
        idle = [limit for key, limit in sorted(limits.items()) if key not in listed]
        # A limit set on a queue before its first job, or kept while it has
        # none: said here, as no section of its own shows it.
        more = len(idle) - MAX_DETAILED_QUEUES
        note = "" if not idle else (
            '<p class="muted" data-idle-limits>Limits of queues without jobs: '
            + ", ".join(f'<span class="id">{_e(limit.key)}</span> '
                        f"({_e(_runs(limit.max_running))})"
                        for limit in idle[:MAX_DETAILED_QUEUES])
            + (f", and {more:,} more" if more > 0 else "") + ".</p>")
        if not statuses:
            return ('<section id="queues"><h2>Queues</h2>'
                    f'<p class="muted">No queue has jobs.</p>{note}</section>')
        head = "".join(f'<th class="num">{_e(_label(name))}</th>' for name in
                       ("queued", "due later", "running", *OUTCOMES))
        rows = []
        for status in statuses:
            counts = [status.queued, status.delayed, status.running,
                      *(status.outcomes[name] for name in OUTCOMES)]
            names = ["queued", "due later", "running", *OUTCOMES]
            cells = "".join(f'<td class="num" data-label="{_e(_label(name))}">{count}</td>'
                            for name, count in zip(names, counts, strict=True))
            stored = limits.get(status.queue)
            at_once = DEFAULT_QUEUE_MAX_RUNNING if stored is None else stored.max_running
            cells += f'<td class="num" data-label="at once">{at_once}</td>'
            if status.paused:
                state = '<span class="badge paused">paused</span>'
                action = self._button(scope, "resume", "Resume", {"queue": status.queue})
            else:
                state = "active"
                action = self._button(scope, "pause", "Pause", {"queue": status.queue},
                                      confirm=f"Pause queue {status.queue}?")
            link = f'<a class="id" href="#queue-{_anchor(status.queue)}">{_e(status.queue)}</a>'
            rows.append(f'<tr data-queue="{_e(status.queue)}">'
                        f'<td data-label="queue">{link}</td>{cells}'
                        f'<td data-label="state">{state}</td><td>{action}</td></tr>')
        return ('<section id="queues"><h2>Queues</h2><div class="scroll">'
                f'<table class="stack"><thead><tr><th>queue</th>{head}'
                '<th class="num" title="the most of its jobs that run at once">at once</th>'
                '<th>state</th><th></th>'
                f'</tr></thead><tbody>{"".join(rows)}</tbody></table></div>{note}</section>')

    async def _queue_jobs(self, scope: Scope, service: JobService, status: QueueStatus,
                          limit: ConcurrencyLimit | None, lane_limits: Mapping[str, int],
                          rates: Sequence[RateLimit]) -> str:
        queue = status.queue
        badge = ' <span class="badge paused">paused</span>' if status.paused else ""
        max_running = DEFAULT_QUEUE_MAX_RUNNING if limit is None else limit.max_running
        head = await service.read_queue_head(queue)
        queued = await service.list_jobs(queue, state="queued", order="oldest",
                                         limit=JOBS_PER_LIST)
        # Enough running jobs to tell whether the queue is at its limit (one
        # read, bounded by a page): the list shows JOBS_PER_LIST of them.
        running = await service.list_jobs(
            queue, state="running", order="oldest",
            limit=max(JOBS_PER_LIST, min(max_running, MAX_JOB_PAGE)))
        failed = await service.list_jobs(queue, state="settled", outcome="failed",
                                         limit=JOBS_PER_LIST)
        dead = await service.dead_letters(queue, limit=JOBS_PER_LIST)
        # The head is shown first; the other lists hold the others.
        shown = head.job_id if head else None
        now_ms = int(self._now_s() * 1000)

        listing = QueueListing.of(status, max_running, head, queued, running, lane_limits,
                                  rates)

        def waits(job: JobRecord) -> str:
            return _waits_cell(scope, job, listing, now_ms)

        others = [job for job in running.jobs if job.job_id != shown][:JOBS_PER_LIST]
        running_table = self._jobs_table(scope, others, waits)
        listed = len(others) + (1 if head is not None and head.state == "running" else 0)
        if running_table and status.running > listed:
            running_table += (f'<p class="muted" data-more-running>{listed} of its '
                              f"{status.running} running jobs are shown.</p>")
        lists = [
            ("head", "Head", self._jobs_table(scope, [head] if head else [], waits)),
            ("queued", "Queued and due later", self._jobs_table(
                scope, [job for job in queued.jobs if job.job_id != shown], waits)),
            ("running", "Running", running_table),
            ("failures", "Recent failures",
             self._settled_table(scope, failed.jobs, redrive=False)),
            ("dead", "Dead letters", self._redrive_all_button(scope, queue, dead.jobs)
             + self._settled_table(scope, dead.jobs, redrive=True)),
            await self._completed_list(scope, service, queue),
        ]
        history = await service.history(queue)  # the last hour, a point a minute
        parts = [f'<div class="queue" id="queue-{_anchor(queue)}" data-queue="{_e(queue)}">'
                 f'<h3><span class="id">{_e(queue)}</span>{badge}</h3>',
                 self._queue_limit(scope, queue, limit),
                 "" if history is None else history_charts(history)]
        parts += [f'<div class="list" data-list="{name}"><h3>{_e(title)}</h3>{table}</div>'
                  for name, title, table in lists if table]
        # Empty lists take one line between them, not a heading each.
        empty = [_NONE[name] for name, _, table in lists if not table]
        if empty:
            line = "; ".join(empty)
            parts.append(f'<p class="muted">{_e(line[:1].upper() + line[1:])}.</p>')
        parts.append("</div>")
        return "".join(parts)

    def _jobs_table(self, scope: Scope, jobs: Iterable[JobRecord],
                    waits: Callable[[JobRecord], str]) -> str:
        """The jobs as a table ("" for none), each with what it waits for."""
        rows = []
        for job in jobs:
            due = _time(job.due_at) if job.due_at is not None else ""
            cancel = self._button(scope, "cancel", "Cancel", {"job_id": job.job_id},
                                  confirm=f"Cancel job {job.job_id}?", danger=True)
            rows.append(
                f'<tr data-job="{_e(job.job_id)}">'
                f'<td data-label="job">{_job_link(scope, job.job_id)}</td>'
                f'<td data-label="lane"><span class="id">{_e(job.lane)}</span></td>'
                f'<td data-label="state">{_e(job.state)}</td>'
                f'<td data-label="attempt" class="num">{job.attempt}</td>'
                f'<td data-label="enqueued">{_time(job.enqueued_at)}</td>'
                f'<td data-label="due">{due}</td>'
                f'<td data-label="waits for">{waits(job)}</td>'
                f'<td data-label="payload"><code class="payload">{_e(_excerpt(job.payload))}'
                f"</code></td><td>{cancel}</td></tr>")
        if not rows:
            return ""
        return ('<div class="scroll"><table class="stack"><thead><tr><th>job</th><th>lane</th>'
                '<th>state</th><th class="num">attempt</th><th>enqueued</th><th>due</th>'
                '<th>waits for</th><th>payload</th><th></th></tr></thead>'
                f'<tbody>{"".join(rows)}</tbody></table></div>')

    def _redrive_all_button(self, scope: Scope, queue: str, dead: Sequence[JobRecord]) -> str:
        """"Redrive all" over the queue's dead letters ("" for none)."""
        if not dead:
            return ""
        newest = dead[0]
        return self._button(
            scope, "redrive_dead_letters", "Redrive all",
            {"queue": queue, "redrive_id": f"dashboard-all-{newest.settled_at}.{newest.sequence}"},
            confirm=f"Queue every dead letter of {queue} again?")

    def _queue_limit(self, scope: Scope, queue: str, limit: ConcurrencyLimit | None) -> str:
        """How many of the queue's jobs run at once, with a form to change
        it and, when one is stored, a button that clears it."""
        max_running = DEFAULT_QUEUE_MAX_RUNNING if limit is None else limit.max_running
        said = (f"Runs {_runs(max_running)}" + (" (the default)." if limit is None else "."))
        field = f"limit-queue-{_anchor(queue)}"
        clear = "" if limit is None else " " + self._button(
            scope, "clear_limit", "Clear limit", {"kind": "queue", "key": queue},
            confirm=f"Let queue {queue} run one job at a time again?")
        return (f'<div class="limit" data-limit="{max_running}">{_e(said)} '
                + self._limit_form(scope, "queue", queue, field, max_running) + clear
                + "</div>")

    def _limit_form(self, scope: Scope, kind: str, key: str | None, field: str,
                    value: int | None) -> str:
        """A form that sets a limit: of the queue or lane ``key``, or with
        ``key`` None of the lane typed into it."""
        hidden = {"csrf": self._csrf, "kind": kind, **({} if key is None else {"key": key})}
        inputs = "".join(f'<input type="hidden" name="{_e(name)}" value="{_e(given)}">'
                         for name, given in hidden.items())
        if key is None:
            inputs += (f'<label for="{field}-key">Lane</label> '
                       f'<input type="text" id="{field}-key" name="key" required '
                       f'maxlength="{MAX_LANE_LENGTH}" autocomplete="off" '
                       'autocapitalize="off" spellcheck="false"> ')
        shown = "" if value is None else f' value="{value}"'
        return (f'<form method="post" class="limit" '
                f'action="{_e(scope_path(scope))}/actions/set_limit">{inputs}'
                f'<label for="{field}">At most</label> '
                f'<input type="number" id="{field}" name="max_running" min="1" '
                f'max="{MAX_RUNNING_LIMIT}" step="1" required inputmode="numeric"{shown}> '
                '<span>at once</span> <button type="submit">Set limit</button></form>')

    def _lanes_section(self, scope: Scope, limits: Sequence[ConcurrencyLimit]) -> str:
        """The lanes' limits (each with a form to change or clear it), a form
        to limit another lane, and one to cancel every queued job of a lane
        (a tenant gone, a customer's backlog withdrawn; its running jobs keep
        running)."""
        rows = []
        for index, limit in enumerate(limits[:MAX_LISTED_LANE_LIMITS]):
            field = f"limit-lane-{index}"
            clear = self._button(scope, "clear_limit", "Clear limit",
                                 {"kind": "lane", "key": limit.key},
                                 confirm=f"Remove the limit of lane {limit.key}?")
            rows.append(
                f'<tr data-lane="{_e(limit.key)}">'
                f'<td data-label="lane"><span class="id">{_e(limit.key)}</span></td>'
                f'<td data-label="runs">{_e(_runs(limit.max_running))}</td>'
                f'<td data-label="set">{_time(limit.updated_at)}</td>'
                f"<td>{self._limit_form(scope, 'lane', limit.key, field, limit.max_running)}"
                f" {clear}</td></tr>")
        if rows:
            table = ('<div class="scroll"><table class="stack"><thead><tr><th>lane</th>'
                     '<th>runs</th><th>set</th><th></th></tr></thead>'
                     f'<tbody>{"".join(rows)}</tbody></table></div>')
            if len(limits) > MAX_LISTED_LANE_LIMITS:
                table += (f'<p class="muted">The first {MAX_LISTED_LANE_LIMITS} lane limits of '
                          f"{len(limits):,}, by lane; <code>tickwork queues limits</code> or "
                          "the API lists them all.</p>")
        else:
            table = '<p class="muted">No lane has a limit of its own.</p>'
        return (
            '<section id="lanes"><h2>Lanes</h2>'
            '<h3>Limits</h3>'
            '<p class="muted">A lane limit caps the lane\'s running jobs across every queue '
            "(each queue's own limit holds as well). A running job is never stopped: a "
            "lower limit holds new starts until enough of them settle.</p>"
            f"{table}{self._limit_form(scope, 'lane', None, 'limit-lane-new', None)}"
            '<h3>Cancel queued jobs</h3>'
            '<form method="post" class="lane-cancel" '
            f'action="{_e(scope_path(scope))}/actions/cancel_lane" '
            'data-confirm="Cancel every queued job of this lane?">'
            f'<input type="hidden" name="csrf" value="{_e(self._csrf)}">'
            '<label for="cancel-lane">Lane</label> '
            f'<input type="text" id="cancel-lane" name="lane" required '
            f'maxlength="{MAX_LANE_LENGTH}" autocomplete="off" autocapitalize="off" '
            'spellcheck="false"> '
            '<button type="submit" class="danger">Cancel queued jobs</button></form>'
            '<p class="muted">Its queued jobs settle cancelled without running; its running '
            f"jobs keep running. Up to {CANCEL_LANE_PAGES * 100:,} jobs per press.</p>"
            "</section>")

    def _rate_limits_section(self, scope: Scope, limits: Sequence[RateLimit]) -> str:
        """The rate limits and holds in force (each with a button to clear
        it), and a form to set one on a queue or a lane."""
        rows = []
        for limit in limits[:MAX_LISTED_LANE_LIMITS]:
            clear = self._button(scope, "clear_rate_limit", "Clear",
                                 {"kind": limit.kind, "key": limit.key},
                                 confirm=f"Remove the rate limit and any hold of {limit.kind} "
                                         f"{limit.key}?")
            rate = ("held only" if limit.starts is None or limit.period_ms is None
                    else f"{limit.starts:,} per {limit.period_ms:,} ms, burst {limit.burst:,}")
            rows.append(
                f'<tr data-rate="{_e(limit.kind)}:{_e(limit.key)}">'
                f'<td data-label="kind">{_e(limit.kind)}</td>'
                f'<td data-label="key"><span class="id">{_e(limit.key)}</span></td>'
                f'<td data-label="rate">{_e(rate)}</td>'
                f'<td data-label="next start">{_time(limit.next_start_at)}</td>'
                f'<td data-label="held until">{_time(limit.held_until)}</td>'
                f"<td>{clear}</td></tr>")
        if rows:
            table = ('<div class="scroll"><table class="stack"><thead><tr><th>kind</th>'
                     '<th>key</th><th>rate</th><th>next start</th><th>held until</th><th></th>'
                     f'</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')
            if len(limits) > MAX_LISTED_LANE_LIMITS:
                table += (f'<p class="muted">The first {MAX_LISTED_LANE_LIMITS} of '
                          f"{len(limits):,}; <code>tickwork queues rate-limits</code> or the "
                          "API lists them all.</p>")
        else:
            table = '<p class="muted">No rate limit and no hold: jobs start as fast as ' \
                    "claims take them.</p>"
        number = ('<input type="number" id="rate-{name}" name="{name}" min="1" max="{most}" '
                  'step="1" inputmode="numeric"{required}>')
        form = (
            '<form method="post" class="limit" '
            f'action="{_e(scope_path(scope))}/actions/set_rate_limit">'
            f'<input type="hidden" name="csrf" value="{_e(self._csrf)}">'
            '<label for="rate-kind">Kind</label> <select id="rate-kind" name="kind">'
            '<option value="queue">queue</option><option value="lane">lane</option></select> '
            '<label for="rate-key">Name</label> '
            f'<input type="text" id="rate-key" name="key" required maxlength="{MAX_LANE_LENGTH}" '
            'autocomplete="off" autocapitalize="off" spellcheck="false"> '
            '<label for="rate-starts">Starts</label> '
            + number.format(name="starts", most=MAX_RATE_STARTS, required=" required")
            + ' <label for="rate-period_ms">per ms</label> '
            + number.format(name="period_ms", most=MAX_RATE_PERIOD_MS, required=" required")
            + ' <label for="rate-burst">burst</label> '
            + number.format(name="burst", most=MAX_RATE_STARTS, required="")
            + ' <button type="submit">Set rate limit</button></form>')
        return (
            '<section id="rate-limits"><h2>Rate limits</h2>'
            '<p class="muted">A rate limit lets a queue, or a lane across every queue, start '
            "so many jobs per period, up to its burst at once: every claim checks and spends "
            "it. A hold is an executor's RateLimited (an API's 429): its key starts nothing "
            "until then.</p>"
            f"{table}{form}</section>")

    def _settled_table(self, scope: Scope, jobs: Iterable[JobRecord], *,
                       redrive: bool) -> str:
        """Settled jobs with their errors as a table ("" for none)."""
        rows = []
        for job in jobs:
            action = ""
            if redrive:
                action = self._button(
                    scope, "redrive", "Redrive",
                    {"job_id": job.job_id, "redrive_id": f"dashboard-{job.settled_at}"},
                    confirm=f"Queue job {job.job_id} again?")
            rows.append(
                f'<tr data-job="{_e(job.job_id)}">'
                f'<td data-label="job">{_job_link(scope, job.job_id)}</td>'
                f'<td data-label="outcome"><span class="badge failed">{_e(job.outcome)}'
                "</span></td>"
                f'<td data-label="settled">{_time(job.settled_at)}</td>'
                f'<td data-label="error">{_error_summary(job)}</td>'
                f'<td data-label="payload"><code class="payload">{_e(_excerpt(job.payload))}'
                f"</code></td><td>{action}</td></tr>")
        if not rows:
            return ""
        return ('<div class="scroll"><table class="stack"><thead><tr><th>job</th>'
                '<th>outcome</th><th>settled</th><th>error</th><th>payload</th><th></th>'
                f'</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')

    def _schedules_table(self, scope: Scope, schedules: Sequence[ScheduleRecord]) -> str:
        if not schedules:
            return ('<section id="schedules"><h2>Schedules</h2>'
                    '<p class="muted">No schedules.</p></section>')
        rows = []
        now_ms = int(self._now_s() * 1000)
        for record in sorted(schedules, key=lambda item: item.schedule.name):
            schedule = record.schedule
            timing = f"cron {schedule.cron}" if schedule.cron is not None \
                else f"every {schedule.every_ms} ms"
            if record.paused:
                state = '<span class="badge paused">paused</span>'
                action = self._button(scope, "resume_schedule", "Resume",
                                      {"name": schedule.name})
            else:
                state = "active"
                action = self._button(scope, "pause_schedule", "Pause", {"name": schedule.name},
                                      confirm=f"Pause schedule {schedule.name}?")
            next_slot = _time(record.next_at)
            if not record.paused and now_ms - record.next_at >= OVERDUE_AFTER_MS:
                # Its slot came a while ago and no tick has fired it.
                next_slot += ' <span class="badge overdue">overdue</span>'
            rows.append(
                f'<tr data-schedule="{_e(schedule.name)}">'
                f'<td data-label="schedule"><span class="id">{_e(schedule.name)}</span></td>'
                f'<td data-label="queue"><span class="id">{_e(schedule.job.queue)}</span></td>'
                f'<td data-label="timing"><code>{_e(timing)}</code></td>'
                f'<td data-label="next slot">{next_slot}</td>'
                f'<td data-label="state">{state}</td><td>{action}</td></tr>')
        return ('<section id="schedules"><h2>Schedules</h2><div class="scroll">'
                '<table class="stack"><thead><tr><th>schedule</th><th>queue</th><th>timing</th>'
                '<th>next slot</th><th>state</th><th></th></tr></thead>'
                f'<tbody>{"".join(rows)}</tbody></table></div></section>')

    # ------------------------------------------------- job pages and search
    # A job's page, the search by id, and a queue's completed jobs. Each
    # reads through the scope's JobService only, like the scope's page.

    def _search_box(self, scope: Scope, value: str = "") -> str:
        """The header's search form: a job id, or the start of one."""
        return (f'<form method="get" class="search" role="search" '
                f'action="{_e(scope_path(scope))}/search">'
                '<label for="job-search" class="hidden">Job id or prefix</label>'
                f'<input type="search" id="job-search" name="q" value="{_e(value)}" '
                f'required maxlength="{MAX_ID_LENGTH}" placeholder="job id or prefix" '
                'autocomplete="off" autocapitalize="off" spellcheck="false">'
                '<button type="submit">Find</button></form>')

    def _view_header(self, scope: Scope, search: str = "") -> str:
        """The header of a job page, a search or a completed list: the
        scope's name (linking back to its page), the search box, the way out."""
        return ("<header>"
                f'<h1>tickwork <a class="scope" href="{_e(scope_path(scope))}">'
                f"{_e(_scope_title(scope))}</a></h1>"
                f"{self._search_box(scope, search)}"
                f'<a href="{LOGIN_PATH}">Scopes</a>{self._logout()}</header>')

    async def _job_view(self, route: DashboardRoute, request: ApiRequest) -> Answer:
        assert route.scope is not None
        if not self._authenticated(request):
            return _redirect(LOGIN_PATH)
        service = await self._service(route.scope)
        if route.page == "job":
            return await self._job_page(route.scope, service, route.name, request.query)
        if route.page == "search":
            return await self._search_page(route.scope, service, request.query)
        return await self._completed_page(route.scope, service, route.name, request.query)

    async def _job_page(self, scope: Scope, service: JobService, job_id: str,
                        query: str) -> Answer:
        job = await service.read(job_id)
        header = self._view_header(scope)
        if job is None:
            body = (f"{header}<main>{_flash(query)}<h2>No job "
                    f'<span class="id">{_e(job_id)}</span></h2>'
                    '<p class="muted">This scope has no job of this id (a job is only in '
                    f'the scope it was sent to). {_prefix_link(scope, job_id)}</p></main>')
            return _page(404, f"job {job_id}", body)
        # What holds it: explain's reads, for a queued job only.
        wait = await service.explain(job_id) if job.state == "queued" else None
        reasons = waiting_on(job, wait, int(self._now_s() * 1000))
        parts = [
            header, '<main class="job">', _flash(query),
            f'<h2>Job <span class="id">{_e(job.job_id)}</span> {_state_badge(job)}</h2>',
            _job_facts(scope, job),
            _reasons_section(scope, reasons),
            self._job_actions(scope, job),
            _attempts_section(job),
            _cargo_section(job),
            f'<p class="muted">{_prefix_link(scope, job.job_id)}</p>',
            "</main>"]
        return _page(200, f"job {job.job_id}", "".join(parts))

    def _job_actions(self, scope: Scope, job: JobRecord) -> str:
        """The actions that apply to the job now ("" for none): cancel while
        it is unsettled and uncancelled, redrive once it is a dead letter."""
        buttons = []
        if job.state != "settled" and job.cancellation_id is None:
            buttons.append(self._button(
                scope, "cancel", "Cancel", {"job_id": job.job_id, "back": "job"},
                confirm=f"Cancel job {job.job_id}?", danger=True))
        if (job.state == "settled" and job.outcome in DEAD_OUTCOMES
                and job.cancellation_id is None):
            buttons.append(self._button(
                scope, "redrive", "Redrive",
                {"job_id": job.job_id, "redrive_id": f"dashboard-{job.settled_at}",
                 "back": "job"},
                confirm=f"Queue job {job.job_id} again?"))
        if not buttons:
            return ""
        return f'<section id="actions"><h2>Actions</h2><p>{" ".join(buttons)}</p></section>'

    async def _search_page(self, scope: Scope, service: JobService, query: str) -> Answer:
        fields = _single_fields(query)
        given = "" if fields is None else fields.get("q", "").strip()
        cursor = None if fields is None else fields.get("cursor")
        problem = _search_problem(fields, given)
        if problem is not None:
            body = (f"{self._view_header(scope, given[:MAX_ID_LENGTH])}<main>"
                    f'<h2>Find jobs</h2><p class="flash error" role="alert">{_e(problem)}'
                    "</p></main>")
            return _page(400, "find jobs", body)
        assert fields is not None  # _search_problem refuses a malformed query
        # An exact id goes straight to its job, unless its prefix list is asked for.
        if (cursor is None and fields.get("list") != "prefix"
                and await service.read(given) is not None):
            return _redirect(job_path(scope, given))
        page = await service.find_jobs(given, limit=SEARCH_PAGE, cursor=cursor)
        parts = [self._view_header(scope, given), "<main>",
                 f'<h2>Jobs whose id starts with <span class="id">{_e(given)}</span></h2>']
        if not page.jobs:
            parts.append('<p class="muted" data-found="0">No job id starts with this '
                         f'{"after the previous page" if cursor else "in this scope"}.</p>')
        else:
            parts.append(_found_table(scope, page.jobs))
        if page.cursor is not None:
            more = urlencode({"q": given, "list": "prefix", "cursor": page.cursor})
            parts.append(f'<p><a rel="next" href="{_e(scope_path(scope))}/search?'
                         f'{_e(more)}">Next {SEARCH_PAGE} \u2192</a></p>')
        parts.append("</main>")
        return _page(200, f"jobs {given}\u2026", "".join(parts))

    async def _completed_list(self, scope: Scope, service: JobService,
                              queue: str) -> tuple[str, str, str]:
        """The queue's latest completed jobs, as one of its lists on the
        scope's page, with the way to every page of them."""
        page = await service.list_jobs(queue, state="settled", outcome="completed",
                                       limit=JOBS_PER_LIST)
        table = _completed_table(scope, page.jobs)
        if table and page.cursor is not None:
            table += (f'<p><a href="{_e(completed_path(scope, queue))}">Every completed job '
                      f"of {_e(queue)} \u2192</a></p>")
        return "completed", "Recently completed", table

    async def _completed_page(self, scope: Scope, service: JobService, queue: str,
                              query: str) -> Answer:
        fields = _query_fields(query)
        if fields is None:
            raise ApiError(400, "invalid_argument", "query: is malformed", "query")
        cursor = fields.get("cursor")
        page = await service.list_jobs(queue, state="settled", outcome="completed",
                                       limit=COMPLETED_PAGE, cursor=cursor)
        parts = [self._view_header(scope), "<main>",
                 f'<h2>Completed jobs of <a class="id" href="{_e(scope_path(scope))}#queue-'
                 f'{_anchor(queue)}">{_e(queue)}</a></h2>',
                 '<p class="muted">Newest settlement first.</p>']
        table = _completed_table(scope, page.jobs)
        parts.append(table or '<p class="muted">No completed jobs'
                              f'{" after the previous page" if cursor else ""}.</p>')
        links = []
        if cursor is not None:
            links.append(f'<a href="{_e(completed_path(scope, queue))}">\u2190 Newest</a>')
        if page.cursor is not None:
            links.append(f'<a rel="next" href="{_e(completed_path(scope, queue))}?'
                         f'{_e(urlencode({"cursor": page.cursor}))}">Older \u2192</a>')
        if links:
            parts.append(f'<p class="pages">{" ".join(links)}</p>')
        parts.append("</main>")
        return _page(200, f"completed {queue}", "".join(parts))


# ------------------------------------------------------------------ helpers


def history_charts(history: QueueHistory) -> str:
    """A queue's history as two small charts: jobs per bucket (enqueued,
    completed, failed, retried) and the sampled depth. Inline SVG drawn
    here, with attributes and the stylesheet's classes only (the page's CSP
    allows no inline style or script); "" without points."""
    points = history.points
    if not points:
        return ""
    minutes = history.bucket // 60
    per = "minute" if minutes == 1 else f"{minutes} minutes"
    start, end = _time(points[0].at), _time(points[-1].at)
    throughput = _chart(
        "throughput", f"Jobs per {per}",
        [(name, [getattr(point, name) for point in points]) for name in THROUGHPUT_SERIES],
        [f"{name} {sum(getattr(point, name) for point in points)}"
         for name in THROUGHPUT_SERIES], start, end)
    depths = [point.depth for point in points]
    sampled = [point for point in points if point.depth is not None]
    # A sample counts up to a cap: a deeper queue reads "10,000+".
    latest = (None if not sampled else
              f"{sampled[-1].depth:,}{'+' if sampled[-1].depth_capped else ''}")
    oldest = max((point.oldest_age_ms for point in points
                  if point.oldest_age_ms is not None), default=None)
    keys = [f"depth {'-' if latest is None else latest} now"]
    if oldest is not None:
        keys.append(f"head waited {_wait(oldest)}")
    depth = _chart("depth", "Queue depth (sampled once a minute)", [("depth", depths)], keys,
                   start, end)
    return f'<div class="charts" data-history="{_e(history.queue)}">{throughput}{depth}</div>'


def _chart(kind: str, title: str, series: Sequence[tuple[str, Sequence[int | None]]],
           keys: Sequence[str], start: str, end: str) -> str:
    """One chart: a line per series over the same points (None: no value, a
    gap in the line), scaled to the highest value."""
    top = max((value for _, values in series for value in values if value is not None),
              default=0)
    scale = top or 1
    count = max(len(values) for _, values in series)
    step = CHART_WIDTH / max(count - 1, 1)
    drawn = []
    for name, values in series:
        run: list[str] = []
        for index, value in enumerate([*values, None]):
            if value is not None:
                y = CHART_HEIGHT - value * (CHART_HEIGHT - 2) / scale - 1
                run.append(f"{index * step:.1f},{y:.1f}")
                continue
            if len(run) == 1:  # a lone value: a dot, as a line needs two
                x, y_text = run[0].split(",")
                drawn.append(f'<circle class="{name}" cx="{x}" cy="{y_text}" r="2"/>')
            elif run:
                drawn.append(f'<polyline class="{name}" points="{" ".join(run)}" '
                             'vector-effect="non-scaling-stroke"/>')
            run = []
    legend = "".join(f'<span class="key {_e(key.split()[0])}">{_e(key)}</span>' for key in keys)
    return (f'<figure class="chart" data-chart="{kind}" data-max="{top}">'
            f"<figcaption>{_e(title)}{legend}</figcaption>"
            f'<svg viewBox="0 0 {CHART_WIDTH} {CHART_HEIGHT}" preserveAspectRatio="none" '
            f'role="img" aria-label="{_e(title)}, highest {top}"><title>{_e(title)}</title>'
            f'<line class="axis" x1="0" y1="{CHART_HEIGHT - 0.5}" x2="{CHART_WIDTH}" '
            f'y2="{CHART_HEIGHT - 0.5}" vector-effect="non-scaling-stroke"/>{"".join(drawn)}'
            f'</svg><div class="scale"><span>{start}</span><span>max {top}</span>'
            f"<span>{end}</span></div></figure>")


def _wait(ms: int) -> str:
    """``ms`` as the largest whole unit that fits: 45 s, 12 min, 3 h."""
    seconds = ms // 1000
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def scope_path(scope: Scope) -> str:
    """The path of a scope's dashboard page."""
    kind, owner = scope
    if kind == "shared":
        return "/v1/shared/dashboard"
    assert owner is not None
    return f"/v1/owners/{quote(owner, safe='')}/dashboard"


def _derive(token: bytes, label: bytes) -> str:
    return hmac.new(token, label, hashlib.sha256).hexdigest()


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _label(name: str) -> str:
    return name.replace("_", " ")


def _anchor(queue: str) -> str:
    # An id attribute's value; hex keeps any queue name a valid fragment.
    return queue.encode().hex()[:64]


def _scope_title(scope: Scope) -> str:
    return "shared queues" if scope[0] == "shared" else f"owner {scope[1]}"


def _excerpt(payload: Any) -> str:
    try:
        text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        text = repr(payload)
    return text if len(text) <= PAYLOAD_EXCERPT else text[:PAYLOAD_EXCERPT] + "\u2026"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "\u2026"


def _time(epoch_ms: int | None) -> str:
    if epoch_ms is None:
        return ""
    try:
        moment = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return _e(epoch_ms)
    iso = moment.isoformat(timespec="seconds").replace("+00:00", "Z")
    return (f'<time datetime="{iso}" data-ms="{int(epoch_ms)}">'
            f'{moment.strftime("%Y-%m-%d %H:%M:%S")} UTC</time>')


def _error_summary(job: JobRecord) -> str:
    """The job's failure reason, and the error its executor raised (type,
    message, the traceback folded) when it raised one."""
    parts = []
    if job.failure_reason:
        parts.append(f"<code>{_e(_clip(job.failure_reason, MESSAGE_EXCERPT))}</code>")
    error = job.error
    if error is not None:
        parts.append(f'<div class="error"><strong>{_e(_clip(error.type, 200))}</strong>: '
                     f"{_e(_clip(error.message, MESSAGE_EXCERPT))}</div>")
        if error.traceback:
            parts.append("<details><summary>traceback</summary>"
                         f"<pre>{_e(_clip(error.traceback, TRACEBACK_EXCERPT))}</pre></details>")
    return "".join(parts)


async def _redrive_all(service: JobService, queue: str, redrive_id: str) -> str:
    """Redrive the queue's dead letters a page per request, up to
    ``REDRIVE_ALL_PAGES``; the flash result key of what it did."""
    cursor: str | None = None
    redriven = replayed = refused = 0
    for _ in range(REDRIVE_ALL_PAGES):
        page = await service.redrive_dead_letters(queue, redrive_id, cursor=cursor)
        redriven, replayed, refused = (redriven + page.redriven, replayed + page.replayed,
                                       refused + page.refused)
        cursor = page.cursor
        if cursor is None:
            break
    else:
        return "more"
    if refused:
        return "redriven_some_refused" if redriven else "refused"
    if redriven:
        return "redriven"
    return "replayed" if replayed else "unchanged"


async def _cancel_lane(service: JobService, lane: str) -> str:
    """Cancel the lane's queued jobs a page per request, up to
    ``CANCEL_LANE_PAGES`` pages that cancel something; the flash result key
    of what it did. A page of jobs cancelled before (still queued while the
    owner is busy) costs one read and does not count, so a second press goes
    on past them, up to ``LANE_PAGES_READ`` pages read."""
    cursor: str | None = None
    cancelled = replayed = skipped = writing_pages = 0
    for _ in range(LANE_PAGES_READ):
        page = await service.cancel_lane(lane, DASHBOARD_CANCELLATION_ID, cursor=cursor)
        cancelled, replayed, skipped = (cancelled + page.cancelled, replayed + page.replayed,
                                        skipped + page.skipped)
        writing_pages += 1 if page.cancelled else 0
        cursor = page.cursor
        if cursor is None:
            break
        if writing_pages >= CANCEL_LANE_PAGES:
            return "more_queued"
    else:
        return "more_queued"
    if skipped:
        return "cancelled_some_skipped" if cancelled else "skipped"
    if cancelled:
        return "cancelled"
    return "replayed" if replayed else "none_queued"


def _flash(query: str) -> str:
    """The message of the action just done (from the redirect's query):
    fixed wording, only the subject comes from the query (escaped)."""
    found = _query_fields(query) or {}
    done = _DONE.get(found.get("did", ""))
    result = _RESULTS.get(found.get("result", ""))
    if done is None or result is None:
        return ""
    subject = _clip(found.get("subject", ""), 200)
    return (f'<p class="flash" role="status">{_e(done)} <span class="id">{_e(subject)}</span>: '
            f"{_e(result)}</p>")


def _owners_link(prefix: str, sort: str, cursor: str | None = None) -> str:
    fields = {"sort": sort}
    if prefix:
        fields["prefix"] = prefix
    if cursor is not None:
        fields["cursor"] = cursor
    return f"{OWNERS_PATH}?{urlencode(fields)}"


def _owner_search(query: OwnerQuery) -> str:
    options = "".join(
        f'<option value="{name}"{" selected" if name == query.sort else ""}>'
        f"{_e(_SORT_LABELS[name])}</option>" for name in SORTS)
    return ('<form method="get" action="' + OWNERS_PATH + '" class="search" role="search">'
            '<label for="prefix">Key starts with</label>'
            f'<input type="text" id="prefix" name="prefix" value="{_e(query.prefix)}" '
            'maxlength="256" autocomplete="off" autocapitalize="off" spellcheck="false">'
            f'<label for="sort">Sort by</label><select id="sort" name="sort">{options}</select>'
            '<button type="submit" class="primary">Search</button></form>')


def _owners_table(query: OwnerQuery, page: OwnerPage) -> str:
    if not page.owners:
        if query.cursor is not None:
            text = "No more owners."
        elif query.prefix:
            text = f"No owner's key starts with \u201c{query.prefix}\u201d."
        else:
            text = "No owner yet."
        return f'<section id="owners"><p class="muted">{_e(text)}</p></section>'
    head = []
    for name in SORTS:
        label = _e(_SORT_LABELS[name])
        css = "" if name == "key" else ' class="num"'
        if name == query.sort:
            order = "ascending" if name == "key" else "descending"
            head.append(f'<th{css} aria-sort="{order}">{label}</th>')
        else:
            head.append(f'<th{css}><a href="{_e(_owners_link(query.prefix, name))}">'
                        f"{label}</a></th>")
    rows = []
    for owner in page.owners:
        dead = (f"{owner.dead_letters:,}+" if owner.dead_letters >= DEAD_LETTER_COUNT_CAP
                else str(owner.dead_letters))
        cells = [
            f'<td data-label="owner"><a class="id" href="{_e(scope_path(("owner", owner.key)))}">'
            f"{_e(owner.key)}</a></td>",
            f'<td class="num" data-label="queued">{owner.queued}</td>',
            f'<td class="num" data-label="running">{owner.running}</td>',
            f'<td class="num{" alert" if owner.overdue else ""}" data-label="overdue">'
            f"{owner.overdue}</td>",
            f'<td class="num{" alert" if owner.dead_letters else ""}" '
            f'data-label="dead letters">{dead}</td>',
            f'<td class="num" data-label="last activity">{_time(owner.last_activity_at)}</td>',
        ]
        rows.append(f'<tr data-owner="{_e(owner.key)}">{"".join(cells)}'
                    f'<td class="num muted" data-label="as of">'
                    f"{_time(owner.summarised_at)}</td></tr>")
    return ('<section id="owners"><div class="scroll"><table class="stack"><thead><tr>'
            f'{"".join(head)}<th class="num">as of</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div></section>')


def _owner_pager(query: OwnerQuery, page: OwnerPage) -> str:
    links = []
    if query.cursor is not None:
        links.append(f'<a href="{_e(_owners_link(query.prefix, query.sort))}">First page</a>')
    if page.cursor is not None:
        links.append(f'<a rel="next" href="'
                     f'{_e(_owners_link(query.prefix, query.sort, page.cursor))}">Next page</a>')
    return f'<nav class="pager">{" ".join(links)}</nav>' if links else ""


def _query_fields(query: str) -> dict[str, str] | None:
    """A page's few query parameters; None when the query is malformed."""
    try:
        return dict(parse_qsl(query, max_num_fields=5, errors="strict"))
    except (ValueError, UnicodeDecodeError):
        return None


def _login_form(message: str) -> str:
    note = f'<p class="flash error" role="alert">{_e(message)}</p>' if message else ""
    return ('<main class="login"><h1>tickwork dashboard</h1>'
            f"{note}"
            '<form method="post" action="/v1/dashboard/login">'
            '<label for="token">API token</label>'
            '<input type="password" id="token" name="token" required '
            'autocomplete="current-password">'
            '<p><button type="submit" class="primary">Log in</button></p></form>'
            '<p class="muted">The token is the server\'s TICKWORK_TOKEN. The session '
            "cookie is derived from it; rotating the token ends every session.</p></main>")


def _error_body(error: ApiError) -> str:
    return ('<main class="login"><h1>Refused</h1>'
            f'<p class="flash error" role="alert">{error.status} <code>{_e(error.code)}</code>: '
            f"{_e(error.message)}</p>"
            f'<p><a href="{LOGIN_PATH}">Back to the dashboard</a></p></main>')


def _page(status: int, title: str, body: str,
          headers: Mapping[str, str] | None = None) -> Answer:
    document = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>tickwork \u00b7 {_e(title)}</title>"
        # No favicon request (it would be a JSON 404): an empty data: icon.
        '<link rel="icon" href="data:,">'
        f'<link rel="stylesheet" href="{STATIC_PATH}/dashboard.css">'
        f'<script src="{STATIC_PATH}/dashboard.js" defer></script>'
        f"</head><body>{body}</body></html>")
    return status, document.encode(), {**SECURITY_HEADERS,
                                       "content-type": "text/html; charset=utf-8",
                                       **(headers or {})}


def _redirect(location: str, headers: Mapping[str, str] | None = None) -> Answer:
    body = f'<!doctype html><p><a href="{_e(location)}">continue</a></p>'.encode()
    return 303, body, {**SECURITY_HEADERS, "content-type": "text/html; charset=utf-8",
                       "location": location, **(headers or {})}


def _cookie(value: str, max_age: int, scheme: str) -> str:
    secure = "; Secure" if scheme == "https" else ""
    return (f"{COOKIE_NAME}={value}; Max-Age={max_age}; Path=/v1; HttpOnly; "
            f"SameSite=Strict{secure}")


def _cookie_value(header: str) -> str | None:
    """The session cookie's value, None without one. The cookie twice is
    refused (400): a browser sends two when another site (a sibling
    subdomain, a path of its own) has set one beside ours, and picking
    either would let it choose the session."""
    found: list[str] = []
    for item in header.split(";"):
        name, _, value = item.strip().partition("=")
        if name == COOKIE_NAME:
            found.append(value.strip())
    if len(found) > 1:
        raise ApiError(400, "ambiguous_cookie",
                       f"the {COOKIE_NAME} cookie was sent {len(found)} times; clear this "
                       "site's cookies and log in again", "cookie")
    return found[0] if found else None


def _same_origin(request: ApiRequest) -> None:
    """Refuse a request another site made the browser send (403): by
    ``Sec-Fetch-Site`` when the browser sends it, and by an ``Origin``
    naming another host. The host is compared, not the scheme, so a proxy
    that ends TLS in front of the host does not break the check."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site.strip().lower() != "same-origin":
        raise ApiError(403, "cross_site_request",
                       f"refused a {site[:40]!r} request (Sec-Fetch-Site); use the "
                       "dashboard's own forms")
    origin = request.headers.get("origin")
    if origin is not None:
        host = request.headers.get("host", "")
        try:
            origin_host = urlsplit(origin.strip()).netloc
        except ValueError:
            origin_host = ""
        if not host or origin_host.lower() != host.strip().lower():
            raise ApiError(403, "cross_site_request",
                           f"refused a request from origin {origin[:100]!r}; use the "
                           "dashboard's own forms")


def _form(request: ApiRequest) -> dict[str, str]:
    """The form fields of a POST (application/x-www-form-urlencoded only; a
    repeated field is refused)."""
    content_type = request.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "application/x-www-form-urlencoded":
        raise ApiError(415, "unsupported_media_type",
                       f"content-type {content_type[:100]!r}; the dashboard's forms send "
                       "application/x-www-form-urlencoded")
    try:
        text = request.body.decode("utf-8")
    except UnicodeDecodeError:
        raise ApiError(400, "invalid_argument", "form: is not UTF-8", "form") from None
    return wire.urlencoded_fields(text, "form", max_fields=10, strict=False)


def _decode(segment: str) -> str:
    try:
        return unquote(segment, errors="strict")
    except UnicodeDecodeError:
        raise ApiError(400, "bad_path", "path is not valid percent-encoded UTF-8") from None


def _allowed(method: str, wanted: str, route: DashboardRoute) -> DashboardRoute:
    # Method names are case-sensitive (RFC 9110, 9.1): "get" is not GET.
    if method != wanted:
        raise ApiError(405, "method_not_allowed",
                       f"{method[:40]} is not allowed here; use {wanted}",
                       headers={"allow": wanted})
    return route


def _no_page(raw: Sequence[str]) -> ApiError:
    return ApiError(404, "no_route", f"no dashboard page /v1/{'/'.join(raw)[:200]}")


# ------------------------------------------------- job pages and search

#: The scope views besides its main page: a job, a search, completed jobs.
JOB_VIEWS = ("job", "search", "completed")
#: Jobs per page of a search, and of a queue's completed jobs.
SEARCH_PAGE = 25
COMPLETED_PAGE = 50
#: Characters of a payload a job's page shows (pretty-printed JSON).
CARGO_EXCERPT = 20_000


def _job_view_route(scope: Scope, tail: Sequence[str], method: str) -> DashboardRoute | None:
    """The route of a job page, a search or a queue's completed jobs
    (``tail``: the still-encoded segments after the scope's dashboard), or
    None when ``tail`` is none of them."""
    if len(tail) == 2 and tail[0] == "jobs":
        job_id = check_id("job_id", _decode(tail[1]))
        return _allowed(method, "GET", DashboardRoute("job", scope, job_id))
    if list(tail) == ["search"]:
        return _allowed(method, "GET", DashboardRoute("search", scope))
    if len(tail) == 3 and tail[0] == "queues" and tail[2] == "completed":
        queue = check_id("queue", _decode(tail[1]))
        return _allowed(method, "GET", DashboardRoute("completed", scope, queue))
    return None


def job_path(scope: Scope, job_id: str) -> str:
    """The path of a job's page (any id: "/" and the rest percent-encoded)."""
    return f"{scope_path(scope)}/jobs/{quote(job_id, safe='')}"


def completed_path(scope: Scope, queue: str) -> str:
    """The path of a queue's completed jobs."""
    return f"{scope_path(scope)}/queues/{quote(queue, safe='')}/completed"


def _job_link(scope: Scope, job_id: str) -> str:
    return f'<a class="id" href="{_e(job_path(scope, job_id))}">{_e(job_id)}</a>'


def _prefix_link(scope: Scope, job_id: str) -> str:
    """A link listing the jobs whose id starts with ``job_id``."""
    query = urlencode({"q": job_id, "list": "prefix"})
    return (f'<a href="{_e(scope_path(scope))}/search?{_e(query)}">Jobs whose id starts '
            "with this one</a>")


def _state_badge(job: JobRecord) -> str:
    if job.state == "settled":
        css = "ok" if job.outcome == "completed" else "failed"
        return f'<span class="badge {css}">settled {_e(job.outcome)}</span>'
    return f'<span class="badge">{_e(job.state)}</span>'


def _search_problem(fields: Mapping[str, str] | None, given: str) -> str | None:
    """Why a search cannot run, in words, or None when it can."""
    if fields is None:
        return "The search is malformed (a parameter twice, or not UTF-8)."
    if not given:
        return "Type a job id, or the start of one."
    if len(given) > MAX_ID_LENGTH:
        return f"A job id has at most {MAX_ID_LENGTH} characters; this has {len(given)}."
    return None


def _single_fields(query: str) -> dict[str, str] | None:
    """A search's query parameters; None when malformed or one is repeated
    (which of two boxes was meant is not for the page to guess)."""
    fields = _query_fields(query)
    if fields is None or len(fields) != len(parse_qsl(query, max_num_fields=5)):
        return None
    return fields


def _duration(start_ms: int | None, end_ms: int | None) -> str:
    """How long from ``start_ms`` to ``end_ms``, in words ("" when unknown)."""
    if start_ms is None or end_ms is None or end_ms < start_ms:
        return ""
    took = end_ms - start_ms
    if took < 1000:
        return f"{took} ms"
    if took < 60_000:
        return f"{took / 1000:.1f} s"
    minutes, seconds = divmod(took // 1000, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


@dataclass(frozen=True, slots=True)
class WaitReason:
    """One thing a job waits for, or is doing: ``code`` a stable name (an
    ``explain`` hold's kind, or settled, running, cancellation_pending,
    next_to_run, overdue), ``text`` its plain words, ``at`` the moment it
    names (epoch ms) and ``job_ids`` the other jobs it names."""

    code: str
    text: str
    at: int | None = None
    job_ids: tuple[str, ...] = ()


#: A job due this long (ms) with nothing holding it is marked overdue: a
#: tick should have claimed it by now, so its host may not be ticking.
OVERDUE_AFTER_MS = 60_000


def waiting_on(job: JobRecord, wait: JobWait | None, now_ms: int) -> list[WaitReason]:
    """What ``job`` waits for: for a queued job, each hold ``explain``
    found (``wait``), or that nothing holds it (overdue once it has been due
    for ``OVERDUE_AFTER_MS``); for the others, what they are doing."""
    if job.state == "settled":
        return [WaitReason("settled", f"Settled {job.outcome}: it waits for nothing.",
                           job.settled_at)]
    if job.state == "running":
        reasons = []
        if job.cancellation_id is not None:
            reasons.append(WaitReason(
                "cancellation_pending", f"Cancellation {job.cancellation_id} is recorded: "
                "the running execution is told to stop, and it settles cancelled."))
        reasons.append(WaitReason("running", f"Running attempt {job.attempt} since",
                                  job.started_at))
        return reasons
    holds = () if wait is None else wait.holds
    if not holds:
        ready_at = job.due_at if job.due_at is not None else job.enqueued_at
        if now_ms - ready_at >= OVERDUE_AFTER_MS:
            return [WaitReason("overdue", "Overdue: nothing holds it, yet no tick has claimed "
                                          "it since it became due", ready_at)]
        return [WaitReason("next_to_run", "Nothing holds it: the next tick may claim it.")]
    return [_hold_reason(job, hold) for hold in holds]


@dataclass(frozen=True, slots=True)
class QueueListing:
    """What a queue's section read, for the "waits for" cell of each job it
    lists: ``max_running`` its limit; ``running`` its running jobs as read
    (enqueue order), ``running_known`` whether that is every one of them or
    at least ``max_running``; ``ready`` the listed jobs a claim may take
    (queued, ready, not cancelled; the head and the oldest queued), in
    pick order; ``every_queued`` whether the listing holds every queued job
    of the queue; ``best_ready`` the job a claim takes next when the head
    says so (None while a job of the queue runs: the head is then that
    job); ``lane_limits`` every lane's limit; ``rate_limits`` every rate
    limit and hold in force, as the page read them."""

    paused: bool
    max_running: int
    running: tuple[JobRecord, ...]
    running_known: bool
    ready: tuple[JobRecord, ...]
    every_queued: bool
    best_ready: JobRecord | None
    lane_limits: Mapping[str, int]
    rate_limits: tuple[RateLimit, ...] = ()

    @classmethod
    def of(cls, status: QueueStatus, max_running: int, head: JobRecord | None,
           queued: JobPage, running: JobPage, lane_limits: Mapping[str, int],
           rate_limits: Sequence[RateLimit] = ()) -> QueueListing:
        listed = {job.job_id: job for job in ([head] if head else []) + list(queued.jobs)}
        # Ready as the claim and explain's ready_ahead mean it: queued, its
        # due time passed (due_at cleared), no cancellation recorded.
        ready = sorted((job for job in listed.values()
                        if job.state == "queued" and job.due_at is None
                        and job.cancellation_id is None), key=_pick_order)
        return cls(status.paused, max_running, tuple(running.jobs),
                   running.cursor is None or len(running.jobs) >= max_running, tuple(ready),
                   queued.cursor is None,
                   head if head is not None and head.state == "queued" else None, lane_limits,
                   tuple(rate_limits))


def _pick_order(job: JobRecord) -> tuple[int, int]:
    """A claim's order within a queue: higher priority first, then older."""
    return (-job.priority, job.sequence)


def _waits_cell(scope: Scope, job: JobRecord, listing: QueueListing, now_ms: int) -> str:
    """What a listed job waits for, in a few words, from what the queue's
    section read already: no read per job. It names only holds it can prove
    from those reads, and says what it cannot know; the job's own page
    (``explain``) reads what is missing and is exact.

    Known here: the queue's pause and limit, and its running jobs up to the
    limit (so whether the queue is full, unless its limit is above a page
    of running jobs). The jobs ahead: only the listed ones (the head and the
    oldest queued). Newer unlisted jobs go after a listed one unless their
    priority is higher, which the listing rules out when it holds every
    queued job, or when the head is the next job to claim (nothing runs) and
    its priority is not above this job's. A lane's running jobs in other
    queues are not read: the cell proves a lane full only from this queue's
    running jobs. The owner's slots are left to the job's page."""
    if job.state == "running":
        return f"running since {_time(job.started_at)}"
    unknown: list[str] = []
    queue_running: list[str] = []
    ahead: list[str] = []
    if listing.running_known:
        queue_running = [other.job_id for other in listing.running][:listing.max_running]
        free = listing.max_running - len(queue_running)
        mine = _pick_order(job)
        ahead = [other.job_id for other in listing.ready
                 if other.job_id != job.job_id and _pick_order(other) < mine][:max(free, 0)]
        best = listing.best_ready
        complete = listing.every_queued or (best is not None and best.priority <= job.priority)
        if free > 0 and len(ahead) < free and not complete:
            unknown.append("whether newer jobs of higher priority take its queue's free "
                           "places")
    else:
        unknown.append(f"whether its queue's {listing.max_running} places are all taken")
    lane_limit = listing.lane_limits.get(job.lane)
    lane_running: list[str] = []
    if lane_limit is not None:
        lane_running = [other.job_id for other in listing.running
                        if other.lane == job.lane][:lane_limit]
        if len(lane_running) < lane_limit:
            unknown.append(f"whether its lane's jobs in other queues fill its limit of "
                           f"{lane_limit}")
    queue_rate, lane_rate = rate_limits_for(job.queue, job.lane, listing.rate_limits)
    holds = decide_holds(job, now_ms, paused=listing.paused, queue_limit=listing.max_running,
                         queue_running=queue_running, ahead=ahead, lane_limit=lane_limit,
                         lane_running=lane_running, queue_rate=queue_rate,
                         lane_rate=lane_rate)
    if holds[:1] and holds[0].kind == "cancelled":
        unknown = []  # it settles without running, whatever else holds
    said = [_cell_hold(scope, hold) for hold in holds]
    if unknown:
        said.append('<span data-unknown="">not known here: ' + _e("; ".join(unknown))
                    + f' (<a href="{_e(job_path(scope, job.job_id))}">its page</a> says)'
                    + "</span>")
    if said:
        return "; ".join(said)
    ready_at = job.due_at if job.due_at is not None else job.enqueued_at
    if now_ms - ready_at >= OVERDUE_AFTER_MS:
        return f'<span class="badge overdue">overdue</span> since {_time(ready_at)}'
    return "nothing: next to run"


def _cell_hold(scope: Scope, hold: Hold) -> str:
    """One hold in a "waits for" cell: a few words and the jobs it names
    (the first LINKED_PER_CELL linked, the others counted)."""
    many = len(hold.job_ids) > 1
    words = {"cancelled": "cancelled: settles at the next tick",
             "queue_paused": "queue paused",
             "queue_busy": (f"its queue's limit, {hold.limit}, all taken by" if many
                            else "its queue's running job"),
             "behind_head": ("the jobs ahead, which take its free places:" if many
                             else "the job ahead"),
             "lane_busy": f"its lane's limit, {hold.limit}, all taken by",
             "owner_busy": "the owner at its concurrency", "not_due": "its due time",
             "queue_rate_limited": "its queue's rate limit, until",
             "lane_rate_limited": "its lane's rate limit, until"}
    linked = "".join(f" {_job_link(scope, job_id)}"
                     for job_id in hold.job_ids[:LINKED_PER_CELL])
    if hold.until is not None and hold.kind != "not_due":
        linked += f" {_time(hold.until)}"
    rest = len(hold.job_ids) - LINKED_PER_CELL
    more = f" and {rest} more" if rest > 0 else ""
    return f'<span data-hold="{hold.kind}">{_e(words[hold.kind])}{linked}{more}</span>'


def _runs(max_running: int) -> str:
    """A limit in words: "1 job at a time", "up to 5 jobs at once"."""
    return "1 job at a time" if max_running == 1 else f"up to {max_running:,} jobs at once"


def _whole_number(given: str | None) -> int | str:
    """A form's whole number as an int; anything else (or a number too long
    to be one) as the text given, for the engine's check to refuse by name."""
    text = (given or "").strip()
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 12 else text


def _max_running(given: str | None) -> int:
    """A form's max_running: a whole number from 1 to MAX_RUNNING_LIMIT, or
    InvalidArgument naming the field (a number too long to be one is
    refused as text, unparsed)."""
    return check_max_running(_whole_number(given))


def _hold_reason(job: JobRecord, hold: Hold) -> WaitReason:
    if hold.kind == "not_due":
        return WaitReason("not_due", "Its retry is due at" if job.history else "Due at",
                          hold.until)
    if hold.kind == "cancelled":
        return WaitReason("cancelled", f"Cancellation {job.cancellation_id} is recorded: the "
                                       "next tick settles it cancelled, without running it.")
    if hold.kind == "queue_paused":
        return WaitReason("queue_paused", f"Queue {job.queue} is paused: no tick claims its "
                                          "jobs until it is resumed.")
    if hold.kind == "queue_rate_limited":
        return WaitReason(hold.kind, f"Queue {job.queue} is rate-limited: its next start is "
                                     "allowed at", hold.until)
    if hold.kind == "lane_rate_limited":
        return WaitReason(hold.kind, f"Its lane, {job.lane}, is rate-limited: its next start "
                                     "is allowed at", hold.until)
    at_most = ("one job at a time" if hold.limit in (None, 1)
               else f"at most {hold.limit} jobs at once")
    # A queue_busy or lane_busy hold carries its limit; the others none.
    text = {"queue_busy": f"Its queue runs {at_most} and is running",
            "behind_head": ("Behind the job ahead of it in its queue:" if len(hold.job_ids) == 1
                            else "Behind the jobs ahead of it in its queue, which take its "
                                 "free places:"),
            "lane_busy": f"Its lane, {job.lane}, runs {at_most} and is running",
            "owner_busy": f"The owner is at its concurrency ({len(hold.job_ids)} running):"
            }[hold.kind]
    return WaitReason(hold.kind, text, job_ids=hold.job_ids)


def _reasons_section(scope: Scope, reasons: Sequence[WaitReason]) -> str:
    items = []
    for reason in reasons:
        text = _e(reason.text)
        if reason.at is not None:
            text += f" {_time(reason.at)}"
        if reason.job_ids:
            text += " " + ", ".join(_job_link(scope, job_id) for job_id in reason.job_ids)
        items.append(f'<li data-reason="{_e(reason.code)}">{text}</li>')
    return f'<section id="waiting"><h2>What it waits for</h2><ul>{"".join(items)}</ul></section>'


def _job_facts(scope: Scope, job: JobRecord) -> str:
    """The job's record as a list of facts."""
    queue = (f'<a class="id" href="{_e(scope_path(scope))}#queue-{_anchor(job.queue)}">'
             f"{_e(job.queue)}</a>")
    attempts = f"{job.attempt}" + (f" of {job.retry.attempts}" if job.retry else "")
    redrives = [entry.redrive_id for entry in job.history if entry.redrive_id]
    facts: list[tuple[str, str]] = [
        ("queue", queue), ("lane", f'<span class="id">{_e(job.lane)}</span>'),
        ("priority", _e(job.priority)), ("state", _state_badge(job)),
        ("attempt", _e(attempts)), ("enqueued", _time(job.enqueued_at)),
    ]
    if job.run_at is not None:
        facts.append(("asked to run at", _time(job.run_at)))
    if job.delay_ms is not None:
        facts.append(("asked to run after", _e(f"{job.delay_ms} ms")))
    if job.due_at is not None:
        facts.append(("due", _time(job.due_at)))
    if job.started_at is not None:
        facts.append(("started", _time(job.started_at)))
    if job.settled_at is not None:
        facts.append(("settled", _time(job.settled_at)))
    if job.failure_reason:
        facts.append(("failure reason", f"<code>{_e(job.failure_reason)}</code>"))
    facts.append(("cancellation id", f'<span class="id">{_e(job.cancellation_id)}</span>'
                  if job.cancellation_id else '<span class="muted">none</span>'))
    facts.append(("redrive ids", " ".join(f'<span class="id">{_e(redrive)}</span>'
                                          for redrive in redrives)
                  or '<span class="muted">none</span>'))
    if job.recovery is not None:
        facts.append(("crash recoveries", _e(f"{job.recoveries} of "
                                             f"{job.recovery.max_recoveries}")))
    if job.retry is not None:
        retry = job.retry
        facts.append(("retry policy", _e(
            f"{retry.attempts} attempts; waits {retry.base_delay_ms} ms, \u00d7{retry.factor:g} "
            f"each time, at most {retry.max_delay_ms} ms")))
    items = "".join(f'<div data-fact="{_e(name)}"><dt>{_e(name)}</dt><dd>{value}</dd></div>'
                    for name, value in facts)
    return f'<section id="record"><dl class="facts">{items}</dl></section>'


def _attempts_section(job: JobRecord) -> str:
    """Every attempt the record keeps, oldest first, then the latest error
    in full (the record keeps the traceback of the latest ended attempt)."""
    rows = []
    if job.history and job.history[0].attempt > 1:
        rows.append('<tr class="note"><td colspan="7">Earlier attempts are not kept (the '
                    f"record keeps the last {MAX_HISTORY}).</td></tr>")
    for entry in job.history:
        rows.append(_attempt_row(entry.attempt, entry.outcome, entry.failure_reason,
                                 entry.started_at, entry.ended_at, _e(entry.error or "")))
        if entry.redrive_id:
            rows.append(f'<tr class="note" data-redrive="{_e(entry.redrive_id)}">'
                        f'<td colspan="7">Redriven (<span class="id">{_e(entry.redrive_id)}'
                        "</span>): the attempts start again at 1.</td></tr>")
    error = job.error
    line = _e(f"{error.type}: {error.message}") if error is not None else ""
    if job.state == "settled":
        rows.append(_attempt_row(job.attempt, job.outcome or "", job.failure_reason,
                                 job.started_at, job.settled_at, _clip(line, MESSAGE_EXCERPT)))
    else:
        rows.append(_attempt_row(job.attempt, job.state, None, job.started_at, None, ""))
    table = ('<div class="scroll"><table class="stack attempts"><thead><tr>'
             '<th class="num">attempt</th><th>outcome</th><th>reason</th><th>started</th>'
             '<th>ended</th><th>took</th><th>error</th></tr></thead>'
             f'<tbody>{"".join(rows)}</tbody></table></div>')
    latest = ""
    if error is not None:
        latest = (f'<h3>Latest error</h3><div class="error"><strong>{_e(error.type)}</strong>: '
                  f"{_e(_clip(error.message, MESSAGE_EXCERPT * 4))}</div>")
        if error.traceback:
            latest += (f"<details><summary>traceback</summary>"
                       f"<pre>{_e(_clip(error.traceback, TRACEBACK_EXCERPT))}</pre></details>")
    return f'<section id="attempts"><h2>Attempts</h2>{table}{latest}</section>'


def _attempt_row(attempt: int, outcome: str, reason: str | None, started: int | None,
                 ended: int | None, error: str) -> str:
    css = ("ok" if outcome == "completed" else "failed" if outcome in OUTCOMES else "")
    return (f'<tr data-attempt="{attempt}">'
            f'<td data-label="attempt" class="num">{attempt}</td>'
            f'<td data-label="outcome"><span class="badge {css}">{_e(outcome)}</span></td>'
            f'<td data-label="reason"><code>{_e(reason or "")}</code></td>'
            f'<td data-label="started">{_time(started)}</td>'
            f'<td data-label="ended">{_time(ended)}</td>'
            f'<td data-label="took">{_e(_duration(started, ended))}</td>'
            f'<td data-label="error">{error}</td></tr>')


def _cargo_section(job: JobRecord) -> str:
    """The payload, pretty-printed (escaped; very long ones cut)."""
    try:
        text = json.dumps(job.payload, ensure_ascii=False, indent=2, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(job.payload)
    cut = ""
    if len(text) > CARGO_EXCERPT:
        cut = (f'<p class="muted">The first {CARGO_EXCERPT:,} characters of '
               f"{len(text):,}; read the whole job from the API.</p>")
        text = text[:CARGO_EXCERPT] + "\u2026"
    return (f'<section id="cargo"><h2>Cargo</h2><pre class="cargo">{_e(text)}</pre>{cut}'
            "</section>")


def _found_table(scope: Scope, jobs: Iterable[JobRecord]) -> str:
    rows = [f'<tr data-job="{_e(job.job_id)}">'
            f'<td data-label="job">{_job_link(scope, job.job_id)}</td>'
            f'<td data-label="queue"><span class="id">{_e(job.queue)}</span></td>'
            f'<td data-label="state">{_state_badge(job)}</td>'
            f'<td data-label="attempt" class="num">{job.attempt}</td>'
            f'<td data-label="enqueued">{_time(job.enqueued_at)}</td>'
            f'<td data-label="payload"><code class="payload">{_e(_excerpt(job.payload))}'
            "</code></td></tr>" for job in jobs]
    return ('<div class="scroll"><table class="stack"><thead><tr><th>job</th><th>queue</th>'
            '<th>state</th><th class="num">attempt</th><th>enqueued</th><th>payload</th>'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')


def _completed_table(scope: Scope, jobs: Sequence[JobRecord]) -> str:
    """Completed jobs as a table ("" for none)."""
    if not jobs:
        return ""
    rows = [f'<tr data-job="{_e(job.job_id)}">'
            f'<td data-label="job">{_job_link(scope, job.job_id)}</td>'
            f'<td data-label="lane"><span class="id">{_e(job.lane)}</span></td>'
            f'<td data-label="attempt" class="num">{job.attempt}</td>'
            f'<td data-label="settled">{_time(job.settled_at)}</td>'
            f'<td data-label="took">{_e(_duration(job.started_at, job.settled_at))}</td>'
            f'<td data-label="payload"><code class="payload">{_e(_excerpt(job.payload))}'
            "</code></td></tr>" for job in jobs]
    return ('<div class="scroll"><table class="stack"><thead><tr><th>job</th><th>lane</th>'
            '<th class="num">attempt</th><th>settled</th><th>took</th><th>payload</th>'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table></div>')
