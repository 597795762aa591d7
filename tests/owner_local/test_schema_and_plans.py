"""The owner-local schema: created by the runtime itself, and the plans it gives."""

from __future__ import annotations

import pytest

from tests.support import Harness, job
from tickwork import SchemaError
from tickwork.stores.sql import sqlite as sql


def test_runtime_construction_is_idempotent_and_keeps_data(harness: Harness) -> None:
    harness.runtime().ingest(job("a"))
    harness.open()
    rebuilt = harness.runtime()
    assert rebuilt.read("a") is not None
    assert rebuilt.ingest(job("a")) == "duplicate"


def test_queue_status_reads_indexes_only(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest_many([job(f"j{n}", queue=f"q{n % 3}") for n in range(30)])
    text = sql.QUEUE_STATUS.render(sql.OWNER_LOCAL).text
    plan = [row[-1] for row in harness.host_query("EXPLAIN QUERY PLAN " + text, ("q1",))]
    searches = [line for line in plan if "tickwork_jobs" in line]
    assert len(searches) == 3, plan
    assert all(line.startswith("SEARCH tickwork_jobs USING") for line in searches), plan
    used = " ".join(searches)
    for index in ("queue_waiting", "running", "queue_settled"):
        assert f"tickwork_jobs_{index} (queue=?)" in used, plan
    assert not any(line.startswith("SCAN") for line in plan), plan


def test_a_schema_newer_than_the_package_is_refused(harness: Harness) -> None:
    harness.runtime().ingest(job("a"))
    harness.host_transaction(lambda: harness.host_execute(
        "UPDATE tickwork_meta SET value = '99' WHERE key = 'schema_version'"))
    harness.open()
    with pytest.raises(SchemaError, match="schema version 99"):
        harness.runtime()
