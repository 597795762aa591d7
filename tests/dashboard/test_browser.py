"""The dashboard in a real headless browser: Debian's ``chromium`` driven by
Playwright, against a real ``tickwork serve`` (a process, real HTTP, the
owner's sqlite3 file).

Jobs are enqueued through the HTTP API; the browser logs in with the token,
opens the owner's page, reads the queues and jobs, cancels a job and pauses
a queue through the page's forms (accepting their confirm dialogs), and the
HTTP API then reads the change from the store. The page also loads at a
phone's width. Screenshots go to ``test-artifacts/`` (``dashboard.png`` is
the one ``docs/images/dashboard.png`` was taken from).

Chromium is Debian's package (``scripts/test`` installs it): Playwright's own
browser download is not used. Missing, the test fails (CI must run it).
"""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.serve import ROOT, TOKEN, Client, Serve

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts"
#: Without the background-networking flags Chromium reaches out to Google
#: services at start, which a closed network refuses slowly.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
OWNER = "acme"
SECRET = "ada@example.com"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    serve = Serve(tmp_path_factory.mktemp("dashboard") / "data").start()
    try:
        yield serve
    finally:
        serve.stop()


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A Chromium context on a fresh profile."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium package "
                    "(apt-get install -y chromium; scripts/test does)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: pip install -e '.[browser]' (scripts/test does)")
    with sync_playwright() as playwright:
        browser_context = playwright.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS, headless=True, viewport={"width": 1280, "height": 900})
        try:
            yield browser_context
        finally:
            browser_context.close()


def api(server: Serve, method: str, path: str, body: Any = None) -> Any:
    status, answer = Client(server.url).call(method, path, body)
    assert status in (200, 201), (status, answer)
    return answer


def owner_path(rest: str) -> str:
    return f"/v1/owners/{OWNER}/{rest}"


def queue(server: Serve, name: str) -> dict[str, Any]:
    answer: dict[str, Any] = api(server, "GET", owner_path(f"queues/{name}"))["queue"]
    return answer


def raw_get(server: Serve, path: str) -> tuple[int, dict[str, str], str]:
    parts = urlsplit(server.url)
    connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return (response.status, {k.lower(): v for k, v in response.getheaders()},
                response.read().decode())
    finally:
        connection.close()


def seed(server: Serve) -> None:
    """Jobs of four queues, all through the HTTP API."""
    # A paused queue keeps its job queued (the queue's head) for the page to cancel.
    api(server, "POST", owner_path("queues/mail/pause"))
    api(server, "POST", owner_path("jobs"), {"jobs": [
        {"job_id": "welcome-ada", "queue": "mail", "lane": "tenant-7",
         "payload": {"kind": "complete", "to": SECRET, "template": "welcome"}},
        {"job_id": "welcome-bob", "queue": "mail", "lane": "tenant-8",
         "payload": {"kind": "complete", "to": "bob@example.com", "template": "welcome"}},
    ]})
    api(server, "POST", owner_path("jobs"), {"jobs": [
        {"job_id": "report-2026-11", "queue": "reports",
         "payload": {"kind": "fail", "reason": "upstream returned 503"}},
        {"job_id": "import-csv", "queue": "reports", "payload": {"kind": "raise"}},
        {"job_id": "digest-weekly", "queue": "reports", "delay_ms": 3_600_000,
         "payload": {"kind": "complete"}},
        {"job_id": "export-large", "queue": "exports", "payload": {"kind": "slow"}},
    ]})
    api(server, "POST", owner_path("schedules"), {
        "name": "nightly-digest", "cron": "0 3 * * *",
        "job": {"queue": "reports", "payload": {"kind": "complete"}}})
    client = Client(server.url)
    client.settled(OWNER, "report-2026-11")
    client.settled(OWNER, "import-csv")
    client.running(OWNER, "export-large")


