"""tickwork on Cloudflare D1: a job table shared by every Worker invocation.

    from tickwork import D1Runtime, purge_d1_queues

Apply ``schema/d1`` with ``wrangler d1 migrations apply`` first; opening a
runtime never migrates. See docs/reference/python-api.md ("Shared runtimes").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tickwork.events import EventHook
from tickwork.leases import DEFAULT_LEASE_MS, DEFAULT_RENEW_EVERY_MS, Clock
from tickwork.lifecycle import operations
from tickwork.lifecycle.requests import InsertMany
from tickwork.model.errors import InvalidArgument
from tickwork.model.jobs import Job, validate_job
from tickwork.model.outcomes import IngestStatus
from tickwork.ports.host import SharedExecutor, Wake
from tickwork.runtimes.shared import Now, SharedRuntime
from tickwork.stores.d1 import store as statements
from tickwork.stores.d1.binding import MAX_BOUND_PARAMETERS, D1Binding
from tickwork.stores.d1.store import LATEST_MIGRATION, D1Store
from tickwork.stores.schema_version import SCHEMA_VERSION
from tickwork.stores.sql import sqlite as sql

__all__ = ["LATEST_MIGRATION", "SCHEMA_VERSION", "D1Runtime", "purge_d1_queues"]


class D1Runtime(SharedRuntime):
    """The shared runtime over a D1 binding (``env.DB``).

    Every operation costs one round trip in the common case (see the
    benchmark for counts); a tick is two (claim, settle) plus one per renewal.
    """

    def __init__(
        self,
        db: Any,
        *,
        execute: SharedExecutor,
        wake: Wake,
        now: Now | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        renew_every_ms: int = DEFAULT_RENEW_EVERY_MS,
        clock: Clock | None = None,
        on_event: EventHook | None = None,
    ) -> None:
        self._d1_store = D1Store(db)
        super().__init__(self._d1_store, execute=execute, wake=wake, now=now,
                         lease_ms=lease_ms, renew_every_ms=renew_every_ms, clock=clock,
                         on_event=on_event)

    async def ingest_many(
        self, jobs: Sequence[Job], *, before: Sequence[Any] = ()
    ) -> list[IngestStatus]:
        """``SharedRuntime.ingest_many``, optionally with the producer's own rows.

        ``before``: statements prepared on this database
        (``db.prepare(...).bind(...)``) that run first in the same
        ``db.batch``, so they and the jobs commit together in one round trip,
        or none of them does: a conflicting job (``IngestConflict``) or a
        failing statement of ``before`` (its D1 error) writes nothing. Their
        results are not returned. Enqueue jobs through ``jobs``, not through
        ``before``: a conflict ``jobs`` cannot explain counts as a concurrent
        purge, and the whole batch is sent again.
        """
        if isinstance(before, (str, bytes)):
            raise InvalidArgument("before", "must be a list of prepared D1 statements")
        leading = list(before)
        if not leading:
            return await super().ingest_many(jobs)
        store, db_now = self._d1_store, self._db_now
        answers = {**self._answers, InsertMany: lambda request: store.insert_many(
            list(request.jobs), db_now(), before=leading)}
        return await self._drive(operations.ingest_many(jobs), answers)

    def enqueue(self, job: Job) -> Any:
        """A prepared statement that enqueues ``job``, for the producer's own ``db.batch``.

        An identical replay writes nothing; a conflicting one fails the batch.
        """
        valid = validate_job(job)
        return self._d1_store.d1.prepare(*statements.job_statement(
            valid, self._db_now(), statements.ENQUEUE, statements.ENQUEUE_AT_ONCE))

    def enqueue_from_select(self, text: str, values: Sequence[Any] = ()) -> Any:
        """A statement inserting the rows of a trusted SELECT, for the producer's batch.

        ``text`` is a SQLite SELECT bound with ``?NNN`` placeholders, or with
        anonymous ``?`` ones (numbered here, in order, before the statement is
        built: tickwork's clock takes the next number), producing columns
        job_id, queue_name, lane, priority, payload_json and recovery_max
        (nullable). Each row is checked by the table's constraints and
        replayed like ``enqueue``: identical rows are no-ops (a payload whose
        keys are in another order is identical), conflicting ones fail the
        batch.
        """
        text, count = _numbered_placeholders(text, values)
        statement = sql.ENQUEUE_FROM_SELECT.format(now=sql.d1_clock(f"?{count + 1}"),
                                                   select=text)
        return self._d1_store.d1.prepare(statement, (*values, self._db_now()))


def purge_d1_queues(db: Any, select_text: str, values: Sequence[Any] = ()) -> Any:
    """A statement erasing every job (any state) of the queues ``select_text`` names.

    ``select_text`` is a trusted one-column SELECT of queue names with ``?NNN``
    placeholders (or anonymous ``?``); the statement goes into the caller's own
    ``db.batch``.
    """
    select_text, _ = _numbered_placeholders(select_text, values)
    return D1Binding(db).prepare(sql.PURGE_QUEUES.format(select=select_text), values)


#: What SQLite's tokenizer skips when it looks for parameters: string
#: literals, quoted identifiers and comments (a "?" inside them is text).
_SKIPPED = re.compile(r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|`(?:[^`]|``)*`|\[[^\]]*\]"""
                      r"""|--[^\n]*|/\*.*?(?:\*/|$)|(\?)(\d*)""", re.DOTALL)


def _numbered_placeholders(text: str, values: Sequence[Any]) -> tuple[str, int]:
    """``text`` with every anonymous ``?`` numbered ``?1``, ``?2``... in order,
    and the number of parameters; refuses a mix of ``?`` and ``?NNN``."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument("text", "must be a non-empty SQL SELECT")
    if not isinstance(values, Sequence) or isinstance(values, str):
        raise InvalidArgument("values", "must be a sequence of bound values")
    numbered: list[int] = []
    anonymous = 0

    def number(match: re.Match[str]) -> str:
        nonlocal anonymous
        if match.group(1) is None:
            return match.group(0)  # a literal, identifier or comment: left as it is
        if match.group(2):
            numbered.append(int(match.group(2)))
            return match.group(0)
        anonymous += 1
        return f"?{anonymous}"

    rewritten = _SKIPPED.sub(number, text)
    if anonymous and numbered:
        raise InvalidArgument("text", "mixes ? and ?NNN placeholders; use one kind")
    count = max(numbered, default=anonymous)
    if count != len(values):
        raise InvalidArgument("values", f"{len(values)} values for {count} placeholders")
    if count + 1 > MAX_BOUND_PARAMETERS:
        raise InvalidArgument(
            "values", f"{count} values; D1 allows {MAX_BOUND_PARAMETERS - 1} here "
            "(one parameter is tickwork's clock)")
    return rewritten, count
