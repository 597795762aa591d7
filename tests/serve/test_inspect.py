"""``tickwork inspect`` against a live ``tickwork serve``."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading

import pytest

from tests.support.serve import ROOT, TOKEN, Serve, job, owner_path
from tickwork.__main__ import main


def inspect(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["inspect", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_queue_table(server: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    client = server.client()
    client.enqueue("inspected", job("i-1"), job("i-2", "fail", queue="billing"),
                   job("i-3", "fail", queue="billing"))
    for name in ("i-1", "i-2", "i-3"):
        client.settled("inspected", name)
    code, out, err = inspect(capsys, "--url", server.url, "--token", TOKEN,
                             "--owner", "inspected")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"owner 'inspected' at {server.url}"
    assert lines[2].split() == ["queue", "queued", "delayed", "running", "settled", "completed",
                                "failed", "cancelled", "unknown", "interrupted"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[4:]}
    assert rows == {"billing": ["0", "0", "0", "2", "0", "2", "0", "0", "0"],
                    "q": ["0", "0", "0", "1", "1", "0", "0", "0", "0"],
                    "(total)": ["0", "0", "0", "3", "1", "2", "0", "0", "0"]}


def test_one_job_and_one_queue(server: Serve, capsys: pytest.CaptureFixture[str],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    client = server.client()
    client.enqueue("inspect job", job("j/1", "fail", payload={"reason": "card_declined"},
                                      priority=5, recovery={"max_recoveries": 2}))
    client.settled("inspect job", "j/1")
    monkeypatch.setenv("TICKWORK_TOKEN", TOKEN)  # the token from the environment
    monkeypatch.setenv("TICKWORK_URL", server.url)
    code, out, _ = inspect(capsys, "--owner", "inspect job", "--job", "j/1")
    assert code == 0
    fields = dict(line.split(None, 1) for line in out.splitlines())
    assert fields["job"] == "j/1"
    assert fields["state"] == "settled: failed (card_declined)"
    assert fields["priority"] == "5"
    assert fields["recoveries"] == "0 (max 2)"
    assert fields["payload"] == '{"kind": "fail", "reason": "card_declined"}'
    assert fields["settled"].endswith("s)") and "UTC" in fields["settled"]
    code, out, _ = inspect(capsys, "--owner", "inspect job", "--queue", "q")
    assert code == 0 and out.rstrip().endswith("head: none")


def test_errors_are_explained(server: Serve, capsys: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TICKWORK_TOKEN", raising=False)
    code, _, err = inspect(capsys, "--url", server.url, "--token", "wrong", "--owner", "x")
    assert code == 3 and "401 unauthorized" in err and "--token" in err  # auth: 3
    code, _, err = inspect(capsys, "--url", server.url, "--token", TOKEN, "--owner", "x",
                           "--job", "nope")
    assert code == 1 and "404 job_not_found: no job 'nope'" in err
    code, _, err = inspect(capsys, "--url", server.url, "--token", TOKEN, "--shared")
    assert code == 1 and "no shared queues configured" in err
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    code, _, err = inspect(capsys, "--url", f"http://127.0.0.1:{port}", "--token", TOKEN,
                           "--owner", "x")
    assert code == 3 and "cannot connect" in err and "connection refused" in err
    code, _, err = inspect(capsys, "--url", server.url, "--owner", "x")
    assert code == 2 and "no token" in err
    code, _, err = inspect(capsys, "--url", "ftp://example.com", "--token", TOKEN,
                           "--owner", "x")
    assert code == 2 and "invalid URL" in err  # usage: nothing was sent


def test_empty_scope(server: Serve, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = inspect(capsys, "--url", server.url, "--token", TOKEN, "--owner", "empty")
    assert code == 0 and out.rstrip().endswith("no jobs")


def _stderr(process: subprocess.Popen[str]) -> str:
    """What the exited ``process`` wrote to stderr (its stdout has a reader of its own)."""
    assert process.stderr is not None
    return process.stderr.read()


def test_watch_prints_again_until_interrupted(server: Serve) -> None:
    server.client().enqueue("watched", job("w"))
    # A suite started as a background job (`cmd &` without job control) has
    # SIGINT ignored, and a child inherits that: its Ctrl-C would do nothing.
    # While this process handles SIGINT, the child starts with the default
    # (a handler does not survive exec), as one started from a terminal does.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        # -X faulthandler: if Ctrl-C does not stop it, SIGABRT makes it print
        # every thread's stack, so a failure says where it was stuck.
        process = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-m", "tickwork", "inspect", "--url",
             server.url, "--token", TOKEN, "--owner", "watched", "--watch", "0.1"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    finally:
        signal.signal(signal.SIGINT, previous)
    # Ctrl-C once it has printed twice, not after a fixed time: on a busy
    # machine the child can still be importing a second after it started.
    lines: list[str] = []
    printed_twice = threading.Event()

    def read_screens() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line)
            if sum("owner 'watched'" in seen for seen in lines) >= 2:
                printed_twice.set()

    reader = threading.Thread(target=read_screens, daemon=True)
    reader.start()
    if not printed_twice.wait(60):
        process.kill()
        pytest.fail(f"not two screens within 60 s; it printed:\n{''.join(lines)}")
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGABRT)
        process.wait(timeout=10)
        pytest.fail(f"still running 20 s after Ctrl-C; its threads:\n{_stderr(process)}")
    reader.join(10)
    err = _stderr(process)
    out = "".join(lines)
    assert process.returncode == 0, err
    assert out.count("owner 'watched'") >= 2
    assert "every 0.1 s" in out


def test_delayed_jobs_and_paused_queues_show(server: Serve,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    client = server.client()
    later = {**job("later-1"), "delay_ms": 86_400_000}
    client.enqueue("inspect later", later)
    status, body = client.call(
        "POST", f"{owner_path('inspect later')}/queues/held/pause", {})
    assert (status, body) == (200, {"queue": "held", "paused": True, "changed": True}), body
    code, out, _ = inspect(capsys, "--url", server.url, "--token", TOKEN,
                           "--owner", "inspect later")
    assert code == 0
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[4:]}
    assert rows["q"][:3] == ["0", "1", "0"], out  # queued, delayed, running
    assert rows["held"][0] == "(paused)"
    code, out, _ = inspect(capsys, "--url", server.url, "--token", TOKEN,
                           "--owner", "inspect later", "--job", "later-1")
    fields = dict(line.split(None, 1) for line in out.splitlines())
    assert fields["due"].startswith("86400 s after it was stored (waits until ")


def test_a_retried_job_shows_its_attempts(server: Serve,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    client = server.client()
    failing = {"job_id": "flaky-1", "queue": "flaky",
               "payload": {"kind": "no-such-kind"},  # fails: no_executor
               "retry": {"attempts": 2, "base_delay_ms": 0}}
    client.enqueue("inspect retries", failing)
    client.settled("inspect retries", "flaky-1")
    code, out, _ = inspect(capsys, "--url", server.url, "--token", TOKEN,
                           "--owner", "inspect retries", "--job", "flaky-1")
    assert code == 0
    fields = dict(line.split("  ", 1) for line in out.splitlines())
    assert fields["attempt"].strip() == "2 of 2", out
    assert fields["attempt 1"].strip().startswith("failed (no_executor) at "), out


def test_a_job_whose_executor_raised_shows_its_error(server: Serve,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    client = server.client()
    raising = {"job_id": "raise-1", "queue": "raising", "payload": {"kind": "raise"},
               "retry": {"attempts": 2, "base_delay_ms": 0}}
    client.enqueue("inspect errors", raising)
    client.settled("inspect errors", "raise-1")
    code, out, _ = inspect(capsys, "--url", server.url, "--token", TOKEN,
                           "--owner", "inspect errors", "--job", "raise-1")
    assert code == 0
    table, _, traceback = out.partition("\ntraceback\n")
    fields = dict(line.split("  ", 1) for line in table.splitlines())
    assert fields["state"].strip() == "settled: failed (execution_failed)", out
    assert fields["error"].strip() == "RuntimeError: the test executor raised", out
    assert fields["attempt 1"].strip().endswith(
        ", raised RuntimeError: the test executor raised"), out
    lines = traceback.rstrip("\n").split("\n")
    assert lines[0] == "  Traceback (most recent call last):", out
    assert lines[-1] == "  RuntimeError: the test executor raised", out
