"""An ingest whose job is stored reports it stored, whatever fails after.

Owner-local without a projector: the insert commits by itself, then the
first insert of a store (and every 100th after it) lists the new rows in a
transaction of its own. Found by fault injection on main: when that listing
transaction failed (its BEGIN, UPDATE, INSERT or COMMIT), ``ingest`` raised
although the job was durable, so no ``ingested`` event and no wake followed,
and the caller's retry answered ``duplicate``, waking nothing either. The
listing is only an index maintenance step (reads include unlisted rows):
its failure is logged and retried at a later insert.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.crash.test_commit_failures import FaultyConnection
from tests.support import ScriptedExecutor, job
from tickwork import OwnerRuntime
from tickwork.stores import Sqlite3Database


class CountingWake:
    def __init__(self) -> None:
        self.calls = 0

    def recompute(self) -> None:
        self.calls += 1


class FailOnce(FaultyConnection):
    """A sqlite3 connection whose first statement starting with ``prefix``
    (after the first insert, once ``watching``) fails, as a broken database's
    would; commit, rollback and the rest pass through (FaultyConnection's)."""

    def __init__(self, real: sqlite3.Connection, prefix: str) -> None:
        super().__init__(real)
        self.prefix = prefix
        self.watching = False  # set once the runtime is built
        self.armed = False

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        text = " ".join(sql.split())
        if self.armed and text.upper().startswith(self.prefix):
            self.armed = False
            self.failed.append(self.prefix)
            raise sqlite3.OperationalError(f"{self.prefix} failed (injected)")
        if self.watching and text.upper().startswith("INSERT INTO TICKWORK_JOBS"):
            self.watching = False
            self.armed = True  # the listing comes right after the first insert
        return self.real.execute(sql, params)


#: The statements of the listing transaction (Sqlite3Database.atomic).
POINTS = ["BEGIN", "UPDATE TICKWORK_JOBS SET LISTED = 1",
          "INSERT OR REPLACE INTO TICKWORK_META", "COMMIT"]


@pytest.mark.parametrize("point", POINTS)
async def test_a_stored_job_is_reported_announced_and_run_when_its_listing_fails(
    tmp_path: Path, point: str, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tickwork.hosts.cpython import open_sqlite3
    from tickwork.stores import index_batching

    monkeypatch.setattr(index_batching, "_listing_failures", [-1e9, 0])  # log the next one
    path = tmp_path / "jobs.sqlite3"

    open_sqlite3(path).connection.close()  # the schema, applied once
    connection = FailOnce(sqlite3.connect(path, isolation_level=None), point)
    events: list[tuple[str, str | None]] = []
    wake = CountingWake()
    executor = ScriptedExecutor()
    runtime = OwnerRuntime(Sqlite3Database(connection), execute=executor,
                           is_alive=lambda record: False, wake=wake,
                           on_event=lambda event: events.append((event.kind, event.job_id)))
    connection.watching = True
    assert runtime.ingest(job("a")) == "queued"
    assert connection.failed == [point]  # the fault did happen, in the listing
    assert ("ingested", "a") in events and wake.calls >= 1
    assert "listing new jobs failed" in caplog.text
    calls = wake.calls
    assert runtime.ingest(job("a")) == "duplicate"
    assert wake.calls > calls  # a replay wakes the host as well
    assert runtime.ingest(job("b")) == "queued"
    results = [await runtime.tick() for _ in range(2)]
    assert [(r.job_id, r.outcome) for r in results] == [("a", "completed"), ("b", "completed")]
    connection.close()
    with sqlite3.connect(path) as fresh:
        rows = fresh.execute("SELECT job_id, state FROM tickwork_jobs ORDER BY sequence")
        assert rows.fetchall() == [("a", "settled"), ("b", "settled")]
    await asyncio.sleep(0)
