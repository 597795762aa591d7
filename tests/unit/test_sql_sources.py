"""One SQL source per dialect family: every SQLite-family statement renders and
compiles for each of its stores, and the owner-local DDL is pinned to schema/."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from tickwork.schemas import migrations, split_statements
from tickwork.stores import index_batching, owner_local
from tickwork.stores.d1 import store as d1_store
from tickwork.stores.owner_schema import (
    BATCHED_ENTRIES_SQL,
    BATCHED_QUEUE_ORDER_SQL,
    BROWSE_SQL,
    DUE_TIMES_SQL,
    ERROR_SUMMARIES_SQL,
    HISTORY_SQL,
    LIGHT_CHECKS_SQL,
    LIMITS_SQL,
    PAUSED_QUEUES_SQL,
    RATE_LIMITS_SQL,
    RETENTION_SQL,
    RETRIES_SQL,
    SCHEDULES_SQL,
    SCHEMA_SQL,
    SCHEMA_STATEMENTS,
    TURNS_SQL,
    UPGRADES,
)
from tickwork.stores.sql import sqlite as sql

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = [value for value in vars(sql).values() if isinstance(value, sql.Template)]
RENDERINGS = [(template, target) for template in TEMPLATES for target in template.targets]


def _id(case: tuple[sql.Template, sql.Target]) -> str:
    return f"{case[0].name}-{case[1].name}"


def database_for(target: sql.Target) -> sqlite3.Connection:
    connection = sqlite3.connect(":memory:")
    if target is sql.OWNER_LOCAL:
        connection.execute(SCHEMA_STATEMENTS[0])
        for step in UPGRADES:
            for statement in step:
                connection.execute(statement)
        # The index a store makes while a queue is wide (owner-local 0015).
        connection.execute(sql.LANE_ORDER_INDEX.render(sql.OWNER_LOCAL).text)
    else:
        for migration in migrations("d1"):
            for statement in migration.statements():
                connection.execute(statement)
    return connection


@pytest.mark.parametrize("case", RENDERINGS, ids=[_id(case) for case in RENDERINGS])
def test_every_statement_renders_and_compiles_for_each_of_its_stores(
        case: tuple[sql.Template, sql.Target]) -> None:
    template, target = case
    statement = template.render(target)
    text = statement.text
    if "{exclude}" in text:
        assert target is sql.OWNER_LOCAL, "only the owner-local store excludes its own claims"
        text = text.replace("{exclude}", f"AND claim_token NOT IN (?{len(statement.params) + 1})")
    assert "{" not in text and ":" not in re.sub(r"'[^']*'", "", text), text
    numbers = {int(n) for n in re.findall(r"\?(\d+)", text)}
    assert numbers <= set(range(1, len(statement.params) + 2)), (numbers, statement.params)
    # Every declared parameter the text uses is bound, in the declared order.
    assert list(statement.params) == [p for p in template.params if p in statement.params]
    # SQLite itself parses and plans it against that store's schema.
    database_for(target).execute("EXPLAIN " + text, [None] * max(numbers, default=0))


def test_the_stores_differ_only_in_the_clock_and_the_lease() -> None:
    """Expanded for both stores, a shared statement's texts are equal once the
    clock and the lease fragments are taken out, owner-local's filing
    (schema 0009: a settlement files its row, a redrive unfiles it) too, and
    the dead letters' outcome condition is written as each store's index
    states it, and a lane's running jobs are counted through each store's
    indexes (owner-local has no lane index: its 0013 says why), and so are
    the ready jobs of a rate-held key and of a lane in a line found."""
    def same_words(text: str) -> str:
        return " ".join(text.split())

    shared = [template for template in TEMPLATES if template.targets == (sql.OWNER_LOCAL, sql.D1)]
    assert {template.name for template in shared} >= {
        "claim_taking_turns", "claim_if_clear_taking_turns", "settle_next_cancelled",
        "record_cancellation",
        "select_cargo", "insert_job", "settle_claim",
        "requeue_claim", "settle_recovered_claim", "select_claim"}
    for template in shared:
        local = template.expand(sql.OWNER_LOCAL).replace("{exclude}", "")
        local = local.replace(", filed = 1", "").replace(", filed = 0", "").replace(sql.FILED, "")
        d1 = template.expand(sql.D1)
        for fragment in sql.lease_fragments():
            d1 = d1.replace(fragment, "")
        d1 = d1.replace(sql.D1.now, sql.OWNER_LOCAL.now)
        local, d1 = (text.replace(sql.DEAD_OUTCOME_LIST, sql.DEAD_OUTCOME_CHAIN)
                     for text in (local, d1))
        lane = "candidate.lane"
        d1 = d1.replace(sql.LANE_RUNNING_D1.format(lane=lane),
                        sql.LANE_RUNNING_LOCAL.format(lane=lane))
        d1 = d1.replace(sql.RATE_KEY_READY_D1, sql.RATE_KEY_READY_LOCAL)
        d1 = d1.replace(sql.LANE_RUNNING_D1.format(lane="turn.lane"),
                        sql.LANE_RUNNING_LOCAL.format(lane="turn.lane"))
        d1 = d1.replace(sql.lane_best_d1("turn.queue", "turn.lane"),
                        sql.lane_best_local("turn.queue", "turn.lane"))
        assert same_words(local) == same_words(d1), template.name


def test_both_stores_run_the_same_templates() -> None:
    # D1's claims always take turns; an owner's while it has a wide queue.
    taking_turns = owner_local.EVERY_JOB.taking_turns
    assert taking_turns is not None
    pairs = [
        (owner_local._FAIL_LANE, d1_store.FAIL_LANE),
        (index_batching.FILING.claim, d1_store.SETTLE),
        (owner_local._REQUEUE_CLAIM, d1_store.REQUEUE_EXPIRED),
        (owner_local._SETTLE_RECOVERED_CLAIM, d1_store.SETTLE_EXPIRED),
        (owner_local._RECORD_CANCELLATION, d1_store.RECORD_CANCELLATION),
        (owner_local._SELECT_CARGO, d1_store.SELECT_CARGO),
        (owner_local._SELECT_CLAIM, d1_store.SELECT_CLAIM),
        (taking_turns.claim_next, d1_store.CLAIM_ONE),
        (taking_turns.claim_next_if_clear, d1_store.CLAIM_IF_CLEAR),
        (owner_local.EVERY_JOB.settle_next_cancelled, d1_store.SETTLE_NEXT_CANCELLED),
    ]
    for local, d1 in pairs:
        assert local.name == d1.name


def test_a_template_refuses_a_store_it_was_not_written_for() -> None:
    with pytest.raises(ValueError, match="not a statement of the d1 store"):
        sql.TICK_PROBE.render(sql.D1)
    with pytest.raises(ValueError, match="not a statement of the owner-local store"):
        sql.RENEW.render(sql.OWNER_LOCAL)


def test_an_undeclared_parameter_is_refused_when_rendering() -> None:
    with pytest.raises(ValueError, match="not declared"):
        sql.Template("t", "SELECT :x").render(sql.OWNER_LOCAL)


# ---------------------------------------------------------------- the DDL


def test_the_owner_local_ddl_is_the_schema_file() -> None:
    folder = REPO / "schema" / "owner_local"
    assert (folder / "0001_tickwork_jobs.sql").read_text() == SCHEMA_SQL
    assert (folder / "0002_due_times.sql").read_text() == DUE_TIMES_SQL
    assert (folder / "0003_paused_queues.sql").read_text() == PAUSED_QUEUES_SQL
    assert (folder / "0004_retries.sql").read_text() == RETRIES_SQL
    assert (folder / "0005_schedules.sql").read_text() == SCHEDULES_SQL
    assert (folder / "0006_error_summaries.sql").read_text() == ERROR_SUMMARIES_SQL
    assert (folder / "0007_browse.sql").read_text() == BROWSE_SQL
    assert (folder / "0008_light_checks.sql").read_text() == LIGHT_CHECKS_SQL
    assert (folder / "0009_batched_entries.sql").read_text() == BATCHED_ENTRIES_SQL
    assert (folder / "0010_batched_queue_order.sql").read_text() == BATCHED_QUEUE_ORDER_SQL
    assert (folder / "0011_retention.sql").read_text() == RETENTION_SQL
    assert (folder / "0012_history.sql").read_text() == HISTORY_SQL
    assert (folder / "0013_limits.sql").read_text() == LIMITS_SQL
    assert (folder / "0014_rate_limits.sql").read_text() == RATE_LIMITS_SQL
    assert (folder / "0015_turns.sql").read_text() == TURNS_SQL
    assert sorted(path.name for path in folder.iterdir()) == [
        "0001_tickwork_jobs.sql", "0002_due_times.sql", "0003_paused_queues.sql",
        "0004_retries.sql", "0005_schedules.sql", "0006_error_summaries.sql",
        "0007_browse.sql", "0008_light_checks.sql", "0009_batched_entries.sql",
        "0010_batched_queue_order.sql", "0011_retention.sql", "0012_history.sql",
        "0013_limits.sql", "0014_rate_limits.sql", "0015_turns.sql"]
    assert list(SCHEMA_STATEMENTS) == split_statements(SCHEMA_SQL)
    assert list(UPGRADES[1]) == split_statements(DUE_TIMES_SQL)
    assert list(UPGRADES[2]) == split_statements(PAUSED_QUEUES_SQL)
    assert list(UPGRADES[3]) == split_statements(RETRIES_SQL)
    assert list(UPGRADES[4]) == split_statements(SCHEDULES_SQL)
    assert list(UPGRADES[5]) == split_statements(ERROR_SUMMARIES_SQL)
    assert list(UPGRADES[6]) == split_statements(BROWSE_SQL)
    assert list(UPGRADES[7]) == split_statements(LIGHT_CHECKS_SQL)
    assert list(UPGRADES[8]) == split_statements(BATCHED_ENTRIES_SQL)
    assert list(UPGRADES[9]) == split_statements(BATCHED_QUEUE_ORDER_SQL)
    assert list(UPGRADES[10]) == split_statements(RETENTION_SQL)
    assert list(UPGRADES[11]) == split_statements(HISTORY_SQL)
    assert list(UPGRADES[12]) == split_statements(LIMITS_SQL)
    assert list(UPGRADES[13]) == split_statements(RATE_LIMITS_SQL)
    assert list(UPGRADES[14]) == split_statements(TURNS_SQL)


def _objects(statements: list[str]) -> dict[str, str]:
    found = {}
    for statement in statements:
        words = " ".join(statement.replace("IF NOT EXISTS ", "").split())
        match = re.match(r"CREATE (?:UNIQUE )?(?:TABLE|INDEX|TRIGGER) \"?(\w+)", words)
        if match:
            found[match.group(1)] = words
    return found


def _columns(create_table: str) -> list[str]:
    body = create_table[create_table.index("(") + 1:]
    return [part.split()[0] for part in re.split(r",\s+(?![^()]*\))", body)
            if part.split() and part.split()[0] not in ("CHECK", "PRIMARY")]


def _schema_of(target: sql.Target) -> tuple[list[str], dict[str, str]]:
    """The job table's columns and every object's normalised DDL, once every
    migration of ``target``'s store has run."""
    connection = database_for(target)
    columns = [row[1] for row in connection.execute("PRAGMA table_info(tickwork_jobs)")]
    objects = _objects([row[0] for row in connection.execute(
        "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL")])
    return columns, objects


