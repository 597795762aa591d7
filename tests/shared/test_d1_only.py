"""D1-specific behaviour: producer batches, enqueue_from_select, erasure, costs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import CountingWake, job
from tests.support.d1.fixtures import d1_binding
from tests.support.d1.miniflare import D1Bridge, D1Error
from tests.support.stores import apply_d1_schema
from tickwork import Completed, IngestConflict, InvalidArgument, JobRecord, SchemaError
from tickwork.runtimes.d1 import D1Runtime, purge_d1_queues
from tickwork.runtimes.shared import LeasedSignal
from tickwork.stores.d1 import store as d1_sql
from tickwork.stores.d1.binding import D1Binding
from tickwork.stores.sql.sqlite import id_prefix_range


@pytest.fixture(params=["external", "builtin"], ids=["d1-external", "d1-builtin"])
def db(request: pytest.FixtureRequest, d1_bridge: D1Bridge) -> Iterator[Any]:
    with d1_binding(d1_bridge, request.param) as binding:
        yield binding


async def _complete(job: JobRecord, signal: LeasedSignal) -> Completed:
    return Completed()


async def _runtime(db: Any) -> D1Runtime:
    await apply_d1_schema(db)
    await db.prepare("CREATE TABLE orders (id TEXT PRIMARY KEY, total INTEGER)").run()
    return D1Runtime(db, execute=_complete, wake=CountingWake())


async def _count(db: Any, table: str = "tickwork_jobs") -> int:
    row = await db.prepare(f"SELECT count(*) AS n FROM {table}").first("n")
    return int(row)


async def test_enqueue_commits_with_the_producers_own_rows(db: Any) -> None:
    runtime = await _runtime(db)
    order = db.prepare("INSERT INTO orders (id, total) VALUES (?1, ?2)").bind("o1", 40)
    await db.batch([order, runtime.enqueue(job("ship-o1", payload={"order": "o1"}))])
    assert await _count(db, "orders") == 1
    stored = await runtime.read("ship-o1")
    assert stored is not None and stored.payload == {"order": "o1"}
    # An identical replay in a later batch writes nothing and fails nothing.
    again = db.prepare("INSERT INTO orders (id, total) VALUES (?1, ?2)").bind("o2", 5)
    await db.batch([again, runtime.enqueue(job("ship-o1", payload={"order": "o1"}))])
    assert await _count(db, "orders") == 2
    assert await _count(db) == 1


async def test_a_conflicting_enqueue_fails_the_whole_batch(db: Any) -> None:
    runtime = await _runtime(db)
    await runtime.ingest(job("a", payload={"v": 1}))
    order = db.prepare("INSERT INTO orders (id, total) VALUES (?1, ?2)").bind("o1", 1)
    with pytest.raises(D1Error, match="tickwork_ingest_conflict"):
        await db.batch([order, runtime.enqueue(job("a", payload={"v": 2}))])
    assert await _count(db, "orders") == 0
    stored = await runtime.read("a")
    assert stored is not None and stored.payload == {"v": 1}


async def test_enqueue_from_select_depends_on_rows_inserted_earlier_in_the_batch(
    db: Any,
) -> None:
    runtime = await _runtime(db)
    insert_order = db.prepare(
        "INSERT INTO orders (id, total) VALUES (?1, ?2) ON CONFLICT DO NOTHING"
    )
    select = """
        SELECT 'ship-' || id AS job_id, 'shipping' AS queue_name, 'tenant-1' AS lane,
               total AS priority, json_object('order', id) AS payload_json,
               ?2 AS recovery_max
        FROM orders WHERE id = ?1 AND total > 10"""
    statements = [
        insert_order.bind("big", 50),
        runtime.enqueue_from_select(select, ["big", 3]),
        insert_order.bind("small", 5),
        runtime.enqueue_from_select(select, ["small", None]),
    ]
    await db.batch(statements)
    big = await runtime.read("ship-big")
    assert big is not None
    assert (big.queue, big.lane, big.priority, big.payload) == (
        "shipping", "tenant-1", 50, {"order": "big"})
    assert big.recovery is not None and big.recovery.max_recoveries == 3
    assert await runtime.read("ship-small") is None  # its SELECT produced no row
    # Replaying the same batch is a no-op...
    await db.batch([insert_order.bind("big", 50), runtime.enqueue_from_select(select, ["big", 3])])
    assert await _count(db) == 1
    # ...and a replay with other cargo fails its whole batch.
    with pytest.raises(D1Error, match="tickwork_ingest_conflict"):
        await db.batch([
            db.prepare("INSERT INTO orders (id, total) VALUES ('other', 1)"),
            runtime.enqueue_from_select(select, ["big", 4]),
        ])
    assert await _count(db, "orders") == 2


async def test_enqueue_from_select_rows_are_checked_by_the_schema(db: Any) -> None:
    runtime = await _runtime(db)
    bad_rows = {
        "empty id": "SELECT '' AS job_id, 'q' AS queue_name, 'l' AS lane, 0 AS priority,"
                    " '{}' AS payload_json, NULL AS recovery_max",
        "bad json": "SELECT 'a' AS job_id, 'q' AS queue_name, 'l' AS lane, 0 AS priority,"
                    " '{nope' AS payload_json, NULL AS recovery_max",
        "real priority": "SELECT 'a' AS job_id, 'q' AS queue_name, 'l' AS lane, 1.5 AS priority,"
                         " '{}' AS payload_json, NULL AS recovery_max",
        "negative budget": "SELECT 'a' AS job_id, 'q' AS queue_name, 'l' AS lane, 0 AS priority,"
                           " '{}' AS payload_json, -1 AS recovery_max",
    }
    for name, select in bad_rows.items():
        with pytest.raises(D1Error):
            await db.batch([runtime.enqueue_from_select(select, [])])
        assert await _count(db) == 0, name


async def test_enqueue_from_select_validates_its_arguments(db: Any) -> None:
    runtime = await _runtime(db)
    with pytest.raises(InvalidArgument, match="values"):
        runtime.enqueue_from_select("SELECT ?1, ?2", [1])
    with pytest.raises(InvalidArgument, match="text"):
        runtime.enqueue_from_select("   ", [])
    with pytest.raises(InvalidArgument, match="placeholders"):
        runtime.enqueue_from_select("SELECT ?1, ?", [1, 2])
    with pytest.raises(InvalidArgument, match="100"):
        runtime.enqueue_from_select(
            "SELECT " + ", ".join(f"?{n}" for n in range(1, 101)), list(range(100)))


async def test_purge_d1_queues_erases_every_state_of_the_named_queues(db: Any) -> None:
    runtime = await _runtime(db)
    for queue in ("tenant-1:a", "tenant-1:b", "tenant-2:a"):
        await runtime.ingest(job(f"{queue}-done", queue=queue))
        await runtime.ingest(job(f"{queue}-waiting", queue=queue))
    for _ in range(3):
        await runtime.tick()
    erase = purge_d1_queues(
        db, "SELECT DISTINCT queue FROM tickwork_jobs WHERE queue LIKE ?1", ["tenant-1:%"])
    await db.batch([erase])
    assert await _count(db) == 2


async def test_a_missing_schema_names_the_migration_to_apply(db: Any) -> None:
    runtime = D1Runtime(db, execute=_complete, wake=CountingWake())
    with pytest.raises(SchemaError, match=r"0001_tickwork_jobs\.sql"):
        await runtime.tick()
    with pytest.raises(SchemaError, match="wrangler d1 migrations apply"):
        await runtime.ingest(job("a"))


async def test_operation_costs_in_round_trips(db: Any) -> None:
    """The costs the benchmark prints, pinned: a tick is claim + settle. A
    runtime's first tick also reads once when the next schedule slot comes
    (then again every SCHEDULE_LOOK_MS, or when a slot has come)."""
    runtime = await _runtime(db)
    await runtime.has_pending_work()  # the one-time schema check
    costs = {}
    for name, operation in (
        ("ingest", lambda: runtime.ingest(job("a"))),
        ("first tick", runtime.tick),
        ("again", lambda: runtime.ingest(job("b"))),
        ("tick", runtime.tick),
        ("idle tick", runtime.tick),
        ("cancel", lambda: runtime.cancel("a", "c")),
        ("fail_lane", lambda: runtime.fail_lane("lane", "r")),
    ):
        before = db.stats.snapshot()
        await operation()
        costs[name] = db.stats.since(before).round_trips
    assert costs == {"ingest": 1, "first tick": 3, "again": 1, "tick": 2, "idle tick": 1,
                     "cancel": 1, "fail_lane": 1}


async def test_drain_costs_one_round_trip_per_job(db: Any) -> None:
    """A worker loop's settlement and next claim travel in one batch."""
    runtime = await _runtime(db)
    for index in range(10):
        await runtime.ingest(job(f"j{index}", queue=f"q{index}"))
    before = db.stats.snapshot()
    results = await runtime.drain()
    assert len(results) == 10
    # the runtime's one read of its next schedule slot, the first claim, 10
    # settle-and-claim batches, and the idle tick that ends it
    assert db.stats.since(before).round_trips == 13
    before = db.stats.snapshot()
    for index in range(10):
        await runtime.ingest(job(f"k{index}", queue=f"q{index}"))
    ingested = db.stats.since(before).round_trips
    assert len(await runtime.drain()) == 10
    assert db.stats.since(before).round_trips - ingested == 12  # and no more reads


