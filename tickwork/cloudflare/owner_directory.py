"""A ``JobOwner``'s row in the directory of owners: registered once, summarised each minute.

Cloudflare cannot list the Durable Objects of a namespace, so each owner
writes its own row to D1 (``tickwork.stores.d1.owner_directory``): the
first time after it stored a job, then again with fresh counts while it
keeps changing, at most once per ``SUMMARY_INTERVAL_MS``. The write is made
from the object's alarm, after its ticks and after the alarm is in step, so
it never holds up the owner's own jobs; a write that fails is logged and
tried again a minute later (the alarm is armed for it). An owner that no
longer changes writes nothing.

What the owner keeps, in its own storage (one row of ``tickwork_meta``,
``directory``, written when it goes from "published" to "changed" and
after each write, never per job): its key, when it first changed since
the last write, when it last wrote, and what it wrote (so the next write
sets only the values that changed: D1 bills a row written per index set).
So a summary owed when the object was evicted is still written when it
wakes.

**The owner's key.** The object learns it from ``ctx.id.name``, which the
runtime fills in when the Worker reaches the object by ``getByName`` (every
RPC call of the API does), and records it the first time. It is not
relied on in ``alarm()``: on an object woken cold by its alarm (after a
restart) ``ctx.id.name`` has been seen undefined (cloudflare/partykit#391,
workerd 1.20260424.1), so the recorded key is used there.

Without a ``DB`` binding there is no directory: nothing is recorded or written.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Callable
from typing import Any, Final

from tickwork._pyodide import load_jsnull
from tickwork.directory import (
    SUMMARY_INTERVAL_MS,
    OwnerSummary,
    summary_from_wire,
    summary_to_wire,
)
from tickwork.model.jobs import MAX_ID_LENGTH
from tickwork.ports.database import SyncDatabase
from tickwork.runtimes.owner_local import OwnerRuntime
from tickwork.stores.d1.owner_directory import D1OwnerDirectory

#: The owner's row of ``tickwork_meta`` holding its directory state (JSON).
STATE_KEY: Final = "directory"

_READ_STATE = "SELECT value FROM tickwork_meta WHERE key = ?"
#: One row when the owner holds a job (one step into the table's key).
_ANY_JOB = "SELECT 1 AS any_job FROM tickwork_jobs LIMIT 1"
_WRITE_STATE = ("INSERT INTO tickwork_meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value")


def object_name(ctx: Any) -> str | None:
    """``ctx.id.name``: the name the object was reached by, or None when the
    runtime did not give one (undefined, JS null, not a usable key)."""
    try:
        name = getattr(getattr(ctx, "id", None), "name", None)
    except Exception:  # a JS getter that throws: no name
        return None
    if not isinstance(name, str) or name is load_jsnull() or not 1 <= len(name) <= MAX_ID_LENGTH:
        return None
    return name


class OwnerRegistration:
    """One owner's directory state and its writes (see the module doc).

    ``note_change(now)`` after anything that may have changed its jobs;
    ``due_at()`` when the next write is owed (for the alarm), or None;
    ``await publish_if_due(now)`` from the alarm. None of them raises for
    a failing directory: a failure is logged and retried a minute later.
    """

    def __init__(self, database: SyncDatabase, runtime: OwnerRuntime,
                 directory: D1OwnerDirectory, *,
                 log_error: Callable[[str], None] | None = None) -> None:
        self._database = database
        self._runtime = runtime
        self._directory = directory
        self._log_error = log_error or _stderr
        state = self._read_state()
        self.key: str | None = _text(state.get("key"))
        #: When it first changed since the last write (None: nothing owed).
        self.changed_at: int | None = _number(state.get("changed_at"))
        #: When it last tried to write (None: never).
        self.written_at: int | None = _number(state.get("written_at"))
        #: The latest change this instance saw (not stored: a write carries it).
        self._last_change: int | None = self.changed_at
        #: What the last write wrote (a later write sets only what changed).
        self.published: OwnerSummary | None = _summary(state.get("published"))
        self._reported_nameless = False

    # ------------------------------------------------------------ state

    def learn_key(self, name: str | None) -> None:
        """Record the object's key (``object_name(ctx)``) the first time it is known."""
        if name is None or name == self.key:
            return
        self.key = name
        self._write_state()

    def note_change(self, now: int) -> None:
        """Something may have changed the owner's jobs at ``now``: a write is owed."""
        self._last_change = now if self._last_change is None else max(self._last_change, now)
        if self.changed_at is None:
            self.changed_at = now
            self._write_state()  # once per write owed, not per change

    def due_at(self) -> int | None:
        """When the next write is owed (epoch ms), or None: nothing changed
        since the last one, or the key is not known yet."""
        if self.changed_at is None or self.key is None:
            return None
        if self.written_at is None:
            return self.changed_at
        return max(self.changed_at, self.written_at + SUMMARY_INTERVAL_MS)

    # ------------------------------------------------------------ writing

    async def publish_if_due(self, now: int) -> bool:
        """Write the owner's summary if one is owed by ``now``; whether it was
        written. A failure is logged, and the write owed again a minute later."""
        if self.changed_at is not None and self.key is None:
            if not self._reported_nameless:
                self._reported_nameless = True
                self._log_error("owner directory: this object's key is not known "
                                "yet (ctx.id.name was undefined); it registers on its next "
                                "RPC call")
            return False
        due = self.due_at()
        if due is None or due > now or self.key is None:
            return False
        key, changed_at = self.key, self.changed_at
        assert changed_at is not None  # due_at() is not None
        last_activity = max(self._last_change or changed_at, changed_at)
        try:
            if self.written_at is None and not self._database.query(_ANY_JOB):
                # Never written, and no job stored yet (a pause, a cancel of an
                # unknown id, a schedule put): an owner registers with its first job.
                self.changed_at = None
                self._write_state()
                return False
            counts = self._runtime.owner_counts()
        except Exception as error:
            return self._failed(now, f"reading the owner's storage failed: "
                                     f"{type(error).__name__}: {error}")
        summary = OwnerSummary.of(key, counts, last_activity_at=last_activity,
                                  summarised_at=now)
        # Owed no more, unless something changes while the write is under
        # way (the await lets other calls in): note_change then owes the next.
        self.written_at, self.changed_at = now, None
        try:
            await self._directory.publish(summary, self.published)
        except Exception as error:
            self.changed_at = changed_at if self.changed_at is None \
                else min(changed_at, self.changed_at)
            return self._failed(now, f"{type(error).__name__}: {error}")
        self.published = summary
        try:
            self._write_state()
        except Exception as error:  # the row is written; at worst it is written again
            self._log_error(f"owner directory: recording the write of {key!r} "
                            f"failed: {type(error).__name__}: {error}")
        return True

    def _failed(self, now: int, detail: str) -> bool:
        self.written_at = now  # owed again SUMMARY_INTERVAL_MS from now
        self._log_error(f"owner directory: the summary of {self.key!r} was not "
                        f"written ({detail[:500]}); trying again in "
                        f"{SUMMARY_INTERVAL_MS // 1000} s")
        # Storage failing too: the alarm's own retries cover it.
        with contextlib.suppress(Exception):
            self._write_state()
        return False

    def _read_state(self) -> dict[str, Any]:
        rows = self._database.query(_READ_STATE, (STATE_KEY,))
        if not rows:
            return {}
        try:
            state = json.loads(str(rows[0][0]))
        except ValueError:
            return {}
        return state if isinstance(state, dict) else {}

    def _write_state(self) -> None:
        published = None if self.published is None else summary_to_wire(self.published)
        value = json.dumps({"key": self.key, "changed_at": self.changed_at,
                            "written_at": self.written_at, "published": published},
                           separators=(",", ":"))
        self._database.execute(_WRITE_STATE, (STATE_KEY, value))


def _summary(value: Any) -> OwnerSummary | None:
    try:
        return summary_from_wire(value) if isinstance(value, dict) else None
    except (KeyError, TypeError):
        return None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _number(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _stderr(message: str) -> None:
    print(f"tickwork: {message}", file=sys.stderr)
