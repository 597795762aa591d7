"""Which package-owned migrations a shared database needs, and the error when it lacks them.

The shared runtimes never migrate (a migration tool does: ``wrangler d1
migrations apply``, psql, ...). Each migration file ends by recording its
number as ``schema_version`` in ``tickwork_meta``, and the runtime checks that
number before its first operation.
"""

from __future__ import annotations

from tickwork.model.errors import SchemaError

#: The migrations of schema/d1 and schema/postgres, in order (same names in both).
MIGRATIONS = ("0001_tickwork_jobs.sql", "0002_job_locks.sql", "0003_settled_by_queue.sql",
              "0004_due_times.sql", "0005_paused_queues.sql", "0006_retries.sql",
              "0007_schedules.sql", "0008_error_summaries.sql", "0009_browse.sql")

#: The schema_version a database has once every migration above has run.
SCHEMA_VERSION = len(MIGRATIONS)


def check_schema_version(stored: int, *, database: str, folder: str, apply_with: str) -> None:
    """Raise SchemaError naming the migrations to apply, or the need to upgrade."""
    if stored < SCHEMA_VERSION:
        missing = ", ".join(MIGRATIONS[stored:])
        raise SchemaError(
            f"the {database} database has tickwork schema version {stored}, this package "
            f"needs {SCHEMA_VERSION}: apply {missing} from {folder} ({apply_with}); "
            "opening a runtime never migrates"
        )
    if stored > SCHEMA_VERSION:
        raise SchemaError(
            f"the {database} database has tickwork schema version {stored}; this package "
            f"understands up to {SCHEMA_VERSION}: upgrade tickwork"
        )
