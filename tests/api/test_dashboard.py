"""The dashboard (tickwork.api.dashboard) through ``JobApi``, over real
owner-local runtimes on sqlite3: login, sessions, CSRF, escaping, actions.

The browser test (tests/dashboard/test_browser.py) drives the same pages in
Chromium against a real ``tickwork serve``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import html
import re
import sqlite3
import time
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from tests.api.test_routes import AUTH, TOKEN, Owners, call
from tests.support import CountingWake
from tests.support.engine import until
from tickwork import OwnerRuntime
from tickwork.api import ApiRequest, ApiResponse, JobApi, dashboard
from tickwork.api.dashboard import COOKIE_NAME, SECURITY_HEADERS
from tickwork.model.schedules import Schedule, ScheduledJob
from tickwork.stores import Sqlite3Database

HOST = "dash.example"


def session(expires_s: int) -> str:
    """A session cookie's value: the expiry and its HMAC under the token."""
    mac = hmac.new(TOKEN.encode(), b"tickwork dashboard session %d" % expires_s,
                   hashlib.sha256).hexdigest()
    return f"{expires_s}.{mac}"


SESSION = session(int(time.time()) + 3600)
CSRF = hmac.new(TOKEN.encode(), b"tickwork dashboard csrf", hashlib.sha256).hexdigest()
#: What a browser sends with the dashboard's own forms.
SAME_ORIGIN = {"host": HOST, "origin": f"http://{HOST}", "sec-fetch-site": "same-origin",
               "content-type": "application/x-www-form-urlencoded"}
COOKIE = {"cookie": f"other=1; {COOKIE_NAME}={SESSION}"}
HOSTILE = "<script>alert(\"x\")</script>'&"


@pytest.fixture
def owners() -> Owners:
    return Owners()


@pytest.fixture
def api(owners: Owners) -> JobApi:
    # The shared scope is an owner-local runtime of its own: the JobService is the same.
    return JobApi(token=TOKEN, owners=owners, shared=Owners()("shared"))


async def get(api: JobApi, path: str, headers: dict[str, str] | None = None,
              query: str = "") -> ApiResponse:
    return await api.handle(ApiRequest("GET", path, {"host": HOST, **(headers or {})},
                                       query=query))


async def post(api: JobApi, path: str, form: dict[str, str],
               headers: dict[str, str] | None = None, scheme: str = "http") -> ApiResponse:
    sent = {**SAME_ORIGIN, **COOKIE, **(headers or {})}
    return await api.handle(ApiRequest("POST", path, {k: v for k, v in sent.items() if v},
                                       urlencode(form).encode(), scheme=scheme))


def text(response: ApiResponse) -> str:
    assert isinstance(response.body, bytes)
    return response.body.decode()


def assert_html(response: ApiResponse) -> None:
    headers = response.all_headers()
    assert headers["content-type"] == "text/html; charset=utf-8"
    for name, value in SECURITY_HEADERS.items():
        assert headers[name] == value
    assert "frame-ancestors 'none'" in headers["content-security-policy"]


async def enqueue(api: JobApi, owner: str, job: dict[str, Any]) -> None:
    response = await call(api, "POST", f"/v1/owners/{owner}/jobs", job)
    assert response.status == 201, response.body


def a_job(job_id: str = "j1", queue: str = "emails", **fields: Any) -> dict[str, Any]:
    return {"job_id": job_id, "queue": queue, "lane": "tenant-1",
            "payload": {"to": "a@example.com", "secret": "PAYLOAD-TEXT"}, **fields}


# ------------------------------------------------------------------- login


async def test_login_page_is_open_and_holds_no_job_data(api: JobApi, owners: Owners) -> None:
    response = await get(api, "/v1/dashboard")
    assert response.status == 200
    assert_html(response)
    page = text(response)
    assert '<form method="post" action="/v1/dashboard/login">' in page
    assert 'name="viewport"' in page
    assert "<script src=\"/v1/dashboard/static/dashboard.js\" defer></script>" in page
    assert owners.runtimes == {}


async def test_wrong_token_sets_no_cookie(api: JobApi) -> None:
    for token in ("wrong", "", TOKEN + "x", SESSION):
        response = await post(api, "/v1/dashboard/login", {"token": token}, {"cookie": ""})
        assert response.status == 401
        assert "set-cookie" not in response.all_headers()
        assert "Wrong token." in text(response)


async def test_login_sets_a_derived_session_cookie(api: JobApi) -> None:
    response = await post(api, "/v1/dashboard/login", {"token": TOKEN}, {"cookie": ""})
    assert response.status == 303
    headers = response.all_headers()
    assert headers["location"] == "/v1/dashboard"
    cookie = headers["set-cookie"]
    value = cookie.split(";")[0].removeprefix(f"{COOKIE_NAME}=")
    expires = int(value.split(".")[0])
    assert abs(expires - (time.time() + 12 * 3600)) < 60
    assert value == session(expires)
    assert TOKEN not in cookie and "Max-Age=43200" in cookie.split("; ")
    for attribute in ("HttpOnly", "SameSite=Strict", "Path=/v1"):
        assert attribute in cookie.split("; ")
    assert "Secure" not in cookie.split("; ")
    over_https = await post(api, "/v1/dashboard/login", {"token": TOKEN}, {"cookie": ""},
                            scheme="https")
    assert "Secure" in over_https.all_headers()["set-cookie"].split("; ")


async def test_login_from_another_site_is_refused(api: JobApi) -> None:
    for headers in ({"origin": "https://evil.example"}, {"sec-fetch-site": "cross-site"},
                    {"origin": "null"}):
        response = await post(api, "/v1/dashboard/login", {"token": TOKEN}, headers)
        assert response.status == 403
        assert "cross_site_request" in text(response)
        assert "set-cookie" not in response.all_headers()


async def test_logout_clears_the_cookie(api: JobApi) -> None:
    response = await post(api, "/v1/dashboard/logout", {"csrf": CSRF})
    assert response.status == 303
    assert response.all_headers()["set-cookie"].startswith(f"{COOKIE_NAME}=; Max-Age=0;")


async def test_home_shows_the_scope_picker_once_logged_in(api: JobApi) -> None:
    page = text(await get(api, "/v1/dashboard", COOKIE))
    assert 'href="/v1/shared/dashboard"' in page
    assert 'action="/v1/dashboard/open"' in page
    opened = await get(api, "/v1/dashboard/open", query="owner=a%2Fb c")
    assert opened.status == 303
    assert opened.all_headers()["location"] == "/v1/owners/a%2Fb%20c/dashboard"
    shared = await get(api, "/v1/dashboard/open", query="scope=shared")
    assert shared.all_headers()["location"] == "/v1/shared/dashboard"
    assert (await get(api, "/v1/dashboard/open", query="owner=")).status == 400


async def test_no_token_configured_fails_closed(owners: Owners) -> None:
    api = JobApi(token=None, owners=owners)
    for response in (await get(api, "/v1/dashboard"),
                     await get(api, "/v1/owners/acme/dashboard", COOKIE),
                     await post(api, "/v1/dashboard/login", {"token": ""})):
        assert response.status == 503
        assert "token_not_configured" in text(response)
    assert owners.runtimes == {}


# ---------------------------------------------------------- scope pages


async def test_scope_page_without_a_session_redirects_and_shows_nothing(
        api: JobApi, owners: Owners) -> None:
    await enqueue(api, "acme", a_job())
    expired = session(int(time.time()) - 1)
    later = int(time.time()) + 7200
    extended = f"{later}.{SESSION.split('.')[1]}"  # a real MAC on another expiry
    for headers in ({}, {"cookie": f"{COOKIE_NAME}=stale"}, {"cookie": f"{COOKIE_NAME}={TOKEN}"},
                    {"cookie": f"{COOKIE_NAME}={expired}"}, {"cookie": f"{COOKIE_NAME}={extended}"},
                    {"cookie": f"{COOKIE_NAME}=.{SESSION.split('.')[1]}"}):
        response = await get(api, "/v1/owners/acme/dashboard", headers)
        assert response.status == 303
        assert response.all_headers()["location"] == "/v1/dashboard"
        assert "PAYLOAD-TEXT" not in text(response) and "j1" not in text(response)
    wrong = await get(api, "/v1/owners/acme/dashboard", {"authorization": "Bearer wrong"})
    assert wrong.status == 401
    assert "PAYLOAD-TEXT" not in text(wrong)


async def test_a_refused_request_touches_no_owner(api: JobApi, owners: Owners) -> None:
    await get(api, "/v1/owners/fresh/dashboard")
    await post(api, "/v1/owners/fresh/dashboard/actions/pause", {"queue": "q"}, {"cookie": ""})
    assert "fresh" not in owners.runtimes


