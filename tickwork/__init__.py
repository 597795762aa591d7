"""tickwork: a durable job engine for Cloudflare Workers Python and any SQLite owner."""

from tickwork.leases import (
    DEFAULT_LEASE_MS,
    DEFAULT_RENEW_EVERY_MS,
    Heartbeat,
    LeaseKeeper,
    StaleLease,
    StaleReason,
)
from tickwork.model.errors import (
    DatabaseUnusable,
    IngestConflict,
    InvalidArgument,
    InvalidJob,
    SchemaError,
    TickworkError,
)
from tickwork.model.jobs import Job, JobRecord, Recovery
from tickwork.model.outcomes import (
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
from tickwork.model.signals import AbortSignal
from tickwork.runtimes.owner_local import ConcurrentOwnerRuntime, OwnerRuntime

__all__ = [
    "DEFAULT_LEASE_MS",
    "DEFAULT_RENEW_EVERY_MS",
    "AbortSignal",
    "CancelResult",
    "Cancelled",
    "Completed",
    "ConcurrentOwnerRuntime",
    "DatabaseUnusable",
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
    "QueueStatus",
    "QueueTransition",
    "Recovery",
    "SchemaError",
    "StaleLease",
    "StaleReason",
    "TickResult",
    "TickworkError",
]
