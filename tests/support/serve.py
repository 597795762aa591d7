"""``tickwork serve`` as a subprocess, and a small synchronous client for its API."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "host-test-token"
EXECUTORS = "tests.support.serve_executors:registry"
_LISTENING = re.compile(r"listening on (http://\S+)")


class Serve:
    """One ``python -m tickwork serve`` process on a free loopback port."""

    def __init__(self, data: Path, *extra: str, token: str | None = TOKEN,
                 executors: str | None = EXECUTORS, env: Mapping[str, str] | None = None,
                 logs: Path | None = None, max_descriptors: int | None = None) -> None:
        self.data = data
        #: The process's RLIMIT_NOFILE (soft and hard), if it is to be lowered.
        self.max_descriptors = max_descriptors
        self.logs = logs or data.parent / f"{data.name}-logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.args = [sys.executable, "-m", "tickwork", "serve", "--data", str(data),
                     "--port", "0", "--grace", "3", *extra]
        if token is not None:
            self.args += ["--token", token]
        if executors is not None:
            self.args += ["--executors", executors]
        environment = {**os.environ, "PYTHONPATH": str(ROOT)}
        environment.pop("TICKWORK_TOKEN", None)
        self.env = {**environment, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.runs = 0

    @property
    def stdout_path(self) -> Path:
        return self.logs / f"stdout-{self.runs}.txt"

    @property
    def stderr_path(self) -> Path:
        return self.logs / f"stderr-{self.runs}.txt"

    def start(self, timeout_s: float = 20.0) -> Serve:
        self.runs += 1
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.process = subprocess.Popen(self.args, cwd=ROOT, env=self.env, stdout=out,
                                            stderr=err, stdin=subprocess.DEVNULL,
                                            preexec_fn=self._limits)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            match = _LISTENING.search(self.stdout())
            if match:
                self.url = match[1]
                return self
            if self.process.poll() is not None:
                raise RuntimeError(f"serve exited with {self.process.returncode}:\n"
                                   f"{self.stderr()}")
            time.sleep(0.02)
        raise RuntimeError(f"serve did not print its URL in time:\n{self.stderr()}")

    def _limits(self) -> None:
        if self.max_descriptors is not None:
            import resource

            resource.setrlimit(resource.RLIMIT_NOFILE,
                               (self.max_descriptors, self.max_descriptors))

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 15.0) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout_s)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def client(self, token: str | None = TOKEN) -> Client:
        return Client(self.url, token)


class Client:
    """A synchronous client of the /v1 API (one connection per call)."""

    def __init__(self, url: str, token: str | None = TOKEN) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        self.host, self.port = parts.hostname, parts.port
        self.token = token

    def call(self, method: str, path: str, body: Any = None, *, raw: bytes | None = None,
             headers: Mapping[str, str] | None = None) -> tuple[int, Any]:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        sent = {"content-type": "application/json"} if data is not None else {}
        if self.token is not None:
            sent["authorization"] = f"Bearer {self.token}"
        sent.update(headers or {})
        connection = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            connection.request(method, path, body=data, headers=sent)
            response = connection.getresponse()
            text = response.read()
        finally:
            connection.close()
        return response.status, json.loads(text) if text else None

    def enqueue(self, owner: str, *jobs: Mapping[str, Any]) -> tuple[int, Any]:
        body = dict(jobs[0]) if len(jobs) == 1 else {"jobs": list(jobs)}
        return self.call("POST", f"{owner_path(owner)}/jobs", body)

    def job(self, owner: str, job_id: str) -> dict[str, Any] | None:
        status, body = self.call("GET", f"{owner_path(owner)}/jobs/{quote(job_id, safe='')}")
        if status == 404:
            return None
        assert status == 200, body
        job: dict[str, Any] = body["job"]
        return job

    def wait_for(self, owner: str, job_id: str, ready: Callable[[dict[str, Any]], bool],
                 timeout_s: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        job = None
        while time.monotonic() < deadline:
            job = self.job(owner, job_id)
            if job is not None and ready(job):
                return job
            time.sleep(0.02)
        raise AssertionError(f"job {job_id!r} of {owner!r} never got there: {job}")

    def settled(self, owner: str, job_id: str, timeout_s: float = 10.0) -> dict[str, Any]:
        return self.wait_for(owner, job_id, lambda job: job["state"] == "settled", timeout_s)

    def running(self, owner: str, job_id: str, timeout_s: float = 10.0) -> dict[str, Any]:
        return self.wait_for(owner, job_id, lambda job: job["state"] == "running", timeout_s)


def owner_path(owner: str) -> str:
    return f"/v1/owners/{quote(owner, safe='')}"


def job(job_id: str, kind: str = "complete", queue: str = "q", **extra: Any) -> dict[str, Any]:
    payload = {"kind": kind, **extra.pop("payload", {})}
    return {"job_id": job_id, "queue": queue, "payload": payload, **extra}


@pytest.fixture
def shared_serve(tmp_path: Path, postgres_dsn: str) -> Iterator[Serve]:
    """``tickwork serve --postgres`` on a fresh database, two local workers."""
    serve = Serve(tmp_path / "data", "--postgres", postgres_dsn, "--workers", "2",
                  "--poll", "0.2").start()
    try:
        yield serve
    finally:
        serve.stop()
