"""``tickwork serve`` end to end: the /v1 API over real HTTP, jobs run by its tick loops."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest

import tickwork
from tests.support.serve import TOKEN, Serve, job, owner_path
from tickwork.hosts.cpython.owners import owner_file_name


def owner_file(server: Serve, owner: str) -> Path:
    return server.data / "owners" / owner_file_name(owner)


def raw_exchange(server: Serve, data: bytes, *, read_timeout_s: float = 5.0) -> bytes:
    """Send raw bytes on a fresh connection and read until the server closes it."""
    client = server.client()
    with socket.create_connection((client.host, client.port), timeout=read_timeout_s) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def split_reply(reply: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = reply.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, json.loads(body) if body else None


def test_health_needs_no_token(server: Serve) -> None:
    assert server.client(token=None).call("GET", "/v1/health") == (200, {
        "ok": True, "api": "v1", "version": tickwork.__version__})


def test_enqueued_jobs_run_and_their_outcomes_are_readable(server: Serve) -> None:
    client, owner = server.client(), "tenant/outcomes ü"
    status, body = client.enqueue(owner, job("ok"), job("no", "fail", payload={"reason": "nope"}),
                                  job("boom", "raise", queue="q2"),
                                  job("maybe", "unknown", queue="q3"),
                                  job("orphan", "no-such-kind", queue="q4"))
    assert status == 200
    assert body == {"jobs": [{"job_id": name, "status": "queued"}
                             for name in ("ok", "no", "boom", "maybe", "orphan")]}
    outcomes = {name: client.settled(owner, name)
                for name in ("ok", "no", "boom", "maybe", "orphan")}
    assert {name: (record["outcome"], record["failure_reason"])
            for name, record in outcomes.items()} == {
        "ok": ("completed", None),
        "no": ("failed", "nope"),
        "boom": ("failed", "execution_failed"),
        "maybe": ("outcome_unknown", None),
        "orphan": ("failed", "no_executor"),
    }
    # An identical replay is a duplicate; different cargo under the id is a conflict.
    assert client.enqueue(owner, job("ok")) == (200, {"job_id": "ok", "status": "duplicate"})
    status, body = client.enqueue(owner, job("ok", priority=3))
    assert status == 409 and body["error"]["code"] == "ingest_conflict"
    assert client.job(owner, "ok")["priority"] == 0
    # The owner's file is named after the key and records it.
    assert owner_file(server, owner).exists()


def test_a_blocking_plain_executor_does_not_freeze_the_server(server: Serve) -> None:
    """Found on main: a plain executor failed with "object Completed can't be
    used in 'await' expression", and a time.sleep(3) in an executor froze
    the whole server (/v1/health took 2.7 s). It runs in a worker thread."""
    client, owner = server.client(), "plain-sleeper"
    assert client.enqueue(owner, job("nap", "sleep_plain", payload={"kind": "sleep_plain",
                                                                    "ms": 5_000}))[0] == 201
    client.running(owner, "nap")
    started = time.monotonic()
    assert server.client(token=None).call("GET", "/v1/health")[0] == 200
    # Answered while the executor still sleeps (the loop is not held): well
    # inside the 5 s the job blocks for, however loaded the machine.
    assert time.monotonic() - started < 3.0
    assert client.job(owner, "nap")["state"] == "running"
    assert client.settled(owner, "nap")["outcome"] == "completed"


def test_single_enqueue_answers_201(server: Serve) -> None:
    client = server.client()
    assert client.enqueue("single", job("one")) == (201, {"job_id": "one", "status": "queued"})
    assert client.settled("single", "one")["outcome"] == "completed"


def test_cancel_a_queued_and_a_running_job(server: Serve) -> None:
    client, owner = server.client(), "cancels"
    client.enqueue(owner, job("running", "slow"))
    client.running(owner, "running")
    client.enqueue(owner, job("waiting", "complete"))  # behind it: one job at a time per owner
    base = f"{owner_path(owner)}/jobs"

    status, body = client.call("POST", f"{base}/running/cancel",
                               {"cancellation_id": "c1", "only_if_queued": True})
    assert (status, body["status"]) == (409, "refused")
    assert client.call("POST", f"{base}/waiting/cancel", {"cancellation_id": "c2"}) == (
        200, {"job_id": "waiting", "status": "recorded"})
    assert client.call("POST", f"{base}/running/cancel", {"cancellation_id": "c3"}) == (
        200, {"job_id": "running", "status": "recorded"})
    running = client.settled(owner, "running")
    waiting = client.settled(owner, "waiting")
    assert (running["outcome"], running["cancellation_id"]) == ("cancelled", "c3")
    assert (waiting["outcome"], waiting["started_at"]) == ("cancelled", None)  # never ran
    # Replays and late cancellations.
    assert client.call("POST", f"{base}/running/cancel", {"cancellation_id": "c3"})[1] == {
        "job_id": "running", "status": "replayed"}
    status, body = client.call("POST", f"{base}/running/cancel", {"cancellation_id": "c9"})
    assert status == 409
    assert client.call("POST", f"{base}/ghost/cancel", {"cancellation_id": "c1"}) == (
        404, {"job_id": "ghost", "status": "not_found"})


def test_lane_refusal_settles_the_lanes_jobs_only(server: Serve) -> None:
    client, owner = server.client(), "lanes"
    client.enqueue(owner, job("l-running", "slow", lane="bad"))
    client.running(owner, "l-running")
    client.enqueue(owner, job("l-queued", queue="q2", lane="bad"),
                   job("other", queue="q3", lane="good"))
    status, body = client.call("POST", f"{owner_path(owner)}/lanes/bad/fail",
                               {"reason": "tenant_suspended"})
    assert (status, body) == (200, {"lane": "bad", "settled": 2, "more": False})
    for name in ("l-running", "l-queued"):
        record = client.settled(owner, name)
        assert (record["outcome"], record["failure_reason"]) == ("failed", "tenant_suspended")
    assert client.settled(owner, "other")["outcome"] == "completed"


def test_purge_deletes_queued_jobs_only(server: Serve) -> None:
    client, owner = server.client(), "purges"
    client.enqueue(owner, job("p-running", "slow", queue="p"))
    client.running(owner, "p-running")
    client.enqueue(owner, job("p-1", queue="p"), job("p-2", queue="p"))
    assert client.call("POST", f"{owner_path(owner)}/queues/p/purge") == (
        200, {"queue": "p", "purged": 2})
    assert client.job(owner, "p-1") is None
    assert client.job(owner, "p-running")["state"] == "running"
    client.call("POST", f"{owner_path(owner)}/jobs/p-running/cancel", {"cancellation_id": "x"})
    assert client.settled(owner, "p-running")["outcome"] == "cancelled"


def test_status_head_and_queue_status(server: Serve) -> None:
    client, owner = server.client(), "status"
    client.enqueue(owner, job("s-running", "slow", queue="a"))
    client.running(owner, "s-running")
    client.enqueue(owner, job("s-next", queue="a", priority=2), job("s-b", "fail", queue="b"))
    base = owner_path(owner)
    status, body = client.call("GET", f"{base}/queues/a/head")
    assert status == 200 and body["head"]["job_id"] == "s-running"
    status, body = client.call("GET", f"{base}/queues/a")
    assert body["queue"] == {"queue": "a", "queued": 1, "running": 1, "settled": 0, "outcomes": {
        "completed": 0, "failed": 0, "cancelled": 0, "outcome_unknown": 0, "interrupted": 0},
        "delayed": 0, "paused": False}
    client.call("POST", f"{base}/jobs/s-running/cancel", {"cancellation_id": "x"})
    for name in ("s-running", "s-next", "s-b"):
        client.settled(owner, name)
    status, body = client.call("GET", f"{base}/queues")
    assert status == 200
    assert [(q["queue"], q["queued"], q["running"], q["settled"],
             {k: v for k, v in q["outcomes"].items() if v}) for q in body["queues"]] == [
        ("a", 0, 0, 2, {"completed": 1, "cancelled": 1}),
        ("b", 0, 0, 1, {"failed": 1}),
    ]
    assert client.call("GET", f"{base}/queues/a/head")[1] == {"queue": "a", "head": None}


@pytest.mark.parametrize("token", [None, "wrong-token", ""])
def test_a_bad_token_is_refused_and_stores_nothing(server: Serve, token: str | None) -> None:
    owner = f"unauthorised-{token}"
    intruder = server.client(token=token)
    status, body = intruder.enqueue(owner, job("x"))
    assert status == 401 and body["error"]["code"] == "unauthorized"
    for method, path in (("GET", f"{owner_path(owner)}/jobs/x"),
                         ("GET", f"{owner_path(owner)}/queues"),
                         ("POST", f"{owner_path(owner)}/queues/q/purge")):
        assert intruder.call(method, path)[0] == 401
    assert not owner_file(server, owner).exists()
    assert server.client().job(owner, "x") is None


def test_reads_of_an_unknown_owner_create_nothing(server: Serve) -> None:
    client, owner = server.client(), "never-written"
    assert client.job(owner, "x") is None
    assert client.call("GET", f"{owner_path(owner)}/queues") == (200, {"queues": []})
    assert client.call("POST", f"{owner_path(owner)}/queues/q/purge") == (
        200, {"queue": "q", "purged": 0})
    assert client.call("POST", f"{owner_path(owner)}/jobs/x/cancel",
                       {"cancellation_id": "c"})[0] == 404
    assert not owner_file(server, owner).exists()


BAD_REQUESTS = [
    # (name, method, path suffix, raw body, expected status, expected code)
    ("malformed json", "POST", "/jobs", b'{"job_id": "a", ', 400, "malformed_json"),
    ("not utf-8", "POST", "/jobs", b'{"job_id": "\xff"}', 400, "malformed_json"),
    ("wrong type", "POST", "/jobs", json.dumps(
        {"job_id": "a", "queue": "q", "priority": "high"}).encode(), 400, "invalid_job"),
    ("unknown field", "POST", "/jobs", json.dumps(
        {"job_id": "a", "queue": "q", "colour": "red"}).encode(), 400, "invalid_job"),
    ("over-long id", "POST", "/jobs", json.dumps(
        {"job_id": "x" * 257, "queue": "q"}).encode(), 400, "invalid_job"),
    ("array body", "POST", "/jobs", b"[1, 2]", 400, "invalid_job"),
    ("NaN", "POST", "/jobs", b'{"job_id": "a", "queue": "q", "priority": NaN}', 400,
     "malformed_json"),
    ("one bad job of many", "POST", "/jobs", json.dumps({"jobs": [
        {"job_id": "good", "queue": "q"}, {"job_id": "", "queue": "q"}]}).encode(), 400,
     "invalid_job"),
    ("same id twice with different cargo", "POST", "/jobs", json.dumps({"jobs": [
        {"job_id": "twice", "queue": "q", "priority": 1},
        {"job_id": "twice", "queue": "q", "priority": 2}]}).encode(), 409, "ingest_conflict"),
    ("unknown route", "POST", "/jobs/a/explode", b"{}", 404, "no_route"),
    ("wrong method", "PUT", "/jobs", b"", 405, "method_not_allowed"),
    ("cancel without id", "POST", "/jobs/a/cancel", b"{}", 400, "invalid_argument"),
]


@pytest.mark.parametrize(("name", "method", "suffix", "raw", "status", "code"), BAD_REQUESTS,
                         ids=[case[0] for case in BAD_REQUESTS])
def test_bad_requests_are_refused_with_json_and_store_nothing(
        server: Serve, name: str, method: str, suffix: str, raw: bytes, status: int,
        code: str) -> None:
    owner = f"bad-{name}"
    got, body = server.client().call(method, owner_path(owner) + suffix, raw=raw or None)
    assert (got, body["error"]["code"]) == (status, code), body
    assert not owner_file(server, owner).exists()


def test_unknown_top_level_route(server: Serve) -> None:
    status, body = server.client().call("GET", "/admin")
    assert (status, body["error"]["code"]) == (404, "no_route")


def test_an_oversized_body_is_refused_before_it_is_read(server: Serve) -> None:
    owner = "oversized"
    head = (f"POST {owner_path(owner)}/jobs HTTP/1.1\r\nHost: x\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
            "Content-Length: 1000001\r\n\r\n").encode()
    started = time.monotonic()
    status, headers, body = split_reply(raw_exchange(server, head))  # no body sent at all
    assert time.monotonic() - started < 3
    assert (status, body["error"]["code"]) == (413, "body_too_large")
    assert headers["connection"] == "close"
    assert not owner_file(server, owner).exists()


@pytest.mark.parametrize(("auth", "suffix", "status", "code"), [
    ("Authorization: Bearer wrong-token\r\n", "/jobs", 401, "unauthorized"),
    ("", "/jobs", 401, "unauthorized"),
    (f"Authorization: Bearer {TOKEN}\r\n", "/jobs/a/explode", 404, "no_route"),
], ids=["wrong-token", "no-token", "unknown-route"])
def test_a_refusal_from_the_head_does_not_wait_for_the_body(
        server: Serve, auth: str, suffix: str, status: int, code: str) -> None:
    owner = f"early-{code}"
    head = (f"POST {owner_path(owner)}{suffix} HTTP/1.1\r\nHost: x\r\n{auth}"
            "Content-Type: application/json\r\nContent-Length: 900000\r\n\r\n").encode()
    started = time.monotonic()
    # Only the head is sent: a server waiting for the body would answer
    # after its 30 s body timeout, past this 5 s read timeout.
    got, headers, body = split_reply(raw_exchange(server, head))
    assert time.monotonic() - started < 3
    assert (got, body["error"]["code"]) == (status, code)
    assert headers["connection"] == "close"
    assert not owner_file(server, owner).exists()


def test_an_oversized_body_sent_anyway_still_gets_its_answer(server: Serve) -> None:
    client = server.client()
    status, body = client.call("POST", f"{owner_path('oversized-2')}/jobs",
                               raw=b"{" + b" " * 1_500_000 + b"}")
    assert (status, body["error"]["code"]) == (413, "body_too_large")


def test_a_body_at_the_limit_is_read(server: Serve) -> None:
    padding = " " * (1_000_000 - 60)
    raw = f'{{"job_id": "big", "queue": "q"{padding}}}'.encode()
    assert len(raw) <= 1_000_000
    status, body = server.client().call("POST", f"{owner_path('at-limit')}/jobs", raw=raw)
    assert status == 201, body


def test_chunked_bodies_are_refused(server: Serve) -> None:
    owner = "chunked"
    body = b'{"job_id": "a", "queue": "q"}'
    request = (f"POST {owner_path(owner)}/jobs HTTP/1.1\r\nHost: x\r\n"
               f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
               "Transfer-Encoding: chunked\r\n\r\n").encode()
    request += f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    status, _, reply = split_reply(raw_exchange(server, request))
    assert (status, reply["error"]["code"]) == (411, "length_required")
    smuggled = request.replace(b"Transfer-Encoding: chunked\r\n",
                               b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n")
    status, _, reply = split_reply(raw_exchange(server, smuggled))
    assert (status, reply["error"]["code"]) == (400, "bad_request")
    assert not owner_file(server, owner).exists()


@pytest.mark.parametrize("request_bytes", [
    b"GARBAGE\r\n\r\n",
    b"GET /v1/health HTTP/1.1\r\n\r\n",  # no Host
    b"GET /v1/health HTTP/1.1\r\nHost: x\r\nBad Header: 1\r\n\r\n",
    b"GET /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    b"GET /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
    b"GET v1/health HTTP/1.1\r\nHost: x\r\n\r\n",
], ids=["garbage", "no-host", "bad-header", "negative-length", "two-lengths", "no-slash"])
def test_malformed_requests_get_400(server: Serve, request_bytes: bytes) -> None:
    status, headers, body = split_reply(raw_exchange(server, request_bytes))
    assert (status, body["error"]["code"]) == (400, "bad_request")
    assert headers["content-type"].startswith("application/json")


def test_keep_alive_serves_several_requests_on_one_connection(server: Serve) -> None:
    client = server.client()
    requests = b"".join(
        f"GET {owner_path('keepalive')}/queues HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {TOKEN}\r\n{'Connection: close' if last else 'X: y'}\r\n\r\n"
        .encode() for last in (False, False, True))
    with socket.create_connection((client.host, client.port), timeout=5) as sock:
        sock.sendall(requests)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.count(b"HTTP/1.1 200 OK") == 3
    assert data.count(b"connection: keep-alive") == 2


def test_expect_100_continue(server: Serve) -> None:
    client = server.client()
    body = json.dumps(job("continued")).encode()
    with socket.create_connection((client.host, client.port), timeout=5) as sock:
        sock.sendall(f"POST {owner_path('expect')}/jobs HTTP/1.1\r\nHost: x\r\n"
                     f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n"
                     "Connection: close\r\n\r\n".encode())
        assert sock.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert split_reply(data)[0] == 201


def test_the_owner_file_records_its_key(server: Serve) -> None:
    import sqlite3

    client, owner = server.client(), "../../etc/passwd"
    client.enqueue(owner, job("k"))
    client.settled(owner, "k")
    path = owner_file(server, owner)
    assert path.parent == server.data / "owners"
    assert path.name.startswith(".._.._etc_passwd-")
    connection = sqlite3.connect(path)
    try:
        assert connection.execute("SELECT owner_key FROM tickwork_host_owner").fetchall() == [
            (owner,)]
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        connection.close()



def test_requests_are_answered_between_ticks_of_a_backlog(server: Serve) -> None:
    # The "complete" executor never awaits. Without a yield between ticks the
    # owner's tick loop would hold the event loop until its backlog is empty,
    # and the status request below would only be answered after that.
    client, owner = server.client(), "backlog"
    for batch in range(5):
        status, _ = client.enqueue(owner, *[job(f"b{batch}-{n}", queue=f"q{n % 10}")
                                            for n in range(100)])
        assert status == 200
    status, body = client.call("GET", f"{owner_path(owner)}/queues")
    assert status == 200
    waiting = sum(queue["queued"] + queue["running"] for queue in body["queues"])
    assert waiting > 0, "the status request waited for the whole backlog"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        _, body = client.call("GET", f"{owner_path(owner)}/queues")
        if sum(queue["outcomes"]["completed"] for queue in body["queues"]) == 500:
            break
        time.sleep(0.05)
    assert sum(queue["outcomes"]["completed"] for queue in body["queues"]) == 500
