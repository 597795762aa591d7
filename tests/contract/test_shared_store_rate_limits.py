"""The shared-store contract of rate limits: rate_limits, put_rate_limit,
delete_rate_limit and put_back_rate_limited, called directly on each shared
store that has them, rows read back with plain SQL.

``test_every_port_method_has_a_contract_test`` (test_shared_store_contract)
counts the methods these tests cover. The claims' checks and spends of the
buckets are the stores' own tests (tests/shared/test_postgres_rate_limits.py).
"""

from __future__ import annotations

import time

import pytest

from tests.contract.stores import FAILED, T0, covers, valid_job
from tests.contract.under_test import SharedStoreUnderTest
from tickwork import Retry
from tickwork.model.rate_limits import RateLimit, validate_rate_limit
from tickwork.stores.d1.store import D1Store

LEASE = 30_000
#: Far ahead of the database clock: a hold until then is in force by the
#: store's own time (delete_rate_limit reads it).
LATER = int(time.time() * 1000) + 10**9


@pytest.fixture(autouse=True)
def _store_has_rate_limits(shared_store: SharedStoreUnderTest) -> None:
    # D1's rate limits are built on their own branch; until they land there
    # the D1 params of this module have nothing to call.
    if isinstance(shared_store.store, D1Store) and not hasattr(D1Store, "put_rate_limit"):
        pytest.skip("D1Store has no rate limits yet")


async def rate_rows(shared: SharedStoreUnderTest) -> list[tuple[object, ...]]:
    return await shared.rows(
        "SELECT kind, key, starts, period_ms, burst, next_start, held_until, updated_at "
        "FROM tickwork_rate_limits ORDER BY kind, key")


