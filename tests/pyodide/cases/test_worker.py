"""The Worker's fetch and scheduled handlers under real Pyodide: real JS
Requests in, JS Responses out, the owners behind RPC and the shared queues on
Miniflare's real D1 (runs inside Pyodide)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

import tickwork

EDGE = 2**53 - 1
SCOPES = ("owners/tenant", "shared")


def job(job_id: str, queue: str = "q", **fields: Any) -> dict[str, Any]:
    return {"job_id": job_id, "queue": queue, **fields}


async def test_health_is_open(deployment: Any) -> None:
    status, text = await deployment.send("GET", "/v1/health", token=None)
    assert (status, json.loads(text)) == (200, {
        "ok": True, "api": "v1", "version": tickwork.__version__})


@pytest.mark.parametrize("scope", SCOPES)
async def test_jobs_at_the_integer_bounds_are_served_on_every_route(
    deployment: Any, scope: str,
) -> None:
    jobs = [job("high", "q1", priority=EDGE, recovery={"max_recoveries": EDGE}),
            job("low", "q2", priority=-EDGE)]
    status, text = await deployment.send("POST", f"/v1/{scope}/jobs", {"jobs": jobs})
    assert status == 200, text
    assert [item["status"] for item in json.loads(text)["jobs"]] == ["queued", "queued"]
    status, text = await deployment.send("GET", f"/v1/{scope}/jobs/high")
    assert status == 200, text
    record = json.loads(text)["job"]
    assert (record["priority"], record["recovery"]) == (EDGE, {"max_recoveries": EDGE})
    status, text = await deployment.send("GET", f"/v1/{scope}/queues/q2/head")
    assert status == 200 and json.loads(text)["head"]["priority"] == -EDGE
    status, text = await deployment.send("GET", f"/v1/{scope}/queues")
    assert status == 200 and [s["queue"] for s in json.loads(text)["queues"]] == ["q1", "q2"]


async def test_a_payload_reads_back_byte_for_byte_from_either_scope(deployment: Any) -> None:
    from tickwork.model.jobs import canonical_json

    payload = {"b": [1.0, 2.5, -0.0], "a": {"f": 1.0, "big": EDGE}, "s": "é\u2028"}
    texts = []
    for scope in SCOPES:
        status, _ = await deployment.send("POST", f"/v1/{scope}/jobs", job("p", payload=payload))
        assert status == 201
        status, text = await deployment.send("GET", f"/v1/{scope}/jobs/p")
        assert status == 200
        texts.append(text)
        assert canonical_json(payload) in text  # the stored canonical text, verbatim
        assert json.loads(text)["job"]["payload"] == payload
    owner_payload, shared_payload = (json.loads(text)["job"]["payload"] for text in texts)
    assert type(owner_payload["a"]["f"]) is float and type(shared_payload["a"]["f"]) is float


async def test_a_cancelled_queued_owner_job_settles_cancelled(deployment: Any) -> None:
    await deployment.send("POST", "/v1/owners/tenant/jobs", {"jobs": [job("a"), job("b")]})
    status, text = await deployment.send("POST", "/v1/owners/tenant/jobs/b/cancel",
                                         {"cancellation_id": "c1"})
    assert (status, json.loads(text)["status"]) == (200, "recorded"), text
    await deployment.alarm()
    status, text = await deployment.send("GET", "/v1/owners/tenant/jobs/b")
    record = json.loads(text)["job"]
    assert (record["state"], record["outcome"]) == ("settled", "cancelled")


@pytest.mark.parametrize(("method", "path", "headers", "token", "status"), [
    ("POST", "/v1/shared/jobs", {}, "wrong", 401),
    ("POST", "/v1/shared/nowhere", {}, "tier-token", 404),
    ("PUT", "/v1/shared/jobs", {}, "tier-token", 405),
])
async def test_a_request_refused_from_its_head_has_its_body_drained(
    deployment: Any, method: str, path: str, headers: dict[str, str], token: str,
    status: int,
) -> None:
    body = json.dumps(job("a", payload="x" * 200_000)).encode()
    request = deployment.request(method, path, body=body,
                                 headers={"authorization": f"Bearer {token}", **headers})
    response = await deployment.fetch(request)
    assert response.status == status
    # Drained: read to its end (so the runtime can reuse the connection), never parsed.
    assert request.bodyUsed
    assert request.body.locked


async def test_a_body_left_unread_by_an_internal_error_is_drained(deployment: Any) -> None:
    """Measured in wrangler dev: after a POST answered 500 before its body was
    read, the next request on the connection hung for over a minute."""
    from tickwork.cloudflare import app

    original = app.build_api

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the API could not be built")

    app.build_api = failing
    try:
        request = deployment.request("POST", "/v1/shared/jobs", body=b"x" * 100_000,
                                     headers={"authorization": "Bearer tier-token"})
        response = await deployment.fetch(request)
    finally:
        app.build_api = original
    assert response.status == 500
    assert json.loads(await response.text())["error"]["code"] == "internal_error"
    assert request.bodyUsed and request.body.locked


async def test_the_url_parser_resolves_dot_segments_before_the_worker(deployment: Any) -> None:
    request = deployment.request("GET", "/v1/owners/%2E%2E/queues")
    assert request.url == "https://tickwork.example/v1/queues"
    status, text = await deployment.send("GET", "/v1/owners/%2E%2E/queues")
    assert (status, json.loads(text)["error"]["code"]) == (404, "no_route")


async def test_scheduled_drains_the_shared_queues_once_per_firing(
    deployment: Any, capsys: Any,
) -> None:
    for minute, name in enumerate(("first", "second")):
        assert (await deployment.send("POST", "/v1/shared/jobs", job(name)))[0] == 201
        await deployment.scheduled(1_796_000_000_000 + minute * 60_000)
    for name in ("first", "second"):
        status, text = await deployment.send("GET", f"/v1/shared/jobs/{name}")
        assert status == 200, text
        record = json.loads(text)["job"]
        # The deployment's own registry runs shared jobs: queue "q" has no executor.
        assert (record["state"], record["outcome"], record["failure_reason"]) == (
            "settled", "failed", "no_executor")
    logged = capsys.readouterr()
    assert logged.out.count("1 job(s) settled") == 2, logged
    assert "cron" not in logged.err  # informational lines are not errors


async def test_an_accepted_shared_job_starts_in_the_requests_wait_until(
    deployment: Any, capsys: Any,
) -> None:
    """The drain after a write runs in ctx.waitUntil (a PyProxy of an
    asyncio task, awaited by JS as a thenable) within the fetch event, with
    no cron firing: its delayed job is waited for inside the drain's budget
    (the timer belongs to the same event)."""
    deployment.runtime.bind("TICKWORK_WRITE_DRAIN_MAX_TICKS", "10")
    jobs = [job("now"), job("soon", queue="o", delay_ms=200)]
    status, text = await deployment.send("POST", "/v1/shared/jobs", {"jobs": jobs})
    assert status == 200, text
    for name in ("now", "soon"):
        status, text = await deployment.send("GET", f"/v1/shared/jobs/{name}")
        assert status == 200, text
        record = json.loads(text)["job"]
        assert (record["state"], record["attempt"]) == ("settled", 1), record
    logged = capsys.readouterr()
    assert "drain after a shared write failed" not in logged.err, logged


async def test_the_pump_is_armed_for_a_delayed_job_and_its_alarm_starts_it(
    deployment: Any,
) -> None:
    """The SharedPump behind real RPC and DO storage: the drain after the
    write arms it for the job's due time (an epoch-ms int crossing to
    setAlarm as a JS Number), and its alarm, delivered then, starts the job."""
    from durable_objects.pump import SharedPump

    pumps = deployment.runtime.durable_objects(SharedPump)
    try:
        deployment.runtime.bind("TICKWORK_PUMP", pumps.binding)
        deployment.runtime.bind("TICKWORK_WRITE_DRAIN_MAX_TICKS", "10")
        # One claim and no waiting inside: the job is the pump's (a claim
        # issued inside a longer budget may reach D1 after the job is due).
        deployment.runtime.bind("TICKWORK_WRITE_DRAIN_BUDGET_MS", "1")
        deployment.runtime.bind("TICKWORK_WRITE_DRAIN_CONCURRENCY", "1")
        status, text = await deployment.send("POST", "/v1/shared/jobs",
                                             job("later", delay_ms=1_000))
        assert status == 201, text
        status, text = await deployment.send("GET", "/v1/shared/jobs/later")
        record = json.loads(text)["job"]
        assert record["state"] == "queued", record
        armed = await pumps.storage("DB").getAlarm()
        assert isinstance(armed, int) and armed == record["due_at"], (armed, record)
        await asyncio.sleep(max(0.0, armed / 1000 - time.time()) + 0.05)
        await pumps.alarm("DB")
        status, text = await deployment.send("GET", "/v1/shared/jobs/later")
        assert json.loads(text)["job"]["state"] == "settled", text
    finally:
        pumps.close()


async def test_a_shared_write_sends_one_queue_message_and_a_batch_drains(
    deployment: Any,
) -> None:
    """With TICKWORK_QUEUE bound, the write's waitUntil sends one message
    that survives Queues' structured clone (a PyProxy or a Map would not),
    and the Worker's queue handler drains for a delivered batch and acks it."""
    import tickwork_tier  # type: ignore[import-not-found]  # registered by runner.mjs

    queue = tickwork_tier.bindings.WorkerQueue.new()
    deployment.runtime.bind("TICKWORK_QUEUE", queue)
    status, text = await deployment.send("POST", "/v1/shared/jobs",
                                         {"jobs": [job("q-1"), job("q-2", queue="o")]})
    assert status == 200, text
    sent = [message.to_py() for message in queue.sent]
    assert sent == [{"tickwork": "drain"}], sent
    batch = tickwork_tier.bindings.MessageBatch.new("tickwork-drains", queue.sent)
    await deployment.runtime.queue(deployment.worker(), batch)
    assert list(batch.calls) == ["ackAll"]
    for name in ("q-1", "q-2"):
        status, text = await deployment.send("GET", f"/v1/shared/jobs/{name}")
        assert json.loads(text)["job"]["state"] == "settled", text


