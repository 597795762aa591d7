"""Opening a sqlite3 file for the owner-local runtime, with tickwork's settings.

CPython only (Workers have no ``sqlite3``): ``tickwork serve``, the demo,
the docs and the benchmarks open their files here.
"""

from __future__ import annotations

import os
import sqlite3

from tickwork.model.errors import InvalidArgument
from tickwork.stores import Sqlite3Database

#: The page size of a file ``open_sqlite3`` creates. A commit writes every
#: page it changed to the WAL whole, and a job's commits change a few dozen
#: bytes in each of several b-trees (its row, and one leaf of every index its
#: state enters or leaves): SQLite's default 4,096-byte pages write four times
#: the bytes for the same change. ``bench.embedded_peers`` prints both;
#: docs/explanation/benchmarks.md has the figures.
NEW_FILE_PAGE_SIZE = 1024

#: How many bytes of WAL frames a file gathers before SQLite copies them back
#: into the database (an automatic checkpoint, with a sync at NORMAL and at
#: FULL): SQLite's default is 1,000 pages, 4 MiB at its default page size.
#: Counted in bytes here, so small pages do not make checkpoints four times
#: as frequent.
WAL_BYTES_BEFORE_CHECKPOINT = 4 * 1024 * 1024

#: The ``synchronous`` settings ``open_sqlite3`` accepts (SQLite's names).
SYNCHRONOUS_SETTINGS = ("OFF", "NORMAL", "FULL", "EXTRA")


def open_sqlite3(path: str | os.PathLike[str], *, synchronous: str = "FULL",
                 busy_timeout_ms: int = 5000) -> Sqlite3Database:
    """Open (or create) the SQLite file at ``path`` for an ``OwnerRuntime``.

    * A new file gets ``NEW_FILE_PAGE_SIZE`` pages. An existing file keeps
      the page size it was created with (SQLite changes it only by rewriting
      the whole file, which this never does), and every row.
    * WAL mode: readers never block the writer, and a commit appends only
      the pages it changed. An automatic checkpoint runs once
      ``WAL_BYTES_BEFORE_CHECKPOINT`` bytes of frames have gathered
      (``PRAGMA wal_autocheckpoint``, in pages of the file's size).
    * ``synchronous``: ``FULL`` (the default) syncs every commit, so a
      settled job survives a power cut; ``NORMAL`` syncs at checkpoints, so
      a power cut (not a process crash) can lose the last commits.
    * ``busy_timeout_ms``: how long a write waits for another connection's
      write lock before failing with "database is locked".
    * Autocommit (``isolation_level=None``): tickwork opens the
      transactions it needs.

    Bad arguments raise ``InvalidArgument`` before anything is opened.
    ``Sqlite3Database(connection)`` takes a connection opened any other way.
    """
    setting = synchronous.upper() if isinstance(synchronous, str) else synchronous
    if setting not in SYNCHRONOUS_SETTINGS:
        raise InvalidArgument("synchronous", f"must be one of {', '.join(SYNCHRONOUS_SETTINGS)}, "
                                             f"not {synchronous!r}")
    if isinstance(busy_timeout_ms, bool) or not isinstance(busy_timeout_ms, int) \
            or busy_timeout_ms < 0:
        raise InvalidArgument("busy_timeout_ms", "must be a whole number of milliseconds "
                                                 f">= 0, not {busy_timeout_ms!r}")
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        # The page size first: it only takes on a file with no pages yet,
        # and a file in WAL mode can no longer change it.
        connection.execute(f"PRAGMA page_size = {NEW_FILE_PAGE_SIZE}")
        connection.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
        connection.execute("PRAGMA journal_mode = WAL").fetchall()
        checkpoint_by_bytes(connection)
        connection.execute(f"PRAGMA synchronous = {setting}")
    except BaseException:
        connection.close()
        raise
    return Sqlite3Database(connection)


def checkpoint_by_bytes(connection: sqlite3.Connection) -> None:
    """Set ``connection``'s automatic checkpoint to ``WAL_BYTES_BEFORE_CHECKPOINT``
    bytes of frames, in pages of its file's size."""
    (page_size,), = connection.execute("PRAGMA page_size").fetchall()
    connection.execute(f"PRAGMA wal_autocheckpoint = {WAL_BYTES_BEFORE_CHECKPOINT // page_size}")
