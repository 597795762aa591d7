"""What a host hands a runtime: the executor, the wake, and (owner-local) the
liveness probe, the projector and the clock."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from tickwork.model.jobs import JobRecord
from tickwork.model.outcomes import ExecutionResult, QueueTransition
from tickwork.model.signals import AbortSignal, LeasedSignal

#: ``execute(job, signal)``: runs one claimed job (owner-local runtime).
Executor = Callable[[JobRecord, AbortSignal], Awaitable[ExecutionResult]]
#: ``execute(job, signal)`` of a shared runtime: ``signal.heartbeat`` renews the lease.
SharedExecutor = Callable[[JobRecord, LeasedSignal], Awaitable[ExecutionResult]]
#: ``is_alive(job)``: whether a running claim this runtime does not execute
#: still has a live execution somewhere (owner-local runtime; may be async).
LivenessProbe = Callable[[JobRecord], "bool | Awaitable[bool]"]
#: ``project(transition)``: runs inside the transaction of every change to a queue.
Projector = Callable[[QueueTransition], None]
#: Epoch milliseconds.
Clock = Callable[[], int]


class Wake(Protocol):
    """Arms the host's next timer or alarm; ``recompute`` may be sync or async.

    Called after every durable change that can alter when the next tick
    should run. The wake learns *when* from the runtime: ``next_tick_at()``
    is now while a job is due or running, the earliest due time while jobs
    only wait for theirs, and None when there is nothing (``AlarmWake`` arms
    the Durable Object's alarm for it; ``tickwork serve`` a timer per owner).
    Pulled rather than passed, because the answer is a read the wake makes
    when it applies, after every change a burst of recomputes reported.
    """

    def recompute(self) -> Any: ...


def wall_clock_ms() -> int:
    """The system clock in epoch milliseconds (the default ``Clock``)."""
    return int(time.time() * 1000)
