"""The dashboard through the Worker under real Pyodide: a real JS Request in
(form body, cookie, Origin and Sec-Fetch-Site headers), a real JS Response
out whose set-cookie, location and content-type headers the browser reads;
the owner's page rendered over RPC, a cancel from its form reaching the
object's storage."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode

BASE = "https://tickwork.example"
FORM = {"content-type": "application/x-www-form-urlencoded", "origin": BASE,
        "sec-fetch-site": "same-origin"}


async def _fetch(deployment: Any, method: str, path: str, headers: dict[str, str],
                 form: dict[str, str] | None = None) -> Any:
    body = urlencode(form).encode() if form is not None else None
    return await deployment.fetch(deployment.request(method, path, headers=headers, body=body))


async def test_login_page_view_and_cancel_over_the_worker(deployment: Any) -> None:
    status, _ = await deployment.send(
        "POST", "/v1/owners/tenant/jobs",
        {"job_id": "<b>j1</b>", "queue": "mail", "payload": {"note": "PAYLOAD-TEXT"}})
    assert status == 201

    login = await _fetch(deployment, "GET", "/v1/dashboard", {})
    assert login.status == 200
    assert str(login.headers.get("content-type")) == "text/html; charset=utf-8"
    assert "default-src 'none'" in str(login.headers.get("content-security-policy"))

    wrong = await _fetch(deployment, "POST", "/v1/dashboard/login", FORM, {"token": "nope"})
    assert wrong.status == 401
    assert not wrong.headers.has("set-cookie")

    answer = await _fetch(deployment, "POST", "/v1/dashboard/login", FORM,
                          {"token": "tier-token"})
    assert answer.status == 303
    assert str(answer.headers.get("location")) == "/v1/dashboard"
    cookie = str(answer.headers.get("set-cookie"))
    # The request came over https: the cookie is Secure.
    assert {"HttpOnly", "SameSite=Strict", "Path=/v1", "Secure"} <= set(cookie.split("; "))
    session = cookie.split(";")[0]

    unauthenticated = await _fetch(deployment, "GET", "/v1/owners/tenant/dashboard", {})
    assert unauthenticated.status == 303
    assert "PAYLOAD-TEXT" not in await unauthenticated.text()

    page = await _fetch(deployment, "GET", "/v1/owners/tenant/dashboard", {"cookie": session})
    assert page.status == 200
    text = await page.text()
    assert "&lt;b&gt;j1&lt;/b&gt;" in text and "<b>j1</b>" not in text
    assert "PAYLOAD-TEXT" in text
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', text)
    assert csrf is not None

    foreign = await _fetch(deployment, "POST", "/v1/owners/tenant/dashboard/actions/cancel",
                           {**FORM, "origin": "https://evil.example", "cookie": session},
                           {"csrf": csrf[1], "job_id": "<b>j1</b>"})
    assert foreign.status == 403
    assert deployment.rows()["<b>j1</b>"][4] is None

    cancel = await _fetch(deployment, "POST", "/v1/owners/tenant/dashboard/actions/cancel",
                          {**FORM, "cookie": session}, {"csrf": csrf[1], "job_id": "<b>j1</b>"})
    assert cancel.status == 303
    assert str(cancel.headers.get("location")).startswith(
        "/v1/owners/tenant/dashboard?did=cancel&result=recorded")
    assert deployment.rows()["<b>j1</b>"][4] == "dashboard"

    script = await _fetch(deployment, "GET", "/v1/dashboard/static/dashboard.js", {})
    assert script.status == 200
    assert str(script.headers.get("content-type")) == "text/javascript; charset=utf-8"


async def test_a_search_and_a_jobs_page_over_the_worker(deployment: Any) -> None:
    """The search reads the owner's jobs by id prefix over RPC (find_jobs
    crossing to the JobOwner), an exact id redirects, and the job's page
    renders its record and cargo escaped."""
    for job_id in ("inv/1", "inv/2", "other"):
        status, _ = await deployment.send(
            "POST", "/v1/owners/tenant/jobs",
            {"job_id": job_id, "queue": "billing", "payload": {"note": "<i>x</i>"}})
        assert status == 201
    answer = await _fetch(deployment, "POST", "/v1/dashboard/login", FORM,
                          {"token": "tier-token"})
    session = str(answer.headers.get("set-cookie")).split(";")[0]
    listed = await _fetch(deployment, "GET", "/v1/owners/tenant/dashboard/search?q=inv%2F",
                          {"cookie": session})
    assert listed.status == 200
    assert re.findall(r'<tr data-job="([^"]+)">', await listed.text()) == ["inv/1", "inv/2"]
    exact = await _fetch(deployment, "GET", "/v1/owners/tenant/dashboard/search?q=inv%2F2",
                         {"cookie": session})
    assert exact.status == 303
    assert str(exact.headers.get("location")) == "/v1/owners/tenant/dashboard/jobs/inv%2F2"
    page = await _fetch(deployment, "GET", "/v1/owners/tenant/dashboard/jobs/inv%2F2",
                        {"cookie": session})
    assert page.status == 200
    text = await page.text()
    assert '<h2>Job <span class="id">inv/2</span>' in text
    assert "&lt;i&gt;x&lt;/i&gt;" in text and "<i>x</i>" not in text
    assert 'href="/v1/owners/tenant/dashboard/jobs/inv%2F1">inv/1</a>' in text  # its head