@pytest.mark.parametrize("credentials", [COOKIE, AUTH], ids=["cookie", "bearer"])
async def test_scope_page_shows_queues_and_jobs(api: JobApi, owners: Owners,
                                                credentials: dict[str, str]) -> None:
    await enqueue(api, "acme", a_job("ready"))
    await enqueue(api, "acme", a_job("later", delay_ms=3_600_000))
    response = await get(api, "/v1/owners/acme/dashboard", credentials)
    assert response.status == 200
    assert_html(response)
    page = text(response)
    assert "owner acme" in page
    row = re.search(r'<tr data-queue="emails">(.*?)</tr>', page)
    assert row is not None
    cells = re.findall(r'<td class="num" data-label="([^"]+)">(\d+)</td>', row[1])
    assert cells[:3] == [("queued", "1"), ("due later", "1"), ("running", "0")]
    assert '<tr data-job="ready">' in page
    queued = page.split('data-list="queued"', 1)[1].split("</table>", 1)[0]
    # The head (ready) is not listed again; the job due later is, with its time.
    assert '<tr data-job="later">' in queued and 'data-job="ready"' not in queued
    assert 'data-label="due"><time datetime=' in queued
    assert "PAYLOAD-TEXT" in page
    assert f'name="csrf" value="{CSRF}"' in page


async def test_shared_scope_page(api: JobApi) -> None:
    response = await call(api, "POST", "/v1/shared/jobs", a_job("s1", queue="reports"))
    assert response.status == 201
    page = text(await get(api, "/v1/shared/dashboard", COOKIE))
    assert "shared queues" in page and '<tr data-job="s1">' in page


async def test_unconfigured_scope_is_a_page_naming_it(owners: Owners) -> None:
    api = JobApi(token=TOKEN, owners=owners)
    response = await get(api, "/v1/shared/dashboard", COOKIE)
    assert response.status == 404
    assert "scope_not_configured" in text(response)


async def test_hostile_text_is_escaped_everywhere(api: JobApi, owners: Owners) -> None:
    await enqueue(api, "acme", {"job_id": HOSTILE, "queue": HOSTILE, "lane": HOSTILE,
                                "payload": {"do": "fail", "reason": HOSTILE, "x": HOSTILE}})
    await owners.runtimes["acme"].tick()  # settles failed: a dead letter with the reason
    await enqueue(api, "acme", {"job_id": HOSTILE + "2", "queue": HOSTILE,
                                "payload": {"x": "</code></td>" + HOSTILE}})
    owners.runtimes["acme"].put_schedule(Schedule(
        HOSTILE, ScheduledJob(queue=HOSTILE, lane=HOSTILE, payload=HOSTILE), every_ms=60_000))
    query = urlencode({"did": "cancel", "result": "recorded", "subject": HOSTILE})
    page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE, query=query))
    assert "<script>" not in page.replace('<script src="/v1/dashboard/static/dashboard.js"', "")
    assert "</code></td><script" not in page
    escaped = html.escape(HOSTILE, quote=True)
    assert page.count(escaped) >= 8  # queue, jobs, lane, reason, schedule, flash...
    assert f'<p class="flash" role="status">Cancel of job <span class="id">{escaped}</span>' \
        in page


async def test_a_malformed_query_is_no_failure(api: JobApi) -> None:
    many = "&".join(f"p{n}=1" for n in range(20))
    for query in (many, "subject=%ff", "did=cancel&result=recorded&subject=%ff"):
        response = await get(api, "/v1/owners/acme/dashboard", COOKIE, query=query)
        assert response.status == 200 and 'class="flash"' not in text(response)
    refused = await get(api, "/v1/dashboard/open", query=many)
    assert refused.status == 400 and "query" in text(refused)


async def test_flash_wording_is_fixed(api: JobApi) -> None:
    query = urlencode({"did": "Your token expired; visit evil.example", "result": "recorded",
                       "subject": "x"})
    page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE, query=query))
    assert "evil.example" not in page


# ----------------------------------------------------------------- actions


async def test_cancel_from_the_page_reaches_the_store(api: JobApi, owners: Owners) -> None:
    await enqueue(api, "acme", a_job("j1"))
    response = await post(api, "/v1/owners/acme/dashboard/actions/cancel",
                          {"csrf": CSRF, "job_id": "j1"})
    assert response.status == 303
    location = urlsplit(response.all_headers()["location"])
    assert location.path == "/v1/owners/acme/dashboard"
    assert parse_qs(location.query) == {"did": ["cancel"], "result": ["recorded"],
                                        "subject": ["j1"]}
    record = owners.runtimes["acme"].read("j1")
    assert record is not None and record.cancellation_id == "dashboard"
    await owners.runtimes["acme"].tick()  # a recorded cancellation settles on the next tick
    settled = owners.runtimes["acme"].read("j1")
    assert settled is not None and settled.outcome == "cancelled"


@pytest.mark.parametrize(("form", "headers", "status", "code"), [
    ({"job_id": "j1"}, {}, 403, "csrf_mismatch"),
    ({"job_id": "j1", "csrf": CSRF[:-1] + ("1" if CSRF[-1] == "0" else "0")}, {}, 403,
     "csrf_mismatch"),
    ({"job_id": "j1", "csrf": ""}, {}, 403, "csrf_mismatch"),
    ({"job_id": "j1", "csrf": CSRF}, {"origin": "https://evil.example"}, 403,
     "cross_site_request"),
    ({"job_id": "j1", "csrf": CSRF}, {"sec-fetch-site": "same-site"}, 403,
     "cross_site_request"),
    ({"job_id": "j1", "csrf": CSRF}, {"cookie": ""}, 401, "unauthorized"),
    ({"job_id": "j1", "csrf": CSRF}, {"cookie": f"{COOKIE_NAME}=forged"}, 401, "unauthorized"),
    ({"job_id": "j1", "csrf": CSRF}, {"content-type": "application/json"}, 415,
     "unsupported_media_type"),
], ids=["no-csrf", "wrong-csrf", "empty-csrf", "foreign-origin", "same-site", "no-session",
        "forged-session", "json"])
async def test_refused_actions_change_nothing(api: JobApi, owners: Owners, form: dict[str, str],
                                              headers: dict[str, str], status: int,
                                              code: str) -> None:
    await enqueue(api, "acme", a_job("j1"))
    response = await post(api, "/v1/owners/acme/dashboard/actions/cancel", form, headers)
    assert response.status == status
    assert code in text(response)
    assert_html(response)
    record = owners.runtimes["acme"].read("j1")
    assert record is not None and record.state == "queued" and record.cancellation_id is None


async def test_bearer_token_with_csrf_may_act(api: JobApi, owners: Owners) -> None:
    await enqueue(api, "acme", a_job("j1"))
    response = await post(api, "/v1/owners/acme/dashboard/actions/pause",
                          {"csrf": CSRF, "queue": "emails"}, {"cookie": "", **AUTH})
    assert response.status == 303
    assert [status.paused for status in owners.runtimes["acme"].status()] == [True]


async def test_pause_resume_and_schedule_actions(api: JobApi, owners: Owners) -> None:
    await enqueue(api, "acme", a_job("j1"))
    owners.runtimes["acme"].put_schedule(Schedule(
        "nightly", ScheduledJob(queue="emails", lane="l"), cron="0 3 * * *"))
    path = "/v1/owners/acme/dashboard/actions"
    assert (await post(api, f"{path}/pause", {"csrf": CSRF, "queue": "emails"})).status == 303
    page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE))
    assert '<span class="badge paused">paused</span>' in page
    assert f'{path}/resume"' in page
    assert (await post(api, f"{path}/resume", {"csrf": CSRF, "queue": "emails"})).status == 303
    assert [status.paused for status in owners.runtimes["acme"].status()] == [False]
    page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE))
    assert '<tr data-schedule="nightly">' in page and "cron 0 3 * * *" in page
    assert (await post(api, f"{path}/pause_schedule", {"csrf": CSRF, "name": "nightly"})
            ).status == 303
    assert [record.paused for record in owners.runtimes["acme"].schedules()] == [True]
    assert (await post(api, f"{path}/resume_schedule", {"csrf": CSRF, "name": "nightly"})
            ).status == 303
    assert [record.paused for record in owners.runtimes["acme"].schedules()] == [False]
    missing = await post(api, f"{path}/pause", {"csrf": CSRF})
    assert missing.status == 400 and "queue" in text(missing)


async def test_dead_letter_redrive(api: JobApi, owners: Owners) -> None:
    await enqueue(api, "acme", a_job("bad", payload={"do": "fail", "reason": "smtp down"}))
    await owners.runtimes["acme"].tick()
    page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE))
    assert "smtp down" in page
    record = owners.runtimes["acme"].read("bad")
    assert record is not None and record.outcome == "failed"
    redrive_id = f"dashboard-{record.settled_at}"
    assert f'name="redrive_id" value="{redrive_id}"' in page
    form = {"csrf": CSRF, "job_id": "bad", "redrive_id": redrive_id}
    response = await post(api, "/v1/owners/acme/dashboard/actions/redrive", form)
    assert parse_qs(urlsplit(response.all_headers()["location"]).query)["result"] == ["redriven"]
    again = owners.runtimes["acme"].read("bad")
    assert again is not None and again.state == "queued"
    # A second submit of the same form replays: no second chain.
    replay = await post(api, "/v1/owners/acme/dashboard/actions/redrive", form)
    assert parse_qs(urlsplit(replay.all_headers()["location"]).query)["result"] == ["replayed"]


