"""tickwork: a durable job engine for Cloudflare Workers Python and any SQLite owner."""

from .errors import (
    IngestConflict,
    InvalidArgument,
    InvalidJob,
    OwnerUnusable,
    SchemaError,
    TickworkError,
)
from .jobs import Job, JobRecord, Recovery
from .leases import (
    DEFAULT_LEASE_MS,
    DEFAULT_RENEW_EVERY_MS,
    Heartbeat,
    LeaseKeeper,
    StaleLease,
    StaleReason,
)
from .local import ConcurrentOwnerRuntime, OwnerRuntime
from .outcomes import (
    Cancelled,
    CancelResult,
    Completed,
    ExecutionResult,
    Failed,
    FailLaneResult,
    OutcomeUnknown,
    QueueStatus,
    QueueTransition,
    TickResult,
)
from .signals import AbortSignal

__all__ = [
    "DEFAULT_LEASE_MS",
    "DEFAULT_RENEW_EVERY_MS",
    "AbortSignal",
    "CancelResult",
    "Cancelled",
    "Completed",
    "ConcurrentOwnerRuntime",
    "ExecutionResult",
    "FailLaneResult",
    "Failed",
    "Heartbeat",
    "IngestConflict",
    "InvalidArgument",
    "InvalidJob",
    "Job",
    "JobRecord",
    "LeaseKeeper",
    "OutcomeUnknown",
    "OwnerRuntime",
    "OwnerUnusable",
    "QueueStatus",
    "QueueTransition",
    "Recovery",
    "SchemaError",
    "StaleLease",
    "StaleReason",
    "TickResult",
    "TickworkError",
]