def test_dashboard_in_chromium(server: Serve, context: Any) -> None:
    seed(server)
    ARTIFACTS.mkdir(exist_ok=True)

    # Without a session the owner's page redirects to the login form: no job data.
    status, headers, body = raw_get(server, owner_path("dashboard"))
    assert status == 303 and headers["location"] == "/v1/dashboard"
    assert SECRET not in body and "welcome-ada" not in body

    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text)
            if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    response = page.goto(server.url + owner_path("dashboard"))
    assert response is not None and response.ok
    assert page.url == server.url + "/v1/dashboard"
    assert SECRET not in page.content()

    page.fill("#token", "not-the-token")
    page.click("button:has-text('Log in')")
    assert page.locator(".flash.error").inner_text() == "Wrong token."
    assert not context.cookies()

    page.fill("#token", TOKEN)
    page.click("button:has-text('Log in')")
    page.wait_for_url(server.url + "/v1/dashboard")
    cookie = next(item for item in context.cookies() if item["name"] == "tickwork_dashboard")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["value"] != TOKEN
    page.fill("#owner", OWNER)
    page.click("button:has-text('Open owner')")
    page.wait_for_url(server.url + owner_path("dashboard"))

    # The queues with their counts, the jobs with their payload excerpts.
    mail = page.locator('#queues tr[data-queue="mail"]')
    assert mail.locator('td[data-label="queued"]').inner_text() == "2"
    assert mail.locator(".badge.paused").inner_text() == "paused"
    reports = page.locator('#queues tr[data-queue="reports"]')
    assert reports.locator('td[data-label="failed"]').inner_text() == "2"
    assert reports.locator('td[data-label="due later"]').inner_text() == "1"
    exports = page.locator('#queues tr[data-queue="exports"]')
    assert exports.locator('td[data-label="running"]').inner_text() == "1"
    head = page.locator('.queue[data-queue="mail"] [data-list="head"] tr[data-job="welcome-ada"]')
    assert SECRET in head.locator(".payload").inner_text()
    # The other jobs waiting: the mail queue's second, the report due in an hour.
    waiting = page.locator('.queue[data-queue="mail"] [data-list="queued"] tr[data-job]')
    assert waiting.evaluate_all("rows => rows.map(row => row.dataset.job)") == ["welcome-bob"]
    later = page.locator('.queue[data-queue="reports"] [data-list="queued"] '
                         'tr[data-job="digest-weekly"]')
    assert later.locator('td[data-label="due"] time').inner_text() == "in 1 h"
    dead = page.locator('.queue[data-queue="reports"] [data-list="dead"] '
                        'tr[data-job="report-2026-11"]')
    assert "upstream returned 503" in dead.inner_text()
    # The executor that raised: its error summary, the traceback folded away.
    raised = page.locator('.queue[data-queue="reports"] [data-list="failures"] '
                          'tr[data-job="import-csv"]')
    assert "RuntimeError: the test executor raised" in raised.inner_text()
    assert not raised.locator("pre").is_visible()
    raised.locator("summary").click()
    assert "Traceback (most recent call last)" in raised.locator("pre").inner_text()
    raised.locator("summary").click()
    assert "0 3 * * *" in page.locator('tr[data-schedule="nightly-digest"]').inner_text()
    # The script ran under the page's CSP: times read as relative ones.
    assert re.search(r"ago$", head.locator('td[data-label="enqueued"] time').inner_text())
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

    # A dismissed confirm sends nothing...
    page.once("dialog", lambda dialog: dialog.dismiss())
    head.locator("button:has-text('Cancel')").click()
    page.wait_for_timeout(300)
    untouched = Client(server.url).job(OWNER, "welcome-ada")
    assert untouched is not None and untouched["cancellation_id"] is None

    # ...an accepted one cancels, and the store has it.
    questions: list[str] = []

    def accept(dialog: Any) -> None:
        questions.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    with page.expect_navigation():
        head.locator("button:has-text('Cancel')").click()
    assert questions == ["Cancel job welcome-ada?"]
    assert page.locator(".flash").inner_text() == "Cancel of job welcome-ada: recorded"
    record = Client(server.url).job(OWNER, "welcome-ada")
    assert record is not None and record["cancellation_id"] == "dashboard"

    # Pause a queue from the page; the API sees it paused.
    assert queue(server, "reports")["paused"] is False
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        page.locator('#queues tr[data-queue="reports"] button:has-text("Pause")').click()
    assert queue(server, "reports")["paused"] is True
    # Cancel the running job (the head of its queue): its executor is aborted.
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        page.locator('.queue[data-queue="exports"] [data-list="head"] '
                     'tr[data-job="export-large"] button:has-text("Cancel")').click()
    assert Client(server.url).settled(OWNER, "export-large")["outcome"] == "cancelled"
    # Resume the mail queue: the cancelled job settles cancelled, the other completes.
    with page.expect_navigation():
        page.locator('#queues tr[data-queue="mail"] button:has-text("Resume")').click()
    assert Client(server.url).settled(OWNER, "welcome-ada")["outcome"] == "cancelled"
    assert Client(server.url).settled(OWNER, "welcome-bob")["outcome"] == "completed"
    page.screenshot(path=str(ARTIFACTS / "dashboard-after-actions.png"), full_page=True)
    # The one failed load: the wrong token's 401 page. No CSP violation, no script error.
    assert problems == ["Failed to load resource: the server responded with a status of "
                        "401 (Unauthorized)"], problems

    # A phone's width: no sideways scrolling of the page, tables stacked.
    phone = context.new_page()
    phone.set_viewport_size({"width": 390, "height": 844})
    phone.goto(server.url + owner_path("dashboard"))
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    assert phone.locator("#queues thead").evaluate(
        "element => getComputedStyle(element).display") == "none"
    assert phone.locator('#queues tr[data-queue="exports"]').is_visible()
    phone.screenshot(path=str(ARTIFACTS / "dashboard-phone.png"), full_page=True)

    # Logging out ends the session: the page redirects to the login form again.
    with page.expect_navigation():
        page.click("button:has-text('Log out')")
    page.goto(server.url + owner_path("dashboard"))
    assert page.url == server.url + "/v1/dashboard"
    assert SECRET not in page.content()


