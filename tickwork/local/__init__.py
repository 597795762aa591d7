"""The owner-local runtime: one synchronous SQLite owner, one process."""

from .runtime import ConcurrentOwnerRuntime, OwnerRuntime, TransactionalJobs

__all__ = ["ConcurrentOwnerRuntime", "OwnerRuntime", "TransactionalJobs"]
