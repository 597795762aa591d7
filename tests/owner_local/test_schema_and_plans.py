"""The owner-local schema: created by the runtime itself, and the plans it gives."""

from __future__ import annotations

import dataclasses

import pytest

from tests.support import Harness, job
from tickwork import SchemaError
from tickwork.stores.sql import sqlite as sql


def test_runtime_construction_is_idempotent_and_keeps_data(harness: Harness) -> None:
    harness.runtime().ingest(job("a"))
    harness.open()
    rebuilt = harness.runtime()
    assert rebuilt.read("a") is not None
    assert rebuilt.ingest(job("a")) == "duplicate"


def test_queue_status_reads_one_queue_only(harness: Harness) -> None:
    runtime = harness.runtime()
    runtime.ingest_many([job(f"j{n}", queue=f"q{n % 3}") for n in range(30)])
    text = sql.QUEUE_STATUS_LOCAL.render(sql.OWNER_LOCAL).text
    plan = [row[-1] for row in harness.host_query("EXPLAIN QUERY PLAN " + text, ("q1",))]
    searches = [line for line in plan if "tickwork_jobs " in line]
    # queued and delayed (each: the queue order index, then the unlisted
    # rows by the primary key), running, settled (filed, and not filed yet)
    assert len(searches) == 7, plan
    assert all(line.startswith("SEARCH tickwork_jobs USING") for line in searches), plan
    used = " ".join(searches)
    for index in ("queue_order", "running", "queue_outcomes", "unfiled"):
        assert f"tickwork_jobs_{index} (queue=?)" in used, plan
    assert used.count("tickwork_jobs_queue_order (queue=?)") == 2, plan
    assert used.count("INTEGER PRIMARY KEY (rowid>?)") == 2, plan
    assert not any(line.startswith("SCAN tickwork_jobs") for line in plan), plan


def test_a_schema_newer_than_the_package_is_refused(harness: Harness) -> None:
    harness.runtime().ingest(job("a"))
    harness.host_transaction(lambda: harness.host_execute(
        "UPDATE tickwork_meta SET value = '99' WHERE key = 'schema_version'"))
    harness.open()
    with pytest.raises(SchemaError, match="schema version 99"):
        harness.runtime()


# ------------------------------------------------- upgrades of older databases

#: Rows as tickwork at schema version 1 stored them: a waiting job, a
#: running claim a dead process left, a settled job with its reason.
_VERSION_1_ROWS = """
INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, max_recoveries,
                           state, outcome, failure_reason, claim_token, recoveries,
                           cancellation_id, enqueued_at, started_at, settled_at)
VALUES ('waiting', 'q', 'lane', 3, '{"n":1}', NULL, 'queued', NULL, NULL, NULL, 0, NULL,
        10, NULL, NULL),
       ('left-running', 'r', 'lane', 0, '{}', 2, 'running', NULL, NULL, 'dead-1', 1, NULL,
        11, 12, NULL),
       ('settled', 'q', 'lane', 0, '[]', NULL, 'settled', 'failed', 'boom', NULL, 0, 'c-1',
        1, 2, 3)
"""


def _version_1_database(harness: Harness) -> list[tuple[object, ...]]:
    """Write the version 1 schema and rows the way tickwork 1 did; its rows."""
    from tickwork.stores.owner_schema import SCHEMA_STATEMENTS

    def write() -> None:
        for statement in SCHEMA_STATEMENTS:
            harness.host_execute(statement)
        harness.host_execute(
            "INSERT INTO tickwork_meta (key, value) VALUES ('schema_version', '1')")
        harness.host_execute(_VERSION_1_ROWS)

    harness.host_transaction(write)
    return harness.host_query("SELECT * FROM tickwork_jobs ORDER BY sequence")


