"""Every /v1 route through ``Default.fetch``: owner-local (JobOwner over RPC) and
shared (D1), in both Workers SDK shapes, read back from storage."""

from __future__ import annotations

import time
from typing import Any

import pytest

import tickwork
from tests.support.worker import job, send
from tickwork.stores.owner_schema import SCHEMA_VERSION as OWNER_VERSION
from tickwork.stores.schema_version import SCHEMA_VERSION as SHARED_VERSION

pytestmark = pytest.mark.usefixtures("js_module")

SCOPES = ("owners/tenant-1", "shared")


async def stored_jobs(env: Any, scope: str, query: Any) -> dict[str, tuple[Any, ...]]:
    """job_id -> (state, outcome, failure_reason, cancellation_id), read from storage."""
    sql = "SELECT job_id, state, outcome, failure_reason, cancellation_id FROM tickwork_jobs"
    if scope == "shared":
        rows = await query(sql)
    else:
        namespace = env.JOB_OWNERS
        rows = (namespace.storage("tenant-1").debug_query(sql)
                if "tenant-1" in namespace.names() else [])
    return {row[0]: tuple(row[1:]) for row in rows}


async def test_health_is_open(worker: Any, shape: str) -> None:
    assert await send(worker, shape, "GET", "/v1/health", token=None) == (
        200, {"ok": True, "api": "v1", "version": tickwork.__version__})


@pytest.mark.parametrize("scope", SCOPES)
async def test_browse_ready_and_the_settled_feed(worker: Any, shape: str, scope: str) -> None:
    """list_jobs pages through a scope's jobs (over RPC for an owner, from
    D1 for the shared queues); ready reads the store; only owners have a
    settled feed."""
    for name in ("a", "b", "c"):
        assert (await send(worker, shape, "POST", f"/v1/{scope}/jobs", job(name)))[0] == 201
    status, body = await send(worker, shape, "GET", f"/v1/{scope}/jobs?queue=q&limit=2")
    assert status == 200, body
    assert [j["job_id"] for j in body["jobs"]] == ["c", "b"]
    status, body = await send(worker, shape, "GET",
                              f"/v1/{scope}/jobs?queue=q&limit=2&cursor={body['cursor']}")
    assert (status, [j["job_id"] for j in body["jobs"]], body["cursor"]) == (200, ["a"], None)
    status, body = await send(worker, shape, "GET", f"/v1/{scope}/jobs?queue=q&state=done")
    assert (status, body["error"]["field"]) == (400, "state")
    assert await send(worker, shape, "GET", f"/v1/{scope}/ready") == (
        200, {"ready": True, "version": tickwork.__version__,
              "schema_version": SHARED_VERSION if scope == "shared" else OWNER_VERSION})
    status, body = await send(worker, shape, "GET", f"/v1/{scope}/settled?limit=10")
    if scope == "shared":
        assert (status, body["error"]["code"]) == (404, "not_available")
    else:
        assert (status, body) == (200, {"jobs": []})  # nothing settled yet


@pytest.mark.parametrize("scope", SCOPES)
async def test_enqueue_read_head_and_status(worker: Any, env: Any, shape: str, scope: str,
                                            query: Any) -> None:
    status, body = await send(worker, shape, "POST", f"/v1/{scope}/jobs",
                              job("a", payload={"n": 1}, priority=3))
    assert (status, body) == (201, {"job_id": "a", "status": "queued"})
    # an identical replay is a duplicate; a list enqueue mirrors the list
    assert await send(worker, shape, "POST", f"/v1/{scope}/jobs",
                      job("a", payload={"n": 1}, priority=3)) == (
        200, {"job_id": "a", "status": "duplicate"})
    status, body = await send(worker, shape, "POST", f"/v1/{scope}/jobs",
                              {"jobs": [job("b", lane="x"), job("c", queue="other")]})
    assert status == 200
    assert body == {"jobs": [{"job_id": "b", "status": "queued"},
                             {"job_id": "c", "status": "queued"}]}

    status, body = await send(worker, shape, "GET", f"/v1/{scope}/jobs/a")
    assert status == 200
    record = body["job"]
    assert (record["job_id"], record["queue"], record["lane"], record["priority"],
            record["payload"], record["state"]) == ("a", "q", "q", 3, {"n": 1}, "queued")

    status, body = await send(worker, shape, "GET", f"/v1/{scope}/queues/q/head")
    assert status == 200 and body["queue"] == "q" and body["head"]["job_id"] == "a"
    assert await send(worker, shape, "GET", f"/v1/{scope}/queues/empty/head") == (
        200, {"queue": "empty", "head": None})

    status, body = await send(worker, shape, "GET", f"/v1/{scope}/queues")
    assert status == 200
    assert [(item["queue"], item["queued"]) for item in body["queues"]] == [
        ("other", 1), ("q", 2)]
    status, body = await send(worker, shape, "GET", f"/v1/{scope}/queues/q")
    assert status == 200 and body["queue"]["queued"] == 2 and body["queue"]["running"] == 0

    assert await send(worker, shape, "GET", f"/v1/{scope}/jobs/missing") == (
        404, {"error": {"code": "job_not_found", "message": "no job 'missing'",
                        "field": "job_id"}})
    assert set(await stored_jobs(env, scope, query)) == {"a", "b", "c"}