async def test_ingest_many_costs_one_round_trip(db: Any) -> None:
    """The whole list travels in one batch; a conflict costs one read more to name it."""
    runtime = await _runtime(db)
    await runtime.has_pending_work()  # the one-time schema check
    jobs = [job(f"j{n}", queue=f"q{n % 3}") for n in range(100)]
    costs = {}
    for name, batch in (("new", jobs), ("replayed", jobs), ("mixed", [jobs[0], job("x")])):
        before = db.stats.snapshot()
        await runtime.ingest_many(batch)
        costs[name] = db.stats.since(before).round_trips
    before = db.stats.snapshot()
    with pytest.raises(IngestConflict) as conflict:
        await runtime.ingest_many([job("y"), job("j1", queue="q1", priority=5)])
    assert (conflict.value.job_id, conflict.value.fields) == ("j1", ("priority",))
    costs["conflict"] = db.stats.since(before).round_trips
    assert costs == {"new": 1, "replayed": 1, "mixed": 1, "conflict": 2}
    assert await _count(db) == 101
    for name, operation in (("status", runtime.status),
                            ("queue_status", lambda: runtime.queue_status("q1"))):
        before = db.stats.snapshot()
        await operation()
        assert db.stats.since(before).round_trips == 1, name


async def test_ingest_many_with_before_is_one_round_trip_and_one_transaction(db: Any) -> None:
    """The producer's own statements go first in the jobs' batch: one round trip,
    and they commit with the jobs or not at all."""
    runtime = await _runtime(db)
    await runtime.has_pending_work()  # the one-time schema check
    order = db.prepare("INSERT INTO orders (id, total) VALUES (?1, ?2)")
    before = db.stats.snapshot()
    statuses = await runtime.ingest_many([job("a", payload={"v": 1}), job("b")],
                                         before=[order.bind("o1", 10)])
    assert statuses == ["queued", "queued"]
    assert db.stats.since(before).round_trips == 1
    assert (await _count(db, "orders"), await _count(db)) == (1, 2)

    # A replay reports duplicates (the statement's own result is not a status).
    before = db.stats.snapshot()
    statuses = await runtime.ingest_many([job("a", payload={"v": 1}), job("c")],
                                         before=[order.bind("o2", 20)])
    assert statuses == ["duplicate", "queued"]
    assert db.stats.since(before).round_trips == 1
    assert (await _count(db, "orders"), await _count(db)) == (2, 3)

    # A conflicting job rolls the statement back (and is named)...
    with pytest.raises(IngestConflict) as conflict:
        await runtime.ingest_many([job("d"), job("a", payload={"v": 2})],
                                  before=[order.bind("o3", 30)])
    assert (conflict.value.job_id, conflict.value.fields) == ("a", ("payload",))
    # ...and a failing statement stores no job.
    with pytest.raises(D1Error, match="UNIQUE"):
        await runtime.ingest_many([job("e")], before=[order.bind("o1", 99)])
    assert (await _count(db, "orders"), await _count(db)) == (2, 3)
    assert await runtime.read("d") is None and await runtime.read("e") is None
    stored = await runtime.read("a")
    assert stored is not None and stored.payload == {"v": 1}


