"""What the plans report (``Report``), driven by scripted answers, and how
the synchronous driver holds reports until the commit. The behaviour suite
checks the events every real store makes from them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_operations import NO_SLOTS, Held, kinds, record, script
from tickwork import Job, Retry
from tickwork.lifecycle import operations
from tickwork.lifecycle.drive import Deferred, drive
from tickwork.lifecycle.requests import ClaimView, Insert, Probe, Report, event_of
from tickwork.lifecycle.rules import Settlement
from tickwork.model.jobs import validate_job


def reported(plan: Any, answers: list[Any]) -> tuple[list[str], list[Report]]:
    reports: list[Report] = []
    asked, _ = script(plan, answers, reports)
    return kinds(asked), reports


def test_ingest_reports_a_new_job_only() -> None:
    _, reports = reported(operations.ingest(Job("a", "q", "l", 0, {})), [True, None])
    assert [(report.kind, report.subject.job_id) for report in reports] == [("ingested", "a")]
    stored = validate_job(Job("a", "q", "l", 0, {}))
    _, reports = reported(operations.ingest(Job("a", "q", "l", 0, {})), [False, stored, None])
    assert reports == []


def test_a_tick_reports_the_claim_then_the_settlement() -> None:
    held = Held(record())
    asked, reports = reported(operations.tick("t"), [
        NO_SLOTS, (held, None), (Settlement("failed", "nope"), None), (True, None), None])
    assert asked == ["DueSchedules", "ClaimOrProbe", "Execute", "Settle", "Wake"]
    assert [(report.kind, report.subject, report.settlement) for report in reports] == [
        ("claimed", held, None), ("settled", held, Settlement("failed", "nope"))]


@pytest.mark.parametrize("answers", [
    [NO_SLOTS, (Held(record()), None), (Settlement("failed", "nope"), None), (True, None), None],
    # a retry policy retries the attempt: the job is queued for its next one
    [NO_SLOTS, (Held(record()._replace(retry=Retry(attempts=3))), None),
     (Settlement("failed", "nope"), None), record(state="queued")._replace(due_at=5_000),
     None],
])
def test_a_tick_that_nobody_hears_reports_only_the_attempts_end(answers: list[Any]) -> None:
    """With ``reporting=False`` (a runtime without an event hook) the common
    path asks the same requests but the claim's report, and decides the
    same: the attempt's end (its settlement or retry) is still reported, as
    the history counts the attempt from it."""
    reports: list[Report] = []
    unheard_reports: list[Report] = []
    heard, result = script(operations.tick("t"), list(answers), reports)
    unheard, same = script(operations.tick("t", reporting=False), list(answers),
                           unheard_reports)
    assert reports[0].kind == "claimed"
    assert [report.kind for report in unheard_reports] == [
        report.kind for report in reports[1:]] != []
    assert kinds(unheard) == kinds(heard) and same == result


def test_a_claim_its_lane_failure_settled_reports_no_second_settlement() -> None:
    # fail_lane reported the settlement; the tick finds it committed.
    _, reports = reported(operations.tick("t"), [
        NO_SLOTS, (Held(record()), None), (Settlement("completed"), None), (False, None),
        ClaimView(record(state="settled", outcome="failed"), "t1", False), None])
    assert [report.kind for report in reports] == ["claimed"]


def test_a_lane_refusal_reports_once_then_each_job() -> None:
    failed = [record("j1", state="settled", outcome="failed"),
              record("j2", state="settled", outcome="failed")]
    _, reports = reported(operations.fail_lane("lane", "gone"), [(failed, None), None, None,
                                                                 None])
    assert [(report.kind, report.count, report.reason, report.lane) for report in reports] == [
        ("refused", 2, "gone", "lane"), ("settled", None, None, None),
        ("settled", None, None, None)]
    _, reports = reported(operations.fail_lane("lane", "gone"), [([], False), None])
    assert reports == []


def test_a_cancelled_waiting_job_reports_its_settlement() -> None:
    cancelled = record(state="settled", outcome="cancelled")
    _, reports = reported(operations.tick("t"), [
        NO_SLOTS, (None, Probe(None, True, True)), cancelled, None])
    assert [(report.kind, report.subject) for report in reports] == [("settled", cancelled)]


def test_an_event_is_built_from_what_the_plan_had() -> None:
    held = Held(record())
    event = event_of(Report("settled", held, Settlement("failed", "nope")), 50, 40)
    assert (event.kind, event.job_id, event.queue, event.lane, event.at, event.outcome,
            event.reason, event.attempt, event.duration_ms) == (
        "settled", "a", "q", "lane", 50, "failed", "nope", 1, 40)
    refused = event_of(Report("refused", None, reason="gone", count=3, lane="lane"), 7)
    assert (refused.job_id, refused.queue, refused.lane, refused.reason, refused.count) == (
        None, None, "lane", "gone", 3)
    queued = event_of(Report("ingested", validate_job(Job("b", "q2", "l2", 0, {}))), 8)
    assert (queued.job_id, queued.queue, queued.lane, queued.outcome, queued.attempt) == (
        "b", "q2", "l2", None, None)


class RolledBack(Exception):
    pass


@pytest.mark.parametrize("commits", [True, False])
def test_the_synchronous_driver_reports_only_after_the_commit(commits: bool) -> None:
    delivered: list[Deferred] = []
    log: list[str] = []

    def transaction(step: Any) -> None:
        step()
        if not commits:
            raise RolledBack
        log.append("commit")

    def after_commit(deferred: Deferred) -> None:
        log.append("after")
        delivered.append(deferred)

    plan = operations.ingest(Job("a", "q", "l", 0, {}))
    if commits:
        assert drive(plan, {Insert: lambda r: True}, transaction=transaction,
                     after_commit=after_commit) == "queued"
        assert log == ["commit", "after"]
        [deferred] = delivered
        assert [report.kind for report in deferred.reports] == ["ingested"]
        assert deferred.wake
    else:
        with pytest.raises(RolledBack):
            drive(plan, {Insert: lambda r: True}, transaction=transaction,
                  after_commit=after_commit)
        assert delivered == [] and log == []
