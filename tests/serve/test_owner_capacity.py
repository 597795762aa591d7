"""A bounded set of open owners: idle ones close first, busy ones are kept, and
an owner beyond capacity is refused with 503 + retry-after, never a 500.

Before the bound, a token holder who gave a few hundred owners a running job
each exhausted the process's descriptors (three per owner: the database, its
-wal and -shm); new owners then got 500 ``unable to open database file``
forever, even after every job finished.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.serve import TOKEN, Serve, job, owner_path
from tickwork import Completed, Job, JobRecord
from tickwork.api import ApiError
from tickwork.hosts.cpython import owners as owners_module
from tickwork.hosts.cpython.owners import OwnerDirectory, OwnersAtCapacity, default_max_open_owners


class Gate:
    """An executor whose jobs run until ``open()``."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.started: list[str] = []

    async def __call__(self, job: JobRecord, signal: Any) -> Completed:
        self.started.append(job.job_id)
        await self.event.wait()
        return Completed()


async def _until(predicate: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


async def test_busy_owners_are_kept_and_one_more_is_refused_until_one_is_idle(
    tmp_path: Path,
) -> None:
    gate = Gate()
    store = OwnerDirectory(tmp_path, gate, max_open=2)
    await store.service("a").ingest([Job("a1", "q", "q", 0, None)])
    await store.service("b").ingest([Job("b1", "q", "q", 0, None)])
    await _until(lambda: len(gate.started) == 2)
    with pytest.raises(OwnersAtCapacity) as refused:
        await store.service("c").ingest([Job("c1", "q", "q", 0, None)])
    assert isinstance(refused.value, ApiError)
    assert (refused.value.status, refused.value.headers) == (503, {"retry-after": "1"})
    assert not (tmp_path / "owners" / owners_module.owner_file_name("c")).exists()
    # An owner without a file is still read (it holds nothing): no descriptor needed.
    assert await store.service("c").read("c1") is None
    gate.event.set()  # the jobs finish; their owners go idle
    await _until(lambda: store.running_loops() == 0)
    assert await store.service("c").ingest([Job("c1", "q", "q", 0, None)]) == ["queued"]
    assert len(store._open) <= 2
    await _until(lambda: store.running_loops() == 0)
    record = await store.service("a").read("a1")  # reopened on demand
    assert record is not None and record.outcome == "completed"
    await store.close(1.0)


async def test_owners_with_work_beyond_capacity_at_start_up_run_when_room_frees(
    tmp_path: Path,
) -> None:
    # Five owners each with a queued job, written while nothing ran them.
    for key in "abcde":
        path = tmp_path / "owners" / owners_module.owner_file_name(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        seeding = OwnerDirectory(tmp_path, Gate(), max_open=1)
        seeding._stopping = True  # no tick loops: the job stays queued
        await seeding.service(key).ingest([Job("x", "q", "q", 0, None)])
        await seeding.close(0.0)
    gate = Gate()
    gate.event.set()
    store = OwnerDirectory(tmp_path, gate, max_open=2)
    store.recover()
    await _until(lambda: sorted(gate.started) == ["x"] * 5)
    await _until(lambda: store.running_loops() == 0)
    for key in "abcde":
        connection = sqlite3.connect(tmp_path / "owners" / owners_module.owner_file_name(key))
        assert connection.execute("SELECT state FROM tickwork_jobs").fetchall() == [("settled",)]
        connection.close()
    await store.close(1.0)


async def test_running_out_of_descriptors_is_a_503_too(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    store = OwnerDirectory(tmp_path, Gate(), max_open=10)

    def no_descriptors(path: Path) -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(owners_module, "connect_owner_database", no_descriptors)
    monkeypatch.setattr(owners_module, "_out_of_descriptors", lambda: True)
    with pytest.raises(OwnersAtCapacity, match="out of file descriptors"):
        await store.service("a").ingest([Job("a1", "q", "q", 0, None)])
    # Any other failure to open stays what it is.
    monkeypatch.setattr(owners_module, "_out_of_descriptors", lambda: False)
    with pytest.raises(sqlite3.OperationalError):
        await store.service("a").ingest([Job("a1", "q", "q", 0, None)])
    await store.close(1.0)


def test_the_default_bound_follows_the_descriptor_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    import resource

    for soft, expected in ((1024, 256), (200, 24), (130, 1), (resource.RLIM_INFINITY, 256)):
        monkeypatch.setattr(resource, "getrlimit", lambda _which, soft=soft: (soft, soft))
        assert default_max_open_owners() == expected


def _post(url_port: int, owner: str, body: dict[str, Any]) -> tuple[int, dict[str, str], Any]:
    connection = http.client.HTTPConnection("127.0.0.1", url_port, timeout=10)
    try:
        connection.request("POST", f"{owner_path(owner)}/jobs", body=json.dumps(body),
                           headers={"authorization": f"Bearer {TOKEN}",
                                    "content-type": "application/json"})
        response = connection.getresponse()
        text = response.read()
        return response.status, dict(response.getheaders()), json.loads(text)
    finally:
        connection.close()


def test_serve_under_a_low_descriptor_limit_refuses_with_503_and_recovers(
    tmp_path: Path,
) -> None:
    # 200 descriptors: room for (200 - 128) // 3 = 24 open owners; 70 owners with
    # a running job each would need about 210 (the old host answered 500 there).
    serve = Serve(tmp_path / "data", max_descriptors=200).start()
    try:
        port = int(serve.url.rsplit(":", 1)[1])
        answers = [_post(port, f"tenant-{n}", job("long", "slow", payload={"ms": 2_000}))
                   for n in range(70)]
        statuses = [status for status, _, _ in answers]
        assert 500 not in statuses
        assert statuses.count(201) == 24 and statuses.count(503) == 46, statuses
        refused = next(answer for answer in answers if answer[0] == 503)
        assert refused[1]["retry-after"] == "1"
        assert refused[2]["error"]["code"] == "owners_at_capacity"
        # The jobs finish, their owners go idle, and new owners get in by themselves.
        client = serve.client()
        client.wait_for("tenant-0", "long", lambda record: record["state"] == "settled",
                        timeout_s=20)
        deadline = time.monotonic() + 20
        late = [n for n in range(70) if answers[n][0] == 503]
        while late and time.monotonic() < deadline:
            status, _, _ = _post(port, f"tenant-{late[0]}", job("late", "complete"))
            assert status in (201, 503)
            if status == 201:
                late.pop(0)
            else:
                time.sleep(0.2)
        assert late == []
        assert "internal error" not in serve.stderr()
    finally:
        assert serve.stop() == 0
