"""Exceptions raised by tickwork.

Every error a caller can provoke with bad input derives from ``InvalidArgument``
(itself a ``ValueError``) and names the offending field; nothing stored is
changed when one is raised.
"""

from __future__ import annotations


class TickworkError(Exception):
    """Base class of every error tickwork raises on purpose."""


class InvalidArgument(TickworkError, ValueError):
    """An argument is malformed. ``field`` names it."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


class InvalidJob(InvalidArgument):
    """A job failed validation; nothing was written."""


class IngestConflict(TickworkError):
    """A job id was ingested again with different cargo; the stored job is untouched."""

    def __init__(self, job_id: str, fields: tuple[str, ...]) -> None:
        listed = ", ".join(fields)
        super().__init__(
            f"job {job_id!r} already exists with a different {listed}; "
            "a job id can only be replayed with identical cargo"
        )
        self.job_id = job_id
        self.fields = fields


class SchemaError(TickworkError):
    """The stored tickwork schema cannot be used by this version of the package."""


class DatabaseUnusable(TickworkError):
    """A transaction tickwork began on a database could not be ended: its COMMIT
    failed and so did every ROLLBACK since. Nothing tickwork reported as
    written is in it; the database refuses all work until the connection is out
    of that transaction."""
