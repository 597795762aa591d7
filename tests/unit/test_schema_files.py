"""The package-owned schema files, as migration tools and runtimes see them."""

from __future__ import annotations

import pytest

from tickwork import InvalidArgument, SchemaError
from tickwork.schemas import migrations, split_statements
from tickwork.stores.schema_version import (
    MIGRATIONS,
    POSTGRES_MIGRATIONS,
    POSTGRES_SCHEMA_VERSION,
    SCHEMA_VERSION,
    SHARED_MIGRATIONS,
    check_schema_version,
    migration_number,
)


@pytest.mark.parametrize("dialect", ["d1", "postgres"])
def test_the_runtime_knows_every_migration_file_in_order(dialect: str) -> None:
    found = migrations(dialect)  # type: ignore[arg-type]
    assert tuple(migration.name for migration in found) == (
        MIGRATIONS if dialect == "d1" else POSTGRES_MIGRATIONS)
    numbers = [migration_number(migration.name) for migration in found]
    assert numbers == sorted(set(numbers)), "numbers rise, none twice"
    for number, migration in zip(numbers, found, strict=True):
        # Each migration records its own number, which is what runtimes check
        # (a dialect's list may skip numbers the other dialect's files use).
        assert f"'schema_version', '{number}'" in migration.sql or (
            f"SET value = '{number}'" in migration.sql), migration.name


def test_d1_migrations_hold_no_transaction_statements() -> None:
    for migration in migrations("d1"):
        for statement in migration.statements():
            first_word = statement.split()[0].upper()
            assert first_word not in {"BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE"}


def test_statements_split_on_top_level_semicolons_only() -> None:
    text = """
        -- a comment; with a semicolon
        CREATE TABLE t (a TEXT DEFAULT 'x;y');
        CREATE TRIGGER tr BEFORE UPDATE ON t FOR EACH ROW
        WHEN CASE WHEN OLD.a = 'b' THEN 1 ELSE 0 END
        BEGIN SELECT RAISE(ABORT, 'no; never'); SELECT 1; END;
        CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;
        CREATE FUNCTION g() RETURNS int LANGUAGE sql AS $body$ SELECT 2; $body$;
        INSERT INTO t VALUES ('it''s; fine')
    """
    statements = split_statements(text)
    assert [s.split()[0:2] for s in statements] == [
        ["CREATE", "TABLE"], ["CREATE", "TRIGGER"], ["CREATE", "FUNCTION"],
        ["CREATE", "FUNCTION"], ["INSERT", "INTO"]]
    assert statements[1].endswith("SELECT 1; END")


def test_the_migration_list_is_pinned() -> None:
    assert SHARED_MIGRATIONS == ("0001_tickwork_jobs.sql", "0002_job_locks.sql",
                                 "0003_settled_by_queue.sql", "0004_due_times.sql",
                                 "0005_paused_queues.sql", "0006_retries.sql",
                                 "0007_schedules.sql", "0008_error_summaries.sql",
                                 "0009_browse.sql")
    # D1 has retention as 0010, the history over time as 0011, the
    # directory of owners as 0012 (only D1 has it: on tickwork serve the
    # data directory is the directory, PostgreSQL holds only shared queues),
    # concurrency limits as 0013, rate limits as 0014 and fair turns as 0015.
    assert (*SHARED_MIGRATIONS, "0010_retention.sql", "0011_history.sql",
            "0012_owner_directory.sql", "0013_limits.sql", "0014_rate_limits.sql",
            "0015_turns.sql") == MIGRATIONS
    assert SCHEMA_VERSION == 15
    # PostgreSQL alone has 0010 (its claims lock per queue; D1 runs one
    # statement at a time and needs no lock), 0011 (plans of its function)
    # 0012 (its claim walking again when it came up short) and 0013 (job ids
    # in byte order: SQLite's job_id index sorts so already); retention is
    # its 0014, the history over time its 0015, concurrency limits its 0016,
    # rate limits its 0017 and fair turns its 0018.
    assert POSTGRES_MIGRATIONS[:-9] == SHARED_MIGRATIONS
    assert POSTGRES_MIGRATIONS[-9:] == ("0010_queue_claims.sql", "0011_generic_claim_plans.sql",
                                        "0012_claim_passes.sql", "0013_job_id_prefix.sql",
                                        "0014_retention.sql", "0015_history.sql",
                                        "0016_limits.sql", "0017_rate_limits.sql",
                                        "0018_turns.sql")
    assert POSTGRES_SCHEMA_VERSION == 18


