"""Small pieces the host modules share: the stderr log line and the shutdown wait."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterable
from typing import Any

#: Where a host module writes an operator's line (``stderr`` by default).
Log = Callable[[str], None]

#: After the grace period, how long cancelled tasks get to unwind.
CANCEL_WAIT_S = 5.0


def stderr(message: str) -> None:
    """Write one line to stderr at once (the default ``Log``)."""
    print(message, file=sys.stderr, flush=True)


async def finish_tasks(tasks: Iterable[asyncio.Task[Any]], grace_s: float, *,
                       cancel_wait_s: float = CANCEL_WAIT_S) -> set[asyncio.Task[Any]]:
    """Wait up to ``grace_s`` for ``tasks`` to end by themselves, then cancel
    the late ones and wait up to ``cancel_wait_s`` for them to unwind.

    Returns the tasks that had to be cancelled. Never raises for the tasks'
    own failures (``asyncio.wait`` does not retrieve them).
    """
    pending = list(tasks)
    if not pending:
        return set()
    _, late = await asyncio.wait(pending, timeout=grace_s)
    for task in late:
        task.cancel()
    if late:
        await asyncio.wait(late, timeout=cancel_wait_s)
    return late
