"""The directory of owners of ``tickwork serve``: the data directory's owners, each
with a summary read from its file at most once a minute."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from tickwork import Completed, Failed, Job, JobRecord
from tickwork.directory import SUMMARY_INTERVAL_MS, OwnerQuery
from tickwork.hosts.cpython.directory import DataDirectoryOwners
from tickwork.hosts.cpython.owners import OwnerDirectory, owner_file_name
from tickwork.model.errors import InvalidArgument


async def run(job: JobRecord, signal: Any) -> Completed | Failed:
    return Failed("declined") if job.payload == "fail" else Completed()


async def settle(store: OwnerDirectory) -> None:
    """Wait until every owner's tick loop has stopped."""
    for _ in range(200):
        if store.running_loops() == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("tick loops still running")


async def fill(store: OwnerDirectory) -> None:
    """acme: 2 queued (paused); acme-eu: 1 dead letter; zeta: all done."""
    await store.service("acme").pause("q")
    await store.service("acme").ingest([Job("a1", "q", "q", 0, None),
                                        Job("a2", "q", "q", 0, None)])
    await store.service("acme-eu").ingest([Job("e1", "q", "q", 0, "fail")])
    await store.service("zeta").ingest([Job("z1", "q", "q", 0, None)])
    await settle(store)


def counts(page: Any) -> dict[str, tuple[int, int, int, int]]:
    return {owner.key: (owner.queued, owner.running, owner.overdue, owner.dead_letters)
            for owner in page.owners}


async def test_every_owner_is_listed_with_its_counts_open_or_closed(tmp_path: Path) -> None:
    store = OwnerDirectory(tmp_path, run)
    await fill(store)
    page = await store.listing.list_owners(OwnerQuery())
    expected = {"acme": (2, 0, 2, 0), "acme-eu": (0, 0, 0, 1), "zeta": (0, 0, 0, 0)}
    assert counts(page) == expected and page.cursor is None
    await store.close(1.0)
    # A new process: the start-up scan finds every owner; their files are
    # closed (only acme has work, and it is paused), so each is read on its own.
    again = OwnerDirectory(tmp_path, run)
    again.recover()
    page = await again.listing.list_owners(OwnerQuery(sort="queued"))
    assert list(counts(page).items()) == [("acme", expected["acme"]),
                                          ("zeta", expected["zeta"]),
                                          ("acme-eu", expected["acme-eu"])]
    prefixed = await again.listing.list_owners(OwnerQuery(prefix="acme-", sort="dead_letters"))
    assert list(counts(prefixed)) == ["acme-eu"]
    await again.close(1.0)


async def test_pages_by_key_walk_the_sorted_keys(tmp_path: Path) -> None:
    store = OwnerDirectory(tmp_path, run)
    keys = ["b", "a", "é", "a/1", "🙂", "ab"]
    for key in keys:
        await store.service(key).ingest([Job("j", "q", "q", 0, None)])
    await settle(store)
    seen: list[str] = []
    cursor = None
    while True:
        page = await store.listing.list_owners(OwnerQuery(cursor=cursor, limit=4))
        seen += [owner.key for owner in page.owners]
        if (cursor := page.cursor) is None:
            break
    assert seen == sorted(keys)
    with pytest.raises(InvalidArgument, match="cursor"):
        await store.listing.list_owners(OwnerQuery(sort="queued", cursor="key:a"))
    await store.close(1.0)


async def test_a_summary_is_read_again_only_when_its_file_changed_and_a_minute_passed(
        tmp_path: Path) -> None:
    store = OwnerDirectory(tmp_path, run)
    await store.service("acme").pause("q")
    await store.service("acme").ingest([Job("a1", "q", "q", 0, None)])
    await store.close(1.0)
    path = tmp_path / "owners" / owner_file_name("acme")
    now = [10**12]
    reads: list[str] = []
    listing = DataDirectoryOwners(lambda key: reads.append(key) or None, clock=lambda: now[0])
    listing.add("acme", path)
    before = (os.stat(path).st_mtime_ns, os.path.exists(f"{path}-wal"))
    first = (await listing.list_owners(OwnerQuery())).owners[0]
    # The closed owner was read on a connection of its own (open_counts
    # answered None), which changed nothing of its file.
    assert (first.queued, first.summarised_at, reads) == (1, now[0], ["acme"])
    assert first.last_activity_at == before[0] // 1_000_000
    assert (os.stat(path).st_mtime_ns, os.path.exists(f"{path}-wal")) == before
    # Within the minute: the kept summary, whatever happens to the file.
    reopened = OwnerDirectory(tmp_path, run)
    await reopened.service("acme").ingest([Job("a2", "q", "q", 0, None)])
    await reopened.close(1.0)
    now[0] += SUMMARY_INTERVAL_MS - 1
    assert (await listing.list_owners(OwnerQuery())).owners[0] == first
    # A minute on: the file changed, so it is read again.
    now[0] += 1
    second = (await listing.list_owners(OwnerQuery())).owners[0]
    assert (second.queued, second.summarised_at, reads) == (2, now[0], ["acme", "acme"])
    # Another minute, no change: only the "as of" time moves, nothing is read.
    now[0] += SUMMARY_INTERVAL_MS
    third = (await listing.list_owners(OwnerQuery())).owners[0]
    assert (third.queued, third.summarised_at, len(reads)) == (2, now[0], 2)


async def test_an_owner_whose_file_is_gone_is_forgotten_and_the_page_still_fills(
        tmp_path: Path) -> None:
    store = OwnerDirectory(tmp_path, run)
    for key in ("a", "b", "c", "d"):
        await store.service(key).ingest([Job("j", "q", "q", 0, None)])
    await settle(store)
    await store.close(1.0)
    listing = DataDirectoryOwners(lambda key: None)
    for key in ("a", "b", "c", "d"):
        listing.add(key, tmp_path / "owners" / owner_file_name(key))
    (tmp_path / "owners" / owner_file_name("b")).unlink()
    page = await listing.list_owners(OwnerQuery(limit=2))
    assert ([owner.key for owner in page.owners], page.cursor) == (["a", "c"], "key:c")
    assert len(listing) == 3
