"""Browsing jobs (``list_jobs``), on every store.

A page lists the jobs of one queue or one lane in one state: queued and
running jobs in enqueue order, settled ones in settlement order (optionally
of one outcome), newest or oldest first, with a cursor for the next page.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import job
from tests.support.engine import Engine, Jobs
from tickwork import InvalidArgument
from tickwork.lifecycle.operations import MAX_JOB_PAGE
from tickwork.model.jobs import MAX_SAFE_INTEGER


async def _ids(jobs: Jobs, queue: str | None = None, **options: Any) -> list[str]:
    page = await jobs.list_jobs(queue, **options)
    return [record.job_id for record in page.jobs]


async def _every_page(jobs: Jobs, queue: str | None = None, **options: Any) -> list[list[str]]:
    """Every page of a listing, following its cursors to the end."""
    pages: list[list[str]] = []
    cursor = None
    while True:
        page = await jobs.list_jobs(queue, cursor=cursor, **options)
        pages.append([record.job_id for record in page.jobs])
        if page.cursor is None:
            return pages
        cursor = page.cursor
        assert len(pages) < 100, "the cursor never ends"


async def _settle(engine: Engine, specs: list[tuple[str, str, str, str]]) -> tuple[Jobs, Any]:
    """Ingest and run (job_id, queue, lane, action) one at a time, 10 ms apart."""
    jobs, now = engine.timed_runtime()
    for job_id, queue, lane, action in specs:
        await jobs.ingest(job(job_id, queue=queue, lane=lane, payload={"do": action}))
        assert (await jobs.tick()).job_id == job_id
        now.advance(10)
    return jobs, now


async def test_queued_jobs_page_in_enqueue_order_both_ways(engine: Engine) -> None:
    jobs = engine.runtime()
    for number in range(7):
        await jobs.ingest(job(f"j{number}", priority=number % 3))
    await jobs.ingest(job("elsewhere", queue="other"))
    # Enqueue order, whatever the priority (the head is read_queue_head's).
    assert await _every_page(jobs, "q", limit=3) == [
        ["j6", "j5", "j4"], ["j3", "j2", "j1"], ["j0"]]
    assert await _every_page(jobs, "q", order="oldest", limit=3) == [
        ["j0", "j1", "j2"], ["j3", "j4", "j5"], ["j6"]]
    # A full last page has a cursor; the page after it is empty and has none.
    assert await _every_page(jobs, "q", limit=7) == [
        ["j6", "j5", "j4", "j3", "j2", "j1", "j0"], []]
    assert await _ids(jobs, "other") == ["elsewhere"]
    assert await _ids(jobs, "nobody") == []
    page = await jobs.list_jobs("q")
    assert page.cursor is None
    assert [(r.state, r.queue) for r in page.jobs] == [("queued", "q")] * 7


async def test_jobs_waiting_for_their_time_are_queued_with_their_due_time(
        engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.ingest(job("later", delay_ms=60_000))
    await jobs.ingest(job("now"))
    page = await jobs.list_jobs("q", order="oldest")
    assert [(r.job_id, r.due_at is not None) for r in page.jobs] == [
        ("later", True), ("now", False)]


async def test_running_jobs_are_listed_by_queue_and_by_lane(engine: Engine) -> None:
    jobs = engine.runtime()
    await jobs.ingest(job("busy", lane="slow", payload={"do": "block"}))
    await jobs.ingest(job("waiting", lane="slow"))
    await jobs.ingest(job("other-queue", queue="r", lane="slow"))
    task = await engine.start(jobs, "busy")
    try:
        running = await jobs.list_jobs("q", state="running")
        assert [(r.job_id, r.state) for r in running.jobs] == [("busy", "running")]
        assert await _ids(jobs, "q", state="queued") == ["waiting"]
        assert await _ids(jobs, lane="slow", state="running") == ["busy"]
        assert await _ids(jobs, lane="slow", state="queued", order="oldest") == [
            "waiting", "other-queue"]
        assert await _ids(jobs, "r", state="running") == []
    finally:
        engine.executor.release("busy")
        await task


async def test_settled_jobs_page_in_settlement_order_and_by_outcome(engine: Engine) -> None:
    jobs, _ = await _settle(engine, [
        ("f1", "q", "a", "fail"), ("ok1", "q", "a", "complete"), ("u1", "q", "b", "unknown"),
        ("c1", "q", "b", "cancel"), ("f2", "q", "a", "raise"), ("ok2", "q", "b", "complete"),
        ("f3", "r", "a", "fail")])
    assert await _every_page(jobs, "q", state="settled", limit=4) == [
        ["ok2", "f2", "c1", "u1"], ["ok1", "f1"]]
    assert await _every_page(jobs, "q", state="settled", order="oldest", limit=4) == [
        ["f1", "ok1", "u1", "c1"], ["f2", "ok2"]]
    failed = await jobs.list_jobs("q", state="settled", outcome="failed")
    assert [(r.job_id, r.outcome, r.failure_reason) for r in failed.jobs] == [
        ("f2", "failed", "execution_failed"), ("f1", "failed", None)]
    assert await _every_page(jobs, "q", state="settled", outcome="completed",
                             order="oldest", limit=1) == [["ok1"], ["ok2"], []]
    assert await _ids(jobs, "q", state="settled", outcome="interrupted") == []
    # A lane spans queues.
    assert await _ids(jobs, lane="a", state="settled") == ["f3", "f2", "ok1", "f1"]
    assert await _ids(jobs, lane="a", state="settled", outcome="failed",
                      order="oldest") == ["f1", "f2", "f3"]
    assert await _ids(jobs, lane="b", state="settled", outcome="completed") == ["ok2"]


async def test_a_long_listing_returns_every_job_once_in_order(engine: Engine) -> None:
    jobs = engine.runtime()
    ids = [f"j{number:03}" for number in range(230)]
    for start in range(0, len(ids), 100):
        await jobs.ingest_many([job(job_id) for job_id in ids[start:start + 100]])
    pages = await _every_page(jobs, "q", limit=MAX_JOB_PAGE, order="oldest")
    assert [len(page) for page in pages] == [100, 100, 30]
    assert [job_id for page in pages for job_id in page] == ids
    newest = await _every_page(jobs, lane="lane", limit=MAX_JOB_PAGE)
    assert [job_id for page in newest for job_id in page] == ids[::-1]


async def test_a_page_read_on_after_jobs_settle_skips_nothing_still_queued(
        engine: Engine) -> None:
    jobs = engine.runtime()
    for number in range(6):
        await jobs.ingest(job(f"j{number}"))
    first = await jobs.list_jobs("q", order="oldest", limit=2)
    assert [r.job_id for r in first.jobs] == ["j0", "j1"]
    # The head settles meanwhile; the next page goes on after j1.
    assert (await jobs.tick()).job_id == "j0"
    second = await jobs.list_jobs("q", order="oldest", limit=2, cursor=first.cursor)
    assert [r.job_id for r in second.jobs] == ["j2", "j3"]


@pytest.mark.parametrize(("arguments", "field", "message"), [
    ({}, "queue", "exactly one of queue and lane"),
    ({"queue": "q", "lane": "lane"}, "queue", "exactly one of queue and lane"),
    ({"queue": ""}, "queue", "1 to 256 characters"),
    ({"lane": "x" * 513}, "lane", "1 to 512 characters"),
    ({"queue": "q", "state": "done"}, "state", "must be one of queued, running, settled"),
    ({"queue": "q", "outcome": "failed"}, "outcome", "only settled jobs have an outcome"),
    ({"queue": "q", "state": "settled", "outcome": "lost"}, "outcome", "must be one of"),
    ({"queue": "q", "order": "random"}, "order", "must be newest or oldest"),
    ({"queue": "q", "limit": 0}, "limit", "from 1 to 100"),
    ({"queue": "q", "limit": MAX_JOB_PAGE + 1}, "limit", "from 1 to 100"),
    ({"queue": "q", "limit": True}, "limit", "from 1 to 100"),
    ({"queue": "q", "cursor": "12"}, "cursor", "is not a cursor a list_jobs page returned"),
    ({"queue": "q", "cursor": f"0.{MAX_SAFE_INTEGER + 1}"}, "cursor", "is not a cursor"),
])
async def test_bad_arguments_are_refused_by_name_and_change_nothing(
        engine: Engine, arguments: dict[str, Any], field: str, message: str) -> None:
    jobs = engine.runtime()
    await jobs.ingest(job("a"))
    before = await engine.table()
    options = dict(arguments)  # the parameters are shared by every store's run
    queue = options.pop("queue", None)
    with pytest.raises(InvalidArgument, match=message) as refused:
        await jobs.list_jobs(queue, **options)
    assert refused.value.field == field
    assert await engine.table() == before


async def test_a_cursor_at_the_safe_integer_bounds_pages(engine: Engine) -> None:
    """The cursor's parts are bound as SQL values: at exactly +-(2**53 - 1)
    they must still bind on every store (a Durable Object's and D1's too)."""
    jobs = engine.runtime()
    await jobs.ingest(job("a"))
    assert await _ids(jobs, "q", cursor=f"0.{MAX_SAFE_INTEGER}") == ["a"]
    assert await _ids(jobs, "q", order="oldest", cursor="0.0") == ["a"]
    assert await _ids(jobs, "q", state="settled",
                      cursor=f"-{MAX_SAFE_INTEGER}.0", order="oldest") == []
