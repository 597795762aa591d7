"""``tickwork jobs|queues|schedules`` against a live ``tickwork serve``.

Every action is checked through the API afterwards (what the server holds),
not only by what the command printed or its exit code.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.serve import ROOT, TOKEN, Serve, job, owner_path
from tickwork.__main__ import main
from tickwork.hosts.cpython.api_commands import (
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)


def run(capsys: pytest.CaptureFixture[str], server: Serve, *args: str,
        token: str = TOKEN) -> tuple[int, str, str]:
    """``tickwork ARGS --url ... --token ...``: exit code, stdout, stderr."""
    code = main([*args, "--url", server.url, "--token", token])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys: pytest.CaptureFixture[str], server: Serve, *args: str) -> Any:
    code, out, err = run(capsys, server, *args, "--json")
    assert (code, err) == (EXIT_OK, ""), err
    return json.loads(out)


def api(server: Serve, method: str, path: str, body: Any = None) -> Any:
    status, answer = server.client().call(method, path, body)
    assert status in (200, 201), (status, answer)
    return answer


@contextlib.contextmanager
def not_tickwork() -> Iterator[str]:
    """The URL of a web server that answers every GET with an HTML 404."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_error(404)

        def log_message(self, *args: Any) -> None:
            pass

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=web.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{web.server_address[1]}"
    finally:
        web.shutdown()
        web.server_close()


def free_port_url() -> str:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{unused.getsockname()[1]}"


# ----------------------------------------------------------------- queues


def test_queues_pause_resume_and_status(server: Serve,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    owner = "cli queues"
    code, out, _ = run(capsys, server, "queues", "pause", "held", "other", "--owner", owner)
    assert code == EXIT_OK
    assert out.splitlines() == ["queue 'held' paused", "queue 'other' paused"]
    assert api(server, "GET", f"{owner_path(owner)}/queues/held")["queue"]["paused"] is True
    code, out, _ = run(capsys, server, "queues", "pause", "held", "--owner", owner)
    assert (code, out) == (EXIT_OK, "queue 'held' was paused already\n")

    server.client().enqueue(owner, job("h-1", queue="held"), job("h-2", queue="held"))
    listed = api(server, "GET", f"{owner_path(owner)}/queues")
    assert run_json(capsys, server, "queues", "status", "--owner", owner) == listed
    one = run_json(capsys, server, "queues", "status", "held", "--owner", owner)
    assert one["queue"]["queued"] == 2 and one["queue"]["paused"] is True
    code, out, _ = run(capsys, server, "queues", "status", "--owner", owner)
    assert code == EXIT_OK
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[4:]}
    assert rows["held"][:2] == ["(paused)", "2"], out

    resumed = run_json(capsys, server, "queues", "resume", "held", "never-paused",
                       "--owner", owner)
    assert resumed == [{"queue": "held", "paused": False, "changed": True},
                       {"queue": "never-paused", "paused": False, "changed": False}]
    assert api(server, "GET", f"{owner_path(owner)}/queues/held")["queue"]["paused"] is False
    server.client().settled(owner, "h-1")  # resumed: the held jobs run
    server.client().settled(owner, "h-2")


# ------------------------------------------------------------------- jobs