async def test_redrive_all_of_a_queues_dead_letters(api: JobApi, owners: Owners) -> None:
    for job_id in ("bad-1", "bad-2"):
        await enqueue(api, "acme", a_job(job_id, payload={"do": "fail", "reason": "smtp down"}))
    await enqueue(api, "acme", a_job("fine"))
    runtime = owners.runtimes["acme"]
    await runtime.drain()
    newest = runtime.read("bad-2")
    assert newest is not None and newest.outcome == "failed"
    page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE))
    redrive_id = f"dashboard-all-{newest.settled_at}.{newest.sequence}"
    assert 'action="/v1/owners/acme/dashboard/actions/redrive_dead_letters"' in page
    assert f'name="redrive_id" value="{redrive_id}"' in page
    form = {"csrf": CSRF, "queue": "emails", "redrive_id": redrive_id}
    response = await post(api, "/v1/owners/acme/dashboard/actions/redrive_dead_letters", form)
    assert parse_qs(urlsplit(response.all_headers()["location"]).query)["result"] == ["redriven"]
    states = {job_id: runtime.read(job_id) for job_id in ("bad-1", "bad-2", "fine")}
    assert {job_id: record and record.state for job_id, record in states.items()} == {
        "bad-1": "queued", "bad-2": "queued", "fine": "settled"}
    location = urlsplit(response.all_headers()["location"])
    flash = text(await get(api, location.path, COOKIE, query=location.query))
    assert ("Redrive of every dead letter of queue <span class=\"id\">emails</span>: "
            "redriven") in flash
    # Both fail again; the same form (a double submit) replays, redriving nothing.
    await runtime.drain()
    replay = await post(api, "/v1/owners/acme/dashboard/actions/redrive_dead_letters", form)
    assert parse_qs(urlsplit(replay.all_headers()["location"]).query)["result"] == ["replayed"]
    assert all(record is not None and record.state == "settled"
               for record in (runtime.read("bad-1"), runtime.read("bad-2")))
    # The page now names a new set (its newest dead letter changed): a new press redrives.
    page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE))
    assert f'value="{redrive_id}"' not in page


async def test_redrive_all_stops_after_its_pages_and_says_more_remain(
        api: JobApi, owners: Owners, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dashboard, "REDRIVE_ALL_PAGES", 1)
    for n in range(101):
        await enqueue(api, "acme", a_job(f"bad-{n}", payload={"do": "fail"}))
    runtime = owners.runtimes["acme"]
    await runtime.drain()
    form = {"csrf": CSRF, "queue": "emails", "redrive_id": "press-1"}
    response = await post(api, "/v1/owners/acme/dashboard/actions/redrive_dead_letters", form)
    assert parse_qs(urlsplit(response.all_headers()["location"]).query)["result"] == ["more"]
    assert len(runtime.dead_letters("emails").jobs) == 1  # the oldest: the next press's
    again = await post(api, "/v1/owners/acme/dashboard/actions/redrive_dead_letters", form)
    assert parse_qs(urlsplit(again.all_headers()["location"]).query)["result"] == ["redriven"]
    assert runtime.dead_letters("emails").jobs == []


async def test_cancel_a_lanes_queued_jobs(api: JobApi, owners: Owners) -> None:
    await enqueue(api, "acme", a_job("gone-1", queue="a", lane="tenant-gone"))
    await enqueue(api, "acme", a_job("gone-2", queue="b", lane="tenant-gone"))
    await enqueue(api, "acme", a_job("kept", queue="a", lane="tenant-kept"))
    runtime = owners.runtimes["acme"]
    page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE))
    assert 'action="/v1/owners/acme/dashboard/actions/cancel_lane"' in page
    form = {"csrf": CSRF, "lane": "tenant-gone"}
    response = await post(api, "/v1/owners/acme/dashboard/actions/cancel_lane", form)
    location = urlsplit(response.all_headers()["location"])
    assert parse_qs(location.query)["result"] == ["cancelled"]
    flash = text(await get(api, location.path, COOKIE, query=location.query))
    assert ("Cancel of every queued job of lane <span class=\"id\">tenant-gone</span>: "
            "cancelled; each settles without running") in flash
    assert {job_id: record and record.cancellation_id
            for job_id in ("gone-1", "gone-2", "kept")
            for record in [runtime.read(job_id)]} == {
        "gone-1": "dashboard", "gone-2": "dashboard", "kept": None}
    # A double submit replays; once settled, the lane has nothing queued.
    replay = await post(api, "/v1/owners/acme/dashboard/actions/cancel_lane", form)
    assert parse_qs(urlsplit(replay.all_headers()["location"]).query)["result"] == ["replayed"]
    await runtime.drain()
    assert runtime.read("gone-1").outcome == "cancelled"  # type: ignore[union-attr]
    assert runtime.read("kept").outcome == "completed"  # type: ignore[union-attr]
    after = await post(api, "/v1/owners/acme/dashboard/actions/cancel_lane", form)
    assert parse_qs(urlsplit(after.all_headers()["location"]).query)["result"] == [
        "none_queued"]
    # A lane too long is refused by name, and nothing changes.
    before = runtime.read("kept")
    refused = await post(api, "/v1/owners/acme/dashboard/actions/cancel_lane",
                         {"csrf": CSRF, "lane": "l" * 513})
    assert refused.status == 400 and "lane" in text(refused)
    assert runtime.read("kept") == before


async def test_cancel_lane_stops_after_its_pages_and_says_more_remain(
        api: JobApi, owners: Owners, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dashboard, "CANCEL_LANE_PAGES", 1)
    for n in range(101):
        await enqueue(api, "acme", a_job(f"gone-{n}", queue=f"q{n}", lane="tenant-gone"))
    runtime = owners.runtimes["acme"]
    form = {"csrf": CSRF, "lane": "tenant-gone"}
    response = await post(api, "/v1/owners/acme/dashboard/actions/cancel_lane", form)
    assert parse_qs(urlsplit(response.all_headers()["location"]).query)["result"] == [
        "more_queued"]
    assert runtime.read("gone-100").cancellation_id is None  # type: ignore[union-attr]
    # Nothing ran meanwhile, so the first 100 still wait: the next press
    # replays them (a read, not counted against its pages) and goes on.
    again = await post(api, "/v1/owners/acme/dashboard/actions/cancel_lane", form)
    assert parse_qs(urlsplit(again.all_headers()["location"]).query)["result"] == ["cancelled"]
    assert runtime.read("gone-100").cancellation_id == "dashboard"  # type: ignore[union-attr]
    # Reading is bounded too: with one page read per press, it stops there.
    monkeypatch.setattr(dashboard, "LANE_PAGES_READ", 1)
    bounded = await post(api, "/v1/owners/acme/dashboard/actions/cancel_lane", form)
    assert parse_qs(urlsplit(bounded.all_headers()["location"]).query)["result"] == [
        "more_queued"]


# ------------------------------------------------------------------ limits


def limits_of(owners: Owners, owner: str = "acme") -> list[tuple[str, str, int]]:
    return [(limit.kind, limit.key, limit.max_running)
            for limit in owners.runtimes[owner].limits()]


async def act(api: JobApi, action: str, form: dict[str, str]) -> ApiResponse:
    return await post(api, f"/v1/owners/acme/dashboard/actions/{action}", {"csrf": CSRF, **form})


def limit_line(page: str, queue: str) -> str:
    block = page.split(f'<div class="queue" id="queue-{queue.encode().hex()}"', 1)[1]
    found = re.search(r'<div class="limit" data-limit="(\d+)">(.*?)</div>', block, re.S)
    assert found is not None
    return f"{found.group(1)}: {found.group(2)}"


