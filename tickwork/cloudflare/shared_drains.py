"""Who drains the shared D1 queues, when, and how much each may do.

A shared job is started by whichever of these drains first; every claim is
fenced by its lease, so they may all run at once and never settle a job
twice (no lock around a drain):

* **after a write** (``after_shared_write``): a Worker request whose write
  may have made shared work due (an ingest, a redrive, a resume, a schedule
  or limit change: every operation whose plan yields a wake) drains in
  ``ctx.waitUntil`` after it has answered, within ``WRITE_DRAIN``;
* **the pump** (``tickwork.cloudflare.pump.SharedPump``): one Durable
  Object per D1 binding whose alarm is armed for the earliest due shared
  work (a delay, a retry's backoff, a rate limit's release, a schedule
  slot) and drains then, within ``PUMP_DRAIN``;
* **a Cloudflare Queues message** (optional binding ``TICKWORK_QUEUE``):
  a shared write also sends one message, and the Worker's ``queue()``
  handler drains within ``QUEUE_DRAIN``, so consumers scale with the backlog;
* **the cron** (``run_cron``), once a minute, within ``CRON_DRAIN``: the
  safety net. Its once-per-firing work (schedule slots, pruning) stays under
  ``JobLock``; its drain does not.

Every drain ends by re-arming the pump (``arm_pump``) from what it left:
"now" when it stopped on its budget with work possibly left, else the
earliest due time of a waiting job (``pump_time``). So work nobody is
draining always has a drain coming, without polling.

Each budget is ``DrainBudget(max_ticks, budget_ms, concurrency)``; the
variables ``<PREFIX>_MAX_TICKS``, ``<PREFIX>_BUDGET_MS`` and
``<PREFIX>_CONCURRENCY`` (``[vars]``) change it; ``MAX_TICKS = 0``
drains nothing there and only arms the pump (for now, when work is due).
D1 round trips: 1 (schema check) + 1 for the first claim + 1 per job (a
settlement and the next claim share a batch) + 1 (history) + 1 (the
next-work read), so ``WRITE_DRAIN``'s 10 ticks add 25 round trips carrying
45 statements to a request (``tests/worker/test_shared_drains.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import time
import traceback
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

from tickwork.cloudflare.bindings import NoWake, binding, event_log, log, log_error, owner_stub
from tickwork.model.outcomes import TickResult
from tickwork.ports.host import Executor
from tickwork.runtimes.d1 import D1Runtime
from tickwork.runtimes.shared import MAX_DRAIN_CONCURRENCY

__all__ = [
    "CRON_DRAIN",
    "PUMP_BINDING",
    "PUMP_DRAIN",
    "QUEUE_BINDING",
    "QUEUE_DRAIN",
    "QUEUE_MESSAGE",
    "WRITE_DRAIN",
    "DrainBudget",
    "SharedDrain",
    "SharedWriteWake",
    "after_shared_write",
    "arm_pump",
    "drain_shared",
    "keep_alive",
    "pump_time",
    "shared_writes_seen",
]

#: The pump's Durable Object namespace (optional; see ``tickwork.cloudflare.pump``).
PUMP_BINDING = "TICKWORK_PUMP"
#: A Cloudflare Queues producer and consumer (optional): one message per shared write.
QUEUE_BINDING = "TICKWORK_QUEUE"


@dataclass(frozen=True, slots=True)
class DrainBudget:
    """How much one drain may do: ``max_ticks`` ticks (0: this drain is
    off), claims for ``budget_ms``, ``concurrency`` loops at once; the
    variables ``<prefix>_MAX_TICKS``, ``_BUDGET_MS`` and ``_CONCURRENCY``
    override each."""

    prefix: str
    max_ticks: int
    budget_ms: int
    concurrency: int

    def from_env(self, env: Any) -> DrainBudget:
        """This budget with ``env``'s variables applied. A value that is not
        a whole number in range is logged as the error it is and the default
        is used (a drain that fails on its configuration would drain nothing)."""
        return DrainBudget(
            self.prefix,
            _whole_var(env, f"{self.prefix}_MAX_TICKS", self.max_ticks, 0, 100_000),
            _whole_var(env, f"{self.prefix}_BUDGET_MS", self.budget_ms, 1, 900_000),
            _whole_var(env, f"{self.prefix}_CONCURRENCY", self.concurrency, 1,
                       MAX_DRAIN_CONCURRENCY),
        )


#: The cron's drain, once a minute (see ``tickwork.cloudflare.app`` for its query budget).
CRON_DRAIN = DrainBudget("TICKWORK_CRON", max_ticks=100, budget_ms=20_000, concurrency=4)
#: The drain after a shared write, in the request's ``waitUntil``: small, as it
#: shares the request's D1 query allowance and its 30 s after the answer.
WRITE_DRAIN = DrainBudget("TICKWORK_WRITE_DRAIN", max_ticks=10, budget_ms=5_000, concurrency=4)
#: The pump's drain, at its alarm (an alarm may run 15 min; this stays well inside).
PUMP_DRAIN = DrainBudget("TICKWORK_PUMP", max_ticks=100, budget_ms=20_000, concurrency=4)
#: The drain of one Queues batch.
QUEUE_DRAIN = DrainBudget("TICKWORK_QUEUE_DRAIN", max_ticks=100, budget_ms=20_000,
                          concurrency=4)


def _whole_var(env: Any, name: str, default: int, low: int, high: int) -> int:
    value = binding(env, name)
    if value is None:
        return default
    text = value.strip() if isinstance(value, str) else None
    number = int(text) if text is not None and text.isdigit() else value
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    if isinstance(number, int) and not isinstance(number, bool) and low <= number <= high:
        return number
    log_error(f"{name} must be a whole number from {low} to {high}, not {value!r}; "
              f"using {default}")
    return default


# ------------------------------------------------------------ write marks


#: The mark of the request being answered: set by ``shared_writes_seen``,
#: raised by ``SharedWriteWake`` (each request is its own task, and so has
#: its own context, however many run at once in one isolate).
_WRITE_MARK: contextvars.ContextVar[list[bool] | None] = contextvars.ContextVar(
    "tickwork_shared_write_mark", default=None)


class SharedWriteWake:
    """The API runtime's wake: a committed write that may have made shared
    work due marks the request it was made for (the lifecycle yields the
    wake exactly where an owner's alarm would be recomputed)."""

    def recompute(self) -> None:
        mark = _WRITE_MARK.get()
        if mark is not None:
            mark[0] = True


@contextlib.contextmanager
def shared_writes_seen() -> Iterator[Callable[[], bool]]:
    """``with shared_writes_seen() as seen: ...``: ``seen()`` is True once a
    shared write inside the block woke the runtime."""
    mark = [False]
    token = _WRITE_MARK.set(mark)
    try:
        yield lambda: mark[0]
    finally:
        _WRITE_MARK.reset(token)


# ----------------------------------------------------------------- drains


@dataclass(frozen=True, slots=True)
class SharedDrain:
    """What one drain did and left: its ticks (idle ones excluded);
    ``stopped_early`` when it ended on its budget while work was due or
    running (so work may be left that nobody drains);
    ``next_due``/``now``: the earliest due time of waiting shared work
    (None: nothing waits) and the database's clock after it."""

    ticks: list[TickResult]
    stopped_early: bool
    next_due: int | None
    now: int

    @property
    def settled(self) -> int:
        return sum(1 for tick in self.ticks if tick.status == "settled")


def pump_time(drain: SharedDrain) -> int | None:
    """When the pump must next drain after ``drain`` (epoch ms, database
    clock), or None: nothing left that a drain could start.

    Never "now" for work only running elsewhere (that would poll while a
    long job runs): the drain that runs it re-arms when it ends."""
    if drain.stopped_early:
        return drain.now
    return drain.next_due


#: ``arm(drain, at_ms)``: how a drain re-arms the pump (the pump's own drain
#: arms its alarm directly).
Rearm = Callable[["SharedDrain", "int | None"], Awaitable[None]]


async def drain_shared(env: Any, execute: Executor, budget: DrainBudget, *,
                       now: Callable[[], int] | None = None, on_event: Any = None,
                       arm: Rearm | None = None) -> SharedDrain | None:
    """Drain the shared queues of ``env.DB`` once within ``budget``, write
    its history, read what it left and re-arm the pump from it (``arm``, by
    default ``arm_pump`` through the binding). With the budget off
    (``max_ticks`` 0) nothing is drained, but the pump is still armed, for
    now when work is due: the drain is left to it. None when there is no
    ``DB`` binding, or the budget is off and there is no pump to arm."""
    db = binding(env, "DB")
    off = budget.max_ticks == 0
    if db is None or (off and arm is None and binding(env, PUMP_BINDING) is None):
        return None
    runtime = D1Runtime(db, execute=execute, wake=NoWake(), now=now, on_event=on_event)
    started = time.monotonic()
    ticks = [] if off else await runtime.drain(
        max_ticks=budget.max_ticks, budget_ms=budget.budget_ms, concurrency=budget.concurrency)
    elapsed_ms = (time.monotonic() - started) * 1000
    await runtime.flush_history()  # logs its own failures
    pending, next_due, db_now = await runtime.next_work()
    # Ended on its budget, not for want of work, and work is due or running.
    spent = off or len(ticks) >= budget.max_ticks or elapsed_ms >= budget.budget_ms
    drained = SharedDrain(ticks, spent and pending, next_due, db_now)
    if arm is None:
        await arm_pump(env, pump_time(drained))
    else:
        await arm(drained, pump_time(drained))
    return drained


async def arm_pump(env: Any, at_ms: int | None) -> None:
    """Ask the pump to drain at ``at_ms`` (it keeps the earliest time it was
    asked for). Nothing without the binding or a time; a failure is logged
    (the cron remains the safety net)."""
    namespace = binding(env, PUMP_BINDING)
    if namespace is None or at_ms is None:
        return
    try:
        await owner_stub(namespace, "DB").arm(int(at_ms))
    except Exception as error:
        log_error(f"could not arm the shared pump for {at_ms} ({type(error).__name__}: {error})")


#: The body of the message a shared write sends (it says only that work arrived).
QUEUE_MESSAGE = {"tickwork": "drain"}


def _queue_message_for(queue: Any) -> Any:
    """``QUEUE_MESSAGE`` as ``queue.send`` must get it: the external SDK
    converts a dict itself; the built-in SDK would hand over a PyProxy, not
    an object Queues can serialize (V8's serializer refuses it; Cloudflare's
    Python example wraps the body in ``to_js``), so it becomes one here."""
    from tickwork._pyodide import load_to_js_for

    to_js = load_to_js_for(queue)
    if to_js is None:
        return dict(QUEUE_MESSAGE)
    from js import Object  # type: ignore[import-not-found, unused-ignore]

    return to_js(QUEUE_MESSAGE, dict_converter=Object.fromEntries)


async def send_queue_message(env: Any) -> bool:
    """One Cloudflare Queues message saying shared work arrived, when the
    ``TICKWORK_QUEUE`` binding is configured; True when it was sent."""
    queue = binding(env, QUEUE_BINDING)
    if queue is None:
        return False
    try:
        await queue.send(_queue_message_for(queue))
    except Exception as error:
        log_error(f"could not send the shared queue's message ({type(error).__name__}: {error})")
        return False
    return True


async def after_shared_write(env: Any, executors: Callable[[Any], Executor],
                             on_event: Any = None) -> SharedDrain | None:
    """What a Worker runs in ``waitUntil`` after answering a shared write:
    a queue message (when configured), then a drain within ``WRITE_DRAIN``
    (which re-arms the pump). Never raises: a failure is logged, and the
    pump or the cron drains instead."""
    try:
        await send_queue_message(env)
        return await drain_shared(env, executors(env), WRITE_DRAIN.from_env(env),
                                  on_event=on_event)
    except Exception:
        log_error("the drain after a shared write failed:\n" + traceback.format_exc())
        return None


async def drain_queue_batch(env: Any, batch: Any, executors: Callable[[Any], Executor],
                            ) -> SharedDrain | None:
    """The Worker's ``queue()`` handler: one drain within ``QUEUE_DRAIN`` for
    the whole batch (the messages carry nothing but "work arrived"), then
    ``ackAll()``; when the drain raised, ``retryAll()`` so Queues redelivers
    the batch later, and the error is logged."""
    try:
        drained = await drain_shared(env, executors(env), QUEUE_DRAIN.from_env(env),
                                     on_event=event_log(env))
    except Exception:
        log_error("queue: the drain failed; the batch will be redelivered:\n"
                  + traceback.format_exc())
        batch.retryAll()
        return None
    batch.ackAll()
    if drained is not None:
        log(f"queue: {len(drained.ticks)} tick(s), {drained.settled} job(s) settled")
    return drained


#: Tasks started by ``keep_alive`` that have not ended yet.
_RUNNING: set[asyncio.Task[Any]] = set()


def keep_alive(ctx: Any, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """Run ``work`` as a task the runtime keeps the invocation open for
    (``ctx.waitUntil``), after the handler has returned.

    On Pyodide the task crosses to JavaScript as a proxy, destroyed once it
    settles (as the SDK's own ASGI glue does); a ``ctx`` without
    ``waitUntil`` (a host that outlives its requests) just runs the task."""
    task = asyncio.ensure_future(work)
    # The loop keeps only a weak reference to a task: hold it until it ends.
    _RUNNING.add(task)
    task.add_done_callback(_RUNNING.discard)
    wait_until = getattr(ctx, "waitUntil", None)
    if wait_until is None:
        return task
    try:
        from pyodide.ffi import create_proxy  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        wait_until(task)
        return task
    proxy = create_proxy(task)
    task.add_done_callback(lambda _: proxy.destroy())
    wait_until(proxy)
    return task
