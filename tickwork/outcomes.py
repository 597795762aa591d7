"""What an executor returns, and what the runtime's operations report."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from .jobs import JobRecord, Outcome, check_reason


@dataclass(frozen=True, slots=True)
class Completed:
    """The job did its work."""


@dataclass(frozen=True, slots=True)
class Failed:
    """The job failed; ``reason`` is an optional short code (1 to 256 characters).

    A bad reason raises ``InvalidArgument`` (a ``ValueError``) here, inside the
    executor, which then settles as ``execution_failed``.
    """

    reason: str | None = None

    def __post_init__(self) -> None:
        if self.reason is not None:
            check_reason("Failed.reason", self.reason)


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The job stopped because it was asked to."""


@dataclass(frozen=True, slots=True)
class OutcomeUnknown:
    """The job may or may not have had its effect (for example a timed-out request)."""


ExecutionResult: TypeAlias = Completed | Failed | Cancelled | OutcomeUnknown

TickStatus: TypeAlias = Literal["idle", "busy", "settled", "requeued", "liveness_unknown"]
CancelStatus: TypeAlias = Literal[
    "recorded", "replayed", "conflict", "refused", "not_found", "already_settled"
]
IngestStatus: TypeAlias = Literal["queued", "duplicate"]


@dataclass(frozen=True, slots=True)
class TickResult:
    """What one tick did.

    ``status``: ``idle`` (nothing to do), ``busy`` (a tick of this kind is in
    flight), ``settled`` (this tick settled ``job_id``), ``requeued`` (recovery
    put ``job_id`` back and nothing else ran) or ``liveness_unknown`` (the
    liveness probe for ``job_id`` raised; ``reason`` says why).
    """

    status: TickStatus
    job_id: str | None = None
    outcome: Outcome | None = None
    failure_reason: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class CancelResult:
    status: CancelStatus
    job_id: str


@dataclass(frozen=True, slots=True)
class FailLaneResult:
    """``settled`` jobs were refused by this call; ``more`` says whether to call again."""

    settled: int
    more: bool


@dataclass(frozen=True, slots=True)
class QueueTransition:
    """Handed to ``project`` inside the transaction of every change to a queue.

    ``head`` is the queue's head after the change (None when the queue is
    empty); ``settled`` is the job the change settled, if any.
    """

    queue: str
    head: JobRecord | None
    settled: JobRecord | None = None
