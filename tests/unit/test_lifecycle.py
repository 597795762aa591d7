"""The pure lifecycle decisions in tickwork.lifecycle."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tickwork import (
    Cancelled,
    Completed,
    ErrorSummary,
    Failed,
    JobRecord,
    OutcomeUnknown,
    Recovery,
    lifecycle,
    summarize_exception,
)
from tickwork.lifecycle import Settlement
from tickwork.model.jobs import JobState, Outcome


def record(
    state: JobState = "queued",
    *,
    outcome: Outcome | None = None,
    failure_reason: str | None = None,
    recovery: Recovery | None = None,
    recoveries: int = 0,
    cancellation_id: str | None = None,
) -> JobRecord:
    return JobRecord(
        job_id="job",
        queue="q",
        lane="lane",
        priority=0,
        payload={},
        recovery=recovery,
        state=state,
        outcome=outcome,
        failure_reason=failure_reason,
        sequence=1,
        recoveries=recoveries,
        enqueued_at=1,
        started_at=None if state == "queued" else 2,
        settled_at=3 if state == "settled" else None,
        cancellation_id=cancellation_id,
    )


# ------------------------------------------------------------------ constants


def test_reason_codes() -> None:
    assert lifecycle.EXECUTION_FAILED == "execution_failed"
    assert lifecycle.EXECUTION_INTERRUPTED == "execution_interrupted"
    assert lifecycle.INVALID_OUTCOME == "invalid_outcome"
    assert lifecycle.ABORT_CANCELLED == "cancelled"
    assert lifecycle.ABORT_LANE_FAILED == "lane_failed"
    assert lifecycle.ABORT_INTERRUPTED == "interrupted"


def test_settlement_defaults_to_no_reason_and_is_frozen() -> None:
    settlement = Settlement("completed")
    assert settlement.failure_reason is None
    with pytest.raises(AttributeError):
        settlement.outcome = "failed"  # type: ignore[misc]


# ------------------------------------------------------------- decide_cancel


def test_cancel_of_a_missing_job_is_not_found() -> None:
    decision = lifecycle.decide_cancel(None, "c1", only_if_queued=False)
    assert (decision.status, decision.record) == ("not_found", False)
    decision = lifecycle.decide_cancel(None, "c1", only_if_queued=True)
    assert (decision.status, decision.record) == ("not_found", False)


@pytest.mark.parametrize("only_if_queued", [False, True])
def test_cancel_of_a_queued_job_is_recorded(only_if_queued: bool) -> None:
    decision = lifecycle.decide_cancel(record("queued"), "c1", only_if_queued=only_if_queued)
    assert (decision.status, decision.record) == ("recorded", True)


def test_cancel_of_a_running_job_is_recorded() -> None:
    decision = lifecycle.decide_cancel(record("running"), "c1", only_if_queued=False)
    assert (decision.status, decision.record) == ("recorded", True)


def test_only_if_queued_refuses_a_running_job() -> None:
    decision = lifecycle.decide_cancel(record("running"), "c1", only_if_queued=True)
    assert (decision.status, decision.record) == ("refused", False)


@pytest.mark.parametrize("only_if_queued", [False, True])
@pytest.mark.parametrize(
    "outcome", ["completed", "failed", "cancelled", "outcome_unknown", "interrupted"]
)
def test_cancel_of_a_settled_job_is_already_settled(
    outcome: Outcome, only_if_queued: bool
) -> None:
    job = record("settled", outcome=outcome)
    decision = lifecycle.decide_cancel(job, "c1", only_if_queued=only_if_queued)
    assert (decision.status, decision.record) == ("already_settled", False)


@pytest.mark.parametrize("only_if_queued", [False, True])
@pytest.mark.parametrize("state", ["queued", "running", "settled"])
def test_the_same_cancellation_id_replays(state: JobState, only_if_queued: bool) -> None:
    outcome: Outcome | None = "cancelled" if state == "settled" else None
    job = record(state, outcome=outcome, cancellation_id="c1")
    decision = lifecycle.decide_cancel(job, "c1", only_if_queued=only_if_queued)
    assert (decision.status, decision.record) == ("replayed", False)


@pytest.mark.parametrize("only_if_queued", [False, True])
@pytest.mark.parametrize("state", ["queued", "running", "settled"])
def test_another_cancellation_id_conflicts(state: JobState, only_if_queued: bool) -> None:
    outcome: Outcome | None = "cancelled" if state == "settled" else None
    job = record(state, outcome=outcome, cancellation_id="c1")
    decision = lifecycle.decide_cancel(job, "c2", only_if_queued=only_if_queued)
    assert (decision.status, decision.record) == ("conflict", False)


def test_cancel_decision_is_frozen() -> None:
    decision = lifecycle.decide_cancel(None, "c1", only_if_queued=False)
    with pytest.raises(AttributeError):
        decision.record = True  # type: ignore[misc]


# ----------------------------------------------------------- decide_recovery


def test_recovery_without_a_policy_interrupts() -> None:
    assert lifecycle.decide_recovery(record("running")) == "interrupt"


def test_recovery_with_budget_left_requeues() -> None:
    assert lifecycle.decide_recovery(record("running", recovery=Recovery(1))) == "requeue"
    job = record("running", recovery=Recovery(3), recoveries=2)
    assert lifecycle.decide_recovery(job) == "requeue"


def test_recovery_with_budget_spent_interrupts() -> None:
    assert lifecycle.decide_recovery(record("running", recovery=Recovery(0))) == "interrupt"
    job = record("running", recovery=Recovery(2), recoveries=2)
    assert lifecycle.decide_recovery(job) == "interrupt"
    job = record("running", recovery=Recovery(2), recoveries=5)
    assert lifecycle.decide_recovery(job) == "interrupt"


@pytest.mark.parametrize("recovery", [None, Recovery(0), Recovery(5)])
def test_recovery_of_a_cancelled_job_cancels(recovery: Recovery | None) -> None:
    job = record("running", recovery=recovery, cancellation_id="c1")
    assert lifecycle.decide_recovery(job) == "cancel"


def test_recovery_settlements() -> None:
    assert lifecycle.recovery_settlement("cancel") == Settlement("cancelled")
    assert lifecycle.recovery_settlement("interrupt") == Settlement("interrupted")
    assert lifecycle.recovery_settlement("interrupt").failure_reason is None


# ------------------------------------------------------- settlement mappings


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (Completed(), Settlement("completed")),
        (Failed(), Settlement("failed", None)),
        (Failed("quota"), Settlement("failed", "quota")),
        (Cancelled(), Settlement("cancelled")),
        (OutcomeUnknown(), Settlement("outcome_unknown")),
    ],
)
def test_settlement_for_result(result: object, expected: Settlement) -> None:
    assert lifecycle.settlement_for_result(result) == expected


@pytest.mark.parametrize(
    "result", [None, "done", True, 0, {"outcome": "completed"}, Completed, [Completed()]]
)
def test_settlement_for_a_non_outcome_is_invalid_outcome(result: Any) -> None:
    settlement = lifecycle.settlement_for_result(result)
    assert (settlement.outcome, settlement.failure_reason) == ("failed", "invalid_outcome")
    # What was returned, named as a TypeError; nothing was raised, so no traceback.
    assert settlement.error == ErrorSummary(
        "TypeError", f"the executor returned {type(result).__qualname__}, not an outcome "
        "(Completed, Failed, Cancelled, OutcomeUnknown or RateLimited)", "")


@pytest.mark.parametrize(
    "error", [RuntimeError("boom"), ValueError(), KeyboardInterrupt(), Exception("x")]
)
def test_settlement_for_an_exception_is_execution_failed(error: BaseException) -> None:
    assert lifecycle.settlement_for_exception(error) == Settlement(
        "failed", "execution_failed", error=summarize_exception(error))
    assert lifecycle.settlement_for_exception(error).error == ErrorSummary(
        type(error).__name__, str(error), f"{type(error).__name__}: {error}\n"
        if str(error) else f"{type(error).__name__}\n")


def test_settlement_for_an_interruption_is_execution_interrupted() -> None:
    assert lifecycle.settlement_for_exception(asyncio.CancelledError()) == Settlement(
        "failed", "execution_interrupted"
    )


def test_a_raise_under_cancellation_settles_cancelled_with_its_error() -> None:
    raised = lifecycle.settlement_for_exception(ValueError("late"))
    assert lifecycle.settlement_under_cancellation(raised) == Settlement(
        "cancelled", error=ErrorSummary("ValueError", "late", "ValueError: late\n"))


def test_a_completion_under_cancellation_settles_cancelled_and_says_so() -> None:
    assert lifecycle.settlement_under_cancellation(Settlement("completed")) == Settlement(
        "cancelled", "executor_completed")


@pytest.mark.parametrize(
    "settlement",
    [
        Settlement("failed", "stopped"),
        Settlement("failed", "execution_failed"),
        Settlement("failed", "execution_interrupted"),
        Settlement("failed", "invalid_outcome"),
        Settlement("failed"),
        Settlement("outcome_unknown"),
        Settlement("cancelled"),
        Settlement("interrupted"),
    ],
)
def test_anything_else_under_cancellation_is_cancelled(settlement: Settlement) -> None:
    result = lifecycle.settlement_under_cancellation(settlement)
    assert result == Settlement("cancelled")
    assert result.failure_reason is None
