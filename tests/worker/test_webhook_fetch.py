"""The webhook executor over the Workers ``fetch`` stand-in (``use_fetch``): the
request it sends, the outcome of each reply or failure, timeouts and aborts."""

from __future__ import annotations

import asyncio
import json
import time
import types
from typing import Any

import pytest

from tests.support.fake_js import FakeAbortController
from tests.support.fakes.workers_module import use_fetch
from tests.support.worker import job, send
from tickwork import AbortSignal
from tickwork.executors.webhook import HttpTimeout, HttpUnreachable

pytestmark = pytest.mark.usefixtures("js_module")

CRON = types.SimpleNamespace(scheduledTime=1_796_000_040_000.0, cron="* * * * *")


class Receiver:
    """A ``workers.fetch`` handler standing in for the receiving server."""

    def __init__(self, workers_module: Any, status: int = 200, error: str | None = None,
                 hang: bool = False, headers: dict[str, str] | None = None) -> None:
        self.workers = workers_module
        self.status = status
        self.headers = headers
        self.error = error
        self.hang = hang
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.arrived = asyncio.Event()

    async def __call__(self, resource: str, **options: Any) -> Any:
        self.calls.append((resource, options))
        self.arrived.set()
        if self.hang:
            signal = options["signal"]
            while not signal.aborted:  # like a real fetch: rejects once aborted
                await asyncio.sleep(0.005)
            raise OSError(f"AbortError: The operation was aborted ({signal.reason})")
        if self.error is not None:
            raise OSError(self.error)
        return self.workers.Response("ok", status=self.status, headers=self.headers)


def webhook(job_id: str, path: str = "/hook", **payload: Any) -> dict[str, Any]:
    return job(job_id, queue="webhooks", payload={
        "url": f"https://receiver.example{path}", "body": {"event": job_id}, **payload})


async def drain_once(worker: Any, env: Any) -> None:
    await worker.scheduled(CRON, env, types.SimpleNamespace())


async def outcome(query: Any, job_id: str) -> tuple[Any, ...]:
    rows = await query(f"SELECT state, outcome, failure_reason FROM tickwork_jobs "
                       f"WHERE job_id = '{job_id}'")
    return tuple(rows[0])


async def test_a_webhook_job_posts_once_and_completes(
        worker: Any, env: Any, shape: str, workers_module: Any, query: Any) -> None:
    receiver = Receiver(workers_module, status=204)
    use_fetch(receiver)
    await send(worker, shape, "POST", "/v1/shared/jobs",
               webhook("w-1", headers={"X-Signature": "abc"}))
    await drain_once(worker, env)
    assert await outcome(query, "w-1") == ("settled", "completed", None)
    [(url, options)] = receiver.calls
    assert url == "https://receiver.example/hook"
    assert options["method"] == "POST" and options["redirect"] == "manual"
    assert options["headers"] == {"x-signature": "abc", "content-type": "application/json",
                                  "idempotency-key": "w-1"}
    assert json.loads(options["body"]) == {"event": "w-1"}
    assert options["signal"] is FakeAbortController.created[0].signal


@pytest.mark.parametrize(("status", "error", "expected"), [
    (404, None, ("settled", "failed", "http_404")),
    (429, None, ("settled", "failed", "http_429")),
    (302, None, ("settled", "failed", "http_302")),
    (503, None, ("settled", "outcome_unknown", None)),
    (200, "TypeError: Fetch API cannot load: bad scheme", ("settled", "failed", "unreachable")),
    (200, "Network connection lost.", ("settled", "outcome_unknown", None)),
])
async def test_replies_and_failures_map_to_outcomes(
        worker: Any, env: Any, shape: str, workers_module: Any, query: Any,
        status: int, error: str | None, expected: tuple[Any, ...]) -> None:
    use_fetch(Receiver(workers_module, status=status, error=error))
    await send(worker, shape, "POST", "/v1/shared/jobs", webhook("w"))
    await drain_once(worker, env)
    assert await outcome(query, "w") == expected


async def test_a_429_with_retry_after_holds_the_queue_without_using_an_attempt(
        worker: Any, env: Any, shape: str, workers_module: Any, query: Any) -> None:
    """A 429 with ``Retry-After: 3600`` is the receiver's rate limit: the job
    goes back to its queue as the same attempt, and the queue (its jobs name
    no lane) starts nothing for that hour: the next drain sends nothing."""
    receiver = Receiver(workers_module, status=429, headers={"Retry-After": "3600"})
    use_fetch(receiver)
    await send(worker, shape, "POST", "/v1/shared/jobs",
               {**webhook("w"), "retry": {"attempts": 5, "base_delay_ms": 1000}})
    before = int(time.time() * 1000)
    await drain_once(worker, env)
    after = int(time.time() * 1000)
    assert await query("SELECT state, attempt, history_json, due_at FROM tickwork_jobs "
                       "WHERE job_id = 'w'") == [("queued", 1, None, None)]
    _, body = await send(worker, shape, "GET", "/v1/shared/rate-limits")
    [hold] = body["rate_limits"]
    assert (hold["kind"], hold["key"], hold["starts"]) == ("queue", "webhooks", None)
    assert before + 3_600_000 <= hold["held_until"] <= after + 3_600_000
    _, body = await send(worker, shape, "GET", "/v1/shared/jobs/w/why")
    assert [entry["kind"] for entry in body["holds"]] == ["queue_rate_limited"]
    await drain_once(worker, env)
    assert len(receiver.calls) == 1