async def test_ingest_many_before_must_be_a_list_of_statements(db: Any) -> None:
    runtime = await _runtime(db)
    with pytest.raises(InvalidArgument, match="before"):
        await runtime.ingest_many([job("a")], before="INSERT INTO orders VALUES ('x', 1)")
    assert await _count(db) == 0


async def _thirty_queued_and_a_settled_history(runtime: Any, db: Any) -> None:
    """30 queued jobs over q0..q2, and 3,000 settled ones over q0..q299 (a
    third failed), written directly."""
    await runtime.ingest_many([job(f"j{n}", queue=f"q{n % 3}") for n in range(30)])
    await db.prepare("""
        WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 3000)
        INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,
                                   outcome, enqueued_at, started_at, settled_at)
        SELECT 'old-' || n, 'q' || (n % 300), 'lane', 0, '{}', 'settled',
               CASE WHEN n % 3 = 0 THEN 'failed' ELSE 'completed' END, n, n, n FROM c
    """).run()


async def test_queue_status_counts_every_state_from_indexes_only(db: Any) -> None:
    """Queued, running and settled counts each come from a covering index
    (settled ones from 0009's queue_outcomes): no statement scans the table."""
    runtime = await _runtime(db)
    await _thirty_queued_and_a_settled_history(runtime, db)
    plan = await D1Binding(db).query("EXPLAIN QUERY PLAN " + d1_sql.QUEUE_STATUS.text, ["q1"])
    text = "\n".join(str(row[-1]) for row in plan)
    assert "USING COVERING INDEX tickwork_jobs_queue_waiting (queue=?)" in text, text
    assert "tickwork_jobs_running (queue=?)" in text, text
    assert "USING COVERING INDEX tickwork_jobs_queue_outcomes (queue=?)" in text, text
    assert "SCAN tickwork_jobs" not in text, text
    status = await runtime.queue_status("q1")
    assert (status.queued, status.running, status.settled) == (10, 0, 10)
    assert (status.outcomes["completed"], status.outcomes["failed"]) == (10, 0)
    status = await runtime.queue_status("q3")
    assert (status.queued, status.settled, status.outcomes["failed"]) == (0, 10, 10)