@pytest.mark.parametrize("dialect", ["d1", "postgres"])
def test_0003_adds_only_the_settled_by_queue_index(dialect: str) -> None:
    migration = migrations(dialect)[2]  # type: ignore[arg-type]
    assert migration.name == "0003_settled_by_queue.sql"
    assert [" ".join(s.split()) for s in migration.statements()] == [
        "CREATE INDEX tickwork_jobs_queue_settled ON tickwork_jobs (queue, outcome)"
        " WHERE state = 'settled'",
        "UPDATE tickwork_meta SET value = '3' WHERE key = 'schema_version'",
    ]


def test_schema_errors_name_the_missing_migrations() -> None:
    with pytest.raises(SchemaError, match=r"apply 0001_tickwork_jobs\.sql, 0002_job_locks\.sql, "
                                          r"0003_settled_by_queue\.sql"):
        check_schema_version(0, database="D1", folder="schema/d1", apply_with="wrangler")
    with pytest.raises(SchemaError, match=r"apply 0002_job_locks\.sql, 0003_settled_by_queue"
                                          r"\.sql, 0004_due_times\.sql, 0005_paused_queues\.sql, "
                                          r"0006_retries\.sql, 0007_schedules\.sql, "
                                          r"0008_error_summaries\.sql, 0009_browse\.sql, "
                                          r"0010_retention\.sql, 0011_history\.sql, "
                                          r"0012_owner_directory\.sql, 0013_limits\.sql, "
                                          r"0014_rate_limits\.sql, 0015_turns\.sql "
                                          r"from schema/d1"):
        check_schema_version(1, database="D1", folder="schema/d1", apply_with="wrangler")
    with pytest.raises(SchemaError, match=r"version 2, this package needs 15: "
                                          r"apply 0003_settled_by_queue\.sql, "
                                          r"0004_due_times\.sql, 0005_paused_queues\.sql, "
                                          r"0006_retries\.sql, 0007_schedules\.sql, "
                                          r"0008_error_summaries\.sql, 0009_browse\.sql, "
                                          r"0010_retention\.sql, 0011_history\.sql, "
                                          r"0012_owner_directory\.sql, 0013_limits\.sql, "
                                          r"0014_rate_limits\.sql, 0015_turns\.sql "
                                          r"from schema/d1"):
        check_schema_version(2, database="D1", folder="schema/d1", apply_with="wrangler")
    # A database at 10 lacks only what is numbered above 10.
    with pytest.raises(SchemaError, match=r"version 10, this package needs 15: "
                                          r"apply 0011_history\.sql, 0012_owner_directory\.sql, "
                                          r"0013_limits\.sql, 0014_rate_limits\.sql, "
                                          r"0015_turns\.sql from schema/d1"):
        check_schema_version(10, database="D1", folder="schema/d1", apply_with="wrangler")
    check_schema_version(SCHEMA_VERSION, database="D1", folder="schema/d1", apply_with="x")
    with pytest.raises(SchemaError, match="upgrade tickwork"):
        check_schema_version(SCHEMA_VERSION + 1, database="D1", folder="x", apply_with="x")
    with pytest.raises(SchemaError, match=r"version 9, this package needs 18: apply "
                                          r"0010_queue_claims\.sql, 0011_generic_claim_plans"
                                          r"\.sql, 0012_claim_passes\.sql, "
                                          r"0013_job_id_prefix\.sql, 0014_retention\.sql, "
                                          r"0015_history\.sql, 0016_limits\.sql, "
                                          r"0017_rate_limits\.sql, 0018_turns\.sql "
                                          r"from schema/postgres"):
        check_schema_version(9, database="PostgreSQL", folder="schema/postgres",
                             apply_with="psql", migrations=POSTGRES_MIGRATIONS)


def test_an_unknown_dialect_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="dialect"):
        migrations("mysql")  # type: ignore[arg-type]
