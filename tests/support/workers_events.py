"""Events as the Workers runtime runs them on one long-lived event loop.

A Worker's isolate, and a Durable Object's instance, keep one Python event
loop for many events (requests, cron firings, alarms, RPC calls). Measured
in real workerd (python-workers-facts.md, "Measured in real workerd, second
round"): **a timer set during one event never fires once that event has
ended**. A loop-wide object that remembers "a timer is armed for T" is then
wrong in the next event, which waits for a timer that will never come; the
runtime ends such an event as failed (the cron endpoint answered 500
``exceededCpu``, or ``exception`` on Pyodide 314).

``WorkersEvents(loop)`` makes a loop behave so, for code under test:

* ``await events.run(make_coroutine)`` runs one event: a task of its own,
  whose timers (``loop.call_later`` / ``call_at``, hence ``asyncio.sleep``,
  ``wait_for`` and every tickwork timer) belong to it. When the event's
  coroutine returns or raises, every timer it armed that has not fired is
  cancelled: it will never fire.
* An event that is still waiting after ``limit_s`` seconds (a real event
  would wait for a timer that can no longer fire, or for nothing) is
  cancelled and ``EventHung`` raised, as the runtime fails the event.
* ``events.pass_time(seconds)``: time goes by between two events (cron
  firings come a minute apart). The loop's clock moves on that much at once;
  nothing runs meanwhile, and no timer armed by an ended event fires.

Pure asyncio: runs on CPython's loop and on Pyodide's WebLoop alike.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["EventHung", "WorkersEvents"]


class EventHung(AssertionError):
    """An event still waited after its time limit: the runtime would fail it."""


class _Event:
    __slots__ = ("name", "timers")

    def __init__(self, name: str) -> None:
        self.name = name
        self.timers: list[asyncio.TimerHandle] = []


class WorkersEvents:
    """Gives ``loop`` the Workers runtime's event rules (see the module doc);
    ``close()`` (or leaving the ``with`` block) restores the loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._current: contextvars.ContextVar[_Event | None] = contextvars.ContextVar(
            "workers_event", default=None)
        self._offset_s = 0.0
        self.ended: list[str] = []
        loop_ = self._loop
        self._saved = {name: loop_.__dict__.get(name) for name in ("call_later", "call_at", "time")}
        self._call_later = loop_.call_later
        self._call_at = loop_.call_at
        self._time = loop_.time
        loop_.call_later = self._tracked_call_later  # type: ignore[method-assign]
        loop_.call_at = self._tracked_call_at  # type: ignore[method-assign]
        loop_.time = self._shifted_time  # type: ignore[method-assign]

    def __enter__(self) -> WorkersEvents:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for name, saved in self._saved.items():
            if saved is None:
                self._loop.__dict__.pop(name, None)
            else:
                self._loop.__dict__[name] = saved

    # ------------------------------------------------------------ the loop

    def _shifted_time(self) -> float:
        return self._time() + self._offset_s

    def _track(self, handle: Any) -> Any:
        event = self._current.get()
        if event is not None:
            event.timers.append(handle)
        return handle

    def _tracked_call_later(self, delay: float, callback: Callable[..., Any], *args: Any,
                            context: contextvars.Context | None = None) -> Any:
        return self._track(self._call_later(delay, callback, *args, context=context))

    def _tracked_call_at(self, when: float, callback: Callable[..., Any], *args: Any,
                         context: contextvars.Context | None = None) -> Any:
        # `when` is in loop.time()'s clock, which the loop itself now reads too.
        return self._track(self._call_at(when, callback, *args, context=context))

    # ------------------------------------------------------------ events

    async def run(self, make: Callable[[], Awaitable[T]], *, name: str = "event",
                  limit_s: float = 10.0) -> T:
        """Run one event (``make()``'s awaitable) to its end; see the module doc."""
        event = _Event(name)
        context = contextvars.copy_context()
        context.run(self._current.set, event)

        async def body() -> T:
            return await make()

        task = self._loop.create_task(body(), context=context)
        try:
            done, _ = await asyncio.wait({task}, timeout=limit_s)
            if not done:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                raise EventHung(f"{name} still waited after {limit_s:g} s: the runtime "
                                "would fail it (a timer of an ended event never fires)")
            return task.result()
        finally:
            for handle in event.timers:
                handle.cancel()
            self.ended.append(name)

    def pass_time(self, seconds: float) -> None:
        """Between events: the loop's clock moves on ``seconds`` at once."""
        self._offset_s += seconds
