"""Lifecycle events: what every runtime reports to its ``on_event`` hook.

A runtime opened with ``on_event=hook`` calls ``hook(event)`` synchronously
once per transition, after the transition is durable (after its commit; for
``runtime.transactional`` after the host's own transaction committed), never
for a change that rolled back. A hook that raises is logged on the
``tickwork.events`` logger and swallowed: it never changes a result, an
outcome or a stored row.

The kinds (docs/reference/python-api.md has the full table):

* ``ingested``: a new job was stored (a duplicate replay is no transition);
* ``claimed``: a tick claimed a job to execute it;
* ``retried``: an attempt ended and the job waits for its next one;
* ``settled``: a job reached its terminal outcome, once per attempt chain,
  whatever settled it (its execution, a cancellation of a queued job,
  recovery, a lane refusal);
* ``requeued``: crash recovery put a claim back (``reason="recovery"``), or
  a redrive queued a dead letter again (``reason="redrive"``);
* ``cancelled``: a cancellation was durably recorded (its settlement comes
  as ``settled`` with outcome ``cancelled``);
* ``refused``: a lane refusal (``fail_lane``) settled ``count`` jobs of the
  lane with ``reason``; each of them is also reported ``settled``;
* ``purged``: ``count`` queued jobs of a queue were deleted.

A delayed job becoming due is not a transition (no event): it was
``ingested`` (or ``retried``) and is next ``claimed``.

Pure Python: this module runs on Pyodide as well.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from tickwork.model.errors import InvalidArgument

__all__ = ["EVENT_KINDS", "Event", "EventHook", "EventKind", "emit", "fan_out"]

EventKind: TypeAlias = Literal[
    "ingested", "claimed", "settled", "requeued", "retried", "cancelled", "refused", "purged"]

#: Every kind, in the order of a job's life.
EVENT_KINDS: Final[tuple[EventKind, ...]] = (
    "ingested", "claimed", "retried", "settled", "requeued", "cancelled", "refused", "purged")

logger = logging.getLogger("tickwork.events")


@dataclass(frozen=True, slots=True)
class Event:
    """One durable transition.

    ``at``: epoch ms by the runtime's clock when it was reported (the clock
    the runtime was given; this machine's, or the test clock ``now``, on D1
    and PostgreSQL). ``outcome`` and ``reason`` (the failure reason, the lane
    refusal's reason, or why a job was requeued) for ``settled``,
    ``retried``, ``refused`` and ``requeued``; ``attempt`` for the events
    of an execution; ``duration_ms``: how long the attempt ran, from its
    claim to its settlement or retry (None when no execution of this
    runtime ended it: a recovery, a lane refusal, a cancelled queued job);
    ``count``: jobs deleted (``purged``) or settled (``refused``);
    ``retry_at``: when a retried job is due again; ``error``: for an
    attempt whose executor raised, its error summary's short line
    (``"Type: message"``, at most 300 characters; the whole summary is on
    the job's record).
    """

    kind: EventKind
    job_id: str | None
    queue: str | None
    lane: str | None
    at: int
    outcome: str | None = None
    reason: str | None = None
    attempt: int | None = None
    duration_ms: int | None = None
    count: int | None = None
    retry_at: int | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The event's fields that are set, as JSON-ready values."""
        return {name: value for name in _FIELDS
                if (value := getattr(self, name)) is not None}


_FIELDS: Final = ("kind", "job_id", "queue", "lane", "at", "outcome", "reason", "attempt",
                  "duration_ms", "count", "retry_at", "error")

#: What ``on_event`` takes.
EventHook: TypeAlias = Callable[[Event], object]


def emit(hook: EventHook, event: Event) -> None:
    """Call ``hook(event)``; a failure is logged, never raised."""
    try:
        hook(event)
    except Exception:  # a hook never breaks the transition it reports on
        logger.exception("tickwork event hook %r failed on a %s event of job %r",
                         hook, event.kind, event.job_id)


def fan_out(*hooks: EventHook) -> EventHook:
    """One hook calling each of ``hooks`` in turn; a failing one is logged
    and the others are still called."""
    for hook in hooks:
        if not callable(hook):
            raise TypeError(f"fan_out takes callables, got {type(hook).__name__}")
    chosen = tuple(hooks)

    def each(event: Event) -> None:
        for hook in chosen:
            emit(hook, event)

    return each


def check_hook(on_event: object) -> EventHook | None:
    """``on_event`` as given to a runtime: None or a callable."""
    if on_event is not None and not callable(on_event):
        raise InvalidArgument("on_event", f"must be a callable taking an Event, got "
                                          f"{type(on_event).__name__}")
    return on_event