async def test_limits_are_set_and_cleared_from_the_page(
        api: JobApi, owners: Owners, monkeypatch: pytest.MonkeyPatch) -> None:
    await enqueue(api, "acme", a_job("j1", queue="exports"))
    page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE))
    line = limit_line(page, "exports")
    assert line.startswith("1: Runs 1 job at a time (the default). ")
    assert 'action="/v1/owners/acme/dashboard/actions/set_limit"' in line
    assert "Clear limit" not in line  # nothing stored: nothing to clear
    assert "No lane has a limit of its own." in section(page, "lanes")

    response = await act(api, "set_limit", {"kind": "queue", "key": "exports",
                                            "max_running": "4"})
    location = urlsplit(response.all_headers()["location"])
    assert (response.status, parse_qs(location.query)) == (303, {
        "did": ["set_limit_queue"], "result": ["limit_set"], "subject": ["exports"]})
    assert limits_of(owners) == [("queue", "exports", 4)]
    page = text(await get(api, location.path, COOKIE, query=location.query))
    assert 'Limit of queue <span class="id">exports</span>: set' in page
    line = limit_line(page, "exports")
    assert line.startswith("4: Runs up to 4 jobs at once. ") and "Clear limit" in line
    assert 'value="4"' in line  # the form starts from the stored limit
    row = re.search(r'<tr data-queue="exports">(.*?)</tr>', page, re.S)
    assert row is not None and '<td class="num" data-label="at once">4</td>' in row.group(1)
    again = await act(api, "set_limit", {"kind": "queue", "key": "exports", "max_running": "4"})
    assert parse_qs(urlsplit(again.all_headers()["location"]).query)["result"] == [
        "limit_kept"]

    # A lane from the Lanes form; a limit of a queue without jobs is named too.
    await act(api, "set_limit", {"kind": "lane", "key": "tenant 7", "max_running": "2"})
    await act(api, "set_limit", {"kind": "queue", "key": "later", "max_running": "9"})
    assert limits_of(owners) == [("queue", "exports", 4), ("queue", "later", 9),
                                 ("lane", "tenant 7", 2)]
    page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE))
    lanes = section(page, "lanes")
    row = re.search(r'<tr data-lane="tenant 7">(.*?)</tr>', lanes, re.S)
    assert row is not None and "up to 2 jobs at once" in row.group(1)
    assert 'name="key" value="tenant 7"' in row.group(1) and "Clear limit" in row.group(1)
    assert 'id="limit-lane-new-key" name="key" required' in lanes  # a new lane's form
    assert ('Limits of queues without jobs: <span class="id">later</span> '
            "(up to 9 jobs at once).") in section(page, "queues")

    cleared = await act(api, "clear_limit", {"kind": "lane", "key": "tenant 7"})
    assert parse_qs(urlsplit(cleared.all_headers()["location"]).query) == {
        "did": ["clear_limit_lane"], "result": ["limit_cleared"], "subject": ["tenant 7"]}
    await act(api, "clear_limit", {"kind": "queue", "key": "exports"})
    assert limits_of(owners) == [("queue", "later", 9)]
    none = await act(api, "clear_limit", {"kind": "queue", "key": "exports"})
    location = urlsplit(none.all_headers()["location"])
    assert parse_qs(location.query)["result"] == ["no_limit"]
    page = text(await get(api, location.path, COOKIE, query=location.query))
    assert ('Clearing the limit of queue <span class="id">exports</span>: it had no limit'
            in page)
    assert limit_line(page, "exports").startswith("1: Runs 1 job at a time (the default).")
    # Many queues without jobs but with limits: the first few named, the rest counted.
    await act(api, "set_limit", {"kind": "queue", "key": "later-2", "max_running": "2"})
    monkeypatch.setattr(dashboard, "MAX_DETAILED_QUEUES", 1)
    page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE))
    assert ('Limits of queues without jobs: <span class="id">later</span> '
            "(up to 9 jobs at once), and 1 more.") in section(page, "queues")


@pytest.mark.parametrize(("form", "field"), [
    ({"kind": "queue", "key": "exports", "max_running": "0"}, "max_running"),
    ({"kind": "queue", "key": "exports", "max_running": "10001"}, "max_running"),
    ({"kind": "queue", "key": "exports", "max_running": "ten"}, "max_running"),
    ({"kind": "queue", "key": "exports", "max_running": "2.5"}, "max_running"),
    ({"kind": "queue", "key": "exports", "max_running": "9" * 5000}, "max_running"),
    ({"kind": "queue", "key": "exports"}, "max_running"),
    ({"kind": "tenant", "key": "exports", "max_running": "2"}, "kind"),
    ({"kind": "lane", "key": "", "max_running": "2"}, "lane"),
], ids=["zero", "too-many", "text", "fraction", "huge", "missing", "bad-kind", "empty-lane"])
async def test_a_bad_limit_from_the_page_is_refused_in_words_and_stores_nothing(
        api: JobApi, owners: Owners, form: dict[str, str], field: str) -> None:
    await enqueue(api, "acme", a_job("j1", queue="exports"))
    await act(api, "set_limit", {"kind": "queue", "key": "exports", "max_running": "3"})
    response = await act(api, "set_limit", form)
    assert response.status == 400
    assert_html(response)
    said = html.unescape(text(response))
    assert f"400 <code>invalid_argument</code>: {field}: " in said
    if field == "max_running":
        assert "must be an integer from 1 to 10000" in said
    assert limits_of(owners) == [("queue", "exports", 3)]


def rate_limits_of(owners: Owners, owner: str = "acme") -> list[tuple[Any, ...]]:
    return [(limit.kind, limit.key, limit.starts, limit.period_ms, limit.burst)
            for limit in owners.runtimes[owner].rate_limits()]


async def test_rate_limits_are_set_and_cleared_from_the_page(
        api: JobApi, owners: Owners) -> None:
    await enqueue(api, "acme", a_job("j1", queue="exports"))
    page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE))
    assert "No rate limit and no hold" in section(page, "rate-limits")
    response = await act(api, "set_rate_limit", {"kind": "lane", "key": "tenant 7",
                                                 "starts": "10", "period_ms": "1000",
                                                 "burst": ""})
    location = urlsplit(response.all_headers()["location"])
    assert (response.status, parse_qs(location.query)) == (303, {
        "did": ["set_rate_limit_lane"], "result": ["limit_set"], "subject": ["tenant 7"]})
    await act(api, "set_rate_limit", {"kind": "queue", "key": "exports", "starts": "3",
                                      "period_ms": "60000", "burst": "1"})
    assert rate_limits_of(owners) == [("queue", "exports", 3, 60_000, 1),
                                      ("lane", "tenant 7", 10, 1000, 10)]
    page = text(await get(api, location.path, COOKIE, query=location.query))
    assert 'Rate limit of lane <span class="id">tenant 7</span>: set' in page
    rates = section(page, "rate-limits")
    row = re.search(r'<tr data-rate="lane:tenant 7">(.*?)</tr>', rates, re.S)
    assert row is not None and "10 per 1,000 ms, burst 10" in row.group(1)
    assert "Clear" in row.group(1)

    cleared = await act(api, "clear_rate_limit", {"kind": "lane", "key": "tenant 7"})
    assert parse_qs(urlsplit(cleared.all_headers()["location"]).query) == {
        "did": ["clear_rate_limit_lane"], "result": ["rate_limit_cleared"],
        "subject": ["tenant 7"]}
    none = await act(api, "clear_rate_limit", {"kind": "lane", "key": "tenant 7"})
    assert parse_qs(urlsplit(none.all_headers()["location"]).query)["result"] == [
        "no_rate_limit"]
    assert rate_limits_of(owners) == [("queue", "exports", 3, 60_000, 1)]


@pytest.mark.parametrize(("form", "field"), [
    ({"starts": "0", "period_ms": "1000"}, "starts"),
    ({"starts": "ten", "period_ms": "1000"}, "starts"),
    ({"starts": "9" * 5000, "period_ms": "1000"}, "starts"),
    ({"starts": "1", "period_ms": "0"}, "period_ms"),
    ({"starts": "1"}, "period_ms"),
    ({"starts": "1", "period_ms": "1000", "burst": "0"}, "burst"),
], ids=["zero", "text", "huge", "zero-period", "missing-period", "zero-burst"])
async def test_a_bad_rate_limit_from_the_page_is_refused_in_words_and_stores_nothing(
        api: JobApi, owners: Owners, form: dict[str, str], field: str) -> None:
    await act(api, "set_rate_limit", {"kind": "queue", "key": "exports", "starts": "3",
                                      "period_ms": "1000"})
    response = await act(api, "set_rate_limit", {"kind": "queue", "key": "exports", **form})
    assert response.status == 400
    assert f"400 <code>invalid_argument</code>: {field}: " in html.unescape(text(response))
    assert rate_limits_of(owners) == [("queue", "exports", 3, 1000, 3)]


async def test_limit_forms_are_refused_without_csrf_or_from_another_site(
        api: JobApi, owners: Owners) -> None:
    await enqueue(api, "acme", a_job("j1", queue="exports"))
    form = {"kind": "queue", "key": "exports", "max_running": "5"}
    path = "/v1/owners/acme/dashboard/actions/set_limit"
    assert (await post(api, path, form)).status == 403
    foreign = await post(api, path, {"csrf": CSRF, **form}, {"origin": "https://evil.example"})
    assert foreign.status == 403 and "cross_site_request" in text(foreign)
    assert limits_of(owners) == []


def _listing(**fields: Any) -> Any:
    from tickwork.api.dashboard import QueueListing
    base = QueueListing(paused=False, max_running=1, running=(), running_known=True,
                        ready=(), every_queued=True, best_ready=None, lane_limits={})
    return base.__class__(**{**{name: getattr(base, name) for name in base.__slots__},
                             **fields})