async def test_a_version_1_database_is_upgraded_in_place_with_its_rows(harness: Harness) -> None:
    before = _version_1_database(harness)
    runtime = harness.runtime()
    assert harness.host_query(
        "SELECT value FROM tickwork_meta WHERE key = 'schema_version'") == [("15",)]
    after = harness.host_query("SELECT * FROM tickwork_jobs ORDER BY sequence")
    # Every value kept; the new columns (run_at, delay_ms, due_at; retry_json,
    # attempt, history_json; error_json) say "due at once, first attempt, no
    # retry policy, no history, no error kept", as every job of version 1 was;
    # 0009 lists every row and files the settled one (they are in the
    # indexes of unsettled jobs and of history).
    assert after == [(*tuple(row), None, None, None, None, 1, None, None, 1,
                      1 if row[1] == "settled" else 0) for row in before]
    settled = runtime.read("settled")
    assert settled is not None and (settled.outcome, settled.failure_reason) == ("failed", "boom")
    assert settled.error is None
    # A replay of a version 1 job is still a duplicate (its cargo is unchanged).
    assert runtime.ingest(job("waiting", lane="lane", priority=3, payload={"n": 1})) == \
        "duplicate"
    # The engine runs the old rows as before: the dead claim is recovered, the
    # waiting job runs; and the new columns work.
    assert runtime.ingest(job("later", delay_ms=60_000)) == "queued"
    harness.open()
    rebuilt = harness.runtime()  # a second open changes nothing
    assert harness.host_query("SELECT * FROM tickwork_jobs ORDER BY sequence")[:3] == after
    results = [await rebuilt.tick() for _ in range(3)]
    assert [(r.status, r.job_id) for r in results] == [
        ("requeued", "left-running"), ("settled", "waiting"), ("settled", "left-running")]
    assert (await rebuilt.tick()).status == "idle"  # "later" waits for its time
    # And what later versions added works on the upgraded database.
    from tickwork import Schedule, ScheduledJob

    assert rebuilt.put_schedule(Schedule("s", ScheduledJob("q", "lane"), every_ms=60_000)) == \
        "created"
    # It held settled jobs, so retention (0011) keeps them: a default of
    # "keep forever" until its owner chooses a policy.
    default = rebuilt.retention()[0]
    assert (default.queue, default.keep_completed_ms, default.keep_failed_ms) == (
        None, None, None)
    assert default.updated_at is not None
    # The version 1 failure is a dead letter: the new index holds old rows.
    assert [job.job_id for job in rebuilt.dead_letters("q").jobs] == ["settled"]
    # And it is listed by the browse indexes (0007), by queue and by lane.
    assert [job.job_id for job in rebuilt.list_jobs(
        "q", state="settled", outcome="failed").jobs] == ["settled"]
    assert [job.job_id for job in rebuilt.list_jobs(lane="lane", state="settled").jobs] == [
        "left-running", "waiting", "settled"]


def test_a_failed_upgrade_leaves_the_database_as_it_was(harness: Harness) -> None:
    before = _version_1_database(harness)
    # Something in the way of 0002 (a table where its new index goes): the
    # upgrade fails, and its one transaction rolls every step back.
    harness.host_transaction(lambda: harness.host_execute(
        "CREATE TABLE tickwork_jobs_due (x INTEGER)"))
    with pytest.raises(Exception, match="tickwork_jobs_due"):
        harness.runtime()
    assert harness.host_query(
        "SELECT value FROM tickwork_meta WHERE key = 'schema_version'") == [("1",)]
    assert harness.host_query("SELECT * FROM tickwork_jobs ORDER BY sequence") == before



def _version_7_database(harness: Harness) -> None:
    """The schema as tickwork at version 7 wrote it (before 0008 rebuilt the table)."""
    from tickwork.stores.owner_schema import SCHEMA_STATEMENTS, UPGRADES

    def write() -> None:
        for statement in SCHEMA_STATEMENTS:
            harness.host_execute(statement)
        for step in UPGRADES[1:7]:
            for statement in step:
                harness.host_execute(statement)
        harness.host_execute(
            "INSERT INTO tickwork_meta (key, value) VALUES ('schema_version', '7')")

    harness.host_transaction(write)