def test_the_owner_local_table_is_d1s_without_leases() -> None:
    local_columns, local = _schema_of(sql.OWNER_LOCAL)
    d1_columns, d1 = _schema_of(sql.D1)
    assert local_columns == [name for name in d1_columns if name != "lease_expires_at"] + [
        "listed", "filed"]
    # Indexes of the same name are the same index, but for the ones that
    # differ on purpose (schema/owner_local/0001_tickwork_jobs.sql,
    # 0008_light_checks.sql, 0009_batched_entries.sql and
    # 0010_batched_queue_order.sql say why; tickwork_jobs_queue_settled
    # differed until D1's 0008): owner-local's indexes of unsettled jobs hold
    # its unfiled rows, its history indexes its filed ones, and its queue
    # order index is D1's queue_waiting for its listed, unfiled rows.
    # (tickwork_jobs_running was UNIQUE on D1 until its 0013: a queue may
    # run several jobs at once now.)
    differ = {"tickwork_jobs_dead"}
    unsettled = {"tickwork_jobs_queue_pending", "tickwork_jobs_lane_pending"}
    history = {"tickwork_jobs_queue_settled", "tickwork_jobs_queue_outcomes",
               "tickwork_jobs_lane_settled"}
    for name in set(local) & set(d1) - differ - unsettled - history - {
            "tickwork_jobs", "tickwork_meta"}:
        assert local[name] == d1[name], name
    for name in unsettled:
        assert local[name] == d1[name].replace(sql.PENDING_STATES, sql.PENDING_LISTED), name
    for name in history:
        assert local[name] == d1[name].replace("state = 'settled'", "filed = 1"), name
    assert local["tickwork_jobs_dead"] == d1["tickwork_jobs_dead"].replace(
        sql.DEAD_OUTCOME_LIST, sql.DEAD_OUTCOME_CHAIN).replace("state = 'settled'", "filed = 1")
    assert local["tickwork_jobs_queue_order"] == d1["tickwork_jobs_queue_waiting"].replace(
        "tickwork_jobs_queue_waiting", "tickwork_jobs_queue_order").replace(
        "state = 'queued'", sql.PENDING_LISTED)
    # Owner-local's index of a lane's jobs in a queue (made by the store
    # while a queue is wide) is D1's index of its ready ones for its listed,
    # unfiled rows, with due_at in the key (the rows it holds are not all
    # ready).
    assert local["tickwork_jobs_lane_order"] == d1["tickwork_jobs_lane_ready"].replace(
        "tickwork_jobs_lane_ready", "tickwork_jobs_lane_order").replace(
        "lane, priority", "lane, due_at, priority").replace(
        "state = 'queued' AND cancellation_id IS NULL AND due_at IS NULL", sql.PENDING_LISTED)
    assert set(local) - set(d1) == {"tickwork_jobs_unfiled", "tickwork_jobs_queue_order",
                                    "tickwork_jobs_lane_order"}
    # The directory of owners (D1's 0012) is a table of D1 alone: an owner's
    # own storage is what its row summarises.
    owners = {"tickwork_owners", *(f"tickwork_owners_by_{sort}" for sort in (
        "queued", "running", "overdue", "dead_letters", "last_activity"))}
    # D1 indexes a lane's running jobs; an owner walks its few running
    # claims instead (owner-local 0013 says why).
    # D1's claims spend rate limits in a trigger, in their own statement; an
    # owner's store spends them in the claim's transaction (owner-local 0014
    # says why).
    # D1's lines are kept by triggers (producers insert jobs with their own
    # statements); an owner's store runs the same statements itself, only
    # while a queue is wide (owner-local 0015 says why).
    assert set(d1) - set(local) == {"tickwork_jobs_queue_waiting", "tickwork_jobs_lease",
                                    "tickwork_rate_limits_spend", "tickwork_jobs_lane_ready",
                                    "tickwork_turns_join_on_insert",
                                    "tickwork_turns_join_when_ready",
                                    "tickwork_turns_after_start",
                                    "tickwork_jobs_cargo_is_immutable", "tickwork_job_locks",
                                    "tickwork_job_locks_slots",
                                    "tickwork_job_locks_slots_completed",
                                    "tickwork_jobs_lane_running", *owners}


def test_d1s_line_triggers_run_the_statements_of_the_line() -> None:
    """D1's 0015 triggers run, for the row they fire on (NEW), the texts the
    owner-local store runs itself (joining, LEAVE_LINE, BACK_OF_LINE), with
    D1's index of ready jobs, and ask whether the queue is wide as the
    statements do."""
    def words(text: str) -> str:
        return " ".join(text.replace("( ", "(").split()).replace("( ", "(").replace(" )", ")")

    triggers = dict(database_for(sql.D1).execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
        " AND name LIKE 'tickwork_turns_%'").fetchall())
    bodies = {name: [words(part) for part in text[text.index("BEGIN") + 5:
                                                   text.rindex("END")].split(";")
                     if part.strip()] for name, text in triggers.items()}
    join = words(sql.join_line("NEW.queue", "NEW.lane"))
    assert bodies == {
        "tickwork_turns_join_on_insert": [join],
        "tickwork_turns_join_when_ready": [join],
        "tickwork_turns_after_start": [
            words(sql.leave_line("NEW.queue", "NEW.lane", sql.D1)),
            words(sql.back_of_line("NEW.queue", "NEW.lane", sql.D1))]}
    for text in triggers.values():
        assert words(sql.wide("NEW.queue")) in words(text)