def test_a_listed_jobs_cell_names_a_rate_limit_until_it_ends() -> None:
    from tickwork import RateLimit
    from tickwork.api.dashboard import _waits_cell
    scope = ("owner", "acme")
    job = _record(job_id="next", sequence=10)
    held = _listing(ready=(job,), rate_limits=(
        RateLimit("lane", job.lane, None, None, None, held_until=9_000),
        RateLimit("queue", job.queue, 1, 1000, 1, next_start_at=4_000)))
    cell = _waits_cell(scope, job, held, 5_000)
    # The queue's bucket allows a start already; the lane's hold does not.
    assert re.findall(r'data-hold="(\w+)"', cell) == ["lane_rate_limited"]
    assert "its lane&#x27;s rate limit, until" in cell and 'data-ms="9000"' in cell
    assert "next to run" not in cell
    assert "next to run" in _waits_cell(scope, job, held, 9_000)


def test_a_listed_jobs_cell_names_only_what_its_queues_reads_prove() -> None:
    from tickwork.api.dashboard import _waits_cell
    scope = ("owner", "acme")

    def holds(job: Any, listing: Any) -> tuple[list[str], bool]:
        cell = _waits_cell(scope, job, listing, 5_000)
        return re.findall(r'data-hold="(\w+)"', cell), "data-unknown" in cell

    # A queue of 3 places, 2 running: one free place.
    running = tuple(_record(job_id=f"r{n}", state="running", sequence=n, started_at=1_000)
                    for n in (1, 2))
    first, second, third = (_record(job_id=name, sequence=10 + n)
                            for n, name in enumerate(("first", "second", "third")))
    wide = _listing(max_running=3, running=running, ready=(first, second, third))
    assert holds(first, wide) == ([], False)  # the free place is its
    assert holds(second, wide) == (["behind_head"], False)
    assert 'href="/v1/owners/acme/dashboard/jobs/first">first</a>' in _waits_cell(
        scope, third, wide, 5_000)
    # Listed in part, with jobs running (so no head tells the best ready job):
    # a newer job of higher priority may take the free place; said, not guessed.
    partial = _listing(max_running=3, running=running, ready=(first, second, third),
                       every_queued=False)
    assert holds(first, partial) == ([], True)
    assert holds(second, partial) == (["behind_head"], False)  # first takes it, whatever else
    # Nothing runs and the head is the best ready job: no newer job is above
    # one of its priority, so the cell knows even from a part of the queue.
    serial = _listing(max_running=2, ready=(first, second, third), every_queued=False,
                      best_ready=first)
    assert holds(first, serial) == ([], False) and holds(second, serial) == ([], False)
    assert holds(third, serial) == (["behind_head"], False)

    # Full: every place taken (the first three named, the rest counted).
    many = tuple(_record(job_id=f"r{n}", state="running", sequence=n) for n in range(5))
    full = _listing(max_running=5, running=many, ready=(first,))
    cell = _waits_cell(scope, first, full, 5_000)
    assert re.findall(r'data-hold="(\w+)"', cell) == ["queue_busy"]
    assert "its queue&#x27;s limit, 5, all taken by" in cell and "and 2 more" in cell
    # A limit above one page of running jobs, the page full: not known.
    crowded = _listing(max_running=500, running=many, running_known=False, ready=(first,))
    assert holds(first, crowded) == ([], True)
    assert "overdue" not in _waits_cell(scope, first, crowded, 10_000_000)

    # A lane limit: full from this queue's running jobs alone, else not known.
    lane_full = _listing(max_running=5, running=running[:1], ready=(first,),
                         lane_limits={"l": 1})
    assert holds(first, lane_full) == (["lane_busy"], False)
    lane_open = _listing(max_running=5, running=running[:1], ready=(first,),
                         lane_limits={"l": 2})
    assert holds(first, lane_open) == ([], True)
    # A cancelled job settles without running: nothing else is worth saying.
    cancelled = _record(job_id="c", sequence=20, cancellation_id="x")
    assert holds(cancelled, lane_open) == (["cancelled"], False)


async def test_a_job_waits_for_its_lane_at_its_limit_across_queues(
        api: JobApi, owners: Owners) -> None:
    await enqueue(api, "acme", a_job("export-1", queue="exports", lane="tenant 7",
                                     payload={"do": "block"}))
    await enqueue(api, "acme", a_job("mail-1", queue="emails", lane="tenant 7"))
    await act(api, "set_limit", {"kind": "lane", "key": "tenant 7", "max_running": "1"})
    runtime = owners.runtimes["acme"]
    ticked = asyncio.ensure_future(runtime.tick())
    await until(lambda: owners.executor.started == ["export-1"])
    try:
        page = text(await get(api, "/v1/owners/acme/dashboard/jobs/mail-1", COOKIE))
        waiting = section(page, "waiting")
        assert re.findall(r'data-reason="(\w+)"', waiting) == ["lane_busy"]
        assert ("Its lane, tenant 7, runs one job at a time and is running "
                '<a class="id" href="/v1/owners/acme/dashboard/jobs/export-1">export-1</a>'
                in waiting)
        # The listing reads no other queue: it says it cannot know the lane.
        page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE))
        row = re.search(r'<tr data-job="mail-1">(.*?)</tr>', page, re.S)
        assert row is not None
        assert ("not known here: whether its lane&#x27;s jobs in other queues fill its limit "
                "of 1") in row.group(1)
    finally:
        owners.executor.release("export-1")
        await ticked
    await runtime.drain()
    assert runtime.read("mail-1").outcome == "completed"  # type: ignore[union-attr]


async def test_a_wide_queues_running_jobs_are_shown_and_hold_the_next(
        api: JobApi, owners: Owners) -> None:
    runtime = OwnerRuntime(Sqlite3Database(sqlite3.connect(":memory:")),
                           execute=owners.executor, is_alive=lambda job: False,
                           wake=CountingWake(), concurrency=4)
    owners.runtimes["acme"] = runtime
    for n in range(5):
        await enqueue(api, "acme", a_job(f"e{n}", queue="exports", payload={"do": "block"}))
    await act(api, "set_limit", {"kind": "queue", "key": "exports", "max_running": "3"})
    drained = asyncio.ensure_future(runtime.drain())
    await until(lambda: len(owners.executor.started) == 3)
    try:
        page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE))
        block = page.split('<div class="queue" id="queue-', 1)[1]
        shown = re.findall(r'<tr data-job="(e\d)">.*?<td data-label="state">(\w+)</td>',
                           block, re.S)
        assert sorted(shown) == [("e0", "running"), ("e1", "running"), ("e2", "running"),
                                 ("e3", "queued"), ("e4", "queued")]
        for job_id in ("e3", "e4"):
            row = re.search(rf'<tr data-job="{job_id}">(.*?)</tr>', block, re.S)
            assert row is not None
            assert re.findall(r'data-hold="(\w+)"', row.group(1)) == ["queue_busy"]
            assert "its queue&#x27;s limit, 3, all taken by" in row.group(1)
        page = text(await get(api, "/v1/owners/acme/dashboard/jobs/e3", COOKIE))
        waiting = section(page, "waiting")
        assert "Its queue runs at most 3 jobs at once and is running" in waiting
        assert re.findall(r'data-reason="(\w+)"', waiting) == ["queue_busy"]
    finally:
        for n in range(5):
            await until(lambda n=n: f"e{n}" in owners.executor.started)
            owners.executor.release(f"e{n}")
        await drained
    assert owners.executor.max_running == 3


# ------------------------------------------------------------ the rest


async def test_static_files_are_open_with_their_types(api: JobApi) -> None:
    css = await get(api, "/v1/dashboard/static/dashboard.css")
    js = await get(api, "/v1/dashboard/static/dashboard.js")
    assert css.status == js.status == 200
    assert css.all_headers()["content-type"] == "text/css; charset=utf-8"
    assert js.all_headers()["content-type"] == "text/javascript; charset=utf-8"
    assert js.all_headers()["x-content-type-options"] == "nosniff"
    assert b"data-confirm" in js.body and b"@media" in css.body
    assert (await get(api, "/v1/dashboard/static/secrets.txt")).status == 404


async def test_methods_and_unknown_pages(api: JobApi) -> None:
    assert (await api.handle(ApiRequest("POST", "/v1/dashboard"))).status == 405
    assert (await get(api, "/v1/dashboard/login")).status == 405
    assert (await get(api, "/v1/owners/acme/dashboard/actions/cancel", COOKIE)).status == 405
    assert (await post(api, "/v1/owners/acme/dashboard/actions/purge",
                       {"csrf": CSRF, "queue": "q"})).status == 404
    assert (await get(api, "/v1/dashboard/nope")).status == 404


async def test_refuse_early_lets_dashboard_requests_reach_their_own_checks(
        api: JobApi) -> None:
    for method, path in [("GET", "/v1/dashboard"), ("POST", "/v1/dashboard/login"),
                         ("GET", "/v1/owners/acme/dashboard"),
                         ("POST", "/v1/owners/acme/dashboard/actions/cancel")]:
        assert api.refuse_early(method, path, {}, 20) is None
    refused = api.refuse_early("POST", "/v1/dashboard/login", {}, api.max_body_bytes + 1)
    assert refused is not None and refused.status == 413
    # The JSON API still wants its token.
    assert api.refuse_early("GET", "/v1/owners/acme/queues", COOKIE, None) is not None


