"""The job lifecycle, written once for every runtime (sans-I/O).

* ``rules``: what to do, as plain functions (outcomes, cancellation,
  recovery);
* ``operations``: each operation (ingest, cancel, fail_lane, purge, the reads,
  the tick with its recovery and careful settlement) as one plan that yields
  requests and is sent their answers;
* ``requests``: what a plan may ask, and what each answer is;
* ``drive``: the loops that run a plan, synchronously or with ``await``.

No module here performs I/O: the runtimes (``tickwork.runtimes``) answer the
requests from their stores.
"""

from tickwork.lifecycle.rules import (
    ABORT_CANCELLED,
    ABORT_INTERRUPTED,
    ABORT_LANE_FAILED,
    CLAIM_REPLACED,
    EXECUTION_FAILED,
    EXECUTION_INTERRUPTED,
    EXECUTOR_COMPLETED,
    FAIL_LANE_BATCH,
    INVALID_OUTCOME,
    LEASE_EXPIRED,
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
    "ABORT_LANE_FAILED",
    "CLAIM_REPLACED",
    "EXECUTION_FAILED",
    "EXECUTION_INTERRUPTED",
    "EXECUTOR_COMPLETED",
    "FAIL_LANE_BATCH",
    "INVALID_OUTCOME",
    "LEASE_EXPIRED",
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
