"""``Job()`` itself: defaults as over HTTP, every field checked where the job
is built (by the rules and with the words ingest uses), due times as
``datetime`` and ``timedelta``, and seconds refused where milliseconds are
meant."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from tests.support import CountingWake, ScriptedExecutor, unchecked_job
from tickwork import InvalidJob, Job, OwnerRuntime, Recovery, Retry
from tickwork.api import ApiRequest, JobApi, RuntimeService
from tickwork.model.jobs import (
    MAX_DELAY_MS,
    MAX_SAFE_INTEGER,
    MIN_RUN_AT_MS,
    validate_job,
)
from tickwork.stores import Sqlite3Database

#: 2026-12-06T02:26:35.995Z, in epoch milliseconds.
AT_MS = 1_796_523_995_995
AT = datetime(2026, 12, 6, 2, 26, 35, 995_000, tzinfo=UTC)

# ------------------------------------------------------------------ defaults


def test_only_the_id_and_the_queue_are_required() -> None:
    job = Job("job-1", queue="billing")
    assert (job.job_id, job.queue, job.lane, job.priority, job.payload) == (
        "job-1", "billing", "billing", 0, None)
    assert (job.recovery, job.run_at, job.delay_ms, job.retry) == (None, None, None, None)
    assert job == Job("job-1", "billing", "billing", 0, None)


def test_a_lane_of_none_is_the_queue() -> None:
    assert Job("job-1", "billing", None).lane == "billing"
    assert Job("job-1", "billing", lane="tenant-7").lane == "tenant-7"


def test_the_positional_form_still_builds_the_same_job() -> None:
    by_position = Job("j", "q", "l", 3, {"a": 1}, Recovery(2), None, 5_000, Retry(2))
    by_keyword = Job("j", queue="q", lane="l", priority=3, payload={"a": 1},
                     recovery=Recovery(2), delay_ms=5_000, retry=Retry(2))
    assert by_position == by_keyword
    assert dataclasses.astuple(by_position) == (
        "j", "q", "l", 3, {"a": 1}, (2,), None, 5_000, (2, 1000, 2.0, 3_600_000, 0.0, False))


def test_a_job_stays_frozen() -> None:
    job = Job("j", queue="q")
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.priority = 5  # type: ignore[misc]


def test_replace_checks_the_new_fields_too() -> None:
    job = Job("j", queue="q")
    assert dataclasses.replace(job, priority=4).priority == 4
    with pytest.raises(InvalidJob) as refused:
        dataclasses.replace(job, priority="high")
    assert str(refused.value) == "priority: must be an integer, got str"


# ------------------------------------------------- refused where it is built


@pytest.mark.parametrize(("fields", "message"), [
    ({"priority": "high"}, "priority: must be an integer, got str"),
    ({"priority": True}, "priority: must be an integer, got bool"),
    ({"priority": MAX_SAFE_INTEGER + 1},
     f"priority: must be within {-MAX_SAFE_INTEGER} and {MAX_SAFE_INTEGER}, "
     f"got {MAX_SAFE_INTEGER + 1}"),
    ({"job_id": ""}, "job_id: must be 1 to 256 characters, got 0"),
    ({"job_id": 7}, "job_id: must be a string, got int"),
    ({"queue": "q" * 257}, "queue: must be 1 to 256 characters, got 257"),
    ({"lane": ""}, "lane: must be 1 to 512 characters, got 0"),
    ({"lane": b"tenant"}, "lane: must be a string, got bytes"),
    ({"payload": {"when": datetime(2026, 1, 1)}},
     "payload: payload['when'] is a datetime, which is not JSON"),
    ({"payload": {1: "x"}}, "payload: payload has a non-string key 1"),
    ({"recovery": 2}, "recovery: must be a tickwork.Recovery or None, got int"),
    ({"recovery": Recovery(-1)},
     f"recovery.max_recoveries: must be within 0 and {MAX_SAFE_INTEGER}, got -1"),
    ({"retry": Retry(0)}, "retry.attempts: must be within 1 and 1000, got 0"),
    ({"retry": {"attempts": 3}}, "retry: must be a tickwork.Retry or None, got dict"),
    ({"run_at": "tomorrow"},
     "run_at: must be an integer (epoch milliseconds) or an aware datetime, got str"),
    ({"run_at": 1.5e12},
     "run_at: must be an integer (epoch milliseconds) or an aware datetime, got float"),
    ({"delay_ms": 1.5},
     "delay_ms: must be an integer (milliseconds) or a timedelta, got float"),
    ({"delay_ms": -1}, f"delay_ms: must be within 0 and {MAX_DELAY_MS}, got -1"),
    ({"run_at": AT_MS, "delay_ms": 5},
     "delay_ms: cannot be combined with run_at: give one of the two"),
])
def test_a_bad_field_is_refused_at_once_as_ingest_refuses_it(
        fields: dict[str, Any], message: str) -> None:
    given: dict[str, Any] = {"job_id": "j", "queue": "q", **fields}
    with pytest.raises(InvalidJob) as built:
        Job(**given)
    assert str(built.value) == message
    assert built.value.field == message.split(":")[0]
    # The same words from ingest's validation, for a job that got past Job().
    job_id = given.pop("job_id")
    given.setdefault("lane", "q")
    with pytest.raises(InvalidJob) as ingested:
        validate_job(unchecked_job(job_id, **given))
    assert (ingested.value.field, str(ingested.value)) == (built.value.field, message)


# ----------------------------------------------------- datetime and timedelta


def test_run_at_takes_an_aware_datetime_as_epoch_milliseconds() -> None:
    assert Job("j", queue="q", run_at=AT).run_at == AT_MS
    # Any timezone: the same instant.
    an_hour_east = timezone(timedelta(hours=1))
    assert Job("j", queue="q", run_at=AT.astimezone(an_hour_east)).run_at == AT_MS
    # Microseconds are rounded down to the millisecond.
    assert Job("j", queue="q", run_at=AT + timedelta(microseconds=999)).run_at == AT_MS
    assert Job("j", queue="q", run_at=AT) == Job("j", queue="q", run_at=AT_MS)


def test_a_naive_datetime_is_refused_asking_for_a_timezone() -> None:
    with pytest.raises(InvalidJob) as refused:
        Job("j", queue="q", run_at=datetime(2026, 12, 6, 6, 26))
    assert refused.value.field == "run_at"
    assert str(refused.value) == ("run_at: is a naive datetime (2026-12-06T06:26:00); give "
                                  "it a timezone, e.g. datetime.now(timezone.utc)")


def test_a_datetime_before_2001_is_refused() -> None:
    with pytest.raises(InvalidJob) as refused:
        Job("j", queue="q", run_at=datetime(2000, 12, 31, 23, 59, 59, tzinfo=UTC))
    assert str(refused.value) == ("run_at: must be 2001-01-01T00:00:00Z or later, "
                                  "got 2000-12-31T23:59:59+00:00")
    first = datetime(2001, 1, 1, tzinfo=UTC)
    assert Job("j", queue="q", run_at=first).run_at == MIN_RUN_AT_MS


def test_delay_ms_takes_a_timedelta() -> None:
    assert Job("j", queue="q", delay_ms=timedelta(minutes=5)).delay_ms == 300_000
    assert Job("j", queue="q", delay_ms=timedelta(0)).delay_ms == 0
    # Rounded down to the millisecond.
    assert Job("j", queue="q", delay_ms=timedelta(microseconds=1_999)).delay_ms == 1
    assert Job("j", queue="q", delay_ms=timedelta(hours=1)) == Job("j", queue="q",
                                                                    delay_ms=3_600_000)
    longest = timedelta(milliseconds=MAX_DELAY_MS)
    assert Job("j", queue="q", delay_ms=longest).delay_ms == MAX_DELAY_MS


@pytest.mark.parametrize(("delay", "message"), [
    (timedelta(seconds=-1), f"delay_ms: must be within 0 and {MAX_DELAY_MS}, got -1000"),
    (timedelta(milliseconds=MAX_DELAY_MS + 1),
     f"delay_ms: must be within 0 and {MAX_DELAY_MS}, got {MAX_DELAY_MS + 1}"),
])
def test_a_timedelta_out_of_range_is_refused_in_milliseconds(
        delay: timedelta, message: str) -> None:
    with pytest.raises(InvalidJob) as refused:
        Job("j", queue="q", delay_ms=delay)
    assert str(refused.value) == message


def test_a_datetime_and_a_timedelta_cannot_be_combined() -> None:
    with pytest.raises(InvalidJob) as refused:
        Job("j", queue="q", run_at=AT, delay_ms=timedelta(minutes=1))
    assert refused.value.field == "delay_ms"
    assert "cannot be combined with run_at" in refused.value.problem


# ------------------------------------------- seconds where milliseconds go


def test_epoch_seconds_are_refused_naming_milliseconds() -> None:
    with pytest.raises(InvalidJob) as refused:
        Job("j", queue="q", run_at=1_796_523_995)
    assert str(refused.value) == ("run_at: must be epoch milliseconds; 1796523995 looks "
                                  "like seconds (multiply by 1000)")
    now_in_seconds = int(time.time())
    with pytest.raises(InvalidJob, match="looks like seconds"):
        Job("j", queue="q", run_at=now_in_seconds)
    assert Job("j", queue="q", run_at=now_in_seconds * 1000).run_at == now_in_seconds * 1000


@pytest.mark.parametrize(("run_at", "refusal"), [
    (MIN_RUN_AT_MS, None),  # 2001-01-01T00:00:00Z, the first accepted
    (MIN_RUN_AT_MS + 1, None),
    (MAX_SAFE_INTEGER, None),
    (MIN_RUN_AT_MS - 1, "range"),  # milliseconds, of the last day of 2000
    (10**11, "range"),  # 1973 in milliseconds; the year 5138 in seconds
    (10**11 - 1, "seconds"),
    (978_307_200, "seconds"),  # 2001-01-01 in seconds
    (978_307_199, "range"),
    (0, "range"),
    (-1, "range"),
    (MAX_SAFE_INTEGER + 1, "range"),
])
def test_the_earliest_run_at_is_2001(run_at: int, refusal: str | None) -> None:
    if refusal is None:
        assert Job("j", queue="q", run_at=run_at).run_at == run_at
        return
    with pytest.raises(InvalidJob) as refused:
        Job("j", queue="q", run_at=run_at)
    expected = (f"run_at: must be epoch milliseconds; {run_at} looks like seconds "
                "(multiply by 1000)" if refusal == "seconds" else
                f"run_at: must be epoch milliseconds within {MIN_RUN_AT_MS} "
                f"(2001-01-01T00:00:00Z) and {MAX_SAFE_INTEGER}, got {run_at}")
    assert str(refused.value) == expected
    # Ingest draws the same line for a job that got past Job().
    with pytest.raises(InvalidJob) as ingested:
        validate_job(unchecked_job("j", "q", "q", run_at=run_at))
    assert str(ingested.value) == expected


# ---------------------------------- the same job through Python and over HTTP


TOKEN = "t0ken"
CLOCK_MS = 1_796_000_000_000


def sqlite3_owner() -> tuple[OwnerRuntime, sqlite3.Connection]:
    connection = sqlite3.connect(":memory:", isolation_level=None)
    runtime = OwnerRuntime(Sqlite3Database(connection), execute=ScriptedExecutor(),
                           is_alive=lambda job: False, wake=CountingWake(),
                           clock=lambda: CLOCK_MS)
    return runtime, connection


def stored_rows(connection: sqlite3.Connection) -> list[dict[str, Any]]:
    cursor = connection.execute("SELECT * FROM tickwork_jobs ORDER BY sequence")
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


@pytest.mark.parametrize(("keywords", "body"), [
    ({}, {}),
    ({"payload": {"amount": 30, "note": "é"}}, {"payload": {"note": "é", "amount": 30}}),
    ({"lane": "tenant-7", "priority": -2}, {"lane": "tenant-7", "priority": -2}),
    ({"run_at": AT}, {"run_at": AT_MS}),
    ({"run_at": AT_MS}, {"run_at": AT_MS}),
    ({"delay_ms": timedelta(hours=2)}, {"delay_ms": 7_200_000}),
    ({"recovery": Recovery(1), "retry": Retry(3, base_delay_ms=500)},
     {"recovery": {"max_recoveries": 1}, "retry": {"attempts": 3, "base_delay_ms": 500}}),
])
async def test_a_keyword_built_job_is_stored_as_the_http_route_stores_its_json(
        keywords: dict[str, Any], body: dict[str, Any]) -> None:
    python_side, python_rows = sqlite3_owner()
    assert python_side.ingest(Job("job-1", queue="billing", **keywords)) == "queued"

    http_side, http_rows = sqlite3_owner()
    api = JobApi(token=TOKEN, owners=lambda key: RuntimeService(http_side))
    answer = await api.handle(ApiRequest(
        "POST", "/v1/owners/acme/jobs", {"authorization": f"Bearer {TOKEN}"},
        json.dumps({"job_id": "job-1", "queue": "billing", **body}).encode()))
    assert (answer.status, answer.body) == (201, {"job_id": "job-1", "status": "queued"})

    stored = stored_rows(python_rows)
    assert len(stored) == 1 and stored == stored_rows(http_rows)
    assert python_side.read("job-1") == http_side.read("job-1")


async def test_http_refuses_seconds_for_run_at_as_job_does() -> None:
    runtime, connection = sqlite3_owner()
    api = JobApi(token=TOKEN, owners=lambda key: RuntimeService(runtime))
    answer = await api.handle(ApiRequest(
        "POST", "/v1/owners/acme/jobs", {"authorization": f"Bearer {TOKEN}"},
        json.dumps({"jobs": [{"job_id": "ok", "queue": "q"},
                             {"job_id": "bad", "queue": "q", "run_at": 1_796_523_995}]}
                   ).encode()))
    assert answer.status == 400
    assert answer.body == {"error": {
        "code": "invalid_job", "field": "jobs[1].run_at",
        "message": "jobs[1].run_at: must be epoch milliseconds; 1796523995 looks like "
                   "seconds (multiply by 1000)"}}
    assert stored_rows(connection) == []