async def test_the_backlog_reads_unsettled_rows_only_on_d1(db: Any) -> None:
    """The gauges' read walks the index of queued and running rows in queue
    order (no sort for the groups), never the settled history."""
    runtime = await _runtime(db)
    await _thirty_queued_and_a_settled_history(runtime, db)
    plan = await D1Binding(db).query("EXPLAIN QUERY PLAN " + d1_sql.BACKLOG.text, [])
    text = "\n".join(str(row[-1]) for row in plan)
    assert "SCAN tickwork_jobs USING INDEX tickwork_jobs_queue_pending" in text, text
    assert "TEMP B-TREE" not in text, text
    assert [(b.queue, b.ready) for b in await runtime.backlog()] == [
        ("q0", 10), ("q1", 10), ("q2", 10)]


async def test_every_page_of_list_jobs_is_an_index_range_on_d1(db: Any) -> None:
    """On D1's engine too, each listing's statement walks the index it names
    in its order (no table scan, no sort): a page reads O(log n + page) rows,
    which D1 bills."""
    runtime = await _runtime(db)
    await db.prepare("""
        WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 3000)
        INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,
                                   outcome, enqueued_at, started_at, settled_at)
        SELECT 'old-' || n, 'q' || (n % 30), 'lane' || (n % 7), 0, '{}',
               CASE WHEN n % 10 = 0 THEN 'queued' ELSE 'settled' END,
               CASE WHEN n % 10 = 0 THEN NULL WHEN n % 3 = 0 THEN 'failed'
                    ELSE 'completed' END, n, n, CASE WHEN n % 10 = 0 THEN NULL ELSE n END
        FROM c
    """).run()
    for (by, state, _, newest), statement in d1_sql.LIST_JOBS.items():
        values = {"value": "q7" if by == "queue" else "lane3", "outcome": "failed",
                  "after_settled": 10**9 if newest else -1,
                  "after_sequence": 10**9 if newest else 0, "limit": 50}
        plan = [str(row[-1]) for row in await D1Binding(db).query(
            "EXPLAIN QUERY PLAN " + statement.text, [values[n] for n in statement.params])]
        index = statement.text.split("INDEXED BY ")[1].split()[0]
        if (by, state) == ("lane", "running"):  # every running claim, filtered
            assert plan == [f"SCAN tickwork_jobs USING INDEX {index}",
                            "USE TEMP B-TREE FOR ORDER BY"], plan
            continue
        assert plan and plan[0].startswith(f"SEARCH tickwork_jobs USING INDEX {index} ("), (
            statement.name, plan)
        assert len(plan) == 1, (statement.name, plan)  # no sort
    page = await runtime.list_jobs(lane="lane3", state="settled", outcome="failed", limit=2)
    assert [r.job_id for r in page.jobs] == [
        f"old-{n}" for n in range(3000, 0, -1) if n % 7 == 3 and n % 10 and n % 3 == 0][:2]


