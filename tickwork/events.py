"""Lifecycle events: what every runtime reports to its ``on_event`` hook.

A runtime opened with ``on_event=hook`` calls ``hook(event)`` synchronously
once per transition, after the transition is durable (after its commit; for
``runtime.transactional`` after the host's own transaction committed), never
for a change that rolled back. A hook that raises is logged on the
``tickwork.events`` logger (one traceback per hook a minute at most, with a
count of the failures not logged) and swallowed: it never changes a result,
an outcome or a stored row, whatever it raises but ``KeyboardInterrupt``.
Delivery is synchronous, so a slow hook slows the runtime that calls it:
on CPython, wrap a hook that may be slow in
``tickwork.hosts.cpython.EventBuffer``, which delivers on a thread of its own
(``tickwork serve`` does so for its ``--on-event`` hooks).

The kinds (docs/reference/python-api.md has the full table):

* ``ingested``: a new job was stored (a duplicate replay is no transition);
* ``claimed``: a tick claimed a job to execute it;
* ``retried``: an attempt ended and the job waits for its next one;
* ``settled``: a job reached its terminal outcome, once per attempt chain,
  whatever settled it (its execution, a cancellation of a queued job,
  recovery, a lane refusal);
* ``requeued``: crash recovery put a claim back (``reason="recovery"``),
  a redrive queued a dead letter again (``reason="redrive"``), or an
  executor returned ``RateLimited`` (``reason="rate_limited"``: the job went
  back without using an attempt; ``retry_at`` is when its key's hold ends);
* ``cancelled``: a cancellation was durably recorded (its settlement comes
  as ``settled`` with outcome ``cancelled``);
* ``refused``: a lane refusal (``fail_lane``) settled ``count`` jobs of the
  lane with ``reason``; each of them is also reported ``settled``;
* ``purged``: ``count`` queued jobs of a queue were deleted;
* ``pruned``: ``count`` settled jobs of a queue were deleted by its
  retention policy (one event per prune batch and queue).

A delayed job becoming due is not a transition (no event): it was
``ingested`` (or ``retried``) and is next ``claimed``.

Pure Python: this module runs on Pyodide as well.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias

from tickwork.model.errors import InvalidArgument

__all__ = ["EVENT_KINDS", "HOOK_FAILURE_LOG_INTERVAL_S", "Event", "EventHook", "EventKind",
           "emit", "fan_out"]

EventKind: TypeAlias = Literal[
    "ingested", "claimed", "settled", "requeued", "retried", "cancelled", "refused", "purged",
    "pruned"]

#: Every kind, in the order of a job's life.
EVENT_KINDS: Final[tuple[EventKind, ...]] = (
    "ingested", "claimed", "retried", "settled", "requeued", "cancelled", "refused", "purged",
    "pruned")

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
    ``count``: jobs deleted (``purged``, ``pruned``) or settled (``refused``);
    ``retry_at``: when a retried job is due again (a rate-limited one: when
    its key's hold ends); ``error``: for an
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


#: A failing hook's traceback is logged at most once per this many seconds;
#: the failures in between are counted, and the next line says how many.
HOOK_FAILURE_LOG_INTERVAL_S: Final = 60.0
#: Hooks whose failures are tracked at once (the oldest is forgotten).
_TRACKED_HOOKS: Final = 64
#: id(hook) -> [hook, last logged (monotonic s), failures not logged since].
_hook_failures: OrderedDict[int, list[Any]] = OrderedDict()


def emit(hook: EventHook, event: Event) -> None:
    """Call ``hook(event)``; a failure is logged (rate-limited), never raised.

    Hooks never change the engine's control flow: whatever a hook raises is
    contained, ``BaseException`` subclasses included (a hook raising
    ``asyncio.CancelledError`` or ``SystemExit`` is a broken hook, not a
    request to cancel the tick or end the process), except
    ``KeyboardInterrupt``, which is the operator asking the process to stop.
    """
    try:
        hook(event)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # a hook never breaks the transition it reports on
        _log_hook_failure(hook, event, error)


def _log_hook_failure(hook: EventHook, event: Event, error: BaseException) -> None:
    now = time.monotonic()
    entry = _hook_failures.get(id(hook))
    if entry is None or entry[0] is not hook:
        entry = [hook, -HOOK_FAILURE_LOG_INTERVAL_S, 0]
        _hook_failures[id(hook)] = entry
        while len(_hook_failures) > _TRACKED_HOOKS:
            _hook_failures.popitem(last=False)
    if now - entry[1] < HOOK_FAILURE_LOG_INTERVAL_S:
        entry[2] += 1
        return
    suppressed, entry[1], entry[2] = entry[2], now, 0
    more = f" ({suppressed} more failures of this hook not logged)" if suppressed else ""
    logger.error("tickwork event hook %r failed on a %s event of job %r%s", hook, event.kind,
                 event.job_id, more, exc_info=(type(error), error, error.__traceback__))


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

