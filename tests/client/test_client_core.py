"""The client's sans-I/O core: requests from the operations table, refusals
rebuilt as the engine's errors, and when a request is sent again."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tests.support import unchecked_job
from tickwork import Job
from tickwork.api.operations import BY_NAME
from tickwork.api.wire import ApiError, error_for
from tickwork.client import Client, HttpAnswer, HttpRequest, RetryPolicy, TransportError
from tickwork.client.core import may_retry, request_for, result_of
from tickwork.model.errors import IngestConflict, InvalidArgument, InvalidJob

BASE = "https://jobs.example/api"


class Scripted:
    """A SyncTransport answering from a script; records what was sent."""

    def __init__(self, *answers: HttpAnswer | TransportError) -> None:
        self.answers = list(answers)
        self.sent: list[HttpRequest] = []

    def send(self, request: HttpRequest, timeout_s: float) -> HttpAnswer:
        self.sent.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, TransportError):
            raise answer
        return answer


def job(job_id: str, queue: str = "q", *, lane: str | None = None, priority: int = 0,
        payload: Any = None) -> Job:
    return Job(job_id, queue, lane or queue, priority, payload)


def answer(status: int, body: Any, **headers: str) -> HttpAnswer:
    return HttpAnswer(status, headers, json.dumps(body).encode())


def client(transport: Scripted, attempts: int = 3) -> Client:
    return Client(BASE, token="t", transport=transport,
                  retry=RetryPolicy(attempts=attempts, base_s=0, cap_s=0))


def test_requests_follow_the_routes_with_every_segment_percent_encoded() -> None:
    request = request_for(BASE, "t", ("owners", "a b/c"), BY_NAME["cancel"],
                          ("job/1?", "c-1", True))
    assert request.method == "POST"
    assert request.url == f"{BASE}/v1/owners/a%20b%2Fc/jobs/job%2F1%3F/cancel"
    assert request.headers["authorization"] == "Bearer t"
    assert json.loads(request.body or b"") == {"cancellation_id": "c-1", "only_if_queued": True}
    read = request_for(BASE, None, ("shared",), BY_NAME["read"], ("é",))
    assert (read.method, read.url, read.body) == ("GET", f"{BASE}/v1/shared/jobs/%C3%A9", None)
    assert "authorization" not in read.headers


@pytest.mark.parametrize(("call", "error", "field"), [
    # Jobs made around Job()'s own checks (which refuse the same): the client
    # still refuses them before any request.
    (lambda jobs: jobs.ingest(unchecked_job("", "q", "q")), InvalidJob, "job_id"),
    (lambda jobs: jobs.ingest(unchecked_job("j", "q", "q", 2**53)), InvalidJob, "priority"),
    (lambda jobs: jobs.ingest_many([]), InvalidArgument, "jobs"),
    (lambda jobs: jobs.ingest_many([job("j"), "no job"]), InvalidJob, "jobs[1]"),
    (lambda jobs: jobs.read(""), InvalidArgument, "job_id"),
    (lambda jobs: jobs.read(".."), InvalidArgument, "job_id"),
    (lambda jobs: jobs.cancel("j", ""), InvalidArgument, "cancellation_id"),
    (lambda jobs: jobs.cancel("j", "c", only_if_queued="yes"), InvalidArgument,
     "only_if_queued"),
    (lambda jobs: jobs.fail_lane("l", ""), InvalidArgument, "reason"),
    (lambda jobs: jobs.purge("x" * 257), InvalidArgument, "queue"),
])
def test_bad_arguments_are_refused_before_anything_is_sent(call: Any, error: type[Exception],
                                                           field: str) -> None:
    transport = Scripted()
    with pytest.raises(error) as raised:
        call(client(transport).owner("o"))
    assert raised.value.field == field  # type: ignore[attr-defined]
    assert transport.sent == []


def test_a_job_id_repeated_with_other_cargo_is_the_runtimes_conflict() -> None:
    transport = Scripted()
    with pytest.raises(IngestConflict) as raised:
        client(transport).owner("o").ingest_many([job("j"), job("k"), job("j", priority=1)])
    assert (raised.value.job_id, raised.value.fields) == ("j", ("priority",))
    assert transport.sent == []


def test_bad_owner_keys_and_urls_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="owner"):
        client(Scripted()).owner(".")
    with pytest.raises(InvalidArgument, match="owner"):
        client(Scripted()).owner("")
    for url in ("ftp://x", "jobs.example", "https://x/?q=1", 42):
        with pytest.raises(InvalidArgument, match="base_url"):
            Client(url, transport=Scripted())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="timeout_s"):
        Client(BASE, transport=Scripted(), timeout_s=0)
    with pytest.raises(InvalidArgument, match="attempts"):
        RetryPolicy(attempts=0)
    for token in ("", "a\r\nx-evil: 1", 7):
        with pytest.raises(InvalidArgument, match="token"):
            Client(BASE, transport=Scripted(), token=token)  # type: ignore[arg-type]


@pytest.mark.parametrize("engine_error", [
    InvalidJob("jobs[0].payload", "must be JSON"),
    InvalidArgument("cancellation_id", "must be 1 to 256 characters, got 0"),
    IngestConflict("j-1", ("payload", "priority")),
])
def test_refusals_come_back_as_the_error_the_engine_raised(engine_error: Exception) -> None:
    refused = error_for(engine_error)
    assert refused is not None
    rebuilt = None
    try:
        result_of(BY_NAME["ingest"], answer(refused.status, refused.to_wire()))
    except Exception as error:  # compared below
        rebuilt = error
    assert type(rebuilt) is type(engine_error)
    assert str(rebuilt) == str(engine_error)
    assert vars(rebuilt) == vars(engine_error)


def test_other_refusals_are_api_errors_with_status_code_and_field() -> None:
    with pytest.raises(ApiError) as raised:
        result_of(BY_NAME["status"], answer(401, {"error": {
            "code": "unauthorized", "message": "wrong bearer token"}}))
    assert (raised.value.status, raised.value.code, raised.value.field) == (
        401, "unauthorized", None)
    with pytest.raises(ApiError, match="not JSON"):
        result_of(BY_NAME["status"], HttpAnswer(502, {}, b"<html>bad gateway</html>"))
    with pytest.raises(ApiError, match="not the API's shape"):
        result_of(BY_NAME["status"], answer(200, {"unexpected": []}))


def test_a_missing_job_reads_as_none_and_cancel_answers_carry_their_status() -> None:
    missing = answer(404, {"error": {"code": "job_not_found", "message": "no job 'x'",
                                     "field": "job_id"}})
    assert result_of(BY_NAME["read"], missing) is None
    cancelled = result_of(BY_NAME["cancel"], answer(409, {"job_id": "x",
                                                          "status": "already_settled"}))
    assert (cancelled.status, cancelled.job_id) == ("already_settled", "x")
    # a 404 that is no job_not_found (no such route) is an error, not None
    with pytest.raises(ApiError):
        result_of(BY_NAME["read"], answer(404, {"error": {"code": "no_route", "message": "?"}}))


def test_idempotent_calls_are_sent_again_after_a_lost_reply_or_a_503() -> None:
    transport = Scripted(TransportError("reset", maybe_sent=True),
                         answer(503, {"error": {"code": "at_capacity", "message": "busy"}},
                                **{"retry-after": "0"}),
                         answer(200, {"queues": []}))
    assert client(transport).owner("o").status() == []
    assert len(transport.sent) == 3
    # the same request each time
    assert len({(r.method, r.url, r.body) for r in transport.sent}) == 1


def test_attempts_are_bounded_and_the_last_answer_or_error_is_reported() -> None:
    busy = answer(503, {"error": {"code": "at_capacity", "message": "busy"}})
    transport = Scripted(busy, busy)
    with pytest.raises(ApiError) as raised:
        client(transport, attempts=2).owner("o").read("j")
    assert raised.value.status == 503 and len(transport.sent) == 2
    lost = TransportError("reset", maybe_sent=True)
    transport = Scripted(lost, lost)
    with pytest.raises(TransportError):
        client(transport, attempts=2).owner("o").ingest(job("j"))
    assert len(transport.sent) == 2


def test_purge_and_fail_lane_are_sent_once_unless_nothing_left() -> None:
    for call in (lambda jobs: jobs.purge("q"), lambda jobs: jobs.fail_lane("l", "down")):
        transport = Scripted(TransportError("reset", maybe_sent=True))
        with pytest.raises(TransportError):
            call(client(transport).owner("o"))
        assert len(transport.sent) == 1
        transport = Scripted(answer(502, {"error": {"code": "bad_gateway", "message": "?"}}))
        with pytest.raises(ApiError):
            call(client(transport).owner("o"))
        assert len(transport.sent) == 1
    # a connection that was refused sent nothing: safe for any call
    transport = Scripted(TransportError("refused", maybe_sent=False),
                         answer(200, {"queue": "q", "purged": 4}))
    assert client(transport).owner("o").purge("q") == 4
    assert len(transport.sent) == 2


def test_backoff_doubles_up_to_the_cap_and_honours_retry_after() -> None:
    policy = RetryPolicy(base_s=0.1, cap_s=1.0, jitter=0, rng=random.Random(1))
    assert [policy.delay_s(n, None) for n in (1, 2, 3, 4, 5)] == [0.1, 0.2, 0.4, 0.8, 1.0]
    later = HttpAnswer(503, {"retry-after": "0.7"}, b"")
    assert policy.delay_s(1, later) == 0.7
    too_late = HttpAnswer(503, {"retry-after": "60"}, b"")
    assert policy.delay_s(1, too_late) == 0.1  # beyond the cap: our own backoff
    jittered = RetryPolicy(base_s=1.0, cap_s=10.0, jitter=0.5, rng=random.Random(7))
    assert all(0.5 <= jittered.delay_s(1, None) <= 1.0 for _ in range(100))


def test_may_retry_is_false_for_answers_that_are_final() -> None:
    policy = RetryPolicy()
    for status in (200, 201, 400, 401, 404, 409, 413, 500):
        assert not may_retry(BY_NAME["read"], 1, policy, HttpAnswer(status, {}, b""), None)