async def test_one_firing_drains_several_queues_with_its_loops_at_once(
    deployment: Any, capsys: Any,
) -> None:
    """The firing's drain runs CRON_CONCURRENCY loops (asyncio only, on
    Pyodide's event loop); each job is settled once."""
    names = [f"many-{index}" for index in range(6)]
    for index, name in enumerate(names):
        assert (await deployment.send("POST", "/v1/shared/jobs",
                                      job(name, queue=f"q{index % 3}")))[0] == 201
    await deployment.scheduled(1_796_000_000_000)
    for name in names:
        status, text = await deployment.send("GET", f"/v1/shared/jobs/{name}")
        assert status == 200, text
        record = json.loads(text)["job"]
        assert (record["state"], record["attempt"]) == ("settled", 1)
    logged = capsys.readouterr()
    assert "cron: 6 tick(s), 6 job(s) settled" in logged.out, logged
    assert "cron" not in logged.err


async def test_the_fetch_transport_reads_retry_after_through_the_ffi() -> None:
    """A real JS Response: its Retry-After header comes back a str, a missing
    one as JS null (jsnull, truthy), which must read as no header; the
    webhook executor then asks for the header's delay, or for none."""
    import sys

    import js  # type: ignore[import-not-found]
    import pyodide.http  # type: ignore[import-not-found]
    from pyodide.ffi import to_js  # type: ignore[import-not-found]

    from tickwork import AbortSignal, Failed, JobRecord, RateLimited
    from tickwork.cloudflare.http import workers_fetch_post
    from tickwork.executors import webhook_executor

    answering = js.eval("(headers) => async () => new Response('', {status: 429, headers})")
    original = js.fetch
    # The external SDK's fetch goes through pyodide.http's pyfetch, whose
    # module took the global fetch when it was imported (pyodide.http on
    # 0.28, pyodide.http._pyfetch on 314): stand in for it there too.
    pyfetch_module = sys.modules[pyodide.http.pyfetch.__module__]
    original_pyfetch = pyfetch_module._jsfetch
    deliver = webhook_executor(workers_fetch_post)
    record = JobRecord("w", "webhooks", "l", 0, {"url": "https://receiver.example/hook",
                                                  "body": {}},
                       None, "running", None, None, 1, 0, 0, 0, None)
    try:
        for headers, expected, outcome in (({"Retry-After": "30"}, "30", RateLimited(30_000)),
                                           ({}, None, Failed("http_429"))):
            js.globalThis.fetch = answering(to_js(headers,
                                                  dict_converter=js.Object.fromEntries))
            pyfetch_module._jsfetch = js.globalThis.fetch
            reply = await workers_fetch_post("https://receiver.example/hook", b"{}", {}, 5.0,
                                             AbortSignal())
            assert (reply.status, reply.retry_after) == (429, expected)
            assert await deliver(record, AbortSignal()) == outcome
    finally:
        js.globalThis.fetch = original
        pyfetch_module._jsfetch = original_pyfetch
