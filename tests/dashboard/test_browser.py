"""The dashboard in a real headless browser: Debian's ``chromium`` driven by
Playwright, against a real ``tickwork serve`` (a process, real HTTP, the
owner's sqlite3 file).

Jobs are enqueued through the HTTP API; the browser logs in with the token,
opens the owner's page, reads the queues and jobs, cancels a job and pauses
a queue through the page's forms (accepting their confirm dialogs), and the
HTTP API then reads the change from the store. A job with three attempts
is found through the header's search, its page read and redriven. The
pages also load at a phone's width. Screenshots go to ``test-artifacts/``
(``dashboard.png`` and ``dashboard-job.png`` are the ones
``docs/images/dashboard.png`` and ``docs/images/dashboard-job.png`` were
taken from).

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
    # The reports queue's last hour, charted: its two failures drawn as a line
    # in the stylesheet's colour for failures (the CSP allows no inline style).
    charts = page.locator('.queue[data-queue="reports"] .charts')
    throughput = charts.locator('[data-chart="throughput"]')
    assert "failed 2" in throughput.locator("figcaption").inner_text()
    assert "enqueued 3" in throughput.locator("figcaption").inner_text()
    failed_line = throughput.locator("polyline.failed")
    box = throughput.locator("svg").bounding_box()
    assert box is not None and box["width"] > 200 and box["height"] > 40
    assert failed_line.evaluate("line => getComputedStyle(line).stroke") == (
        page.locator(".badge.failed").first.evaluate("badge => getComputedStyle(badge).color"))
    assert failed_line.evaluate("line => line.getBBox().height") > 0  # a rise, not flat
    assert "depth" in charts.locator('[data-chart="depth"] figcaption').inner_text()
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

    # A dismissed confirm sends nothing...
    page.once("dialog", lambda dialog: dialog.dismiss())
    head.locator("button:has-text('Cancel')").click()
    page.wait_for_timeout(300)
    untouched = Client(server.url).job(OWNER, "welcome-ada")
    assert untouched is not None and untouched["cancellation_id"] is None

    # ...an accepted one cancels, and the store has it.
    questions: list[str] = []
    accept = accepting(questions)
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
    # Redrive all of its dead letters: both wait again (the queue is paused).
    page.once("dialog", accept)
    with page.expect_navigation():
        page.locator('.queue[data-queue="reports"] button:has-text("Redrive all")').click()
    assert questions[-1] == "Queue every dead letter of reports again?"
    assert page.locator(".flash").inner_text() == (
        "Redrive of every dead letter of queue reports: redriven")
    for job_id in ("report-2026-11", "import-csv"):
        redriven = Client(server.url).job(OWNER, job_id)
        assert redriven is not None and redriven["state"] == "queued"
        assert redriven["history"][-1]["redrive_id"].startswith("dashboard-all-")
    # Cancel the queued jobs of its lane (the reports lane: the two redriven
    # jobs and the digest due in an hour) from the Lanes form.
    page.fill("#cancel-lane", "reports")
    page.once("dialog", accept)
    with page.expect_navigation():
        page.click("button:has-text('Cancel queued jobs')")
    assert questions[-1] == "Cancel every queued job of this lane?"
    assert page.locator(".flash").inner_text() == (
        "Cancel of every queued job of lane reports: cancelled; each settles without running")
    for job_id in ("report-2026-11", "import-csv", "digest-weekly"):
        cancelled = Client(server.url).job(OWNER, job_id)
        assert cancelled is not None and cancelled["cancellation_id"] == "dashboard"
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
    chart = phone.locator('.queue[data-queue="reports"] [data-chart="throughput"] svg')
    phone_box = chart.bounding_box()
    assert phone_box is not None and 200 < phone_box["width"] <= 390
    phone.screenshot(path=str(ARTIFACTS / "dashboard-phone.png"), full_page=True)

    # Logging out ends the session: the page redirects to the login form again.
    with page.expect_navigation():
        page.click("button:has-text('Log out')")
    page.goto(server.url + owner_path("dashboard"))
    assert page.url == server.url + "/v1/dashboard"
    assert SECRET not in page.content()


def accepting(questions: list[str]) -> Any:
    """A dialog handler that notes each confirm's question and accepts it."""
    def accept(dialog: Any) -> None:
        questions.append(dialog.message)
        dialog.accept()
    return accept


def log_in(page: Any, server: Serve) -> None:
    page.goto(server.url + "/v1/dashboard")
    if page.locator("#token").count():
        page.fill("#token", TOKEN)
        with page.expect_navigation():
            page.click("button:has-text('Log in')")