async def test_json_routes_refuse_the_cookie(api: JobApi) -> None:
    response = await call(api, "GET", "/v1/owners/acme/queues", headers=COOKIE)
    assert response.status == 401


async def test_rotating_the_token_ends_every_session(owners: Owners) -> None:
    rotated = JobApi(token=TOKEN + "-rotated", owners=owners)
    response = await get(rotated, "/v1/owners/acme/dashboard", COOKIE)
    assert response.status == 303 and response.all_headers()["location"] == "/v1/dashboard"
    assert "acme" not in owners.runtimes


async def test_an_executors_error_is_shown_escaped_with_its_traceback_folded(
        api: JobApi, owners: Owners) -> None:
    async def explode(job: Any, signal: Any) -> Any:
        raise ValueError(HOSTILE)

    owners.executor = explode  # type: ignore[assignment]
    await enqueue(api, "acme", a_job("boom"))
    await owners.runtimes["acme"].tick()
    record = owners.runtimes["acme"].read("boom")
    assert record is not None and record.error is not None  # the store kept the summary
    page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE))
    failures = page.split('data-list="failures"', 1)[1].split('data-list="dead"', 1)[0]
    assert f'<div class="error"><strong>ValueError</strong>: {html.escape(HOSTILE)}</div>' \
        in failures
    assert "<details><summary>traceback</summary><pre>Traceback (most recent call last):" \
        in failures
    assert html.escape(record.error.traceback[:200]) in failures
    assert "<script>" not in failures


# ------------------------------------------------------- hardening (issue 45)


async def test_the_session_cookie_twice_is_refused(api: JobApi, owners: Owners) -> None:
    """Two cookies of the name (one set by another site beside ours): neither
    is picked, whichever a browser sends first."""
    twice = {"cookie": f"{COOKIE_NAME}={SESSION}; {COOKIE_NAME}=planted"}
    for headers in (twice, {"cookie": f"{COOKIE_NAME}=planted; {COOKIE_NAME}={SESSION}"}):
        response = await get(api, "/v1/owners/acme/dashboard", headers)
        assert response.status == 400
        assert_html(response)
        assert "ambiguous_cookie" in text(response)
    assert owners.runtimes == {}


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/v1/dashboard/nowhere", 404),
    ("GET", "/v1/owners/acme/dashboard/nowhere", 404),
    ("GET", "/v1/shared/dashboard/actions/explode", 404),
    ("DELETE", "/v1/dashboard", 405),
    ("GET", "/v1/dashboard/login", 405),
])
async def test_every_answer_under_the_dashboard_carries_its_security_headers(
    api: JobApi, method: str, path: str, status: int,
) -> None:
    answers = [await api.handle(ApiRequest(method, path, {"host": HOST})),
               api.refuse_early(method, path, {"host": HOST}, None)]
    for answer in answers:
        assert answer is not None and answer.status == status
        headers = answer.all_headers()
        for name, value in SECURITY_HEADERS.items():
            assert headers[name] == value, (name, headers)


async def test_an_api_route_keeps_its_own_headers(api: JobApi) -> None:
    answer = await api.handle(ApiRequest("GET", "/v1/owners/acme/nowhere", AUTH))
    assert answer.status == 404 and "content-security-policy" not in answer.all_headers()


async def login(api: JobApi, token: str, client: str) -> ApiResponse:
    sent = {**SAME_ORIGIN, "cookie": ""}
    return await api.handle(ApiRequest("POST", "/v1/dashboard/login",
                                       {k: v for k, v in sent.items() if v},
                                       urlencode({"token": token}).encode(), client=client))


async def test_wrong_tokens_are_throttled_per_client_then_overall(owners: Owners) -> None:
    from tickwork.api.dashboard import LoginThrottle

    now = [1_000_000.0]
    api = JobApi(token=TOKEN, owners=owners)
    api._dashboard._now_s = lambda: now[0]
    api._dashboard.throttle = LoginThrottle(per_client=3, overall=5, window_s=60)
    for _ in range(3):
        assert (await login(api, "wrong", "198.51.100.7")).status == 401
    throttled = await login(api, TOKEN, "198.51.100.7")  # even the right token waits
    assert throttled.status == 429
    assert throttled.all_headers()["retry-after"] == "60"
    assert "set-cookie" not in throttled.all_headers() and "try again in 60 s" in text(throttled)
    # Another address may still try, until the overall limit.
    assert (await login(api, "wrong", "203.0.113.9")).status == 401
    assert (await login(api, "wrong", "203.0.113.9")).status == 401
    assert (await login(api, TOKEN, "192.0.2.1")).status == 429
    now[0] += 45
    assert (await login(api, TOKEN, "192.0.2.1")).all_headers()["retry-after"] == "15"
    now[0] += 15  # the window is over
    answer = await login(api, TOKEN, "198.51.100.7")
    assert answer.status == 303 and "set-cookie" in answer.all_headers()


async def test_a_login_forgets_its_clients_failures(owners: Owners) -> None:
    from tickwork.api.dashboard import LoginThrottle

    api = JobApi(token=TOKEN, owners=owners)
    api._dashboard.throttle = LoginThrottle(per_client=3, overall=100, window_s=60)
    for _ in range(2):
        assert (await login(api, "wrong", "198.51.100.7")).status == 401
    assert (await login(api, TOKEN, "198.51.100.7")).status == 303
    for _ in range(3):
        assert (await login(api, "wrong", "198.51.100.7")).status == 401
    assert (await login(api, "wrong", "198.51.100.7")).status == 429


# ------------------------------------------------- a job's page and search (issue 50)

THREE_ATTEMPTS = {"do": "fail_until", "raise_before": 3, "note": HOSTILE}


async def three_attempts(api: JobApi, owners: Owners, job_id: str = "three") -> None:
    """A job that raises on attempts 1 and 2 and fails on 3, its last: a dead letter."""
    await enqueue(api, "acme", a_job(job_id, payload=THREE_ATTEMPTS,
                                     retry={"attempts": 3, "base_delay_ms": 0}))
    for _ in range(3):
        assert (await owners.runtimes["acme"].tick()).job_id == job_id


def section(page: str, name: str) -> str:
    return page.split(f'<section id="{name}">', 1)[1].split("</section>", 1)[0]


async def test_a_jobs_page_shows_each_of_three_attempts_with_its_outcome(
        api: JobApi, owners: Owners) -> None:
    await three_attempts(api, owners)
    record = owners.runtimes["acme"].read("three")
    assert record is not None and record.attempt == 3 and len(record.history) == 2
    response = await get(api, "/v1/owners/acme/dashboard/jobs/three", COOKIE)
    assert response.status == 200
    assert_html(response)
    page = text(response)
    attempts = section(page, "attempts")
    rows = re.findall(r'<tr data-attempt="(\d)">(.*?)</tr>', attempts)
    assert [number for number, _ in rows] == ["1", "2", "3"]
    for (number, row), (reason, error) in zip(rows, [
            ("execution_failed", "RuntimeError: attempt 1 exploded"),
            ("execution_failed", "RuntimeError: attempt 2 exploded"),
            ("attempt-3", "")], strict=True):
        assert '<span class="badge failed">failed</span>' in row, number
        assert f"<code>{reason}</code>" in row, number
        assert f'<td data-label="error">{error}</td>' in row, number
        assert row.count("<time ") == 2, number  # started and ended
    facts = section(page, "record")
    assert '<div data-fact="attempt"><dt>attempt</dt><dd>3 of 3</dd></div>' in facts
    assert 'href="/v1/owners/acme/dashboard#queue-' in facts
    assert '<div data-fact="cancellation id"><dt>cancellation id</dt><dd>' \
           '<span class="muted">none</span>' in facts
    assert '<li data-reason="settled">Settled failed' in section(page, "waiting")
    # The payload in full, pretty-printed and escaped.
    cargo = section(page, "cargo")
    assert html.escape('"note": ' + '"' + HOSTILE.replace('"', '\\"') + '"') in cargo
    assert "<script>" not in page
    # A dead letter's action is a redrive that comes back to this page.
    actions = section(page, "actions")
    assert 'action="/v1/owners/acme/dashboard/actions/redrive"' in actions
    assert '<input type="hidden" name="back" value="job">' in actions
    assert "actions/cancel" not in actions