async def test_0008_rebuilds_the_table_keeping_rows_and_the_sequence_high_water_mark(
        harness: Harness) -> None:
    _version_7_database(harness)
    harness.host_transaction(lambda: harness.host_execute(_VERSION_1_ROWS))
    harness.host_transaction(lambda: harness.host_execute(
        "INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,"
        " enqueued_at) VALUES ('purged', 'q', 'lane', 0, '{}', 'queued', 20)"))
    # The newest job was purged: the AUTOINCREMENT counter is above every row.
    harness.host_transaction(lambda: harness.host_execute(
        "DELETE FROM tickwork_jobs WHERE job_id = 'purged'"))
    before = harness.host_query("SELECT * FROM tickwork_jobs ORDER BY sequence")
    runtime = harness.runtime()
    assert harness.host_query(
        "SELECT value FROM tickwork_meta WHERE key = 'schema_version'") == [("15",)]
    # Every row as it was (and, by 0009, listed, and filed if settled).
    kept = harness.host_query("SELECT * FROM tickwork_jobs ORDER BY sequence")
    assert [row[:-2] for row in kept] == before
    assert [row[-2:] for row in kept] == [(1, 1 if row[7] == "settled" else 0)
                                          for row in before]
    # A purged sequence is never reused: the next job comes after it.
    runtime.ingest(job("next"))
    fresh = runtime.read("next")
    assert fresh is not None and fresh.sequence == len(before) + 2
    # The constraints still hold, written without IN lists.
    for bad in ("UPDATE tickwork_jobs SET state = 'bogus' WHERE job_id = 'waiting'",
                "UPDATE tickwork_jobs SET outcome = 'bogus' WHERE job_id = 'settled'",
                "UPDATE tickwork_jobs SET outcome = NULL WHERE job_id = 'settled'",
                "UPDATE tickwork_jobs SET claim_token = NULL WHERE job_id = 'left-running'"):
        with pytest.raises(Exception, match="CHECK constraint failed"):
            harness.host_transaction(lambda bad=bad: harness.host_execute(bad))
    assert harness.host_query("SELECT * FROM tickwork_jobs ORDER BY sequence")[:3] == kept
    # The old rows are in the indexes 0008 made again (and 0009 after it).
    assert [j.job_id for j in runtime.dead_letters("q").jobs] == ["settled"]
    assert runtime.read_queue_head("q") is not None
    assert (await runtime.tick()).status == "requeued"  # the dead claim, as before


def test_0015_lines_up_the_lanes_of_the_queues_already_wide(harness: Harness) -> None:
    """A version 14 database with a wide queue: the upgrade gives it its
    line (lanes by their oldest ready job); its store then makes the index
    of a lane's jobs its claims read."""
    from tickwork.stores.owner_schema import SCHEMA_STATEMENTS, UPGRADES

    def write() -> None:
        harness.host_execute(SCHEMA_STATEMENTS[0])
        for step in UPGRADES[:14]:
            for statement in step:
                harness.host_execute(statement)
        harness.host_execute(
            "INSERT INTO tickwork_meta (key, value) VALUES ('schema_version', '14')")
        harness.host_execute(
            "INSERT INTO tickwork_limits (kind, key, max_running, updated_at)"
            " VALUES ('queue', 'wide', 3, 0), ('queue', 'serial', 1, 0), ('lane', 'B', 2, 0)")
        for job_id, queue, lane, due_at in (
                ("b0", "wide", "B", None), ("a0", "wide", "A", None), ("b1", "wide", "B", None),
                ("c0", "wide", "C", 99), ("s0", "serial", "S", None)):
            harness.host_execute(
                "INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,"
                " enqueued_at, due_at, listed) VALUES (?, ?, ?, 0, '{}', 'queued', 0, ?, 1)",
                (job_id, queue, lane, due_at))

    harness.host_transaction(write)
    runtime = harness.runtime()
    assert harness.host_query(
        "SELECT value FROM tickwork_meta WHERE key = 'schema_version'") == [("15",)]
    assert harness.host_query(
        "SELECT queue, lane FROM tickwork_turns ORDER BY queue, turn") == [
        ("wide", "B"), ("wide", "A")]
    assert runtime.ingest(job("a1", queue="wide", lane="A")) == "queued"
    assert harness.host_query("SELECT name FROM sqlite_master"
                              " WHERE name = 'tickwork_jobs_lane_order'") == [
        ("tickwork_jobs_lane_order",)]


