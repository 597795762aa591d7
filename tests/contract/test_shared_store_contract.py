"""The shared-store contract: every method of the ``SharedStore`` port, called
directly on D1 (Miniflare, through either SDK) and PostgreSQL.

Each test names the methods it covers (``@covers``);
``test_every_port_method_has_a_contract_test`` fails when a port method has
none, or when a store has a public method the port lacks. Time is the
tests' own (``now`` given to every call, from ``T0``), except where the
contract is about database time. Rows are read back with plain SQL.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.contract.stores import (
    COMPLETED,
    FAILED,
    RAISED,
    T0,
    coverage_gaps,
    covers,
    every_listing,
    expected_listing,
    first_cursor,
    next_cursor,
    valid_job,
    valid_schedule,
)
from tests.contract.under_test import SharedStoreUnderTest
from tickwork import Retry
from tickwork.lifecycle import Settlement
from tickwork.lifecycle.requests import JobListing
from tickwork.model.errors import IngestConflict, SchemaError
from tickwork.model.history import HistoryRow
from tickwork.model.jobs import JobRecord
from tickwork.model.limits import ConcurrencyLimit
from tickwork.model.rate_limits import MAX_RATE_PERIOD_MS, MAX_RATE_STARTS, RateLimit
from tickwork.model.retention import RetentionPolicy
from tickwork.ports.shared_store import SharedStore
from tickwork.stores.d1 import store as d1_store
from tickwork.stores.d1.store import D1Store
from tickwork.stores.postgres import store as postgres_store
from tickwork.stores.postgres.store import PostgresStore

LEASE = 30_000
#: The first page of a listing that goes newest first: before every settlement.
END = (2**53 - 1, 2**53 - 1)


def test_every_port_method_has_a_contract_test() -> None:
    assert coverage_gaps(SharedStore, globals(), stores=(D1Store, PostgresStore)) == []


async def column(shared: SharedStoreUnderTest, job_id: str, *names: str) -> tuple[Any, ...]:
    rows = await shared.rows(
        f"SELECT {', '.join(names)} FROM tickwork_jobs WHERE job_id = '{job_id}'")
    assert len(rows) == 1, f"{job_id}: {rows}"
    return rows[0]


async def job_ids(shared: SharedStoreUnderTest) -> list[str]:
    return [row[0] for row in await shared.rows(
        "SELECT job_id FROM tickwork_jobs ORDER BY sequence")]


async def queued(shared: SharedStoreUnderTest, *ids: str, queue: str = "q",
                 lane: str | None = None, now: int = T0) -> None:
    for job_id in ids:
        assert await shared.store.insert(valid_job(job_id, queue, lane=lane), now)


async def claimed(shared: SharedStoreUnderTest, token: str, now: int = T0,
                  lease_ms: int = LEASE) -> JobRecord:
    job = await shared.store.claim(token, lease_ms, now, guarded=False)
    assert job is not None, "nothing to claim"
    return job


# ------------------------------------------------------------- the schema


@covers("check_schema")
async def test_check_schema_passes_on_the_current_schema_and_names_an_old_one(
        shared_store: SharedStoreUnderTest) -> None:
    await shared_store.store.check_schema()
    store = shared_store.store
    latest = (d1_store.LATEST_MIGRATION if isinstance(store, D1Store)
              else postgres_store.LATEST_MIGRATION)
    version = store.schema_version
    await shared_store.rows(f"UPDATE tickwork_meta SET value = '{version - 1}' "
                            "WHERE key = 'schema_version'")
    with pytest.raises(SchemaError, match=latest.rsplit("/", 1)[1]):
        await shared_store.store.check_schema()


@covers("store_now")
async def test_store_now_is_the_given_time_else_the_database_clock(
        shared_store: SharedStoreUnderTest) -> None:
    assert await shared_store.store.store_now(T0) == T0
    before = int(time.time() * 1000)
    database_now = await shared_store.store.store_now(None)
    after = int(time.time() * 1000)
    # The database's clock is the host's here (same machine), to a second.
    assert before - 1000 <= database_now <= after + 1000


# ----------------------------------------------------------------- ingest


@covers("insert", "find")
async def test_insert_stores_a_queued_job_once(shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.find("a") is None
    job = valid_job("a", "q", lane="l", priority=3, payload={"n": 1}, max_recoveries=2)
    assert await store.insert(job, T0) is True
    record = await store.find("a")
    assert record is not None
    assert (record.job_id, record.queue, record.lane, record.priority, record.payload) == (
        "a", "q", "l", 3, {"n": 1})
    assert (record.state, record.outcome, record.attempt, record.recoveries) == (
        "queued", None, 1, 0)
    assert record.enqueued_at == T0 and record.started_at is None and record.due_at is None
    assert record.recovery is not None and record.recovery.max_recoveries == 2
    assert await store.insert(valid_job("a", "other", payload={"n": 2}), T0 + 5) is False
    assert await column(shared_store, "a", "queue", "payload_json", "enqueued_at") == (
        "q", '{"n":1}', T0)


@covers("insert")
async def test_insert_sets_the_due_time_a_job_names(shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await store.insert(valid_job("delayed", delay_ms=5000), T0)
    await store.insert(valid_job("later", run_at=T0 + 9000), T0)
    await store.insert(valid_job("past", run_at=T0 - 1000), T0)
    assert await column(shared_store, "delayed", "delay_ms", "due_at") == (5000, T0 + 5000)
    assert await column(shared_store, "later", "run_at", "due_at") == (T0 + 9000, T0 + 9000)
    assert await column(shared_store, "past", "run_at", "due_at") == (T0 - 1000, None)


@covers("find_cargo")
async def test_find_cargo_returns_what_was_inserted(shared_store: SharedStoreUnderTest) -> None:
    job = valid_job("a", priority=-2, payload={"z": [1, 2]}, max_recoveries=0, delay_ms=10,
                    retry=Retry(2))
    assert await shared_store.store.find_cargo("a") is None
    await shared_store.store.insert(job, T0)
    assert await shared_store.store.find_cargo("a") == job


@covers("insert_many")
async def test_insert_many_flags_new_jobs_and_identical_replays(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await store.insert(valid_job("stored", payload={"v": 1}), T0)
    flags = await store.insert_many(
        [valid_job("new"), valid_job("stored", payload={"v": 1}), valid_job("new")], T0)
    assert flags == [True, False, False]
    assert await job_ids(shared_store) == ["stored", "new"]
    assert await column(shared_store, "new", "state", "enqueued_at") == ("queued", T0)


@covers("insert_many")
async def test_insert_many_writes_nothing_when_a_job_conflicts(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await store.insert(valid_job("stored", payload={"v": 1}), T0)
    with pytest.raises(IngestConflict) as raised:
        await store.insert_many([valid_job("first"), valid_job("stored", payload={"v": 2})], T0)
    assert raised.value.job_id == "stored"
    assert await job_ids(shared_store) == ["stored"]
    with pytest.raises(IngestConflict):  # within the list, too
        await store.insert_many([valid_job("x", "q1"), valid_job("x", "q2")], T0)
    assert await job_ids(shared_store) == ["stored"]


@covers("insert_many")
async def test_insert_many_of_no_jobs_writes_nothing(
        shared_store: SharedStoreUnderTest) -> None:
    # Found by this suite: D1Store sent D1 an empty batch, which D1 refuses.
    # The lifecycle never asks (ingest_many refuses an empty list first).
    assert await shared_store.store.insert_many([], T0) == []
    assert await job_ids(shared_store) == []


# ----------------------------------------------------------------- reads


@covers("queue_head")
async def test_queue_head_is_the_running_job_else_the_best_ready_one(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.queue_head("q") is None
    await store.insert(valid_job("waits", priority=9, delay_ms=1000), T0)
    await store.insert(valid_job("low"), T0)
    await store.insert(valid_job("high", priority=5), T0)
    await store.insert(valid_job("high-later", priority=5), T0)
    await store.insert(valid_job("elsewhere", "other", priority=10), T0)
    head = await store.queue_head("q")
    assert head is not None and head.job_id == "high"
    assert (await claimed(shared_store, "t1")).job_id == "elsewhere"
    assert (await claimed(shared_store, "t2")).job_id == "high"
    running = await store.queue_head("q")
    assert running is not None and (running.job_id, running.state) == ("high", "running")


@covers("ready_ahead")
async def test_ready_ahead_names_the_queues_ready_jobs_before_a_job_in_pick_order(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await store.insert(valid_job("late", priority=9, delay_ms=1000), T0)  # not due: not ready
    await store.insert(valid_job("a", priority=5), T0)
    await store.insert(valid_job("b", priority=5), T0)
    await store.insert(valid_job("gone", priority=7), T0)
    await store.insert(valid_job("c"), T0)
    await store.insert(valid_job("elsewhere", "other", priority=10), T0)
    await store.insert(valid_job("d"), T0)
    assert await store.record_cancellation("gone", "c-1", "only_if_queued") is True
    d = await store.find("d")
    assert d is not None
    # Cancelled, delayed and other queues' jobs are not ahead; the rest are, in pick order.
    assert await store.ready_ahead("q", d.priority, d.sequence, 10) == ["a", "b", "c"]
    assert await store.ready_ahead("q", d.priority, d.sequence, 2) == ["a", "b"]
    b = await store.find("b")
    assert b is not None
    assert await store.ready_ahead("q", b.priority, b.sequence, 10) == ["a"]
    # A running job is no longer waiting: it is not ahead.
    assert (await claimed(shared_store, "t1")).job_id == "elsewhere"
    assert (await claimed(shared_store, "t2")).job_id == "a"
    assert await store.ready_ahead("q", d.priority, d.sequence, 10) == ["b", "c"]


@covers("has_pending_work", "next_work")
async def test_pending_work_and_when_it_comes(shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.has_pending_work(T0) is False
    pending, next_due, now, next_slot = await store.next_work(T0)
    assert (bool(pending), next_due, now, next_slot) == (False, None, T0, None)
    await store.insert(valid_job("later", delay_ms=5000), T0)
    assert await store.has_pending_work(T0) is False
    assert await store.has_pending_work(T0 + 5000) is True  # its time has come
    await store.create_schedule(valid_schedule(), T0 + 3000, T0)
    pending, next_due, now, next_slot = await store.next_work(T0)
    assert (bool(pending), next_due, now, next_slot) == (False, T0 + 3000, T0, T0 + 3000)
    assert await store.has_pending_work(T0 + 3000) is True  # a schedule slot has come
    await store.insert(valid_job("ready", "paused"), T0)
    await store.pause_queue("paused", T0)
    assert await store.has_pending_work(T0) is False  # a paused queue's job waits
    await store.resume_queue("paused")
    assert await store.has_pending_work(T0) is True
    await claimed(shared_store, "t")
    await store.pause_queue("paused", T0)
    assert await store.has_pending_work(T0) is True  # a running claim


@covers("status_groups", "backlog", "queue_counts")
async def test_status_backlog_and_queue_counts(shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert list(await store.status_groups()) == [] and list(await store.backlog()) == []
    assert tuple(await store.queue_counts("q")) == (0, 0, 0, 0, 0, 0, 0, 0, 0)
    await queued(shared_store, "a", "b", "c")
    await store.insert(valid_job("d", delay_ms=1000), T0)
    done = await claimed(shared_store, "t1")
    assert await store.settle(done.sequence, "t1", FAILED, T0 + 1, cancelled=False)
    await claimed(shared_store, "t2", T0 + 2)
    await store.pause_queue("idle", T0)
    assert sorted(tuple(row) for row in await store.status_groups()) == [
        ("idle", "paused", None, 1), ("q", "delayed", None, 1), ("q", "queued", None, 1),
        ("q", "running", None, 1), ("q", "settled", "failed", 1)]
    assert [tuple(row) for row in await store.backlog()] == [("q", 1, 1, 1, T0)]
    # (queued, running, delayed, paused, then settled per outcome in OUTCOMES order)
    assert tuple(await store.queue_counts("q")) == (1, 1, 1, 0, 0, 1, 0, 0, 0)
    assert tuple(await store.queue_counts("idle"))[:4] == (0, 0, 0, 1)


@covers("backlog")
async def test_backlog_says_since_when_each_ready_job_was_ready(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await store.insert(valid_job("timed", "qt", run_at=T0 + 100), T0)
    await store.insert(valid_job("delayed", "qd", delay_ms=30), T0)
    await store.insert(valid_job("retried", "qr", retry=Retry(3)), T0)
    job = await claimed(shared_store, "t1")
    assert await store.retry(job.sequence, "t1", FAILED, 50, T0 + 10) is not None
    await dead_letter(shared_store, "redriven", "qx", T0 + 20)
    assert await store.redrive("redriven", "r", T0 + 150) is not None
    # Due jobs join the ready set in a claim's own step: with every queue
    # paused, the claim moves them and takes none.
    for queue in ("qt", "qd", "qr", "qx"):
        await store.pause_queue(queue, T0)
    assert await store.claim("t2", LEASE, T0 + 200, guarded=False) is None
    assert sorted(tuple(row) for row in await store.backlog()) == [
        ("qd", 1, 0, 0, T0 + 30),  # enqueued, then its delay
        ("qr", 1, 0, 0, T0 + 60),  # when its back-off ended
        ("qt", 1, 0, 0, T0 + 100),  # its run_at
        ("qx", 1, 0, 0, T0 + 150)]  # redriven


# ---------------------------------------------------------------- claims


@covers("claim")
async def test_claim_takes_the_best_ready_job_of_a_free_queue_with_a_lease(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.claim("t0", LEASE, T0, guarded=False) is None
    await store.insert(valid_job("a1", "a"), T0)
    await store.insert(valid_job("a2", "a", priority=1), T0)
    await store.insert(valid_job("b1", "b"), T0)
    await store.insert(valid_job("later", "c", priority=9, delay_ms=1000), T0)
    await store.insert(valid_job("paused", "p", priority=9), T0)
    await store.pause_queue("p", T0)
    first = await store.claim("t1", LEASE, T0 + 7, guarded=False)
    assert first is not None and (first.job_id, first.state, first.started_at) == (
        "a2", "running", T0 + 7)
    assert await column(shared_store, "a2", "claim_token", "lease_expires_at") == (
        "t1", T0 + 7 + LEASE)
    second = await store.claim("t2", LEASE, T0, guarded=False)  # queue a is busy
    assert second is not None and second.job_id == "b1"
    assert await store.claim("t3", LEASE, T0, guarded=False) is None
    # A job whose time has come joins the ready set in the claim's own step.
    later = await store.claim("t4", LEASE, T0 + 1000, guarded=False)
    assert later is not None and (later.job_id, later.due_at) == ("later", None)


@covers("claim")
async def test_a_guarded_claim_waits_for_expired_leases_and_cancellations(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await queued(shared_store, "a", queue="qa")
    await queued(shared_store, "b", queue="qb")
    await queued(shared_store, "c", queue="qc")
    first = await store.claim("t1", LEASE, T0, guarded=True)
    assert first is not None and first.job_id == "a"
    # A live lease is no reason to wait.
    second = await store.claim("t2", LEASE, T0 + 1, guarded=True)
    assert second is not None and second.job_id == "b"
    # "a"'s lease has expired: recovery comes first.
    assert await store.claim("t3", LEASE, T0 + LEASE, guarded=True) is None
    assert await column(shared_store, "c", "state") == ("queued",)
    third = await store.claim("t3", LEASE, T0 + LEASE, guarded=False)
    assert third is not None and third.job_id == "c"


@covers("claim", "has_pending_work")
async def test_a_cancelled_waiting_job_is_pending_work_that_guards_the_claim(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await queued(shared_store, "cancelled", queue="qa")
    await queued(shared_store, "ready", queue="qb")
    await store.pause_queue("qb", T0)
    assert await store.record_cancellation("cancelled", "c", "only_if_queued") is True
    assert await store.has_pending_work(T0) is True
    await store.resume_queue("qb")
    assert await store.claim("t1", LEASE, T0, guarded=True) is None
    assert await column(shared_store, "ready", "state") == ("queued",)
    job = await store.claim("t1", LEASE, T0, guarded=False)  # never the cancelled one
    assert job is not None and job.job_id == "ready"


@covers("probe")
async def test_probe_names_the_oldest_expired_claim_and_waiting_cancellations(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.probe(T0) == (None, False)
    await queued(shared_store, "a", queue="qa")
    await queued(shared_store, "b", queue="qb")
    await queued(shared_store, "c", queue="qc")
    await claimed(shared_store, "ta", T0 + 2)
    await claimed(shared_store, "tb", T0 + 1)
    assert await store.probe(T0 + LEASE) == (None, False)  # both live
    suspect, waiting = await store.probe(T0 + 2 + LEASE)  # "a"'s lease ends last
    assert suspect is not None and waiting is False
    assert (suspect.job.job_id, suspect.token, suspect.lease_expired) == ("b", "tb", True)
    await store.record_cancellation("c", "x", "only_if_queued")
    assert await store.probe(T0) == (None, True)


@covers("claim_or_probe")
async def test_claim_or_probe_claims_when_clear_and_probes_when_not(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.claim_or_probe("t0", LEASE, T0) == (None, (None, False))
    await queued(shared_store, "a", queue="qa")
    await queued(shared_store, "b", queue="qb")
    job, probed = await store.claim_or_probe("t1", LEASE, T0)
    assert job is not None and job.job_id == "a" and probed == (None, False)
    job, (suspect, waiting) = await store.claim_or_probe("t2", LEASE, T0 + LEASE)
    assert job is None and waiting is False
    assert suspect is not None and (suspect.job.job_id, suspect.token) == ("a", "t1")
    assert await column(shared_store, "b", "state") == ("queued",)


# ------------------------------------------------------------ leases


@covers("read_claim")
async def test_read_claim_says_whose_claim_and_whether_it_is_live(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await queued(shared_store, "a")
    sequence = (await shared_store.rows("SELECT sequence FROM tickwork_jobs"))[0][0]
    view = await store.read_claim(sequence, T0)
    assert view is not None and (view.job.state, view.token, view.lease_live) == (
        "queued", None, False)
    await claimed(shared_store, "tok")
    view = await store.read_claim(sequence, T0 + LEASE - 1)
    assert view is not None and (view.job.state, view.token, view.lease_live) == (
        "running", "tok", True)
    view = await store.read_claim(sequence, T0 + LEASE)
    assert view is not None and view.lease_live is False
    assert await store.read_claim(sequence + 100, T0) is None


@covers("renew")
async def test_renew_extends_a_live_lease_only(shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await queued(shared_store, "a")
    job = await claimed(shared_store, "tok")
    assert await store.renew(job.sequence, "stale", LEASE, T0 + 1) == "lost"
    assert await store.renew(job.sequence, "tok", LEASE, T0 + 10) == "held"
    assert await column(shared_store, "a", "lease_expires_at") == (T0 + 10 + LEASE,)
    # A shorter heartbeat never shortens the lease.
    assert await store.renew(job.sequence, "tok", 5, T0 + 20) == "held"
    assert await column(shared_store, "a", "lease_expires_at") == (T0 + 10 + LEASE,)
    await store.record_cancellation("a", "c", "any")
    assert await store.renew(job.sequence, "tok", LEASE, T0 + 30) == "cancelled"
    assert await column(shared_store, "a", "lease_expires_at") == (T0 + 30 + LEASE,)
    # Expired: a late renewal cannot resurrect the claim.
    assert await store.renew(job.sequence, "tok", LEASE, T0 + 30 + LEASE) == "lost"
    assert await column(shared_store, "a", "lease_expires_at") == (T0 + 30 + LEASE,)


@covers("requeue_expired")
async def test_requeue_expired_is_fenced_on_the_token_and_the_expiry(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await queued(shared_store, "a")
    job = await claimed(shared_store, "tok")
    assert await store.requeue_expired(job.sequence, "tok", T0 + LEASE - 1) is False  # live
    assert await store.requeue_expired(job.sequence, "stale", T0 + LEASE) is False
    assert await column(shared_store, "a", "state", "recoveries") == ("running", 0)
    assert await store.requeue_expired(job.sequence, "tok", T0 + LEASE) is True
    assert await column(shared_store, "a", "state", "claim_token", "lease_expires_at",
                        "started_at", "recoveries") == ("queued", None, None, None, 1)
    assert await store.requeue_expired(job.sequence, "tok", T0 + LEASE) is False


@covers("release_claim")
async def test_release_claim_puts_a_live_claim_back_unstarted_fenced_on_its_token(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await queued(shared_store, "a")
    job = await claimed(shared_store, "tok")
    assert await store.release_claim(job.sequence, "stale") is False
    assert await column(shared_store, "a", "state", "claim_token") == ("running", "tok")
    # A live lease is no obstacle (the claim is this worker's own), and no
    # recovery is counted: nothing ran.
    assert await store.release_claim(job.sequence, "tok") is True
    assert await column(shared_store, "a", "state", "claim_token", "lease_expires_at",
                        "started_at", "recoveries", "attempt") == (
        "queued", None, None, None, 0, 1)
    assert await store.release_claim(job.sequence, "tok") is False
    again = await claimed(shared_store, "next")
    assert again.job_id == "a"


@covers("settle_expired")
async def test_settle_expired_is_fenced_and_releases_the_token(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await queued(shared_store, "a")
    job = await claimed(shared_store, "tok")
    unknown = Settlement("outcome_unknown", "lease_expired")
    assert await store.settle_expired(job.sequence, "tok", unknown, T0 + 1) is None  # live
    assert await store.settle_expired(job.sequence, "stale", unknown, T0 + LEASE) is None
    record = await store.settle_expired(job.sequence, "tok", unknown, T0 + LEASE)
    assert record is not None and (record.state, record.outcome, record.failure_reason,
                                   record.settled_at) == (
        "settled", "outcome_unknown", "lease_expired", T0 + LEASE)
    assert await column(shared_store, "a", "claim_token") == (None,)
    assert await store.settle_expired(job.sequence, "tok", unknown, T0 + LEASE) is None


# ----------------------------------------------------------- settlements


@covers("settle")
async def test_settle_is_fenced_on_the_token_the_lease_and_the_cancellation(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await queued(shared_store, "a", "b")
    job = await claimed(shared_store, "tok")
    before = await shared_store.rows("SELECT * FROM tickwork_jobs ORDER BY sequence")
    assert await store.settle(job.sequence, "stale", COMPLETED, T0, cancelled=False) is False
    assert await store.settle(job.sequence, "tok", COMPLETED, T0, cancelled=True) is False
    assert await store.settle(job.sequence, "tok", COMPLETED, T0 + LEASE,
                              cancelled=False) is False  # the lease ran out
    assert await shared_store.rows("SELECT * FROM tickwork_jobs ORDER BY sequence") == before
    assert await store.settle(job.sequence, "tok", RAISED, T0 + 9, cancelled=False) is True
    assert await column(shared_store, "a", "state", "outcome", "failure_reason",
                        "settled_at") == ("settled", "failed", "it broke", T0 + 9)
    record = await store.find("a")
    assert record is not None and record.error == RAISED.error
    assert await store.settle(job.sequence, "tok", COMPLETED, T0 + 10,
                              cancelled=False) is False
    # A recorded cancellation: only cancelled=True settles it.
    job = await claimed(shared_store, "tok2")
    await store.record_cancellation("b", "c", "any")
    assert await store.settle(job.sequence, "tok2", COMPLETED, T0, cancelled=False) is False
    assert await store.settle(job.sequence, "tok2", Settlement("cancelled"), T0,
                              cancelled=True) is True
    assert await column(shared_store, "b", "outcome") == ("cancelled",)


@covers("settle_and_claim")
async def test_settle_and_claim_settles_then_claims_the_next_job(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await queued(shared_store, "a", "b")
    job = await claimed(shared_store, "t1")
    settled, following = await store.settle_and_claim(
        job.sequence, "t1", COMPLETED, T0 + 5, next_token="t2", lease_ms=LEASE)
    assert settled is True
    # The queue the settlement freed is claimed in the same step.
    assert following is not None and (following.job_id, following.started_at) == ("b", T0 + 5)
    assert await column(shared_store, "b", "claim_token", "lease_expires_at") == (
        "t2", T0 + 5 + LEASE)
    # A stale settlement writes nothing, and the claim still runs (guarded).
    await queued(shared_store, "c", queue="other")
    settled, following = await store.settle_and_claim(
        job.sequence, "t1", COMPLETED, T0 + 6, next_token="t3", lease_ms=LEASE)
    assert settled is False and following is not None and following.job_id == "c"
    assert await column(shared_store, "a", "settled_at") == (T0 + 5,)
    settled, following = await store.settle_and_claim(
        following.sequence, "t3", COMPLETED, T0 + 7, next_token="t4", lease_ms=LEASE)
    assert (settled, following) == (True, None)


@covers("settle_next_cancelled")
async def test_settle_next_cancelled_settles_the_oldest_cancelled_waiting_job(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.settle_next_cancelled(T0) is None
    await queued(shared_store, "a", "b", "c")
    await store.record_cancellation("c", "x", "any")
    await store.record_cancellation("b", "y", "any")
    first = await store.settle_next_cancelled(T0 + 4)
    assert first is not None and (first.job_id, first.outcome, first.settled_at) == (
        "b", "cancelled", T0 + 4)
    second = await store.settle_next_cancelled(T0)
    assert second is not None and second.job_id == "c"
    assert await store.settle_next_cancelled(T0) is None
    assert await column(shared_store, "a", "state") == ("queued",)


@covers("retry")
async def test_retry_queues_the_next_attempt_due_later(shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await store.insert(valid_job("a", retry=Retry(3)), T0)
    job = await claimed(shared_store, "tok", T0 + 1)
    assert await store.retry(job.sequence, "stale", FAILED, 500, T0 + 2) is None
    assert await store.retry(job.sequence, "tok", FAILED, 500, T0 + 1 + LEASE) is None  # expired
    again = await store.retry(job.sequence, "tok", RAISED, 500, T0 + 2)
    assert again is not None
    assert (again.state, again.attempt, again.due_at, again.started_at, again.error) == (
        "queued", 2, T0 + 502, None, RAISED.error)
    [attempt] = again.history
    assert (attempt.attempt, attempt.outcome, attempt.failure_reason, attempt.started_at,
            attempt.ended_at, attempt.error) == (
        1, "failed", "it broke", T0 + 1, T0 + 2, "ValueError: no ünïcode here")
    assert await column(shared_store, "a", "claim_token", "lease_expires_at") == (None, None)
    job = await claimed(shared_store, "tok2", T0 + 600)
    assert job.job_id == "a"
    await store.record_cancellation("a", "c", "any")
    assert await store.retry(job.sequence, "tok2", FAILED, 500, T0 + 700) is None
    assert await column(shared_store, "a", "state", "attempt") == ("running", 2)


# ----------------------------------------------- dead letters, redrive


async def dead_letter(shared: SharedStoreUnderTest, job_id: str, queue: str, at: int,
                      settlement: Settlement = FAILED) -> JobRecord:
    await shared.store.insert(valid_job(job_id, queue), T0)
    job = await shared.store.claim(f"tok-{job_id}", LEASE, at, guarded=False)
    assert job is not None and job.job_id == job_id
    assert await shared.store.settle(job.sequence, f"tok-{job_id}", settlement, at,
                                     cancelled=False)
    return job


@covers("dead_letters")
async def test_dead_letters_newest_first_before_the_cursor(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.dead_letters("q", END, 10) == []
    await dead_letter(shared_store, "d1", "q", T0 + 1)
    await dead_letter(shared_store, "d2", "q", T0 + 2, Settlement("outcome_unknown"))
    await dead_letter(shared_store, "d3", "q", T0 + 3, Settlement("interrupted"))
    await dead_letter(shared_store, "other", "q2", T0 + 4)
    await dead_letter(shared_store, "fine", "q", T0 + 5, COMPLETED)
    page = await store.dead_letters("q", END, 2)
    assert [job.job_id for job in page] == ["d3", "d2"]
    cursor = (page[-1].settled_at or 0, page[-1].sequence)
    assert [job.job_id for job in await store.dead_letters("q", cursor, 2)] == ["d1"]


#: Job ids around the prefix "ab": the ones it starts, in code point order,
#: then neighbours that sort just before or after them (in a language's
#: collation "ab-" and "aB" might sort among them).
_PREFIX_IDS = ("a", "aa\U0010ffff", "ab", "ab-1", "ab.", "abc", "ab\u00e9", "ab\U0010ffff",
               "ab\U0010ffff\U0010ffff", "aB", "ac", "b")
_STARTING_AB = ["ab", "ab-1", "ab.", "abc", "ab\u00e9", "ab\U0010ffff",
                "ab\U0010ffff\U0010ffff"]


@covers("jobs_by_id_prefix")
async def test_jobs_by_id_prefix_pages_the_ids_a_prefix_starts_in_code_point_order(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await dead_letter(shared_store, "ab-dead", "dead", T0 + 1)  # any state, any queue
    await queued(shared_store, *_PREFIX_IDS[::2])
    await queued(shared_store, *_PREFIX_IDS[1::2], queue="other")
    expected = sorted([*_STARTING_AB, "ab-dead"])
    assert expected[:3] == ["ab", "ab-1", "ab-dead"]
    assert [job.job_id for job in await store.jobs_by_id_prefix("ab", None, 100)] == expected
    first = await store.jobs_by_id_prefix("ab", None, 3)
    assert [job.job_id for job in first] == expected[:3]
    after = await store.jobs_by_id_prefix("ab", first[-1].job_id, 100)
    assert [job.job_id for job in after] == expected[3:]
    assert [job.job_id for job in await store.jobs_by_id_prefix("abc", None, 5)] == ["abc"]
    assert await store.jobs_by_id_prefix("abd", None, 5) == []
    assert [job.job_id for job in await store.jobs_by_id_prefix(
        "ab\U0010ffff", None, 5)] == ["ab\U0010ffff", "ab\U0010ffff\U0010ffff"]


@covers("list_jobs")
async def test_list_jobs_pages_a_queue_or_a_lane(shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await dead_letter(shared_store, "x", "dead", T0 + 1)
    await queued(shared_store, "a", "b", "c", lane="l")
    by_queue = JobListing("queue", "q", "queued", None, False)
    assert [job.job_id for job in await store.list_jobs(by_queue, (0, 0), 2)] == ["a", "b"]
    newest = JobListing("queue", "q", "queued", None, True)
    assert [job.job_id for job in await store.list_jobs(newest, END, 10)] == ["c", "b", "a"]
    by_lane = JobListing("lane", "l", "queued", None, False)
    second = (await store.list_jobs(by_lane, (0, 0), 1))[0]
    assert [job.job_id for job in await store.list_jobs(by_lane, (0, second.sequence), 5)] == [
        "b", "c"]
    failed = JobListing("queue", "dead", "settled", "failed", True)
    assert [job.job_id for job in await store.list_jobs(failed, END, 5)] == ["x"]
    completed = JobListing("queue", "dead", "settled", "completed", True)
    assert await store.list_jobs(completed, END, 5) == []


@covers("list_jobs")
async def test_every_listing_shape_pages_through_its_jobs_in_order(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    settled_at = {"s1": T0 + 30, "s2": T0 + 10, "s3": T0 + 10, "s4": T0 + 20}
    for job_id in settled_at:
        await store.insert(valid_job(job_id, "q", lane="l1" if job_id in ("s1", "s3") else "l2"),
                           T0)
    for job_id, at in settled_at.items():
        job = await claimed(shared_store, f"t-{job_id}", at)
        outcome = COMPLETED if job_id == "s2" else FAILED
        assert await store.settle(job.sequence, f"t-{job_id}", outcome, at, cancelled=False)
    await store.insert(valid_job("run", "q", lane="l1"), T0)
    await claimed(shared_store, "t-run", T0 + 40)
    for job_id, lane in (("w1", "l1"), ("w2", "l2"), ("w3", "l1")):
        await store.insert(valid_job(job_id, "q", lane=lane,
                                     delay_ms=5 if job_id == "w2" else None), T0)
    await store.record_cancellation("w3", "c", "only_if_queued")
    await store.insert(valid_job("x1", "other", lane="l1"), T0)
    records = [await store.find(job_id)
               for job_id in (*settled_at, "run", "w1", "w2", "w3", "x1")]
    known = [record for record in records if record is not None]
    for listing in every_listing("q", "l1", "failed"):
        listed: list[str] = []
        cursor = first_cursor(listing)
        while True:
            page = await store.list_jobs(listing, cursor, 2)
            listed += [job.job_id for job in page]
            if len(page) < 2:
                break
            cursor = next_cursor(page[-1])
        assert listed == expected_listing(known, listing), listing


@covers("redrive", "redrive_applied")
async def test_redrive_queues_a_dead_letter_once_per_redrive_id(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await dead_letter(shared_store, "d", "q", T0 + 1)
    await queued(shared_store, "alive", queue="q2")
    assert await store.redrive_applied("d", "r1") is False
    assert await store.redrive("alive", "r1", T0) is None  # not a dead letter
    assert await store.redrive("missing", "r1", T0) is None
    record = await store.redrive("d", "r1", T0 + 9)
    assert record is not None
    assert (record.state, record.outcome, record.attempt, record.settled_at) == (
        "queued", None, 1, None)
    assert record.history[-1].redrive_id == "r1"
    assert await store.redrive_applied("d", "r1") is True
    assert await store.redrive_applied("d", "r2") is False
    assert await shared_store.rows(
        "SELECT job_id, redrive_id, redriven_at FROM tickwork_redrives") == [("d", "r1", T0 + 9)]
    job = await claimed(shared_store, "t2", T0 + 10)
    assert await store.settle(job.sequence, "t2", FAILED, T0 + 20, cancelled=False)
    assert await store.redrive("d", "r1", T0 + 21) is None
    assert await column(shared_store, "d", "state") == ("settled",)
    assert await store.redrive("d", "r2", T0 + 22) is not None


# ------------------------------------------------- cancel, fail, purge


@covers("record_cancellation")
async def test_record_cancellation_keeps_the_first_id(shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await queued(shared_store, "a", "b")
    assert await store.record_cancellation("missing", "c", "any") is False
    assert await store.record_cancellation("a", "first", "only_if_queued") is True
    assert await store.record_cancellation("a", "second", "any") is False
    assert await column(shared_store, "a", "cancellation_id", "state") == ("first", "queued")
    assert (await claimed(shared_store, "t")).job_id == "b"  # "a" is cancelled
    assert await store.record_cancellation("b", "c", "only_if_queued") is False
    assert await store.record_cancellation("b", "c", "any") is True
    assert await column(shared_store, "b", "cancellation_id", "state") == ("c", "running")


@covers("fail_lane")
async def test_fail_lane_settles_running_jobs_first_up_to_the_limit(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.fail_lane("l", "lane gone", 10, T0) == ([], False)
    await store.insert(valid_job("w1", "q1", lane="l"), T0)
    await store.insert(valid_job("w2", "q2", lane="l"), T0)
    await store.insert(valid_job("r", "q3", lane="l", priority=5), T0)
    await store.insert(valid_job("other", "q4", lane="m"), T0)
    assert (await claimed(shared_store, "t")).job_id == "r"
    failed, more = await store.fail_lane("l", "lane gone", 2, T0 + 5)
    # Which jobs: the running one first. Not their order: D1 and PostgreSQL
    # return them in RETURNING's order (OwnerLocalStore sorts running first).
    assert sorted((job.job_id, job.outcome, job.failure_reason, job.settled_at)
                  for job in failed) == [("r", "failed", "lane gone", T0 + 5),
                                         ("w1", "failed", "lane gone", T0 + 5)]
    assert more is True
    assert await column(shared_store, "w2", "state") == ("queued",)
    failed, more = await store.fail_lane("l", "lane gone", 10, T0)
    assert [job.job_id for job in failed] == ["w2"] and more is False
    assert await column(shared_store, "other", "state") == ("queued",)


@covers("purge")
async def test_purge_deletes_waiting_jobs_only(shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.purge("q") == 0
    await dead_letter(shared_store, "dead", "q3", T0)
    await queued(shared_store, "run", "w1", "w2")
    await store.insert(valid_job("later", delay_ms=1000), T0)
    await queued(shared_store, "keep", queue="q2")
    assert (await claimed(shared_store, "t")).job_id == "run"
    assert await store.purge("q") == 3
    assert await store.purge("q3") == 0
    assert await job_ids(shared_store) == ["dead", "run", "keep"]


@covers("pause_queue", "resume_queue", "queue_paused")
async def test_pause_and_resume_say_whether_they_changed_anything(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.resume_queue("q") is False
    assert await store.queue_paused("q") is False
    assert await store.pause_queue("q", T0) is True
    assert (await store.queue_paused("q"), await store.queue_paused("other")) == (True, False)
    assert await store.pause_queue("q", T0 + 1) is False
    assert await shared_store.rows("SELECT queue, paused_at FROM tickwork_paused_queues") == [
        ("q", T0)]
    assert await store.resume_queue("q") is True
    assert await store.queue_paused("q") is False
    assert await store.resume_queue("q") is False
    assert await shared_store.rows("SELECT count(*) FROM tickwork_paused_queues") == [(0,)]


# ------------------------------------------------------------ schedules


@covers("create_schedule", "find_schedule", "list_schedules", "delete_schedule")
async def test_create_find_list_delete_a_schedule(shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.find_schedule("nightly") is None and await store.list_schedules() == []
    nightly, hourly = valid_schedule("nightly"), valid_schedule("hourly", every_ms=3_600_000)
    assert await store.create_schedule(nightly, T0 + 60_000, T0) is True
    assert await store.create_schedule(valid_schedule("nightly", every_ms=5000), T0,
                                       T0 + 1) is False
    assert await store.create_schedule(hourly, T0 + 3_600_000, T0) is True
    found = await store.find_schedule("nightly")
    assert found is not None
    assert (found.spec_json, found.next_at, found.paused, found.created_at,
            found.updated_at) == (nightly.spec_json, T0 + 60_000, False, T0, T0)
    assert [schedule.name for schedule in await store.list_schedules()] == ["hourly", "nightly"]
    assert await store.delete_schedule("nightly") is True
    assert await store.delete_schedule("nightly") is False
    assert await shared_store.rows("SELECT name FROM tickwork_schedules") == [("hourly",)]


@covers("replace_schedule")
async def test_replace_schedule_is_fenced_on_the_definition_read(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    old, new = valid_schedule(every_ms=60_000), valid_schedule(every_ms=120_000)
    assert await store.replace_schedule(new, old.spec_json, T0, T0) is False
    await store.create_schedule(old, T0 + 60_000, T0)
    assert await store.replace_schedule(new, "{}", T0 + 120_000, T0 + 1) is False
    assert await store.replace_schedule(new, old.spec_json, T0 + 120_000, T0 + 2) is True
    assert await shared_store.rows(
        "SELECT spec_json, next_at, created_at, updated_at FROM tickwork_schedules") == [
        (new.spec_json, T0 + 120_000, T0, T0 + 2)]
    assert await store.replace_schedule(new, old.spec_json, T0, T0 + 3) is False


@covers("pause_schedule", "resume_schedule")
async def test_pause_and_resume_a_schedule(shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    schedule = valid_schedule()
    assert await store.pause_schedule("nightly", T0) is False
    await store.create_schedule(schedule, T0 + 60_000, T0)
    assert await store.resume_schedule("nightly", schedule.spec_json, T0, T0) is False
    assert await store.pause_schedule("nightly", T0 + 1) is True
    assert await store.pause_schedule("nightly", T0 + 2) is False
    found = await store.find_schedule("nightly")
    assert found is not None and (found.paused, found.updated_at) == (True, T0 + 1)
    assert await store.next_slot() is None  # a paused schedule has no next slot
    assert await store.resume_schedule("nightly", "{}", T0 + 180_000, T0 + 3) is False
    assert await store.resume_schedule("nightly", schedule.spec_json, T0 + 180_000,
                                       T0 + 3) is True
    found = await store.find_schedule("nightly")
    assert found is not None and (found.paused, found.next_at, found.updated_at) == (
        False, T0 + 180_000, T0 + 3)


@covers("due_schedules", "next_slot")
async def test_due_schedules_and_the_next_slot(shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.due_schedules(T0) == ([], None) and await store.next_slot() is None
    await store.create_schedule(valid_schedule("b"), T0 + 100, T0)
    await store.create_schedule(valid_schedule("a"), T0 + 100, T0)
    await store.create_schedule(valid_schedule("c"), T0 + 50, T0)
    await store.create_schedule(valid_schedule("later"), T0 + 999, T0)
    assert await store.next_slot() == T0 + 50
    due, judged_at = await store.due_schedules(T0 + 100)
    assert [s.name for s in due] == ["c", "a", "b"] and judged_at == T0 + 100
    assert await store.due_schedules(T0 + 49) == ([], None)


@covers("fire_slots")
async def test_fire_slots_creates_each_slot_job_once_and_advances(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    schedule = valid_schedule(every_ms=60_000, payload={"k": 1}, catch_up=5)
    first = 60_000 * (T0 // 60_000 + 1)
    await store.create_schedule(schedule, first, T0)
    await store.create_schedule(valid_schedule("other"), first + 600_000, T0)
    slots = [first, first + 60_000]
    created, next_slot = await store.fire_slots(schedule, slots, first + 120_000,
                                                first + 60_000)
    assert [job.run_at for job in created] == slots
    assert [job.job_id for job in created] == [schedule.slot_job(slot).job_id for slot in slots]
    assert next_slot == first + 120_000
    rows = await shared_store.rows("SELECT job_id, queue, payload_json, run_at, enqueued_at, "
                                   "state FROM tickwork_jobs ORDER BY sequence")
    assert rows == [(job.job_id, "sched", '{"k":1}', job.run_at, first + 60_000, "queued")
                    for job in created]
    found = await store.find_schedule("nightly")
    assert found is not None and found.next_at == first + 120_000
    # A lagging caller firing the same slots again creates nothing, moves nothing back.
    again = await store.fire_slots(schedule, slots, first + 60_000, first + 60_000)
    assert again == ([], first + 120_000)
    assert len(await job_ids(shared_store)) == 2
    other = valid_schedule(every_ms=120_000)  # nor does another definition
    assert (await store.fire_slots(other, [first + 120_000], first + 240_000,
                                   first + 130_000))[0] == []


# ------------------------------------------------------------ retention


@covers("put_retention", "retention_policies", "delete_retention")
async def test_put_read_and_delete_retention_policies(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.retention_policies() == []
    assert await store.put_retention(RetentionPolicy(None, 60_000, None), T0) is True
    assert await store.put_retention(RetentionPolicy("q", None, 5 * 60_000), T0 + 1) is True
    # The same times again write nothing, updated_at included.
    assert await store.put_retention(RetentionPolicy("q", None, 5 * 60_000), T0 + 2) is False
    assert await store.put_retention(RetentionPolicy(None, 2 * 60_000, None), T0 + 3) is True
    assert await store.retention_policies() == [
        RetentionPolicy(None, 2 * 60_000, None, T0 + 3),
        RetentionPolicy("q", None, 5 * 60_000, T0 + 1)]
    # The scope's default is stored under the queue name no queue has.
    assert await shared_store.rows(
        "SELECT queue, keep_completed_ms, keep_failed_ms, updated_at "
        "FROM tickwork_retention ORDER BY queue") == [
        ("", 2 * 60_000, None, T0 + 3), ("q", None, 5 * 60_000, T0 + 1)]
    assert await store.delete_retention("q") is True
    assert await store.delete_retention("q") is False
    assert await store.delete_retention(None) is True
    assert await store.retention_policies() == []
    # Without a test clock, database time stamps it.
    before = int(time.time() * 1000)
    assert await store.put_retention(RetentionPolicy("q", 60_000, 60_000), None) is True
    (updated_at,), = await shared_store.rows("SELECT updated_at FROM tickwork_retention")
    assert before - 5_000 <= updated_at <= int(time.time() * 1000) + 5_000


# --------------------------------------------------- concurrency limits


@covers("put_limit", "limits", "delete_limit")
async def test_put_read_and_delete_concurrency_limits(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.limits() == []
    assert await store.put_limit(ConcurrencyLimit("queue", "q", 3), T0) is True
    # The same max_running again writes nothing, updated_at included.
    assert await store.put_limit(ConcurrencyLimit("queue", "q", 3), T0 + 1) is False
    assert await store.put_limit(ConcurrencyLimit("lane", "tenant-b", 2), T0 + 2) is True
    assert await store.put_limit(ConcurrencyLimit("lane", "é", 4), T0 + 3) is True
    assert await store.put_limit(ConcurrencyLimit("lane", "Z", 1), T0 + 4) is True
    # A queue and a lane of the same name are two limits.
    assert await store.put_limit(ConcurrencyLimit("lane", "q", 7), T0 + 5) is True
    assert await store.put_limit(ConcurrencyLimit("queue", "a", 10_000), T0 + 6) is True
    assert await store.put_limit(ConcurrencyLimit("queue", "q", 5), T0 + 7) is True  # replaced
    assert await store.limits() == [
        ConcurrencyLimit("queue", "a", 10_000, T0 + 6), ConcurrencyLimit("queue", "q", 5, T0 + 7),
        ConcurrencyLimit("lane", "Z", 1, T0 + 4), ConcurrencyLimit("lane", "q", 7, T0 + 5),
        ConcurrencyLimit("lane", "tenant-b", 2, T0 + 2), ConcurrencyLimit("lane", "é", 4, T0 + 3)]
    assert await shared_store.rows(
        "SELECT kind, key, max_running, updated_at FROM tickwork_limits "
        "WHERE kind = 'queue' ORDER BY key") == [
        ("queue", "a", 10_000, T0 + 6), ("queue", "q", 5, T0 + 7)]
    assert await store.delete_limit("queue", "q") is True
    assert await store.delete_limit("queue", "q") is False
    assert await store.delete_limit("queue", "tenant-b") is False  # a lane's key
    assert await store.delete_limit("lane", "q") is True
    assert [(limit.kind, limit.key) for limit in await store.limits()] == [
        ("queue", "a"), ("lane", "Z"), ("lane", "tenant-b"), ("lane", "é")]
    # Without a test clock, database time stamps it.
    before = int(time.time() * 1000)
    assert await store.put_limit(ConcurrencyLimit("queue", "now", 2), None) is True
    (updated_at,), = await shared_store.rows(
        "SELECT updated_at FROM tickwork_limits WHERE key = 'now'")
    assert before - 5_000 <= updated_at <= int(time.time() * 1000) + 5_000


@covers("put_limit")
async def test_the_limits_table_refuses_a_bad_row(shared_store: SharedStoreUnderTest) -> None:
    insert = ("INSERT INTO tickwork_limits (kind, key, max_running, updated_at) "
              "VALUES ('{}', 'k', {}, 1)")
    for kind, max_running in (("tenant", 1), ("queue", 0), ("lane", 10_001), ("queue", "NULL")):
        with pytest.raises(Exception, match=r"(?i)constraint"):
            await shared_store.rows(insert.format(kind, max_running))
    await shared_store.rows(insert.format("queue", 1))
    with pytest.raises(Exception, match=r"(?i)constraint"):  # one row per kind and key
        await shared_store.rows(insert.format("queue", 2))
    assert await shared_store.store.limits() == [ConcurrencyLimit("queue", "k", 1, 1)]


@covers("running_jobs")
async def test_running_jobs_names_a_queues_or_lanes_running_jobs_oldest_start_first(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await queued(shared_store, "x1", queue="q1", lane="L")
    await queued(shared_store, "x2", queue="q2", lane="L")
    await queued(shared_store, "x3", queue="L")  # names no lane: its lane is its queue, L
    await queued(shared_store, "y", queue="q3", lane="other")
    await queued(shared_store, "x4", queue="q1", lane="L")  # stays queued: q1 runs x1
    # Started out of enqueue order: x1 last, x2 first.
    for now in (T0 + 5, T0 + 1, T0 + 3, T0 + 4):
        await claimed(shared_store, f"t-{now}", now)
    assert await store.running_jobs("lane", "L", 10) == ["x2", "x3", "x1"]
    assert await store.running_jobs("lane", "L", 2) == ["x2", "x3"]
    assert await store.running_jobs("lane", "other", 10) == ["y"]
    assert await store.running_jobs("lane", "q1", 10) == []  # no job's lane is q1
    assert await store.running_jobs("queue", "q1", 10) == ["x1"]
    assert await store.running_jobs("queue", "L", 10) == ["x3"]
    assert await store.running_jobs("queue", "nothing", 10) == []
    x2 = await store.find("x2")
    assert x2 is not None
    assert await store.settle(x2.sequence, f"t-{T0 + 1}", COMPLETED, T0 + 6, cancelled=False)
    assert await store.running_jobs("lane", "L", 10) == ["x3", "x1"]
    assert await store.running_jobs("queue", "q2", 10) == []


async def claim_all(shared: SharedStoreUnderTest, prefix: str) -> list[str]:
    """Claim until the claim finds nothing; the ids, in claim order."""
    taken = []
    while (job := await shared.store.claim(f"{prefix}-{len(taken)}", LEASE, T0,
                                           guarded=False)) is not None:
        taken.append(job.job_id)
    return taken


async def settle_job(shared: SharedStoreUnderTest, job_id: str) -> None:
    (sequence, token), = await shared.rows(
        f"SELECT sequence, claim_token FROM tickwork_jobs WHERE job_id = '{job_id}'")
    assert await shared.store.settle(sequence, token, COMPLETED, T0 + 1, cancelled=False)


@covers("claim", "claim_or_probe", "settle_and_claim", "put_limit", "delete_limit")
async def test_claims_take_the_best_ready_job_whose_queue_and_lane_have_room(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await store.put_limit(ConcurrencyLimit("queue", "wide", 3), T0)
    await store.put_limit(ConcurrencyLimit("lane", "L", 2), T0)
    await queued(shared_store, "w1", "w2", "w3", "w4", queue="wide")
    await queued(shared_store, "s1", "s2", queue="serial")  # no row: one at a time
    for index in (1, 2, 3):  # lane L across three queues
        await queued(shared_store, f"l{index}", queue=f"q{index}", lane="L")
    assert await claim_all(shared_store, "a") == ["w1", "w2", "w3", "s1", "l1", "l2"]
    assert await store.running_jobs("queue", "wide", 10) == ["w1", "w2", "w3"]
    # Nothing has room: the guarded claim finds nothing and probes.
    assert (await store.claim_or_probe("b", LEASE, T0))[0] is None
    # A settlement frees one place; the claim in its batch takes it.
    (sequence, token), = await shared_store.rows(
        "SELECT sequence, claim_token FROM tickwork_jobs WHERE job_id = 'w1'")
    settled, job = await store.settle_and_claim(sequence, token, COMPLETED, T0 + 1,
                                                next_token="c", lease_ms=LEASE)
    assert settled and job is not None and job.job_id == "w4"
    await settle_job(shared_store, "l1")
    job, _ = await store.claim_or_probe("d", LEASE, T0)
    assert job is not None and job.job_id == "l3"
    # Lowering a limit stops nothing that runs; it holds new claims until
    # enough settle. Raising one lets the next claim take more.
    await queued(shared_store, "w5", "w6", queue="wide")
    await store.put_limit(ConcurrencyLimit("queue", "wide", 1), T0)
    await settle_job(shared_store, "w2")
    await settle_job(shared_store, "w3")
    assert await claim_all(shared_store, "e") == []
    assert await store.running_jobs("queue", "wide", 10) == ["w4"]
    await store.put_limit(ConcurrencyLimit("queue", "wide", 2), T0)
    assert await claim_all(shared_store, "f") == ["w5"]
    # Deleting a queue's limit puts it back to one at a time; a lane's, to none.
    await store.delete_limit("queue", "wide")
    await settle_job(shared_store, "w4")
    assert await claim_all(shared_store, "g") == []
    await queued(shared_store, "l4", queue="q4", lane="L")
    assert await claim_all(shared_store, "h") == []  # l2, l3 run: L is full
    await store.delete_limit("lane", "L")
    assert await claim_all(shared_store, "i") == ["l4"]


@covers("claim")
async def test_a_lane_limit_counts_the_jobs_of_the_queue_named_like_the_lane(
        shared_store: SharedStoreUnderTest) -> None:
    # A job that names no lane is in the lane of its queue's name.
    store = shared_store.store
    await store.put_limit(ConcurrencyLimit("lane", "acme", 2), T0)
    await queued(shared_store, "own", queue="acme")
    await queued(shared_store, "a1", queue="exports", lane="acme")
    await queued(shared_store, "a2", queue="emails", lane="acme")
    assert await claim_all(shared_store, "a") == ["own", "a1"]
    assert await store.running_jobs("lane", "acme", 10) == ["own", "a1"]


# ------------------------------------------------------------ fair turns
#
# A wide queue's lanes take turns (the rule: tickwork.stores.sql.sqlite,
# "fair turns"); its line (tickwork_turns) is read back with plain SQL, in
# turn order (PostgreSQL's turns are numbered otherwise: only the order is
# compared).


async def line(shared: SharedStoreUnderTest, queue: str = "q") -> list[str]:
    """The lanes in ``queue``'s line, front first."""
    return [row[0] for row in await shared.rows(
        f"SELECT lane FROM tickwork_turns WHERE queue = '{queue}' ORDER BY turn, lane")]


