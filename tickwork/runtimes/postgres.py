"""tickwork on PostgreSQL: one job table shared by a fleet of CPython workers.

    from tickwork import PostgresRuntime, purge_postgres_queues

Apply ``schema/postgres`` first (``tickwork migrate postgres --dsn DSN``, or
your migration tool); opening a runtime never migrates. Needs psycopg 3
(``pip install 'tickwork[postgres]'``), which this module never imports
itself: you hand it the pool.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tickwork.events import EventHook
from tickwork.leases import DEFAULT_LEASE_MS, DEFAULT_RENEW_EVERY_MS, Clock
from tickwork.model.errors import IngestConflict, InvalidArgument
from tickwork.model.jobs import Job, validate_job
from tickwork.ports.host import SharedExecutor, Wake
from tickwork.runtimes.shared import Now, SharedRuntime
from tickwork.stores.postgres.store import LATEST_MIGRATION, job_params, store_for
from tickwork.stores.schema_version import POSTGRES_SCHEMA_VERSION as SCHEMA_VERSION
from tickwork.stores.sql import postgres as sql

__all__ = ["LATEST_MIGRATION", "SCHEMA_VERSION", "PostgresRuntime", "purge_postgres_queues"]


class PostgresRuntime(SharedRuntime):
    """The shared runtime over a psycopg 3 ``AsyncConnectionPool``.

    Runtimes that share a pool share its group commit: claims and settlements
    of their concurrent ticks travel in shared statements.
    """

    def __init__(
        self,
        pool: Any,
        *,
        execute: SharedExecutor,
        wake: Wake,
        now: Now | None = None,
        lease_ms: int = DEFAULT_LEASE_MS,
        renew_every_ms: int = DEFAULT_RENEW_EVERY_MS,
        clock: Clock | None = None,
        on_event: EventHook | None = None,
    ) -> None:
        super().__init__(store_for(pool), execute=execute, wake=wake, now=now,
                         lease_ms=lease_ms, renew_every_ms=renew_every_ms, clock=clock,
                         on_event=on_event)

    async def enqueue(self, conn: Any, job: Job) -> None:
        """Enqueue ``job`` inside the caller's open transaction on ``conn``.

        The caller owns BEGIN/COMMIT/ROLLBACK. An identical replay writes
        nothing; a conflicting one raises IngestConflict, and the database has
        already failed the caller's transaction (roll it back).
        """
        valid = validate_job(job)
        try:
            await conn.execute(sql.ENQUEUE, job_params(valid, self._db_now()))
        except Exception as error:
            if "tickwork_ingest_conflict" in str(error):
                raise IngestConflict(valid.job_id, ("cargo",)) from error
            raise


def purge_postgres_queues(select_text: str, values: Sequence[Any] = ()) -> tuple[str, list[Any]]:
    """``(statement, values)`` erasing every job (any state) of the queues a
    trusted one-column SELECT names, for the caller's own transaction.

    ``select_text`` uses psycopg ``%s`` placeholders for ``values``.
    """
    if not isinstance(select_text, str) or not select_text.strip():
        raise InvalidArgument("select_text", "must be a non-empty SQL SELECT")
    if not isinstance(values, Sequence) or isinstance(values, str):
        raise InvalidArgument("values", "must be a sequence of bound values")
    return sql.PURGE_QUEUES.format(select=select_text), list(values)