def test_a_claim_taking_turns_walks_the_line_and_probes_each_lane(harness: Harness) -> None:
    """The claim of a wide queue reads its line through (queue, turn) and
    each lane's best job through the index of a lane's jobs (its due range),
    never the queue's backlog; the statements that keep the line too."""
    harness.runtime()
    from tickwork.stores import owner_local as store

    harness.host_execute(store._LANE_ORDER_INDEX.text)  # as while a queue is wide
    taking_turns = store.EVERY_JOB.taking_turns
    assert taking_turns is not None
    for statement in (taking_turns.claim_next, store._LEAVE_LINE, store._BACK_OF_LINE):
        text = statement.text.replace("{exclude}", "")
        plan = [row[-1] for row in harness.host_query(
            "EXPLAIN QUERY PLAN " + text, (None,) * len(statement.params))]
        assert any("tickwork_jobs_lane_order (queue=? AND lane=? AND due_at=?)" in line
                   for line in plan), (statement.name, plan)
        assert not any(line.startswith("SCAN tickwork_jobs") for line in plan), plan
        if statement is not store._BACK_OF_LINE:
            assert any("tickwork_turns_order (queue=?" in line for line in plan), plan


def test_ingest_claim_and_settle_build_no_temporary_b_tree(harness: Harness) -> None:
    """The statements of the hot path evaluate every CHECK and partial-index
    condition in place: none opens an ephemeral index (the b-tree of values an
    IN list of three or more builds on every execution; see
    0008_light_checks.sql). RETURNING's rows go through an ephemeral table,
    which has no key (P4 NULL), and are not what this is about."""
    harness.runtime()
    from tickwork.stores import owner_local as store
    from tickwork.stores.index_batching import DEFERRED, FILING

    hot = [store._INSERT_JOB_AT_ONCE, store._INSERT_JOB, store._REQUEUE_CLAIM,
           store._RETRY_CLAIM, store.EVERY_JOB.claim_next, store._CLAIMED_BY_TOKEN,
           store._INSERT_JOB_COUNTED, store._INSERT_JOB_AT_ONCE_COUNTED]
    # Every settlement, filing its row or (drain()'s) leaving it unfiled.
    hot += [getattr(family, field.name) for family in (FILING, DEFERRED)
            for field in dataclasses.fields(family)]
    assert store.EVERY_JOB.claim_next_if_clear_counted is not None
    hot.append(store.EVERY_JOB.claim_next_if_clear_counted)
    for statement in hot:
        text = statement.text.replace("{exclude}", "")
        program = harness.host_query("EXPLAIN " + text, (None,) * len(statement.params))
        value_trees = [row for row in program if row[1] == "OpenEphemeral" and row[5]]
        assert not value_trees, (statement.name, value_trees)


def test_a_page_of_jobs_by_id_prefix_is_a_range_of_the_job_id_index(harness: Harness) -> None:
    """Both statements of find_jobs search the job_id UNIQUE index between
    the prefix's bounds (no table scan, no sort), and find the same jobs as
    a plain startswith over every id."""
    runtime = harness.runtime()
    runtime.ingest_many([job(f"{kind}-{n:03}", queue=f"q{n % 3}")
                         for kind in ("order", "ordeR", "orders", "user") for n in range(25)])
    for template in (sql.JOBS_BY_ID_PREFIX_FIRST, sql.JOBS_BY_ID_PREFIX_NEXT):
        statement = template.render(sql.OWNER_LOCAL)
        low, high = sql.id_prefix_range("order-", 256)
        plan = [row[-1] for row in harness.host_query(
            "EXPLAIN QUERY PLAN " + statement.text, (low, high, 10))]
        assert len(plan) == 1, plan  # one search, no temp b-tree for the order
        assert plan[0].startswith("SEARCH tickwork_jobs USING INDEX sqlite_autoindex_"), plan
        assert "(job_id>? AND job_id<?)" in plan[0], plan
    found = runtime.find_jobs("order-", limit=100)
    assert [record.job_id for record in found.jobs] == [f"order-{n:03}" for n in range(25)]
    assert found.cursor is None


