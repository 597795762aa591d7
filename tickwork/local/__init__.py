"""The owner-local runtime: one synchronous SQLite owner, one process."""

from .runtime import OwnerRuntime, TransactionalJobs

__all__ = ["OwnerRuntime", "TransactionalJobs"]
