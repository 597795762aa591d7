"""The webhook executor: payload checks, the request, and the exact outcome mapping,
with a scripted HttpPost and through the engine against a real loopback server."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from tests.support.http_peer import LoopbackServer, closed_port, stdlib_post
from tickwork import (
    AbortSignal,
    Cancelled,
    Completed,
    Failed,
    Job,
    JobRecord,
    OutcomeUnknown,
    OwnerRuntime,
    RateLimited,
)
from tickwork.executors import HttpReply, HttpTimeout, HttpUnreachable, webhook_executor
from tickwork.executors.webhook import OVERRUN_GRACE_S, idempotency_key, outcome_for_status
from tickwork.stores import Sqlite3Database


def record(payload: Any, job_id: str = "job-1") -> JobRecord:
    return JobRecord(job_id, "webhooks", "lane", 0, payload, None, "running", None, None,
                     1, 0, 0, 0, None)


def hook(**extra: Any) -> dict[str, Any]:
    return {"url": "https://example.com/hook", "body": {"a": [1, "é"]}, **extra}


class ScriptedPost:
    """An HttpPost that records calls and answers as told (or waits forever)."""

    def __init__(self, answer: Any = None) -> None:
        self.answer = HttpReply(200, "") if answer is None else answer
        self.calls: list[tuple[str, bytes, dict[str, str], float]] = []
        self.started = asyncio.Event()
        self.cancelled = False

    async def __call__(self, url: str, body: bytes, headers: Mapping[str, str],
                       timeout_s: float, signal: AbortSignal) -> HttpReply:
        self.calls.append((url, body, dict(headers), timeout_s))
        self.started.set()
        if self.answer == "hang":
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise
        if isinstance(self.answer, BaseException):
            raise self.answer
        assert isinstance(self.answer, HttpReply)
        return self.answer


# ------------------------------------------------------------------ unit


async def test_the_request_is_a_json_post_with_the_idempotency_key() -> None:
    post = ScriptedPost()
    deliver = webhook_executor(post, timeout_s=7.5)
    assert await deliver(record(hook(headers={"X-Trace": "t1"}, kind="webhook")),
                         AbortSignal()) == Completed()
    [(url, body, headers, timeout_s)] = post.calls
    assert url == "https://example.com/hook" and timeout_s == 7.5
    assert body == '{"a":[1,"é"]}'.encode()
    assert headers == {"x-trace": "t1", "content-type": "application/json",
                       "idempotency-key": "job-1"}


@pytest.mark.parametrize("payload", [
    None, [], "https://example.com", {"body": 1},
    {"url": "https://example.com"},                      # body is required
    {"url": 5, "body": 1},
    {"url": "", "body": 1},
    {"url": "ftp://example.com/x", "body": 1},
    {"url": "https:///no-host", "body": 1},
    {"url": "https://exa mple.com", "body": 1},
    {"url": "https://example.com/\n", "body": 1},
    {"url": "https://example.com/" + "x" * 9000, "body": 1},
    hook(headers=["x"]),
    hook(headers={"x-a": 1}),
    hook(headers={"bad name": "v"}),
    hook(headers={"x-a": "line\r\nbreak"}),
    hook(headers={"X-A": "1", "x-a": "2"}),
    hook(headers={"Content-Type": "text/plain"}),
    hook(headers={"idempotency-key": "mine"}),
    hook(headers={"host": "evil"}),
    hook(headers={f"x-{i}": "v" for i in range(65)}),
])
async def test_a_bad_payload_fails_without_a_request(payload: Any) -> None:
    post = ScriptedPost()
    assert await webhook_executor(post)(record(payload), AbortSignal()) == Failed("bad_payload")
    assert post.calls == []


async def test_null_headers_and_null_body_are_fine() -> None:
    post = ScriptedPost()
    assert await webhook_executor(post)(record({"url": "http://h/", "body": None,
                                                "headers": None}), AbortSignal()) == Completed()
    assert post.calls[0][1] == b"null"


@pytest.mark.parametrize(("status", "expected"), [
    (200, Completed()), (201, Completed()), (204, Completed()), (299, Completed()),
    (301, Failed("http_301")), (302, Failed("http_302")), (308, Failed("http_308")),
    (400, Failed("http_400")), (401, Failed("http_401")), (404, Failed("http_404")),
    (408, Failed("http_408")), (409, Failed("http_409")), (429, Failed("http_429")),
    (499, Failed("http_499")),
    (500, OutcomeUnknown()), (502, OutcomeUnknown()), (503, OutcomeUnknown()),
    (504, OutcomeUnknown()), (599, OutcomeUnknown()),
    (100, OutcomeUnknown()), (199, OutcomeUnknown()), (600, OutcomeUnknown()),
    (0, OutcomeUnknown()),
])
async def test_every_status_maps_to_its_outcome(status: int, expected: Any) -> None:
    assert outcome_for_status(status) == expected
    deliver = webhook_executor(ScriptedPost(HttpReply(status, "")))
    assert await deliver(record(hook()), AbortSignal()) == expected


@pytest.mark.parametrize(("error", "expected"), [
    (HttpTimeout("slow"), OutcomeUnknown()),
    (HttpUnreachable("refused"), Failed("unreachable")),
    (ConnectionResetError("reset after sending"), OutcomeUnknown()),
    (RuntimeError("transport bug"), OutcomeUnknown()),
])
async def test_transport_errors_map_to_outcomes(error: Exception, expected: Any) -> None:
    assert await webhook_executor(ScriptedPost(error))(record(hook()), AbortSignal()) == expected


async def test_a_broken_reply_is_unknown() -> None:
    post = ScriptedPost(HttpReply("200", ""))  # type: ignore[arg-type]
    assert await webhook_executor(post)(record(hook()), AbortSignal()) == OutcomeUnknown()


async def test_an_aborted_signal_sends_nothing() -> None:
    post = ScriptedPost()
    signal = AbortSignal()
    signal._abort("cancelled")
    assert await webhook_executor(post)(record(hook()), signal) == Cancelled()
    assert post.calls == []


async def test_an_abort_mid_request_stops_waiting_and_is_unknown() -> None:
    post = ScriptedPost("hang")
    signal = AbortSignal()
    delivering = asyncio.create_task(webhook_executor(post)(record(hook()), signal))
    await post.started.wait()
    signal._abort("lease_lost")
    assert await asyncio.wait_for(delivering, 1) == OutcomeUnknown()
    await asyncio.sleep(0)
    assert post.cancelled


async def test_a_reply_already_in_wins_over_a_late_abort() -> None:
    signal = AbortSignal()

    async def post(url: str, body: bytes, headers: Mapping[str, str], timeout_s: float,
                   abort: AbortSignal) -> HttpReply:
        abort._abort("cancelled")  # the abort lands while the reply is being returned
        return HttpReply(200, "done")

    assert await webhook_executor(post)(record(hook()), signal) == Completed()


async def test_a_post_that_ignores_its_timeout_is_abandoned() -> None:
    post = ScriptedPost("hang")
    loop = asyncio.get_running_loop()
    started = loop.time()
    result = await webhook_executor(post, timeout_s=0.05)(record(hook()), AbortSignal())
    assert result == OutcomeUnknown()
    assert loop.time() - started < 0.05 + OVERRUN_GRACE_S + 0.5
    await asyncio.sleep(0)
    assert post.cancelled


async def test_a_cancelled_delivery_cancels_the_request() -> None:
    post = ScriptedPost("hang")
    delivering = asyncio.create_task(webhook_executor(post)(record(hook()), AbortSignal()))
    await post.started.wait()
    delivering.cancel()
    with pytest.raises(asyncio.CancelledError):
        await delivering
    await asyncio.sleep(0)
    assert post.cancelled


@pytest.mark.parametrize(("job_id", "key"), [
    ("order-7", "order-7"), ("a b", "a b"), ("é", "%C3%A9"), ("line\nbreak", "line%0Abreak"),
    (" padded", "%20padded"),
])
def test_idempotency_keys_are_ascii(job_id: str, key: str) -> None:
    assert idempotency_key(job_id) == key


@pytest.mark.parametrize("timeout_s", [0, -1, 3601, float("nan"), True, "30"])
def test_a_bad_timeout_is_refused(timeout_s: Any) -> None:
    with pytest.raises(ValueError, match="timeout_s"):
        webhook_executor(ScriptedPost(), timeout_s=timeout_s)


# ---------------------------------------------------- engine + loopback server


class Wake:
    def recompute(self) -> None:
        pass


@pytest.fixture
async def server() -> AsyncIterator[LoopbackServer]:
    running = await LoopbackServer().start()
    yield running
    await running.close()


def engine(timeout_s: float = 5.0) -> OwnerRuntime:
    connection = sqlite3.connect(":memory:", isolation_level=None)
    return OwnerRuntime(Sqlite3Database(connection),
                        execute=webhook_executor(stdlib_post, timeout_s=timeout_s),
                        is_alive=lambda job: False, wake=Wake())


def webhook_job(job_id: str, url: str) -> Job:
    return Job(job_id, "webhooks", "tenant-1", 0, {"url": url, "body": {"id": job_id}})


@pytest.mark.parametrize(("path", "outcome", "reason"), [
    ("/status/200", "completed", None),
    ("/status/204", "completed", None),
    ("/status/404", "failed", "http_404"),
    ("/status/429", "failed", "http_429"),
    ("/status/503", "outcome_unknown", None),
    ("/drop", "outcome_unknown", None),
])
async def test_the_engine_records_what_the_server_answered(
        server: LoopbackServer, path: str, outcome: str, reason: str | None) -> None:
    runtime = engine()
    runtime.ingest(webhook_job("order-1", server.url(path)))
    result = await runtime.tick()
    assert (result.status, result.outcome, result.failure_reason) == ("settled", outcome, reason)
    [received] = server.requests
    assert (received.method, received.path) == ("POST", path)
    assert received.headers["content-type"] == "application/json"
    assert received.headers["idempotency-key"] == "order-1"
    assert json.loads(received.body) == {"id": "order-1"}


async def test_a_server_that_never_answers_times_out_unknown(server: LoopbackServer) -> None:
    runtime = engine(timeout_s=0.2)
    runtime.ingest(webhook_job("slow", server.url("/slow")))
    result = await runtime.tick()
    assert (result.outcome, result.failure_reason) == ("outcome_unknown", None)
    assert len(server.requests) == 1  # it did arrive: unknown was the honest answer


async def test_an_unreachable_server_fails_unreachable() -> None:
    runtime = engine()
    runtime.ingest(webhook_job("nobody", f"http://127.0.0.1:{await closed_port()}/hook"))
    result = await runtime.tick()
    assert (result.outcome, result.failure_reason) == ("failed", "unreachable")


async def test_a_cancellation_mid_request_settles_cancelled(server: LoopbackServer) -> None:
    runtime = engine()
    runtime.ingest(webhook_job("slow", server.url("/slow")))
    ticking = asyncio.create_task(runtime.tick())
    await asyncio.wait_for(server.arrived.wait(), 5)
    assert runtime.cancel("slow", "stop").status == "recorded"
    result = await asyncio.wait_for(ticking, 5)
    assert (result.status, result.outcome) == ("settled", "cancelled")


async def test_a_lane_refusal_mid_request_settles_with_its_reason(
        server: LoopbackServer) -> None:
    runtime = engine()
    runtime.ingest(webhook_job("slow", server.url("/slow")))
    ticking = asyncio.create_task(runtime.tick())
    await asyncio.wait_for(server.arrived.wait(), 5)
    assert runtime.fail_lane("tenant-1", "tenant_gone").settled == 1
    result = await asyncio.wait_for(ticking, 5)
    assert (result.outcome, result.failure_reason) == ("failed", "tenant_gone")


@pytest.mark.parametrize(("status", "retry_after", "expected"), [
    (429, "30", RateLimited(30_000)),  # the receiver's rate limit: no attempt used
    (429, " 0 ", RateLimited(0)),
    (429, "999999999", RateLimited(86_400_000)),  # capped at a day
    (429, "Wed, 21 Oct 2026 07:28:00 GMT", Failed("http_429")),  # dates are not read
    (429, "-5", Failed("http_429")),
    (404, "30", Failed("http_404", 30_000)),
    (408, "30", Failed("http_408", 30_000)),
    (503, "30", OutcomeUnknown()),  # may have acted: no delay to carry
    (200, "30", Completed()),
])
async def test_retry_after_becomes_a_hold_or_the_failures_delay(
        status: int, retry_after: str, expected: object) -> None:
    deliver = webhook_executor(ScriptedPost(HttpReply(status, "", retry_after)))
    assert await deliver(record(hook()), AbortSignal()) == expected