async def test_a_redrive_and_a_cancel_from_a_jobs_page_reach_the_store(
        api: JobApi, owners: Owners) -> None:
    await three_attempts(api, owners)
    page = text(await get(api, "/v1/owners/acme/dashboard/jobs/three", COOKIE))
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">',
                             section(page, "actions")))
    assert fields["csrf"] == CSRF and fields["job_id"] == "three"
    done = await post(api, "/v1/owners/acme/dashboard/actions/redrive", fields)
    assert done.status == 303
    location = done.all_headers()["location"]
    assert location.startswith("/v1/owners/acme/dashboard/jobs/three?")
    assert parse_qs(urlsplit(location).query) == {
        "did": ["redrive"], "result": ["redriven"], "subject": ["three"]}
    record = owners.runtimes["acme"].read("three")
    assert record is not None and record.state == "queued" and record.attempt == 1
    assert record.history[-1].redrive_id == fields["redrive_id"]
    page = text(await get(api, "/v1/owners/acme/dashboard/jobs/three", COOKIE,
                          query=urlsplit(location).query))
    assert '<p class="flash" role="status">Redrive of job <span class="id">three</span>: ' \
           "redriven</p>" in page
    assert f'data-redrive="{fields["redrive_id"]}"' in section(page, "attempts")
    assert fields["redrive_id"] in section(page, "record")  # among its redrive ids
    # Queued again: now the action is a cancel, which also comes back here.
    actions = section(page, "actions")
    assert "actions/redrive" not in actions
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', actions))
    done = await post(api, "/v1/owners/acme/dashboard/actions/cancel", fields)
    assert done.all_headers()["location"].startswith("/v1/owners/acme/dashboard/jobs/three?")
    record = owners.runtimes["acme"].read("three")
    assert record is not None and record.cancellation_id == "dashboard"
    page = text(await get(api, "/v1/owners/acme/dashboard/jobs/three", COOKIE))
    assert '<li data-reason="cancelled">Cancellation dashboard is recorded' \
           in section(page, "waiting")
    assert '<section id="actions">' not in page  # nothing applies to it any more


async def test_a_queued_jobs_page_says_what_it_waits_for(api: JobApi, owners: Owners) -> None:
    await enqueue(api, "acme", a_job("first"))
    await enqueue(api, "acme", a_job("later", delay_ms=3_600_000))
    await enqueue(api, "acme", a_job("second"))
    assert (await call(api, "POST", "/v1/owners/acme/queues/emails/pause", {})).status == 200
    page = text(await get(api, "/v1/owners/acme/dashboard/jobs/second", COOKIE))
    waiting = section(page, "waiting")
    assert re.findall(r'data-reason="(\w+)"', waiting) == ["queue_paused", "behind_head"]
    assert 'href="/v1/owners/acme/dashboard/jobs/first">first</a>' in waiting
    page = text(await get(api, "/v1/owners/acme/dashboard/jobs/later", COOKIE))
    assert re.findall(r'data-reason="(\w+)"', section(page, "waiting")) == [
        "not_due", "queue_paused", "behind_head"]
    assert (await call(api, "POST", "/v1/owners/acme/queues/emails/resume", {})).status == 200
    page = text(await get(api, "/v1/owners/acme/dashboard/jobs/first", COOKIE))
    assert re.findall(r'data-reason="(\w+)"', section(page, "waiting")) == ["next_to_run"]
    assert "actions/cancel" in section(page, "actions")


async def test_each_listed_job_says_what_it_waits_for_and_overdue_work_is_marked(
        api: JobApi, owners: Owners, monkeypatch: pytest.MonkeyPatch) -> None:
    await enqueue(api, "acme", a_job("first"))
    await enqueue(api, "acme", a_job("second"))
    await enqueue(api, "acme", a_job("later", delay_ms=3_600_000))
    assert (await call(api, "POST", "/v1/owners/acme/schedules", {
        "name": "minutely", "every_ms": 60_000,
        "job": {"queue": "reports", "payload": {}}})).status == 201
    assert (await call(api, "POST", "/v1/owners/acme/queues/emails/pause", {})).status == 200

    def waits(page: str, job_id: str) -> str:
        row = re.search(rf'<tr data-job="{job_id}">(.*?)</tr>', page, re.S)
        assert row is not None, job_id
        cell = re.search(r'<td data-label="waits for">(.*?)</td>', row.group(1), re.S)
        assert cell is not None
        return cell.group(1)

    page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE))
    assert re.findall(r'data-hold="(\w+)"', waits(page, "first")) == ["queue_paused"]
    assert re.findall(r'data-hold="(\w+)"', waits(page, "second")) == [
        "queue_paused", "behind_head"]
    assert 'href="/v1/owners/acme/dashboard/jobs/first">first</a>' in waits(page, "second")
    assert re.findall(r'data-hold="(\w+)"', waits(page, "later")) == [
        "not_due", "queue_paused", "behind_head"]
    assert "overdue" not in page

    # Two minutes on, resumed but not ticked: the head has been due for two
    # minutes with nothing holding it, and the schedule's slot has come.
    assert (await call(api, "POST", "/v1/owners/acme/queues/emails/resume", {})).status == 200
    later_s = time.time() + 180
    monkeypatch.setattr(api._dashboard, "_now_s", lambda: later_s)
    page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE))
    assert waits(page, "first").startswith('<span class="badge overdue">overdue</span> since ')
    assert re.findall(r'data-hold="(\w+)"', waits(page, "second")) == ["behind_head"]
    schedule = re.search(r'<tr data-schedule="minutely">(.*?)</tr>', page, re.S)
    assert schedule is not None and '<span class="badge overdue">overdue</span>' in (
        schedule.group(1))


def _record(**fields: Any) -> Any:
    from tickwork.model.jobs import JobRecord
    base = JobRecord(job_id="j", queue="q", lane="l", priority=0, payload={}, recovery=None,
                     state="queued", outcome=None, failure_reason=None, sequence=1,
                     recoveries=0, enqueued_at=1_000, started_at=None, settled_at=None)
    return base._replace(**fields)


def test_waiting_on_says_each_hold_explain_found_and_what_other_jobs_do() -> None:
    from tickwork.api.dashboard import OVERDUE_AFTER_MS, waiting_on
    from tickwork.model.jobs import Attempt
    from tickwork.model.waiting import Hold, JobWait

    def reasons(job: Any, *holds: Hold, now: int = 5_000) -> list[tuple[Any, ...]]:
        wait = JobWait(job.job_id, job.state, holds, now)
        return [(r.code, r.at, r.job_ids) for r in waiting_on(job, wait, now)]

    job = _record()
    assert reasons(job) == [("next_to_run", None, ())]
    # Due for a minute with nothing holding it: overdue, since it became due.
    assert reasons(job, now=1_000 + OVERDUE_AFTER_MS) == [("overdue", 1_000, ())]
    assert reasons(_record(due_at=3_000), now=3_000 + OVERDUE_AFTER_MS - 1) == [
        ("next_to_run", None, ())]
    assert reasons(job, Hold("queue_paused"), Hold("queue_busy", job_ids=("other",))) == [
        ("queue_paused", None, ()), ("queue_busy", None, ("other",))]
    retry = _record(due_at=9_000, attempt=2, history=(
        Attempt(1, "failed", "boom", 1_000, 2_000),))
    said = waiting_on(retry, JobWait("j", "queued", (Hold("not_due", until=9_000),)), 5_000)
    assert [(r.code, r.at, r.text) for r in said] == [("not_due", 9_000, "Its retry is due at")]
    owner = waiting_on(job, JobWait("j", "queued", (Hold("owner_busy", job_ids=("x", "y")),)),
                       5_000)
    assert (owner[0].code, owner[0].job_ids) == ("owner_busy", ("x", "y"))
    running = _record(state="running", started_at=2_000, cancellation_id="c-2")
    assert [(r.code, r.at) for r in waiting_on(running, None, 5_000)] == [
        ("cancellation_pending", None), ("running", 2_000)]
    settled = _record(state="settled", outcome="completed", settled_at=3_000)
    assert [(r.code, r.at) for r in waiting_on(settled, None, 5_000)] == [("settled", 3_000)]


async def test_a_jobs_page_escapes_its_id_and_knows_an_unknown_one(api: JobApi) -> None:
    hostile_id = 'a/<b>"&\'c'
    await enqueue(api, "acme", a_job(hostile_id))
    path = dashboard.job_path(("owner", "acme"), hostile_id)
    assert path == "/v1/owners/acme/dashboard/jobs/a%2F%3Cb%3E%22%26%27c"
    page = text(await get(api, path, COOKIE))
    assert f'<h2>Job <span class="id">{html.escape(hostile_id)}</span>' in page
    assert "<b>" not in page
    missing = await get(api, "/v1/owners/acme/dashboard/jobs/nope%3Cx%3E", COOKIE)
    assert missing.status == 404
    assert '<h2>No job <span class="id">nope&lt;x&gt;</span></h2>' in text(missing)
    assert (await get(api, "/v1/owners/acme/dashboard/jobs/" + "x" * 257, COOKIE)).status == 400
    for headers in ({}, {"cookie": f"{COOKIE_NAME}=stale"}):
        refused = await get(api, path, headers)
        assert refused.status == 303 and "PAYLOAD-TEXT" not in text(refused)
    wrong = await api.handle(ApiRequest("POST", path, {"host": HOST, **COOKIE}))
    assert wrong.status == 405


