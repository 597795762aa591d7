"""The lifecycle's operations as plans, driven by scripted answers (no store at all).

Each test plays a runtime: it answers the plan's requests one by one and
checks what the plan asks, in what order, and what it decides. The behaviour
suite runs the same plans over every real store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.support import unchecked_job
from tickwork import IngestConflict, InvalidArgument, InvalidJob, Job, JobRecord, Recovery
from tickwork.lifecycle import operations
from tickwork.lifecycle.drive import Deferred, drive, drive_async
from tickwork.lifecycle.requests import (
    ALIVE,
    DEAD,
    Abort,
    AskLiveness,
    Claim,
    ClaimOrProbe,
    ClaimView,
    Commit,
    Execute,
    FailLane,
    Find,
    FindCargo,
    Insert,
    InsertMany,
    LaneHasPending,
    Probe,
    ReadClaim,
    RecordCancellation,
    Report,
    Request,
    Requeue,
    Settle,
    SettleNextCancelled,
    SettleRecovered,
    Suspect,
    Wake,
)
from tickwork.lifecycle.rules import FAIL_LANE_BATCH, Settlement
from tickwork.model.jobs import validate_job
from tickwork.model.outcomes import TickResult

#: The answer to a tick's first request when no schedule slot has come.
NO_SLOTS: tuple[list[Any], None] = ([], None)


def record(job_id: str = "a", state: str = "running", cancellation_id: str | None = None,
           recovery: Recovery | None = None, recoveries: int = 0,
           outcome: str | None = None) -> JobRecord:
    return JobRecord(job_id, "q", "lane", 0, {}, recovery, state, outcome,  # type: ignore[arg-type]
                     None, 1, recoveries, 0, 10 if state == "running" else None, None,
                     cancellation_id)


@dataclass
class Held:
    job: JobRecord
    token: str = "t1"


def script(plan: Any, answers: list[Any],
           reports: list[Report] | None = None) -> tuple[list[Request], Any]:
    """Run ``plan``, answering its requests with ``answers`` in order (an
    exception instance is thrown into the plan); the requests and the result.

    ``Report`` requests (answered None) are left out of the requests, and
    collected in ``reports`` when given: tests/unit/test_event_reports.py
    checks them."""
    asked: list[Request] = []
    value: Any = None
    error: BaseException | None = None
    pending = list(answers)
    while True:
        try:
            request = plan.throw(error) if error is not None else plan.send(value)
        except StopIteration as stop:
            assert not pending, f"answers left over: {pending}"
            return asked, stop.value
        if isinstance(request, Report):
            if reports is not None:
                reports.append(request)
            value = error = None
            continue
        asked.append(request)
        answer = pending.pop(0)
        value, error = (None, answer) if isinstance(answer, BaseException) else (answer, None)


def kinds(requests: list[Request]) -> list[str]:
    return [type(request).__name__ for request in requests]


# ------------------------------------------------------------------ ingest


def test_a_new_job_is_inserted_and_wakes_the_host() -> None:
    asked, status = script(operations.ingest(Job("a", "q", "q", 0, {"k": 1})), [True, None])
    assert status == "queued"
    assert kinds(asked) == ["Insert", "Wake"]
    assert isinstance(asked[0], Insert) and asked[0].job.payload_json == '{"k":1}'


def test_a_replay_compares_cargo_then_wakes() -> None:
    """The wake is asked on a replay too: the first ingest may have stored
    the job and died before its wake."""
    job = Job("a", "q", "q", 0, {})
    asked, status = script(operations.ingest(job), [False, validate_job(job), None])
    assert (status, kinds(asked)) == ("duplicate", ["Insert", "FindCargo", "Wake"])


def test_a_replay_with_other_cargo_conflicts_naming_the_fields() -> None:
    stored = validate_job(Job("a", "q", "q", 5, {"x": 1}))
    with pytest.raises(IngestConflict) as caught:
        script(operations.ingest(Job("a", "q", "q", 0, {})), [False, stored])
    assert caught.value.fields == ("priority", "payload")


def test_a_job_purged_between_insert_and_compare_is_inserted_again() -> None:
    asked, status = script(operations.ingest(Job("a", "q", "q", 0, {})),
                           [False, None, True, None])
    assert status == "queued"
    assert kinds(asked) == ["Insert", "FindCargo", "Insert", "Wake"]


def test_bad_input_is_refused_before_any_request() -> None:
    plan = operations.ingest(unchecked_job("", "q", "q", 0, {}))
    with pytest.raises(InvalidJob, match="job_id"):
        next(plan)
    with pytest.raises(InvalidArgument, match="queue"):
        next(operations.purge(""))
    with pytest.raises(InvalidArgument, match="only_if_queued"):
        next(operations.cancel("a", "c", only_if_queued="yes"))  # type: ignore[arg-type]


def test_ingest_many_asks_again_until_the_store_decides() -> None:
    jobs = [Job("a", "q", "q", 0, {}), Job("b", "q", "q", 0, {})]
    asked, statuses = script(operations.ingest_many(jobs), [None, [True, False], None])
    assert statuses == ["queued", "duplicate"]
    assert kinds(asked) == ["InsertMany", "InsertMany", "Wake"]
    with pytest.raises(RuntimeError, match="converge"):
        script(operations.ingest_many(jobs), [None] * operations.MAX_ROUNDS)


# ------------------------------------------------------------------ cancel


def test_cancel_records_then_aborts_the_local_execution_then_wakes() -> None:
    asked, result = script(operations.cancel("a", "c1"), [record(state="queued"), True,
                                                           None, None])
    assert (result.status, kinds(asked)) == ("recorded",
                                             ["Find", "RecordCancellation", "Abort", "Wake"])
    assert asked[2] == Abort(("a",), "cancelled")


def test_cancel_decides_again_when_its_fenced_write_matched_nothing() -> None:
    # The job started between the read and the write: with only_if_queued
    # the second look refuses.
    asked, result = script(operations.cancel("a", "c1", only_if_queued=True),
                           [record(state="queued"), False, record(state="running")])
    assert result.status == "refused"
    assert kinds(asked) == ["Find", "RecordCancellation", "Find"]
    assert isinstance(asked[1], RecordCancellation) and asked[1].only_if_queued


@pytest.mark.parametrize(("stored", "status"), [
    (None, "not_found"),
    (record(state="settled", outcome="completed"), "already_settled"),
    (record(cancellation_id="c1"), "replayed"),
    (record(cancellation_id="other"), "conflict"),
])
def test_cancel_writes_nothing_when_the_rules_say_so(stored: JobRecord | None,
                                                      status: str) -> None:
    asked, result = script(operations.cancel("a", "c1"), [stored])
    assert (result.status, kinds(asked)) == (status, ["Find"])


# --------------------------------------------------------------- fail_lane


def test_fail_lane_commits_before_it_aborts_and_asks_for_more_only_after_a_full_batch() -> None:
    failed = [record(f"j{n}") for n in range(FAIL_LANE_BATCH)]
    asked, result = script(operations.fail_lane("lane", "gone"),
                           [(failed, None), None, None, None, True])
    assert kinds(asked) == ["FailLane", "Commit", "Abort", "Wake", "LaneHasPending"]
    assert (result.settled, result.more) == (FAIL_LANE_BATCH, True)
    asked, result = script(operations.fail_lane("lane", "gone"),
                           [(failed[:3], None), None, None, None])
    assert kinds(asked) == ["FailLane", "Commit", "Abort", "Wake"]
    assert (result.settled, result.more) == (3, False)


def test_a_failing_more_read_after_the_commit_never_becomes_an_error() -> None:
    failed = [record(f"j{n}") for n in range(FAIL_LANE_BATCH)]
    asked, result = script(operations.fail_lane("lane", "gone"),
                           [(failed, None), None, None, None, OSError("disk")])
    assert kinds(asked)[-1] == "LaneHasPending"
    assert (result.settled, result.more) == (FAIL_LANE_BATCH, True)


def test_a_store_that_knows_whether_more_remain_is_not_asked() -> None:
    asked, result = script(operations.fail_lane("lane", "gone"), [([], False), None])
    assert kinds(asked) == ["FailLane", "Commit"]
    assert (result.settled, result.more) == (0, False)


# -------------------------------------------------------------------- tick


def test_the_common_tick_is_claim_execute_settle_wake() -> None:
    held = Held(record())
    asked, (result, carried) = script(operations.tick("ticker"), [
        NO_SLOTS, (held, None), (Settlement("completed"), None), (True, None), None])
    assert kinds(asked) == ["DueSchedules", "ClaimOrProbe", "Execute", "Settle", "Wake"]
    assert result == TickResult("settled", job_id="a", outcome="completed")
    assert carried is None


def test_an_idle_tick_asks_once() -> None:
    asked, (result, _) = script(operations.tick("ticker"), [
        NO_SLOTS, (None, Probe(None, False, False))])
    assert (kinds(asked), result) == (["DueSchedules", "ClaimOrProbe"], TickResult("idle"))


def test_recovery_of_an_expired_lease_comes_first_and_is_the_ticks_one_transition() -> None:
    suspect = Suspect(record(recovery=Recovery(1)), "old", lease_expired=True)
    asked, (result, _) = script(operations.tick(None), [
        NO_SLOTS, (None, Probe(suspect, True, True)), True, None])
    assert kinds(asked) == ["DueSchedules", "ClaimOrProbe", "Requeue", "Wake"]
    assert result == TickResult("requeued", job_id="a")


def test_an_owner_local_suspect_is_asked_about_and_read_again_before_recovery() -> None:
    suspect = Suspect(record(), "old", lease_expired=False)
    cancelled_meanwhile = record(cancellation_id="c1")
    settled = record(state="settled", outcome="cancelled", cancellation_id="c1")
    asked, (result, _) = script(operations.tick("ticker"), [
        NO_SLOTS, (None, Probe(suspect, False, True)), DEAD, cancelled_meanwhile, settled, None])
    assert kinds(asked) == ["DueSchedules", "ClaimOrProbe", "AskLiveness", "Find",
                            "SettleRecovered", "Wake"]
    assert isinstance(asked[4], SettleRecovered)
    assert asked[4].settlement == Settlement("cancelled")
    assert result.outcome == "cancelled"


def test_an_alive_suspect_lets_the_tick_claim_unguarded() -> None:
    suspect = Suspect(record("other"), "old", lease_expired=False)
    held = Held(record("b"))
    asked, (result, _) = script(operations.tick("ticker"), [
        NO_SLOTS, (None, Probe(suspect, False, True)), ALIVE, held,
        (Settlement("completed"), None), (True, None), None])
    assert kinds(asked) == ["DueSchedules", "ClaimOrProbe", "AskLiveness", "Claim", "Execute",
                            "Settle", "Wake"]
    assert result.job_id == "b"


def test_an_unanswerable_probe_is_reported_only_when_nothing_else_runs() -> None:
    suspect = Suspect(record("other"), "old", lease_expired=False)
    asked, (result, _) = script(operations.tick("ticker"), [
        NO_SLOTS, (None, Probe(suspect, False, True)), "TimeoutError: slow", None])
    assert kinds(asked) == ["DueSchedules", "ClaimOrProbe", "AskLiveness", "Claim"]
    assert result == TickResult("liveness_unknown", job_id="other", reason="TimeoutError: slow")


def test_a_cancelled_waiting_job_settles_before_any_claim() -> None:
    asked, (result, _) = script(operations.tick("ticker"), [
        NO_SLOTS, (None, Probe(None, True, True)), record(state="settled", outcome="cancelled"),
        None])
    assert kinds(asked) == ["DueSchedules", "ClaimOrProbe", "SettleNextCancelled", "Wake"]
    assert result.outcome == "cancelled"


def test_a_cancellation_recorded_while_running_decides_the_outcome() -> None:
    held = Held(record())
    asked, (result, _) = script(operations.tick("ticker"), [
        NO_SLOTS, (held, None), (Settlement("completed"), None), (False, None),
        ClaimView(record(cancellation_id="c1"), "t1", lease_live=True), (True, None), None])
    assert kinds(asked) == ["DueSchedules", "ClaimOrProbe", "Execute", "Settle", "ReadClaim",
                            "Settle", "Wake"]
    final = asked[5]
    assert isinstance(final, Settle) and final.cancelled
    assert final.settlement == Settlement("cancelled", "executor_completed")
    assert (result.outcome, result.failure_reason) == ("cancelled", "executor_completed")


@pytest.mark.parametrize(("view", "expected"), [
    (None, TickResult("idle", job_id="a", reason="claim_replaced")),
    (ClaimView(record(), "someone-else", True),
     TickResult("idle", job_id="a", reason="claim_replaced")),
    (ClaimView(record(), "t1", lease_live=False),
     TickResult("idle", job_id="a", reason="lease_expired")),
    (ClaimView(record(state="settled", outcome="failed"), "t1", False),
     TickResult("settled", job_id="a", outcome="failed")),
])
def test_a_settlement_that_matched_nothing_reports_why(view: ClaimView | None,
                                                       expected: TickResult) -> None:
    _, (result, _) = script(operations.tick("ticker"), [
        NO_SLOTS, (Held(record()), None), (Settlement("completed"), None), (False, None), view,
        None])
    assert result == expected


def test_an_interrupted_execution_is_recorded_then_reraised() -> None:
    interruption = asyncio.CancelledError()
    plan = operations.tick("ticker")
    with pytest.raises(asyncio.CancelledError):
        script(plan, [NO_SLOTS, (Held(record()), None),
                      (Settlement("failed", "execution_interrupted"), interruption),
                      (True, None), None])


def test_a_worker_loop_claims_the_next_job_in_the_settlement() -> None:
    nxt = Held(record("b"), "t2")
    asked, (_, carried) = script(operations.tick(None, claim_next=True), [
        NO_SLOTS, (Held(record()), None), (Settlement("completed"), None), (True, nxt), None])
    settle = asked[3]
    assert isinstance(settle, Settle) and settle.claim_next
    assert carried is nxt


# ------------------------------------------------------------------ drivers


def answers_for(log: list[str]) -> dict[type[Request], Callable[[Any], Any]]:
    return {
        FailLane: lambda r: (log.append("fail_lane"), ([record("x")], None))[1],
        Insert: lambda r: (log.append("insert"), True)[1],
    }


def test_the_sync_driver_commits_before_waking_and_aborting() -> None:
    log: list[str] = []

    def transaction(step: Callable[[], None]) -> None:
        log.append("begin")
        step()
        log.append("commit")

    def after_commit(deferred: Deferred) -> None:
        log.append(f"after: wake={deferred.wake} aborts={len(deferred.aborts)}")

    result = drive(operations.fail_lane("lane", "gone"), answers_for(log),
                   transaction=transaction, after_commit=after_commit)
    assert (result.settled, result.more) == (1, False)
    # The failure commits first; the aborts and the wake it asked for come
    # after the second transaction (the reads after the commit) ended.
    assert log == ["begin", "fail_lane", "commit", "begin", "commit",
                   "after: wake=True aborts=1"]


def test_the_sync_driver_drops_what_a_rolled_back_change_asked_for() -> None:
    def failing(request: Insert) -> bool:
        raise OSError("disk full")

    heard: list[Deferred] = []
    with pytest.raises(OSError, match="disk full"):
        drive(operations.ingest(Job("a", "q", "q", 0, {})), {Insert: failing},
              transaction=lambda step: step(), after_commit=heard.append)
    assert heard == []


async def test_the_async_driver_awaits_only_what_it_is_told_to() -> None:
    async def insert(request: Insert) -> bool:
        return True

    woken: list[Wake] = []
    status = await drive_async(operations.ingest(Job("a", "q", "q", 0, {})),
                               {Insert: insert, Wake: woken.append, Report: lambda r: None},
                               awaited={Insert})
    assert status == "queued" and len(woken) == 1


async def test_the_async_driver_checks_before_the_first_answer_but_after_validation() -> None:
    checked: list[str] = []

    async def check() -> None:
        checked.append("schema")

    with pytest.raises(InvalidArgument):
        await drive_async(operations.purge(""), {}, before_first=check)
    assert checked == []
    await drive_async(operations.purge("q"), {type(operations.purge("q").send(None)): lambda r: 0},
                      before_first=check)
    assert checked == ["schema"]


def test_every_request_kind_a_plan_can_ask_has_a_documented_answer() -> None:
    kinds_asked = {Find, FindCargo, Insert, InsertMany, RecordCancellation, FailLane,
                   LaneHasPending, Commit, Abort, Wake, ClaimOrProbe, Claim, AskLiveness,
                   Requeue, SettleRecovered, SettleNextCancelled, Execute, Settle, ReadClaim,
                   Report}
    for kind in kinds_asked:
        assert kind.__doc__ and "->" in kind.__doc__, kind.__name__


@pytest.mark.parametrize("fields", [
    ("settled", "a", "completed", None, None),
    ("settled", "b", "failed", "boom", None),
    ("retried", "c", "failed", None, 1_700_000_000_000),
])
def test_ran_result_is_the_tick_result_it_stands_for(
        fields: tuple[Any, str, Any, str | None, int | None]) -> None:
    from tickwork.model.outcomes import TickResult, ran_result

    status, job_id, outcome, failure_reason, retry_at = fields
    built = ran_result(status, job_id, outcome, failure_reason, retry_at)
    made = TickResult(status, job_id=job_id, outcome=outcome, failure_reason=failure_reason,
                      retry_at=retry_at)
    assert (built, hash(built), repr(built)) == (made, hash(made), repr(made))
    with pytest.raises(AttributeError):
        built.status = "idle"  # type: ignore[misc]  # still frozen


# --------------------------------------------------------- bulk redrive


def test_a_bulk_redrive_decides_on_the_page_it_read_without_reading_each_job_again() -> None:
    dead = record("a", state="settled", outcome="failed")
    asked, result = script(operations.redrive_dead_letters("q", "r-1", limit=2),
                           [[dead], False, record("a", state="queued"), None])
    assert kinds(asked) == ["DeadLetterPage", "RedriveApplied", "RecordRedrive", "Wake"]
    assert (result.redriven, result.replayed, result.refused, result.cursor) == (1, 0, 0, None)


def test_a_bulk_redrive_reads_a_job_again_when_it_changed_since_the_page() -> None:
    # The fenced write matched nothing (another redrive under the same id came
    # first): the job is read again and judged as it is now, a replay.
    dead = record("a", state="settled", outcome="failed")
    asked, result = script(operations.redrive_dead_letters("q", "r-1"),
                           [[dead], False, None, record("a", state="queued"), True])
    assert kinds(asked) == ["DeadLetterPage", "RedriveApplied", "RecordRedrive", "Find",
                            "RedriveApplied"]
    assert (result.redriven, result.replayed, result.refused) == (0, 1, 0)


# --------------------------------------------------------- cancelling a lane


def test_cancel_lane_decides_on_the_page_it_read_and_aborts_nothing() -> None:
    # One listing, then one fenced write per queued job: no Find, and no
    # Abort (a queued-only cancellation never stops an execution).
    queued = record("a", state="queued")
    reports: list[Report] = []
    asked, result = script(operations.cancel_lane("lane", "c-1", limit=2),
                           [[queued], True, None], reports)
    assert kinds(asked) == ["ListJobs", "RecordCancellation", "Wake"]
    assert [(report.kind, report.subject) for report in reports] == [("cancelled", queued)]
    listing = asked[0]
    assert (listing.listing.by, listing.listing.state, listing.listing.newest) == (
        "lane", "queued", False)
    assert asked[1].only_if_queued is True
    assert (result.cancelled, result.replayed, result.skipped, result.cursor) == (1, 0, 0, None)


def test_cancel_lane_reads_a_job_again_when_it_started_since_the_page() -> None:
    # The fenced write matched nothing: the job was claimed meanwhile, so it
    # is read again and left running (skipped), and nothing wakes.
    queued = record("a", state="queued")
    asked, result = script(operations.cancel_lane("lane", "c-1", limit=1),
                           [[queued], False, record("a", state="running")])
    assert kinds(asked) == ["ListJobs", "RecordCancellation", "Find"]
    assert (result.cancelled, result.replayed, result.skipped) == (0, 0, 1)
    assert result.cursor is not None  # a full page: there may be more


# --------------------------------------------------------- why a job waits


def test_the_owner_hold_names_every_running_job_once_the_slots_are_taken() -> None:
    from tickwork.lifecycle.rules import decide_holds
    from tickwork.model.waiting import Hold

    job = record("b", state="queued")
    serial = {"paused": False, "queue_limit": 1, "ahead": ()}
    # Two slots, both taken: the queue's running job holds the queue, and
    # the owner hold names both running jobs (its count is the concurrency).
    holds = decide_holds(job, 0, **serial, queue_running=["a"], executing=["a", "x"])
    assert holds == (Hold("queue_busy", job_ids=("a",), limit=1),
                     Hold("owner_busy", job_ids=("a", "x")))
    assert holds[0].describe() == "its queue runs one job at a time and is running a"
    assert holds[1].describe() == "the owner is at its concurrency (2 running): a, x"
    # One slot, taken by the queue's own running job: the queue hold says it all.
    assert decide_holds(job, 0, **serial, queue_running=["a"], executing=["a"]) == (
        Hold("queue_busy", job_ids=("a",), limit=1),)
    # The job is its queue's head: nothing ahead of it, nothing running.
    assert decide_holds(job, 0, **serial, queue_running=[], executing=[]) == ()
    assert decide_holds(record("c", state="queued", cancellation_id="c-1"), 0, paused=True,
                        queue_limit=1, queue_running=["a"], ahead=(),
                        executing=["a"]) == (Hold("cancelled"),)


def test_a_job_is_held_by_its_queue_and_lane_limits_only_when_they_are_reached() -> None:
    from tickwork.lifecycle.rules import decide_holds
    from tickwork.model.waiting import Hold

    job = record("d", state="queued")
    # A queue of three places: two run, so one is free; one job ahead takes it.
    assert decide_holds(job, 0, paused=False, queue_limit=3, queue_running=["a", "b"],
                        ahead=["c"]) == (Hold("behind_head", job_ids=("c",)),)
    # Two places free and one job ahead: the job takes the other one.
    assert decide_holds(job, 0, paused=False, queue_limit=3, queue_running=["a"],
                        ahead=["c"]) == ()
    # Full: the queue hold names every running job and the limit.
    full = decide_holds(job, 0, paused=False, queue_limit=3, queue_running=["a", "b", "c"],
                        ahead=[])
    assert full == (Hold("queue_busy", job_ids=("a", "b", "c"), limit=3),)
    assert full[0].describe() == "its queue runs at most 3 jobs at once and is running a, b, c"
    # A lane at its limit holds the job whatever its queue says; below it, not.
    lane = decide_holds(job, 0, paused=False, queue_limit=3, queue_running=[], ahead=[],
                        lane_limit=2, lane_running=["x", "y"], executing=["x", "y"])
    assert lane == (Hold("lane_busy", job_ids=("x", "y"), limit=2),)
    assert lane[0].describe() == "its lane runs at most 2 jobs at once and is running x, y"
    assert decide_holds(job, 0, paused=False, queue_limit=3, queue_running=[], ahead=[],
                        lane_limit=2, lane_running=["x"]) == ()


def test_explain_reads_the_job_then_its_queue_and_settled_jobs_no_more() -> None:
    settled = record("a", state="settled", outcome="completed")
    asked, result = script(operations.explain("a"), [settled, 5])
    assert kinds(asked) == ["Find", "StoreNow"]
    assert (result.state, result.holds, result.read_at) == ("settled", (), 5)
    asked, result = script(operations.explain("b"), [None])
    assert (kinds(asked), result) == (["Find"], None)