def test_jobs_list_pages_with_the_cursor(server: Serve,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    owner = "cli list"
    run(capsys, server, "queues", "pause", "mail", "--owner", owner)  # they stay queued
    server.client().enqueue(owner, *(job(f"m-{n}", queue="mail", lane=f"lane-{n % 2}")
                                     for n in range(1, 6)))
    first = run_json(capsys, server, "jobs", "list", "--owner", owner, "--queue", "mail",
                     "--limit", "2")
    assert [item["job_id"] for item in first["jobs"]] == ["m-5", "m-4"]
    assert first["cursor"] is not None
    assert first == api(server, "GET", f"{owner_path(owner)}/jobs?queue=mail&limit=2")
    second = run_json(capsys, server, "jobs", "list", "--owner", owner, "--queue", "mail",
                      "--limit", "2", "--cursor", first["cursor"])
    assert [item["job_id"] for item in second["jobs"]] == ["m-3", "m-2"]
    every = run_json(capsys, server, "jobs", "list", "--owner", owner, "--queue", "mail",
                     "--limit", "2", "--all", "--order", "oldest")
    assert [item["job_id"] for item in every["jobs"]] == ["m-1", "m-2", "m-3", "m-4", "m-5"]
    assert every["cursor"] is None
    by_lane = run_json(capsys, server, "jobs", "list", "--owner", owner, "--lane", "lane-0")
    assert sorted(item["job_id"] for item in by_lane["jobs"]) == ["m-2", "m-4"]

    code, out, _ = run(capsys, server, "jobs", "list", "--owner", owner, "--queue", "mail",
                       "--limit", "2")
    lines = out.splitlines()
    assert code == EXIT_OK
    assert lines[0].split()[:5] == ["job", "queue", "lane", "priority", "state"]
    assert [line.split()[0] for line in lines[2:4]] == ["m-5", "m-4"]
    assert lines[-1] == f"more: pass --cursor {first['cursor']} for the next page (or --all)"
    code, out, _ = run(capsys, server, "jobs", "list", "--owner", owner, "--queue", "mail",
                       "--state", "running")
    assert (code, out) == (EXIT_OK, "no running jobs in queue 'mail'\n")


def test_jobs_cancel(server: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    owner = "cli cancel"
    client = server.client()
    client.enqueue(owner, job("c-run", "slow"), job("c-wait", "slow", queue="held"))
    run(capsys, server, "queues", "pause", "held", "--owner", owner)
    client.running(owner, "c-run")

    code, out, _ = run(capsys, server, "jobs", "cancel", "c-run", "--only-if-queued",
                       "--owner", owner)
    assert (code, out) == (EXIT_REFUSED, "c-run: running already; not cancelled "
                                         "(--only-if-queued)\n")
    assert client.job(owner, "c-run")["state"] == "running"  # type: ignore[index]

    # Several ids: each is tried, and a missing one makes the exit code 1.
    code, out, _ = run(capsys, server, "jobs", "cancel", "c-wait", "no-such", "c-run",
                       "--cancellation-id", "stop-1", "--owner", owner)
    assert code == EXIT_REFUSED
    assert out.splitlines() == ["c-wait: cancellation recorded", "no-such: no such job",
                                "c-run: cancellation recorded"]
    for job_id in ("c-wait", "c-run"):
        settled = client.settled(owner, job_id)
        assert (settled["outcome"], settled["cancellation_id"]) == ("cancelled", "stop-1")

    replayed = run_json(capsys, server, "jobs", "cancel", "c-wait", "--cancellation-id",
                        "stop-1", "--owner", owner)
    assert replayed == [{"job_id": "c-wait", "status": "replayed"}]
    code, out, _ = run(capsys, server, "jobs", "cancel", "c-wait", "--owner", owner)
    assert code == EXIT_REFUSED and out.startswith("c-wait: "), out


def test_dead_letters_and_redrive(server: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    owner = "cli redrive"
    client = server.client()
    client.enqueue(owner, job("d-1", "fail", queue="sync"), job("d-2", "fail", queue="sync"),
                   job("ok-1", queue="sync"))
    for job_id in ("d-1", "d-2", "ok-1"):
        client.settled(owner, job_id)
    letters = run_json(capsys, server, "jobs", "dead-letters", "--owner", owner,
                       "--queue", "sync")
    assert sorted(item["job_id"] for item in letters["jobs"]) == ["d-1", "d-2"]
    assert letters == api(server, "GET", f"{owner_path(owner)}/queues/sync/dead-letters")

    # Paused, so the redriven jobs stay queued where we can see them.
    run(capsys, server, "queues", "pause", "sync", "--owner", owner)
    code, out, _ = run(capsys, server, "jobs", "redrive", "d-1", "--redrive-id", "r-1",
                       "--owner", owner)
    assert (code, out) == (EXIT_OK, "d-1: redriven: queued again as attempt 1 "
                                    "(redrive id r-1)\n")
    record = client.job(owner, "d-1")
    assert record is not None
    assert (record["state"], record["attempt"]) == ("queued", 1)
    assert record["history"][-1]["redrive_id"] == "r-1"
    code, out, _ = run(capsys, server, "jobs", "redrive", "d-1", "--redrive-id", "r-1",
                       "--owner", owner)
    assert (code, out) == (EXIT_OK, "d-1: redriven already under this id (replayed)\n")

    # --queue: every dead letter left (d-2); then there are none.
    answers = run_json(capsys, server, "jobs", "redrive", "--queue", "sync", "--owner", owner)
    assert answers == [{"queue": "sync", "redriven": 1, "replayed": 0, "refused": 0,
                        "cursor": None}]
    assert client.job(owner, "d-2")["state"] == "queued"  # type: ignore[index]
    assert run_json(capsys, server, "jobs", "redrive", "--queue", "sync",
                    "--owner", owner) == []

    code, out, _ = run(capsys, server, "jobs", "redrive", "ok-1", "nope", "--owner", owner)
    assert code == EXIT_REFUSED
    assert out.splitlines() == [
        "ok-1: refused: it settled completed or cancelled: not a dead letter",
        "nope: no such job"]
    code, _, err = run(capsys, server, "jobs", "redrive", "d-1", "--queue", "sync",
                       "--owner", owner)
    assert code == EXIT_USAGE and "not both" in err


def test_jobs_cancel_lane(server: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    owner = "cli lane"
    client = server.client()
    client.enqueue(owner, job("l-run", "slow", queue="busy", lane="t"))
    client.running(owner, "l-run")
    run(capsys, server, "queues", "pause", "held", "--owner", owner)
    client.enqueue(owner, job("l-1", queue="held", lane="t"), job("l-2", queue="held", lane="t"),
                   job("keep", queue="held", lane="u"))

    code, out, _ = run(capsys, server, "jobs", "cancel", "--lane", "t", "--cancellation-id",
                       "gone-1", "--owner", owner)
    assert (code, out) == (EXIT_OK, "t: 2 cancelled, 0 cancelled already under this id, "
                                    "0 skipped (started, settled or cancelled under another "
                                    "id meanwhile) (cancellation id gone-1)\n")
    assert client.job(owner, "l-run")["state"] == "running"  # type: ignore[index]
    assert client.job(owner, "keep")["cancellation_id"] is None  # type: ignore[index]
    # Sent again while they wait (the owner's one execution is busy): a replay.
    assert run_json(capsys, server, "jobs", "cancel", "--lane", "t", "--cancellation-id",
                    "gone-1", "--owner", owner) == [
        {"lane": "t", "cancelled": 0, "replayed": 2, "skipped": 0, "cursor": None}]
    assert client.job(owner, "l-run")["state"] == "running"  # type: ignore[index]
    run(capsys, server, "jobs", "cancel", "l-run", "--owner", owner)
    for job_id in ("l-1", "l-2"):  # settled without running, though the queue is paused
        settled = client.settled(owner, job_id)
        assert (settled["outcome"], settled["cancellation_id"]) == ("cancelled", "gone-1")
    assert client.job(owner, "keep")["state"] == "queued"  # type: ignore[index]
    # Once settled they are no queued jobs of the lane any more.
    assert run_json(capsys, server, "jobs", "cancel", "--lane", "t", "--cancellation-id",
                    "gone-1", "--owner", owner) == []

    code, _, err = run(capsys, server, "jobs", "cancel", "l-run", "--lane", "t",
                       "--owner", owner)
    assert code == EXIT_USAGE and "not both" in err
    code, _, err = run(capsys, server, "jobs", "cancel", "--lane", "t", "--only-if-queued",
                       "--owner", owner)
    assert code == EXIT_USAGE and "--only-if-queued" in err
    code, _, err = run(capsys, server, "jobs", "cancel", "--owner", owner)
    assert code == EXIT_USAGE and "--lane" in err


def test_jobs_why(server: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    owner = "cli why"
    client = server.client()
    client.enqueue(owner, job("w-run", "slow", queue="busy"), job("w-next", queue="busy"),
                   job("w-later", queue="other", delay_ms=3_600_000))
    client.running(owner, "w-run")
    code, out, _ = run(capsys, server, "jobs", "why", "w-next", "w-later", "w-run", "nope",
                       "--owner", owner)
    assert code == EXIT_REFUSED  # the missing job
    lines = out.splitlines()
    assert lines[0] == ("w-next: queued; held: its queue runs one job at a time and is "
                        "running w-run")
    assert lines[1].startswith("w-later: queued; held: not due until ")
    assert lines[1].endswith(" UTC; the owner is at its concurrency (1 running): w-run")
    assert lines[2:] == ["w-run: running; not waiting", "nope: no such job"]
    answers = run_json(capsys, server, "jobs", "why", "w-next", "--owner", owner)
    direct = api(server, "GET", f"{owner_path(owner)}/jobs/w-next/why")
    assert [{**answer, "read_at": 0} for answer in answers] == [{**direct, "read_at": 0}]
    assert answers[0]["holds"] == [{"kind": "queue_busy", "until": None, "job_ids": ["w-run"],
                                    "limit": 1,
                                    "text": "its queue runs one job at a time and is running "
                                            "w-run"}]
    run(capsys, server, "jobs", "cancel", "w-run", "--owner", owner)
    client.settled(owner, "w-next")
    code, out, _ = run(capsys, server, "jobs", "why", "w-later", "--owner", owner)
    assert code == EXIT_OK and "owner is at its concurrency" not in out


def test_queues_retention(server: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    owner = "cli retention"
    client = server.client()
    client.enqueue(owner, job("r-1"))
    client.settled(owner, "r-1")
    code, out, _ = run(capsys, server, "queues", "retention", "--owner", owner)
    assert code == EXIT_OK
    assert out.splitlines()[2].split() == ["(default)", "7d", "30d", "built", "in"]

    code, out, _ = run(capsys, server, "queues", "set-retention", "mail", "--completed", "36h",
                       "--failed", "forever", "--owner", owner)
    assert (code, out) == (EXIT_OK, "queue 'mail' keeps completed jobs 36h, failed ones "
                                    "forever\n")
    code, out, _ = run(capsys, server, "queues", "set-retention", "--completed", "90m",
                       "--failed", "14d", "--owner", owner)
    assert (code, out) == (EXIT_OK, "the default keeps completed jobs 90m, failed ones 14d\n")
    stored = api(server, "GET", f"{owner_path(owner)}/retention")["policies"]
    assert [(p["queue"], p["keep_completed_ms"], p["keep_failed_ms"]) for p in stored] == [
        (None, 5_400_000, 1_209_600_000), ("mail", 129_600_000, None)]
    listed = run_json(capsys, server, "queues", "retention", "--owner", owner)
    assert listed == {"policies": stored}

    # A duration that is no duration, and one the engine refuses (under a
    # minute): bad arguments both, and nothing changes.
    code, _, err = run(capsys, server, "queues", "set-retention", "mail", "--completed", "7x",
                       "--failed", "1d", "--owner", owner)
    assert code == EXIT_USAGE and "--completed: '7x' is not a duration" in err
    code, _, err = run(capsys, server, "queues", "set-retention", "mail", "--completed", "1s",
                       "--failed", "1d", "--owner", owner)
    assert code == EXIT_USAGE and "keep_completed_ms" in err  # the engine's refusal, by name
    assert api(server, "GET", f"{owner_path(owner)}/retention")["policies"] == stored

    code, out, _ = run(capsys, server, "queues", "clear-retention", "mail", "--owner", owner)
    assert (code, out) == (EXIT_OK, "queue 'mail' follows the default\n")
    code, out, _ = run(capsys, server, "queues", "clear-retention", "mail", "--owner", owner)
    assert (code, out) == (EXIT_OK, "queue 'mail' follows the default already (it had no "
                                    "policy)\n")
    code, out, _ = run(capsys, server, "queues", "clear-retention", "--owner", owner)
    assert (code, out) == (EXIT_OK, "the default is the built-in one\n")
    policies = api(server, "GET", f"{owner_path(owner)}/retention")["policies"]
    assert [(p["queue"], p["updated_at"]) for p in policies] == [(None, None)]


def test_queues_limits(server: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    owner = "cli limits"
    code, out, _ = run(capsys, server, "queues", "limits", "--owner", owner)
    assert (code, out) == (EXIT_OK, "no limits: every queue runs one job at a time, and no "
                                    "lane has a limit of its own\n")

    code, out, _ = run(capsys, server, "queues", "set-limit", "exports", "4", "--owner", owner)
    assert (code, out) == (EXIT_OK, "queue 'exports' runs up to 4 jobs at once\n")
    code, out, _ = run(capsys, server, "queues", "set-limit", "--lane", "tenant 7", "2",
                       "--owner", owner)
    assert (code, out) == (EXIT_OK, "lane 'tenant 7' runs up to 2 jobs at once across every "
                                    "queue\n")
    answered = run_json(capsys, server, "queues", "set-limit", "exports", "4", "--owner", owner)
    assert answered == [{"kind": "queue", "key": "exports", "max_running": 4,
                         "changed": False}]
    stored = api(server, "GET", f"{owner_path(owner)}/limits")["limits"]
    assert [(item["kind"], item["key"], item["max_running"]) for item in stored] == [
        ("queue", "exports", 4), ("lane", "tenant 7", 2)]
    assert run_json(capsys, server, "queues", "limits", "--owner", owner) == {"limits": stored}
    code, out, _ = run(capsys, server, "queues", "limits", "--owner", owner)
    lines = out.splitlines()
    assert code == EXIT_OK and lines[0].split() == ["kind", "key", "max_running", "updated",
                                                    "(UTC)"]
    assert lines[2].split()[:3] == ["queue", "exports", "4"]
    assert lines[3].split()[:4] == ["lane", "tenant", "7", "2"]

    # Refused before anything is sent, by name: out of range, not a number,
    # a queue and a lane at once, neither. Nothing changes.
    for bad in ("0", "10001", "ten", "2.5"):
        code, _, err = run(capsys, server, "queues", "set-limit", "exports", bad,
                           "--owner", owner)
        assert code == EXIT_USAGE and "max_running: must be an integer from 1 to 10000" in err
    code, _, err = run(capsys, server, "queues", "set-limit", "--lane", "x", "exports", "3",
                       "--owner", owner)
    assert code == EXIT_USAGE and "give a QUEUE, or --lane NAME" in err
    code, _, err = run(capsys, server, "queues", "clear-limit", "--owner", owner)
    assert code == EXIT_USAGE and "give a QUEUE, or --lane NAME" in err
    assert api(server, "GET", f"{owner_path(owner)}/limits")["limits"] == stored

    code, out, _ = run(capsys, server, "queues", "clear-limit", "exports", "--owner", owner)
    assert (code, out) == (EXIT_OK, "queue 'exports' runs one job at a time again\n")
    code, out, _ = run(capsys, server, "queues", "clear-limit", "exports", "--owner", owner)
    assert (code, out) == (EXIT_OK, "queue 'exports' had no limit (it runs one job at a "
                                    "time)\n")
    cleared = run_json(capsys, server, "queues", "clear-limit", "--lane", "tenant 7",
                       "--owner", owner)
    assert cleared == [{"kind": "lane", "key": "tenant 7", "changed": True}]
    code, out, _ = run(capsys, server, "queues", "clear-limit", "--lane", "tenant 7",
                       "--owner", owner)
    assert (code, out) == (EXIT_OK, "lane 'tenant 7' had no limit\n")
    assert api(server, "GET", f"{owner_path(owner)}/limits")["limits"] == []


def test_queues_rate_limits(server: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    owner = "cli rate limits"
    code, out, _ = run(capsys, server, "queues", "rate-limits", "--owner", owner)
    assert (code, out) == (EXIT_OK, "no rate limits and no holds: jobs start as fast as "
                                    "claims take them\n")
    code, out, _ = run(capsys, server, "queues", "set-rate-limit", "emails", "10/1s",
                       "--owner", owner)
    assert (code, out) == (EXIT_OK, "queue 'emails' starts at most 10/1s (burst 10)\n")
    answered = run_json(capsys, server, "queues", "set-rate-limit", "--lane", "tenant 7",
                        "600/1h", "--burst", "20", "--owner", owner)
    assert answered == [{"kind": "lane", "key": "tenant 7", "starts": 600,
                         "period_ms": 3_600_000, "burst": 20, "changed": True}]
    code, out, _ = run(capsys, server, "queues", "set-rate-limit", "emails", "10/1s",
                       "--owner", owner)
    assert out.endswith("(already so)\n")
    stored = api(server, "GET", f"{owner_path(owner)}/rate-limits")["rate_limits"]
    assert [(item["kind"], item["key"], item["starts"], item["period_ms"], item["burst"])
            for item in stored] == [("queue", "emails", 10, 1000, 10),
                                    ("lane", "tenant 7", 600, 3_600_000, 20)]
    assert run_json(capsys, server, "queues", "rate-limits", "--owner", owner) == {
        "rate_limits": stored}
    code, out, _ = run(capsys, server, "queues", "rate-limits", "--owner", owner)
    lines = out.splitlines()
    assert code == EXIT_OK and lines[0].split()[:4] == ["kind", "key", "rate", "burst"]
    assert lines[2].split()[:4] == ["queue", "emails", "10/1s", "10"]
    assert lines[3].split()[:5] == ["lane", "tenant", "7", "600/1h", "20"]

    # Refused before anything is sent, by name; nothing changes.
    for rate, field in (("0/1s", "starts"), ("ten/1s", "starts"), ("10/0s", "period_ms"),
                        ("10/32d", "period_ms")):
        code, _, err = run(capsys, server, "queues", "set-rate-limit", "emails", rate,
                           "--owner", owner)
        assert code == EXIT_USAGE and f"{field}: must be" in err, (rate, err)
    for rate in ("10", "10/soon"):
        code, _, err = run(capsys, server, "queues", "set-rate-limit", "emails", rate,
                           "--owner", owner)
        assert code == EXIT_USAGE and "N/DURATION" in err, (rate, err)
    code, _, err = run(capsys, server, "queues", "set-rate-limit", "emails", "10/1s",
                       "--burst", "0", "--owner", owner)
    assert code == EXIT_USAGE and "burst: must be" in err
    assert api(server, "GET", f"{owner_path(owner)}/rate-limits")["rate_limits"] == stored

    code, out, _ = run(capsys, server, "queues", "clear-rate-limit", "emails",
                       "--owner", owner)
    assert (code, out) == (EXIT_OK, "queue 'emails' has no rate limit or hold any more\n")
    code, out, _ = run(capsys, server, "queues", "clear-rate-limit", "emails",
                       "--owner", owner)
    assert (code, out) == (EXIT_OK, "queue 'emails' had no rate limit or hold\n")
    remaining = api(server, "GET", f"{owner_path(owner)}/rate-limits")["rate_limits"]
    assert [item["key"] for item in remaining] == ["tenant 7"]


def test_the_settled_feed_is_an_owners(server: Serve,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    owner = "cli settled"
    client = server.client()
    client.enqueue(owner, job("s-1"), job("s-2"))
    client.settled(owner, "s-1")
    client.settled(owner, "s-2")
    feed = run_json(capsys, server, "jobs", "settled", "--owner", owner)
    assert feed == api(server, "GET", f"{owner_path(owner)}/settled")
    assert [item["job_id"] for item in feed["jobs"]] == ["s-1", "s-2"]
    after = feed["jobs"][0]["sequence"]
    code, out, _ = run(capsys, server, "jobs", "settled", "--owner", owner,
                       "--after", str(after))
    assert code == EXIT_OK and "s-2" in out and "s-1" not in out
    assert out.rstrip().endswith(f"read on with: --after {feed['jobs'][1]['sequence']}")

    # Refused before anything is sent: nothing listens at this URL, yet the
    # answer is the usage error, not "cannot connect".
    code = main(["jobs", "settled", "--shared", "--url", free_port_url(), "--token", TOKEN])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert "the settled feed is an owner's; the shared queues have none" in err


# -------------------------------------------------------------- schedules


def test_schedules(server: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    owner = "cli schedules"
    base = f"{owner_path(owner)}/schedules"
    for name in ("hourly", "nightly"):
        api(server, "POST", base, {"name": name, "every_ms": 3_600_000,
                                   "job": {"queue": "reports", "payload": {"kind": "complete"}}})
    listed = run_json(capsys, server, "schedules", "list", "--owner", owner)
    assert listed == api(server, "GET", base)
    code, out, _ = run(capsys, server, "schedules", "list", "--owner", owner)
    assert code == EXIT_OK
    assert [line.split()[:4] for line in out.splitlines()[2:]] == [
        ["hourly", "every", "3600", "s"], ["nightly", "every", "3600", "s"]]

    def paused() -> dict[str, bool]:
        return {item["name"]: item["paused"] for item in api(server, "GET", base)["schedules"]}

    code, out, _ = run(capsys, server, "schedules", "pause", "nightly", "--owner", owner)
    assert (code, out) == (EXIT_OK, "schedule 'nightly': paused\n")
    assert paused() == {"hourly": False, "nightly": True}
    code, out, _ = run(capsys, server, "schedules", "pause", "nightly", "missing",
                       "--owner", owner)
    assert code == EXIT_REFUSED
    assert out.splitlines() == ["schedule 'nightly': was paused already",
                                "schedule 'missing': no such schedule"]
    assert run_json(capsys, server, "schedules", "resume", "nightly", "--owner", owner) == [
        {"name": "nightly", "changed": True}]
    assert paused() == {"hourly": False, "nightly": False}
    code, out, _ = run(capsys, server, "schedules", "resume", "hourly", "--owner", owner)
    assert (code, out) == (EXIT_OK, "schedule 'hourly': was not paused\n")

    code, out, _ = run(capsys, server, "schedules", "delete", "hourly", "--owner", owner)
    assert (code, out) == (EXIT_OK, "schedule 'hourly': deleted (the jobs it created stay)\n")
    assert list(paused()) == ["nightly"]
    code, out, _ = run(capsys, server, "schedules", "delete", "hourly", "--owner", owner)
    assert (code, out) == (EXIT_REFUSED, "schedule 'hourly': no such schedule\n")


# ------------------------------------------------------------- exit codes


def test_exit_codes(server: Serve, capsys: pytest.CaptureFixture[str],
                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TICKWORK_TOKEN", raising=False)
    monkeypatch.delenv("TICKWORK_URL", raising=False)
    code, _, err = run(capsys, server, "jobs", "list", "--owner", "x", "--queue", "q",
                       token="wrong")
    assert code == EXIT_UNREACHABLE and "401 unauthorized" in err and "--token" in err
    code = main(["queues", "status", "--owner", "x", "--url", free_port_url(),
                 "--token", TOKEN])
    err = capsys.readouterr().err
    assert code == EXIT_UNREACHABLE and "connection refused" in err
    with not_tickwork() as url:  # something answers, but not tickwork's API
        code = main(["queues", "status", "--owner", "x", "--url", url, "--token", TOKEN])
    err = capsys.readouterr().err
    assert code == EXIT_UNREACHABLE and f"no tickwork API at {url}" in err, err
    # tickwork answers, refusing the path: a wrong prefix in --url.
    code = main(["queues", "status", "--owner", "x", "--url", f"{server.url}/not-the-api",
                 "--token", TOKEN])
    err = capsys.readouterr().err
    assert code == EXIT_REFUSED and "404 no_route" in err, err

    code, _, err = run(capsys, server, "queues", "status", "--shared")
    assert code == EXIT_REFUSED and "404 scope_not_configured" in err and "--postgres" in err
    code, _, err = run(capsys, server, "jobs", "cancel", "ghost", "--owner", "x")
    assert code == EXIT_REFUSED

    code, _, err = run(capsys, server, "jobs", "list", "--owner", "x", "--queue", "q",
                       "--limit", "500")
    assert code == EXIT_USAGE and "limit: must be an integer from 1 to 100" in err
    code = main(["jobs", "list", "--owner", "x", "--queue", "q", "--url", server.url])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE and "no token" in err
    code, _, err = run(capsys, server, "queues", "pause", "..", "--owner", "x")
    assert code == EXIT_USAGE and "queue" in err
    with pytest.raises(SystemExit) as exited:  # argparse: no scope given
        main(["jobs", "list", "--queue", "q"])
    assert exited.value.code == EXIT_USAGE
    assert "one of the arguments --owner --shared is required" in capsys.readouterr().err


def test_the_installed_command_exits_with_these_codes(server: Serve) -> None:
    def tickwork(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tickwork", *args], cwd=ROOT,
                              capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "TICKWORK_TOKEN": TOKEN,
                                   "TICKWORK_URL": server.url})

    paused = tickwork("queues", "pause", "proc", "--owner", "cli process", "--json")
    assert paused.returncode == EXIT_OK, paused.stderr
    assert json.loads(paused.stdout) == [{"queue": "proc", "paused": True, "changed": True}]
    path = f"{owner_path('cli process')}/queues/{quote('proc', safe='')}"
    assert api(server, "GET", path)["queue"]["paused"] is True
    assert tickwork("jobs", "cancel", "ghost", "--owner", "p").returncode == EXIT_REFUSED
    assert tickwork("jobs", "list", "--owner", "p").returncode == EXIT_USAGE
    unreachable = tickwork("jobs", "list", "--owner", "p", "--queue", "q",
                           "--url", free_port_url())
    assert unreachable.returncode == EXIT_UNREACHABLE, unreachable.stderr


def test_help_is_plain_text_and_lists_the_exit_codes() -> None:
    for command in (["jobs"], ["jobs", "list"], ["queues", "pause"], ["schedules", "delete"],
                    ["inspect"]):
        shown = subprocess.run([sys.executable, "-m", "tickwork", *command, "--help"],
                               cwd=ROOT, capture_output=True, text=True, timeout=30)
        assert shown.returncode == 0, shown.stderr
        assert "``" not in shown.stdout and "exit codes:" in shown.stdout, shown.stdout


# ------------------------------------------------------------ shared scope


def test_the_shared_queues(shared_serve: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    server = shared_serve
    run(capsys, server, "queues", "pause", "shared-q", "--shared")
    status, body = server.client().call("POST", "/v1/shared/jobs",
                                        job("sh-1", queue="shared-q"))
    assert status == 201, body
    listed = run_json(capsys, server, "jobs", "list", "--shared", "--queue", "shared-q")
    assert [item["job_id"] for item in listed["jobs"]] == ["sh-1"]
    code, out, _ = run(capsys, server, "jobs", "cancel", "sh-1", "--shared")
    assert (code, out) == (EXIT_OK, "sh-1: cancellation recorded\n")
    recorded = api(server, "GET", "/v1/shared/jobs/sh-1")["job"]
    assert recorded["cancellation_id"].startswith("cli-")  # a fresh id of the command's
    statuses = run_json(capsys, server, "queues", "status", "--shared")
    assert {item["queue"]: item["paused"] for item in statuses["queues"]} == {"shared-q": True}
    # Resumed, a worker claims it and settles it cancelled, as recorded.
    code, out, _ = run(capsys, server, "queues", "resume", "shared-q", "--shared")
    assert (code, out) == (EXIT_OK, "queue 'shared-q' resumed\n")
    deadline = time.monotonic() + 20
    while (settled := api(server, "GET", "/v1/shared/jobs/sh-1")["job"])["state"] != "settled":
        assert time.monotonic() < deadline, settled
        time.sleep(0.05)
    assert settled["outcome"] == "cancelled"
    assert run_json(capsys, server, "schedules", "list", "--shared") == {"schedules": []}
