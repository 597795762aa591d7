"""The /v1 routes (tickwork.api.JobApi) over real owner-local runtimes on sqlite3.

Hosts only translate requests; every status code, error body and "nothing
changed" guarantee is decided here, so it is tested here once.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest

import tickwork
from tests.support import CountingWake, ScriptedExecutor
from tickwork import OwnerRuntime
from tickwork.api import ApiRequest, ApiResponse, JobApi, RuntimeService
from tickwork.model.jobs import MAX_INGEST_BATCH
from tickwork.stores import Sqlite3Database

TOKEN = "s3cret-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}


class Owners:
    """One in-memory sqlite3 runtime per owner key, built on first use."""

    def __init__(self) -> None:
        self.runtimes: dict[str, OwnerRuntime] = {}
        self.executor = ScriptedExecutor()

    def __call__(self, key: str) -> RuntimeService:
        if key not in self.runtimes:
            self.runtimes[key] = OwnerRuntime(
                Sqlite3Database(sqlite3.connect(":memory:")), execute=self.executor,
                is_alive=lambda job: False, wake=CountingWake())
        return RuntimeService(self.runtimes[key])

    def total_jobs(self) -> int:
        return sum(sum(s.queued + s.running + s.settled for s in runtime.status())
                   for runtime in self.runtimes.values())


@pytest.fixture
def owners() -> Iterator[Owners]:
    yield Owners()


@pytest.fixture
def api(owners: Owners) -> JobApi:
    return JobApi(token=TOKEN, owners=owners)


async def call(api: JobApi, method: str, path: str, body: Any = None, *,
               headers: dict[str, str] | None = None, raw: bytes | None = None) -> ApiResponse:
    data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
    return await api.handle(ApiRequest(method, path, AUTH if headers is None else headers, data))


def a_job(job_id: str = "j1", **fields: Any) -> dict[str, Any]:
    return {"job_id": job_id, "queue": "emails", "lane": "tenant-1", "priority": 1,
            "payload": {"to": "a@example.com"}, **fields}


# --------------------------------------------------------------------- auth


async def test_health_needs_no_token(api: JobApi) -> None:
    response = await call(api, "GET", "/v1/health", headers={})
    assert (response.status, response.body) == (200, {
        "ok": True, "api": "v1", "version": tickwork.__version__})


@pytest.mark.parametrize("headers", [
    {},
    {"authorization": "Bearer wrong"},
    {"authorization": f"Basic {TOKEN}"},
    {"authorization": "Bearer"},
    {"authorization": f"Bearer {TOKEN}x"},
])
async def test_missing_or_wrong_token_is_refused_and_stores_nothing(
        api: JobApi, owners: Owners, headers: dict[str, str]) -> None:
    response = await call(api, "POST", "/v1/owners/acme/jobs", a_job(), headers=headers)
    assert response.status == 401
    assert response.body["error"]["code"] == "unauthorized"
    assert owners.runtimes == {}  # not even the owner was touched
    for method, path in [("GET", "/v1/owners/acme/jobs/j1"), ("GET", "/v1/owners/acme/queues"),
                         ("POST", "/v1/owners/acme/queues/emails/purge")]:
        assert (await call(api, method, path, headers=headers)).status == 401


async def test_no_configured_token_fails_closed(owners: Owners) -> None:
    for token in (None, ""):
        api = JobApi(token=token, owners=owners)
        response = await call(api, "POST", "/v1/owners/acme/jobs", a_job(),
                              headers={"authorization": "Bearer "})
        assert response.status == 503
        assert response.body["error"]["code"] == "token_not_configured"
    assert owners.runtimes == {}


# ------------------------------------------------------------------ enqueue


async def test_enqueue_one_job_then_replay_then_conflict(api: JobApi, owners: Owners) -> None:
    first = await call(api, "POST", "/v1/owners/acme/jobs", a_job())
    assert (first.status, first.body) == (201, {"job_id": "j1", "status": "queued"})
    replay = await call(api, "POST", "/v1/owners/acme/jobs", a_job())
    assert (replay.status, replay.body) == (200, {"job_id": "j1", "status": "duplicate"})
    conflict = await call(api, "POST", "/v1/owners/acme/jobs", a_job(priority=7))
    assert conflict.status == 409
    assert conflict.body["error"]["code"] == "ingest_conflict"
    assert "priority" in conflict.body["error"]["message"]
    stored = owners.runtimes["acme"].read("j1")
    assert stored is not None and stored.priority == 1


async def test_enqueue_defaults_lane_priority_and_payload(api: JobApi, owners: Owners) -> None:
    response = await call(api, "POST", "/v1/owners/acme/jobs", {"job_id": "j", "queue": "q"})
    assert response.status == 201
    stored = owners.runtimes["acme"].read("j")
    assert stored is not None
    assert (stored.lane, stored.priority, stored.payload, stored.recovery) == ("q", 0, None, None)


async def test_enqueue_a_list_is_atomic(api: JobApi, owners: Owners) -> None:
    await call(api, "POST", "/v1/owners/acme/jobs", a_job("existing"))
    batch = {"jobs": [a_job("a"), a_job("existing"), a_job("b")]}
    response = await call(api, "POST", "/v1/owners/acme/jobs", batch)
    assert response.status == 200
    assert response.body == {"jobs": [{"job_id": "a", "status": "queued"},
                                       {"job_id": "existing", "status": "duplicate"},
                                       {"job_id": "b", "status": "queued"}]}
    conflicting = {"jobs": [a_job("c"), a_job("existing", priority=9)]}
    refused = await call(api, "POST", "/v1/owners/acme/jobs", conflicting)
    assert refused.status == 409
    assert owners.runtimes["acme"].read("c") is None  # rolled back with the conflict


@pytest.mark.parametrize(("body", "field"), [
    ({"jobs": [a_job("a"), a_job("b", priority="high")]}, "jobs[1].priority"),
    ({"jobs": [a_job("a"), {"queue": "q"}]}, "jobs[1].job_id"),
    ({"jobs": [a_job("a"), a_job("b", priority=True)]}, "jobs[1].priority"),
    ({"jobs": [a_job("a"), a_job("b", priority=1.5)]}, "jobs[1].priority"),
    ({"jobs": [a_job("a"), a_job("x" * 257)]}, "jobs[1].job_id"),
    ({"jobs": [a_job("a"), a_job("b", colour="red")]}, "jobs[1]"),
    ({"jobs": [a_job("a"), a_job("b", recovery={"max_recoveries": -1})]},
     "jobs[1].recovery.max_recoveries"),
    ({"jobs": [a_job("a"), a_job("b", recovery={"retries": 1})]}, "jobs[1].recovery"),
    ({"jobs": [a_job("a"), "not a job"]}, "jobs[1]"),
    ({"jobs": []}, "jobs"),
    ({"jobs": {"a": 1}}, "jobs"),
    ({"jobs": [a_job(str(n)) for n in range(MAX_INGEST_BATCH + 1)]}, "jobs"),
    ({"jobs": [a_job("a")], "extra": 1}, "body"),
    ([a_job("a")], "body"),
    ("just text", "body"),
    # One job as the body: every refusal names the field from the body, the
    # request's shape (wire) and its values (engine) alike, as in a list.
    ({"job_id": "a"}, "queue"),
    (a_job("a", colour="red"), "body"),
    (a_job("a", queue=5), "queue"),
    (a_job("a", retry={"base_delay_ms": 1}), "retry.attempts"),
    (a_job("a", retry={"attempts": 0}), "retry.attempts"),
    (a_job("a", recovery={"retries": 1}), "recovery"),
    (a_job("a", recovery={"max_recoveries": -1}), "recovery.max_recoveries"),
    ({"jobs": [a_job("a", retry={"base_delay_ms": 1})]}, "jobs[0].retry.attempts"),
    ({"jobs": [a_job("a", retry={"attempts": 0})]}, "jobs[0].retry.attempts"),
])
async def test_bad_jobs_are_refused_naming_the_field_and_store_nothing(
        api: JobApi, owners: Owners, body: Any, field: str) -> None:
    response = await call(api, "POST", "/v1/owners/acme/jobs", body)
    assert response.status == 400, response.body
    assert response.body["error"]["field"] == field
    assert field.split("[")[0].split(".")[0] in response.body["error"]["message"]
    assert owners.runtimes == {}  # refused before any owner was opened


@pytest.mark.parametrize(("retry", "message"), [
    ({"attempts": 0}, "must be within 1 and 1000, got 0"),
    ({"attempts": 1001}, "must be within 1 and 1000, got 1001"),
    ({"attempts": 2, "max_delay_ms": -1}, "must be within 0 and"),
])
async def test_a_range_refusal_states_the_real_range(api: JobApi, retry: Any,
                                                     message: str) -> None:
    response = await call(api, "POST", "/v1/owners/acme/jobs", a_job("a", retry=retry))
    assert response.status == 400 and message in response.body["error"]["message"], response.body


@pytest.mark.parametrize(("raw", "code"), [
    (b"{not json", "malformed_json"),
    (b'{"job_id": "a", "queue": "q", "payload": NaN}', "malformed_json"),
    (b'{"job_id": "a", "queue": "q", "payload": Infinity}', "malformed_json"),
    (b"\xff\xfe", "malformed_json"),
    (b"[" * 100_000 + b"]" * 100_000, "malformed_json"),
])
async def test_malformed_bodies_are_refused(api: JobApi, owners: Owners, raw: bytes,
                                            code: str) -> None:
    response = await call(api, "POST", "/v1/owners/acme/jobs", raw=raw)
    assert response.status == 400
    assert response.body["error"]["code"] == code
    assert owners.total_jobs() == 0


async def test_oversized_body_is_refused_before_parsing(owners: Owners) -> None:
    api = JobApi(token=TOKEN, owners=owners, max_body_bytes=100)
    body = a_job(payload={"blob": "x" * 200})
    response = await call(api, "POST", "/v1/owners/acme/jobs", body)
    assert response.status == 413
    assert response.body["error"]["code"] == "body_too_large"
    assert owners.runtimes == {}


async def test_non_json_content_type_is_refused(api: JobApi, owners: Owners) -> None:
    headers = {**AUTH, "content-type": "text/plain"}
    response = await call(api, "POST", "/v1/owners/acme/jobs", a_job(), headers=headers)
    assert response.status == 415
    assert owners.runtimes == {}
    ok = {**AUTH, "content-type": "application/json; charset=utf-8"}
    assert (await call(api, "POST", "/v1/owners/acme/jobs", a_job(), headers=ok)).status == 201


# -------------------------------------------------------------------- reads


async def test_read_job_head_and_status(api: JobApi, owners: Owners) -> None:
    await call(api, "POST", "/v1/owners/acme/jobs",
               {"jobs": [a_job("low", priority=0), a_job("high", priority=5)]})
    read = await call(api, "GET", "/v1/owners/acme/jobs/high")
    assert read.status == 200
    job = read.body["job"]
    assert (job["job_id"], job["state"], job["priority"], job["payload"]) == (
        "high", "queued", 5, {"to": "a@example.com"})
    assert set(job) >= {"sequence", "enqueued_at", "outcome", "cancellation_id"}
    head = await call(api, "GET", "/v1/owners/acme/queues/emails/head")
    assert head.body["head"]["job_id"] == "high"
    await owners.runtimes["acme"].tick()
    queue = await call(api, "GET", "/v1/owners/acme/queues/emails")
    assert queue.status == 200
    assert queue.body["queue"]["queued"] == 1
    assert queue.body["queue"]["settled"] == 1
    assert queue.body["queue"]["outcomes"]["completed"] == 1
    listing = await call(api, "GET", "/v1/owners/acme/queues")
    assert [item["queue"] for item in listing.body["queues"]] == ["emails"]
    empty = await call(api, "GET", "/v1/owners/acme/queues/nothing/head")
    assert (empty.status, empty.body) == (200, {"queue": "nothing", "head": None})


async def test_unknown_job_is_404(api: JobApi) -> None:
    response = await call(api, "GET", "/v1/owners/acme/jobs/missing")
    assert response.status == 404
    assert response.body["error"] == {"code": "job_not_found", "message": "no job 'missing'",
                                      "field": "job_id"}


async def test_ids_are_percent_decoded_path_segments(api: JobApi, owners: Owners) -> None:
    await call(api, "POST", "/v1/owners/team%2Fone/jobs", a_job("a/b ü"))
    assert owners.runtimes["team/one"].read("a/b ü") is not None
    read = await call(api, "GET", "/v1/owners/team%2Fone/jobs/a%2Fb%20%C3%BC")
    assert read.body["job"]["job_id"] == "a/b ü"
    bad = await call(api, "GET", "/v1/owners/acme/jobs/%FF")
    assert (bad.status, bad.body["error"]["code"]) == (400, "bad_path")


async def test_over_long_ids_in_the_path_are_refused(api: JobApi, owners: Owners) -> None:
    long_job = await call(api, "GET", "/v1/owners/acme/jobs/" + "j" * 257)
    assert (long_job.status, long_job.body["error"]["field"]) == (400, "job_id")
    long_owner = await call(api, "POST", "/v1/owners/" + "o" * 257 + "/jobs", a_job())
    assert (long_owner.status, long_owner.body["error"]["field"]) == (400, "owner")
    assert owners.runtimes == {}


# ---------------------------------------------------------------- mutations


async def test_cancel_statuses(api: JobApi, owners: Owners) -> None:
    await call(api, "POST", "/v1/owners/acme/jobs", a_job())
    path = "/v1/owners/acme/jobs/j1/cancel"
    recorded = await call(api, "POST", path, {"cancellation_id": "c1"})
    assert (recorded.status, recorded.body) == (200, {"job_id": "j1", "status": "recorded"})
    replayed = await call(api, "POST", path, {"cancellation_id": "c1", "only_if_queued": True})
    assert (replayed.status, replayed.body["status"]) == (200, "replayed")
    conflict = await call(api, "POST", path, {"cancellation_id": "c2"})
    assert (conflict.status, conflict.body["status"]) == (409, "conflict")
    missing = await call(api, "POST", "/v1/owners/acme/jobs/nope/cancel", {"cancellation_id": "c"})
    assert (missing.status, missing.body["status"]) == (404, "not_found")
    job = owners.runtimes["acme"].read("j1")
    assert job is not None and job.cancellation_id == "c1"


@pytest.mark.parametrize(("body", "field"), [
    ({}, "cancellation_id"),
    ({"cancellation_id": 5}, "cancellation_id"),
    ({"cancellation_id": ""}, "cancellation_id"),
    ({"cancellation_id": "c", "only_if_queued": "yes"}, "only_if_queued"),
    ({"cancellation_id": "c", "reason": "x"}, "body"),
    (["c"], "body"),
])
async def test_bad_cancel_bodies_change_nothing(api: JobApi, owners: Owners, body: Any,
                                                field: str) -> None:
    await call(api, "POST", "/v1/owners/acme/jobs", a_job())
    response = await call(api, "POST", "/v1/owners/acme/jobs/j1/cancel", body)
    assert (response.status, response.body["error"]["field"]) == (400, field)
    job = owners.runtimes["acme"].read("j1")
    assert job is not None and job.cancellation_id is None


async def test_fail_lane_and_purge(api: JobApi, owners: Owners) -> None:
    await call(api, "POST", "/v1/owners/acme/jobs", {"jobs": [
        a_job("a", lane="bad"), a_job("b", lane="bad", queue="other"), a_job("c", lane="good")]})
    refused = await call(api, "POST", "/v1/owners/acme/lanes/bad/fail", {"reason": "suspended"})
    assert (refused.status, refused.body) == (200, {"lane": "bad", "settled": 2, "more": False})
    job = owners.runtimes["acme"].read("a")
    assert job is not None and (job.outcome, job.failure_reason) == ("failed", "suspended")
    purged = await call(api, "POST", "/v1/owners/acme/queues/emails/purge")
    assert (purged.status, purged.body) == (200, {"queue": "emails", "purged": 1})
    assert owners.runtimes["acme"].read("c") is None
    assert owners.runtimes["acme"].read("a") is not None  # settled jobs stay


@pytest.mark.parametrize(("path", "body", "field"), [
    ("/v1/owners/acme/lanes/bad/fail", {}, "reason"),
    ("/v1/owners/acme/lanes/bad/fail", {"reason": ""}, "reason"),
    ("/v1/owners/acme/lanes/bad/fail", {"reason": "r" * 257}, "reason"),
    ("/v1/owners/acme/lanes/" + "l" * 513 + "/fail", {"reason": "r"}, "lane"),
    ("/v1/owners/acme/queues/emails/purge", {"all": True}, "body"),
])
async def test_bad_fail_lane_and_purge_requests_change_nothing(
        api: JobApi, owners: Owners, path: str, body: Any, field: str) -> None:
    await call(api, "POST", "/v1/owners/acme/jobs", a_job("a", lane="bad"))
    response = await call(api, "POST", path, body)
    assert (response.status, response.body["error"]["field"]) == (400, field)
    job = owners.runtimes["acme"].read("a")
    assert job is not None and job.state == "queued"


# ------------------------------------------------------------------ routing


@pytest.mark.parametrize(("method", "path", "status", "code"), [
    ("GET", "/", 404, "no_route"),
    ("GET", "/v2/owners/acme/jobs", 404, "no_route"),
    # The directory of owners is a route; this API was given none.
    ("GET", "/v1/owners", 404, "scope_not_configured"),
    ("POST", "/v1/owners", 405, "method_not_allowed"),
    ("GET", "/v1/owners/acme/jobs/j1/extra", 404, "no_route"),
    ("GET", "/v1/tenants/acme/jobs", 404, "no_route"),
    ("PUT", "/v1/owners/acme/jobs", 405, "method_not_allowed"),
    ("DELETE", "/v1/owners/acme/jobs/j1", 405, "method_not_allowed"),
    ("POST", "/v1/owners/acme/queues", 405, "method_not_allowed"),
    ("GET", "/v1/shared/queues", 404, "scope_not_configured"),
])
async def test_unknown_routes_and_methods(api: JobApi, method: str, path: str, status: int,
                                          code: str) -> None:
    response = await call(api, method, path)
    assert (response.status, response.body["error"]["code"]) == (status, code)


@pytest.mark.parametrize(("method", "path", "allowed"), [
    ("get", "/v1/owners/acme/jobs/j1", "GET"),
    ("Post", "/v1/owners/acme/jobs", "GET, POST"),
    ("get", "/v1/health", "GET"),
])
async def test_method_names_are_case_sensitive(api: JobApi, owners: Owners, method: str,
                                               path: str, allowed: str) -> None:
    """RFC 9110: "get" is another method than GET, so it is not answered as GET."""
    response = await call(api, method, path, {"job_id": "a", "queue": "q"})
    assert (response.status, response.body["error"]["code"]) == (405, "method_not_allowed")
    assert response.headers["allow"] == allowed
    assert "acme" not in owners.runtimes or owners.runtimes["acme"].read("a") is None


async def test_unexpected_errors_propagate_to_the_host(owners: Owners) -> None:
    class Broken(RuntimeService):
        async def status(self) -> Any:
            raise RuntimeError("disk on fire")

    api = JobApi(token=TOKEN, owners=lambda key: Broken(owners(key).runtime))
    with pytest.raises(RuntimeError, match="disk on fire"):
        await call(api, "GET", "/v1/owners/acme/queues")


async def test_async_owner_resolver_and_shared_scope(owners: Owners) -> None:
    async def resolve(key: str) -> RuntimeService:
        return owners(key)

    shared = owners("the-shared-one")
    api = JobApi(token=TOKEN, owners=resolve, shared=shared)
    assert (await call(api, "POST", "/v1/owners/acme/jobs", a_job())).status == 201
    assert (await call(api, "POST", "/v1/shared/jobs", a_job("s"))).status == 201
    assert shared.runtime.read("s") is not None
    assert owners.runtimes["acme"].read("s") is None


def test_response_encoding() -> None:
    response = ApiResponse(200, {"text": "ü"})
    assert response.encoded() == '{"text":"ü"}'.encode()
    assert response.all_headers()["content-type"] == "application/json; charset=utf-8"


def test_plain_data_turns_js_values_into_python() -> None:
    from tests.support.fakes.pyodide_ffi import fake_pyodide, jsnull, to_js
    from tickwork.api import plain_data

    with fake_pyodide():
        job = to_js({"job_id": "j", "recovery": jsnull, "tags": ["a", jsnull]})
        assert job.to_py()["recovery"] is jsnull  # what to_py alone leaves behind
        converted = plain_data(job)
        assert plain_data(jsnull) is None
    assert converted == {"job_id": "j", "recovery": None, "tags": ["a", None]}


@pytest.mark.parametrize("path", [
    "/v1/owners/" + "o" * 300 + "/jobs",  # a bad owner id
    "/v1/owners/acme/nothing-here",        # an unknown route
    "/v1/owners/acme/jobs/%FF",            # a bad path
])
async def test_the_token_is_checked_before_the_route(api: JobApi, path: str) -> None:
    # Without the token, nothing about the API's routes or their checks leaks.
    response = await call(api, "GET", path, headers={})
    assert (response.status, response.body["error"]["code"]) == (401, "unauthorized")


@pytest.mark.parametrize("path", ["/v1/owners/acme/jobs/..", "/v1/owners/acme/jobs/%2e%2e",
                                  "/v1/owners/./jobs", "/v1/owners/acme/queues/./head"])
async def test_dot_segments_are_refused_on_every_host_alike(api: JobApi, path: str) -> None:
    response = await call(api, "GET", path)
    assert (response.status, response.body["error"]["code"]) == (400, "bad_path")


async def test_dot_ids_cannot_be_enqueued(api: JobApi, owners: Owners) -> None:
    response = await call(api, "POST", "/v1/owners/acme/jobs", a_job(".."))
    assert (response.status, response.body["error"]["field"]) == (400, "job_id")
    assert owners.runtimes == {}


async def test_a_conflict_inside_one_request_is_refused_before_any_owner_is_opened(
        api: JobApi, owners: Owners) -> None:
    body = {"jobs": [a_job("a"), a_job("a", priority=9)]}
    response = await call(api, "POST", "/v1/owners/acme/jobs", body)
    assert response.status == 409
    assert response.body["error"]["code"] == "ingest_conflict"
    assert "twice in this request" in response.body["error"]["message"]
    assert owners.runtimes == {}
    same_twice = await call(api, "POST", "/v1/owners/acme/jobs", {"jobs": [a_job("a"), a_job("a")]})
    assert same_twice.body == {"jobs": [{"job_id": "a", "status": "queued"},
                                        {"job_id": "a", "status": "duplicate"}]}


async def test_owner_and_shared_scopes_refuse_the_same_bodies(owners: Owners) -> None:
    api = JobApi(token=TOKEN, owners=owners, shared=owners("shared"))
    for body in ({"job_id": "a", "queue": "q", "priority": 1.0},
                 {"jobs": [a_job("a"), a_job("b", payload={"x": float("nan")})]},
                 {"job_id": "a", "queue": "q", "lane": ""}):
        answers = [await call(api, "POST", f"/v1/{scope}/jobs", body)
                   for scope in ("owners/acme", "shared")]
        assert answers[0].status == answers[1].status == 400
        assert answers[0].body == answers[1].body
    assert list(owners.runtimes) == ["shared"] and owners.total_jobs() == 0


def test_refuse_early_answers_from_the_head_alone(api: JobApi, owners: Owners) -> None:
    assert api.refuse_early("POST", "/v1/owners/acme/jobs", AUTH, 10) is None
    assert api.refuse_early("GET", "/v1/health", {}, None) is None
    cases = [
        (("POST", "/v1/owners/acme/jobs", {}, 10), 401),
        (("POST", "/v1/owners/acme/jobs", AUTH, api.max_body_bytes + 1), 413),
        (("PUT", "/v1/owners/acme/jobs", AUTH, None), 405),
        (("GET", "/v1/owners/acme/jobs/..", AUTH, None), 400),
        (("GET", "/nothing", AUTH, None), 404),
    ]
    for args, status in cases:
        refused = api.refuse_early(*args)
        assert refused is not None and refused.status == status, (args, refused)
    assert owners.runtimes == {}


# ------------------------------------------------------------ jobs by id


async def test_jobs_by_id_page_through_a_prefix_from_the_query(api: JobApi) -> None:
    await call(api, "POST", "/v1/owners/acme/jobs", {"jobs": [
        a_job(job_id) for job_id in ("ord/2", "ord/10", "ord/1", "ore", "ord")]})
    first = await api.handle(ApiRequest("GET", "/v1/owners/acme/jobs-by-id", AUTH,
                                        query="id_prefix=ord%2F&limit=2"))
    assert first.status == 200
    assert [job["job_id"] for job in first.body["jobs"]] == ["ord/1", "ord/10"]
    assert first.body["cursor"] == "ord/10"
    second = await api.handle(ApiRequest("GET", "/v1/owners/acme/jobs-by-id", AUTH,
                                         query="id_prefix=ord%2F&limit=2&cursor=ord%2F10"))
    assert [job["job_id"] for job in second.body["jobs"]] == ["ord/2"]
    assert second.body["cursor"] is None


@pytest.mark.parametrize(("query", "field"), [
    ("", "id_prefix"), ("limit=5", "id_prefix"), ("id_prefix=", "id_prefix"),
    ("id_prefix=a&limit=0", "limit"), ("id_prefix=a&cursor=b", "cursor"),
    ("id_prefix=a&queue=q", "query"), ("id_prefix=a&id_prefix=b", "id_prefix"),
])
async def test_bad_jobs_by_id_queries_are_refused_by_name(api: JobApi, owners: Owners,
                                                          query: str, field: str) -> None:
    answer = await api.handle(ApiRequest("GET", "/v1/owners/acme/jobs-by-id", AUTH,
                                         query=query))
    assert answer.status == 400, answer.body
    assert answer.body["error"]["field"] == field


# ------------------------------------------------------ dead letters, redrive


async def test_dead_letters_page_through_the_query_and_redrive(
        api: JobApi, owners: Owners) -> None:
    await call(api, "POST", "/v1/owners/acme/jobs", {"jobs": [
        a_job("a", lane="bad"), a_job("b", lane="bad"), a_job("c", lane="good")]})
    await call(api, "POST", "/v1/owners/acme/lanes/bad/fail", {"reason": "suspended"})
    first = await api.handle(ApiRequest("GET", "/v1/owners/acme/queues/emails/dead-letters",
                                        AUTH, query="limit=1"))
    assert first.status == 200
    assert [job["job_id"] for job in first.body["jobs"]] == ["b"]
    assert first.body["jobs"][0]["history"] == [] and first.body["jobs"][0]["attempt"] == 1
    cursor = first.body["cursor"]
    second = await api.handle(ApiRequest("GET", "/v1/owners/acme/queues/emails/dead-letters",
                                         AUTH, query=f"limit=1&cursor={cursor}"))
    assert [job["job_id"] for job in second.body["jobs"]] == ["a"]

    redriven = await call(api, "POST", "/v1/owners/acme/jobs/a/redrive", {"redrive_id": "r1"})
    assert (redriven.status, redriven.body) == (
        200, {"job_id": "a", "status": "redriven", "reason": None})
    replayed = await call(api, "POST", "/v1/owners/acme/jobs/a/redrive", {"redrive_id": "r1"})
    assert (replayed.status, replayed.body["status"]) == (200, "replayed")
    refused = await call(api, "POST", "/v1/owners/acme/jobs/c/redrive", {"redrive_id": "r1"})
    assert (refused.status, refused.body) == (
        409, {"job_id": "c", "status": "refused", "reason": "not_settled"})
    missing = await call(api, "POST", "/v1/owners/acme/jobs/zz/redrive", {"redrive_id": "r1"})
    assert (missing.status, missing.body["status"]) == (404, "not_found")


@pytest.mark.parametrize(("query", "field"), [
    ("limit=0", "limit"), ("limit=101", "limit"), ("limit=ten", "limit"), ("limit=", "limit"),
    ("limit=1&limit=2", "limit"), ("page=2", "query"), ("cursor=nope", "cursor"),
    ("limit", "query"),
])
async def test_bad_dead_letter_queries_are_refused_by_name(
        api: JobApi, owners: Owners, query: str, field: str) -> None:
    answer = await api.handle(ApiRequest("GET", "/v1/owners/acme/queues/emails/dead-letters",
                                         AUTH, query=query))
    assert answer.status == 400
    assert answer.body["error"]["field"] == field


@pytest.mark.parametrize("body", [{}, {"redrive_id": ""}, {"redrive_id": 3},
                                  {"redrive_id": "r", "extra": 1}])
async def test_bad_redrive_bodies_change_nothing(api: JobApi, owners: Owners,
                                                 body: Any) -> None:
    await call(api, "POST", "/v1/owners/acme/jobs", a_job("a", lane="bad"))
    await call(api, "POST", "/v1/owners/acme/lanes/bad/fail", {"reason": "suspended"})
    answer = await call(api, "POST", "/v1/owners/acme/jobs/a/redrive", body)
    assert answer.status == 400
    job = owners.runtimes["acme"].read("a")
    assert job is not None and job.state == "settled"


# ---------------------------------------------------------------- schedules


def a_schedule(**fields: Any) -> dict[str, Any]:
    return {"name": "nightly", "cron": "0 2 * * *",
            "job": {"queue": "reports", "payload": {"report": "sales"}}, **fields}


async def test_schedules_are_created_listed_and_acted_on(api: JobApi, owners: Owners) -> None:
    created = await call(api, "POST", "/v1/owners/acme/schedules", a_schedule())
    assert (created.status, created.body) == (201, {"name": "nightly", "status": "created"})
    again = await call(api, "POST", "/v1/owners/acme/schedules", a_schedule())
    assert (again.status, again.body["status"]) == (200, "unchanged")
    listed = await call(api, "GET", "/v1/owners/acme/schedules")
    [entry] = listed.body["schedules"]
    assert (entry["name"], entry["cron"], entry["every_ms"], entry["catch_up"]) == (
        "nightly", "0 2 * * *", None, 1)
    assert entry["job"] == {"queue": "reports", "lane": "reports", "priority": 0,
                            "payload": {"report": "sales"}, "recovery": None, "retry": None}
    for action, changed in (("pause", True), ("pause", False), ("resume", True),
                            ("delete", True), ("delete", False)):
        answer = await call(api, "POST", f"/v1/owners/acme/schedules/nightly/{action}")
        assert (answer.status, answer.body) == (200, {"name": "nightly", "changed": changed})
    wrong = await call(api, "PUT", "/v1/owners/acme/schedules", a_schedule())
    assert (wrong.status, wrong.headers["allow"]) == (405, "GET, POST")


@pytest.mark.parametrize(("body", "field"), [
    (a_schedule(cron="0 2 * *"), "cron"),
    (a_schedule(every_ms=60_000), "cron"),
    (a_schedule(catch_up=0), "catch_up"),
    (a_schedule(job={"lane": "x"}), "job.queue"),
    (a_schedule(job={"queue": "q", "job_id": "x"}), "job"),
    (a_schedule(job={"queue": "q", "retry": {"attempts": 0}}), "job.retry.attempts"),
    (a_schedule(job={"queue": "q", "recovery": {"max": 1}}), "job.recovery"),
    (a_schedule(extra=1), "body"),
    ({"cron": "0 2 * * *", "job": {"queue": "q"}}, "name"),
])
async def test_bad_schedules_are_refused_by_name_and_store_nothing(
        api: JobApi, owners: Owners, body: Any, field: str) -> None:
    answer = await call(api, "POST", "/v1/owners/acme/schedules", body)
    assert answer.status == 400
    assert answer.body["error"]["field"] == field
    assert "acme" not in owners.runtimes or owners.runtimes["acme"].schedules() == []


async def test_a_raising_job_reads_back_with_its_error_and_the_client_decodes_it(
        api: JobApi, owners: Owners) -> None:
    from tickwork import Retry
    from tickwork.api.operations import BY_NAME
    from tickwork.client import HttpAnswer
    from tickwork.client.core import result_of

    retried = {"job_id": "r", "queue": "q", "payload": {"do": "fail_until", "raise": True},
               "retry": {"attempts": 2, "base_delay_ms": 0}}
    await call(api, "POST", "/v1/owners/acme/jobs", {"jobs": [retried]})
    runtime = owners.runtimes["acme"]
    while (await runtime.tick()).status != "idle":
        pass
    read = await call(api, "GET", "/v1/owners/acme/jobs/r")
    body = read.body["job"]
    error = body["error"]
    assert set(error) == {"type", "message", "traceback"}
    assert (error["type"], error["message"]) == ("RuntimeError", "attempt 2 exploded")
    assert error["traceback"].endswith("RuntimeError: attempt 2 exploded\n")
    assert [entry["error"] for entry in body["history"]] == ["RuntimeError: attempt 1 exploded"]
    # The client turns that body back into the very record the runtime reads.
    decoded = result_of(BY_NAME["read"], HttpAnswer(200, {}, json.dumps(read.body).encode()))
    assert decoded == runtime.read("r")
    assert decoded.retry == Retry(2, base_delay_ms=0)
    # A job that raised nothing carries null, and a body from an older server
    # (no "error" anywhere) decodes as no error.
    await call(api, "POST", "/v1/owners/acme/jobs", {"jobs": [a_job("fine")]})
    fine = await call(api, "GET", "/v1/owners/acme/jobs/fine")
    assert fine.body["job"]["error"] is None
    old = dict(body, error=None, history=[
        {key: value for key, value in entry.items() if key != "error"}
        for entry in body["history"]])
    del old["error"]
    decoded = result_of(BY_NAME["read"], HttpAnswer(200, {}, json.dumps({"job": old}).encode()))
    assert decoded.error is None and decoded.history[0].error is None
