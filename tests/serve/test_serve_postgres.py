"""``tickwork serve --postgres``: the shared queues on a real PostgreSQL, through HTTP."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.pg.server import PostgresServer, unique_database_name
from tests.support.serve import ROOT, Client, Serve, job

SHARED = "/v1/shared"


def shared_job(client: Client, job_id: str) -> dict[str, Any] | None:
    status, body = client.call("GET", f"{SHARED}/jobs/{job_id}")
    if status == 404:
        return None
    assert status == 200, body
    record: dict[str, Any] = body["job"]
    return record


def wait_shared(client: Client, job_id: str, state: str, timeout_s: float = 10.0
                ) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    record = None
    while time.monotonic() < deadline:
        record = shared_job(client, job_id)
        if record is not None and record["state"] == state:
            return record
        time.sleep(0.02)
    raise AssertionError(f"shared job {job_id!r} never {state}: {record}")




def test_shared_queues_through_serve(shared_serve: Serve) -> None:
    client = shared_serve.client()
    status, body = client.call("POST", f"{SHARED}/jobs", {"jobs": [
        job("pg-ok"), job("pg-fail", "fail", queue="q2"),
        job("pg-slow", "slow", queue="q3", lane="tenant-x"),
        job("pg-queued", queue="q3", lane="tenant-x"),
        job("pg-other", "slow", queue="q4")]})
    assert status == 200 and [item["status"] for item in body["jobs"]] == ["queued"] * 5
    assert wait_shared(client, "pg-ok", "settled")["outcome"] == "completed"
    failed = wait_shared(client, "pg-fail", "settled")
    assert (failed["outcome"], failed["failure_reason"]) == ("failed", "boom")
    # A running job is cancelled at once (the local worker is told, not at its renewal).
    wait_shared(client, "pg-other", "running")
    started = time.monotonic()
    assert client.call("POST", f"{SHARED}/jobs/pg-other/cancel", {"cancellation_id": "c"}) == (
        200, {"job_id": "pg-other", "status": "recorded"})
    assert wait_shared(client, "pg-other", "settled")["outcome"] == "cancelled"
    assert time.monotonic() - started < 5
    # Failing a lane stops the running job of the lane and settles the queued one.
    wait_shared(client, "pg-slow", "running")
    assert client.call("POST", f"{SHARED}/lanes/tenant-x/fail", {"reason": "suspended"}) == (
        200, {"lane": "tenant-x", "settled": 2, "more": False})
    for name in ("pg-slow", "pg-queued"):
        record = wait_shared(client, name, "settled")
        assert (record["outcome"], record["failure_reason"]) == ("failed", "suspended")
    # Duplicates, purge and status.
    assert client.call("POST", f"{SHARED}/jobs", job("pg-ok"))[1]["status"] == "duplicate"
    status, body = client.call("GET", f"{SHARED}/queues")
    assert status == 200
    counts = {item["queue"]: (item["settled"], item["queued"]) for item in body["queues"]}
    assert counts == {"q": (1, 0), "q2": (1, 0), "q3": (2, 0), "q4": (1, 0)}
    assert client.call("POST", f"{SHARED}/queues/empty/purge") == (
        200, {"queue": "empty", "purged": 0})
    # Owner-local routes keep working next to the shared ones.
    assert client.enqueue("owner-next-to-pg", job("local"))[0] == 201
    assert client.settled("owner-next-to-pg", "local")["outcome"] == "completed"


def test_shared_jobs_survive_a_restart(tmp_path: Path, postgres_dsn: str) -> None:
    serve = Serve(tmp_path / "data", "--postgres", postgres_dsn, "--workers", "2",
                  "--poll", "0.2", "--grace", "0.5").start()
    try:
        client = serve.client()
        client.call("POST", f"{SHARED}/jobs", job("pg-long", "slow", payload={"ms": 60_000}))
        wait_shared(client, "pg-long", "running")
        client.call("POST", f"{SHARED}/jobs", job("pg-after", queue="other"))
        # The second worker runs it while the first is busy.
        assert wait_shared(client, "pg-after", "settled")["outcome"] == "completed"
    finally:
        serve.stop()  # the running job is interrupted after --grace
    serve.start()
    try:
        record = shared_job(serve.client(), "pg-long")
        assert record is not None
        assert (record["outcome"], record["failure_reason"]) == (
            "failed", "execution_interrupted")
    finally:
        serve.stop()


def test_a_database_without_the_schema_is_refused(
        tmp_path: Path, postgres_server: PostgresServer) -> None:
    name = unique_database_name("tickwork_host_empty")
    dsn = postgres_server.create_database(name)
    try:
        result = subprocess.run(
            [sys.executable, "-m", "tickwork", "serve", "--data", str(tmp_path / "d"),
             "--port", "0", "--token", "t", "--postgres", dsn], cwd=ROOT,
            capture_output=True, text=True, timeout=60)
    finally:
        postgres_server.drop_database(name)
    assert result.returncode == 1
    assert "PostgreSQL schema" in result.stderr and "listening" not in result.stdout


def test_missing_psycopg_is_explained(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "psycopg_pool.py").write_text(
        "raise ImportError(\"No module named 'psycopg_pool'\")\n")
    result = subprocess.run(
        [sys.executable, "-m", "tickwork", "serve", "--data", str(tmp_path / "d"),
         "--port", "0", "--token", "t", "--postgres", "postgresql://nowhere/db"], cwd=ROOT,
        capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": f"{shadow}:{ROOT}", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 1
    assert "pip install 'psycopg[binary]' psycopg-pool" in result.stderr


def test_an_unreachable_database_is_explained(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tickwork", "serve", "--data", str(tmp_path / "d"),
         "--port", "0", "--token", "t", "--postgres",
         "postgresql://user:hunter2@127.0.0.1:1/db?connect_timeout=2"], cwd=ROOT,
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "cannot connect to PostgreSQL" in result.stderr
    assert "hunter2" not in result.stderr


def test_the_shared_queues_have_gauges_too(shared_serve: Serve) -> None:
    from tests.serve.test_metrics_route import gauges

    client = shared_serve.client()
    assert client.call("POST", "/v1/shared/queues/parked/pause")[0] == 200
    assert client.call("POST", "/v1/shared/jobs", {"jobs": [
        job("p1", queue="parked"), job("p2", queue="parked")]})[0] == 200
    assert client.enqueue("owner", job("o1", queue="parked", delay_ms=600_000))[0] == 201
    time.sleep(0.2)
    found = gauges(shared_serve)
    # One series per queue name: the shared queue's and the owner's summed.
    assert (found[("parked", "ready")], found[("parked", "delayed")],
            found[("parked", "running")]) == (2, 1, 0)
    assert 0.2 <= found[("parked", "age")] < 30
