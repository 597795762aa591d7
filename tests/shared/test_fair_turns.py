"""Fair turns on D1 with several workers, each draining several loops over
one database: every claim in a wide queue takes its lanes in turns, and
every job settles exactly once.

The claims are recorded in the database itself, in the order D1 ran them
(a test-only trigger on the claim's write: each claim is one statement, and
D1 runs one statement at a time), so the order checked is the claims' own,
not the order the executors happened to be scheduled in.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from itertools import pairwise

import pytest
import pytest_asyncio

from tests.support import job
from tests.support.limits import RunningCounts
from tests.support.shared import SharedHarness
from tests.support.stores import shared_harness
from tickwork.model.limits import ConcurrencyLimit

#: The shared stores whose claims take turns on this branch; PostgreSQL
#: joins with one more name once its store does.
FAIR_KINDS = ("d1-external", "d1-builtin")

#: Every claim, in the order D1 ran them: a claim is the only statement that
#: sets started_at to a time (D1's 0014 and 0015 triggers say the same).
RECORD_CLAIMS = ("CREATE TABLE test_claims (n INTEGER PRIMARY KEY AUTOINCREMENT,"
                 " job_id TEXT, queue TEXT, lane TEXT)",
                 "CREATE TRIGGER test_claims_record AFTER UPDATE OF started_at ON tickwork_jobs"
                 " FOR EACH ROW WHEN NEW.started_at IS NOT NULL"
                 " BEGIN INSERT INTO test_claims (job_id, queue, lane)"
                 " VALUES (NEW.job_id, NEW.queue, NEW.lane); END")


@pytest_asyncio.fixture(params=FAIR_KINDS)
async def fair(request: pytest.FixtureRequest) -> AsyncIterator[SharedHarness]:
    async with shared_harness(request.param, request) as harness:
        for statement in RECORD_CLAIMS:
            await harness.query(statement)
        yield harness


def turns_broken(claims: list[tuple[str, str]]) -> list[str]:
    """Where ``claims`` ((job_id, lane), in claim order, of one wide queue
    whose jobs were all ready before the first) break the rule: a lane
    claimed twice while another lane with a ready job all along (one
    claimed after both) was not claimed in between."""
    positions: dict[str, list[int]] = defaultdict(list)
    for position, (_, lane) in enumerate(claims):
        positions[lane].append(position)
    broken = []
    for lane, taken in positions.items():
        for first, second in pairwise(taken):
            for other, other_taken in positions.items():
                waited = other != lane and other_taken[-1] > second
                if waited and not any(first < at < second for at in other_taken):
                    broken.append(f"{lane} at {first} and {second} while {other} waited")
    return broken


def test_the_check_finds_a_lane_that_took_two_turns() -> None:
    fair_order = [("a0", "A"), ("b0", "B"), ("a1", "A"), ("b1", "B"), ("a2", "A")]
    assert turns_broken(fair_order) == []
    assert turns_broken([("a0", "A"), ("a1", "A"), ("b0", "B")]) == [
        "A at 0 and 1 while B waited"]


async def test_workers_draining_several_loops_take_a_wide_queues_lanes_in_turns(
        fair: SharedHarness) -> None:
    counts = RunningCounts(fair.executor)
    workers = [fair.runtime(execute=counts) for _ in range(3)]
    await workers[0]._store.put_limit(ConcurrencyLimit("queue", "wide", 3), None)
    sizes = {"big": 30, "mid": 10, **{f"small-{index}": 1 for index in range(5)}}
    jobs = [job(f"{lane}-{number:02}", queue="wide", lane=lane)
            for lane, size in sizes.items() for number in range(size)]
    jobs += [job(f"serial-{number}", queue="serial", lane="big") for number in range(4)]
    for first in range(0, len(jobs), 25):
        await workers[0].ingest_many(jobs[first:first + 25])
    drained = await asyncio.gather(*(worker.drain(concurrency=3) for worker in workers))
    settled = sorted(result.job_id or "" for results in drained for result in results)
    assert settled == sorted(item.job_id for item in jobs)
    assert set(counts.starts.values()) == {1}  # each job ran once
    assert set((await fair.job_states()).values()) == {("settled", "completed")}
    assert counts.most_in_queue["wide"] <= 3 and counts.most_in_queue["serial"] == 1
    claims = [(row[0], row[1]) for row in await fair.query(
        "SELECT job_id, lane FROM test_claims WHERE queue = 'wide' ORDER BY n")]
    assert sorted(job_id for job_id, _ in claims) == sorted(
        item.job_id for item in jobs if item.queue == "wide")
    assert turns_broken(claims) == []
    # Within a lane, age order (one priority here).
    for lane in sizes:
        mine = [job_id for job_id, of in claims if of == lane]
        assert mine == sorted(mine)
    assert await fair.query("SELECT count(*) FROM tickwork_turns") == [(0,)]
