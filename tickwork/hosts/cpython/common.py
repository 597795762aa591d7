"""Small pieces the host modules share: the stderr log line, one-line
messages, a DSN without its password, and the shutdown wait."""

from __future__ import annotations

import asyncio
import signal
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


def one_line(text: str) -> str:
    """``text`` on one line (a message or a table cell may hold line breaks)."""
    return " ".join(text.split()) if any(char in text for char in "\r\n\t") else text


def error_line(error: BaseException) -> str:
    """An error's message on one line (psycopg's span several), else its type."""
    return one_line(str(error)).strip() or type(error).__name__


def redact_dsn(dsn: str) -> str:
    """The DSN without its password, for messages."""
    if "://" in dsn and "@" in dsn:
        scheme, rest = dsn.split("://", 1)
        credentials, host = rest.rsplit("@", 1)
        user = credentials.split(":", 1)[0]
        return f"{scheme}://{user}@{host}"
    return " ".join(part for part in dsn.split() if not part.startswith("password="))


def stop_on_signals(name: str, settle: str, interrupt: Callable[[], None]) -> asyncio.Event:
    """An event the first SIGINT or SIGTERM sets, saying so on stderr (``name``:
    the command; ``settle``: what running jobs get); a second one calls
    ``interrupt`` (running jobs are interrupted at once).

    The handlers stay installed through the shutdown, so a second signal
    interrupts; closing the loop at the end of ``asyncio.run`` removes them.
    Installed before start-up, a signal while connecting stops the process
    as soon as it has started, instead of killing it half-way.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[int] = []

    def on_signal(number: int) -> None:
        received.append(number)
        if len(received) == 1:
            print(f"{name}: {signal.Signals(number).name}: stopping ({settle}; signal again "
                  "to interrupt them)", file=sys.stderr, flush=True)
            stop.set()
        else:
            interrupt()

    for number in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(number, on_signal, number)
    return stop


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
