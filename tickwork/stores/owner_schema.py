"""The owner-local schema, created and versioned by the runtime itself.

A Durable Object has no migration tool and no ``PRAGMA user_version``, so the
version lives in ``tickwork_meta`` and every runtime construction runs
``ensure_schema`` (idempotent; a handful of no-op statements once created).
"""

from __future__ import annotations

from tickwork.model.errors import SchemaError
from tickwork.ports.database import SyncDatabase

SCHEMA_VERSION = 1

# Column notes:
# * sequence: enqueue order. AUTOINCREMENT so a purged tail is never reused and
#   "after_sequence" paging stays monotonic. (Durable Object SQLite: public DO
#   code creates AUTOINCREMENT tables through ctx.storage.sql; Cloudflare's
#   docs do not mention it either way.)
# * claim_token: the private token of the latest claim. Kept after settlement;
#   every transition out of "running" is fenced on it, so a stale claim can
#   never settle or requeue a job another claim (or a refusal) already moved.
# * cancellation_id: the one durable cancellation a job can carry.
META_TABLE = """
    CREATE TABLE IF NOT EXISTS tickwork_meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    )
"""

SCHEMA_V1 = (
    """
    CREATE TABLE IF NOT EXISTS tickwork_jobs (
        sequence INTEGER PRIMARY KEY AUTOINCREMENT,
        job_id TEXT NOT NULL UNIQUE,
        queue TEXT NOT NULL,
        lane TEXT NOT NULL,
        priority INTEGER NOT NULL,
        payload_json TEXT NOT NULL,
        max_recoveries INTEGER,
        state TEXT NOT NULL CHECK (state IN ('queued', 'running', 'settled')),
        outcome TEXT CHECK (outcome IN
            ('completed', 'failed', 'cancelled', 'outcome_unknown', 'interrupted')),
        failure_reason TEXT,
        claim_token TEXT,
        recoveries INTEGER NOT NULL DEFAULT 0,
        cancellation_id TEXT,
        enqueued_at INTEGER NOT NULL,
        started_at INTEGER,
        settled_at INTEGER,
        CHECK ((state = 'settled') = (outcome IS NOT NULL)),
        CHECK (state <> 'running' OR claim_token IS NOT NULL)
    )
    """,
    # Claim scan: runnable jobs in global pick order (priority desc, oldest
    # first). The claim walks it from the front and stops at the first job
    # whose queue is free, so it costs O(log n), not O(queue depth).
    """
    CREATE INDEX IF NOT EXISTS tickwork_jobs_runnable
        ON tickwork_jobs (priority DESC, sequence)
        WHERE state = 'queued' AND cancellation_id IS NULL
    """,
    # A queue's waiting jobs in head order: read_queue_head, purge.
    """
    CREATE INDEX IF NOT EXISTS tickwork_jobs_queue_waiting
        ON tickwork_jobs (queue, priority DESC, sequence)
        WHERE state = 'queued'
    """,
    # Running claims are few; this makes "is this queue busy?" and the
    # recovery probe index lookups.
    """
    CREATE INDEX IF NOT EXISTS tickwork_jobs_running
        ON tickwork_jobs (queue)
        WHERE state = 'running'
    """,
    # Cancelled jobs still queued: settled by the next tick without running.
    """
    CREATE INDEX IF NOT EXISTS tickwork_jobs_cancel_pending
        ON tickwork_jobs (sequence)
        WHERE state = 'queued' AND cancellation_id IS NOT NULL
    """,
    # Lane refusal: a lane's unsettled jobs, oldest first. state is not in
    # the key, so a claim (queued -> running) does not touch this index.
    """
    CREATE INDEX IF NOT EXISTS tickwork_jobs_lane_pending
        ON tickwork_jobs (lane, sequence)
        WHERE state IN ('queued', 'running')
    """,
    # read_latest_settled_job.
    """
    CREATE INDEX IF NOT EXISTS tickwork_jobs_queue_settled
        ON tickwork_jobs (queue, settled_at, sequence)
        WHERE state = 'settled'
    """,
)


def ensure_schema(owner: SyncDatabase) -> None:
    """Create the tables on first use; refuse a schema newer than this package."""

    def apply() -> None:
        owner.execute(META_TABLE)
        rows = owner.query("SELECT value FROM tickwork_meta WHERE key = 'schema_version'")
        stored = int(rows[0][0]) if rows else 0
        if stored > SCHEMA_VERSION:
            raise SchemaError(
                f"the tickwork tables were written by schema version {stored}; this "
                f"package understands up to version {SCHEMA_VERSION}: upgrade tickwork"
            )
        if stored == SCHEMA_VERSION:
            return
        # Version 0 (nothing yet) -> 1. Later migrations append steps here and
        # run inside this same transaction.
        for statement in SCHEMA_V1:
            owner.execute(statement)
        owner.execute(
            "INSERT OR REPLACE INTO tickwork_meta (key, value) VALUES ('schema_version', ?)",
            (str(SCHEMA_VERSION),),
        )

    owner.atomic(apply)