async def test_a_page_of_jobs_by_id_prefix_is_a_range_of_the_job_id_index_on_d1(
        db: Any) -> None:
    """On D1's engine, both find_jobs statements search the job_id UNIQUE
    index between the prefix's bounds, in its order (no scan, no sort)."""
    runtime = await _runtime(db)
    await db.prepare("""
        WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 3000)
        INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,
                                   enqueued_at)
        SELECT CASE n % 3 WHEN 0 THEN 'order-' WHEN 1 THEN 'ordeR-' ELSE 'user-' END || n,
               'q' || (n % 30), 'lane' || (n % 7), 0, '{}', 'queued', n
        FROM c
    """).run()
    low, high = id_prefix_range("order-1", 256)
    for statement in (d1_sql.JOBS_BY_ID_PREFIX_FIRST, d1_sql.JOBS_BY_ID_PREFIX_NEXT):
        plan = [str(row[-1]) for row in await D1Binding(db).query(
            "EXPLAIN QUERY PLAN " + statement.text, [low, high, 50])]
        assert len(plan) == 1, plan
        assert plan[0].startswith("SEARCH tickwork_jobs USING INDEX sqlite_autoindex_"), plan
        assert "(job_id>? AND job_id<?)" in plan[0], plan
    page = await runtime.find_jobs("order-1", limit=3)
    assert [r.job_id for r in page.jobs] == sorted(
        f"order-{n}" for n in range(3, 3001, 3) if str(n).startswith("1"))[:3]


async def test_a_database_without_0004_is_refused_then_upgraded_with_its_rows(db: Any) -> None:
    """A database at version 3 with real rows: refused (naming 0004 to 0006,
    nothing written) until they run; then every row is intact and runs as before."""
    from tickwork.schemas import migrations

    for migration in migrations("d1")[:3]:
        for statement in migration.statements():
            await db.prepare(statement).run()
    await db.prepare(OLD_ROWS).run()
    before = await D1Binding(db).query("SELECT * FROM tickwork_jobs ORDER BY sequence")
    runtime = D1Runtime(db, execute=_complete, wake=CountingWake())
    with pytest.raises(SchemaError, match=r"version 3, this package needs 15: "
                                          r"apply 0004_due_times\.sql, 0005_paused_queues\.sql, "
                                          r"0006_retries\.sql, 0007_schedules\.sql, "
                                          r"0008_error_summaries\.sql, 0009_browse\.sql, "
                                          r"0010_retention\.sql, 0011_history\.sql, "
                                          r"0012_owner_directory\.sql, 0013_limits\.sql, "
                                          r"0014_rate_limits\.sql, 0015_turns\.sql "
                                          r"from schema/d1"):
        await runtime.ingest(job("a"))
    assert await _count(db) == 2
    for migration in migrations("d1")[3:]:
        for statement in migration.statements():
            await db.prepare(statement).run()
    after = await D1Binding(db).query(
        "SELECT * FROM tickwork_jobs ORDER BY sequence")
    # New columns NULL (due at once, no retry policy, no history, no error
    # kept), and every job on its first attempt.
    assert [(*row, None, None, None, None, 1, None, None) for row in before] == after
    assert await runtime.ingest(job("old-queued", payload={"n": 1})) == "duplicate"
    assert await runtime.ingest(job("later", delay_ms=60_000)) == "queued"
    result = await runtime.tick()
    assert (result.job_id, result.outcome) == ("old-queued", "completed")
    assert (await runtime.tick()).status == "idle"  # "later" waits
    # It held a settled job, so retention keeps its history: a default of
    # "keep forever" until its owner chooses a policy, and a prune deletes nothing.
    default = (await runtime.retention())[0]
    assert (default.queue, default.keep_completed_ms, default.keep_failed_ms) == (
        None, None, None)
    assert (await runtime.prune()) == 0


