"""Owner-local jobs of ``tickwork serve``: one sqlite3 file per owner key.

Storage layout of the data directory (``--data DIR``)::

    DIR/.lock                                  held with flock() by the serving process
    DIR/owners/<slug>-<hash>.sqlite3           one owner's jobs (WAL mode: also -wal, -shm)

* ``<hash>`` is the first 16 hex digits (64 bits) of the SHA-256 of the owner
  key in UTF-8, so every key, whatever characters it holds (``/``, ``..``,
  NUL, emoji), maps to a safe, fixed-length, case-distinct file name.
* ``<slug>`` is there for people listing the directory: the key's first 32
  characters with everything but ``[A-Za-z0-9._-]`` replaced by ``_``.
* The real key is recorded inside the file (table ``tickwork_host_owner``,
  written in the same transaction that creates it) and checked on every
  open, so a file can never serve another key, and the start-up scan learns
  each file's key from the file itself.
* A file is created by the first ingest into its owner. Reads, cancels,
  purges and failed lanes of an owner without a file are answered by an
  empty in-memory runtime, so they create nothing.

**The directory of owners** (``GET /v1/owners``) is this directory:
``OwnerDirectory.listing`` (``tickwork.hosts.cpython.directory``) learns
every key from the start-up scan and each new file, and keeps each owner's
summary, read from its file at most once a minute.

The engine's tables (``tickwork_jobs``, ``tickwork_meta``) are created and
versioned by ``OwnerRuntime`` itself. Connections run in autocommit mode
(``isolation_level=None``) with ``journal_mode=WAL`` and the default
``synchronous=FULL``: a settled job survives a power cut.

**One process per data directory.** ``DataDirLock`` takes an exclusive
``flock`` on ``DIR/.lock`` (non-blocking: a second ``tickwork serve`` on the
same directory is refused at start-up). The kernel drops the lock when the
process dies, however it dies.

**Liveness.** Every owner's runtime is opened with ``is_alive`` answering
``False``. ``OwnerRuntime`` never probes a claim it executes itself, and the
lock guarantees no other process executes claims of this directory, so a
running claim it asks about was left by a previous process that died (kill
-9, power cut) and is recovered: put back in its queue while its
``Recovery`` budget lasts, otherwise settled ``interrupted``.

**Wake.** Each owner has one tick loop, an asyncio task that ticks until the
owner is idle. ``wake.recompute()`` (called by the runtime after every
durable change) starts it, at once, when the owner has pending work, or
tells a running loop to look again. An owner whose jobs only wait for their
due time gets one timer, for the earliest of them (``next_tick_at``), held
by the directory, so it fires even after the idle owner was closed: then the
owner is opened again and ticked. At start-up every file is scanned: owners
with pending work get a tick loop, which recovers jobs a crashed process
left running, and owners with waiting jobs their timer.

**Open owners are bounded** (``--max-open-owners``; by default what the
process's descriptor limit allows, at most 256). An open owner holds up to
three descriptors (the database and its -wal and -shm files). Before another
owner is opened, idle ones (no tick loop running or due) are closed, least
recently used first; an owner with a running job is never closed. When every
open owner is busy, a request for another one is answered 503 with
``retry-after`` (``OwnersAtCapacity``), never a 500, and nothing of it is
written; so is a request that finds the process out of descriptors. As jobs
finish their owners become idle and room frees up by itself: owners with
pending work that could not be opened (at start-up, or when their wake came
while the store was full) are opened as soon as there is room.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import os
import re
import resource
import sqlite3
import time
import traceback
from pathlib import Path
from typing import Any

from tickwork import OwnerRuntime
from tickwork.api import ApiError, JobService, Operation, RuntimeService, ScopedService
from tickwork.directory import OwnerCounts
from tickwork.events import EventHook
from tickwork.executors import Executor
from tickwork.hosts.cpython.common import Log, finish_tasks, stderr
from tickwork.hosts.cpython.directory import DataDirectoryOwners
from tickwork.hosts.cpython.progress import Progress
from tickwork.hosts.cpython.sqlite_files import open_sqlite3
from tickwork.hosts.ticking import tick_until_idle
from tickwork.model.jobs import JobRecord, validate_jobs
from tickwork.model.outcomes import QueueBacklog
from tickwork.ports.host import wall_clock_ms
from tickwork.runtimes.owner_local import MAX_CONCURRENCY
from tickwork.stores import Sqlite3Database

#: Hex digits of the key's SHA-256 in a file name.
HASH_DIGITS = 16
#: Characters of the key kept (sanitised) in a file name.
SLUG_LENGTH = 32
#: The most owners open at once by default; fewer when descriptors are scarce.
MAX_OPEN_OWNERS = 256
#: Descriptors one open owner can hold: its database, -wal and -shm files.
DESCRIPTORS_PER_OWNER = 3
#: Descriptors kept back for everything else: HTTP connections, PostgreSQL, logs.
RESERVED_DESCRIPTORS = 128
#: Seconds a client is told to wait when every open owner is busy.
CAPACITY_RETRY_AFTER_S = 1
#: A tick loop that failed (a storage error) is started again after this long.
RETRY_AFTER_S = 1.0

OWNER_KEY_TABLE = "tickwork_host_owner"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class HostError(Exception):
    """A problem the host reports to its operator in one line (and exits)."""


class OwnersAtCapacity(ApiError):
    """Every owner the host may keep open is busy: come back shortly (503)."""

    def __init__(self, detail: str) -> None:
        super().__init__(503, "owners_at_capacity",
                         f"every owner this server may keep open is busy ({detail}); "
                         f"retry in {CAPACITY_RETRY_AFTER_S} s",
                         headers={"retry-after": str(CAPACITY_RETRY_AFTER_S)})


def default_max_open_owners() -> int:
    """``MAX_OPEN_OWNERS``, or fewer when the descriptor limit is too low for it."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_OPEN_OWNERS
    return max(1, min(MAX_OPEN_OWNERS, (soft - RESERVED_DESCRIPTORS) // DESCRIPTORS_PER_OWNER))


def owner_file_name(key: str) -> str:
    """The file name of ``key``'s database (see the module doc)."""
    digest = hashlib.sha256(key.encode("utf-8", errors="surrogatepass")).hexdigest()
    slug = _UNSAFE.sub("_", key[:SLUG_LENGTH]) or "_"
    return f"{slug}-{digest[:HASH_DIGITS]}.sqlite3"


class DataDirLock:
    """An exclusive, non-blocking flock on ``DIR/.lock`` for the life of the process."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / ".lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise HostError(f"data directory {self.path.parent} is in use by "
                            f"pid {holder}; one tickwork serve per directory") from None
        except OSError:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def _not_alive(job: JobRecord) -> bool:
    # See the module doc: a claim we do not execute belongs to a dead process.
    return False


class _NothingToWake:
    """The wake of the empty in-memory runtime that answers for owners without
    a file (``OwnerDirectory._empty_jobs``): it is only read, and its cancels,
    purges and failed lanes find no job, so it never gets pending work and
    never needs a tick. A recompute is therefore ignored."""

    def recompute(self) -> None:
        pass


class _OwnerWake:
    def __init__(self, store: OwnerDirectory, key: str) -> None:
        self._store = store
        self._key = key

    def recompute(self) -> None:
        self._store.wake(self._key)


class _Owner:
    """One open owner: its connection, runtime and tick loop."""

    __slots__ = ("again", "connection", "jobs", "key", "last_used", "loop", "path", "retry",
                 "runtime")

    def __init__(self, key: str, path: Path, connection: sqlite3.Connection,
                 runtime: OwnerRuntime) -> None:
        self.key = key
        self.path = path
        self.connection = connection
        self.runtime = runtime
        self.jobs = RuntimeService(runtime)
        self.loop: asyncio.Task[None] | None = None
        self.retry: asyncio.TimerHandle | None = None
        self.again = False
        self.last_used = time.monotonic()


class OwnerDirectory:
    """The owners of one data directory, opened on demand, each with its tick loop."""

    def __init__(
        self,
        directory: Path,
        execute: Executor,
        *,
        progress: Progress | None = None,
        log: Log | None = None,
        max_open: int | None = None,
        on_event: EventHook | None = None,
        concurrency: int = 1,
    ) -> None:
        self.directory = directory
        self._on_event = on_event
        self.owners_dir = directory / "owners"
        self._execute = execute
        self._progress = progress or Progress()
        self._log = log or stderr
        self.max_open = default_max_open_owners() if max_open is None else max_open
        if self.max_open < 1:
            raise HostError(f"--max-open-owners {self.max_open}: must be 1 or more")
        if not 1 <= concurrency <= MAX_CONCURRENCY:
            raise HostError(f"--concurrency {concurrency}: must be 1 to {MAX_CONCURRENCY}")
        #: How many jobs each owner runs at once (its runtime's slots).
        self.concurrency = concurrency
        self._open: dict[str, _Owner] = {}
        # Owners known to have pending work that could not be opened yet (the
        # store was full): opened, in order, as soon as there is room.
        self._waiting: dict[str, Path] = {}
        self._stopping = False
        self._empty: tuple[sqlite3.Connection, RuntimeService] | None = None
        # Owners whose jobs wait for a due time: one timer each, for the
        # earliest, kept while the owner itself may be closed.
        self._due_timers: dict[str, tuple[int, asyncio.TimerHandle]] = {}
        # The backlog of each closed owner with unsettled jobs, as read when
        # it closed: a closed owner's file does not change (only this
        # process writes it, through an open runtime), and a wait that ends
        # opens it again (its due timer).
        self._closed_backlogs: dict[str, list[QueueBacklog]] = {}
        #: The directory of owners (``GET /v1/owners``): every owner file.
        self.listing = DataDirectoryOwners(self._open_counts, log=self._log)

    # ---------------------------------------------------------------- API side

    def service(self, key: str) -> JobService:
        """The JobService of owner ``key`` (the ``owners`` callable of JobApi):
        only an ingest creates the owner's file, and only for valid jobs."""

        def resolve(operation: Operation, args: tuple[Any, ...]) -> JobService:
            if operation.name == "ingest":
                validate_jobs(args[0])  # a refused batch must not create the file
            return self.jobs_for(key, create=operation.creates_owner)

        return ScopedService(resolve)

    def jobs_for(self, key: str, *, create: bool) -> RuntimeService:
        """The owner's jobs; without ``create``, an empty stand-in when it has no file."""
        owner = self._open.get(key)
        if owner is None:
            path = self.owners_dir / owner_file_name(key)
            if not create and not path.exists():
                return self._empty_jobs()
            owner = self._open_owner(key, path)
        owner.last_used = time.monotonic()
        return owner.jobs

    def _empty_jobs(self) -> RuntimeService:
        if self._empty is None:
            connection = sqlite3.connect(":memory:", isolation_level=None)
            runtime = OwnerRuntime(Sqlite3Database(connection), execute=self._execute,
                                   is_alive=_not_alive, wake=_NothingToWake())
            self._empty = connection, RuntimeService(runtime)
        return self._empty[1]

    # ------------------------------------------------------------------ start-up

    def recover(self) -> list[str]:
        """Open every owner file with pending work and start its tick loop.

        Returns the keys of those owners. Files without a recorded key (a
        creation that never committed) are skipped.
        """
        self.owners_dir.mkdir(parents=True, exist_ok=True)
        started = []
        for path in sorted(self.owners_dir.glob("*.sqlite3")):
            key = _recorded_key(path)
            if key is None:
                continue
            if owner_file_name(key) != path.name:
                self._log(f"tickwork serve: {path.name} holds owner {key!r}, whose file "
                          "name differs; skipped")
                continue
            self.listing.add(key, path)
            owner = self._open.get(key)
            if owner is None:
                try:
                    owner = self._open_owner(key, path)
                except OwnersAtCapacity:
                    # More owners with work than may be open: this one is
                    # opened (and looked at) when an open one goes idle.
                    self._waiting[key] = path
                    continue
            at = owner.runtime.next_tick_at()
            if _due_now(at):
                started.append(key)
                self.wake(key)
            else:
                self._arm_due_timer(owner, at)
                self._close_owner(owner)
        return started

    def backlog(self) -> list[QueueBacklog]:
        """Every owner's queue backlog, for the metrics' gauges: each open
        owner read now (one statement over its indexes of unsettled jobs),
        each closed one as it was when it closed, its oldest ready job's wait
        brought up to now. An owner with work that could not be opened yet
        (more owners with work than may be open) counts once it opens."""
        now = wall_clock_ms()
        found: list[QueueBacklog] = []
        for key, backlogs in self._closed_backlogs.items():
            if key not in self._open:
                found += [dataclasses.replace(entry, read_at=now) for entry in backlogs]
        for owner in list(self._open.values()):
            try:
                found += owner.runtime.backlog()
            except sqlite3.Error as error:  # one unreadable owner must not fail the scrape
                self._log(f"tickwork serve: cannot read the backlog of owner {owner.key!r}: "
                          f"{error}")
        return found

    def _open_counts(self, key: str) -> OwnerCounts | None:
        """The counts of owner ``key`` read through its runtime, if it is open."""
        owner = self._open.get(key)
        return None if owner is None else owner.runtime.owner_counts()

    # ---------------------------------------------------------------------- wake

    def wake(self, key: str) -> None:
        """The owner's wake: start its tick loop when it has pending work."""
        owner = self._open.get(key)
        if owner is None or self._stopping:
            return
        if owner.loop is not None:
            owner.again = True  # the running loop looks again before it stops
            return
        at = owner.runtime.next_tick_at()
        if not _due_now(at):
            self._arm_due_timer(owner, at)  # nothing now: a timer, if anything waits
            return
        if owner.retry is not None:
            owner.retry.cancel()
            owner.retry = None
        owner.loop = asyncio.get_running_loop().create_task(self._tick_loop(owner),
                                                            name=f"tick {key}")

    async def _tick_loop(self, owner: _Owner) -> None:
        def look_again() -> bool:
            again, owner.again = owner.again, False
            return again

        try:
            ended = await tick_until_idle(owner.runtime, on_result=self._progress.record,
                                          look_again=look_again,
                                          stopping=lambda: self._stopping)
            if ended.stop in ("busy", "liveness_unknown"):
                # Neither happens here (one loop per owner, a probe that
                # never fails); should it, look again later, not at once.
                owner.retry = asyncio.get_running_loop().call_later(
                    RETRY_AFTER_S, self._retry, owner)
        except asyncio.CancelledError:
            raise
        except Exception:
            self._log(f"tickwork serve: owner {owner.key!r}: tick failed; retrying in "
                      f"{RETRY_AFTER_S:g} s\n{traceback.format_exc()}")
            owner.retry = asyncio.get_running_loop().call_later(
                RETRY_AFTER_S, self._retry, owner)
        finally:
            owner.loop = None
            owner.last_used = time.monotonic()
            if not self._stopping:
                if self._open.get(owner.key) is owner:
                    self._arm_due_timer(owner, owner.runtime.next_tick_at())
                if self._waiting:
                    self._admit_waiting()

    def _admit_waiting(self) -> None:
        """Open owners with pending work that found the store full, while there is room."""
        while self._waiting:
            key, path = next(iter(self._waiting.items()))
            if key in self._open:
                del self._waiting[key]
                continue
            try:
                self._open_owner(key, path)
            except OwnersAtCapacity:
                return  # still full: the next owner to go idle tries again
            except Exception:
                del self._waiting[key]
                self._log(f"tickwork serve: owner {key!r} could not be opened:\n"
                          f"{traceback.format_exc()}")
                continue
            del self._waiting[key]
            self.wake(key)

    def _arm_due_timer(self, owner: _Owner, at: int | None) -> None:
        """Arm (or move, or drop) the owner's timer for ``at``, its next_tick_at()."""
        if self._stopping:
            return
        armed = self._due_timers.get(owner.key)
        if armed is not None and armed[0] == at:
            return
        if armed is not None:
            armed[1].cancel()
            del self._due_timers[owner.key]
        if at is None:
            return
        delay_s = max(0.0, at / 1000 - time.time())
        handle = asyncio.get_running_loop().call_later(
            delay_s, self._due, owner.key, owner.path)
        self._due_timers[owner.key] = (at, handle)

    def _due(self, key: str, path: Path) -> None:
        """A waiting job of ``key`` is due: open the owner if need be, and tick it."""
        self._due_timers.pop(key, None)
        if self._stopping:
            return
        if key not in self._open:
            try:
                self._open_owner(key, path)
            except OwnersAtCapacity:
                self._waiting[key] = path  # opened as soon as there is room
                return
            except Exception:
                self._log(f"tickwork serve: owner {key!r} could not be opened:\n"
                          f"{traceback.format_exc()}")
                return
        self.wake(key)

    def _retry(self, owner: _Owner) -> None:
        owner.retry = None
        if self._open.get(owner.key) is owner:
            self.wake(owner.key)

    def running_loops(self) -> int:
        return sum(1 for owner in self._open.values() if owner.loop is not None)

    # ------------------------------------------------------------------ shutdown

    def interrupt(self) -> None:
        """Interrupt every running tick now (a second shutdown signal)."""
        self._stopping = True
        for owner in self._open.values():
            if owner.loop is not None:
                owner.loop.cancel()

    async def close(self, grace_s: float) -> None:
        """Stop starting ticks; let running ones settle for ``grace_s``, then
        interrupt them (the engine settles an interrupted job ``failed`` /
        ``execution_interrupted``); close every database."""
        self._stopping = True
        for _, handle in self._due_timers.values():
            handle.cancel()
        self._due_timers.clear()
        await finish_tasks([owner.loop for owner in self._open.values()
                            if owner.loop is not None], grace_s)
        for owner in list(self._open.values()):
            self._close_owner(owner)
        if self._empty is not None:
            self._empty[0].close()
            self._empty = None

    # ---------------------------------------------------------------- internals

    def _open_owner(self, key: str, path: Path) -> _Owner:
        """Open ``key``'s file, first closing idle owners to stay within ``max_open``."""
        self._make_room(len(self._open) + 1 - self.max_open)
        self.owners_dir.mkdir(parents=True, exist_ok=True)
        try:
            connection = connect_owner_database(path)
        except (OSError, sqlite3.OperationalError) as error:
            if not _out_of_descriptors():
                raise
            # Something else holds the descriptors (connections, say): one
            # idle owner less, one more try, else "come back later".
            if not self._make_room(1):
                raise OwnersAtCapacity("the process is out of file descriptors") from error
            try:
                connection = connect_owner_database(path)
            except (OSError, sqlite3.OperationalError) as again:
                if _out_of_descriptors():
                    raise OwnersAtCapacity(
                        "the process is out of file descriptors") from again
                raise
        try:
            _record_key(connection, key, path)
            runtime = OwnerRuntime(Sqlite3Database(connection), execute=self._execute,
                                   is_alive=_not_alive, wake=_OwnerWake(self, key),
                                   on_event=self._on_event, concurrency=self.concurrency)
        except BaseException:
            connection.close()
            raise
        owner = _Owner(key, path, connection, runtime)
        self._open[key] = owner
        self.listing.add(key, path)
        self._closed_backlogs.pop(key, None)  # read live while open
        return owner

    def _make_room(self, count: int) -> bool:
        """Close ``count`` idle owners, least recently used first. False when
        there are not that many (nothing is closed then); raises
        ``OwnersAtCapacity`` when the store is full and none is idle."""
        if count <= 0:
            return True
        idle = sorted((owner for owner in self._open.values()
                       if owner.loop is None and owner.retry is None),
                      key=lambda owner: owner.last_used)
        if len(idle) < count:
            if len(self._open) >= self.max_open:
                raise OwnersAtCapacity(f"{len(self._open)} owners open, each running a job")
            return False
        for owner in idle[:count]:
            self._close_owner(owner)
        return True

    def _close_owner(self, owner: _Owner) -> None:
        if owner.retry is not None:
            owner.retry.cancel()
        if self._open.get(owner.key) is owner:
            del self._open[owner.key]
        try:
            # Remembered for the gauges while closed; not when the process stops.
            backlog = [] if self._stopping else owner.runtime.backlog()
        except sqlite3.Error:
            backlog = []  # counted again once it is opened
        if backlog:
            self._closed_backlogs[owner.key] = backlog
        else:
            self._closed_backlogs.pop(owner.key, None)
        owner.runtime.flush_history()  # counts not written yet (logs its own failures)
        owner.connection.close()


def _due_now(at: int | None) -> bool:
    """Whether a runtime's next_tick_at() means "tick now" (its clock is the
    wall clock here)."""
    return at is not None and at <= wall_clock_ms()


def _out_of_descriptors() -> bool:
    """Whether this process cannot open one more file descriptor right now."""
    try:
        descriptor = os.open(os.devnull, os.O_RDONLY)
    except OSError as error:
        return error.errno in (errno.EMFILE, errno.ENFILE)
    os.close(descriptor)
    return False


def connect_owner_database(path: Path) -> sqlite3.Connection:
    """An owner's file, opened by ``open_sqlite3`` (a new one gets tickwork's
    page size; synchronous FULL)."""
    connection: sqlite3.Connection = open_sqlite3(path).connection
    return connection


def _record_key(connection: sqlite3.Connection, key: str, path: Path) -> None:
    """Record ``key`` in a new file, or check the one recorded there."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        connection.execute(f"CREATE TABLE IF NOT EXISTS {OWNER_KEY_TABLE} "
                           "(owner_key TEXT NOT NULL)")
        row = connection.execute(f"SELECT owner_key FROM {OWNER_KEY_TABLE}").fetchone()
        if row is None:
            connection.execute(f"INSERT INTO {OWNER_KEY_TABLE} (owner_key) VALUES (?)", (key,))
        elif row[0] != key:
            raise HostError(f"{path} belongs to owner {row[0]!r}, not {key!r}")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def _recorded_key(path: Path) -> str | None:
    """The owner key recorded in ``path``, or None for a file whose creation
    never committed."""
    try:
        connection = sqlite3.connect(path)  # the file exists: nothing is created
    except sqlite3.Error:
        return None
    try:
        row = connection.execute(f"SELECT owner_key FROM {OWNER_KEY_TABLE}").fetchone()
    except sqlite3.Error:
        return None
    finally:
        connection.close()
    return None if row is None else str(row[0])

