"""bench.postgres_raw_batches' raw loops keep the promises their rows claim,
on a real PostgreSQL server: every job run once, settlements fenced on
their claim's token, and queues serial (a collision is run again, not lost)."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from bench.postgres_baselines import measure
from bench.postgres_raw_batches import NARROW_STEP, TICKWORK_TABLE_STEP, BatchedRawLoop
from tests.support.pg.server import PostgresCluster, fresh_database

SCHEMAS = ("tickwork", "function", "narrow")
RAW_STATEMENTS = {"tickwork": TICKWORK_TABLE_STEP, "narrow": NARROW_STEP}


@pytest.mark.parametrize("schema", SCHEMAS)
def test_every_job_runs_once_with_a_queue_per_job(postgres_server: PostgresCluster,
                                                  schema: str) -> None:
    result = measure(postgres_server, lambda: BatchedRawLoop(schema), workers=3, jobs=300)
    assert (result.executed, result.distinct) == (300, 300)


@pytest.mark.parametrize("schema", SCHEMAS)
def test_jobs_sharing_queues_collide_are_claimed_again_and_all_run_once(
        postgres_server: PostgresCluster, schema: str) -> None:
    contenders: list[BatchedRawLoop] = []

    def factory() -> BatchedRawLoop:
        contenders.append(BatchedRawLoop(schema, queues=3))
        return contenders[-1]

    result = measure(postgres_server, factory, workers=3, jobs=120)
    assert (result.executed, result.distinct) == (120, 120)
    if schema == "function":
        # tickwork's claim locks each queue and claims only its head.
        assert contenders[0].collisions == 0
    else:
        # A batch of 10 from 3 queues holds two jobs of one queue: its claim
        # fails on the queue-serial key and runs again with a batch of one.
        assert contenders[0].collisions > 0


@pytest.mark.parametrize("schema", sorted(RAW_STATEMENTS))
def test_a_settlement_under_a_stale_token_settles_nothing(
        postgres_server: PostgresCluster, schema: str) -> None:
    step = RAW_STATEMENTS[schema]
    contender = BatchedRawLoop(schema)
    with fresh_database(postgres_server, prefix="rawbatch") as dsn:
        asyncio.run(contender.prepare(dsn, 1))
        with psycopg.connect(dsn, autocommit=True) as connection:
            rows = connection.execute(step, {"sequences": [], "queues": [], "tokens": [],
                                             "limit": 10}).fetchall()
            claims = [row for row in rows if row[1] is not None]
            assert len(claims) == 1
            _, sequence, queue, token, _ = claims[0]
            rows = connection.execute(step, {"sequences": [sequence], "queues": [queue],
                                             "tokens": [token + "-stale"],
                                             "limit": 10}).fetchall()
            assert [row[0] for row in rows if row[1] is None] == [0]
            assert [row for row in rows if row[1] is not None] == []  # the queue is still busy
            rows = connection.execute(step, {"sequences": [sequence], "queues": [queue],
                                             "tokens": [token], "limit": 10}).fetchall()
            assert [row[0] for row in rows if row[1] is None] == [1]
