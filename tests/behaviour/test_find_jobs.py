"""Finding jobs by the start of their id (``find_jobs``), on every store.

A page holds the jobs whose id starts with a prefix, whatever their queue
or state, in id order (by code point), with a cursor for the next page.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import job
from tests.support.engine import Engine
from tickwork import InvalidArgument


async def test_a_prefix_pages_its_jobs_of_every_queue_and_state_in_id_order(
        engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.ingest(job("order-9", queue="mail", payload={"do": "fail"}))
    assert (await jobs.tick()).job_id == "order-9"  # settled, failed
    now.advance(10)
    for job_id in ("order-10", "order-1", "order-2", "orders", "ordeR-3", "user-1"):
        await jobs.ingest(job(job_id, queue="q" if job_id != "order-2" else "other"))
    await jobs.ingest(job("order-11", delay_ms=60_000))
    pages: list[list[str]] = []
    cursor = None
    while True:
        page = await jobs.find_jobs("order-", limit=2, cursor=cursor)
        pages.append([record.job_id for record in page.jobs])
        if page.cursor is None:
            break
        cursor = page.cursor
    assert pages == [["order-1", "order-10"], ["order-11", "order-2"], ["order-9"]]
    found = await jobs.find_jobs("order-9")
    assert [(r.job_id, r.queue, r.state, r.outcome) for r in found.jobs] == [
        ("order-9", "mail", "settled", "failed")]
    assert (await jobs.find_jobs("nothing")).jobs == []


@pytest.mark.parametrize(("arguments", "field", "message"), [
    ({"id_prefix": ""}, "id_prefix", "must be 1 to 256 characters"),
    ({"id_prefix": "x" * 257}, "id_prefix", "must be 1 to 256 characters"),
    ({"id_prefix": 7}, "id_prefix", "must be a string"),
    ({"id_prefix": "a", "limit": 0}, "limit", "from 1 to 100"),
    ({"id_prefix": "a", "limit": 101}, "limit", "from 1 to 100"),
    ({"id_prefix": "a", "cursor": "b-1"}, "cursor", "is not a cursor a find_jobs page"),
    ({"id_prefix": "a", "cursor": 3}, "cursor", "is not a cursor a find_jobs page"),
])
async def test_bad_arguments_are_refused_by_name_and_change_nothing(
        engine: Engine, arguments: dict[str, Any], field: str, message: str) -> None:
    jobs = engine.runtime()
    await jobs.ingest(job("a"))
    before = await engine.table()
    options = dict(arguments)
    prefix = options.pop("id_prefix")
    with pytest.raises(InvalidArgument, match=message) as refused:
        await jobs.find_jobs(prefix, **options)
    assert refused.value.field == field
    assert await engine.table() == before
