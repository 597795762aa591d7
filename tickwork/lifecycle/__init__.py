"""The job lifecycle, written once for every runtime.

* ``decisions``: what to do, as plain functions (outcomes, cancellation,
  recovery); no I/O.
* ``plans``: each operation (ingest, cancel, lane failure, purge, the tick,
  recovery, the careful settlement) as one plan that asks for store
  operations and receives their answers (sans-I/O); a runtime drives a plan,
  synchronously inside an owner transaction or with ``await``.
"""

from tickwork.lifecycle.rules import (
    ABORT_CANCELLED,
    ABORT_INTERRUPTED,
    ABORT_LANE_REFUSED,
    EXECUTION_FAILED,
    EXECUTION_INTERRUPTED,
    EXECUTOR_COMPLETED,
    INVALID_OUTCOME,
    CancelDecision,
    RecoveryAction,
    Settlement,
    decide_cancel,
    decide_recovery,
    recovery_settlement,
    settlement_for_exception,
    settlement_for_result,
    settlement_under_cancellation,
)

__all__ = [
    "ABORT_CANCELLED",
    "ABORT_INTERRUPTED",
    "ABORT_LANE_REFUSED",
    "EXECUTION_FAILED",
    "EXECUTION_INTERRUPTED",
    "EXECUTOR_COMPLETED",
    "INVALID_OUTCOME",
    "CancelDecision",
    "RecoveryAction",
    "Settlement",
    "decide_cancel",
    "decide_recovery",
    "recovery_settlement",
    "settlement_for_exception",
    "settlement_for_result",
    "settlement_under_cancellation",
]
