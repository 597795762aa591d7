"""tickwork: a durable job engine for Cloudflare Workers Python and any SQLite owner."""

from .errors import IngestConflict, InvalidArgument, InvalidJob, SchemaError, TickworkError
from .jobs import Job, JobRecord, Recovery
from .local import OwnerRuntime
from .outcomes import (
    Cancelled,
    CancelResult,
    Completed,
    ExecutionResult,
    Failed,
    FailLaneResult,
    OutcomeUnknown,
    QueueTransition,
    TickResult,
)
from .signals import AbortSignal

__all__ = [
    "AbortSignal",
    "CancelResult",
    "Cancelled",
    "Completed",
    "ExecutionResult",
    "FailLaneResult",
    "Failed",
    "IngestConflict",
    "InvalidArgument",
    "InvalidJob",
    "Job",
    "JobRecord",
    "OutcomeUnknown",
    "OwnerRuntime",
    "QueueTransition",
    "Recovery",
    "SchemaError",
    "TickResult",
    "TickworkError",
]
