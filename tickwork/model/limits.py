"""Concurrency limits: how many jobs of one queue, or of one lane, may run at once.

Two kinds of limit, both durable and changeable while jobs run:

* ``queue``: at most ``max_running`` of the queue's jobs run at once. A
  queue without a limit of its own runs one job at a time
  (``DEFAULT_QUEUE_MAX_RUNNING``), the serial queue head of the spec; a
  limit of N makes the queue *wide*: N of its ready jobs run together,
  its lanes taking turns (a line of the lanes with a ready job; each claim
  starts the best job, by priority then age, of the first lane in the line
  that may start one, and that lane goes to the back), so one lane's
  backlog never holds back another lane's jobs.
* ``lane``: at most ``max_running`` jobs of the lane run at once, across
  every queue of the owner (owner-local) or of the shared database (D1,
  PostgreSQL). A lane is the key a user groups jobs by: a tenant, a
  customer, a domain; a job's lane is its queue's name unless it names
  one. A lane without a limit is held only by its queues' limits.

A claim takes a job only when both its queue and its lane are below their
limits, inside the claim itself on every store: two claims never both take
the last place. Lowering a limit below what runs stops new claims until
enough of those jobs settle; nothing running is stopped.

Pure Python: this module runs on Pyodide as well.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias

from tickwork.model.errors import InvalidArgument
from tickwork.model.jobs import MAX_LANE_LENGTH, check_id, check_text

__all__ = [
    "DEFAULT_QUEUE_MAX_RUNNING",
    "LIMIT_KINDS",
    "MAX_RUNNING_LIMIT",
    "ConcurrencyLimit",
    "LimitKind",
    "check_limit_key",
    "check_limit_kind",
    "check_max_running",
    "in_order",
    "limits_for",
    "validate_limit",
]

LimitKind: TypeAlias = Literal["queue", "lane"]
LIMIT_KINDS: Final[tuple[LimitKind, ...]] = ("queue", "lane")

#: A queue without a limit of its own runs one job at a time.
DEFAULT_QUEUE_MAX_RUNNING: Final = 1
#: The highest limit one may set: far above any owner's concurrency
#: (``tickwork.runtimes.owner_local.MAX_CONCURRENCY``) or a fleet's loops,
#: low enough that counting a key's running jobs stays a short index walk.
MAX_RUNNING_LIMIT: Final = 10_000


@dataclass(frozen=True, slots=True)
class ConcurrencyLimit:
    """At most ``max_running`` jobs of the queue or lane ``key`` run at once.
    ``updated_at``: when it was stored (epoch ms by the store's clock; None
    for a limit not read from a store)."""

    kind: LimitKind
    key: str
    max_running: int
    updated_at: int | None = None


def check_limit_kind(kind: object) -> LimitKind:
    """``kind`` as a LimitKind ("queue" or "lane")."""
    if kind == "queue" or kind == "lane":
        return kind
    raise InvalidArgument("kind", f"must be 'queue' or 'lane', got {kind!r}")


def check_limit_key(kind: LimitKind, key: object) -> str:
    """A queue name (kind "queue") or a lane (kind "lane")."""
    if kind == "queue":
        return check_id("queue", key)
    return check_text("lane", key, MAX_LANE_LENGTH, InvalidArgument)


def check_max_running(value: object) -> int:
    """A limit: a whole number from 1 to MAX_RUNNING_LIMIT."""
    if (not isinstance(value, int) or isinstance(value, bool)
            or not 1 <= value <= MAX_RUNNING_LIMIT):
        raise InvalidArgument("max_running", f"must be an integer from 1 to "
                                             f"{MAX_RUNNING_LIMIT}, got {value!r}")
    return value


def validate_limit(kind: object, key: object, max_running: object) -> ConcurrencyLimit:
    """A limit to store, every argument checked (InvalidArgument naming the first bad one)."""
    checked = check_limit_kind(kind)
    return ConcurrencyLimit(checked, check_limit_key(checked, key),
                            check_max_running(max_running))


def in_order(limits: Iterable[ConcurrencyLimit]) -> list[ConcurrencyLimit]:
    """Limits as every surface lists them: queues first, then lanes, each by key."""
    return sorted(limits, key=lambda limit: (LIMIT_KINDS.index(limit.kind), limit.key))


def limits_for(queue: str, lane: str,
               limits: Iterable[ConcurrencyLimit]) -> tuple[int, int | None]:
    """The limits a job of ``queue`` and ``lane`` runs under: its queue's
    ``max_running`` (the default when none is stored) and its lane's (None:
    no lane limit)."""
    queue_max, lane_max = DEFAULT_QUEUE_MAX_RUNNING, None
    for limit in limits:
        if limit.kind == "queue" and limit.key == queue:
            queue_max = limit.max_running
        elif limit.kind == "lane" and limit.key == lane:
            lane_max = limit.max_running
    return queue_max, lane_max
