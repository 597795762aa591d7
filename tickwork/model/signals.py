"""AbortSignal: how the runtime tells a running executor to stop.

Works on CPython and Pyodide (asyncio only, no threads). Only the runtime
aborts a signal; executors observe it in one of three ways:

* poll ``signal.aborted`` between steps;
* ``await signal.wait()`` (for example raced against the work with
  ``asyncio.wait(..., return_when=FIRST_COMPLETED)``);
* ``signal.on_abort(callback)`` to forward the abort synchronously. In a
  Worker this is how the signal reaches ``fetch``::

      from js import AbortController, fetch
      from pyodide.ffi import to_js

      async def execute(job, signal):
          controller = AbortController.new()
          signal.on_abort(lambda reason: controller.abort(reason))
          response = await fetch(url, to_js({"method": "POST", "signal": controller.signal}))
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tickwork.leases import Heartbeat

AbortListener = Callable[[str], object]


class AbortSignal:
    """A one-way latch: once aborted it stays aborted, with the first reason."""

    __slots__ = ("_event", "_listeners", "_reason")

    def __init__(self) -> None:
        self._reason: str | None = None
        self._event: asyncio.Event | None = None
        self._listeners: list[AbortListener] = []

    @property
    def aborted(self) -> bool:
        return self._reason is not None

    @property
    def reason(self) -> str | None:
        """Why the signal was aborted (``cancelled``, ``lane_failed``, ...), or None."""
        return self._reason

    async def wait(self) -> str:
        """Return the abort reason once the signal is aborted."""
        if self._reason is None:
            if self._event is None:
                # Created lazily so the event binds to the loop that awaits it.
                self._event = asyncio.Event()
            await self._event.wait()
        assert self._reason is not None
        return self._reason

    def on_abort(self, listener: AbortListener) -> None:
        """Call ``listener(reason)`` when aborted (at once if already aborted)."""
        if self._reason is not None:
            listener(self._reason)
        else:
            self._listeners.append(listener)

    def _abort(self, reason: str) -> bool:
        """Abort with ``reason``; False when it was already aborted. Runtime-only."""
        if self._reason is not None:
            return False
        self._reason = reason
        if self._event is not None:
            self._event.set()
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            # A listener's failure must not stop the others or the runtime's
            # own transition that triggered the abort.
            with contextlib.suppress(Exception):
                listener(reason)
        return True

    def __repr__(self) -> str:
        return f"AbortSignal(aborted={self.aborted}, reason={self._reason!r})"


class LeasedSignal(AbortSignal):
    """The AbortSignal a shared runtime (D1, PostgreSQL) hands its executor.

    ``signal.heartbeat`` extends the claim's lease (``await beat()`` or
    ``pulse()``); the runtime also renews it every ``renew_every_ms`` by itself.
    """

    __slots__ = ("heartbeat",)

    def __init__(self) -> None:
        super().__init__()
        self.heartbeat: Heartbeat | None = None
