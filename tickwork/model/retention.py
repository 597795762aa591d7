"""Retention: how long settled jobs are kept, per queue or for a whole scope.

A policy keeps two kinds of settled jobs for a time each:

* ``keep_completed_ms``: jobs settled ``completed`` or ``cancelled`` (the
  history nobody has to act on);
* ``keep_failed_ms``: jobs settled ``failed``, ``outcome_unknown`` or
  ``interrupted`` (the dead letters, which someone may still redrive).

``None`` keeps that kind forever. A queue's own policy, when it has one,
replaces the scope's default for that queue (both of its times); the scope's
default, when none is stored, is ``DEFAULT_KEEP_COMPLETED_MS`` and
``DEFAULT_KEEP_FAILED_MS``. Queued and running jobs are never pruned,
whatever the policy: only a settled job's age (since its settlement) counts.

Pure Python: this module runs on Pyodide as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from tickwork.model.errors import InvalidArgument
from tickwork.model.jobs import check_id

__all__ = [
    "DEFAULT_KEEP_COMPLETED_MS",
    "DEFAULT_KEEP_FAILED_MS",
    "MAX_KEEP_MS",
    "MIN_KEEP_MS",
    "PRUNE_BATCH",
    "RetentionPolicy",
    "StorageReport",
]

HOUR_MS: Final = 3_600_000
DAY_MS: Final = 24 * HOUR_MS

#: Completed and cancelled jobs are kept a week by default: long enough to
#: look back over the last few days' runs, short enough that a busy owner's
#: history stays a small multiple of one week's jobs.
DEFAULT_KEEP_COMPLETED_MS: Final = 7 * DAY_MS
#: Failed, outcome_unknown and interrupted jobs (the dead letters) are kept
#: 30 days by default: someone has to notice them and may redrive them.
DEFAULT_KEEP_FAILED_MS: Final = 30 * DAY_MS

#: The shortest time a policy keeps a job: a result must stay readable a
#: little while after it settles (a client polling for it, an event hook).
MIN_KEEP_MS: Final = 60_000
#: The longest finite time (100 years; use None to keep forever).
MAX_KEEP_MS: Final = 36_500 * DAY_MS

#: Most settled jobs one prune batch deletes (one transaction on an owner,
#: at most one per queue on D1 and PostgreSQL).
PRUNE_BATCH: Final = 500
#: The most a caller may ask of one prune batch.
MAX_PRUNE_BATCH: Final = 1_000


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long a queue's settled jobs are kept (``queue`` None: the
    scope's default, for every queue without a policy of its own).

    ``keep_completed_ms``: completed and cancelled jobs; ``keep_failed_ms``:
    failed, outcome_unknown and interrupted ones; each in ms after the job
    settled, None to keep them forever. ``updated_at``: when it was stored
    (epoch ms by the store's clock); None for the built-in default.
    """

    queue: str | None
    keep_completed_ms: int | None
    keep_failed_ms: int | None
    updated_at: int | None = None

    def cutoffs(self, now: int) -> tuple[int | None, int | None]:
        """The settlement times before which each kind is pruned at ``now``
        (None: that kind is kept forever)."""
        return (None if self.keep_completed_ms is None else now - self.keep_completed_ms,
                None if self.keep_failed_ms is None else now - self.keep_failed_ms)

    @property
    def keeps_everything(self) -> bool:
        return self.keep_completed_ms is None and self.keep_failed_ms is None


@dataclass(frozen=True, slots=True)
class StorageReport:
    """What a scope's store holds: ``size_bytes``, the bytes of the pages in
    use (a Durable Object's ``databaseSize``, an owner's sqlite3 file, the
    tickwork tables on PostgreSQL; None on D1, whose size ``wrangler d1
    info`` reports), and ``rows``, each tickwork table's row count by name."""

    size_bytes: int | None
    rows: dict[str, int]


#: The scope's default while none is stored.
BUILT_IN_DEFAULT: Final = RetentionPolicy(None, DEFAULT_KEEP_COMPLETED_MS,
                                          DEFAULT_KEEP_FAILED_MS)

#: How a store keeps the scope's default: under this queue name, which no
#: queue can have (a queue name is never empty).
SCOPE_KEY: Final = ""


def check_keep(field: str, value: object) -> int | None:
    """A policy's time: None (keep forever) or whole ms from MIN_KEEP_MS to MAX_KEEP_MS."""
    if value is None:
        return None
    if (not isinstance(value, int) or isinstance(value, bool)
            or not MIN_KEEP_MS <= value <= MAX_KEEP_MS):
        raise InvalidArgument(field, f"must be null (keep forever) or an integer number of "
                                     f"ms from {MIN_KEEP_MS} (a minute) to {MAX_KEEP_MS} "
                                     f"(100 years), got {value!r}")
    return value


def check_policy_queue(queue: object) -> str | None:
    """The queue a policy is for: a queue name, or None for the scope's default."""
    return None if queue is None else check_id("queue", queue)


def validate_policy(queue: object, keep_completed_ms: object,
                    keep_failed_ms: object) -> RetentionPolicy:
    """A policy to store, every argument checked (InvalidArgument naming the first bad one)."""
    return RetentionPolicy(check_policy_queue(queue),
                           check_keep("keep_completed_ms", keep_completed_ms),
                           check_keep("keep_failed_ms", keep_failed_ms))


def with_default(stored: Sequence[RetentionPolicy]) -> list[RetentionPolicy]:
    """Every policy in force: the scope's default first (the built-in one
    when none is stored), then each queue's, by queue name."""
    default = next((policy for policy in stored if policy.queue is None), BUILT_IN_DEFAULT)
    return [default, *sorted((policy for policy in stored if policy.queue is not None),
                             key=lambda policy: policy.queue or "")]


def policy_for(queue: str, policies: Sequence[RetentionPolicy]) -> RetentionPolicy:
    """The policy ``queue``'s settled jobs are kept by (``policies`` as
    ``with_default`` returns them)."""
    for policy in policies[1:]:
        if policy.queue == queue:
            return policy
    return policies[0]
