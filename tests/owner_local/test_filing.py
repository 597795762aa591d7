"""Index entries written in batches (owner-local schemas 0009 and 0010).

The store inserts each job unlisted (out of the indexes of unsettled jobs by
queue and by lane) and lists them all every LIST_EVERY inserts; a drain
leaves each settlement unfiled (out of the history indexes, still in the
indexes of unsettled jobs) and files them all every FILE_EVERY, in the commit
of a settlement. What every read returns must not depend on whether a row is
listed or filed yet, and the unlisted and unfiled rows must stay few.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import Harness, job
from tickwork import OwnerRuntime
from tickwork.stores import owner_local as owner_local_store
from tickwork.stores.index_batching import FILE_EVERY, LIST_EVERY
from tickwork.stores.owner_local import OwnerLocalStore

ACTIONS = ("complete", "fail", "unknown", "cancel", "complete", "raise")
QUEUES = ("q0", "q1", "q2")
LANES = ("l0", "l1")


def _unfiled(harness: Harness) -> list[str]:
    return [str(row[0]) for row in harness.host_query(
        "SELECT job_id FROM tickwork_jobs WHERE filed = 0 AND state = 'settled'"
        " ORDER BY sequence")]


def _unlisted(harness: Harness) -> list[str]:
    return [str(row[0]) for row in harness.host_query(
        "SELECT job_id FROM tickwork_jobs WHERE listed = 0 ORDER BY sequence")]


def _every_page(runtime: OwnerRuntime, **listing: Any) -> list[list[str]]:
    """Every page of a listing, 7 jobs a page: the pages cross from unfiled
    settlements to filed ones."""
    pages: list[list[str]] = []
    cursor = None
    while True:
        page = runtime.list_jobs(**listing, limit=7, cursor=cursor)
        pages.append([record.job_id for record in page.jobs])
        if page.cursor is None:
            return pages
        cursor = page.cursor


def _reads(runtime: OwnerRuntime) -> list[Any]:
    """What every read of settled history and of unsettled jobs returns."""
    seen: list[Any] = [runtime.status()]
    for queue in QUEUES:
        seen.append(runtime.queue_status(queue))
        cursor, dead = None, []
        while True:
            letters = runtime.dead_letters(queue, limit=7, cursor=cursor)
            dead.append([record.job_id for record in letters.jobs])
            if letters.cursor is None:
                break
            cursor = letters.cursor
        seen.append(dead)
        seen.append(runtime.transactional.read_latest_settled_job(queue))
    for order in ("newest", "oldest"):
        for queue in QUEUES:
            for state in ("queued", "running", "settled"):
                seen.append(_every_page(runtime, queue=queue, state=state, order=order))
            for outcome in ("completed", "failed", "outcome_unknown", "cancelled"):
                seen.append(_every_page(runtime, queue=queue, state="settled",
                                        outcome=outcome, order=order))
        for lane in LANES:
            for state in ("queued", "settled"):
                seen.append(_every_page(runtime, lane=lane, state=state, order=order))
            seen.append(_every_page(runtime, lane=lane, state="settled", outcome="failed",
                                    order=order))
    return seen


async def test_every_read_is_the_same_before_and_after_listing_and_filing(
        harness: Harness) -> None:
    runtime = harness.runtime()
    count = FILE_EVERY + 57
    for n in range(count):
        runtime.ingest(job(f"j{n}", queue=QUEUES[n % 3], lane=LANES[n % 2],
                           payload={"do": ACTIONS[n % len(ACTIONS)]}))
    # Jobs that stay queued: waiting for their time.
    runtime.ingest_many([job(f"later{n}", queue=QUEUES[n % 3], lane=LANES[n % 2],
                             delay_ms=3_600_000) for n in range(5)])
    assert len(await runtime.drain()) == count
    # The first step filed (a runtime's first does), then the 100th settlement
    # after it filed the 100 before it, with itself: 56 are left unfiled.
    unfiled = _unfiled(harness)
    assert unfiled == [f"j{n}" for n in range(FILE_EVERY + 1, count)]
    # The first insert listed (a store's first does), then the 100th after it
    # listed itself and the 99 before it: the last 56 jobs and the 5 waiting
    # ones are not listed yet.
    unlisted = _unlisted(harness)
    assert unlisted == [f"j{n}" for n in range(LIST_EVERY + 1, count)] + [
        f"later{n}" for n in range(5)]
    before = _reads(runtime)
    assert any(page for page in before if isinstance(page, list))  # the reads see jobs
    store = OwnerLocalStore(harness.database())
    store.list_new_rows()
    assert _unlisted(harness) == [] and _unfiled(harness) == unfiled
    assert _reads(runtime) == before
    store.file_settled()
    assert _unfiled(harness) == []
    assert _reads(runtime) == before


async def test_a_runtime_files_what_the_one_before_it_left_unfiled(harness: Harness) -> None:
    first = harness.runtime()
    first.ingest_many([job(f"a{n}") for n in range(30)])
    assert len(await first.drain()) == 30
    assert _unfiled(harness) == [f"a{n}" for n in range(1, 30)]
    # The process ends; a new runtime's first drain step files what it left.
    harness.open()
    second = harness.runtime()
    second.ingest_many([job("b0"), job("b1")])
    assert len(await second.drain()) == 2
    assert _unfiled(harness) == ["b1"]


async def test_drains_keep_at_most_file_every_settlements_unfiled(harness: Harness) -> None:
    runtime = harness.runtime()
    counts = []
    for batch in range(6):
        runtime.ingest_many([job(f"b{batch}-{n}", queue=QUEUES[n % 3]) for n in range(45)])
        await runtime.drain()
        counts.append(len(_unfiled(harness)))
    # Drains add up: a drain's settlements count toward the next one's filing.
    assert counts == [44, 89, 34, 79, 24, 69]
    assert max(counts) <= FILE_EVERY


async def test_an_unfiled_dead_letter_is_redriven_out_of_history(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest_many([job("first"), job("dead", payload={"do": "fail"}), job("after")])
    await runtime.drain()
    assert _unfiled(harness) == ["dead", "after"]  # "first" was filed by the first step
    assert [record.job_id for record in runtime.dead_letters("q").jobs] == ["dead"]
    assert runtime.redrive("dead", "redrive-1").status == "redriven"
    # Queued again: not filed, listed with the queued jobs, out of the dead letters.
    assert harness.host_query(
        "SELECT state, filed FROM tickwork_jobs WHERE job_id = 'dead'") == [("queued", 0)]
    assert [record.job_id for record in runtime.list_jobs("q").jobs] == ["dead"]
    assert runtime.dead_letters("q").jobs == []
    assert [record.job_id for record in runtime.list_jobs("q", state="settled").jobs] == [
        "after", "first"]


def test_only_a_settled_row_can_be_filed(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest(job("waiting"))
    with pytest.raises(Exception, match="CHECK constraint failed"):
        harness.host_transaction(lambda: harness.host_execute(
            "UPDATE tickwork_jobs SET filed = 1 WHERE job_id = 'waiting'"))


def test_a_lane_fails_and_reads_its_jobs_whether_listed_or_not(harness: Harness) -> None:
    runtime = harness.runtime()
    store = OwnerLocalStore(harness.database())
    runtime.ingest_many([job(f"a{n}", queue=f"q{n}", lane="doomed") for n in range(5)])
    runtime.ingest(job("other", lane="kept"))
    assert _unlisted(harness) == ["a1", "a2", "a3", "a4", "other"]  # the first was listed
    assert store.lane_has_pending("doomed")
    queued = runtime.list_jobs(lane="doomed", order="oldest")
    assert [record.job_id for record in queued.jobs] == [f"a{n}" for n in range(5)]
    result = runtime.fail_lane("doomed", "gone")
    assert (result.settled, result.more) == (5, False)
    assert not store.lane_has_pending("doomed")
    assert runtime.list_jobs(lane="doomed").jobs == []
    assert [record.job_id for record in runtime.list_jobs(lane="doomed", state="settled",
                                                          order="oldest").jobs] == [
        f"a{n}" for n in range(5)]
    assert [record.job_id for record in runtime.list_jobs(lane="kept").jobs] == ["other"]


async def test_a_store_lists_what_the_one_before_it_left_unlisted(harness: Harness) -> None:
    first = harness.runtime()
    first.ingest_many([job(f"a{n}") for n in range(30)])
    assert _unlisted(harness) == [f"a{n}" for n in range(1, 30)]
    harness.open()
    second = harness.runtime()
    second.ingest(job("b0"))  # a new store's first insert lists every row
    assert _unlisted(harness) == []
    second.ingest(job("b1"))
    assert _unlisted(harness) == ["b1"]
    assert len(second.list_jobs("q", limit=100).jobs) == 32


async def _queues_in_every_kind_of_row(harness: Harness) -> OwnerRuntime:
    """Each queue with, in its pick order, unfiled settlements (a drain's), a
    running claim (q0), ready jobs of several priorities, listed and not,
    cancelled and delayed ones: what a read of a queue's waiting jobs steps
    over in the queue order index (schema 0010) and among the unlisted rows."""
    runtime = harness.runtime()
    for n in range(FILE_EVERY + 20):
        runtime.ingest(job(f"done{n}", queue=QUEUES[n % 3], priority=9))
    assert len(await runtime.drain()) == FILE_EVERY + 20
    assert len(_unfiled(harness)) == 19
    for n in range(LIST_EVERY + 30):
        runtime.ingest(job(f"w{n}", queue=QUEUES[n % 3], priority=n % 4,
                           delay_ms=3_600_000 if n % 11 == 0 else None))
    assert runtime.cancel("w5", "c-w5") is not None
    # q0's best job runs (claimed, not settled: its executor is elsewhere).
    store = OwnerLocalStore(harness.database())
    running = store.claim_next(owner_local_store.EVERY_JOB, "elsewhere", 1)
    assert running is not None and running.queue == "q0"
    runtime.ingest(job("best", queue="q2", priority=8))  # q2's head, not listed yet
    assert "best" in _unlisted(harness) and _unfiled(harness)
    return runtime


def _waiting_reads(runtime: OwnerRuntime) -> list[Any]:
    return [(runtime.read_queue_head(queue), runtime.queue_status(queue)) for queue in QUEUES]


async def test_queue_heads_and_counts_are_the_same_before_and_after_listing_and_filing(
        harness: Harness) -> None:
    runtime = await _queues_in_every_kind_of_row(harness)
    before = _waiting_reads(runtime)
    # What the heads are, read without any index: q0 is held by its running
    # job; the others by their best ready job (priority, then age).
    rows = harness.host_query(
        "SELECT job_id, queue FROM tickwork_jobs NOT INDEXED WHERE state = 'queued'"
        " AND due_at IS NULL ORDER BY priority DESC, sequence")
    expected = {queue: next(job_id for job_id, in_queue in rows if in_queue == queue)
                for queue in ("q1", "q2")}
    heads = [head.job_id if head is not None else None for head, _ in before]
    assert heads[0] == harness.host_query(
        "SELECT job_id FROM tickwork_jobs WHERE state = 'running'")[0][0]
    assert heads[1:] == [expected["q1"], "best"] == [expected["q1"], expected["q2"]]
    for queue, (_, status) in zip(QUEUES, before, strict=True):
        (queued, delayed), = harness.host_query(
            "SELECT count(CASE WHEN due_at IS NULL THEN 1 END), count(due_at)"
            " FROM tickwork_jobs NOT INDEXED WHERE queue = ? AND state = 'queued'", (queue,))
        assert (status.queued, status.delayed) == (queued, delayed)
    store = OwnerLocalStore(harness.database())
    store.list_new_rows()
    assert _unlisted(harness) == []
    assert _waiting_reads(runtime) == before
    store.file_settled()
    assert _unfiled(harness) == []
    assert _waiting_reads(runtime) == before


async def test_a_purge_takes_every_waiting_job_whether_listed_or_not(
        harness: Harness) -> None:
    runtime = await _queues_in_every_kind_of_row(harness)
    unlisted = set(_unlisted(harness))
    every = harness.host_query("SELECT job_id, queue, state FROM tickwork_jobs NOT INDEXED"
                               " ORDER BY sequence")
    waiting = [job_id for job_id, queue, state in every if queue == "q0" and state == "queued"]
    assert unlisted & set(waiting) and set(waiting) - unlisted  # both kinds are purged
    assert runtime.purge("q0") == len(waiting)
    assert harness.host_query("SELECT job_id, queue, state FROM tickwork_jobs NOT INDEXED"
                              " ORDER BY sequence") == [
        row for row in every if row[0] not in set(waiting)]
