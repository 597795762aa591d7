"""Concurrency limits on a shared store: several workers, each draining
several loops over one database, never run more of a queue's or a lane's
jobs at once than its limit allows, and settle every job exactly once.

The limits are set through a runtime's store (the operations that set them
are the lead's). What runs at once is counted by the executor itself
(``RunningCounts``) as each execution starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.support import job
from tests.support.limits import RunningCounts
from tests.support.shared import SharedHarness
from tests.support.stores import shared_harness
from tickwork import Completed, JobRecord
from tickwork.model.limits import ConcurrencyLimit

#: The shared stores whose claims enforce limits on this branch; PostgreSQL
#: joins with one more name once its store has them.
LIMITED_KINDS = ("d1-external", "d1-builtin")


@pytest_asyncio.fixture(params=LIMITED_KINDS)
async def limited(request: pytest.FixtureRequest) -> AsyncIterator[SharedHarness]:
    async with shared_harness(request.param, request) as harness:
        yield harness


def holding_until_full(queues: dict[str, int], lanes: dict[str, int],
                       at_most_s: float = 0.5) -> RunningCounts:
    """An executor whose jobs each stay in flight until as many of their
    queue's (``queues``) and lane's (``lanes``) jobs run as the test expects
    the limit to allow (``at_most_s`` at most: the queue's last jobs wait
    that long): the limit is then reached for sure,
    not by luck of timing, and any claim past it would be counted."""

    async def hold(job: JobRecord, signal: Any) -> Completed:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + at_most_s
        while loop.time() < deadline and (
                counts.queues[job.queue] < queues.get(job.queue, 1)
                or counts.lanes[job.lane] < lanes.get(job.lane, 1)):
            await asyncio.sleep(0.002)
        return Completed()

    counts = RunningCounts(hold)
    return counts


async def test_workers_draining_several_loops_never_run_more_than_a_limit_allows(
        limited: SharedHarness) -> None:
    counts = holding_until_full({"wide": 3}, {"tenant": 2})
    workers = [limited.runtime(execute=counts) for _ in range(3)]
    store = workers[0]._store
    await store.put_limit(ConcurrencyLimit("queue", "wide", 3), None)
    await store.put_limit(ConcurrencyLimit("lane", "tenant", 2), None)
    jobs = [job(f"w{index:02}", queue="wide") for index in range(18)]
    jobs += [job(f"t{index:02}", queue=f"t{index % 6}", lane="tenant") for index in range(12)]
    jobs += [job(f"s{index}", queue="serial") for index in range(5)]
    jobs += [job(f"f{index}", queue=f"free{index}") for index in range(6)]
    await workers[0].ingest_many(jobs)
    drained = await asyncio.gather(*(worker.drain(concurrency=4) for worker in workers))
    settled = sorted(result.job_id or "" for results in drained for result in results)
    assert settled == sorted(item.job_id for item in jobs)
    assert set(counts.starts.values()) == {1}  # each job ran once
    assert set((await limited.job_states()).values()) == {("settled", "completed")}
    assert counts.most_in_queue["wide"] == 3
    assert counts.most_in_lane["tenant"] == 2
    assert counts.most_in_queue["serial"] == 1
    assert max(counts.most_in_queue[f"t{index}"] for index in range(6)) == 1


async def test_a_limit_changed_between_drains_is_obeyed_by_every_worker(
        limited: SharedHarness) -> None:
    counts = holding_until_full({"wide": 4}, {})
    workers = [limited.runtime(execute=counts) for _ in range(2)]
    store = workers[1]._store
    await store.put_limit(ConcurrencyLimit("queue", "wide", 4), None)
    await workers[0].ingest_many([job(f"a{index:02}", queue="wide") for index in range(12)])
    await asyncio.gather(*(worker.drain(concurrency=3) for worker in workers))
    assert counts.most_in_queue["wide"] == 4
    # Lowered: the next drains run the queue one at a time again.
    await store.put_limit(ConcurrencyLimit("queue", "wide", 1), None)
    # Each job waits up to 0.2 s for a second one of wide: a claim that let
    # one run would be counted.
    again = holding_until_full({"wide": 2}, {}, at_most_s=0.2)
    workers = [limited.runtime(execute=again) for _ in range(2)]
    await workers[0].ingest_many([job(f"b{index:02}", queue="wide") for index in range(4)])
    await asyncio.gather(*(worker.drain(concurrency=3) for worker in workers))
    assert again.most_in_queue["wide"] == 1 and sum(again.starts.values()) == 4
