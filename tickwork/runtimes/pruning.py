"""When a runtime's host prunes settled history: a pass now and then, between ticks.

Every host that ticks an owner or drains shared queues calls its runtime's
``prune_if_due()`` once per tick loop (the owner-local host loop, the
Durable Object's alarm, the shared drain on D1, ``tickwork worker``). A pass
runs only when due: once a minute by the runtime's clock, or at once again
after a pass that left work (its last batch was full). A pass is at most
``MAX_BATCHES_PER_PASS`` prune batches (``tickwork.lifecycle.operations.prune``,
``PRUNE_BATCH`` jobs each, each its own transaction), so it never holds a
loop for long: a backlog of history is worked off over the loops that follow
(up to 2,000 jobs a loop), not in one.

Pure Python: runs on Pyodide as well.
"""

from __future__ import annotations

import logging
from typing import Final

from tickwork.model.retention import PRUNE_BATCH

__all__ = ["MAX_BATCHES_PER_PASS", "PRUNE_INTERVAL_MS", "PruneSchedule"]

#: Where a pass that failed is logged (it is never raised into a host loop).
logger = logging.getLogger("tickwork.pruning")

#: How often a pass runs while the last one left nothing to prune: the
#: cutoffs move by a minute, which a policy measured in hours or days does
#: not notice, and an idle pass costs a few index seeks (one per queue).
PRUNE_INTERVAL_MS: Final = 60_000
#: Most prune batches one pass runs (a backlog: 2,000 jobs a loop).
MAX_BATCHES_PER_PASS: Final = 4


class PruneSchedule:
    """Whether a pass is due, by the clock of the runtime that holds it.

    A runtime starts due (its first loop prunes), and after a pass is due
    again ``interval_ms`` later, or at once when the pass's last batch was
    full (more is left)."""

    __slots__ = ("_next_at", "interval_ms")

    def __init__(self, interval_ms: int = PRUNE_INTERVAL_MS) -> None:
        self.interval_ms = interval_ms
        self._next_at: int | None = None

    def due(self, now: int) -> bool:
        return self._next_at is None or now >= self._next_at

    def ran(self, now: int, last_batch: int) -> None:
        """A pass ended at ``now``, its last batch deleting ``last_batch`` jobs."""
        self._next_at = now if last_batch >= PRUNE_BATCH else now + self.interval_ms