def test_owner_directory_in_chromium(server: Serve, context: Any) -> None:
    """The directory of owners: found from the picker, searched by prefix,
    sorted by its headers, an owner opened from it; at desktop and phone width."""
    client = Client(server.url)
    for key, jobs in (("dir-alpha", [{"job_id": "a1", "queue": "q",
                                      "payload": {"kind": "complete"}}]),
                      ("dir-beta", [{"job_id": f"b{n}", "queue": "q",
                                     "payload": {"kind": "fail", "reason": "no"}}
                                    for n in range(2)])):
        api(server, "POST", f"/v1/owners/{key}/jobs", {"jobs": jobs})
        for job in jobs:
            client.settled(key, job["job_id"])
    api(server, "POST", "/v1/owners/dir-gamma/queues/q/pause")
    api(server, "POST", "/v1/owners/dir-gamma/jobs", {"jobs": [
        {"job_id": f"g{n}", "queue": "q", "payload": {"kind": "complete"}} for n in range(3)]})
    ARTIFACTS.mkdir(exist_ok=True)

    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text)
            if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.goto(server.url + "/v1/dashboard")
    if page.locator("#token").count():
        page.fill("#token", TOKEN)
        page.click("button:has-text('Log in')")
        page.wait_for_url(server.url + "/v1/dashboard")
    page.click("a:has-text('All owners')")
    page.wait_for_url(re.compile(r".*/v1/dashboard/owners$"))
    page.fill("#prefix", "dir-")
    page.click("button:has-text('Search')")
    page.wait_for_url(re.compile(r".*/v1/dashboard/owners\?prefix=dir-.*"))

    def keys() -> list[str]:
        return [row.get_attribute("data-owner") or ""
                for row in page.locator("#owners tbody tr").all()]

    assert keys() == ["dir-alpha", "dir-beta", "dir-gamma"]
    beta = page.locator('#owners tr[data-owner="dir-beta"]')
    assert beta.locator('td[data-label="dead letters"]').inner_text() == "2"
    gamma = page.locator('#owners tr[data-owner="dir-gamma"]')
    assert gamma.locator('td[data-label="queued"]').inner_text() == "3"
    assert gamma.locator('td[data-label="overdue"]').inner_text() == "3"
    page.click("#owners th a:has-text('dead letters')")
    page.wait_for_url(re.compile(r".*sort=dead_letters.*"))
    assert keys()[0] == "dir-beta"
    assert page.locator("#prefix").input_value() == "dir-"  # the search stays
    page.click("#owners th a:has-text('overdue')")
    page.wait_for_url(re.compile(r".*sort=overdue.*"))
    assert keys()[0] == "dir-gamma"
    page.screenshot(path=str(ARTIFACTS / "dashboard-owners.png"), full_page=True)

    phone = context.new_page()
    phone.set_viewport_size({"width": 390, "height": 844})
    phone.goto(page.url)
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    assert phone.locator('#owners tr[data-owner="dir-beta"]').is_visible()
    phone.screenshot(path=str(ARTIFACTS / "dashboard-owners-phone.png"), full_page=True)
    phone.close()

    page.click('#owners a:has-text("dir-beta")')
    page.wait_for_url(server.url + "/v1/owners/dir-beta/dashboard")
    assert page.locator('#queues tr[data-queue="q"] td[data-label="failed"]').inner_text() == "2"
    assert problems == [], problems