async def test_every_job_id_on_the_scope_page_links_to_its_page(
        api: JobApi, owners: Owners) -> None:
    await three_attempts(api, owners, "dead-1")
    await enqueue(api, "acme", a_job("done-1"))
    assert (await owners.runtimes["acme"].tick()).job_id == "done-1"
    await enqueue(api, "acme", a_job("head-1"))
    await enqueue(api, "acme", a_job("queued-1"))
    page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE))
    shown = re.findall(r'<tr data-job="([^"]+)"><td data-label="job">(.*?)</td>', page)
    assert {job_id for job_id, _ in shown} == {"dead-1", "done-1", "head-1", "queued-1"}
    for job_id, cell in shown:
        assert cell == (f'<a class="id" href="/v1/owners/acme/dashboard/jobs/{job_id}">'
                        f"{job_id}</a>"), cell
    completed = page.split('data-list="completed"', 1)[1].split("</div>", 1)[0]
    assert "<h3>Recently completed</h3>" in completed and "done-1" in completed
    assert '<input type="search" id="job-search" name="q"' in page  # the header's search


async def test_a_queues_completed_jobs_page_through_every_one(
        api: JobApi, owners: Owners) -> None:
    for number in range(dashboard.COMPLETED_PAGE + 5):
        await enqueue(api, "acme", a_job(f"c-{number:03}", queue="q<1>"))
        assert (await owners.runtimes["acme"].tick()).outcome == "completed"
    page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE))
    more = dashboard.completed_path(("owner", "acme"), "q<1>")
    assert more == "/v1/owners/acme/dashboard/queues/q%3C1%3E/completed"
    assert f'<a href="{more}">Every completed job of q&lt;1&gt; \u2192</a>' in page
    first = text(await get(api, more, COOKIE))
    ids = re.findall(r'<tr data-job="(c-\d+)">', first)
    assert ids == [f"c-{n:03}" for n in range(54, 4, -1)]  # newest settlement first
    cursor = re.search(r'<a rel="next" href="[^"?]+\?([^"]+)">Older', first)
    assert cursor is not None
    second = text(await get(api, more, COOKIE, query=html.unescape(cursor[1])))
    assert re.findall(r'<tr data-job="(c-\d+)">', second) == [
        f"c-{n:03}" for n in range(4, -1, -1)]
    assert 'rel="next"' not in second
    assert (await get(api, more, COOKIE, query="cursor=nonsense")).status == 400


async def test_the_search_goes_to_an_exact_id_and_lists_a_prefix(api: JobApi) -> None:
    for job_id in ("order-1", "order-10", "order-11", "order-2", "ordeR-3", "user-1"):
        await enqueue(api, "acme", a_job(job_id))
    search = "/v1/owners/acme/dashboard/search"
    exact = await get(api, search, COOKIE, query="q=order-1")
    assert exact.status == 303
    assert exact.all_headers()["location"] == "/v1/owners/acme/dashboard/jobs/order-1"
    padded = await get(api, search, COOKIE, query="q=+order-2+")
    assert padded.all_headers()["location"] == "/v1/owners/acme/dashboard/jobs/order-2"
    listed = await get(api, search, COOKIE, query="q=order-")
    assert listed.status == 200
    page = text(listed)
    assert re.findall(r'<tr data-job="([^"]+)">', page) == [
        "order-1", "order-10", "order-11", "order-2"]
    assert 'href="/v1/owners/acme/dashboard/jobs/order-10">order-10</a>' in page
    assert 'value="order-"' in page  # the box keeps what was asked
    # An exact id's own prefix list, when asked for.
    page = text(await get(api, search, COOKIE, query="q=order-1&list=prefix"))
    assert re.findall(r'<tr data-job="([^"]+)">', page) == ["order-1", "order-10", "order-11"]
    none = await get(api, search, COOKIE, query="q=zzz")
    assert none.status == 200
    assert '<p class="muted" data-found="0">No job id starts with this in this scope.</p>' \
        in text(none)


async def test_the_search_pages_through_many_matches(api: JobApi) -> None:
    for number in range(dashboard.SEARCH_PAGE + 3):
        await enqueue(api, "acme", a_job(f"batch-{number:02}"))
    page = text(await get(api, "/v1/owners/acme/dashboard/search", COOKIE, query="q=batch"))
    assert len(re.findall(r'<tr data-job="', page)) == dashboard.SEARCH_PAGE
    following = re.search(r'<a rel="next" href="/v1/owners/acme/dashboard/search\?([^"]+)"',
                          page)
    assert following is not None
    page = text(await get(api, "/v1/owners/acme/dashboard/search", COOKIE,
                          query=html.unescape(following[1])))
    assert re.findall(r'<tr data-job="([^"]+)">', page) == ["batch-25", "batch-26", "batch-27"]


@pytest.mark.parametrize(("query", "message"), [
    ("", "Type a job id, or the start of one."),
    ("q=+++", "Type a job id, or the start of one."),
    ("q=" + "x" * 257, "A job id has at most 256 characters; this has 257."),
    ("q=a&q=b", "The search is malformed"),
    ("q=%FF", "The search is malformed"),
])
async def test_bad_searches_are_refused_in_words(api: JobApi, owners: Owners, query: str,
                                                 message: str) -> None:
    await enqueue(api, "acme", a_job())
    response = await get(api, "/v1/owners/acme/dashboard/search", COOKIE, query=query)
    assert response.status == 400
    assert_html(response)
    assert message in text(response)


async def test_a_search_with_a_forged_cursor_or_no_session_is_refused(api: JobApi) -> None:
    await enqueue(api, "acme", a_job("order-1"))
    search = "/v1/owners/acme/dashboard/search"
    forged = await get(api, search, COOKIE, query="q=order&cursor=user-9")
    assert forged.status == 400 and "invalid_argument" in text(forged)
    anonymous = await get(api, search, query="q=order-1")
    assert anonymous.status == 303 and anonymous.all_headers()["location"] == "/v1/dashboard"


async def test_search_results_escape_ids_and_payloads(api: JobApi) -> None:
    await enqueue(api, "acme", a_job(f"x{HOSTILE}", payload={"html": HOSTILE}))
    await enqueue(api, "acme", a_job(f"x{HOSTILE}2"))
    page = text(await get(api, "/v1/owners/acme/dashboard/search", COOKIE,
                          query=urlencode({"q": "x<"})))
    assert "<script>" not in page
    assert f'<tr data-job="{html.escape("x" + HOSTILE)}">' in page
    assert html.escape(dashboard.job_path(("owner", "acme"), "x" + HOSTILE)) in page


# ---------------------------------------------------------------- history


async def test_a_queue_shows_charts_of_its_last_hour(api: JobApi, owners: Owners) -> None:
    for number in range(3):
        await enqueue(api, "acme", a_job(f"ok{number}", payload={"do": "complete"}))
    await enqueue(api, "acme", a_job("bad", payload={"do": "fail", "reason": "smtp down"}))
    runtime = owners.runtimes["acme"]
    results = [await runtime.tick() for _ in range(4)]
    assert [result.outcome for result in results] == ["completed"] * 3 + ["failed"]
    page = text(await get(api, "/v1/owners/acme/dashboard", COOKIE))
    charts = page.split('<div class="charts" data-history="emails">', 1)[1].split(
        "</div></figure></div>", 1)[0]
    throughput = charts.split('data-chart="depth"', 1)[0]
    # The totals of the hour, and a line per count over its 61 minutes.
    for key in ("enqueued 4", "completed 3", "failed 1", "retried 0"):
        assert f">{key}</span>" in throughput, key
    for name in ("enqueued", "completed", "failed", "retried"):
        line = re.search(rf'<polyline class="{name}" points="([^"]+)"', throughput)
        assert line is not None, name
        assert len(line[1].split()) == 61
    # The page's read wrote the runtime's counts and took its first sample:
    # nothing waits any more.
    depth = charts.split('data-chart="depth"', 1)[1]
    assert ">depth 0 now</span>" in depth
    assert '<circle class="depth"' in depth
    # Drawn with attributes and classes only: the page's CSP allows no inline style.
    assert "style=" not in charts and "<script" not in charts


async def test_history_over_http(api: JobApi, owners: Owners) -> None:
    await enqueue(api, "acme", a_job("ok", payload={"do": "complete"}))
    await owners.runtimes["acme"].tick()
    response = await api.handle(ApiRequest("GET", "/v1/owners/acme/history", AUTH,
                                            query="queue=emails&bucket=300"))
    assert response.status == 200, response.body
    body = response.body
    assert isinstance(body, dict)
    assert (body["queue"], body["bucket"]) == ("emails", 300)
    assert sum(point["completed"] for point in body["points"]) == 1
    assert set(body["points"][0]) == {"at", "enqueued", "started", "completed", "failed",
                                      "cancelled", "retried", "depth", "oldest_age_ms",
                                      "depth_capped"}
    future = int(time.time() * 1000) + 3_600_000
    for query, status, code in (
            ("queue=emails&bucket=120", 400, "invalid_argument"),
            (f"queue=emails&since={future}", 400, "invalid_argument"),
            ("bucket=60", 400, "invalid_argument"),
            ("queue=nobody", 404, "queue_not_found")):
        refused = await api.handle(ApiRequest("GET", "/v1/owners/acme/history", AUTH,
                                              query=query))
        assert refused.status == status, (query, refused.body)
        assert isinstance(refused.body, dict)
        assert refused.body["error"]["code"] == code, refused.body