def test_a_jobs_page_with_three_attempts_in_chromium(server: Serve, context: Any) -> None:
    """The header's search finds a job by the start of its id; its page
    shows each of its three attempts, its error and cargo, reads at a
    phone's width, and its redrive reaches the store."""
    ARTIFACTS.mkdir(exist_ok=True)
    api(server, "POST", owner_path("jobs"), {"jobs": [
        {"job_id": f"invoice-2026-004{n}", "queue": "billing", "lane": "tenant-7",
         "retry": {"attempts": 3, "base_delay_ms": 0},
         "payload": {"kind": "raise", "invoice": f"INV-2026-004{n}", "amount_cents": 129900,
                     "customer": {"email": SECRET, "note": "<b>not bold</b>"}}}
        for n in (1, 2)]})
    client = Client(server.url)
    for n in (1, 2):
        settled = client.settled(OWNER, f"invoice-2026-004{n}")
        assert settled["attempt"] == 3 and settled["outcome"] == "failed"

    page = context.new_page()
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text)
            if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    log_in(page, server)
    page.goto(server.url + owner_path("dashboard"))
    # The search box of the header: a prefix lists the jobs it starts.
    page.fill("#job-search", "invoice-2026")
    with page.expect_navigation():
        page.press("#job-search", "Enter")
    found = page.locator("tr[data-job]")
    assert found.evaluate_all("rows => rows.map(row => row.dataset.job)") == [
        "invoice-2026-0041", "invoice-2026-0042"]
    with page.expect_navigation():
        page.click("a:has-text('invoice-2026-0042')")
    job_page = server.url + owner_path("dashboard/jobs/invoice-2026-0042")
    assert page.url == job_page
    # An exact id goes straight to its page.
    page.fill("#job-search", "invoice-2026-0042")
    with page.expect_navigation():
        page.click("form.search button")
    assert page.url == job_page

    rows = page.locator("#attempts tr[data-attempt]")
    assert rows.evaluate_all("rows => rows.map(row => row.dataset.attempt)") == ["1", "2", "3"]
    for index in range(3):
        row = rows.nth(index)
        assert row.locator('td[data-label="outcome"]').inner_text() == "failed"
        assert row.locator('td[data-label="reason"]').inner_text() == "execution_failed"
        assert "RuntimeError: the test executor raised" in row.locator(
            'td[data-label="error"]').inner_text()
        assert re.search(r"ago$", row.locator('td[data-label="ended"] time').inner_text())
    traceback = page.locator("#attempts pre")
    assert not traceback.is_visible()  # folded, as on the scope's page
    page.click("#attempts summary")
    assert "Traceback (most recent call last)" in traceback.inner_text()
    page.click("#attempts summary")
    assert page.locator('[data-fact="attempt"] dd').inner_text() == "3 of 3"
    assert "Settled failed" in page.locator("#waiting").inner_text()
    cargo = page.locator("#cargo pre").inner_text()
    assert '"note": "<b>not bold</b>"' in cargo and SECRET in cargo  # text, not markup
    assert page.locator("#cargo b").count() == 0
    page.screenshot(path=str(ARTIFACTS / "dashboard-job.png"), full_page=True)

    # A phone's width: no sideways scrolling, each attempt a card.
    phone = context.new_page()
    phone.set_viewport_size({"width": 390, "height": 844})
    phone.goto(job_page)
    assert phone.evaluate("document.documentElement.scrollWidth") <= 390
    assert phone.locator("#attempts thead").evaluate(
        "element => getComputedStyle(element).display") == "none"
    assert phone.locator('#attempts tr[data-attempt="3"]').is_visible()
    assert phone.locator("#job-search").is_visible()
    phone.screenshot(path=str(ARTIFACTS / "dashboard-job-phone.png"), full_page=True)
    phone.close()

    # Its redrive, from its page, comes back to it and reaches the store.
    questions: list[str] = []
    page.once("dialog", accepting(questions))
    with page.expect_navigation():
        page.click("#actions button:has-text('Redrive')")
    assert questions == ["Queue job invoice-2026-0042 again?"]
    assert page.url.startswith(job_page + "?did=redrive")
    assert page.locator(".flash").inner_text() == \
        "Redrive of job invoice-2026-0042: redriven"
    shown = page.locator("#attempts tr[data-redrive]").get_attribute("data-redrive")
    record = client.job(OWNER, "invoice-2026-0042")
    assert record is not None and shown is not None and shown.startswith("dashboard-")
    assert [entry["redrive_id"] for entry in record["history"]
            if entry.get("redrive_id")] == [shown]
    assert problems == [], problems
    page.close()


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
    log_in(page, server)
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
