"""Which package-owned migrations a shared database needs, and the error when it lacks them.

The shared runtimes never migrate (a migration tool does: ``wrangler d1
migrations apply``, psql, ...). Each migration file ends by recording its
number as ``schema_version`` in ``tickwork_meta``, and the runtime checks that
number before its first operation. The dialects share their first nine
migrations (same names); each has more of its own after those. A number
names one file within a dialect (the two dialects' lists are apart after
the ninth, and may both use a number for different files), a list may skip
numbers, and the version a database needs is the number of its dialect's
last migration: the ones it lacks are those numbered above the version it
has.
"""

from __future__ import annotations

from tickwork.model.errors import SchemaError

#: The migrations both dialects share (same names), in order.
SHARED_MIGRATIONS = ("0001_tickwork_jobs.sql", "0002_job_locks.sql",
                     "0003_settled_by_queue.sql", "0004_due_times.sql",
                     "0005_paused_queues.sql", "0006_retries.sql", "0007_schedules.sql",
                     "0008_error_summaries.sql", "0009_browse.sql")

#: The migrations of schema/d1, in order: the shared ones, then retention,
#: the history over time, the directory of owners (a table only D1 has:
#: on ``tickwork serve`` the data directory is the directory of owners),
#: concurrency limits, rate limits, and fair turns. A database that got
#: 0012 before 0011 existed takes 0011 after it, which leaves its version at 12.
MIGRATIONS = (*SHARED_MIGRATIONS, "0010_retention.sql", "0011_history.sql",
              "0012_owner_directory.sql", "0013_limits.sql", "0014_rate_limits.sql",
              "0015_turns.sql")

#: The migrations of schema/postgres, in order: the shared ones, then claims
#: locked per queue instead of behind one lock, the group commit's generic
#: plans, its claim walking again when it came up short, job ids in byte
#: order, retention, the history over time, concurrency limits, rate
#: limits, and fair turns in wide queues.
POSTGRES_MIGRATIONS = (*SHARED_MIGRATIONS, "0010_queue_claims.sql",
                       "0011_generic_claim_plans.sql", "0012_claim_passes.sql",
                       "0013_job_id_prefix.sql", "0014_retention.sql", "0015_history.sql",
                       "0016_limits.sql", "0017_rate_limits.sql", "0018_turns.sql")


def migration_number(name: str) -> int:
    """The number a migration file's name starts with (``0012_x.sql``: 12)."""
    return int(name.split("_", 1)[0])


#: The schema_version a D1 database has once every migration above has run.
SCHEMA_VERSION = migration_number(MIGRATIONS[-1])

#: The schema_version a PostgreSQL database has once POSTGRES_MIGRATIONS ran.
POSTGRES_SCHEMA_VERSION = migration_number(POSTGRES_MIGRATIONS[-1])


def check_schema_version(stored: int, *, database: str, folder: str, apply_with: str,
                         migrations: tuple[str, ...] = MIGRATIONS) -> None:
    """Raise SchemaError naming the migrations to apply, or the need to upgrade."""
    needed = migration_number(migrations[-1])
    if stored < needed:
        missing = ", ".join(name for name in migrations if migration_number(name) > stored)
        raise SchemaError(
            f"the {database} database has tickwork schema version {stored}, this package "
            f"needs {needed}: apply {missing} from {folder} ({apply_with}); "
            "opening a runtime never migrates"
        )
    if stored > needed:
        raise SchemaError(
            f"the {database} database has tickwork schema version {stored}; this package "
            f"understands up to {needed}: upgrade tickwork"
        )