def test_every_page_of_list_jobs_is_an_index_range_at_200000_rows(harness: Harness) -> None:
    """Each listing's statement walks its index in the listing's order: no
    table scan and no sort, so a page costs O(log n + page) (here with
    200,000 settled, queued and running jobs in 1,000 queues and 50 lanes).
    A page of settled jobs also reads the settlements not filed yet (schema
    0009: a drain files them every FILE_EVERY), through their own index, and
    a page of queued ones the jobs not listed yet (the store lists them every
    LIST_EVERY inserts), through the primary key after LISTED_THROUGH; each
    sorts what it merges: the page's rows and those, never more."""
    runtime = harness.runtime()
    runtime.ingest(job("fresh"))
    harness.host_query("""
        WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 200000)
        INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,
                                   outcome, enqueued_at, started_at, settled_at, claim_token,
                                   filed, listed)
        SELECT 'old-' || n, 'q' || (n % 1000), 'lane' || (n % 50), 0, '{}',
               CASE WHEN n % 10 = 0 THEN 'queued' WHEN n % 997 = 0 THEN 'running'
                    ELSE 'settled' END,
               CASE WHEN n % 10 = 0 OR n % 997 = 0 THEN NULL
                    WHEN n % 7 = 0 THEN 'failed' ELSE 'completed' END,
               n, n, CASE WHEN n % 10 = 0 OR n % 997 = 0 THEN NULL ELSE n END,
               CASE WHEN n % 997 = 0 AND n % 10 <> 0 THEN 't' || n END,
               -- the newest 60 settlements are not filed yet, as a drain leaves them
               CASE WHEN n % 10 = 0 OR n % 997 = 0 OR n > 199940 THEN 0 ELSE 1 END,
               -- and the newest 50 rows not listed yet, as the store leaves them
               n <= 199950
        FROM c""", ())
    harness.host_query("""
        UPDATE tickwork_meta SET value = (
            SELECT max(sequence) FROM tickwork_jobs WHERE listed = 1)
        WHERE key = 'listed_through'""", ())
    for (by, state, _, newest), template in sql.LIST_JOBS_LOCAL.items():
        statement = template.render(sql.OWNER_LOCAL)
        values = {"value": "q7" if by == "queue" else "lane7", "outcome": "failed",
                  "after_settled": 0 if newest else -1, "after_sequence": 10**9 if newest
                  else 0, "limit": 50}
        plan = [row[-1] for row in harness.host_query(
            "EXPLAIN QUERY PLAN " + statement.text,
            tuple(values[name] for name in statement.params))]
        index = template.text.split("INDEXED BY ")[1].split()[0]
        if (by, state) == ("lane", "running"):
            # The one exception, by design: every running claim (as many as
            # run at once, never the backlog or the history), filtered.
            assert plan == [f"SCAN tickwork_jobs USING INDEX {index}",
                            "USE TEMP B-TREE FOR ORDER BY"], plan
            continue
        assert any(line.startswith(f"SEARCH tickwork_jobs USING INDEX {index} (") or
                   line.startswith(f"SEARCH tickwork_jobs USING COVERING INDEX {index} (")
                   for line in plan), (statement.name, plan)
        if state == "settled":
            # Beside the page of filed rows: the unfiled ones, from their own
            # index (all of them for a lane: its key starts with the queue),
            # and a sort of what the two give.
            unfiled = [line for line in plan if "tickwork_jobs_unfiled" in line]
            assert unfiled and all(line.startswith(("SEARCH", "SCAN")) for line in unfiled), (
                statement.name, plan)
            plan = [line for line in plan if line not in unfiled and "TEMP B-TREE" not in line]
        if state == "queued":
            # Beside the page of listed rows: the unlisted ones, a range of
            # the primary key after the sequence listed through (read from
            # tickwork_meta), and a sort of what the two give.
            unlisted = [line for line in plan if "INTEGER PRIMARY KEY (rowid>?" in line
                        or "tickwork_meta" in line]
            assert len(unlisted) == 2, (statement.name, plan)
            plan = [line for line in plan if line not in unlisted and "TEMP B-TREE" not in line]
        assert not any("TEMP B-TREE" in line or line.startswith("SCAN tickwork_jobs")
                       for line in plan), (statement.name, plan)
    # And the pages are the jobs they claim to be (the rows' rule, in Python).
    def state(n: int) -> str:
        return "queued" if n % 10 == 0 else "running" if n % 997 == 0 else "settled"

    newest = range(200000, 0, -1)
    failed = runtime.list_jobs("q7", state="settled", outcome="failed", limit=3)
    assert [r.job_id for r in failed.jobs] == [
        f"old-{n}" for n in newest
        if n % 1000 == 7 and state(n) == "settled" and n % 7 == 0][:3]
    # Pages that merge filed and unfiled settlements, newest and oldest first.
    for queue, lane in (("q943", None), (None, "lane43")):
        matches = [n for n in newest if state(n) == "settled"
                   and (n % 1000 == 943 if queue else n % 50 == 43)]
        page = runtime.list_jobs(queue, lane=lane, state="settled", limit=4)
        assert [r.job_id for r in page.jobs] == [f"old-{n}" for n in matches[:4]]
        assert any(n > 199940 for n in matches[:4]) and any(n <= 199940 for n in matches[:4])
        second = runtime.list_jobs(queue, lane=lane, state="settled", limit=4,
                                   cursor=page.cursor)
        assert [r.job_id for r in second.jobs] == [f"old-{n}" for n in matches[4:8]]
    # Pages that merge listed and unlisted queued jobs, newest and oldest first.
    for queue, lane in (("q960", None), (None, "lane10")):
        matches = [n for n in newest if state(n) == "queued"
                   and (n % 1000 == 960 if queue else n % 50 == 10)]
        for order, expected in (("newest", matches), ("oldest", matches[::-1])):
            pages = [runtime.list_jobs(queue, lane=lane, limit=4, order=order)]
            pages.append(runtime.list_jobs(queue, lane=lane, limit=4, order=order,
                                           cursor=pages[0].cursor))
            assert [r.job_id for page in pages for r in page.jobs] == [
                f"old-{n}" for n in expected[:8]]
        assert any(n > 199950 for n in matches[:4]) and any(n <= 199950 for n in matches[:4])
    running = runtime.list_jobs(lane="lane7", state="running")
    assert [r.job_id for r in running.jobs] == [
        f"old-{n}" for n in newest if n % 50 == 7 and state(n) == "running"][:50]
    assert running.jobs, "the rows hold running jobs of lane7"


def test_the_backlog_reads_unsettled_rows_only(harness: Harness) -> None:
    """The gauges' read walks the index of listed unsettled rows and the
    unlisted rows by the primary key: never the settled history."""
    runtime = harness.runtime()
    runtime.ingest_many([job(f"j{n}", queue=f"q{n % 3}") for n in range(30)])
    text = sql.BACKLOG_LOCAL.render(sql.OWNER_LOCAL).text
    plan = [row[-1] for row in harness.host_query("EXPLAIN QUERY PLAN " + text, ())]
    jobs = [line for line in plan if "tickwork_jobs " in line]
    assert any(line.startswith("SCAN tickwork_jobs USING INDEX tickwork_jobs_queue_order")
               for line in jobs), plan
    assert any("INTEGER PRIMARY KEY (rowid>?)" in line for line in jobs), plan
    assert len(jobs) == 2, plan
    # A redriven job's time is one probe of the redrives' primary key.
    assert "SEARCH redrive USING INDEX sqlite_autoindex_tickwork_redrives_1 (job_id=?)" in plan, \
        plan
    assert [(b.queue, b.ready) for b in runtime.backlog()] == [("q0", 10), ("q1", 10),
                                                                 ("q2", 10)]