@covers("put_rate_limit", "rate_limits")
async def test_put_rate_limit_stores_new_buckets_full_and_lists_them_in_order(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.rate_limits(T0) == []
    assert await store.put_rate_limit(validate_rate_limit("queue", "q", 3, 1000), T0) is True
    assert await store.put_rate_limit(validate_rate_limit("lane", "tenant-b", 10, 60_000, 2),
                                      T0 + 1) is True
    assert await store.put_rate_limit(validate_rate_limit("lane", "é", 1, 1), T0 + 2) is True
    assert await store.put_rate_limit(validate_rate_limit("queue", "a", 100_000,
                                                          31 * 86_400_000, 100_000),
                                      T0 + 3) is True
    # A queue and a lane of the same name are two keys.
    assert await store.put_rate_limit(validate_rate_limit("lane", "q", 5, 10), T0 + 4) is True
    assert await store.rate_limits(T0 + 5) == [
        RateLimit("queue", "a", 100_000, 31 * 86_400_000, 100_000, 0, None, T0 + 3),
        RateLimit("queue", "q", 3, 1000, 3, 0, None, T0),
        RateLimit("lane", "q", 5, 10, 5, 0, None, T0 + 4),
        RateLimit("lane", "tenant-b", 10, 60_000, 2, 0, None, T0 + 1),
        RateLimit("lane", "é", 1, 1, 1, 0, None, T0 + 2)]
    assert await rate_rows(shared_store) == [
        ("lane", "q", 5, 10, 5, 0, 0, T0 + 4),
        ("lane", "tenant-b", 10, 60_000, 2, 0, 0, T0 + 1),
        ("lane", "é", 1, 1, 1, 0, 0, T0 + 2),
        ("queue", "a", 100_000, 31 * 86_400_000, 100_000, 0, 0, T0 + 3),
        ("queue", "q", 3, 1000, 3, 0, 0, T0)]


@covers("put_rate_limit")
async def test_put_rate_limit_writes_nothing_when_the_same_bucket_is_stored(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.put_rate_limit(validate_rate_limit("queue", "q", 3, 1000), T0) is True
    await shared_store.rows("UPDATE tickwork_rate_limits SET next_start = 7")
    # burst defaults to starts: the same three, stored already.
    assert await store.put_rate_limit(validate_rate_limit("queue", "q", 3, 1000, 3),
                                      T0 + 50) is False
    assert await rate_rows(shared_store) == [("queue", "q", 3, 1000, 3, 7, 0, T0)]
    # Any of the three changed is a new bucket.
    assert await store.put_rate_limit(validate_rate_limit("queue", "q", 3, 1000, 2),
                                      T0 + 60) is True
    assert await store.put_rate_limit(validate_rate_limit("queue", "q", 3, 999, 2),
                                      T0 + 70) is True
    assert (await rate_rows(shared_store))[0][2:5] == (3, 999, 2)


@covers("put_rate_limit", "rate_limits")
async def test_a_replaced_bucket_keeps_its_next_start_time_in_the_new_units(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.put_rate_limit(validate_rate_limit("lane", "L", 3, 1000), T0) is True
    # Next start at T0 + 333.33.. ms (in thirds of a ms): listed rounded up.
    await shared_store.rows(f"UPDATE tickwork_rate_limits SET next_start = {3 * T0 + 1000}")
    [listed] = await store.rate_limits(T0)
    assert listed.next_start_at == T0 + 334
    assert await store.put_rate_limit(validate_rate_limit("lane", "L", 7, 1000, 1),
                                      T0 + 10) is True
    assert await rate_rows(shared_store) == [
        ("lane", "L", 7, 1000, 1, 7 * (T0 + 334), 0, T0 + 10)]
    # Exact in the old units: nothing to round.
    assert await store.put_rate_limit(validate_rate_limit("lane", "L", 2, 1000), T0 + 20)
    assert (await rate_rows(shared_store))[0][5] == 2 * (T0 + 334)
    # A bucket that has been full a long time stays full.
    await shared_store.rows("UPDATE tickwork_rate_limits SET next_start = 0")
    assert await store.put_rate_limit(validate_rate_limit("lane", "L", 9, 1000), T0 + 30)
    assert (await rate_rows(shared_store))[0][5] == 0
    # The period is 1 ms at the least and 31 days at the most, the starts
    # and the burst 1 to 100,000: the largest next start stays exact.
    far = 10 * (T0 + 31 * 86_400_000)
    await shared_store.rows(f"UPDATE tickwork_rate_limits SET next_start = {far}")
    assert await store.put_rate_limit(validate_rate_limit("lane", "L", 100_000, 1), T0 + 40)
    in_ms = -(-far // 9)  # rounded up
    assert (await rate_rows(shared_store))[0][5] == in_ms * 100_000
    [listed] = await store.rate_limits(T0 + 40)
    assert listed.next_start_at == in_ms


@covers("put_rate_limit", "put_back_rate_limited", "rate_limits")
async def test_a_bucket_put_on_a_held_key_starts_full_and_keeps_the_hold(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await store.insert(valid_job("a", "q", lane="L"), T0)
    job = await store.claim("tok", LEASE, T0 + 1, guarded=False)
    assert job is not None
    assert await store.put_back_rate_limited(job.sequence, "tok", "lane", "L", T0 + 5000,
                                             T0 + 2) is not None
    assert await store.rate_limits(T0 + 3) == [
        RateLimit("lane", "L", None, None, None, None, T0 + 5000, T0 + 2)]
    assert await store.put_rate_limit(validate_rate_limit("lane", "L", 4, 100), T0 + 4) is True
    assert await rate_rows(shared_store) == [("lane", "L", 4, 100, 4, 0, T0 + 5000, T0 + 4)]
    assert await store.rate_limits(T0 + 5) == [
        RateLimit("lane", "L", 4, 100, 4, 0, T0 + 5000, T0 + 4)]
    # Once the hold is over, the bucket is listed without it.
    assert await store.rate_limits(T0 + 5000) == [
        RateLimit("lane", "L", 4, 100, 4, 0, None, T0 + 4)]


@covers("rate_limits")
async def test_rate_limits_leave_out_keys_whose_only_hold_is_over(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await shared_store.rows(
        "INSERT INTO tickwork_rate_limits (kind, key, held_until, updated_at) VALUES "
        f"('queue', 'held', {T0 + 100}, {T0}), ('queue', 'over', {T0 + 50}, {T0})")
    assert await store.rate_limits(T0 + 49) == [
        RateLimit("queue", "held", None, None, None, None, T0 + 100, T0),
        RateLimit("queue", "over", None, None, None, None, T0 + 50, T0)]
    # A hold until now is over at now (a start is allowed at held_until).
    assert await store.rate_limits(T0 + 50) == [
        RateLimit("queue", "held", None, None, None, None, T0 + 100, T0)]
    assert await store.rate_limits(T0 + 100) == []


@covers("delete_rate_limit")
async def test_delete_rate_limit_removes_the_bucket_and_the_hold(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    assert await store.delete_rate_limit("queue", "q", T0) is False
    assert await store.put_rate_limit(validate_rate_limit("queue", "q", 3, 1000), T0)
    assert await store.put_rate_limit(validate_rate_limit("lane", "q", 3, 1000), T0)
    assert await store.delete_rate_limit("lane", "nope", T0) is False
    assert await store.delete_rate_limit("queue", "q", T0) is True
    assert await store.delete_rate_limit("queue", "q", T0) is False
    assert [row[:2] for row in await rate_rows(shared_store)] == [("lane", "q")]
    # A hold in force by the store's clock counts; one that is over does
    # not, though its row goes too.
    await shared_store.rows(
        "INSERT INTO tickwork_rate_limits (kind, key, held_until, updated_at) VALUES "
        f"('queue', 'held', {LATER}, {T0}), ('queue', 'over', {T0}, {T0})")
    assert await store.delete_rate_limit("queue", "held", T0) is True
    assert await store.delete_rate_limit("queue", "over", T0) is False
    assert [row[:2] for row in await rate_rows(shared_store)] == [("lane", "q")]


@covers("put_back_rate_limited")
async def test_put_back_rate_limited_requeues_the_claim_without_using_an_attempt(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await store.insert(valid_job("a", "q", lane="L", retry=Retry(3)), T0)
    first = await store.claim("t1", LEASE, T0 + 1, guarded=False)
    assert first is not None
    assert await store.retry(first.sequence, "t1", FAILED, 0, T0 + 2) is not None
    # A recovery too, so each count is seen to stay.
    second = await store.claim("t2", 10, T0 + 3, guarded=False)
    assert second is not None
    assert await store.requeue_expired(second.sequence, "t2", T0 + 20)
    job = await store.claim("t3", LEASE, T0 + 30, guarded=False)
    assert job is not None and (job.attempt, job.recoveries, len(job.history)) == (2, 1, 1)
    history_json = (await shared_store.rows("SELECT history_json FROM tickwork_jobs"))[0][0]
    back = await store.put_back_rate_limited(job.sequence, "t3", "queue", "q", T0 + 900,
                                             T0 + 40)
    assert back is not None
    assert (back.job_id, back.state, back.attempt, back.recoveries, back.history,
            back.started_at, back.due_at) == ("a", "queued", 2, 1, job.history, None, None)
    assert await shared_store.rows(
        "SELECT state, claim_token, lease_expires_at, started_at, due_at, attempt, "
        "recoveries, history_json FROM tickwork_jobs") == [
        ("queued", None, None, None, None, 2, 1, history_json)]
    assert await rate_rows(shared_store) == [("queue", "q", None, None, None, 0, T0 + 900,
                                              T0 + 40)]
    # An earlier hold leaves it; a later one extends it.
    assert await store.claim("early", LEASE, T0 + 899, guarded=False) is None  # held
    job = await store.claim("t4", LEASE, T0 + 900, guarded=False)
    assert job is not None
    assert await store.put_back_rate_limited(job.sequence, "t4", "queue", "q", T0 + 500,
                                             T0 + 901) is not None
    assert (await rate_rows(shared_store))[0][6] == T0 + 900
    job = await store.claim("t5", LEASE, T0 + 902, guarded=False)
    assert job is not None
    assert await store.put_back_rate_limited(job.sequence, "t5", "queue", "q", T0 + 2000,
                                             T0 + 903) is not None
    assert (await rate_rows(shared_store))[0][6:] == (T0 + 2000, T0 + 903)


@covers("put_back_rate_limited")
async def test_put_back_rate_limited_is_fenced_but_holds_the_key_anyway(
        shared_store: SharedStoreUnderTest) -> None:
    store = shared_store.store
    await store.insert(valid_job("a", "q", lane="L"), T0)
    job = await store.claim("tok", LEASE, T0 + 1, guarded=False)
    assert job is not None
    assert await store.put_rate_limit(validate_rate_limit("lane", "L", 2, 100), T0 + 1)
    # Another claim's token: nothing put back, the hold written.
    assert await store.put_back_rate_limited(job.sequence, "stale", "lane", "L", T0 + 100,
                                             T0 + 2) is None
    # The lease over: the same.
    assert await store.put_back_rate_limited(job.sequence, "tok", "lane", "L", T0 + 200,
                                             T0 + 1 + LEASE) is None
    # A cancellation recorded: the same.
    assert await store.record_cancellation("a", "c1", "any")
    assert await store.put_back_rate_limited(job.sequence, "tok", "queue", "q", T0 + 300,
                                             T0 + 3) is None
    assert await shared_store.rows(
        "SELECT state, claim_token, attempt FROM tickwork_jobs") == [("running", "tok", 1)]
    # The holds, and the lane's bucket kept beside its hold.
    assert await rate_rows(shared_store) == [
        ("lane", "L", 2, 100, 2, 0, T0 + 200, T0 + 1 + LEASE),
        ("queue", "q", None, None, None, 0, T0 + 300, T0 + 3)]


@covers("put_rate_limit")
async def test_the_rate_limits_table_refuses_a_bad_row(
        shared_store: SharedStoreUnderTest) -> None:
    insert = ("INSERT INTO tickwork_rate_limits "
              "(kind, key, starts, period_ms, burst, next_start, held_until, updated_at) "
              "VALUES ('{}', 'k', {}, {}, {}, 0, 0, 1)")
    for kind, starts, period_ms, burst in (
            ("tenant", 1, 1, 1), ("queue", 0, 1, 1), ("queue", 100_001, 1, 1),
            ("queue", 1, 0, 1), ("queue", 1, 2_678_400_001, 1), ("lane", 1, 1, 0),
            ("lane", 1, 1, 100_001), ("lane", 1, "NULL", 1), ("lane", "NULL", "NULL", 1),
            ("lane", "NULL", 1, "NULL")):
        with pytest.raises(Exception, match=r"(?i)constraint"):
            await shared_store.rows(insert.format(kind, starts, period_ms, burst))
    await shared_store.rows(insert.format("queue", "NULL", "NULL", "NULL"))
    with pytest.raises(Exception, match=r"(?i)constraint"):  # one row per kind and key
        await shared_store.rows(insert.format("queue", 1, 1, 1))
    assert await shared_store.store.rate_limits(0) == []