@pytest.mark.parametrize("scope", SCOPES)
async def test_cancel_fail_lane_and_purge(worker: Any, env: Any, shape: str, scope: str,
                                          query: Any) -> None:
    await send(worker, shape, "POST", f"/v1/{scope}/jobs", {"jobs": [
        job("a"), job("b", lane="bad"), job("c", lane="bad", queue="other"),
        job("d", queue="purged"), job("e", queue="purged")]})

    assert await send(worker, shape, "POST", f"/v1/{scope}/jobs/a/cancel",
                      {"cancellation_id": "k1"}) == (200, {"job_id": "a", "status": "recorded"})
    assert await send(worker, shape, "POST", f"/v1/{scope}/jobs/a/cancel",
                      {"cancellation_id": "k1"}) == (200, {"job_id": "a", "status": "replayed"})
    assert await send(worker, shape, "POST", f"/v1/{scope}/jobs/a/cancel",
                      {"cancellation_id": "k2", "only_if_queued": True}) == (
        409, {"job_id": "a", "status": "conflict"})
    assert await send(worker, shape, "POST", f"/v1/{scope}/jobs/zz/cancel",
                      {"cancellation_id": "k1"}) == (404, {"job_id": "zz", "status": "not_found"})

    assert await send(worker, shape, "POST", f"/v1/{scope}/lanes/bad/fail",
                      {"reason": "tenant_gone"}) == (
        200, {"lane": "bad", "settled": 2, "more": False})
    assert await send(worker, shape, "POST", f"/v1/{scope}/queues/purged/purge") == (
        200, {"queue": "purged", "purged": 2})

    stored = await stored_jobs(env, scope, query)
    assert stored["a"] == ("queued", None, None, "k1")
    assert stored["b"] == ("settled", "failed", "tenant_gone", None)
    assert stored["c"] == ("settled", "failed", "tenant_gone", None)
    assert "d" not in stored and "e" not in stored


@pytest.mark.parametrize("scope", SCOPES)
async def test_a_conflicting_replay_is_409_and_changes_nothing(
        worker: Any, env: Any, shape: str, scope: str, query: Any) -> None:
    await send(worker, shape, "POST", f"/v1/{scope}/jobs", job("a", payload={"n": 1}))
    status, body = await send(worker, shape, "POST", f"/v1/{scope}/jobs",
                              {"jobs": [job("new"), job("a", payload={"n": 2})]})
    assert status == 409 and body["error"]["code"] == "ingest_conflict"
    assert "payload" in body["error"]["message"]
    assert set(await stored_jobs(env, scope, query)) == {"a"}
    status, body = await send(worker, shape, "GET", f"/v1/{scope}/jobs/a")
    assert body["job"]["payload"] == {"n": 1}


async def test_unconfigured_scopes_answer_404(workers_module: Any, db: Any, shape: str) -> None:
    import types

    from worker.entry import Default

    bare = Default(types.SimpleNamespace(), types.SimpleNamespace(TICKWORK_TOKEN="t"))
    for path in ("/v1/shared/queues", "/v1/owners/x/queues"):
        status, body = await send(bare, shape, "GET", path, token="t")
        assert (status, body["error"]["code"]) == (404, "scope_not_configured")