OLD_ROWS = """INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,
                           outcome, enqueued_at, started_at, settled_at)
VALUES ('old-queued', 'q', 'lane', 0, '{"n":1}', 'queued', NULL, 5, NULL, NULL),
       ('old-settled', 'q', 'lane', 0, '{}', 'settled', 'completed', 1, 2, 3)"""


async def test_replays_across_ingest_and_enqueue_from_select_ignore_key_order(db: Any) -> None:
    """enqueue_from_select keeps the producer's JSON text ({"b":..,"a":..});
    ingest stores sorted keys. A replay through the other path is the same job."""
    from tickwork import Job

    runtime = await _runtime(db)
    select = """SELECT ?1 AS job_id, 'q' AS queue_name, 'l' AS lane, 0 AS priority,
                       json_object('b', 1, 'a', json_array(2.5, json_object('y', 1, 'x', 'é')))
                       AS payload_json, NULL AS recovery_max"""
    payload = {"a": [2.5, {"x": "é", "y": 1}], "b": 1}
    # enqueue_from_select first, then ingest / ingest_many / enqueue of the same job.
    await db.batch([runtime.enqueue_from_select(select, ["sel-first"])])
    assert await runtime.ingest(Job("sel-first", "q", "l", 0, payload)) == "duplicate"
    assert await runtime.ingest_many([Job("sel-first", "q", "l", 0, payload)]) == ["duplicate"]
    await db.batch([runtime.enqueue(Job("sel-first", "q", "l", 0, payload))])
    # ingest first, then the producer's batch replays it in its own key order.
    assert await runtime.ingest(Job("ingest-first", "q", "l", 0, payload)) == "queued"
    await db.batch([runtime.enqueue_from_select(select, ["ingest-first"])])
    assert await _count(db) == 2
    for job_id in ("sel-first", "ingest-first"):
        record = await runtime.read(job_id)
        assert record is not None and record.payload == payload


@pytest.mark.parametrize("other", [
    {"a": [2.5, {"x": "é", "y": 2}], "b": 1},    # a value differs
    {"a": [2.5, {"x": "é", "y": 1.0}], "b": 1},  # 1 is not 1.0
    {"a": [{"x": "é", "y": 1}, 2.5], "b": 1},    # array order matters
    {"a": [2.5, {"x": "é", "y": 1}], "b": 1, "c": None},
])
async def test_a_different_payload_still_conflicts_across_both_paths(
    db: Any, other: dict[str, Any],
) -> None:
    from tickwork import Job

    runtime = await _runtime(db)
    select = """SELECT 'j' AS job_id, 'q' AS queue_name, 'l' AS lane, 0 AS priority,
                       json_object('b', 1, 'a', json_array(2.5, json_object('y', 1, 'x', 'é')))
                       AS payload_json, NULL AS recovery_max"""
    await db.batch([runtime.enqueue_from_select(select, [])])
    with pytest.raises(IngestConflict) as conflict:
        await runtime.ingest(Job("j", "q", "l", 0, other))
    assert conflict.value.fields == ("payload",)
    with pytest.raises(D1Error, match="tickwork_ingest_conflict"):
        await db.batch([runtime.enqueue(Job("j", "q", "l", 0, other))])
    # and the other way round: the producer's replay conflicts with an ingested job
    await runtime.ingest(Job("k", "q", "l", 0, other))
    with pytest.raises(D1Error, match="tickwork_ingest_conflict"):
        await db.batch([runtime.enqueue_from_select(select.replace("'j'", "'k'"), [])])