async def test_a_bad_payload_sends_nothing(
        worker: Any, env: Any, shape: str, workers_module: Any, query: Any) -> None:
    receiver = Receiver(workers_module)
    use_fetch(receiver)
    await send(worker, shape, "POST", "/v1/shared/jobs",
               job("w", queue="webhooks", payload={"url": "ftp://x", "body": 1}))
    await drain_once(worker, env)
    assert await outcome(query, "w") == ("settled", "failed", "bad_payload")
    assert receiver.calls == []


async def test_a_cancellation_aborts_the_fetch_in_flight(
        worker: Any, env: Any, shape: str, workers_module: Any, db: Any, query: Any) -> None:
    """The job runs on one worker; the cancel arrives through the API (another
    runtime); the executing runtime learns of it at its next renewal, aborts
    the signal, the JS AbortController aborts the fetch, and the job settles
    cancelled (the request may have arrived, so the executor said unknown)."""
    from tickwork.cloudflare.bindings import NoWake
    from tickwork.runtimes.d1 import D1Runtime
    from worker.executors import build_registry

    receiver = Receiver(workers_module, hang=True)
    use_fetch(receiver)
    await send(worker, shape, "POST", "/v1/shared/jobs", webhook("w"))
    runtime = D1Runtime(db, execute=build_registry(env), wake=NoWake(),
                        lease_ms=5_000, renew_every_ms=30)
    ticking = asyncio.create_task(runtime.tick())
    await asyncio.wait_for(receiver.arrived.wait(), 5)
    assert await send(worker, shape, "POST", "/v1/shared/jobs/w/cancel",
                      {"cancellation_id": "stop"}) == (200, {"job_id": "w", "status": "recorded"})
    result = await asyncio.wait_for(ticking, 5)
    assert (result.status, result.job_id, result.outcome) == ("settled", "w", "cancelled")
    [controller] = FakeAbortController.created
    assert controller.signal.aborted and controller.signal.reason == "cancelled"
    assert await outcome(query, "w") == ("settled", "cancelled", None)


async def test_workers_fetch_post_times_out_and_aborts(workers_module: Any) -> None:
    from tickwork.cloudflare import workers_fetch_post

    receiver = Receiver(workers_module, hang=True)
    use_fetch(receiver)
    with pytest.raises(HttpTimeout, match=r"within 0\.05 s"):
        await workers_fetch_post("https://r.example/", b"{}", {}, 0.05, AbortSignal())
    [controller] = FakeAbortController.created
    assert controller.signal.reason == "timeout"


async def test_workers_fetch_post_forwards_the_abort_signal(workers_module: Any) -> None:
    from tickwork.cloudflare import workers_fetch_post

    receiver = Receiver(workers_module, hang=True)
    use_fetch(receiver)
    signal = AbortSignal()
    posting = asyncio.create_task(
        workers_fetch_post("https://r.example/", b"{}", {}, 5.0, signal))
    await asyncio.wait_for(receiver.arrived.wait(), 5)
    signal._abort("lane_failed")
    with pytest.raises(HttpTimeout, match="lane_failed"):
        await asyncio.wait_for(posting, 5)
    assert FakeAbortController.created[0].signal.reason == "lane_failed"


@pytest.mark.parametrize(("message", "kind"), [
    ("TypeError: Fetch API cannot load: ftp://x", HttpUnreachable),
    ("TypeError: Invalid URL: nope", HttpUnreachable),
    ("DNS lookup failed", HttpUnreachable),
    ("Network connection lost.", HttpTimeout),
    ("internal error; reference = 123", HttpTimeout),
    ("", HttpTimeout),
])
async def test_fetch_rejections_are_classified(workers_module: Any, message: str,
                                               kind: type[Exception]) -> None:
    from tickwork.cloudflare import workers_fetch_post

    use_fetch(Receiver(workers_module, error=message))
    with pytest.raises(kind):
        await workers_fetch_post("https://r.example/", b"{}", {}, 1.0, AbortSignal())


async def test_the_reply_body_is_read_and_returned(workers_module: Any) -> None:
    from tickwork.cloudflare import workers_fetch_post

    use_fetch(Receiver(workers_module, status=201))
    reply = await workers_fetch_post("https://r.example/", "é".encode(), {}, 1.0, AbortSignal())
    assert (reply.status, reply.body) == (201, "ok")
