"""The dashboard through ``tickwork serve`` over real HTTP: the shared queues
on a real PostgreSQL and an owner's sqlite3 file, login, the page, a form
action reaching the store, and the refusals a browser on another site gets."""

from __future__ import annotations

import http.client
import re
import time
from typing import Any
from urllib.parse import urlencode, urlsplit

from tests.support.serve import TOKEN, Client, Serve, job


def exchange(serve: Serve, method: str, path: str, headers: dict[str, str] | None = None,
             body: bytes | None = None) -> tuple[int, dict[str, str], str]:
    parts = urlsplit(serve.url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return (response.status, {k.lower(): v for k, v in response.getheaders()},
                response.read().decode())
    finally:
        connection.close()


def form_post(serve: Serve, path: str, fields: dict[str, str],
              headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    host = urlsplit(serve.url).netloc
    sent = {"content-type": "application/x-www-form-urlencoded", "origin": f"http://{host}",
            "sec-fetch-site": "same-origin", **(headers or {})}
    return exchange(serve, "POST", path, sent, urlencode(fields).encode())


def login(serve: Serve) -> str:
    status, headers, _ = form_post(serve, "/v1/dashboard/login", {"token": TOKEN})
    assert status == 303 and headers["location"] == "/v1/dashboard"
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "Secure" not in cookie  # plain http
    return cookie.split(";")[0]


def test_shared_dashboard_on_postgres(shared_serve: Serve) -> None:
    client = Client(shared_serve.url)
    assert client.call("POST", "/v1/shared/queues/reports/pause", {})[0] == 200
    assert client.call("POST", "/v1/shared/jobs", job("r<1>", queue="reports",
                                                     payload={"note": "PAYLOAD"}))[0] == 201
    status, headers, body = exchange(shared_serve, "GET", "/v1/shared/dashboard")
    assert status == 303 and "PAYLOAD" not in body
    session = login(shared_serve)
    status, headers, page = exchange(shared_serve, "GET", "/v1/shared/dashboard",
                                     {"cookie": session})
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    assert "content-security-policy" in headers and headers["cache-control"] == "no-store"
    assert '<tr data-job="r&lt;1&gt;">' in page and "PAYLOAD" in page
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert csrf is not None
    action = "/v1/shared/dashboard/actions/cancel"
    fields = {"csrf": csrf[1], "job_id": "r<1>"}
    refused = form_post(shared_serve, action, fields,
                        {"cookie": session, "origin": "http://evil.example"})
    assert refused[0] == 403 and "cross_site_request" in refused[2]
    assert client.call("GET", "/v1/shared/jobs/r%3C1%3E")[1]["job"]["cancellation_id"] is None
    status, headers, _ = form_post(shared_serve, action, fields, {"cookie": session})
    assert status == 303
    assert headers["location"] == \
        "/v1/shared/dashboard?did=cancel&result=recorded&subject=r%3C1%3E"
    record = client.call("GET", "/v1/shared/jobs/r%3C1%3E")[1]["job"]
    assert record["cancellation_id"] == "dashboard"


def test_owner_dashboard_static_files_and_a_form_body_limit(server: Serve) -> None:
    status, headers, script = exchange(server, "GET", "/v1/dashboard/static/dashboard.js")
    assert status == 200 and headers["content-type"] == "text/javascript; charset=utf-8"
    assert "data-confirm" in script
    # A declared body over the limit is refused from the head, as on every route.
    status, _, _ = exchange(server, "POST", "/v1/dashboard/login",
                            {"content-type": "application/x-www-form-urlencoded",
                             "content-length": str(10_000_000)}, b"")
    assert status == 413
    session = login(server)
    status, _, page = exchange(server, "GET", "/v1/owners/dash-owner/dashboard",
                               {"cookie": session})
    assert status == 200 and "owner dash-owner" in page and "No queue has jobs." in page



def _settled_after_three_attempts(client: Client, scope: str) -> dict[str, Any]:
    """A job its executor fails on every attempt (the test executors fail a
    job of kind "fail"), retried at once twice: a dead letter after three."""
    assert client.call("POST", f"/v1/{scope}/jobs", job(
        "pay-3", queue="payments", payload={"kind": "fail", "reason": "card <declined>"},
        retry={"attempts": 3, "base_delay_ms": 0}))[0] == 201
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        record: dict[str, Any] = client.call("GET", f"/v1/{scope}/jobs/pay-3")[1]["job"]
        if record["state"] == "settled":
            return record
        time.sleep(0.05)
    raise AssertionError(f"pay-3 of {scope} never settled: {record}")


def test_a_jobs_page_search_and_redrive_on_postgres_and_an_owner_file(
        shared_serve: Serve) -> None:
    client = Client(shared_serve.url)
    session = login(shared_serve)
    for scope in ("shared", "owners/acme"):
        record = _settled_after_three_attempts(client, scope)
        assert record["attempt"] == 3 and len(record["history"]) == 2
        status, headers, _ = exchange(shared_serve, "GET",
                                      f"/v1/{scope}/dashboard/search?q=pay-3",
                                      {"cookie": session})
        assert status == 303
        page_path = f"/v1/{scope}/dashboard/jobs/pay-3"
        assert headers["location"] == page_path
        status, _, listed = exchange(shared_serve, "GET",
                                     f"/v1/{scope}/dashboard/search?q=pay", {"cookie": session})
        assert status == 200 and re.findall(r'<tr data-job="([^"]+)">', listed) == ["pay-3"]
        status, _, page = exchange(shared_serve, "GET", page_path, {"cookie": session})
        assert status == 200
        attempts = page.split('<section id="attempts">', 1)[1]
        assert re.findall(r'<tr data-attempt="(\d)">', attempts) == ["1", "2", "3"]
        assert attempts.count('<span class="badge failed">failed</span>') == 3
        assert attempts.count("<code>card &lt;declined&gt;</code>") == 3
        assert "card <declined>" not in page
        actions = page.split('<section id="actions">', 1)[1].split("</section>", 1)[0]
        fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">',
                                 actions))
        status, headers, _ = form_post(shared_serve, f"/v1/{scope}/dashboard/actions/redrive",
                                       fields, {"cookie": session})
        assert status == 303 and headers["location"].startswith(page_path + "?did=redrive")
        # Queued again as a new chain (which the workers may have begun running).
        redriven = client.call("GET", f"/v1/{scope}/jobs/pay-3")[1]["job"]
        assert [entry["redrive_id"] for entry in redriven["history"]
                if entry.get("redrive_id")] == [fields["redrive_id"]]
