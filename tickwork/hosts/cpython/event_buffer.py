"""``EventBuffer``: an event hook delivered on a thread of its own (CPython hosts).

A runtime calls its ``on_event`` hook synchronously, after each transition
commits: a slow hook (a network call, a 10 ms write) slows every tick,
ingest and request of its host. ``EventBuffer(hook)`` is a hook that only
appends the event to a bounded buffer; one daemon thread hands the events
to ``hook``, once each, in order, one at a time. A slow hook then slows its
own delivery, not the engine. ``tickwork serve`` wraps its ``--on-event``
hooks in one (its metrics stay synchronous: they cost microseconds and a
scrape must see every transition before it).

When the buffer holds ``capacity`` events, a new event is **dropped** and
counted (``dropped``; a warning at most once a minute): a hook that falls
that far behind must hold neither the engine back nor memory without bound.
``hook`` failures are contained as ``tickwork.events.emit`` contains them.
``hook`` runs on the buffer's thread: it must not touch the runtime or its
event loop. ``flush(timeout_s)`` waits until what was buffered has been
delivered; ``close()`` delivers what is left and stops the thread.

CPython only (Workers run no threads).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Final

from tickwork.events import HOOK_FAILURE_LOG_INTERVAL_S, Event, EventHook, emit
from tickwork.model.errors import InvalidArgument

__all__ = ["DEFAULT_BUFFER_CAPACITY", "EventBuffer"]

logger = logging.getLogger("tickwork.events")

#: Events an ``EventBuffer`` holds by default before it drops new ones.
DEFAULT_BUFFER_CAPACITY: Final = 10_000


class EventBuffer:
    """An event hook delivering to ``hook`` on a thread of its own (see the module doc)."""

    def __init__(self, hook: EventHook, *, capacity: int = DEFAULT_BUFFER_CAPACITY) -> None:
        if not callable(hook):
            raise InvalidArgument("hook", f"must be a callable taking an Event, got "
                                          f"{type(hook).__name__}")
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise InvalidArgument("capacity", f"must be a positive integer, got {capacity!r}")
        self.hook = hook
        self.capacity = capacity
        #: Events refused because the buffer was full (or closed).
        self.dropped = 0
        #: Events handed to ``hook`` so far.
        self.delivered = 0
        self._events: deque[Event] = deque()
        self._ready = threading.Condition()
        self._busy = False
        self._closed = False
        self._thread: threading.Thread | None = None
        self._dropped_logged_at = -HOOK_FAILURE_LOG_INTERVAL_S

    def __call__(self, event: Event) -> None:
        with self._ready:
            if self._closed or len(self._events) >= self.capacity:
                self._drop()
                return
            self._events.append(event)
            if self._thread is None:
                self._thread = threading.Thread(target=self._deliver_forever, daemon=True,
                                                name="tickwork-event-hook")
                self._thread.start()
            self._ready.notify()

    def _drop(self) -> None:
        self.dropped += 1
        now = time.monotonic()
        if now - self._dropped_logged_at >= HOOK_FAILURE_LOG_INTERVAL_S:
            self._dropped_logged_at = now
            logger.warning("tickwork event buffer of %r is full (%d events) or closed: events "
                           "are dropped (%d so far)", self.hook, self.capacity, self.dropped)

    def _deliver_forever(self) -> None:
        while True:
            with self._ready:
                while not self._events and not self._closed:
                    self._ready.wait()
                if not self._events:
                    return  # closed, and everything delivered
                event = self._events.popleft()
                self._busy = True
            try:
                emit(self.hook, event)
            finally:
                with self._ready:
                    self._busy = False
                    self.delivered += 1
                    self._ready.notify_all()

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every buffered event was delivered; False on timeout."""
        with self._ready:
            return self._ready.wait_for(lambda: not self._events and not self._busy,
                                        timeout_s)

    def close(self, timeout_s: float | None = 5.0) -> None:
        """Deliver what is buffered (waiting up to ``timeout_s``), then stop;
        events that come after are dropped."""
        with self._ready:
            self._closed = True
            self._ready.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
