"""The owner-local store's contract: every public method of ``OwnerLocalStore``,
called directly on sqlite3 and on a Durable Object's storage (both SDK
shapes; in the real-Pyodide tier, the JavaScript ctx.storage).

Each test names the methods it covers (``@covers``);
``test_every_store_method_has_a_contract_test`` fails when a public method
has none. Rows are read back with the host's own SQL, beside the store.
"""

from __future__ import annotations

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
from tests.contract.under_test import LocalStoreUnderTest
from tickwork import JobRecord, Retry
from tickwork.lifecycle import Settlement
from tickwork.lifecycle.requests import JobListing
from tickwork.model.errors import IngestConflict
from tickwork.model.history import HistoryRow
from tickwork.model.limits import ConcurrencyLimit
from tickwork.model.rate_limits import MAX_RATE_PERIOD_MS, MAX_RATE_STARTS, RateLimit
from tickwork.model.retention import RetentionPolicy
from tickwork.stores.owner_local import EVERY_JOB, OwnerLocalStore, inside_lane, outside_lane
from tickwork.stores.owner_schema import SCHEMA_VERSION


def test_every_store_method_has_a_contract_test() -> None:
    assert coverage_gaps(OwnerLocalStore, globals()) == []


def column(local: LocalStoreUnderTest, job_id: str, *names: str) -> tuple[Any, ...]:
    rows = local.rows(f"SELECT {', '.join(names)} FROM tickwork_jobs WHERE job_id = ?", (job_id,))
    assert len(rows) == 1, f"{job_id}: {rows}"
    return rows[0]


def queued(local: LocalStoreUnderTest, *job_ids: str, queue: str = "q",
           lane: str | None = None) -> None:
    for job_id in job_ids:
        assert local.store.insert(valid_job(job_id, queue, lane=lane), T0)


def claimed(local: LocalStoreUnderTest, token: str, now: int = T0) -> JobRecord:
    job = local.store.claim_next(EVERY_JOB, token, now)
    assert job is not None, "nothing to claim"
    return job


# ----------------------------------------------------------------- reads


@covers("schema_version")
def test_schema_version_is_the_one_the_package_applies(local_store: LocalStoreUnderTest) -> None:
    assert local_store.store.schema_version() == SCHEMA_VERSION