async def test_without_a_token_configured_the_api_fails_closed(
        workers_module: Any, db: Any, shape: str, query: Any) -> None:
    import types

    from worker.entry import Default

    closed = Default(types.SimpleNamespace(), types.SimpleNamespace(DB=db))
    status, body = await send(closed, shape, "POST", "/v1/shared/jobs", job("a"), token="")
    assert (status, body["error"]["code"]) == (503, "token_not_configured")
    assert await query("SELECT count(*) FROM tickwork_jobs") == [(0,)]


@pytest.mark.parametrize("scope", SCOPES)
async def test_limits_are_set_read_and_cleared_over_http(worker: Any, shape: str,
                                                         scope: str) -> None:
    """The limit routes on both scopes: an owner's (through the Durable
    Object's RPC) and the shared D1 queues'."""
    assert await send(worker, shape, "POST", f"/v1/{scope}/limits",
                      {"kind": "lane", "key": "tenant-a", "max_running": 2}) == (
        200, {"kind": "lane", "key": "tenant-a", "changed": True})
    assert await send(worker, shape, "POST", f"/v1/{scope}/limits",
                      {"kind": "queue", "key": "exports", "max_running": 3}) == (
        200, {"kind": "queue", "key": "exports", "changed": True})
    status, body = await send(worker, shape, "GET", f"/v1/{scope}/limits")
    assert status == 200
    assert [(limit["kind"], limit["key"], limit["max_running"])
            for limit in body["limits"]] == [("queue", "exports", 3), ("lane", "tenant-a", 2)]
    status, body = await send(worker, shape, "POST", f"/v1/{scope}/limits",
                              {"kind": "tenant", "key": "x", "max_running": 2})
    assert status == 400 and "kind" in str(body)
    assert await send(worker, shape, "POST", f"/v1/{scope}/limits/clear",
                      {"kind": "lane", "key": "tenant-a"}) == (
        200, {"kind": "lane", "key": "tenant-a", "changed": True})
    status, body = await send(worker, shape, "GET", f"/v1/{scope}/limits")
    assert [limit["key"] for limit in body["limits"]] == ["exports"]


@pytest.mark.parametrize("scope", SCOPES)
async def test_rate_limits_are_set_read_and_cleared_over_http(worker: Any, shape: str,
                                                              scope: str) -> None:
    """The rate-limit routes on both scopes: a new bucket is full (its next
    start allowed now), the burst defaults to the starts, a bad period is
    refused by name with nothing stored, and clearing removes it."""
    before = int(time.time() * 1000)
    assert await send(worker, shape, "POST", f"/v1/{scope}/rate-limits",
                      {"kind": "lane", "key": "tenant-a", "starts": 10, "period_ms": 1000,
                       "burst": 2}) == (200, {"kind": "lane", "key": "tenant-a",
                                              "changed": True})
    assert await send(worker, shape, "POST", f"/v1/{scope}/rate-limits",
                      {"kind": "queue", "key": "exports", "starts": 5,
                       "period_ms": 60_000}) == (200, {"kind": "queue", "key": "exports",
                                                       "changed": True})
    status, body = await send(worker, shape, "POST", f"/v1/{scope}/rate-limits",
                              {"kind": "queue", "key": "exports", "starts": 5,
                               "period_ms": 0})
    assert status == 400 and body["error"]["field"] == "period_ms"
    status, body = await send(worker, shape, "GET", f"/v1/{scope}/rate-limits")
    assert status == 200
    assert [(limit["kind"], limit["key"], limit["starts"], limit["period_ms"], limit["burst"],
             limit["held_until"]) for limit in body["rate_limits"]] == [
        ("queue", "exports", 5, 60_000, 5, None), ("lane", "tenant-a", 10, 1000, 2, None)]
    assert all(limit["next_start_at"] <= int(time.time() * 1000)
               and limit["updated_at"] >= before for limit in body["rate_limits"])
    assert await send(worker, shape, "POST", f"/v1/{scope}/rate-limits/clear",
                      {"kind": "lane", "key": "tenant-a"}) == (
        200, {"kind": "lane", "key": "tenant-a", "changed": True})
    status, body = await send(worker, shape, "GET", f"/v1/{scope}/rate-limits")
    assert [limit["key"] for limit in body["rate_limits"]] == ["exports"]
