"""Concurrency limits on PostgreSQL: the store's four limit methods, held to
the port's contract, and the claims enforcing limits on a real server.

The contract tests are written against ``SharedStoreUnderTest`` like those
of tests/contract, on PostgreSQL only here (D1's limits come from another
branch); they can move into the shared contract suite as they are.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest_asyncio

from tests.contract.stores import COMPLETED, T0, valid_job
from tests.contract.under_test import SharedStoreUnderTest
from tests.support.pg.fixtures import Pool, open_pool
from tests.support.shared import pool_query
from tickwork.model.limits import ConcurrencyLimit
from tickwork.stores.postgres.store import PostgresStore

LEASE = 30_000


@pytest_asyncio.fixture
async def pool(postgres_dsn: str) -> AsyncIterator[Pool]:
    async with open_pool(postgres_dsn, max_size=12) as opened:
        yield opened


@pytest_asyncio.fixture
async def shared_store(pool: Pool) -> SharedStoreUnderTest:
    return SharedStoreUnderTest("postgres", PostgresStore(pool), pool_query(pool))


# ------------------------------------------------- the store's limit methods


async def test_put_read_and_delete_limits(shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.limits() == []
    assert await store.put_limit(ConcurrencyLimit("lane", "tenant-b", 2), T0) is True
    assert await store.put_limit(ConcurrencyLimit("queue", "zeta", 5), T0 + 1) is True
    assert await store.put_limit(ConcurrencyLimit("queue", "alpha", 3), T0 + 2) is True
    assert await store.put_limit(ConcurrencyLimit("lane", "Tenant-A", 1), T0 + 3) is True
    # The same max_running again writes nothing, updated_at included.
    assert await store.put_limit(ConcurrencyLimit("queue", "zeta", 5), T0 + 4) is False
    # A queue and a lane of the same name are two limits.
    assert await store.put_limit(ConcurrencyLimit("lane", "zeta", 7), T0 + 5) is True
    # Queues first, then lanes, each by key in code point order ("T" < "t" < "z").
    assert await store.limits() == [
        ConcurrencyLimit("queue", "alpha", 3, T0 + 2),
        ConcurrencyLimit("queue", "zeta", 5, T0 + 1),
        ConcurrencyLimit("lane", "Tenant-A", 1, T0 + 3),
        ConcurrencyLimit("lane", "tenant-b", 2, T0),
        ConcurrencyLimit("lane", "zeta", 7, T0 + 5)]
    # A changed limit replaces the stored one.
    assert await store.put_limit(ConcurrencyLimit("queue", "zeta", 6), T0 + 6) is True
    assert await shared_store.rows(
        "SELECT kind, key, max_running, updated_at FROM tickwork_limits "
        "WHERE key = 'zeta' ORDER BY kind") == [
        ("lane", "zeta", 7, T0 + 5), ("queue", "zeta", 6, T0 + 6)]
    assert await store.delete_limit("queue", "zeta") is True
    assert await store.delete_limit("queue", "zeta") is False
    assert await store.delete_limit("lane", "alpha") is False  # only a queue limit there
    assert [(limit.kind, limit.key) for limit in await store.limits()] == [
        ("queue", "alpha"), ("lane", "Tenant-A"), ("lane", "tenant-b"), ("lane", "zeta")]
    # Without a test clock, database time stamps it.
    before = int(time.time() * 1000)
    assert await store.put_limit(ConcurrencyLimit("queue", "now", 2), None) is True
    (updated_at,), = await shared_store.rows(
        "SELECT updated_at FROM tickwork_limits WHERE key = 'now'")
    assert before - 5_000 <= updated_at <= int(time.time() * 1000) + 5_000


async def test_the_table_refuses_what_the_model_refuses(
        shared_store: SharedStoreUnderTest) -> None:
    # The CHECKs are the last word for rows written by other tools.
    for values in ("'queue', 'q', 0, 1", "'queue', 'q', 10001, 1", "'tenant', 'q', 1, 1"):
        try:
            await shared_store.rows(f"INSERT INTO tickwork_limits VALUES ({values})")
        except Exception as error:  # psycopg.errors.CheckViolation
            assert getattr(error, "sqlstate", None) == "23514", error
        else:
            raise AssertionError(f"stored ({values})")
    await shared_store.rows("INSERT INTO tickwork_limits VALUES ('lane', 'l', 10000, 1)")


async def test_running_jobs_names_a_queues_or_lanes_running_jobs_oldest_start_first(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    # Started in the order s1, w1, w2, w3 (by started_at, not by sequence);
    # marked running directly, so this reads whatever the claims allow.
    for job_id, queue, lane, started_at in (
            ("w3", "wide", "acme", T0 + 13), ("w1", "wide", "acme", T0 + 11),
            ("w2", "wide", "beta", T0 + 12), ("s1", "serial", "acme", T0 + 10),
            ("s2", "serial", "acme", None)):
        assert await store.insert(valid_job(job_id, queue, lane=lane), T0)
        if started_at is not None:
            await shared_store.rows(
                f"UPDATE tickwork_jobs SET state = 'running', claim_token = 't-{job_id}', "
                f"started_at = {started_at}, lease_expires_at = {started_at + LEASE} "
                f"WHERE job_id = '{job_id}'")
    assert await store.running_jobs("queue", "wide", 10) == ["w1", "w2", "w3"]
    assert await store.running_jobs("queue", "wide", 2) == ["w1", "w2"]
    assert await store.running_jobs("queue", "serial", 10) == ["s1"]
    assert await store.running_jobs("lane", "acme", 10) == ["s1", "w1", "w3"]
    assert await store.running_jobs("lane", "beta", 10) == ["w2"]
    # A lane is not a queue, nor a queue a lane; unknown keys run nothing.
    assert await store.running_jobs("queue", "acme", 10) == []
    assert await store.running_jobs("lane", "wide", 10) == []
    # A settled job no longer runs.
    (w1,), = await shared_store.rows("SELECT sequence FROM tickwork_jobs WHERE job_id = 'w1'")
    assert await store.settle(w1, "t-w1", COMPLETED, T0 + 20, cancelled=False)
    assert await store.running_jobs("queue", "wide", 10) == ["w2", "w3"]
    assert await store.running_jobs("lane", "acme", 10) == ["s1", "w3"]