@covers("insert", "find")
def test_insert_stores_a_queued_job_once(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.find("a") is None
    job = valid_job("a", "q", lane="l", priority=3, payload={"n": 1}, max_recoveries=2)
    assert store.insert(job, T0) is True
    record = store.find("a")
    assert record is not None
    assert (record.job_id, record.queue, record.lane, record.priority, record.payload) == (
        "a", "q", "l", 3, {"n": 1})
    assert (record.state, record.outcome, record.attempt, record.recoveries) == (
        "queued", None, 1, 0)
    assert record.enqueued_at == T0 and record.started_at is None and record.due_at is None
    assert record.recovery is not None and record.recovery.max_recoveries == 2
    # Idempotent on job_id: a second insert, even of other cargo, writes nothing.
    assert store.insert(valid_job("a", "other", payload={"n": 2}), T0 + 5) is False
    assert column(local_store, "a", "queue", "payload_json", "enqueued_at") == (
        "q", '{"n":1}', T0)


@covers("insert")
def test_insert_sets_the_due_time_a_job_names(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    store.insert(valid_job("delayed", delay_ms=5000), T0)
    store.insert(valid_job("later", run_at=T0 + 9000), T0)
    store.insert(valid_job("past", run_at=T0 - 1000), T0)
    store.insert(valid_job("retrying", retry=Retry(3)), T0)
    assert column(local_store, "delayed", "delay_ms", "due_at") == (5000, T0 + 5000)
    assert column(local_store, "later", "run_at", "due_at") == (T0 + 9000, T0 + 9000)
    assert column(local_store, "past", "run_at", "due_at") == (T0 - 1000, None)
    retry_json = column(local_store, "retrying", "retry_json")[0]
    assert retry_json is not None and '"attempts":3' in retry_json


@covers("find_cargo")
def test_find_cargo_returns_what_was_inserted(local_store: LocalStoreUnderTest) -> None:
    job = valid_job("a", priority=-2, payload={"z": [1, 2]}, max_recoveries=0, delay_ms=10,
                    retry=Retry(2))
    assert local_store.store.find_cargo("a") is None
    local_store.store.insert(job, T0)
    assert local_store.store.find_cargo("a") == job


@covers("insert_many")
def test_insert_many_flags_new_jobs_and_identical_replays(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    store.insert(valid_job("stored", payload={"v": 1}), T0)
    seen: list[str] = []
    flags = store.insert_many(
        [valid_job("new"), valid_job("stored", payload={"v": 1}), valid_job("new")],
        T0, lambda job: seen.append(job.job_id))
    assert flags == [True, False, False]
    assert seen == ["new"]
    assert local_store.rows("SELECT job_id FROM tickwork_jobs ORDER BY sequence") == [
        ("stored",), ("new",)]
    assert store.insert_many([], T0, lambda job: seen.append(job.job_id)) == []


@covers("insert_many")
def test_insert_many_writes_nothing_when_a_job_conflicts(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    store.insert(valid_job("stored", payload={"v": 1}), T0)
    with pytest.raises(IngestConflict) as raised:
        store.insert_many([valid_job("first"), valid_job("stored", payload={"v": 2})], T0,
                          lambda job: None)
    assert raised.value.job_id == "stored"
    assert local_store.rows("SELECT job_id FROM tickwork_jobs") == [("stored",)]
    with pytest.raises(IngestConflict):  # within the list, too
        store.insert_many([valid_job("x", "q1"), valid_job("x", "q2")], T0, lambda job: None)
    assert local_store.rows("SELECT count(*) FROM tickwork_jobs") == [(1,)]


@covers("list_new_rows")
def test_list_new_rows_lists_every_row_and_notes_how_far(
        local_store: LocalStoreUnderTest) -> None:
    queued(local_store, "a", "b", "c")
    # The first insert lists at once (it takes in what a store before it left);
    # the next ones wait for the batch.
    assert local_store.rows("SELECT job_id, listed FROM tickwork_jobs ORDER BY sequence") == [
        ("a", 1), ("b", 0), ("c", 0)]
    # Unlisted rows are read all the same.
    head = local_store.store.queue_head("q")
    assert head is not None and head.job_id == "a"
    local_store.store.list_new_rows()
    assert local_store.rows("SELECT listed FROM tickwork_jobs") == [(1,), (1,), (1,)]
    last = local_store.rows("SELECT max(sequence) FROM tickwork_jobs")[0][0]
    assert local_store.rows(
        "SELECT value FROM tickwork_meta WHERE key = 'listed_through'") == [(str(last),)]
    local_store.store.list_new_rows()  # nothing new: nothing changes
    assert local_store.rows("SELECT count(*) FROM tickwork_jobs WHERE listed = 1") == [(3,)]


@covers("insert", "settle_claim")
def test_an_unbatched_store_lists_and_files_every_row_at_once(
        local_store: LocalStoreUnderTest) -> None:
    # A runtime with a concurrent lane opens its store with batched=False.
    store = OwnerLocalStore(local_store.store.database, batched=False)
    for job_id in ("a", "b"):
        assert store.insert(valid_job(job_id), T0)
    assert local_store.rows("SELECT job_id, listed FROM tickwork_jobs ORDER BY sequence") == [
        ("a", 1), ("b", 1)]
    for token in ("t1", "t2"):
        job = store.claim_next(EVERY_JOB, token, T0)
        assert job is not None
        assert store.settle_claim(job.sequence, token, COMPLETED, T0, cancelled=False,
                                  file=False)
    assert local_store.rows("SELECT filed FROM tickwork_jobs") == [(1,), (1,)]


@covers("queue_head")
def test_queue_head_is_the_running_job_else_the_best_ready_one(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.queue_head("q") is None
    store.insert(valid_job("waits", priority=9, delay_ms=1000), T0)
    store.insert(valid_job("low"), T0)
    store.insert(valid_job("high", priority=5), T0)
    store.insert(valid_job("high-later", priority=5), T0)
    store.insert(valid_job("elsewhere", "other", priority=10), T0)
    head = store.queue_head("q")
    assert head is not None and head.job_id == "high"
    store.claim_next(EVERY_JOB, "t", T0)  # "elsewhere" (priority 10)
    store.claim_next(EVERY_JOB, "t2", T0)  # "high"
    running = store.queue_head("q")
    assert running is not None and (running.job_id, running.state) == ("high", "running")


@covers("ready_ahead")
def test_ready_ahead_names_the_queues_ready_jobs_before_a_job_in_pick_order(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    store.insert(valid_job("late", priority=9, delay_ms=1000), T0)  # not due: not ready
    store.insert(valid_job("a", priority=5), T0)
    store.insert(valid_job("b", priority=5), T0)
    store.insert(valid_job("gone", priority=7), T0)
    store.insert(valid_job("c"), T0)
    store.insert(valid_job("elsewhere", "other", priority=10), T0)
    store.insert(valid_job("d"), T0)
    assert store.record_cancellation("gone", "c-1", False) == "q"
    d, b = store.find("d"), store.find("b")
    assert d is not None and b is not None
    # Cancelled, delayed and other queues' jobs are not ahead; the rest are,
    # in pick order (listed or not yet listed alike).
    assert store.ready_ahead("q", d.priority, d.sequence, 10) == ["a", "b", "c"]
    assert store.ready_ahead("q", d.priority, d.sequence, 2) == ["a", "b"]
    assert store.ready_ahead("q", b.priority, b.sequence, 10) == ["a"]
    store.claim_next(EVERY_JOB, "t", T0)  # "elsewhere" (priority 10)
    store.claim_next(EVERY_JOB, "t2", T0)  # "a": running, no longer ahead
    assert store.ready_ahead("q", d.priority, d.sequence, 10) == ["b", "c"]


@covers("latest_settled")
def test_latest_settled_is_the_last_settlement_of_the_queue(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    queued(local_store, "a", "b")
    assert store.latest_settled("q") is None
    for token, at in (("t1", T0 + 10), ("t2", T0 + 20)):
        job = claimed(local_store, token)
        assert store.settle_claim(job.sequence, token, COMPLETED, at, cancelled=False)
    latest = store.latest_settled("q")
    assert latest is not None and (latest.job_id, latest.settled_at) == ("b", T0 + 20)
    assert store.latest_settled("other") is None


@covers("find_claim")
def test_find_claim_returns_the_job_and_its_current_token(
        local_store: LocalStoreUnderTest) -> None:
    queued(local_store, "a")
    sequence = local_store.rows("SELECT sequence FROM tickwork_jobs")[0][0]
    found = local_store.store.find_claim(sequence)
    assert found is not None and found[0].state == "queued" and found[1] is None
    claimed(local_store, "tok")
    found = local_store.store.find_claim(sequence)
    assert found is not None and found[0].state == "running" and found[1] == "tok"
    assert local_store.store.find_claim(sequence + 100) is None


@covers("read_settled")
def test_read_settled_stops_at_the_first_unsettled_job(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    queued(local_store, "a", "b")
    queued(local_store, "fast-1", lane="fast")
    queued(local_store, "c")
    assert store.read_settled(0, 10, None) == []
    settled = []
    for token in ("t1", "t2", "t3"):
        job = claimed(local_store, token)
        store.settle_claim(job.sequence, token, COMPLETED, T0, cancelled=False)
        settled.append(job.job_id)
    assert settled == ["a", "b", "fast-1"]
    assert [job.job_id for job in store.read_settled(0, 10, None)] == ["a", "b", "fast-1"]
    first = store.read_settled(0, 1, None)
    assert [job.job_id for job in first] == ["a"]
    assert [job.job_id for job in store.read_settled(first[0].sequence, 10, None)] == [
        "b", "fast-1"]
    # Without the lane's jobs, the feed reads on to "c", which is unsettled.
    assert [job.job_id for job in store.read_settled(0, 10, "fast")] == ["a", "b"]


@covers("lane_has_pending")
def test_lane_has_pending_until_the_lane_settles(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.lane_has_pending("l") is False
    queued(local_store, "a", lane="l")
    assert store.lane_has_pending("l") is True and store.lane_has_pending("m") is False
    job = claimed(local_store, "t")
    assert store.lane_has_pending("l") is True
    store.settle_claim(job.sequence, "t", COMPLETED, T0, cancelled=False)
    assert store.lane_has_pending("l") is False


@covers("has_pending_work", "next_due", "next_work")
def test_pending_work_and_the_next_due_time(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.has_pending_work(T0) is False
    assert store.next_due() is None
    assert tuple(store.next_work(T0)) == (0, None, T0)
    store.insert(valid_job("later", delay_ms=5000), T0)
    assert store.has_pending_work(T0) is False
    assert store.next_due() == T0 + 5000
    assert tuple(store.next_work(T0)) == (0, T0 + 5000, T0)
    assert store.has_pending_work(T0 + 5000) is True  # its time has come
    store.create_schedule(valid_schedule(), T0 + 3000, T0)
    assert tuple(store.next_work(T0)) == (0, T0 + 3000, T0)  # a schedule's slot is work too
    assert store.next_due() == T0 + 5000  # but not a job's due time
    assert store.has_pending_work(T0 + 3000) is True
    store.insert(valid_job("ready", "paused"), T0)
    store.pause_queue("paused", T0)
    assert store.has_pending_work(T0) is False  # a paused queue's job waits
    store.resume_queue("paused")
    assert store.has_pending_work(T0) is True
    assert bool(store.next_work(T0)[0]) is True


@covers("has_pending_work")
def test_a_running_claim_or_a_waiting_cancellation_is_pending_work(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    queued(local_store, "a", "b", queue="q")
    claimed(local_store, "t")
    store.pause_queue("q", T0)  # "b" waits; "a" still runs
    assert store.has_pending_work(T0) is True
    assert store.record_cancellation("b", "c1", only_if_queued=True) == "q"
    store.fail_lane("q", "gone", 1, T0)  # "a" settles; cancelled "b" still waits
    assert store.has_pending_work(T0) is True


@covers("promote_due")
def test_promote_due_moves_due_jobs_into_the_ready_set(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    store.insert(valid_job("a", "qa", delay_ms=1000), T0)
    store.insert(valid_job("b", "qb", delay_ms=2000), T0)
    store.insert(valid_job("c", "qc", delay_ms=9000), T0)
    assert store.promote_due(T0 + 500, 10) == set()
    assert store.promote_due(T0 + 5000, 1) == {"qa"}  # the limit, earliest first
    assert store.promote_due(T0 + 5000, 10) == {"qb"}
    assert local_store.rows("SELECT job_id, due_at FROM tickwork_jobs ORDER BY job_id") == [
        ("a", None), ("b", None), ("c", T0 + 9000)]


@covers("status_groups", "backlog", "queue_counts")
def test_status_backlog_and_queue_counts(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert list(store.status_groups()) == [] and list(store.backlog()) == []
    assert tuple(store.queue_counts("q")) == (0, 0, 0, 0, 0, 0, 0, 0, 0)
    queued(local_store, "a", "b", "c")
    store.insert(valid_job("d", delay_ms=1000), T0)
    done = claimed(local_store, "t1")
    store.settle_claim(done.sequence, "t1", FAILED, T0 + 1, cancelled=False)
    claimed(local_store, "t2", T0 + 2)
    store.pause_queue("idle", T0)
    assert sorted(tuple(row) for row in store.status_groups()) == [
        ("idle", "paused", None, 1), ("q", "delayed", None, 1), ("q", "queued", None, 1),
        ("q", "running", None, 1), ("q", "settled", "failed", 1)]
    # ready_since: when the oldest ready job became ready (its enqueue time).
    assert [tuple(row) for row in store.backlog()] == [("q", 1, 1, 1, T0)]
    # (queued, running, delayed, paused, then settled per outcome in OUTCOMES order)
    assert tuple(store.queue_counts("q")) == (1, 1, 1, 0, 0, 1, 0, 0, 0)
    assert tuple(store.queue_counts("idle"))[:4] == (0, 0, 0, 1)


@covers("backlog")
def test_backlog_says_since_when_each_ready_job_was_ready(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    store.insert(valid_job("timed", "qt", run_at=T0 + 100), T0)
    store.insert(valid_job("delayed", "qd", delay_ms=30), T0)
    store.insert(valid_job("retried", "qr", retry=Retry(3)), T0)
    job = claimed(local_store, "t1")
    assert store.retry_claim(job.sequence, "t1", FAILED, 50, T0 + 10) is not None
    dead_letter(local_store, "redriven", "qx", T0 + 20)
    assert store.redrive("redriven", "r", T0 + 150) is not None
    store.promote_due(T0 + 200, 10)
    assert sorted(tuple(row) for row in store.backlog()) == [
        ("qd", 1, 0, 0, T0 + 30),  # enqueued, then its delay
        ("qr", 1, 0, 0, T0 + 60),  # when its back-off ended
        ("qt", 1, 0, 0, T0 + 100),  # its run_at
        ("qx", 1, 0, 0, T0 + 150)]  # redriven


# ---------------------------------------------------------------- claims


@covers("claim_next")
def test_claim_next_takes_the_best_ready_job_of_a_free_queue(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.claim_next(EVERY_JOB, "t0", T0) is None
    store.insert(valid_job("a1", "a"), T0)
    store.insert(valid_job("a2", "a", priority=1), T0)
    store.insert(valid_job("b1", "b"), T0)
    store.insert(valid_job("later", "c", priority=9, delay_ms=1000), T0)
    store.insert(valid_job("paused", "p", priority=9), T0)
    store.pause_queue("p", T0)
    first = store.claim_next(EVERY_JOB, "t1", T0 + 7)
    assert first is not None and (first.job_id, first.state, first.started_at) == (
        "a2", "running", T0 + 7)
    assert column(local_store, "a2", "claim_token") == ("t1",)
    second = store.claim_next(EVERY_JOB, "t2", T0)  # queue a is busy
    assert second is not None and second.job_id == "b1"
    assert store.claim_next(EVERY_JOB, "t3", T0) is None
    assert column(local_store, "a1", "state", "claim_token") == ("queued", None)


@covers("claim_next")
def test_claims_of_a_concurrent_lane_and_of_the_rest_stay_apart(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    store.insert(valid_job("serial", "s"), T0)
    store.insert(valid_job("fast-1", "f1", lane="fast"), T0)
    store.insert(valid_job("fast-2", "f2", lane="fast"), T0)
    inside, outside = inside_lane("fast"), outside_lane("fast")
    one = store.claim_next(inside, "c1", T0)
    two = store.claim_next(inside, "c2", T0)
    assert {one.job_id if one else None, two.job_id if two else None} == {"fast-1", "fast-2"}
    assert store.claim_next(inside, "c3", T0) is None
    rest = store.claim_next(outside, "s1", T0)
    assert rest is not None and rest.job_id == "serial"


@covers("claim_next_if_clear")
def test_claim_next_if_clear_claims_only_when_nothing_must_come_first(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    queued(local_store, "a", queue="qa")
    queued(local_store, "b", queue="qb")
    queued(local_store, "c", queue="qc")
    first = store.claim_next_if_clear(EVERY_JOB, "t1", T0, ())
    assert first is not None and first.job_id == "a"
    assert column(local_store, "a", "state", "claim_token") == ("running", "t1")
    # A running claim it does not execute is a suspect: no claim.
    assert store.claim_next_if_clear(EVERY_JOB, "t2", T0, ()) is None
    assert store.claim_next_if_clear(EVERY_JOB, "t2", T0, ("other",)) is None
    second = store.claim_next_if_clear(EVERY_JOB, "t2", T0, ("t1",))
    assert second is not None and second.job_id == "b"
    # A cancelled job still queued must be settled first.
    store.record_cancellation("c", "cancel", only_if_queued=False)
    assert store.claim_next_if_clear(EVERY_JOB, "t3", T0, ("t1", "t2")) is None
    assert column(local_store, "c", "state") == ("queued",)


@covers("probe")
def test_probe_names_running_claims_round_robin_and_waiting_cancellations(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.probe(EVERY_JOB, (), (0, 0)) == (None, False)
    queued(local_store, "a", queue="qa")
    queued(local_store, "b", queue="qb")
    queued(local_store, "c", queue="qc")
    a = claimed(local_store, "ta", T0 + 1)
    b = claimed(local_store, "tb", T0 + 2)
    assert store.probe(EVERY_JOB, (), (0, 0)) == (a.sequence, False)
    assert store.probe(EVERY_JOB, (), (T0 + 1, a.sequence)) == (b.sequence, False)
    assert store.probe(EVERY_JOB, (), (T0 + 2, b.sequence)) == (a.sequence, False)  # wraps
    assert store.probe(EVERY_JOB, ("ta",), (0, 0)) == (b.sequence, False)
    store.record_cancellation("c", "x", only_if_queued=True)
    assert store.probe(EVERY_JOB, ("ta", "tb"), (0, 0)) == (None, True)


# ----------------------------------------------------------- settlements


@covers("settle_claim")
def test_settle_claim_is_fenced_on_the_token_and_the_cancellation(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    queued(local_store, "a")
    job = claimed(local_store, "tok")
    before = local_store.rows("SELECT * FROM tickwork_jobs")
    assert store.settle_claim(job.sequence, "stale", COMPLETED, T0, cancelled=False) is False
    assert store.settle_claim(job.sequence, "tok", COMPLETED, T0, cancelled=True) is False
    assert local_store.rows("SELECT * FROM tickwork_jobs") == before
    assert store.settle_claim(job.sequence, "tok", RAISED, T0 + 9, cancelled=False) is True
    assert column(local_store, "a", "state", "outcome", "failure_reason", "settled_at",
                  "filed") == ("settled", "failed", "it broke", T0 + 9, 1)
    record = store.find("a")
    assert record is not None and record.error == RAISED.error
    # Settled once: the same call again changes nothing.
    assert store.settle_claim(job.sequence, "tok", COMPLETED, T0 + 20, cancelled=False) is False
    assert column(local_store, "a", "outcome") == ("failed",)


@covers("settle_claim", "file_settled")
def test_a_settlement_left_unfiled_is_filed_later(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    queued(local_store, "a", "b")
    job = claimed(local_store, "t1")
    store.record_cancellation("a", "c1", only_if_queued=False)
    assert store.settle_claim(job.sequence, "t1", COMPLETED, T0, cancelled=False) is False
    assert store.settle_claim(job.sequence, "t1", Settlement("cancelled"), T0, cancelled=True,
                              file=False) is True
    # The first unfiled settlement files at once (it takes in what a store
    # before it left); the next waits for the batch.
    job = claimed(local_store, "t2")
    assert store.settle_claim(job.sequence, "t2", COMPLETED, T0, cancelled=False, file=False)
    assert local_store.rows("SELECT job_id, filed FROM tickwork_jobs ORDER BY sequence") == [
        ("a", 1), ("b", 0)]
    latest = store.latest_settled("q")  # unfiled settlements are read all the same
    assert latest is not None and latest.job_id == "b"
    store.file_settled()
    assert local_store.rows("SELECT filed FROM tickwork_jobs") == [(1,), (1,)]


@covers("settle_claim_record")
def test_settle_claim_record_returns_the_settled_job(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    queued(local_store, "a")
    job = claimed(local_store, "tok")
    assert store.settle_claim_record(job.sequence, "old", COMPLETED, T0, cancelled=False) is None
    record = store.settle_claim_record(job.sequence, "tok", COMPLETED, T0 + 3, cancelled=False)
    assert record is not None
    assert (record.job_id, record.state, record.outcome, record.settled_at) == (
        "a", "settled", "completed", T0 + 3)
    assert store.settle_claim_record(job.sequence, "tok", COMPLETED, T0, cancelled=False) is None


@covers("settle_next_cancelled")
def test_settle_next_cancelled_settles_the_oldest_cancelled_waiting_job(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.settle_next_cancelled(EVERY_JOB, T0) is None
    queued(local_store, "a", "b", "c")
    store.record_cancellation("c", "x", only_if_queued=False)
    store.record_cancellation("b", "y", only_if_queued=False)
    first = store.settle_next_cancelled(EVERY_JOB, T0 + 4)
    assert first is not None and (first.job_id, first.outcome, first.settled_at) == (
        "b", "cancelled", T0 + 4)
    second = store.settle_next_cancelled(EVERY_JOB, T0)
    assert second is not None and second.job_id == "c"
    assert store.settle_next_cancelled(EVERY_JOB, T0) is None
    assert column(local_store, "a", "state") == ("queued",)


@covers("settle_recovered_claim")
def test_settle_recovered_claim_settles_and_releases_the_token(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    queued(local_store, "a")
    job = claimed(local_store, "tok")
    assert store.settle_recovered_claim(job.sequence, "stale", COMPLETED, T0) is None
    unknown = Settlement("outcome_unknown", "process_lost")
    record = store.settle_recovered_claim(job.sequence, "tok", unknown, T0 + 1)
    assert record is not None and (record.outcome, record.failure_reason) == (
        "outcome_unknown", "process_lost")
    assert column(local_store, "a", "state", "claim_token", "settled_at") == (
        "settled", None, T0 + 1)
    assert store.settle_recovered_claim(job.sequence, "tok", unknown, T0) is None


@covers("requeue_claim", "release_claim")
def test_requeue_counts_a_recovery_and_release_does_not(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    queued(local_store, "a")
    job = claimed(local_store, "t1")
    assert store.requeue_claim(job.sequence, "stale") is None
    requeued = store.requeue_claim(job.sequence, "t1")
    assert requeued is not None and (requeued.state, requeued.recoveries) == ("queued", 1)
    assert column(local_store, "a", "claim_token", "started_at") == (None, None)
    assert store.requeue_claim(job.sequence, "t1") is None  # the token went with it
    job = claimed(local_store, "t2")
    assert store.release_claim(job.sequence, "t1") is None
    released = store.release_claim(job.sequence, "t2")
    assert released is not None and (released.state, released.recoveries) == ("queued", 1)
    assert column(local_store, "a", "state", "claim_token") == ("queued", None)
    assert store.release_claim(job.sequence, "t2") is None


@covers("retry_claim")
def test_retry_claim_queues_the_next_attempt_due_later(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    store.insert(valid_job("a", retry=Retry(3)), T0)
    job = claimed(local_store, "tok", T0 + 1)
    assert store.retry_claim(job.sequence, "stale", FAILED, 500, T0 + 2) is None
    again = store.retry_claim(job.sequence, "tok", RAISED, 500, T0 + 2)
    assert again is not None
    assert (again.state, again.attempt, again.due_at, again.started_at, again.error) == (
        "queued", 2, T0 + 502, None, RAISED.error)
    [attempt] = again.history
    assert (attempt.attempt, attempt.outcome, attempt.failure_reason, attempt.started_at,
            attempt.ended_at, attempt.error) == (
        1, "failed", "it broke", T0 + 1, T0 + 2, "ValueError: no ünïcode here")
    assert column(local_store, "a", "claim_token") == (None,)
    # A recorded cancellation fences the retry off.
    store.promote_due(T0 + 502, 10)
    job = claimed(local_store, "tok2", T0 + 600)
    store.record_cancellation("a", "c", only_if_queued=False)
    assert store.retry_claim(job.sequence, "tok2", FAILED, 500, T0 + 700) is None
    assert column(local_store, "a", "state", "attempt") == ("running", 2)


# ----------------------------------------------- dead letters, redrive


def dead_letter(local: LocalStoreUnderTest, job_id: str, queue: str, at: int,
                settlement: Settlement = FAILED) -> JobRecord:
    local.store.insert(valid_job(job_id, queue), T0)
    job = local.store.claim_next(EVERY_JOB, f"tok-{job_id}", at)
    assert job is not None and job.job_id == job_id
    assert local.store.settle_claim(job.sequence, f"tok-{job_id}", settlement, at,
                                    cancelled=False)
    return job


@covers("dead_letters")
def test_dead_letters_newest_first_before_the_cursor(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    end = (2**53 - 1, 2**53 - 1)  # the first page: before every settlement
    assert store.dead_letters("q", end, 10) == []
    dead_letter(local_store, "d1", "q", T0 + 1)
    dead_letter(local_store, "d2", "q", T0 + 2, Settlement("outcome_unknown"))
    dead_letter(local_store, "d3", "q", T0 + 3, Settlement("interrupted"))
    dead_letter(local_store, "other", "q2", T0 + 4)
    dead_letter(local_store, "fine", "q", T0 + 5, COMPLETED)
    page = store.dead_letters("q", end, 2)
    assert [job.job_id for job in page] == ["d3", "d2"]
    cursor = (page[-1].settled_at or 0, page[-1].sequence)
    assert [job.job_id for job in store.dead_letters("q", cursor, 2)] == ["d1"]


#: Job ids around the prefix "ab": the ones it starts, in code point order,
#: then neighbours that sort just before or after them (in a language's
#: collation "ab-" and "aB" might sort among them).
_PREFIX_IDS = ("a", "aa\U0010ffff", "ab", "ab-1", "ab.", "abc", "ab\u00e9", "ab\U0010ffff",
               "ab\U0010ffff\U0010ffff", "aB", "ac", "b")
_STARTING_AB = ["ab", "ab-1", "ab.", "abc", "ab\u00e9", "ab\U0010ffff",
                "ab\U0010ffff\U0010ffff"]


@covers("jobs_by_id_prefix")
def test_jobs_by_id_prefix_pages_the_ids_a_prefix_starts_in_code_point_order(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    dead_letter(local_store, "ab-dead", "dead", T0 + 1)  # any state, any queue
    queued(local_store, *_PREFIX_IDS[::2])
    queued(local_store, *_PREFIX_IDS[1::2], queue="other")
    expected = sorted([*_STARTING_AB, "ab-dead"])
    assert expected[:3] == ["ab", "ab-1", "ab-dead"]
    assert [job.job_id for job in store.jobs_by_id_prefix("ab", None, 100)] == expected
    first = store.jobs_by_id_prefix("ab", None, 3)
    assert [job.job_id for job in first] == expected[:3]
    after = [job.job_id for job in store.jobs_by_id_prefix("ab", first[-1].job_id, 100)]
    assert after == expected[3:]
    assert [job.job_id for job in store.jobs_by_id_prefix("abc", None, 5)] == ["abc"]
    assert store.jobs_by_id_prefix("abd", None, 5) == []
    assert [job.job_id for job in store.jobs_by_id_prefix(
        "ab\U0010ffff", None, 5)] == ["ab\U0010ffff", "ab\U0010ffff\U0010ffff"]


@covers("dead_letter_count")
def test_dead_letter_count_counts_every_queue_filed_or_not_up_to_the_cap(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.dead_letter_count(10) == 0
    dead_letter(local_store, "d1", "q", T0 + 1)
    dead_letter(local_store, "d2", "q2", T0 + 2, Settlement("outcome_unknown"))
    dead_letter(local_store, "d3", "q", T0 + 3, Settlement("interrupted"))
    dead_letter(local_store, "fine", "q", T0 + 4, COMPLETED)
    assert store.dead_letter_count(10) == 3
    # A settlement not filed yet counts too (it is read beside the index; the
    # first unfiled settlement of a store files at once, the next waits).
    for job_id in ("d4", "d5"):
        queued(local_store, job_id)
        job = claimed(local_store, f"t-{job_id}")
        assert store.settle_claim(job.sequence, f"t-{job_id}", FAILED, T0 + 5,
                                  cancelled=False, file=False)
    assert local_store.rows("SELECT filed FROM tickwork_jobs WHERE job_id = 'd5'") == [(0,)]
    assert store.dead_letter_count(10) == 5
    # The cap bounds what is read of the index: the filed ones count up to it.
    assert store.dead_letter_count(2) == 3
    # A redriven dead letter is no longer one.
    assert store.redrive("d1", "r1", T0 + 6) is not None
    assert store.dead_letter_count(10) == 4


@covers("list_jobs")
def test_list_jobs_pages_a_queue_or_a_lane(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    end = (2**53 - 1, 2**53 - 1)  # the first page: before every settlement
    dead_letter(local_store, "x", "dead", T0 + 1)
    queued(local_store, "a", "b", "c", lane="l")
    by_queue = JobListing("queue", "q", "queued", None, False)
    assert [job.job_id for job in store.list_jobs(by_queue, (0, 0), 2)] == ["a", "b"]
    newest = JobListing("queue", "q", "queued", None, True)
    assert [job.job_id for job in store.list_jobs(newest, end, 10)] == ["c", "b", "a"]
    by_lane = JobListing("lane", "l", "queued", None, False)
    second = store.list_jobs(by_lane, (0, 0), 1)[0]
    assert [job.job_id for job in store.list_jobs(by_lane, (0, second.sequence), 5)] == [
        "b", "c"]
    failed = JobListing("queue", "dead", "settled", "failed", True)
    assert [job.job_id for job in store.list_jobs(failed, end, 5)] == ["x"]
    completed = JobListing("queue", "dead", "settled", "completed", True)
    assert store.list_jobs(completed, end, 5) == []


@covers("list_jobs")
def test_every_listing_shape_pages_through_its_jobs_in_order(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    # Settled in queue q across two lanes, with a tie on settled_at (the
    # sequence breaks it), one running, and waiting ones (one delayed, one
    # cancelled); lane l1 also has jobs of another queue.
    settled_at = {"s1": T0 + 30, "s2": T0 + 10, "s3": T0 + 10, "s4": T0 + 20}
    for job_id in settled_at:
        store.insert(valid_job(job_id, "q", lane="l1" if job_id in ("s1", "s3") else "l2"), T0)
    for job_id, at in settled_at.items():
        job = claimed(local_store, f"t-{job_id}")
        outcome = Settlement("completed") if job_id == "s2" else FAILED
        assert store.settle_claim(job.sequence, f"t-{job_id}", outcome, at, cancelled=False)
    store.insert(valid_job("run", "q", lane="l1"), T0)
    claimed(local_store, "t-run")
    for job_id, lane in (("w1", "l1"), ("w2", "l2"), ("w3", "l1")):
        store.insert(valid_job(job_id, "q", lane=lane, delay_ms=5 if job_id == "w2" else None),
                     T0)
    store.record_cancellation("w3", "c", only_if_queued=True)
    store.insert(valid_job("x1", "other", lane="l1"), T0)
    records = [store.find(job_id) for job_id in (*settled_at, "run", "w1", "w2", "w3", "x1")]
    known = [record for record in records if record is not None]
    for listing in every_listing("q", "l1", "failed"):
        listed: list[str] = []
        cursor = first_cursor(listing)
        while True:
            page = store.list_jobs(listing, cursor, 2)
            listed += [job.job_id for job in page]
            if len(page) < 2:
                break
            cursor = next_cursor(page[-1])
        assert listed == expected_listing(known, listing), listing


@covers("redrive", "redrive_applied")
def test_redrive_queues_a_dead_letter_once_per_redrive_id(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    dead_letter(local_store, "d", "q", T0 + 1)
    queued(local_store, "alive", queue="q2")
    assert store.redrive_applied("d", "r1") is False
    assert store.redrive("alive", "r1", T0) is None  # not a dead letter
    assert store.redrive("missing", "r1", T0) is None
    record = store.redrive("d", "r1", T0 + 9)
    assert record is not None
    assert (record.state, record.outcome, record.attempt, record.settled_at) == (
        "queued", None, 1, None)
    assert record.history[-1].redrive_id == "r1"
    assert store.redrive_applied("d", "r1") is True
    assert store.redrive_applied("d", "r2") is False
    assert local_store.rows("SELECT job_id, redrive_id, redriven_at FROM tickwork_redrives") == [
        ("d", "r1", T0 + 9)]
    # Failed again, the same id does not apply twice; a new one does.
    job = claimed(local_store, "t2")
    store.settle_claim(job.sequence, "t2", FAILED, T0 + 20, cancelled=False)
    assert store.redrive("d", "r1", T0 + 21) is None
    assert column(local_store, "d", "state") == ("settled",)
    assert store.redrive("d", "r2", T0 + 22) is not None


# ------------------------------------------------- cancel, fail, purge


@covers("record_cancellation")
def test_record_cancellation_keeps_the_first_id(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    queued(local_store, "a", "b")
    assert store.record_cancellation("missing", "c", only_if_queued=False) is None
    assert store.record_cancellation("a", "first", only_if_queued=True) == "q"
    assert store.record_cancellation("a", "second", only_if_queued=False) is None
    assert column(local_store, "a", "cancellation_id", "state") == ("first", "queued")
    claimed(local_store, "t")  # "b" runs ("a" is cancelled)
    assert store.record_cancellation("b", "c", only_if_queued=True) is None
    assert store.record_cancellation("b", "c", only_if_queued=False) == "q"
    assert column(local_store, "b", "cancellation_id", "state") == ("c", "running")


@covers("fail_lane")
def test_fail_lane_settles_running_jobs_first_up_to_the_limit(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    store.insert(valid_job("w1", "q1", lane="l"), T0)
    store.insert(valid_job("w2", "q2", lane="l"), T0)
    store.insert(valid_job("r", "q3", lane="l", priority=5), T0)
    store.insert(valid_job("other", "q4", lane="m"), T0)
    assert claimed(local_store, "t").job_id == "r"
    failed = store.fail_lane("l", "lane gone", 2, T0 + 5)
    # Which jobs: the running one first, then enqueue order; their order in
    # the answer is RETURNING's (the lifecycle orders the events).
    assert sorted((job.job_id, job.outcome, job.failure_reason, job.settled_at)
                  for job in failed) == [
        ("r", "failed", "lane gone", T0 + 5), ("w1", "failed", "lane gone", T0 + 5)]
    assert column(local_store, "w2", "state") == ("queued",)
    assert [job.job_id for job in store.fail_lane("l", "lane gone", 10, T0)] == ["w2"]
    assert store.fail_lane("l", "lane gone", 10, T0) == []
    assert column(local_store, "other", "state") == ("queued",)


@covers("purge_queue")
def test_purge_queue_deletes_waiting_jobs_only(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.purge_queue("q") == 0
    queued(local_store, "run", "w1", "w2")
    store.insert(valid_job("later", delay_ms=1000), T0)
    queued(local_store, "keep", queue="q2")
    claimed(local_store, "t")
    assert store.purge_queue("q") == 3
    assert local_store.rows("SELECT job_id FROM tickwork_jobs ORDER BY sequence") == [
        ("run",), ("keep",)]


@covers("pause_queue", "resume_queue", "queue_paused")
def test_pause_and_resume_say_whether_they_changed_anything(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.resume_queue("q") is False
    assert store.queue_paused("q") is False
    assert store.pause_queue("q", T0) is True
    assert (store.queue_paused("q"), store.queue_paused("other")) == (True, False)
    assert store.pause_queue("q", T0 + 1) is False
    assert local_store.rows("SELECT queue, paused_at FROM tickwork_paused_queues") == [("q", T0)]
    assert store.resume_queue("q") is True
    assert store.queue_paused("q") is False
    assert store.resume_queue("q") is False
    assert local_store.rows("SELECT count(*) FROM tickwork_paused_queues") == [(0,)]


# ------------------------------------------------------------ schedules


@covers("create_schedule", "find_schedule", "list_schedules", "delete_schedule")
def test_create_find_list_delete_a_schedule(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.find_schedule("nightly") is None and store.list_schedules() == []
    nightly, hourly = valid_schedule("nightly"), valid_schedule("hourly", every_ms=3_600_000)
    assert store.create_schedule(nightly, T0 + 60_000, T0) is True
    assert store.create_schedule(valid_schedule("nightly", every_ms=5000), T0, T0 + 1) is False
    assert store.create_schedule(hourly, T0 + 3_600_000, T0) is True
    found = store.find_schedule("nightly")
    assert found is not None
    assert (found.spec_json, found.next_at, found.paused, found.created_at,
            found.updated_at) == (nightly.spec_json, T0 + 60_000, False, T0, T0)
    assert [schedule.name for schedule in store.list_schedules()] == ["hourly", "nightly"]
    assert store.delete_schedule("nightly") is True
    assert store.delete_schedule("nightly") is False
    assert local_store.rows("SELECT name FROM tickwork_schedules") == [("hourly",)]


@covers("replace_schedule")
def test_replace_schedule_is_fenced_on_the_definition_read(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    old, new = valid_schedule(every_ms=60_000), valid_schedule(every_ms=120_000)
    assert store.replace_schedule(new, old.spec_json, T0, T0) is False  # no such schedule
    store.create_schedule(old, T0 + 60_000, T0)
    assert store.replace_schedule(new, "{}", T0 + 120_000, T0 + 1) is False
    assert store.replace_schedule(new, old.spec_json, T0 + 120_000, T0 + 2) is True
    assert local_store.rows(
        "SELECT spec_json, next_at, created_at, updated_at FROM tickwork_schedules") == [
        (new.spec_json, T0 + 120_000, T0, T0 + 2)]
    assert store.replace_schedule(new, old.spec_json, T0, T0 + 3) is False


@covers("pause_schedule", "resume_schedule")
def test_pause_and_resume_a_schedule(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    schedule = valid_schedule()
    assert store.pause_schedule("nightly", T0) is False
    store.create_schedule(schedule, T0 + 60_000, T0)
    assert store.resume_schedule("nightly", schedule.spec_json, T0, T0) is False  # running
    assert store.pause_schedule("nightly", T0 + 1) is True
    assert store.pause_schedule("nightly", T0 + 2) is False
    assert local_store.rows("SELECT paused, updated_at FROM tickwork_schedules") == [(1, T0 + 1)]
    assert store.next_slot() is None  # a paused schedule has no next slot
    assert store.resume_schedule("nightly", "{}", T0 + 180_000, T0 + 3) is False
    assert store.resume_schedule("nightly", schedule.spec_json, T0 + 180_000, T0 + 3) is True
    assert local_store.rows("SELECT paused, next_at, updated_at FROM tickwork_schedules") == [
        (0, T0 + 180_000, T0 + 3)]


@covers("due_schedules", "next_slot")
def test_due_schedules_and_the_next_slot(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.due_schedules(T0) == [] and store.next_slot() is None
    store.create_schedule(valid_schedule("b"), T0 + 100, T0)
    store.create_schedule(valid_schedule("a"), T0 + 100, T0)
    store.create_schedule(valid_schedule("c"), T0 + 50, T0)
    store.create_schedule(valid_schedule("later"), T0 + 999, T0)
    assert store.next_slot() == T0 + 50
    assert [s.name for s in store.due_schedules(T0 + 100)] == ["c", "a", "b"]
    assert store.due_schedules(T0 + 49) == []


@covers("fire_slots")
def test_fire_slots_creates_each_slot_job_once_and_advances(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    schedule = valid_schedule(every_ms=60_000, payload={"k": 1}, catch_up=5)
    first = 60_000 * (T0 // 60_000 + 1)
    store.create_schedule(schedule, first, T0)
    slots = [first, first + 60_000]
    created = store.fire_slots(schedule, slots, first + 120_000, first + 60_000)
    assert [job.run_at for job in created] == slots
    assert [job.job_id for job in created] == [schedule.slot_job(slot).job_id for slot in slots]
    rows = local_store.rows("SELECT job_id, queue, payload_json, run_at, enqueued_at, state "
                            "FROM tickwork_jobs ORDER BY sequence")
    assert rows == [(job.job_id, "sched", '{"k":1}', job.run_at, first + 60_000, "queued")
                    for job in created]
    assert local_store.rows("SELECT next_at FROM tickwork_schedules") == [(first + 120_000,)]
    # A lagging caller firing the same slots again creates nothing, moves nothing back.
    assert store.fire_slots(schedule, slots, first + 60_000, first + 60_000) == []
    assert local_store.rows("SELECT count(*) FROM tickwork_jobs") == [(2,)]
    assert local_store.rows("SELECT next_at FROM tickwork_schedules") == [(first + 120_000,)]
    # Nor does a caller holding another definition.
    other = valid_schedule(every_ms=120_000)
    assert store.fire_slots(other, [first + 120_000], first + 240_000, first + 130_000) == []


# ------------------------------------------------------------ retention


@covers("put_retention", "retention_policies", "delete_retention")
def test_put_read_and_delete_retention_policies(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.retention_policies() == []
    assert store.put_retention(RetentionPolicy(None, 1000 * 60, None), T0) is True
    assert store.put_retention(RetentionPolicy("q", None, 5 * 60_000), T0 + 1) is True
    # The same times again write nothing, updated_at included.
    assert store.put_retention(RetentionPolicy("q", None, 5 * 60_000), T0 + 2) is False
    assert store.put_retention(RetentionPolicy(None, 2 * 60_000, None), T0 + 3) is True
    assert store.retention_policies() == [RetentionPolicy(None, 2 * 60_000, None, T0 + 3),
                                          RetentionPolicy("q", None, 5 * 60_000, T0 + 1)]
    # The scope's default is stored under the queue name no queue has.
    assert local_store.rows("SELECT queue, keep_completed_ms, keep_failed_ms, updated_at "
                            "FROM tickwork_retention ORDER BY queue") == [
        ("", 2 * 60_000, None, T0 + 3), ("q", None, 5 * 60_000, T0 + 1)]
    assert store.delete_retention("q") is True
    assert store.delete_retention("q") is False
    assert store.delete_retention(None) is True
    assert store.retention_policies() == []


# --------------------------------------------------- concurrency limits


@covers("put_limit", "limits", "delete_limit")
def test_put_read_and_delete_concurrency_limits(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.limits() == []
    assert store.put_limit(ConcurrencyLimit("queue", "q", 3), T0) is True
    # The same max_running again writes nothing, updated_at included.
    assert store.put_limit(ConcurrencyLimit("queue", "q", 3), T0 + 1) is False
    assert store.put_limit(ConcurrencyLimit("lane", "tenant-b", 2), T0 + 2) is True
    assert store.put_limit(ConcurrencyLimit("lane", "é", 4), T0 + 3) is True
    assert store.put_limit(ConcurrencyLimit("lane", "Z", 1), T0 + 4) is True
    # A queue and a lane of the same name are two limits.
    assert store.put_limit(ConcurrencyLimit("lane", "q", 7), T0 + 5) is True
    assert store.put_limit(ConcurrencyLimit("queue", "a", 10_000), T0 + 6) is True
    assert store.put_limit(ConcurrencyLimit("queue", "q", 5), T0 + 7) is True  # replaced
    assert store.limits() == [
        ConcurrencyLimit("queue", "a", 10_000, T0 + 6), ConcurrencyLimit("queue", "q", 5, T0 + 7),
        ConcurrencyLimit("lane", "Z", 1, T0 + 4), ConcurrencyLimit("lane", "q", 7, T0 + 5),
        ConcurrencyLimit("lane", "tenant-b", 2, T0 + 2), ConcurrencyLimit("lane", "é", 4, T0 + 3)]
    assert local_store.rows("SELECT kind, key, max_running, updated_at FROM tickwork_limits "
                            "WHERE kind = 'queue' ORDER BY key") == [
        ("queue", "a", 10_000, T0 + 6), ("queue", "q", 5, T0 + 7)]
    assert store.delete_limit("queue", "q") is True
    assert store.delete_limit("queue", "q") is False
    assert store.delete_limit("queue", "tenant-b") is False  # a lane's key, not a queue's
    assert store.delete_limit("lane", "q") is True
    assert [(limit.kind, limit.key) for limit in store.limits()] == [
        ("queue", "a"), ("lane", "Z"), ("lane", "tenant-b"), ("lane", "é")]


@covers("put_limit")
def test_the_limits_table_refuses_a_bad_row(local_store: LocalStoreUnderTest) -> None:
    insert = "INSERT INTO tickwork_limits (kind, key, max_running, updated_at) VALUES (?, ?, ?, ?)"
    for kind, max_running in (("tenant", 1), ("queue", 0), ("lane", 10_001), ("queue", None)):
        with pytest.raises(Exception, match="constraint failed"):
            local_store.rows(insert, (kind, "k", max_running, T0))
    local_store.rows(insert, ("queue", "k", 1, T0))
    with pytest.raises(Exception, match="constraint failed"):  # one row per kind and key
        local_store.rows(insert, ("queue", "k", 2, T0))
    assert local_store.store.limits() == [ConcurrencyLimit("queue", "k", 1, T0)]


@covers("running_jobs")
def test_running_jobs_names_a_queues_or_lanes_running_jobs_oldest_start_first(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    queued(local_store, "x1", queue="q1", lane="L")
    queued(local_store, "x2", queue="q2", lane="L")
    queued(local_store, "x3", queue="L")  # names no lane: its lane is its queue, L
    queued(local_store, "y", queue="q3", lane="other")
    queued(local_store, "x4", queue="q1", lane="L")  # stays queued: q1 runs x1
    # Started out of enqueue order: x1 last, x2 first.
    for now in (T0 + 5, T0 + 1, T0 + 3, T0 + 4):
        claimed(local_store, f"t-{now}", now)
    assert store.running_jobs("lane", "L", 10) == ["x2", "x3", "x1"]
    assert store.running_jobs("lane", "L", 2) == ["x2", "x3"]
    assert store.running_jobs("lane", "other", 10) == ["y"]
    assert store.running_jobs("lane", "q1", 10) == []  # q1 is a queue; no job's lane is q1
    assert store.running_jobs("queue", "q1", 10) == ["x1"]
    assert store.running_jobs("queue", "L", 10) == ["x3"]
    assert store.running_jobs("queue", "nothing", 10) == []
    x2 = store.find("x2")
    assert x2 is not None
    assert store.settle_claim(x2.sequence, "t-" + str(T0 + 1), COMPLETED, T0 + 6,
                              cancelled=False)
    assert store.running_jobs("lane", "L", 10) == ["x3", "x1"]
    assert store.running_jobs("queue", "q2", 10) == []


def claim_all(local: LocalStoreUnderTest, partition: Any = EVERY_JOB) -> list[str]:
    """Claim until the claim finds nothing; the ids, in claim order."""
    taken = []
    while (job := local.store.claim_next(partition, f"t-{len(taken)}-{partition.name}",
                                         T0)) is not None:
        taken.append(job.job_id)
    return taken


def settle(local: LocalStoreUnderTest, job_id: str) -> None:
    found = local.store.find_claim(local.rows(
        "SELECT sequence FROM tickwork_jobs WHERE job_id = ?", (job_id,))[0][0])
    assert found is not None
    job, token = found
    assert local.store.settle_claim(job.sequence, token, COMPLETED, T0 + 1, cancelled=False)


@covers("claim_next", "claim_next_if_clear", "put_limit", "delete_limit")
def test_claims_take_the_best_ready_job_whose_queue_and_lane_have_room(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    store.put_limit(ConcurrencyLimit("queue", "wide", 3), T0)
    store.put_limit(ConcurrencyLimit("lane", "L", 2), T0)
    queued(local_store, "w1", "w2", "w3", "w4", queue="wide")
    queued(local_store, "s1", "s2", queue="serial")  # no row: one at a time
    for index in (1, 2, 3):  # lane L across three queues
        queued(local_store, f"l{index}", queue=f"q{index}", lane="L")
    assert claim_all(local_store) == ["w1", "w2", "w3", "s1", "l1", "l2"]
    assert store.running_jobs("queue", "wide", 10) == ["w1", "w2", "w3"]
    # A settlement frees one place; the next claim (here the counted
    # claim-if-clear, its every running claim excluded) takes it.
    settle(local_store, "w1")
    running = [row[0] for row in local_store.rows(
        "SELECT claim_token FROM tickwork_jobs WHERE state = 'running'")]
    job = store.claim_next_if_clear(EVERY_JOB, "t-if-clear", T0, running)
    assert job is not None and job.job_id == "w4"
    settle(local_store, "l1")
    assert claim_all(local_store) == ["l3"]
    # Lowering a limit stops nothing that runs; it holds new claims until
    # enough settle. Raising one lets the next claim take more.
    queued(local_store, "w5", "w6", queue="wide")
    store.put_limit(ConcurrencyLimit("queue", "wide", 1), T0)
    settle(local_store, "w2")
    settle(local_store, "w3")
    assert claim_all(local_store) == []
    assert store.running_jobs("queue", "wide", 10) == ["w4"]
    store.put_limit(ConcurrencyLimit("queue", "wide", 2), T0)
    assert claim_all(local_store) == ["w5"]
    # Deleting a queue's limit puts it back to one at a time; a lane's, to none.
    store.delete_limit("queue", "wide")
    settle(local_store, "w4")
    assert claim_all(local_store) == []
    queued(local_store, "l4", queue="q4", lane="L")
    assert claim_all(local_store) == []  # l2, l3 run: L is full
    store.delete_limit("lane", "L")
    assert claim_all(local_store) == ["l4"]


@covers("claim_next")
def test_a_lane_limit_counts_the_jobs_of_the_queue_named_like_the_lane(
        local_store: LocalStoreUnderTest) -> None:
    # A job that names no lane is in the lane of its queue's name.
    store = local_store.store
    store.put_limit(ConcurrencyLimit("lane", "acme", 2), T0)
    queued(local_store, "own", queue="acme")
    queued(local_store, "a1", queue="exports", lane="acme")
    queued(local_store, "a2", queue="emails", lane="acme")
    assert claim_all(local_store) == ["own", "a1"]
    assert store.running_jobs("lane", "acme", 10) == ["own", "a1"]


@covers("claim_next")
def test_partitioned_claims_give_a_wide_queues_places_to_its_best_jobs_in_either_partition(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    serial, concurrent = outside_lane("fast"), inside_lane("fast")
    store.put_limit(ConcurrencyLimit("queue", "q", 2), T0)
    queued(local_store, "f1", queue="q", lane="fast")
    queued(local_store, "s1", "s2", queue="q", lane="slow")
    queued(local_store, "f2", queue="q", lane="fast")
    # s1 is the second ready job of q (f1 comes first): there is a place for
    # both. s2 is the third: the serial claim leaves the last place to f1.
    assert claim_all(local_store, serial) == ["s1"]
    assert claim_all(local_store, concurrent) == ["f1"]
    settle(local_store, "s1")
    assert claim_all(local_store, concurrent) == []  # s2 comes before f2
    assert claim_all(local_store, serial) == ["s2"]
    # Lane limits hold in each partition.
    store.put_limit(ConcurrencyLimit("lane", "fast", 1), T0)
    store.put_limit(ConcurrencyLimit("lane", "slow", 1), T0)
    queued(local_store, "f3", queue="other", lane="fast")
    queued(local_store, "s3", queue="third", lane="slow")
    assert claim_all(local_store, concurrent) == []  # f1 runs in lane fast
    assert claim_all(local_store, serial) == []  # s2 runs in lane slow
    settle(local_store, "f1")
    settle(local_store, "s2")
    assert claim_all(local_store, concurrent) == ["f2"]
    assert claim_all(local_store, serial) == ["s3"]


# ------------------------------------------------------------ fair turns
#
# A wide queue's lanes take turns (tickwork.stores.sql.sqlite, "fair
# turns"): its line (tickwork_turns) is read back with the host's SQL.


def line(local: LocalStoreUnderTest, queue: str = "q") -> list[str]:
    """The lanes in ``queue``'s line, front first."""
    return [row[0] for row in local.rows(
        "SELECT lane FROM tickwork_turns WHERE queue = ? ORDER BY turn, lane", (queue,))]


def wide(local: LocalStoreUnderTest, queue: str = "q", max_running: int = 10) -> None:
    local.store.put_limit(ConcurrencyLimit("queue", queue, max_running), T0)


@covers("claim_next", "claim_next_if_clear", "put_limit")
def test_a_wide_queues_lanes_take_turns_priority_and_age_within_a_lane(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    wide(local_store)
    queued(local_store, "a0", "a1", "a2", "a3", lane="A")
    queued(local_store, "b0", lane="B")
    store.insert(valid_job("c0", lane="C"), T0)
    store.insert(valid_job("c1", lane="C", priority=5), T0)  # orders C's jobs, not the lanes
    queued(local_store, "s0", "s1", queue="serial", lane="A")
    assert line(local_store) == ["A", "B", "C"]
    assert line(local_store, "serial") == []  # a serial queue has no line
    # The first claim's global pick is c1 (priority 5): its queue is wide,
    # so the claim takes the first lane's best job instead, and that lane
    # goes to the back.
    assert claimed(local_store, "t1").job_id == "a0"
    assert line(local_store) == ["B", "C", "A"]
    # B's last ready job starts: B leaves the line.
    job = store.claim_next_if_clear(EVERY_JOB, "t2", T0, ["t1"])
    assert job is not None and job.job_id == "b0"
    assert line(local_store) == ["C", "A"]
    assert claim_all(local_store) == ["c1", "a1", "c0", "a2", "a3", "s0"]
    assert line(local_store) == []


@covers("insert", "insert_many", "promote_due", "requeue_claim", "release_claim",
        "retry_claim", "redrive", "put_back_rate_limited", "fire_slots")
def test_a_lane_joins_its_wide_queues_line_at_the_back_when_a_job_of_it_becomes_ready(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    wide(local_store)
    wide(local_store, "sched")
    queued(local_store, "first", lane="front")  # ingest
    store.insert(valid_job("later", lane="delayed", delay_ms=1000), T0)  # not ready yet
    store.insert_many([valid_job("m1", lane="M"), valid_job("n1", lane="N"),
                       valid_job("m2", lane="M")], T0, lambda job: None)
    assert line(local_store) == ["front", "M", "N"]
    assert store.promote_due(T0 + 1000, 10) == {"q"}  # promotion
    assert line(local_store) == ["front", "M", "N", "delayed"]
    # Each of these takes the job's lane out by starting its last ready job,
    # then makes the job ready again: the lane joins at the back.
    token = iter(f"t{number}" for number in range(100))

    def start(job_id: str) -> tuple[JobRecord, str]:
        while True:
            claim = next(token)
            job = claimed(local_store, claim)
            if job.job_id == job_id:
                return job, claim

    job, claim = start("first")
    assert "front" not in line(local_store)
    assert store.requeue_claim(job.sequence, claim) is not None  # recovery
    assert line(local_store)[-1] == "front"
    job, claim = start("first")
    assert store.release_claim(job.sequence, claim) is not None  # a claim put back unstarted
    assert line(local_store)[-1] == "front"
    job, claim = start("first")
    assert store.put_back_rate_limited(job.sequence, claim, "lane", "other", T0, T0) is not None
    assert line(local_store)[-1] == "front"
    job, claim = start("first")
    assert store.retry_claim(job.sequence, claim, FAILED, 500, T0) is not None
    assert "front" not in line(local_store)  # due later: not ready yet
    store.promote_due(T0 + 500, 10)
    assert line(local_store)[-1] == "front"
    job, claim = start("first")
    assert store.settle_claim(job.sequence, claim, FAILED, T0, cancelled=False)
    assert store.redrive("first", "r1", T0) is not None  # a dead letter redriven
    assert line(local_store)[-1] == "front"
    schedule = valid_schedule(queue="sched")  # a schedule's slot
    store.create_schedule(schedule, T0, T0)
    assert len(store.fire_slots(schedule, [T0], T0 + 60_000, T0)) == 1
    assert line(local_store, "sched") == ["sched"]
    # A lane in the line keeps its place when another of its jobs is ready.
    queued(local_store, "p1", lane="P")
    queued(local_store, "f1", lane="front")
    queued(local_store, "p2", lane="P")
    assert line(local_store)[-2:] == ["front", "P"]


@covers("claim_next", "put_limit", "put_back_rate_limited", "record_cancellation")
def test_a_lane_that_cannot_start_keeps_its_place_and_one_without_a_ready_job_leaves(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    wide(local_store)
    store.put_limit(ConcurrencyLimit("lane", "A", 1), T0)
    queued(local_store, "a0", "a1", lane="A")
    queued(local_store, "b0", "b1", lane="B")
    queued(local_store, "c0", lane="C")
    queued(local_store, "d0", lane="D")
    assert claimed(local_store, "t1").job_id == "a0"
    assert line(local_store) == ["B", "C", "D", "A"]
    # C's only job is cancelled: C stays in the line, passed over, until a
    # claim passes it; A is at its lane limit: passed over, it keeps its place.
    assert store.record_cancellation("c0", "c-1", only_if_queued=True) == "q"
    assert claim_all(local_store) == ["b0", "d0", "b1"]
    assert line(local_store) == ["A"]
    settle(local_store, "a0")
    # Rate-held, a lane keeps its place too, and goes first once released.
    queued(local_store, "b2", lane="B")
    store.put_back_rate_limited(0, "none", "lane", "A", T0 + 100, T0)
    assert line(local_store) == ["A", "B"]
    assert claimed(local_store, "t2", T0).job_id == "b2"
    assert line(local_store) == ["A"]
    queued(local_store, "b3", lane="B")
    assert claimed(local_store, "t3", T0 + 100).job_id == "a1"


@covers("put_limit", "delete_limit")
def test_a_queue_that_becomes_wide_lines_up_its_lanes_by_their_oldest_ready_job(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    queued(local_store, "b0", lane="B")
    store.insert(valid_job("c0", lane="C", delay_ms=1000), T0)  # not ready
    queued(local_store, "a0", lane="A")
    queued(local_store, "b1", lane="B")
    queued(local_store, "d0", lane="D")
    store.record_cancellation("d0", "c-1", only_if_queued=True)  # not ready
    store.put_limit(ConcurrencyLimit("lane", "A", 3), T0)  # a lane's limit: no line
    assert line(local_store) == []
    store.put_limit(ConcurrencyLimit("queue", "q", 1), T0)  # serial still
    assert line(local_store) == []
    store.put_limit(ConcurrencyLimit("queue", "q", 3), T0)
    assert line(local_store) == ["B", "A"]
    assert claimed(local_store, "t1").job_id == "b0"
    # A wide queue given another wide limit keeps its line as it is.
    store.put_limit(ConcurrencyLimit("queue", "q", 4), T0)
    assert line(local_store) == ["A", "B"]
    store.put_limit(ConcurrencyLimit("queue", "q", 1), T0)  # serial again: no line
    assert line(local_store) == []
    store.put_limit(ConcurrencyLimit("queue", "q", 2), T0)
    assert line(local_store) == ["A", "B"]
    store.delete_limit("queue", "q")
    assert line(local_store) == []
    settle(local_store, "b0")
    assert claim_all(local_store) == ["a0"]  # serial: the head, one at a time


@covers("claim_next", "put_limit", "delete_limit", "list_new_rows")
def test_the_index_of_a_lanes_jobs_is_there_while_a_queue_is_wide_and_unlisted_jobs_are_read(
        local_store: LocalStoreUnderTest) -> None:
    """Owner-local 0015: the claims of a wide queue read a lane's jobs
    through tickwork_jobs_lane_order, which the store makes when a queue
    becomes wide and drops once none is; what is not listed yet (as after a
    listing that failed) is read beside it."""
    store = local_store.store

    def indexed() -> bool:
        return bool(local_store.rows(
            "SELECT 1 FROM sqlite_master WHERE name = 'tickwork_jobs_lane_order'"))

    queued(local_store, "a0", "a1", lane="A")
    queued(local_store, "s0", queue="serial")
    assert not indexed()
    wide(local_store)
    assert indexed()

    def failed() -> None:
        raise RuntimeError("the listing failed")

    listing = store._batching.list_rows
    store._batching.list_rows = failed  # type: ignore[method-assign]
    queued(local_store, "b0", lane="B")  # stored and in the line, not listed
    queued(local_store, "a2", lane="A")
    store._batching.list_rows = listing  # type: ignore[method-assign]
    assert local_store.rows(
        "SELECT job_id FROM tickwork_jobs WHERE listed = 0 ORDER BY job_id") == [("a2",), ("b0",)]
    assert line(local_store) == ["A", "B"]
    assert claim_all(local_store) == ["a0", "b0", "a1", "s0", "a2"]
    wide(local_store, "other")
    store.put_limit(ConcurrencyLimit("queue", "q", 1), T0)
    assert indexed()  # "other" is wide still
    store.delete_limit("queue", "other")
    queued(local_store, "a3", lane="A")  # the store reads that no queue is wide
    assert not indexed()
    assert line(local_store) == []


@covers("ready_ahead")
def test_ready_ahead_in_a_wide_queue_follows_the_turns(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    wide(local_store)
    queued(local_store, "a0", "a1", "a2", lane="A")
    queued(local_store, "b0", lane="B")
    store.insert(valid_job("c0", lane="C"), T0)
    store.insert(valid_job("c1", lane="C", priority=5), T0)
    store.insert(valid_job("late", lane="E", delay_ms=1000), T0)  # not ready: never ahead
    found = {job_id: store.find(job_id) for job_id in ("a0", "a2", "b0", "c0", "late")}

    def ahead(job_id: str, limit: int = 10) -> list[str]:
        job = found[job_id]
        assert job is not None
        return store.ready_ahead("q", job.priority, job.sequence, limit)

    # The claims take a0, b0, c1, then a1, c0, then a2.
    assert ahead("a0") == []
    assert ahead("b0") == ["a0"]
    assert ahead("c0") == ["a0", "b0", "c1", "a1"]
    assert ahead("c0", 2) == ["a0", "b0"]
    assert ahead("a2") == ["a0", "b0", "c1", "a1", "c0"]
    # A job whose lane is not in the line would join at its back.
    assert ahead("late") == ["a0", "b0", "c1"]


# ------------------------------------------------------------ rate limits


@covers("has_pending_work", "next_work", "next_waits")
def test_a_rate_held_job_is_no_work_until_its_key_is_released(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    queued(local_store, "a", queue="q", lane="L")
    queued(local_store, "b", queue="r", lane="M")
    assert store.next_waits(T0)[1] is None
    # Queue q held until T0 + 500; lane M's bucket (1 per s) next allows a
    # start at T0 + 300 (set as a claim at T0 - 700 leaves it).
    store.put_back_rate_limited(0, "none", "queue", "q", T0 + 500, T0)
    store.put_rate_limit(RateLimit("lane", "M", 1, 1000, 1), T0)
    local_store.rows("UPDATE tickwork_rate_limits SET next_start = ? WHERE key = 'M'",
                     (T0 + 300,))
    assert store.has_pending_work(T0) is False
    assert store.next_waits(T0)[1] == T0 + 300
    assert tuple(store.next_work(T0)) == (0, T0 + 300, T0)
    assert store.has_pending_work(T0 + 299) is False
    assert store.has_pending_work(T0 + 300) is True  # b may start
    assert store.next_waits(T0 + 300)[1] == T0 + 500
    # Only keys that hold back a job a claim could take wake anyone: not a
    # paused queue's, nor one whose jobs wait for their time or are cancelled.
    store.pause_queue("q", T0)
    assert store.next_waits(T0 + 300)[1] is None
    store.resume_queue("q")
    store.insert(valid_job("later", "s", delay_ms=60_000), T0)
    store.insert(valid_job("cancelled", "c"), T0)
    store.record_cancellation("cancelled", "c-1", only_if_queued=True)
    store.put_back_rate_limited(0, "none", "queue", "s", T0 + 100, T0)
    store.put_back_rate_limited(0, "none", "queue", "c", T0 + 100, T0)
    assert store.next_waits(T0) == (T0 + 60_000, T0 + 300)  # the due time read with it
    assert store.next_waits(T0)[0] == store.next_due()
    # A job both of whose keys are held is released by the earlier first.
    store.put_back_rate_limited(0, "none", "lane", "L", T0 + 900, T0)
    assert store.next_waits(T0)[1] == T0 + 300
    assert store.next_waits(T0 + 300)[1] == T0 + 500
    assert store.next_waits(T0 + 500)[1] == T0 + 900
    assert store.has_pending_work(T0 + 899) is True  # b, free since T0 + 300


@covers("put_rate_limit", "rate_limits")
def test_put_and_list_rate_limits(local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.rate_limits(T0) == []
    assert store.put_rate_limit(RateLimit("queue", "q", 3, 1000, 3), T0) is True
    # The same bucket again writes nothing, updated_at included.
    assert store.put_rate_limit(RateLimit("queue", "q", 3, 1000, 3), T0 + 1) is False
    assert local_store.rows("SELECT starts, period_ms, burst, next_start, held_until, "
                            "updated_at FROM tickwork_rate_limits") == [
        (3, 1000, 3, 0, 0, T0)]
    assert store.put_rate_limit(RateLimit("lane", "tenant-b", 10, 60_000, 2), T0 + 2) is True
    assert store.put_rate_limit(RateLimit("lane", "é", 1, 1, 1), T0 + 3) is True
    assert store.put_rate_limit(RateLimit("queue", "a", MAX_RATE_STARTS, MAX_RATE_PERIOD_MS,
                                          MAX_RATE_STARTS), T0 + 4) is True
    # A queue and a lane of the same name are two rows.
    assert store.put_rate_limit(RateLimit("lane", "q", 5, 1000, 5), T0 + 5) is True
    # Queues first, then lanes, each by key; a full bucket's next start is 0.
    assert store.rate_limits(T0 + 10) == [
        RateLimit("queue", "a", MAX_RATE_STARTS, MAX_RATE_PERIOD_MS, MAX_RATE_STARTS, 0, None,
                  T0 + 4),
        RateLimit("queue", "q", 3, 1000, 3, 0, None, T0),
        RateLimit("lane", "q", 5, 1000, 5, 0, None, T0 + 5),
        RateLimit("lane", "tenant-b", 10, 60_000, 2, 0, None, T0 + 2),
        RateLimit("lane", "é", 1, 1, 1, 0, None, T0 + 3)]


@covers("put_rate_limit", "rate_limits")
def test_a_replaced_bucket_keeps_its_next_start_time_in_its_new_units(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.put_rate_limit(RateLimit("queue", "q", 3, 1000, 3), T0) is True
    # A next start that is not a whole ms: 1/3 ms past T0 + 1000.
    local_store.rows("UPDATE tickwork_rate_limits SET next_start = ?",
                     ((T0 + 1000) * 3 + 1,))
    [limit] = store.rate_limits(T0)
    assert limit.next_start_at == T0 + 1001  # rounded up
    assert store.put_rate_limit(RateLimit("queue", "q", 7, 2000, 4), T0 + 20) is True
    assert local_store.rows("SELECT starts, period_ms, burst, next_start, updated_at "
                            "FROM tickwork_rate_limits") == [
        (7, 2000, 4, (T0 + 1001) * 7, T0 + 20)]
    assert store.rate_limits(T0 + 20) == [
        RateLimit("queue", "q", 7, 2000, 4, T0 + 1001, None, T0 + 20)]
    # The largest values a bucket may hold stay exact (now * starts ~ 1.8e17).
    assert store.put_rate_limit(RateLimit("queue", "q", MAX_RATE_STARTS, 2000, 4),
                                T0 + 21) is True
    assert local_store.rows("SELECT next_start FROM tickwork_rate_limits") == [
        ((T0 + 1001) * MAX_RATE_STARTS,)]
    assert store.rate_limits(T0)[0].next_start_at == T0 + 1001


@covers("put_rate_limit", "put_back_rate_limited", "rate_limits")
def test_a_key_with_only_a_hold_gets_a_full_bucket_and_keeps_its_hold(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    # No such claim: nothing put back, the hold is written all the same.
    assert store.put_back_rate_limited(999, "nothing", "lane", "held", T0 + 5000, T0) is None
    assert store.rate_limits(T0 + 1) == [
        RateLimit("lane", "held", None, None, None, None, T0 + 5000, T0)]
    assert store.put_rate_limit(RateLimit("lane", "held", 2, 1000, 2), T0 + 2) is True
    assert local_store.rows("SELECT starts, next_start, held_until, updated_at "
                            "FROM tickwork_rate_limits") == [(2, 0, T0 + 5000, T0 + 2)]
    assert store.rate_limits(T0 + 3) == [
        RateLimit("lane", "held", 2, 1000, 2, 0, T0 + 5000, T0 + 2)]
    # Once the hold has passed, the row is listed for its bucket alone.
    assert store.rate_limits(T0 + 5000) == [
        RateLimit("lane", "held", 2, 1000, 2, 0, None, T0 + 2)]


@covers("delete_rate_limit", "rate_limits")
def test_delete_rate_limit_says_whether_a_bucket_or_a_hold_in_force_was_there(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    store.put_rate_limit(RateLimit("queue", "q", 3, 1000, 3), T0)
    store.put_rate_limit(RateLimit("lane", "tenant-b", 3, 1000, 3), T0)
    assert store.delete_rate_limit("queue", "tenant-b", T0) is False  # a lane's key
    assert store.delete_rate_limit("queue", "q", T0) is True
    assert store.delete_rate_limit("queue", "q", T0) is False
    # A hold alone: in force until its time, and listed until then.
    store.put_back_rate_limited(999, "nothing", "queue", "brief", T0 + 100, T0)
    store.put_back_rate_limited(999, "nothing", "queue", "long", T0 + 100, T0)
    assert [limit.key for limit in store.rate_limits(T0 + 99)] == ["brief", "long", "tenant-b"]
    assert [limit.key for limit in store.rate_limits(T0 + 100)] == ["tenant-b"]
    assert store.delete_rate_limit("queue", "brief", T0 + 100) is False  # passed
    assert store.delete_rate_limit("queue", "long", T0 + 99) is True
    # Either way the row is gone.
    assert local_store.rows("SELECT kind, key FROM tickwork_rate_limits") == [
        ("lane", "tenant-b")]
    assert store.delete_rate_limit("lane", "tenant-b", T0) is True
    assert store.rate_limits(T0) == []


@covers("put_rate_limit")
def test_the_rate_limits_table_refuses_a_bad_row(local_store: LocalStoreUnderTest) -> None:
    insert = ("INSERT INTO tickwork_rate_limits (kind, key, starts, period_ms, burst, "
              "updated_at) VALUES (?, 'k', ?, ?, ?, ?)")
    for kind, starts, period_ms, burst in (
            ("tenant", 1, 1, 1), ("queue", 0, 1, 1), ("queue", MAX_RATE_STARTS + 1, 1, 1),
            ("lane", 1, 0, 1), ("lane", 1, MAX_RATE_PERIOD_MS + 1, 1), ("queue", 1, 1, 0),
            ("queue", 1, 1, MAX_RATE_STARTS + 1), ("queue", 1, None, 1),
            ("queue", None, None, 1)):
        with pytest.raises(Exception, match="constraint failed"):
            local_store.rows(insert, (kind, starts, period_ms, burst, T0))
    local_store.rows(insert, ("queue", None, None, None, T0))  # a row for a hold alone
    with pytest.raises(Exception, match="constraint failed"):  # one row per kind and key
        local_store.rows(insert, ("queue", 1, 1, 1, T0))


@covers("put_back_rate_limited")
def test_put_back_rate_limited_holds_the_key_and_queues_the_job_without_an_attempt(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    queued(local_store, "a", queue="q", lane="L")
    job = claimed(local_store, "t1", T0 + 1)
    # Another claim's token: nothing put back, the hold written.
    assert store.put_back_rate_limited(job.sequence, "stale", "lane", "L", T0 + 5000,
                                       T0 + 2) is None
    assert column(local_store, "a", "state", "claim_token") == ("running", "t1")
    assert store.rate_limits(T0 + 2) == [
        RateLimit("lane", "L", None, None, None, None, T0 + 5000, T0 + 2)]
    back = store.put_back_rate_limited(job.sequence, "t1", "lane", "L", T0 + 4000, T0 + 3)
    assert back is not None
    assert (back.job_id, back.state, back.attempt, back.recoveries, back.started_at,
            back.due_at, back.history) == ("a", "queued", 1, 0, None, None, ())
    assert column(local_store, "a", "claim_token", "started_at", "due_at") == (None, None, None)
    # An earlier hold leaves the later one (and its updated_at) as it was.
    assert store.rate_limits(T0 + 3) == [
        RateLimit("lane", "L", None, None, None, None, T0 + 5000, T0 + 2)]
    # Put back twice: the second finds no claim, and only moves the hold on.
    assert store.put_back_rate_limited(job.sequence, "t1", "lane", "L", T0 + 6000,
                                       T0 + 4) is None
    assert store.rate_limits(T0 + 4) == [
        RateLimit("lane", "L", None, None, None, None, T0 + 6000, T0 + 4)]


@covers("put_back_rate_limited")
def test_put_back_rate_limited_keeps_the_attempt_and_history_and_obeys_a_cancellation(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    store.insert(valid_job("a", "q", retry=Retry(3)), T0)
    job = claimed(local_store, "t1", T0 + 1)
    assert store.retry_claim(job.sequence, "t1", RAISED, 0, T0 + 2) is not None
    store.promote_due(T0 + 3, 10)
    job = claimed(local_store, "t2", T0 + 3)
    before = store.find("a")
    assert before is not None and before.attempt == 2 and len(before.history) == 1
    back = store.put_back_rate_limited(job.sequence, "t2", "queue", "q", T0 + 500, T0 + 4)
    assert back is not None
    assert (back.state, back.attempt, back.recoveries, back.history, back.error) == (
        "queued", 2, 0, before.history, before.error)
    job = claimed(local_store, "t3", T0 + 600)
    store.record_cancellation("a", "c", only_if_queued=False)
    assert store.put_back_rate_limited(job.sequence, "t3", "queue", "q", T0 + 900,
                                       T0 + 601) is None
    assert column(local_store, "a", "state", "claim_token", "attempt") == ("running", "t3", 2)
    assert store.rate_limits(T0 + 601)[0].held_until == T0 + 900  # the hold, written anyway


@covers("settled_queues")
def test_settled_queues_names_each_queue_with_settled_jobs_once(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.settled_queues() == []
    for job_id, queue in (("b1", "b"), ("a1", "a"), ("b2", "b"), ("c1", "c")):
        dead_letter(local_store, job_id, queue, T0 + 1, COMPLETED)
    queued(local_store, "waiting", queue="only-queued")
    assert store.settled_queues() == ["a", "b", "c"]


@covers("prune_settled")
def test_prune_settled_deletes_settled_jobs_past_their_cutoff_and_their_redrive_ids(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.prune_settled("q", T0 + 100, T0 + 100, 10) == 0  # the empty case
    dead_letter(local_store, "done", "q", T0 + 1, COMPLETED)
    dead_letter(local_store, "stopped", "q", T0 + 2, Settlement("cancelled"))
    dead_letter(local_store, "young", "q", T0 + 50, COMPLETED)
    dead_letter(local_store, "broke", "q", T0 + 3)
    assert store.redrive("broke", "r1", T0 + 4) is not None
    job = claimed(local_store, "t-again")
    assert store.settle_claim(job.sequence, "t-again", FAILED, T0 + 5, cancelled=False)
    dead_letter(local_store, "lost", "q", T0 + 6, Settlement("outcome_unknown"))
    dead_letter(local_store, "elsewhere", "other", T0 + 1, COMPLETED)
    queued(local_store, "running")
    claimed(local_store, "t-run")
    queued(local_store, "waiting")
    # Completed and cancelled before T0 + 10; failures kept (None).
    assert store.prune_settled("q", T0 + 10, None, 10) == 2
    assert {row[0] for row in local_store.rows("SELECT job_id FROM tickwork_jobs")} == {
        "young", "broke", "lost", "elsewhere", "waiting", "running"}
    # The failures before T0 + 10, one at a time (the limit), with the redrive id.
    assert store.prune_settled("q", None, T0 + 10, 1) == 1
    assert store.prune_settled("q", None, T0 + 10, 1) == 1
    assert store.prune_settled("q", None, T0 + 10, 1) == 0
    assert local_store.rows("SELECT job_id FROM tickwork_redrives") == []
    # A cutoff far ahead leaves every queued and running job.
    assert store.prune_settled("q", T0 + 10**9, T0 + 10**9, 10) == 1  # "young"
    assert sorted(row[0] for row in local_store.rows(
        "SELECT job_id FROM tickwork_jobs")) == ["elsewhere", "running", "waiting"]


@covers("storage_usage")
def test_storage_usage_counts_each_table_and_sizes_the_database(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    empty = store.storage_usage()
    assert empty.rows == {"tickwork_jobs": 0, "tickwork_redrives": 0, "tickwork_schedules": 0,
                          "tickwork_paused_queues": 0, "tickwork_retention": 0,
                          "tickwork_limits": 0, "tickwork_rate_limits": 0,
                          "tickwork_queue_history": 0, "tickwork_turns": 0}
    assert empty.size_bytes is not None and empty.size_bytes > 0
    dead_letter(local_store, "d", "q", T0 + 1)
    store.redrive("d", "r1", T0 + 2)
    queued(local_store, "a", "b")
    store.create_schedule(valid_schedule(), T0 + 60_000, T0)
    store.pause_queue("q", T0)
    store.put_retention(RetentionPolicy("q", None, None), T0)
    store.put_limit(ConcurrencyLimit("lane", "tenant", 2), T0)
    store.put_limit(ConcurrencyLimit("queue", "q", 2), T0)  # its one lane is in its line
    store.put_rate_limit(RateLimit("lane", "tenant", 2, 1000, 2), T0)
    report = store.storage_usage()
    assert report.rows == {"tickwork_jobs": 3, "tickwork_redrives": 1, "tickwork_schedules": 1,
                           "tickwork_paused_queues": 1, "tickwork_retention": 1,
                           "tickwork_limits": 2, "tickwork_rate_limits": 1,
                           "tickwork_queue_history": 0, "tickwork_turns": 1}
    assert report.size_bytes is not None and report.size_bytes >= empty.size_bytes


# ------------------------------------------------------ history over time

MINUTE = 60_000
M0 = T0 - T0 % MINUTE  # the minute T0 is in


def history_rows(rows: Any) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in rows]


@covers("add_history", "history")
def test_add_history_adds_to_the_minute_rows_and_history_sums_them(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    assert store.history("q", M0, M0 + 10 * MINUTE, MINUTE) is None  # never seen
    store.add_history([])  # nothing to write: no statement, no row
    store.add_history([HistoryRow("q", M0, enqueued=2, started=1),
                       HistoryRow("q", M0 + MINUTE, completed=1, retried=1),
                       HistoryRow("z é", M0, failed=1)])
    store.add_history([HistoryRow("q", M0, enqueued=1, cancelled=1),
                       HistoryRow("q", M0 + 5 * MINUTE, started=3)])
    assert history_rows(store.history("q", M0, M0 + 10 * MINUTE, MINUTE) or []) == [
        (M0, 3, 1, 0, 0, 1, 0, None, None), (M0 + MINUTE, 0, 0, 1, 0, 0, 1, None, None),
        (M0 + 5 * MINUTE, 0, 3, 0, 0, 0, 0, None, None)]
    five = 5 * MINUTE
    start = M0 - M0 % five
    buckets = store.history("q", start, start + 4 * five, five)
    assert buckets is not None
    assert sum(row[1] for row in buckets) == 3 and sum(row[2] for row in buckets) == 4
    assert all(row[0] % five == 0 for row in buckets)
    assert store.history("q", M0 + 6 * MINUTE, M0 + 9 * MINUTE, MINUTE) == []  # known, empty
    assert history_rows(store.history("z é", M0, M0 + MINUTE, MINUTE) or []) == [
        (M0, 0, 0, 0, 1, 0, 0, None, None)]


@covers("sample_history")
def test_sample_history_writes_each_queues_capped_depth_and_head_wait(
        local_store: LocalStoreUnderTest, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tickwork.stores.owner_local.DEPTH_CAP", 2)  # a smaller cap
    store = local_store.store
    queued(local_store, "a", "b", "c")  # q: three waiting, over the cap of 2
    assert store.insert(valid_job("later", "q2", delay_ms=10 * MINUTE), T0)
    store.add_history([HistoryRow("gone", M0 - MINUTE, completed=1)])
    store.sample_history(T0 + 30_000, M0 - MINUTE, ["counted"])
    assert local_store.rows(
        "SELECT queue, minute, depth, oldest_age_ms FROM tickwork_queue_history "
        "WHERE minute = ? ORDER BY queue", (M0,)) == [
        ("counted", M0, 0, None),  # named by the flush: sampled, empty
        ("q", M0, 3, 30_000),  # depth 3 = the cap + 1: "more than 2"
        ("q2", M0, 1, None)]  # waiting for its time: none ready
    for token in ("t1", "t2", "t3"):  # q empties
        job = claimed(local_store, token, T0 + MINUTE)
        assert store.settle_claim(job.sequence, token, COMPLETED, T0 + MINUTE, cancelled=False)
    store.sample_history(T0 + 2 * MINUTE, M0, [])
    assert local_store.rows(
        "SELECT queue, depth FROM tickwork_queue_history WHERE minute = ? ORDER BY queue",
        (M0 + 2 * MINUTE,)) == [("q", 0), ("q2", 1)]


@covers("prune_history")
def test_prune_history_deletes_the_oldest_minutes_a_batch_at_a_time(
        local_store: LocalStoreUnderTest) -> None:
    store = local_store.store
    store.add_history([HistoryRow("q", M0 + number * MINUTE, enqueued=1)
                       for number in range(3)])
    keep = 7 * 24 * 60 * MINUTE
    now = M0 + 2 * MINUTE + keep
    assert store.prune_history(now, keep, 1) == 1
    assert store.prune_history(now, keep, 10) == 1
    assert store.prune_history(now, keep, 10) == 0
    assert local_store.rows("SELECT minute FROM tickwork_queue_history") == [
        (M0 + 2 * MINUTE,)]
