"""A JobOwner registers itself in the directory of owners, in a real D1 (Miniflare).

The object's storage is the stand-in (both SDK shapes), its alarm the
simulated scheduler, and ``env.DB`` a real D1 database with schema/d1
applied: every row checked here was written by the object's own statement.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.durable_objects.conftest import OWNER, Host, hosted, job
from tests.support.d1.fixtures import d1_binding, d1_bridge  # noqa: F401
from tests.support.d1.miniflare import D1Bridge
from tests.support.stores import apply_d1_schema
from tickwork.directory import SUMMARY_INTERVAL_MS, OwnerQuery
from tickwork.stores.d1.binding import D1Binding
from tickwork.stores.d1.owner_directory import D1OwnerDirectory

ROW = ("SELECT owner, queued, running, overdue, dead_letters, last_activity_at, "
       "summarised_at, registered_at FROM tickwork_owners ORDER BY owner")


class Directory:
    """The test's view of the D1 directory: raw rows, and pages as the API reads them."""

    def __init__(self, db: Any) -> None:
        self.binding = D1Binding(db)
        self.store = D1OwnerDirectory(db)

    async def rows(self) -> dict[str, tuple[Any, ...]]:
        return {row[0]: tuple(row[1:]) for row in await self.binding.query(ROW)}


@pytest_asyncio.fixture(params=["builtin", "external"])
async def d1_host(request: pytest.FixtureRequest, tmp_path: Path,
                  d1_bridge: D1Bridge,  # noqa: F811
                  ) -> AsyncIterator[tuple[Host, Directory]]:
    with d1_binding(d1_bridge, request.param, yield_to_loop=True) as db:
        await apply_d1_schema(db)
        with hosted(request.param, tmp_path, db=db) as host:
            yield host, Directory(db)


async def test_an_owner_registers_once_it_stored_a_job_not_on_reads(
        d1_host: tuple[Host, Directory]) -> None:
    host, directory = d1_host
    await host.stub().status()
    await host.stub().read("nothing")
    assert await host.alarm() is None  # a read owes no write
    # A write that stores no job (a cancel of an unknown id, a pause) wakes
    # the alarm once, which registers nothing: no job stored yet.
    await host.stub().cancel("nothing", "c1", False)
    await host.stub().pause("q")
    await host.scheduler.run_until_idle()
    assert await directory.rows() == {}
    await host.stub().resume("q")
    await host.scheduler.run_until_idle()
    assert await directory.rows() == {}
    registered = host.clock()
    await host.stub().ingest([job("a"), job("b", "other", payload={"do": "fail"})])
    assert await host.alarm() == registered
    host.clock.advance(5)
    [delivery] = await host.scheduler.run_due()
    assert delivery.outcome == "ok"
    now = host.clock()
    assert await directory.rows() == {OWNER: (0, 0, 0, 1, now, now, now)}
    assert await host.alarm() is None  # nothing owed, nothing pending


async def test_the_summary_is_rewritten_at_most_once_a_minute_while_things_change(
        d1_host: tuple[Host, Directory]) -> None:
    host, directory = d1_host
    await host.stub().ingest(job("a"))
    await host.scheduler.run_due()
    first = host.clock()
    assert (await directory.rows())[OWNER][5] == first
    host.clock.advance(1_000)
    await host.stub().pause("q")
    await host.stub().ingest([job("b"), job("c", run_at=first + 3_600_000)])
    changed = host.clock()
    # The alarm is owed for the directory's next write, not sooner.
    assert await host.alarm() == first + SUMMARY_INTERVAL_MS
    host.clock.set(first + SUMMARY_INTERVAL_MS - 1)
    assert await host.scheduler.run_due() == []
    assert (await directory.rows())[OWNER][5] == first
    host.clock.set(first + SUMMARY_INTERVAL_MS)
    [delivery] = await host.scheduler.run_due()
    assert delivery.outcome == "ok"
    # queued: b (its queue paused: overdue) and c (waiting for its time).
    assert await directory.rows() == {
        OWNER: (2, 0, 1, 0, changed, first + SUMMARY_INTERVAL_MS, first)}
    # Nothing changes any more: the only alarm left is c's due time.
    assert await host.alarm() == first + 3_600_000


async def test_a_failing_directory_never_fails_the_jobs_and_is_tried_again_a_minute_later(
        d1_host: tuple[Host, Directory], capsys: pytest.CaptureFixture[str]) -> None:
    host, directory = d1_host
    await directory.binding.run("ALTER TABLE tickwork_owners RENAME TO owners_away")
    await host.stub().ingest([job("a"), job("b")])
    failed_at = host.clock()
    [delivery] = await host.scheduler.run_due()
    assert delivery.outcome == "ok"  # the alarm did not raise: no retry storm
    assert [row[:2] for row in host.rows().values()] == [("settled", "completed")] * 2
    logged = capsys.readouterr().err
    assert f"tickwork: owner directory: the summary of {OWNER!r} was not written" in logged
    assert "tickwork: tickwork:" not in logged
    assert await host.alarm() == failed_at + SUMMARY_INTERVAL_MS
    await directory.binding.run("ALTER TABLE owners_away RENAME TO tickwork_owners")
    host.clock.set(failed_at + SUMMARY_INTERVAL_MS)
    await host.scheduler.run_due()
    assert (await directory.rows())[OWNER][:4] == (0, 0, 0, 0)
    assert await host.alarm() is None


async def test_a_write_owed_when_the_object_was_evicted_is_made_when_it_wakes(
        d1_host: tuple[Host, Directory]) -> None:
    host, directory = d1_host
    await host.stub().ingest(job("a"))
    await host.scheduler.evict(OWNER)  # before its alarm: nothing in memory survives
    host.clock.advance(10)
    await host.scheduler.run_until_idle()
    # The alarm woke the object cold, where ctx.id.name is undefined: the key
    # is the one the ingest's call recorded in the object's storage.
    assert host.instance().ctx.id.name is None
    assert (await directory.rows())[OWNER][:4] == (0, 0, 0, 0)


async def test_owners_are_listed_from_what_each_wrote(d1_host: tuple[Host, Directory]) -> None:
    host, directory = d1_host
    for name, jobs in (("acme", 3), ("acme-eu", 1), ("zeta", 2)):
        stub = host.stub(name)
        await stub.pause("q")  # the jobs stay queued: the counts say so
        await stub.ingest([job(f"{name}-{index}") for index in range(jobs)])
    await host.scheduler.run_until_idle()
    page = await directory.store.list_owners(OwnerQuery(sort="queued", limit=2))
    assert [(owner.key, owner.queued) for owner in page.owners] == [("acme", 3), ("zeta", 2)]
    rest = await directory.store.list_owners(OwnerQuery(sort="queued", cursor=page.cursor))
    assert [(owner.key, owner.queued) for owner in rest.owners] == [("acme-eu", 1)]
    assert rest.cursor is None
    prefixed = await directory.store.list_owners(OwnerQuery(prefix="acme"))
    assert [owner.key for owner in prefixed.owners] == ["acme", "acme-eu"]
