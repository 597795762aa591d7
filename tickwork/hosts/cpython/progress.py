"""Progress of a long ``tickwork serve`` run: one summary line when something changed.

    tickwork serve: 1204 settled (completed 1180, failed 20, cancelled 4) | 38.5/s | 2 running

Every tick result of every owner and of the shared workers is ``record``ed;
``run`` prints the line to stderr every ``every_s`` seconds, but only when
something was settled, recovered or started since the last line.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from tickwork.hosts.cpython.common import stderr
from tickwork.lifecycle.rules import RATE_LIMITED
from tickwork.model.outcomes import OUTCOMES, TickResult


class Progress:
    """Counts of what the ticks of this process did since it started."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic,
                 label: str = "tickwork serve") -> None:
        self._clock = clock
        self.label = label  # the line's prefix: the command that prints it
        self.started = clock()
        self.outcomes: dict[str, int] = dict.fromkeys(OUTCOMES, 0)
        self.requeued = 0
        self.rate_limited = 0
        self.running = 0
        self._changes = 0
        self._last_settled = 0
        self._last_at = self.started
        self._last_changes = 0

    @property
    def settled(self) -> int:
        return sum(self.outcomes.values())

    def record(self, result: TickResult) -> None:
        if result.status == "settled" and result.outcome is not None:
            self.outcomes[result.outcome] = self.outcomes.get(result.outcome, 0) + 1
            self._changes += 1
        elif result.status == "requeued":
            # Put back by recovery, or by its executor's RateLimited (no
            # attempt used): counted apart, as they mean different things.
            if result.reason == RATE_LIMITED:
                self.rate_limited += 1
            else:
                self.requeued += 1
            self._changes += 1

    def started_job(self) -> None:
        self.running += 1
        self._changes += 1

    def finished_job(self) -> None:
        self.running -= 1

    def summary(self) -> str | None:
        """The summary line, or None when nothing changed since the last one."""
        if self._changes == self._last_changes:
            return None
        now = self._clock()
        settled = self.settled
        elapsed = max(now - self._last_at, 1e-9)
        rate = (settled - self._last_settled) / elapsed
        self._last_changes, self._last_settled, self._last_at = self._changes, settled, now
        counts = ", ".join(f"{name} {count}" for name, count in self.outcomes.items() if count)
        line = f"{self.label}: {settled} settled" + (f" ({counts})" if counts else "")
        if self.requeued:
            line += f", {self.requeued} recovered"
        if self.rate_limited:
            line += f", {self.rate_limited} rate-limited"
        return f"{line} | {rate:.1f}/s | {self.running} running"

    async def run(self, every_s: float, write: Callable[[str], None] | None = None) -> None:
        """Print the summary every ``every_s`` seconds when it changed (until cancelled)."""
        out = write or stderr
        while True:
            await asyncio.sleep(every_s)
            line = self.summary()
            if line is not None:
                out(line)

