"""tickwork: a durable job engine for Cloudflare Workers Python and any SQLite database.

Everything a program using tickwork needs is importable from here:

* the model: ``Job``, ``Recovery``, ``Retry``, ``JobRecord`` (with its
  ``Attempt`` history), ``Schedule`` and ``ScheduledJob``, the outcomes an executor
  returns, the results operations report, ``AbortSignal``, the errors;
* the runtimes: ``OwnerRuntime`` (one owner's SQLite database: Python's
  sqlite3 through ``Sqlite3Database``, a Durable Object's storage through
  ``DurableObjectDatabase``), and the shared ``D1Runtime`` and
  ``PostgresRuntime``, with their helpers for a producer's own batch or
  transaction.

See docs/reference/python-api.md.
"""

from tickwork._version import VERSION
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
from tickwork.model.failures import (
    MAX_ERROR_MESSAGE,
    MAX_ERROR_TRACEBACK,
    MAX_ERROR_TYPE,
    ErrorSummary,
    summarize_exception,
)
from tickwork.model.jobs import Attempt, Job, JobRecord, Recovery, Retry
from tickwork.model.limits import ConcurrencyLimit
from tickwork.model.outcomes import (
    Cancelled,
    CancelResult,
    Completed,
    DeadLetters,
    DeadLettersRedriven,
    ExecutionResult,
    Failed,
    FailLaneResult,
    HistoryPoint,
    JobPage,
    LaneCancelled,
    OutcomeUnknown,
    QueueBacklog,
    QueueHistory,
    QueueStatus,
    QueueTransition,
    RateLimited,
    RedriveResult,
    TickResult,
)
from tickwork.model.rate_limits import RateLimit
from tickwork.model.retention import RetentionPolicy, StorageReport
from tickwork.model.schedules import Schedule, ScheduledJob, ScheduleRecord
from tickwork.model.signals import AbortSignal, LeasedSignal
from tickwork.model.waiting import Hold, JobWait
from tickwork.runtimes.d1 import D1Runtime, purge_d1_queues
from tickwork.runtimes.owner_local import (
    ConcurrentOwnerRuntime,
    OwnerRuntime,
    TransactionalJobs,
)
from tickwork.runtimes.postgres import PostgresRuntime, purge_postgres_queues
from tickwork.runtimes.shared import SharedRuntime
from tickwork.stores.durable_object_database import DurableObjectDatabase
from tickwork.stores.sqlite3_database import Sqlite3Database

__version__ = VERSION

__all__ = [
    "DEFAULT_LEASE_MS",
    "DEFAULT_RENEW_EVERY_MS",
    "MAX_ERROR_MESSAGE",
    "MAX_ERROR_TRACEBACK",
    "MAX_ERROR_TYPE",
    "AbortSignal",
    "Attempt",
    "CancelResult",
    "Cancelled",
    "Completed",
    "ConcurrencyLimit",
    "ConcurrentOwnerRuntime",
    "D1Runtime",
    "DatabaseUnusable",
    "DeadLetters",
    "DeadLettersRedriven",
    "DurableObjectDatabase",
    "ErrorSummary",
    "ExecutionResult",
    "FailLaneResult",
    "Failed",
    "Heartbeat",
    "HistoryPoint",
    "Hold",
    "IngestConflict",
    "InvalidArgument",
    "InvalidJob",
    "Job",
    "JobPage",
    "JobRecord",
    "JobWait",
    "LaneCancelled",
    "LeaseKeeper",
    "LeasedSignal",
    "OutcomeUnknown",
    "OwnerRuntime",
    "PostgresRuntime",
    "QueueBacklog",
    "QueueHistory",
    "QueueStatus",
    "QueueTransition",
    "RateLimit",
    "RateLimited",
    "Recovery",
    "RedriveResult",
    "RetentionPolicy",
    "Retry",
    "Schedule",
    "ScheduleRecord",
    "ScheduledJob",
    "SchemaError",
    "SharedRuntime",
    "Sqlite3Database",
    "StaleLease",
    "StaleReason",
    "StorageReport",
    "TickResult",
    "TickworkError",
    "TransactionalJobs",
    "purge_d1_queues",
    "purge_postgres_queues",
    "summarize_exception",
]
