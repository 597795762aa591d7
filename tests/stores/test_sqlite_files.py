"""``open_sqlite3``: a sqlite3 file opened with tickwork's settings.

A new file gets tickwork's page size, WAL and the asked-for synchronous
setting; a file that already holds jobs keeps its page size and its rows;
bad arguments are refused by name before any file is created.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.support import job
from tickwork import Completed, InvalidArgument, OwnerRuntime
from tickwork.hosts.cpython import open_sqlite3
from tickwork.hosts.cpython.sqlite_files import NEW_FILE_PAGE_SIZE, WAL_BYTES_BEFORE_CHECKPOINT
from tickwork.stores import Sqlite3Database


class Wake:
    def recompute(self) -> None:
        pass


def runtime(database: Sqlite3Database) -> OwnerRuntime:
    return OwnerRuntime(database, execute=lambda job, signal: Completed(),
                        is_alive=lambda job: False, wake=Wake())


def pragma(database: Sqlite3Database, name: str) -> Any:
    (value,), = database.connection.execute(f"PRAGMA {name}").fetchall()
    return value


@pytest.mark.parametrize(("asked", "stored"),
                         [("OFF", 0), ("NORMAL", 1), ("FULL", 2), ("EXTRA", 3), ("normal", 1)])
def test_a_new_file_gets_small_pages_wal_and_the_synchronous_setting(
        tmp_path: Path, asked: str, stored: int) -> None:
    database = open_sqlite3(tmp_path / "jobs.sqlite3", synchronous=asked, busy_timeout_ms=750)
    assert NEW_FILE_PAGE_SIZE == 1024
    assert pragma(database, "page_size") == NEW_FILE_PAGE_SIZE
    assert pragma(database, "journal_mode") == "wal"
    assert pragma(database, "synchronous") == stored
    assert pragma(database, "busy_timeout") == 750
    # A checkpoint once 4 MiB of frames gathered, as SQLite's default on its
    # default pages: 4,096 of these.
    assert WAL_BYTES_BEFORE_CHECKPOINT == 4 * 1024 * 1024
    assert pragma(database, "wal_autocheckpoint") == 4096
    assert database.connection.isolation_level is None
    runtime(database).ingest(job("a"))
    database.connection.close()

    # What was written is in the file, and the file kept its page size.
    again = open_sqlite3(tmp_path / "jobs.sqlite3")
    assert pragma(again, "page_size") == NEW_FILE_PAGE_SIZE
    assert pragma(again, "synchronous") == 2  # FULL, the default
    result = asyncio.run(runtime(again).tick())
    assert result is not None and (result.job_id, result.outcome) == ("a", "completed")


def test_a_file_that_holds_jobs_keeps_its_page_size_and_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA page_size = 4096")
    connection.execute("PRAGMA journal_mode = WAL")
    runtime(Sqlite3Database(connection)).ingest(job("kept", payload={"n": 1}))
    connection.close()

    database = open_sqlite3(path, synchronous="NORMAL")
    assert pragma(database, "page_size") == 4096
    assert pragma(database, "wal_autocheckpoint") == 1024  # 4 MiB of these pages
    owner = runtime(database)
    record = owner.read("kept")
    assert record is not None and record.state == "queued" and record.payload == {"n": 1}
    result = asyncio.run(owner.tick())
    assert result is not None and (result.job_id, result.outcome) == ("kept", "completed")


def test_a_file_in_rollback_journal_mode_is_switched_to_wal_with_its_rows(
        tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite3"
    connection = sqlite3.connect(path, isolation_level=None)
    runtime(Sqlite3Database(connection)).ingest(job("kept"))
    connection.close()

    database = open_sqlite3(path)
    assert pragma(database, "journal_mode") == "wal"
    assert pragma(database, "page_size") == 4096  # SQLite's default, as it was created
    record = runtime(database).read("kept")
    assert record is not None and record.state == "queued"


@pytest.mark.parametrize(("arguments", "field"), [
    ({"synchronous": "SOMETIMES"}, "synchronous"),
    ({"synchronous": ""}, "synchronous"),
    ({"synchronous": 2}, "synchronous"),
    ({"busy_timeout_ms": -1}, "busy_timeout_ms"),
    ({"busy_timeout_ms": 1.5}, "busy_timeout_ms"),
    ({"busy_timeout_ms": True}, "busy_timeout_ms"),
    ({"busy_timeout_ms": "5000"}, "busy_timeout_ms"),
])
def test_bad_arguments_are_refused_by_name_before_a_file_is_created(
        tmp_path: Path, arguments: dict[str, Any], field: str) -> None:
    path = tmp_path / "never.sqlite3"
    with pytest.raises(InvalidArgument) as refused:
        open_sqlite3(path, **arguments)
    assert refused.value.field == field
    assert repr(next(iter(arguments.values()))) in str(refused.value)
    assert not path.exists()


def test_tickwork_serve_opens_its_owner_files_with_these_settings(tmp_path: Path) -> None:
    from tickwork.hosts.cpython.owners import connect_owner_database

    connection = connect_owner_database(tmp_path / "owner.sqlite3")
    database = Sqlite3Database(connection)
    assert pragma(database, "page_size") == NEW_FILE_PAGE_SIZE
    assert pragma(database, "journal_mode") == "wal"
    assert pragma(database, "synchronous") == 2  # FULL: a settled job survives a power cut
    assert pragma(database, "busy_timeout") == 5000
    assert pragma(database, "wal_autocheckpoint") == 4096
