"""The 0002_job_locks migrations (and 0003 after them): what they create, and that they
fit the tools."""

from __future__ import annotations

import re

import pytest

from tests.locks.conftest import LockHarness
from tickwork.locks import table_ddl
from tickwork.schemas import migrations, split_statements


def normalised(statement: str) -> str:
    return " ".join(statement.replace('"', "").split())


@pytest.mark.parametrize(("dialect", "folder"), [("sqlite", "d1"), ("postgres", "postgres")])
def test_the_migration_creates_exactly_what_table_ddl_describes(dialect: str,
                                                                folder: str) -> None:
    names = [migration.name for migration in migrations(folder)]
    assert names == ["0001_tickwork_jobs.sql", "0002_job_locks.sql",
                     "0003_settled_by_queue.sql", "0004_due_times.sql",
                     "0005_paused_queues.sql", "0006_retries.sql", "0007_schedules.sql",
                     "0008_error_summaries.sql", "0009_browse.sql",
                     *(["0010_queue_claims.sql", "0011_generic_claim_plans.sql",
                        "0012_claim_passes.sql", "0013_job_id_prefix.sql",
                        "0014_retention.sql", "0015_history.sql", "0016_limits.sql",
                        "0017_rate_limits.sql", "0018_turns.sql"]
                       if folder == "postgres"
                       else ["0010_retention.sql", "0011_history.sql",
                             "0012_owner_directory.sql", "0013_limits.sql",
                             "0014_rate_limits.sql", "0015_turns.sql"])]
    migration = migrations(folder)[1]
    statements = migration.statements()
    assert statements == split_statements(migration.sql)
    assert [normalised(s) for s in statements[:-1]] == [
        normalised(s) for s in table_ddl(dialect)]
    assert statements[-1] == "UPDATE tickwork_meta SET value = '2' WHERE key = 'schema_version'"


@pytest.mark.parametrize("index", range(1, len(migrations("d1"))),
                         ids=[migration.name[:4] for migration in migrations("d1")[1:]])
def test_the_d1_migration_has_no_transaction_statements(index: int) -> None:
    migration = migrations("d1")[index]
    for statement in migration.statements():
        first = statement.split()[0].upper()
        assert first in ("CREATE", "UPDATE", "INSERT", "ALTER", "DROP"), statement
    # Not even in a comment; a trigger's body (BEGIN ... END, as in 0001) is
    # part of its CREATE TRIGGER, no transaction.
    outside_triggers = re.sub(r"CREATE TRIGGER .*?\bEND;", "", migration.sql, flags=re.DOTALL)
    for word in ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT"):
        assert re.search(rf"\b{word}\b", outside_triggers, re.IGNORECASE) is None, word


@pytest.mark.parametrize("locks", ["postgres", "d1-external", "d1-builtin"], indirect=True)
async def test_a_migrated_database_is_at_its_dialects_schema_version(
        locks: LockHarness) -> None:
    """Every migration ran (0003 to 0009 after the locks' 0002, PostgreSQL's
    own 0010 to 0013, retention (D1's 0010, PostgreSQL's 0014) and D1's
    directory of owners (0012)), and the lock tables are there."""
    rows = await locks.query("SELECT value FROM tickwork_meta WHERE key = 'schema_version'")
    # PostgreSQL's 0010 (claims locked per queue), 0011 (the group commit's
    # generic plans), 0012 (its claim's passes) and 0013 (job ids in byte
    # order) have no D1 counterpart; D1's 0012 (the owners) none in PostgreSQL.
    # History over time is D1's 0011 and PostgreSQL's 0015, concurrency
    # limits D1's 0013 and PostgreSQL's 0016, rate limits D1's 0014 and
    # PostgreSQL's 0017; fair turns D1's 0015 and PostgreSQL's 0018.
    assert rows == ([("18",)] if locks.kind == "postgres" else [("15",)])
    for table in ("tickwork_job_locks", "tickwork_job_locks_slots"):
        assert await locks.table_exists(table)
    if locks.kind == "postgres":
        rows = await locks.query("SELECT to_regclass('tickwork_jobs_queue_settled') IS NOT NULL")
    else:
        rows = await locks.query("SELECT count(*) FROM sqlite_master WHERE type = 'index'"
                                 " AND name = 'tickwork_jobs_queue_settled'")
    assert bool(rows[0][0])