async def wide(shared: SharedStoreUnderTest, queue: str = "q", max_running: int = 10) -> None:
    await shared.store.put_limit(ConcurrencyLimit("queue", queue, max_running), T0)


@covers("claim", "claim_or_probe", "settle_and_claim", "put_limit")
async def test_a_wide_queues_lanes_take_turns_priority_and_age_within_a_lane(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await wide(shared_store)
    await queued(shared_store, "a0", "a1", "a2", "a3", lane="A")
    await queued(shared_store, "b0", lane="B")
    await store.insert(valid_job("c0", lane="C"), T0)
    await store.insert(valid_job("c1", lane="C", priority=5), T0)  # orders C's jobs, not lanes
    await queued(shared_store, "s0", "s1", queue="serial", lane="A")
    assert await line(shared_store) == ["A", "B", "C"]
    assert await line(shared_store, "serial") == []  # a serial queue has no line
    # The first claim's global pick is c1 (priority 5): its queue is wide,
    # so the claim takes the first lane's best job instead, and that lane
    # goes to the back.
    assert (await claimed(shared_store, "t1")).job_id == "a0"
    assert await line(shared_store) == ["B", "C", "A"]
    # B's last ready job starts: B leaves the line.
    job, _ = await store.claim_or_probe("t2", LEASE, T0)
    assert job is not None and job.job_id == "b0"
    assert await line(shared_store) == ["C", "A"]
    (sequence, token), = await shared_store.rows(
        "SELECT sequence, claim_token FROM tickwork_jobs WHERE job_id = 'a0'")
    settled, job = await store.settle_and_claim(sequence, token, COMPLETED, T0 + 1,
                                                next_token="t3", lease_ms=LEASE)
    assert settled and job is not None and job.job_id == "c1"
    assert await claim_all(shared_store, "t4") == ["a1", "c0", "a2", "a3", "s0"]
    assert await line(shared_store) == []


@covers("insert", "insert_many", "claim", "requeue_expired", "release_claim", "retry",
        "redrive", "put_back_rate_limited", "fire_slots")
async def test_a_lane_joins_its_wide_queues_line_at_the_back_when_a_job_of_it_becomes_ready(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await wide(shared_store)
    await wide(shared_store, "sched")
    await queued(shared_store, "first", lane="front")  # ingest
    await store.insert(valid_job("later", lane="delayed", delay_ms=1000), T0)  # not ready
    await store.insert_many([valid_job("m1", lane="M"), valid_job("n1", lane="N"),
                             valid_job("m2", lane="M")], T0)
    assert await line(shared_store) == ["front", "M", "N"]
    # A claim moves the jobs whose time came into the ready set first.
    assert (await claimed(shared_store, "t0", T0 + 1000)).job_id == "first"
    assert await line(shared_store) == ["M", "N", "delayed"]
    now = T0 + 1000
    tokens = iter(f"t{number}" for number in range(1, 100))

    async def start(job_id: str) -> tuple[JobRecord, str]:
        while True:
            token = next(tokens)
            job = await claimed(shared_store, token, now)
            if job.job_id == job_id:
                return job, token

    # Each of these makes the started job "first" ready again: its lane,
    # out of the line since, joins at the back.
    job = await store.find("first")
    assert job is not None
    now += LEASE
    assert await store.requeue_expired(job.sequence, "t0", now) is True  # recovery
    assert (await line(shared_store))[-1] == "front"
    job, token = await start("first")
    assert await store.release_claim(job.sequence, token) is True  # put back unstarted
    assert (await line(shared_store))[-1] == "front"
    job, token = await start("first")
    assert await store.put_back_rate_limited(job.sequence, token, "lane", "other", now,
                                             now) is not None
    assert (await line(shared_store))[-1] == "front"
    job, token = await start("first")
    assert await store.retry(job.sequence, token, FAILED, 500, now) is not None
    assert "front" not in await line(shared_store)  # due later: not ready yet
    await queued(shared_store, "x1", lane="X", now=now)
    now += 500
    assert (await claimed(shared_store, "t-due", now)).job_id != "first"
    assert "front" in await line(shared_store)  # the claim's promotion brought it
    job, token = await start("first")
    assert await store.settle(job.sequence, token, FAILED, now, cancelled=False)
    assert await store.redrive("first", "r1", now) is not None  # a dead letter redriven
    assert (await line(shared_store))[-1] == "front"
    schedule = valid_schedule(queue="sched")  # a schedule's slot
    await store.create_schedule(schedule, T0, T0)
    created, _ = await store.fire_slots(schedule, [T0], T0 + 60_000, T0)
    assert len(created) == 1
    assert await line(shared_store, "sched") == ["sched"]
    # A lane in the line keeps its place when another of its jobs is ready.
    await queued(shared_store, "p1", lane="P")
    await queued(shared_store, "f1", lane="front")
    await queued(shared_store, "p2", lane="P")
    assert (await line(shared_store))[-2:] == ["front", "P"]


@covers("claim", "put_limit", "put_back_rate_limited", "record_cancellation")
async def test_a_lane_that_cannot_start_keeps_its_place_and_one_without_a_ready_job_leaves(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await wide(shared_store)
    await store.put_limit(ConcurrencyLimit("lane", "A", 1), T0)
    await queued(shared_store, "a0", "a1", lane="A")
    await queued(shared_store, "b0", "b1", lane="B")
    await queued(shared_store, "c0", lane="C")
    await queued(shared_store, "d0", lane="D")
    assert (await claimed(shared_store, "t1")).job_id == "a0"
    assert await line(shared_store) == ["B", "C", "D", "A"]
    # C's only job is cancelled: C stays in the line, passed over, until a
    # claim passes it (PostgreSQL may keep it longer); A is at its lane
    # limit: passed over, it keeps its place.
    assert await store.record_cancellation("c0", "c-1", "only_if_queued") is True
    assert await claim_all(shared_store, "t2") == ["b0", "d0", "b1"]
    stale = [] if shared_store.kind == "postgres" else ["C"]
    assert [lane for lane in await line(shared_store) if lane not in stale] == ["A"]
    await settle_job(shared_store, "a0")
    # Rate-held, a lane keeps its place too, and goes first once released.
    await queued(shared_store, "b2", lane="B")
    await store.put_back_rate_limited(0, "none", "lane", "A", T0 + 100, T0)
    assert (await claimed(shared_store, "t3", T0)).job_id == "b2"
    assert [lane for lane in await line(shared_store) if lane != "C"] == ["A"]
    await queued(shared_store, "b3", lane="B")
    assert (await claimed(shared_store, "t4", T0 + 100)).job_id == "a1"


@covers("put_limit", "delete_limit")
async def test_a_queue_that_becomes_wide_lines_up_its_lanes_by_their_oldest_ready_job(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await queued(shared_store, "b0", lane="B")
    await store.insert(valid_job("c0", lane="C", delay_ms=1000), T0)  # not ready
    await queued(shared_store, "a0", lane="A")
    await queued(shared_store, "b1", lane="B")
    await queued(shared_store, "d0", lane="D")
    await store.record_cancellation("d0", "c-1", "only_if_queued")  # not ready
    await store.put_limit(ConcurrencyLimit("lane", "A", 3), T0)  # a lane's limit: no line
    assert await line(shared_store) == []
    await store.put_limit(ConcurrencyLimit("queue", "q", 1), T0)  # serial still
    assert await line(shared_store) == []
    await store.put_limit(ConcurrencyLimit("queue", "q", 3), T0)
    assert await line(shared_store) == ["B", "A"]
    assert (await claimed(shared_store, "t1")).job_id == "b0"
    # A wide queue given another wide limit keeps its line as it is.
    await store.put_limit(ConcurrencyLimit("queue", "q", 4), T0)
    assert await line(shared_store) == ["A", "B"]
    await store.put_limit(ConcurrencyLimit("queue", "q", 1), T0)  # serial again: no line
    assert await line(shared_store) == []
    await store.put_limit(ConcurrencyLimit("queue", "q", 2), T0)
    assert await line(shared_store) == ["A", "B"]
    await store.delete_limit("queue", "q")
    assert await line(shared_store) == []
    await settle_job(shared_store, "b0")
    assert await claim_all(shared_store, "t2") == ["a0"]  # serial: the head, one at a time


@covers("ready_ahead")
async def test_ready_ahead_in_a_wide_queue_follows_the_turns(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await wide(shared_store)
    await queued(shared_store, "a0", "a1", "a2", lane="A")
    await queued(shared_store, "b0", lane="B")
    await store.insert(valid_job("c0", lane="C"), T0)
    await store.insert(valid_job("c1", lane="C", priority=5), T0)
    await store.insert(valid_job("late", lane="E", delay_ms=1000), T0)  # not ready: never ahead
    found = {job_id: await store.find(job_id) for job_id in ("a0", "a2", "b0", "c0", "late")}

    async def ahead(job_id: str, limit: int = 10) -> list[str]:
        job = found[job_id]
        assert job is not None
        return await store.ready_ahead("q", job.priority, job.sequence, limit)

    # The claims take a0, b0, c1, then a1, c0, then a2.
    assert await ahead("a0") == []
    assert await ahead("b0") == ["a0"]
    assert await ahead("c0") == ["a0", "b0", "c1", "a1"]
    assert await ahead("c0", 2) == ["a0", "b0"]
    assert await ahead("a2") == ["a0", "b0", "c1", "a1", "c0"]
    # A job whose lane is not in the line would join at its back.
    assert await ahead("late") == ["a0", "b0", "c1"]


# ------------------------------------------------------------ rate limits


@covers("has_pending_work", "next_work")
async def test_a_rate_held_job_is_no_work_until_its_key_is_released(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await queued(shared_store, "a", queue="q", lane="L")
    await queued(shared_store, "b", queue="r", lane="M")
    # Queue q held until T0 + 500; lane M's bucket (1 per s) next allows a
    # start at T0 + 300 (as a claim at T0 - 700 leaves it).
    await store.put_back_rate_limited(0, "none", "queue", "q", T0 + 500, T0)
    await store.put_rate_limit(RateLimit("lane", "M", 1, 1000, 1), T0)
    await shared_store.rows(
        f"UPDATE tickwork_rate_limits SET next_start = {T0 + 300} WHERE key = 'M'")
    assert await store.has_pending_work(T0) is False
    pending, next_due, now, next_slot = await store.next_work(T0)
    assert (bool(pending), next_due, now, next_slot) == (False, T0 + 300, T0, None)
    assert await store.has_pending_work(T0 + 299) is False
    assert await store.has_pending_work(T0 + 300) is True  # b may start
    # Only keys that hold back a job a claim could take wake anyone: not a
    # paused queue's, nor one whose jobs wait for their time or are cancelled.
    await store.pause_queue("r", T0)
    pending, next_due, _, _ = await store.next_work(T0)
    assert (bool(pending), next_due) == (False, T0 + 500)
    await store.pause_queue("q", T0)
    assert (await store.next_work(T0))[1] is None
    await store.resume_queue("q")
    await store.resume_queue("r")
    await store.insert(valid_job("later", "s", delay_ms=60_000), T0)
    await store.insert(valid_job("cancelled", "c"), T0)
    await store.record_cancellation("cancelled", "c-1", "only_if_queued")
    await store.put_back_rate_limited(0, "none", "queue", "s", T0 + 100, T0)
    await store.put_back_rate_limited(0, "none", "queue", "c", T0 + 100, T0)
    pending, next_due, _, _ = await store.next_work(T0)
    # The cancelled job is work (a tick settles it), the delayed one's time
    # is the next due time; the holds on s and c wake nothing.
    assert (bool(pending), next_due) == (True, T0 + 300)
    await store.settle_next_cancelled(T0)
    assert tuple((await store.next_work(T0))[:2]) == (0, T0 + 300)


@covers("put_rate_limit", "rate_limits")
async def test_put_and_list_rate_limits(shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.rate_limits(T0) == []
    assert await store.put_rate_limit(RateLimit("queue", "q", 3, 1000, 3), T0) is True
    # The same bucket again writes nothing, updated_at included.
    assert await store.put_rate_limit(RateLimit("queue", "q", 3, 1000, 3), T0 + 1) is False
    assert await shared_store.rows(
        "SELECT starts, period_ms, burst, next_start, held_until, updated_at "
        "FROM tickwork_rate_limits") == [(3, 1000, 3, 0, 0, T0)]
    assert await store.put_rate_limit(RateLimit("lane", "tenant-b", 10, 60_000, 2),
                                      T0 + 2) is True
    assert await store.put_rate_limit(RateLimit("lane", "é", 1, 1, 1), T0 + 3) is True
    assert await store.put_rate_limit(RateLimit(
        "queue", "a", MAX_RATE_STARTS, MAX_RATE_PERIOD_MS, MAX_RATE_STARTS), T0 + 4) is True
    # A queue and a lane of the same name are two rows.
    assert await store.put_rate_limit(RateLimit("lane", "q", 5, 1000, 5), T0 + 5) is True
    # Queues first, then lanes, each by key; a full bucket's next start is 0.
    assert await store.rate_limits(T0 + 10) == [
        RateLimit("queue", "a", MAX_RATE_STARTS, MAX_RATE_PERIOD_MS, MAX_RATE_STARTS, 0, None,
                  T0 + 4),
        RateLimit("queue", "q", 3, 1000, 3, 0, None, T0),
        RateLimit("lane", "q", 5, 1000, 5, 0, None, T0 + 5),
        RateLimit("lane", "tenant-b", 10, 60_000, 2, 0, None, T0 + 2),
        RateLimit("lane", "é", 1, 1, 1, 0, None, T0 + 3)]
    # Without a test clock, database time stamps it and judges holds.
    before = int(time.time() * 1000)
    assert await store.put_rate_limit(RateLimit("queue", "now", 2, 1000, 2), None) is True
    (updated_at,), = await shared_store.rows(
        "SELECT updated_at FROM tickwork_rate_limits WHERE key = 'now'")
    assert before - 5_000 <= updated_at <= int(time.time() * 1000) + 5_000
    assert [limit.key for limit in await store.rate_limits(None)] == [
        "a", "now", "q", "q", "tenant-b", "é"]


@covers("put_rate_limit", "rate_limits")
async def test_a_replaced_bucket_keeps_its_next_start_time_in_its_new_units(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.put_rate_limit(RateLimit("queue", "q", 3, 1000, 3), T0) is True
    # A next start that is not a whole ms: 1/3 ms past T0 + 1000.
    await shared_store.rows(
        f"UPDATE tickwork_rate_limits SET next_start = {(T0 + 1000) * 3 + 1}")
    [limit] = await store.rate_limits(T0)
    assert limit.next_start_at == T0 + 1001  # rounded up
    assert await store.put_rate_limit(RateLimit("queue", "q", 7, 2000, 4), T0 + 20) is True
    # Read as text: the value is above 2^53, which a JavaScript number rounds.
    assert await shared_store.rows(
        "SELECT starts, period_ms, burst, CAST(next_start AS TEXT), updated_at "
        "FROM tickwork_rate_limits") == [(7, 2000, 4, str((T0 + 1001) * 7), T0 + 20)]
    assert await store.rate_limits(T0 + 20) == [
        RateLimit("queue", "q", 7, 2000, 4, T0 + 1001, None, T0 + 20)]
    # The largest values a bucket may hold stay exact (now * starts ~ 1.8e17).
    assert await store.put_rate_limit(RateLimit("queue", "q", MAX_RATE_STARTS, 2000, 4),
                                      T0 + 21) is True
    assert await shared_store.rows(
        "SELECT CAST(next_start AS TEXT) FROM tickwork_rate_limits") == [
        (str((T0 + 1001) * MAX_RATE_STARTS),)]
    assert (await store.rate_limits(T0))[0].next_start_at == T0 + 1001


@covers("put_rate_limit", "put_back_rate_limited", "rate_limits")
async def test_a_key_with_only_a_hold_gets_a_full_bucket_and_keeps_its_hold(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    # No such claim: nothing put back, the hold is written all the same.
    assert await store.put_back_rate_limited(999, "nothing", "lane", "held", T0 + 5000,
                                             T0) is None
    assert await store.rate_limits(T0 + 1) == [
        RateLimit("lane", "held", None, None, None, None, T0 + 5000, T0)]
    assert await store.put_rate_limit(RateLimit("lane", "held", 2, 1000, 2), T0 + 2) is True
    assert await shared_store.rows("SELECT starts, next_start, held_until, updated_at "
                                   "FROM tickwork_rate_limits") == [(2, 0, T0 + 5000, T0 + 2)]
    assert await store.rate_limits(T0 + 3) == [
        RateLimit("lane", "held", 2, 1000, 2, 0, T0 + 5000, T0 + 2)]
    # Once the hold has passed, the row is listed for its bucket alone.
    assert await store.rate_limits(T0 + 5000) == [
        RateLimit("lane", "held", 2, 1000, 2, 0, None, T0 + 2)]


@covers("delete_rate_limit", "rate_limits")
async def test_delete_rate_limit_says_whether_a_bucket_or_a_hold_in_force_was_there(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await store.put_rate_limit(RateLimit("queue", "q", 3, 1000, 3), T0)
    await store.put_rate_limit(RateLimit("lane", "tenant-b", 3, 1000, 3), T0)
    assert await store.delete_rate_limit("queue", "tenant-b", T0) is False  # a lane's key
    assert await store.delete_rate_limit("queue", "q", T0) is True
    assert await store.delete_rate_limit("queue", "q", T0) is False
    # Holds alone, judged by the clock given (None: the database's): one
    # passed (T0 is in the past), one in force for an hour.
    hour_ahead = int(time.time() * 1000) + 3_600_000
    await store.put_back_rate_limited(999, "nothing", "queue", "brief", T0 + 100, T0)
    await store.put_back_rate_limited(999, "nothing", "queue", "long", hour_ahead, T0)
    assert [limit.key for limit in await store.rate_limits(T0 + 99)] == [
        "brief", "long", "tenant-b"]
    assert [limit.key for limit in await store.rate_limits(None)] == ["long", "tenant-b"]
    assert await store.delete_rate_limit("queue", "brief", None) is False  # passed
    assert await store.delete_rate_limit("queue", "long", None) is True
    # Either way the row is gone.
    assert await shared_store.rows("SELECT kind, key FROM tickwork_rate_limits") == [
        ("lane", "tenant-b")]
    assert await store.delete_rate_limit("lane", "tenant-b", T0) is True
    assert await store.rate_limits(T0) == []


@covers("put_rate_limit")
async def test_the_rate_limits_table_refuses_a_bad_row(
        shared_store: SharedStoreUnderTest) -> None:
    insert = ("INSERT INTO tickwork_rate_limits (kind, key, starts, period_ms, burst, "
              "updated_at) VALUES ('{}', 'k', {}, {}, {}, 1)")
    for kind, starts, period_ms, burst in (
            ("tenant", 1, 1, 1), ("queue", 0, 1, 1), ("queue", MAX_RATE_STARTS + 1, 1, 1),
            ("lane", 1, 0, 1), ("lane", 1, MAX_RATE_PERIOD_MS + 1, 1), ("queue", 1, 1, 0),
            ("queue", 1, 1, MAX_RATE_STARTS + 1), ("queue", 1, "NULL", 1),
            ("queue", "NULL", "NULL", 1)):
        with pytest.raises(Exception, match=r"(?i)constraint"):
            await shared_store.rows(insert.format(kind, starts, period_ms, burst))
    await shared_store.rows(insert.format("queue", "NULL", "NULL", "NULL"))  # a hold alone
    with pytest.raises(Exception, match=r"(?i)constraint"):  # one row per kind and key
        await shared_store.rows(insert.format("queue", 1, 1, 1))


@covers("put_back_rate_limited")
async def test_put_back_rate_limited_holds_the_key_and_queues_the_job_without_an_attempt(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await queued(shared_store, "a", queue="q", lane="L")
    job = await claimed(shared_store, "t1", T0 + 1)
    # Another claim's token: nothing put back, the hold written.
    assert await store.put_back_rate_limited(job.sequence, "stale", "lane", "L", T0 + 5000,
                                             T0 + 2) is None
    assert await column(shared_store, "a", "state", "claim_token") == ("running", "t1")
    assert await store.rate_limits(T0 + 2) == [
        RateLimit("lane", "L", None, None, None, None, T0 + 5000, T0 + 2)]
    # The lease has expired by T0 + 1 + LEASE: the claim is not the job's to put back.
    assert await store.put_back_rate_limited(job.sequence, "t1", "lane", "L", T0 + 4000,
                                             T0 + 1 + LEASE) is None
    assert await column(shared_store, "a", "state") == ("running",)
    back = await store.put_back_rate_limited(job.sequence, "t1", "lane", "L", T0 + 4000,
                                             T0 + 3)
    assert back is not None
    assert (back.job_id, back.state, back.attempt, back.recoveries, back.started_at,
            back.due_at, back.history) == ("a", "queued", 1, 0, None, None, ())
    assert await column(shared_store, "a", "claim_token", "started_at", "due_at") == (
        None, None, None)
    if shared_store.kind != "postgres":
        assert await column(shared_store, "a", "lease_expires_at") == (None,)
    # An earlier hold leaves the later one (and its updated_at) as it was.
    assert await store.rate_limits(T0 + 3) == [
        RateLimit("lane", "L", None, None, None, None, T0 + 5000, T0 + 2)]
    # Put back twice: the second finds no claim, and only moves the hold on.
    assert await store.put_back_rate_limited(job.sequence, "t1", "lane", "L", T0 + 6000,
                                             T0 + 4) is None
    assert await store.rate_limits(T0 + 4) == [
        RateLimit("lane", "L", None, None, None, None, T0 + 6000, T0 + 4)]


@covers("put_back_rate_limited")
async def test_put_back_rate_limited_keeps_the_attempt_and_history_and_obeys_a_cancellation(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await store.insert(valid_job("a", "q", retry=Retry(3)), T0)
    job = await claimed(shared_store, "t1", T0 + 1)
    assert await store.retry(job.sequence, "t1", RAISED, 0, T0 + 2) is not None
    job = await claimed(shared_store, "t2", T0 + 3)  # the claim moves due jobs first
    before = await store.find("a")
    assert before is not None and before.attempt == 2 and len(before.history) == 1
    back = await store.put_back_rate_limited(job.sequence, "t2", "queue", "q", T0 + 500,
                                             T0 + 4)
    assert back is not None
    assert (back.state, back.attempt, back.recoveries, back.history, back.error) == (
        "queued", 2, 0, before.history, before.error)
    job = await claimed(shared_store, "t3", T0 + 600)
    await store.record_cancellation("a", "c", "any")
    assert await store.put_back_rate_limited(job.sequence, "t3", "queue", "q", T0 + 900,
                                             T0 + 601) is None
    assert await column(shared_store, "a", "state", "claim_token", "attempt") == (
        "running", "t3", 2)
    assert (await store.rate_limits(T0 + 601))[0].held_until == T0 + 900  # written anyway


@covers("settled_queues")
async def test_settled_queues_names_each_queue_with_settled_jobs_once(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.settled_queues() == []
    for job_id, queue in (("b1", "b"), ("a1", "a"), ("b2", "b"), ("c1", "c")):
        await dead_letter(shared_store, job_id, queue, T0 + 1, COMPLETED)
    await queued(shared_store, "waiting", queue="only-queued")
    assert await store.settled_queues() == ["a", "b", "c"]


@covers("prune_settled")
async def test_prune_settled_deletes_settled_jobs_past_their_cutoff_and_their_redrive_ids(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.prune_settled("q", T0 + 100, T0 + 100, 10) == 0  # the empty case
    await dead_letter(shared_store, "done", "q", T0 + 1, COMPLETED)
    await dead_letter(shared_store, "stopped", "q", T0 + 2, Settlement("cancelled"))
    await dead_letter(shared_store, "young", "q", T0 + 50, COMPLETED)
    await dead_letter(shared_store, "broke", "q", T0 + 3)
    assert await store.redrive("broke", "r1", T0 + 4) is not None
    job = await claimed(shared_store, "t-again", T0 + 4)
    assert await store.settle(job.sequence, "t-again", FAILED, T0 + 5, cancelled=False)
    await dead_letter(shared_store, "lost", "q", T0 + 6, Settlement("outcome_unknown"))
    await dead_letter(shared_store, "elsewhere", "other", T0 + 1, COMPLETED)
    await queued(shared_store, "running")
    await claimed(shared_store, "t-run")
    await queued(shared_store, "waiting")
    # Completed and cancelled before T0 + 10; failures kept (None).
    assert await store.prune_settled("q", T0 + 10, None, 10) == 2
    assert set(await job_ids(shared_store)) == {
        "young", "broke", "lost", "elsewhere", "waiting", "running"}
    # The failures before T0 + 10, one at a time (the limit), with the redrive id.
    assert await store.prune_settled("q", None, T0 + 10, 1) == 1
    assert await store.prune_settled("q", None, T0 + 10, 1) == 1
    assert await store.prune_settled("q", None, T0 + 10, 1) == 0
    assert await shared_store.rows("SELECT job_id FROM tickwork_redrives") == []
    # A cutoff far ahead leaves every queued and running job.
    assert await store.prune_settled("q", T0 + 10**9, T0 + 10**9, 10) == 1  # "young"
    assert sorted(await job_ids(shared_store)) == ["elsewhere", "running", "waiting"]


@covers("storage_usage")
async def test_storage_usage_counts_each_table_and_sizes_what_it_can(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    empty = await store.storage_usage()
    assert empty.rows == {"tickwork_jobs": 0, "tickwork_redrives": 0, "tickwork_schedules": 0,
                          "tickwork_paused_queues": 0, "tickwork_retention": 0,
                          "tickwork_limits": 0, "tickwork_rate_limits": 0,
                          "tickwork_queue_history": 0, "tickwork_turns": 0}
    await dead_letter(shared_store, "d", "q", T0 + 1)
    await store.redrive("d", "r1", T0 + 2)
    await queued(shared_store, "a", "b")
    await store.create_schedule(valid_schedule(), T0 + 60_000, T0)
    await store.pause_queue("q", T0)
    await store.put_retention(RetentionPolicy("q", None, None), T0)
    await store.put_limit(ConcurrencyLimit("lane", "tenant", 2), T0)
    await store.put_limit(ConcurrencyLimit("queue", "q", 2), T0)  # its one lane is in its line
    await store.put_rate_limit(RateLimit("lane", "tenant", 2, 1000, 2), T0)
    report = await store.storage_usage()
    assert report.rows == {"tickwork_jobs": 3, "tickwork_redrives": 1, "tickwork_schedules": 1,
                           "tickwork_paused_queues": 1, "tickwork_retention": 1,
                           "tickwork_limits": 2, "tickwork_rate_limits": 1,
                           "tickwork_queue_history": 0, "tickwork_turns": 1}
    if shared_store.kind == "postgres":  # the tickwork tables, indexes included
        assert empty.size_bytes is not None and report.size_bytes is not None
        assert report.size_bytes >= empty.size_bytes > 0
    else:  # D1 reports its size elsewhere (wrangler d1 info)
        assert (empty.size_bytes, report.size_bytes) == (None, None)


# ------------------------------------------------------ history over time

MINUTE = 60_000
M0 = T0 - T0 % MINUTE  # the minute T0 is in


def history_rows(rows: Any) -> list[tuple[Any, ...]]:
    """Rows with every number as a Python int (PostgreSQL's bigint sums are ints)."""
    return [tuple(value if value is None or isinstance(value, str) else int(value)
                  for value in row) for row in rows]


@covers("add_history", "history")
async def test_add_history_adds_to_the_minute_rows_and_history_sums_them(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.history("q", M0, M0 + 10 * MINUTE, MINUTE) is None  # never seen
    await store.add_history([])  # nothing to write: no statement, no row
    await store.add_history([HistoryRow("q", M0, enqueued=2, started=1),
                             HistoryRow("q", M0 + MINUTE, completed=1, retried=1),
                             HistoryRow("z é", M0, failed=1)])
    # A second flush of the same minutes adds to them.
    await store.add_history([HistoryRow("q", M0, enqueued=1, cancelled=1),
                             HistoryRow("q", M0 + 5 * MINUTE, started=3)])
    minutes = await store.history("q", M0, M0 + 10 * MINUTE, MINUTE)
    assert minutes is not None
    assert history_rows(minutes) == [
        (M0, 3, 1, 0, 0, 1, 0, None, None), (M0 + MINUTE, 0, 0, 1, 0, 0, 1, None, None),
        (M0 + 5 * MINUTE, 0, 3, 0, 0, 0, 0, None, None)]
    hour = 60 * MINUTE
    start = M0 - M0 % hour
    hours = await store.history("q", start, start + 2 * hour, hour)
    assert hours is not None
    expected: dict[int, list[int]] = {}
    for minute, added in ((M0, (3, 1, 0)), (M0 + MINUTE, (0, 0, 1)),
                          (M0 + 5 * MINUTE, (0, 3, 0))):
        bucket = expected.setdefault(minute - minute % hour, [0, 0, 0])
        bucket[:] = [a + b for a, b in zip(bucket, added, strict=True)]
    assert [tuple(int(value) for value in row[:4]) for row in hours] == [
        (bucket, *values) for bucket, values in sorted(expected.items())]
    # Known, with nothing in the range: no rows (not None).
    assert await store.history("q", M0 + 6 * MINUTE, M0 + 9 * MINUTE, MINUTE) == []
    assert history_rows(await store.history("z é", M0, M0 + MINUTE, MINUTE) or []) == [
        (M0, 0, 0, 0, 1, 0, 0, None, None)]


@covers("sample_history")
async def test_sample_history_writes_each_queues_capped_depth_and_head_wait(
        shared_store: SharedStoreUnderTest, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(d1_store, "DEPTH_CAP", 2)  # the same statement, a smaller cap
    monkeypatch.setattr(postgres_store, "DEPTH_CAP", 2)
    store = shared_store.store
    await queued(shared_store, "a", "b", "c")  # q: three waiting, over the cap of 2
    assert await store.insert(valid_job("later", "q2", delay_ms=10 * MINUTE), T0)
    await store.add_history([HistoryRow("gone", M0 - MINUTE, completed=1)])
    await store.sample_history(T0 + 30_000, M0 - MINUTE, ["counted"])
    assert history_rows(await shared_store.rows(
        "SELECT queue, minute, depth, oldest_age_ms FROM tickwork_queue_history "
        f"WHERE minute = {M0} ORDER BY queue")) == [
        ("counted", M0, 0, None),  # named by the flush: sampled, empty
        ("q", M0, 3, 30_000),  # depth 3 = the cap + 1: "more than 2"
        ("q2", M0, 1, None)]  # waiting for its time: none ready
    # A later minute: q emptied (its row since then says it was not empty).
    for token in ("t1", "t2", "t3"):
        job = await claimed(shared_store, token, T0 + MINUTE)
        assert await store.settle(job.sequence, token, COMPLETED, T0 + MINUTE, cancelled=False)
    await store.sample_history(T0 + 2 * MINUTE, M0, [])
    assert history_rows(await shared_store.rows(
        "SELECT queue, depth FROM tickwork_queue_history "
        f"WHERE minute = {M0 + 2 * MINUTE} ORDER BY queue")) == [("q", 0), ("q2", 1)]


@covers("prune_history")
async def test_prune_history_deletes_the_oldest_minutes_a_batch_at_a_time(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await store.add_history([HistoryRow("q", M0 + number * MINUTE, enqueued=1)
                             for number in range(3)])
    keep = 7 * 24 * 60 * MINUTE
    now = M0 + 2 * MINUTE + keep  # everything before M0 + 2 minutes is past
    assert await store.prune_history(now, keep, 1) == 1
    assert await store.prune_history(now, keep, 10) == 1
    assert await store.prune_history(now, keep, 10) == 0
    assert history_rows(await shared_store.rows(
        "SELECT minute FROM tickwork_queue_history")) == [(M0 + 2 * MINUTE,)]
