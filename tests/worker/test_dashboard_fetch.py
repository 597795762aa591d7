"""The dashboard through ``Default.fetch`` in both Workers SDK shapes: the
Worker hands the API the cookie, Origin, Sec-Fetch-Site, host and scheme,
and its Response carries set-cookie, location and the page's headers. The
shared page reads D1; the owner's page reads a ``JobOwner`` over RPC."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.support.worker import BASE_URL, TOKEN, job, request, send
from tickwork.api import ApiResponse

pytestmark = pytest.mark.usefixtures("js_module")

FORM = {"content-type": "application/x-www-form-urlencoded", "origin": BASE_URL,
        "sec-fetch-site": "same-origin"}


async def fetch(worker: Any, shape: str, method: str, path: str,
                headers: dict[str, str] | None = None,
                form: dict[str, str] | None = None) -> Any:
    raw = urlencode(form).encode() if form is not None else None
    return await worker.fetch(request(shape, method, path, token=None, headers=headers,
                                      raw=raw))


async def login(worker: Any, shape: str) -> str:
    answer = await fetch(worker, shape, "POST", "/v1/dashboard/login", FORM, {"token": TOKEN})
    assert answer.status == 303
    assert answer.headers.get("location") == "/v1/dashboard"
    cookie: str = answer.headers.get("set-cookie")
    # BASE_URL is https: the cookie is Secure.
    assert {"HttpOnly", "SameSite=Strict", "Path=/v1", "Secure"} <= set(cookie.split("; "))
    assert TOKEN not in cookie
    return cookie.split(";")[0]


@pytest.mark.parametrize("scope", ["owners/tenant-1", "shared"])
async def test_login_view_and_cancel(worker: Any, shape: str, scope: str) -> None:
    assert (await send(worker, shape, "POST", f"/v1/{scope}/jobs",
                       job("j<1>", queue="mail", payload={"note": "PAYLOAD-TEXT"})))[0] == 201
    before = await fetch(worker, shape, "GET", f"/v1/{scope}/dashboard")
    assert before.status == 303 and b"PAYLOAD-TEXT" not in before.body
    session = await login(worker, shape)
    page = await fetch(worker, shape, "GET", f"/v1/{scope}/dashboard", {"cookie": session})
    assert page.status == 200
    assert page.headers.get("content-type") == "text/html; charset=utf-8"
    assert page.headers.get("x-content-type-options") == "nosniff"
    text = page.body.decode()
    assert '<tr data-job="j&lt;1&gt;">' in text and "PAYLOAD-TEXT" in text
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', text)
    assert csrf is not None
    form = {"csrf": csrf[1], "job_id": "j<1>"}
    cross = await fetch(worker, shape, "POST", f"/v1/{scope}/dashboard/actions/cancel",
                        {**FORM, "cookie": session, "sec-fetch-site": "cross-site"}, form)
    assert cross.status == 403
    cancel = await fetch(worker, shape, "POST", f"/v1/{scope}/dashboard/actions/cancel",
                         {**FORM, "cookie": session}, form)
    assert cancel.status == 303, cancel.body
    assert cancel.headers.get("location").endswith("?did=cancel&result=recorded&subject=j%3C1%3E")
    status, body = await send(worker, shape, "GET", f"/v1/{scope}/jobs/j%3C1%3E")
    assert status == 200 and body["job"]["cancellation_id"] == "dashboard"


def test_to_response_carries_every_header(workers_module: Any) -> None:
    from tickwork.cloudflare.app import to_response  # needs the workers stand-in

    answer = ApiResponse(303, b"<p>x</p>", {"content-type": "text/html; charset=utf-8",
                                           "location": "/v1/dashboard",
                                           "set-cookie": "a=b; HttpOnly"})
    response = to_response(answer)
    assert response.status == 303 and response.body == b"<p>x</p>"
    assert response.headers.get("location") == "/v1/dashboard"
    assert response.headers.get("set-cookie") == "a=b; HttpOnly"
    assert response.headers.get("content-type") == "text/html; charset=utf-8"
    assert response.headers.get("cache-control") == "no-store"


@pytest.mark.parametrize("scope", ["owners/tenant-1", "shared"])
async def test_a_search_a_jobs_page_and_a_cancel_from_it(worker: Any, shape: str,
                                                         scope: str) -> None:
    """The search (find_jobs over RPC for an owner, from D1 for the shared
    queues) leads to a job's page, whose cancel reaches the store and comes
    back to the page."""
    for job_id in ("order/1", "order/2", "user-1"):
        assert (await send(worker, shape, "POST", f"/v1/{scope}/jobs",
                           job(job_id, queue="mail", payload={"n": "<b>"})))[0] == 201
    session = await login(worker, shape)
    listed = await fetch(worker, shape, "GET", f"/v1/{scope}/dashboard/search?q=order%2F",
                         {"cookie": session})
    assert listed.status == 200
    text = listed.body.decode()
    assert re.findall(r'<tr data-job="([^"]+)">', text) == ["order/1", "order/2"]
    exact = await fetch(worker, shape, "GET", f"/v1/{scope}/dashboard/search?q=order%2F2",
                        {"cookie": session})
    assert exact.status == 303
    page_path = f"/v1/{scope}/dashboard/jobs/order%2F2"
    assert exact.headers.get("location") == page_path
    page = await fetch(worker, shape, "GET", page_path, {"cookie": session})
    assert page.status == 200
    text = page.body.decode()
    assert '<h2>Job <span class="id">order/2</span>' in text
    assert '<li data-reason="next_to_run">' not in text  # order/1 heads the queue
    assert 'href="/v1/' + scope + '/dashboard/jobs/order%2F1">order/1</a>' in text
    assert "&lt;b&gt;" in text and "<b>" not in text
    form = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">',
                           text.split('<section id="actions">', 1)[1]))
    cancel = await fetch(worker, shape, "POST", f"/v1/{scope}/dashboard/actions/cancel",
                         {**FORM, "cookie": session}, form)
    assert cancel.status == 303, cancel.body
    assert cancel.headers.get("location").startswith(page_path + "?did=cancel&result=recorded")
    status, body = await send(worker, shape, "GET", f"/v1/{scope}/jobs/order%2F2")
    assert status == 200 and body["job"]["cancellation_id"] == "dashboard"
