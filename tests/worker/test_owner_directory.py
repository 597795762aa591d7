"""``GET /v1/owners`` through ``Default.fetch``, over a real D1 (Miniflare), both SDK shapes.

The rows are written by ``D1OwnerDirectory.publish`` (what each JobOwner
calls; tests/durable_objects/test_owner_directory.py drives the objects
themselves). Every page is checked against an order computed here.
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.worker import send
from tickwork.directory import SORTS, OwnerQuery, OwnerSummary
from tickwork.stores.d1.owner_directory import (
    PUBLISH,
    D1OwnerDirectory,
    changed_columns,
    page_statement,
    update_statement,
)

pytestmark = pytest.mark.usefixtures("js_module")

#: Keys with shared prefixes, and characters whose UTF-8 order matters.
KEYS = ("acme", "acme-eu", "acme-us", "acme/1", "acmé", "b", "beta", "beta-2", "zeta",
        "zz", "\u00e9t\u00e9", "\U0001f600-emoji", "acme-eu-west", "A-upper", "acme~")


def summaries(seed: int = 7) -> list[OwnerSummary]:
    """One summary per key, with small counts so sorts have ties."""
    rng = random.Random(seed)
    return [OwnerSummary(key, rng.randrange(4), rng.randrange(2), rng.randrange(3),
                         rng.randrange(3), 1_700_000_000_000 + rng.randrange(5) * 1000,
                         1_700_000_100_000) for key in KEYS]


def expected(items: list[OwnerSummary], sort: str, prefix: str) -> list[str]:
    chosen = [item for item in items if item.key.startswith(prefix)]
    if sort == "key":
        return sorted(item.key for item in chosen)
    return [item.key for item in sorted(
        chosen, key=lambda item: (item.sort_value(sort), item.key), reverse=True)]


async def publish_all(db: Any, items: list[OwnerSummary]) -> None:
    directory = D1OwnerDirectory(db)
    for item in items:
        await directory.publish(item)


async def walk(worker: Any, shape: str, sort: str, prefix: str, limit: int) -> list[str]:
    """Every owner, page by page, through the Worker."""
    keys: list[str] = []
    cursor = None
    for _ in range(len(KEYS) + 2):
        path = f"/v1/owners?sort={sort}&limit={limit}&prefix={quote(prefix, safe='')}"
        if cursor is not None:
            path += f"&cursor={quote(cursor, safe='')}"
        status, body = await send(worker, shape, "GET", path)
        assert status == 200, body
        assert len(body["owners"]) <= limit
        keys += [owner["key"] for owner in body["owners"]]
        cursor = body["cursor"]
        if cursor is None:
            return keys
    raise AssertionError("the pages never ended")


@pytest.mark.parametrize("prefix", ["", "acme", "acme-eu", "\U0001f600", "nobody"])
@pytest.mark.parametrize("sort", SORTS)
async def test_pages_go_through_every_owner_once_in_the_sort_order(
        worker: Any, shape: str, db: Any, sort: str, prefix: str) -> None:
    items = summaries()
    await publish_all(db, items)
    assert await walk(worker, shape, sort, prefix, limit=4) == expected(items, sort, prefix)


async def test_a_page_answers_each_summary_whole(worker: Any, shape: str, db: Any) -> None:
    await publish_all(db, [OwnerSummary("acme", 3, 1, 2, 10_000, 1_700_000_000_000,
                                        1_700_000_060_000)])
    assert await send(worker, shape, "GET", "/v1/owners") == (200, {
        "owners": [{"key": "acme", "queued": 3, "running": 1, "overdue": 2,
                    "dead_letters": 10_000, "last_activity_at": 1_700_000_000_000,
                    "summarised_at": 1_700_000_060_000}],
        "cursor": None})


async def test_a_later_summary_replaces_an_earlier_one_never_the_reverse(
        db: Any, query: Any) -> None:
    directory = D1OwnerDirectory(db)
    await directory.publish(OwnerSummary("acme", 1, 0, 0, 0, 1_000, 2_000))
    await directory.publish(OwnerSummary("acme", 5, 1, 1, 1, 3_000, 4_000))
    # A late retry of an older write changes nothing.
    await directory.publish(OwnerSummary("acme", 9, 9, 9, 9, 1_500, 3_000))
    assert await query("SELECT queued, running, overdue, dead_letters, last_activity_at, "
                       "summarised_at, registered_at FROM tickwork_owners") == [
        (5, 1, 1, 1, 3_000, 4_000, 2_000)]


@pytest.mark.parametrize("sort", SORTS)
async def test_each_page_without_a_prefix_is_one_range_scan_of_an_index(
        db: Any, query: Any, sort: str) -> None:
    await publish_all(db, summaries())
    for after in (False, True):
        plan = " | ".join(str(row[-1]) for row in await query(
            "EXPLAIN QUERY PLAN " + page_statement(sort, after=after, prefix=False, end=False),
            [5, 1, "m"] if after else [5]))
        # By key the table is its primary key's b-tree (WITHOUT ROWID): a
        # first page scans it in order and stops at the limit.
        index = ("PRIMARY KEY" if after else "SCAN tickwork_owners") if sort == "key" \
            else f"INDEX tickwork_owners_by_{sort}"
        assert index in plan, plan
        assert "TEMP B-TREE" not in plan, plan  # no sort: the index is the order
        if after:
            assert plan.startswith("SEARCH"), plan  # a range from the cursor, not a scan


async def test_a_prefix_reads_only_its_own_range(db: Any, query: Any) -> None:
    plan = " | ".join(str(row[-1]) for row in await query(
        "EXPLAIN QUERY PLAN " + page_statement("dead_letters", after=True, prefix=True,
                                               end=True), [5, 1, "m", "acme", "acmf"]))
    assert "SEARCH tickwork_owners USING PRIMARY KEY (owner>? AND owner<?)" in plan, plan


@pytest.mark.parametrize(("path", "status", "field"), [
    ("/v1/owners?sort=size", 400, "sort"),
    ("/v1/owners?limit=0", 400, "limit"),
    ("/v1/owners?limit=201", 400, "limit"),
    ("/v1/owners?limit=ten", 400, "limit"),
    ("/v1/owners?sort=queued&cursor=key%3Aacme", 400, "cursor"),
    ("/v1/owners?sort=running&cursor=queued%3A3%3Aacme", 400, "cursor"),
    ("/v1/owners?sort=running&cursor=running%3Athree%3Aacme", 400, "cursor"),
    ("/v1/owners?cursor=key%3A", 400, "cursor"),
    ("/v1/owners?prefix=" + "x" * 257, 400, "prefix"),
    ("/v1/owners?owner=acme", 400, "query"),
    ("/v1/owners?sort=key&sort=queued", 400, "sort"),
])
async def test_bad_queries_are_refused_naming_the_parameter(
        worker: Any, shape: str, path: str, status: int, field: str) -> None:
    got, body = await send(worker, shape, "GET", path)
    assert (got, body["error"]["field"]) == (status, field), body


async def test_the_directory_needs_the_token_and_a_get(worker: Any, shape: str) -> None:
    status, body = await send(worker, shape, "GET", "/v1/owners", token=None)
    assert (status, body["error"]["code"]) == (401, "unauthorized")
    status, body = await send(worker, shape, "POST", "/v1/owners", {})
    assert (status, body["error"]["code"]) == (405, "method_not_allowed")


async def test_without_migration_0012_the_directory_answers_503_naming_it(
        worker: Any, shape: str, query: Any) -> None:
    await query("DROP TABLE tickwork_owners")
    status, body = await send(worker, shape, "GET", "/v1/owners")
    assert (status, body["error"]["code"]) == (503, "not_ready")
    assert "0012_owner_directory.sql" in body["error"]["message"]


def _meta(result: Any, name: str) -> int:
    """``result.meta[name]`` of a D1 answer, in either SDK shape."""
    data = result.to_py() if hasattr(result, "to_py") else result
    return int(data["meta"][name])


async def test_d1_bills_a_page_its_own_rows_and_an_update_its_changed_entries(
        db: Any) -> None:
    """D1's own accounting (Miniflare's meta.rows_read / rows_written), with
    500 owners: a page reads the page and one more, whatever the sort; a
    write costs its row and one per index whose column it sets, so the
    registration writes 6 and a later write 1 plus what changed."""
    binding = D1OwnerDirectory(db).binding
    rng = random.Random(3)
    await binding.batch([(PUBLISH, (f"owner-{n:04}", 1_000, 900 + rng.randrange(50),
                                    rng.randrange(20), rng.randrange(3), rng.randrange(5),
                                    rng.randrange(40))) for n in range(500)],
                        [None] * 500)
    for sort in SORTS:
        first = await binding.prepare(page_statement(sort, after=False, prefix=False,
                                                     end=False), [51]).all()
        assert _meta(first, "rows_read") <= 51, sort
        cursor = [51, 1, "owner-0250"]
        later = await binding.prepare(page_statement(sort, after=True, prefix=False,
                                                     end=False), cursor).all()
        assert _meta(later, "rows_read") <= 51, sort

    async def written(statement: str, values: list[Any]) -> int:
        return _meta(await binding.prepare(statement, values).run(), "rows_written")

    first = OwnerSummary("new-owner", 1, 0, 0, 0, 2_000, 2_000)
    assert await written(PUBLISH, [first.key, 2_000, 2_000, 1, 0, 0, 0]) == 6  # registered
    # A later write sets only what changed since the owner's previous one.
    same = replace(first, summarised_at=3_000)
    assert changed_columns(first, same) == ()
    assert await written(update_statement(()), [same.key, 3_000]) == 1
    moved = replace(same, queued=2, last_activity_at=3_500, summarised_at=4_000)
    changed = changed_columns(same, moved)
    assert changed == ("last_activity_at", "queued")
    assert await written(update_statement(changed), [moved.key, 4_000, 3_500, 2]) == 3
    directory = D1OwnerDirectory(db)
    assert (await directory.list_owners(OwnerQuery(prefix="new-"))).owners == [moved]


async def test_a_later_write_of_a_row_that_is_gone_registers_it_again(db: Any) -> None:
    directory = D1OwnerDirectory(db)
    first = OwnerSummary("acme", 1, 0, 0, 0, 1_000, 1_000)
    await directory.publish(first)
    await directory.binding.run("DELETE FROM tickwork_owners")
    later = replace(first, queued=4, summarised_at=2_000)
    await directory.publish(later, previous=first)
    assert (await directory.list_owners(OwnerQuery())).owners == [later]
