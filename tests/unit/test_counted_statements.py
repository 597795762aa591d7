"""Sqlite3Database counts the rows a write changed (``mutate_count``), and
the owner-local store's hot claim and settlement use that instead of
RETURNING; a SyncDatabase without it gets the RETURNING statements.

Plain sqlite3 (not the harness): the Pyodide tier has no sqlite3 module."""

from __future__ import annotations

import sqlite3

from tests.support import job
from tickwork import Completed, OwnerRuntime
from tickwork.ports.database import CountingDatabase
from tickwork.stores import Sqlite3Database


async def test_a_tick_on_sqlite3_runs_no_returning_and_a_database_without_counts_still_ticks(
        ) -> None:
    """Sqlite3Database counts the rows a write changed, so the hot claim and
    settlement run without RETURNING (the claim reads its row by token); a
    SyncDatabase without ``mutate_count`` gets the RETURNING statements, with
    the same results."""
    class NoWake:
        def recompute(self) -> None:
            pass

    class Plain:
        """A SyncDatabase with no mutate_count."""

        def __init__(self, inner: Sqlite3Database) -> None:
            self.query, self.execute = inner.query, inner.execute
            self.mutate, self.atomic = inner.mutate, inner.atomic

    async def done(job: object, signal: object) -> Completed:
        return Completed()

    for wrap in (lambda database: database, Plain):
        connection = sqlite3.connect(":memory:", isolation_level=None)
        database = wrap(Sqlite3Database(connection))
        assert isinstance(database, CountingDatabase) is (wrap is not Plain)
        runtime = OwnerRuntime(database, execute=done,
                               is_alive=lambda job: False, wake=NoWake())
        runtime.ingest_many([job("a"), job("b", queue="other")])
        statements: list[str] = []
        connection.set_trace_callback(statements.append)
        results = [await runtime.tick(), await runtime.tick()]
        connection.set_trace_callback(None)
        assert [(result.status, result.job_id) for result in results] == [
            ("settled", "a"), ("settled", "b")]
        assert (await runtime.tick()).status == "idle"
        record = runtime.read("a")
        assert record is not None and record.state == "settled"
        assert record.outcome == "completed"
        # Once per store, before its first claim: whether a rate limit's
        # bucket is stored (none is: the claims spend nothing).
        assert "FROM tickwork_rate_limits WHERE starts IS NOT NULL" in statements.pop(0)
        returning = [text for text in statements if "RETURNING" in text]
        # Per tick: a claim and a settlement (plus, counted, the claim's read).
        assert len(statements) == (4 if wrap is Plain else 6), statements
        assert len(returning) == (4 if wrap is Plain else 0), statements