async def test_enqueue_from_select_takes_anonymous_placeholders(db: Any) -> None:
    runtime = await _runtime(db)
    await db.prepare("INSERT INTO orders (id, total) VALUES ('o-1', 70), ('o-2', 5)").run()
    # A "?" inside a string literal, a quoted identifier or a comment is text.
    select = """SELECT 'ship-' || id AS job_id, 'shipping?' AS queue_name, ? AS lane,
                       total AS priority, json_object('order', id, "?", 1) AS payload_json,
                       ? AS recovery_max -- why? because
                FROM orders WHERE total > ?"""
    await db.batch([runtime.enqueue_from_select(select, ["tenant-1", 2, 10])])
    record = await runtime.read("ship-o-1")
    assert record is not None
    assert (record.queue, record.lane, record.priority) == ("shipping?", "tenant-1", 70)
    assert record.recovery is not None and record.recovery.max_recoveries == 2
    assert await runtime.read("ship-o-2") is None
    with pytest.raises(InvalidArgument, match="values"):
        runtime.enqueue_from_select("SELECT ?, ? FROM orders", [1])
    # Erasure takes them too.
    await db.batch([purge_d1_queues(db, "SELECT ? AS q", ["shipping?"])])
    assert await _count(db) == 0


async def test_filling_a_schedules_slots_costs_one_batch(db: Any) -> None:
    """When a slot has come: one read of when, one of the due schedules, then
    one batch with the slots' jobs, the advance and the next slot; after
    it, a look finds nothing due in one read."""
    from tests.support.shared import ManualNow
    from tickwork import Schedule, ScheduledJob

    await apply_d1_schema(db)
    now = ManualNow()
    runtime = D1Runtime(db, execute=_complete, wake=CountingWake(), now=now)
    await runtime.put_schedule(Schedule("beat", ScheduledJob("q", "q"), every_ms=60_000,
                                        catch_up=5))
    now.advance(10 * 60_000)
    costs = {}
    for name in ("fire", "fire again"):
        before = db.stats.snapshot()
        created = await runtime.fire_schedules()
        costs[name] = (db.stats.since(before).round_trips, created)
    assert costs == {"fire": (3, 5), "fire again": (1, 0)}


async def test_a_producers_own_statements_line_up_the_lanes_of_a_wide_queue(db: Any) -> None:
    """The line of a wide queue is kept by D1's triggers, so the jobs a
    producer inserts with its own statements join it too: lanes that join in
    one statement in the order of their jobs' sequence."""
    runtime = await _runtime(db)
    await runtime.set_limit("queue", "shipping", 3)
    await db.batch([
        db.prepare("INSERT INTO orders (id, total) VALUES ('o1', 1), ('o2', 2), ('o3', 3)"),
        runtime.enqueue(job("first", queue="shipping", lane="tenant-0")),
        runtime.enqueue_from_select("""
            SELECT 'ship-' || id AS job_id, 'shipping' AS queue_name,
                   'tenant-' || (4 - total) AS lane, 0 AS priority, '{}' AS payload_json,
                   NULL AS recovery_max
            FROM orders ORDER BY id""")])
    line = await D1Binding(db).query(
        "SELECT lane FROM tickwork_turns WHERE queue = 'shipping' ORDER BY turn")
    assert [row[0] for row in line] == ["tenant-0", "tenant-3", "tenant-2", "tenant-1"]
    assert [(await runtime.tick()).job_id for _ in range(4)] == [
        "first", "ship-o1", "ship-o2", "ship-o3"]


async def test_0015_lines_up_the_lanes_of_the_queues_already_wide(db: Any) -> None:
    """A database at 14 with a wide queue: 0015 gives it its line, lanes by
    their oldest ready job; a serial queue gets none."""
    from tickwork.schemas import migrations

    for migration in migrations("d1")[:-1]:
        for statement in migration.statements():
            await db.prepare(statement).run()
    await db.prepare(
        "INSERT INTO tickwork_limits (kind, key, max_running, updated_at)"
        " VALUES ('queue', 'wide', 3, 0), ('queue', 'serial', 1, 0)").run()
    await db.prepare(
        "INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json, state,"
        " enqueued_at, due_at) VALUES ('b0', 'wide', 'B', 0, '{}', 'queued', 0, NULL),"
        " ('a0', 'wide', 'A', 0, '{}', 'queued', 0, NULL),"
        " ('c0', 'wide', 'C', 0, '{}', 'queued', 0, 99),"
        " ('s0', 'serial', 'S', 0, '{}', 'queued', 0, NULL)").run()
    for statement in migrations("d1")[-1].statements():
        await db.prepare(statement).run()
    assert await D1Binding(db).query(
        "SELECT queue, lane FROM tickwork_turns ORDER BY queue, turn") == [
        ("wide", "B"), ("wide", "A")]
