"""Refused requests through ``Default.fetch`` change nothing (read back from storage),
and unexpected errors answer 500 without naming internals."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.worker import body_state, job, request, send

pytestmark = pytest.mark.usefixtures("js_module")

SCOPES = ("owners/tenant-1", "shared")


async def nothing_stored(env: Any, query: Any) -> bool:
    shared = await query("SELECT count(*) FROM tickwork_jobs")
    namespace = env.JOB_OWNERS
    owners = [namespace.storage(name).debug_query("SELECT count(*) FROM tickwork_jobs")[0][0]
              for name in namespace.names()]
    return shared == [(0,)] and not any(owners)


MUTATIONS = [
    ("POST", "jobs", job("a")),
    ("POST", "jobs/a/cancel", {"cancellation_id": "k"}),
    ("POST", "lanes/l/fail", {"reason": "r"}),
    ("POST", "queues/q/purge", None),
]


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("token", [None, "wrong-token", ""], ids=["missing", "wrong", "empty"])
async def test_no_or_wrong_token_is_401_and_changes_nothing(
        worker: Any, env: Any, shape: str, scope: str, token: str | None, query: Any) -> None:
    for method, tail, body in [*MUTATIONS, ("GET", "jobs/a", None), ("GET", "queues", None)]:
        status, answer = await send(worker, shape, method, f"/v1/{scope}/{tail}", body,
                                    token=token)
        assert status == 401, (method, tail, answer)
        assert answer["error"]["code"] == "unauthorized"
    assert await nothing_stored(env, query)


async def test_a_wrong_auth_scheme_is_401(worker: Any, shape: str) -> None:
    status, _ = await send(worker, shape, "GET", "/v1/shared/queues", token=None,
                           headers={"authorization": "Basic czNjcmV0LXRva2Vu"})
    assert status == 401


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize(
    ("path", "body", "raw", "status", "code"),
    [
        ("jobs", None, b"{not json", 400, "malformed_json"),
        ("jobs", None, b"\xff\xfe", 400, "malformed_json"),
        ("jobs", None, b"NaN", 400, "malformed_json"),
        ("jobs", [1, 2], None, 400, "invalid_job"),
        ("jobs", {"job_id": 5, "queue": "q"}, None, 400, "invalid_job"),
        ("jobs", {"job_id": "a", "queue": "q", "priority": "high"}, None, 400, "invalid_job"),
        ("jobs", {"job_id": "a", "queue": "q", "priority": 2**53}, None, 400, "invalid_job"),
        ("jobs", {"job_id": "a", "queue": "q", "surprise": 1}, None, 400, "invalid_job"),
        ("jobs", {"job_id": "x" * 257, "queue": "q"}, None, 400, "invalid_job"),
        ("jobs", {"jobs": [job(str(i)) for i in range(101)]}, None, 400, "invalid_argument"),
        ("jobs", {"jobs": [job("ok"), job("bad", lane="")]}, None, 400, "invalid_job"),
        ("jobs", {"jobs": [job("a"), job("a", priority=1)]}, None, 409, "ingest_conflict"),
        ("jobs/a/cancel", {"cancellation_id": 7}, None, 400, "invalid_argument"),
        ("jobs/a/cancel", {"cancellation_id": "k", "only_if_queued": "yes"}, None, 400,
         "invalid_argument"),
        ("jobs/" + "x" * 257 + "/cancel", {"cancellation_id": "k"}, None, 400,
         "invalid_argument"),
        ("lanes/l/fail", {"reason": ""}, None, 400, "invalid_argument"),
        ("lanes/l/fail", {}, None, 400, "invalid_argument"),
        ("queues/q/purge", {"everything": True}, None, 400, "invalid_argument"),
        ("nowhere", {}, None, 404, "no_route"),
        ("jobs/a/b/c", {}, None, 404, "no_route"),
    ],
)
async def test_bad_requests_are_4xx_and_change_nothing(
        worker: Any, env: Any, shape: str, scope: str, path: str, body: Any, raw: bytes | None,
        status: int, code: str, query: Any) -> None:
    got, answer = await send(worker, shape, "POST", f"/v1/{scope}/{path}", body, raw=raw)
    assert (got, answer["error"]["code"]) == (status, code), answer
    assert await nothing_stored(env, query)


async def test_other_refusals(worker: Any, env: Any, shape: str, query: Any) -> None:
    cases = [
        ("PUT", "/v1/shared/jobs", None, {}, 405, "method_not_allowed"),
        ("PUT", "/v1/shared/jobs", job("a"), {}, 405, "method_not_allowed"),
        ("POST", "/v1/shared/jobs", job("a"), {"content-type": "text/plain"}, 415,
         "unsupported_media_type"),
        ("GET", "/elsewhere", None, {}, 404, "no_route"),
        ("GET", "/v1/owners/" + "o" * 257 + "/queues", None, {}, 400, "invalid_argument"),
        ("GET", "/v1/shared/jobs/%ff", None, {}, 400, "bad_path"),
        ("GET", "/v1/" + "x" * 10_001, None, {}, 414, "path_too_long"),
    ]
    for method, path, body, headers, status, code in cases:
        got, answer = await send(worker, shape, method, path, body, headers=headers)
        assert (got, answer["error"]["code"]) == (status, code), (method, path, answer)
    assert await nothing_stored(env, query)


@pytest.mark.parametrize("scope", SCOPES)
async def test_a_declared_oversized_body_is_413_and_only_drained(
        worker: Any, env: Any, shape: str, scope: str, query: Any) -> None:
    from tickwork.api import MAX_BODY_BYTES

    raw = json.dumps(job("a")).encode()
    req = request(shape, "POST", f"/v1/{scope}/jobs", raw=raw,
                  headers={"content-length": str(MAX_BODY_BYTES + 1)})
    response = await worker.fetch(req)
    answer = json.loads(response.body)
    assert (response.status, answer["error"]["code"]) == (413, "body_too_large")
    assert body_state(req) == "drained"  # dropped chunk by chunk, never parsed
    assert await nothing_stored(env, query)


@pytest.mark.parametrize("scope", SCOPES)
@pytest.mark.parametrize("declared", [True, False], ids=["declared", "undeclared"])
@pytest.mark.parametrize("token", [None, "wrong-token"], ids=["missing", "wrong"])
async def test_a_request_without_the_token_is_401_and_its_body_is_only_drained(
        worker: Any, env: Any, shape: str, scope: str, declared: bool, token: str | None,
        query: Any) -> None:
    """The token is checked first, from the head: a big body (declared over the
    limit or not) is never parsed, only drained, and the answer is 401, not 413."""
    from tickwork.api import MAX_BODY_BYTES

    big = json.dumps({"job_id": "a", "queue": "q", "payload": "x" * (2 * MAX_BODY_BYTES)})
    headers = {"content-length": str(len(big))} if declared else {}
    req = request(shape, "POST", f"/v1/{scope}/jobs", raw=big.encode(), token=token,
                  headers=headers)
    response = await worker.fetch(req)
    answer = json.loads(response.body)
    assert (response.status, answer["error"]["code"]) == (401, "unauthorized")
    assert body_state(req) == "drained"  # dropped chunk by chunk, never parsed
    assert await nothing_stored(env, query)


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "undeclared"])
async def test_a_refused_body_beyond_the_drain_limit_is_cancelled(
        worker: Any, env: Any, shape: str, declared: bool, query: Any) -> None:
    from tickwork.cloudflare.app import REFUSED_BODY_DRAIN_BYTES

    big = b"x" * (REFUSED_BODY_DRAIN_BYTES + 1)
    headers = {"content-length": str(len(big))} if declared else {}
    req = request(shape, "POST", "/v1/shared/jobs", raw=big, token="wrong", headers=headers)
    response = await worker.fetch(req)
    assert response.status == 401
    assert body_state(req) == "cancelled"
    # Declared too long: cancelled unread. Undeclared: read no further than the limit.
    expected_read = 0 if declared else REFUSED_BODY_DRAIN_BYTES
    assert expected_read <= req.body.bytes_read <= expected_read + 65_536
    assert await nothing_stored(env, query)


async def test_an_accepted_body_is_read_whole(worker: Any, shape: str) -> None:
    req = request(shape, "POST", "/v1/shared/jobs", job("a"))
    assert (await worker.fetch(req)).status == 201
    assert body_state(req) == "drained" and req.body.bytes_read == len(json.dumps(job("a")))


@pytest.mark.parametrize(
    ("method", "path", "headers", "status", "code"),
    [
        ("POST", "/v1/shared/nowhere", {}, 404, "no_route"),
        ("PUT", "/v1/shared/jobs", {}, 405, "method_not_allowed"),
        ("POST", "/elsewhere", {}, 404, "no_route"),
        # the token comes before the content-length checks
        ("POST", "/v1/shared/jobs", {"content-length": "12; drop table",
                                     "authorization": "Bearer nope"}, 401, "unauthorized"),
    ],
)
async def test_refusals_from_the_head_drain_the_body_unparsed(
        worker: Any, shape: str, method: str, path: str, headers: dict[str, str],
        status: int, code: str) -> None:
    req = request(shape, method, path, job("a"), headers=headers)
    response = await worker.fetch(req)
    answer = json.loads(response.body)
    assert (response.status, answer["error"]["code"]) == (status, code), answer
    assert body_state(req) == "drained"  # dropped chunk by chunk, never parsed


@pytest.mark.parametrize("scope", SCOPES)
async def test_an_undeclared_oversized_body_is_413(
        worker: Any, env: Any, shape: str, scope: str, query: Any) -> None:
    from tickwork.api import MAX_BODY_BYTES

    big = {"job_id": "a", "queue": "q", "payload": "x" * MAX_BODY_BYTES}
    status, answer = await send(worker, shape, "POST", f"/v1/{scope}/jobs", big)
    assert (status, answer["error"]["code"]) == (413, "body_too_large")
    assert await nothing_stored(env, query)


async def test_a_bad_content_length_is_400(worker: Any, env: Any, shape: str,
                                           query: Any) -> None:
    for declared in ("12; drop table", "-5", "\u00b2", ""):
        req = request(shape, "POST", "/v1/shared/jobs", job("a"),
                      headers={"content-length": declared})
        response = await worker.fetch(req)
        answer = json.loads(response.body)
        assert (response.status, answer["error"]["code"]) == (400, "bad_content_length"), declared
        assert body_state(req) == "drained"  # dropped chunk by chunk, never parsed
    assert await nothing_stored(env, query)


class Exploding:
    """A D1 binding whose every call fails with an error full of internals."""

    def prepare(self, sql: str) -> Any:
        raise RuntimeError("D1_ERROR: secret internals: /srv/db.sqlite password=hunter2")

    async def batch(self, statements: Any) -> Any:
        raise RuntimeError("D1_ERROR: secret internals: /srv/db.sqlite password=hunter2")


async def test_internal_errors_are_500_without_internals(
        workers_module: Any, shape: str, db: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import types

    from worker.entry import Default

    broken = Default(types.SimpleNamespace(),
                     types.SimpleNamespace(DB=Exploding(), TICKWORK_TOKEN="s3cret-token"))
    for method, path, body in [("POST", "/v1/shared/jobs", job("a")),
                               ("GET", "/v1/shared/jobs/a", None),
                               ("GET", "/v1/shared/queues", None)]:
        response = await broken.fetch(request(shape, method, path, body))
        assert response.status == 500
        assert json.loads(response.body) == {
            "error": {"code": "internal_error", "message": "internal error"}}
        assert b"secret" not in response.body and b"hunter2" not in response.body
        assert response.headers.get("content-type") == "application/json; charset=utf-8"
    # ...while the log has the whole story.
    assert "secret internals" in capsys.readouterr().err


@pytest.mark.parametrize(("sent", "seen"), [
    ("/v1/owners/%2E%2E/queues", "/v1/queues"),
    ("/v1/shared/jobs/%2e%2E/x", "/v1/shared/x"),
    ("/v1/owners/acme/./queues", "/v1/owners/acme/queues"),
])
async def test_the_runtime_resolves_dot_segments_before_the_worker_sees_the_path(
        worker: Any, shape: str, sent: str, seen: str) -> None:
    # Measured in real workerd: a %2E%2E segment is resolved by the URL parser,
    # so the Worker never sees it; the route it reaches is the resolved one.
    req = request(shape, "GET", sent)
    assert req.url == "https://tickwork.example" + seen
    assert await send(worker, shape, "GET", sent) == await send(worker, shape, "GET", seen)


def test_the_api_learns_the_clients_address_from_cf_connecting_ip(workers_module: Any) -> None:
    """The dashboard's login throttle counts wrong tokens per address: on
    Cloudflare the client's is the CF-Connecting-IP header."""
    import asyncio

    from tests.support.worker import request
    from tickwork.api import ApiRequest, JobApi
    from tickwork.cloudflare.app import read_request

    api = JobApi(token="t")
    adapted = asyncio.run(read_request(request("d1-builtin", "GET", "/v1/health",
                                               headers={"cf-connecting-ip": "203.0.113.5"}),
                                       api))
    assert isinstance(adapted, ApiRequest) and adapted.client == "203.0.113.5"
