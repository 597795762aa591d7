"""What runs at once, per queue and per lane, as executors see it.

``RunningCounts`` wraps an executor: at each start it counts the jobs in
flight per queue and per lane (the start included) and keeps the highest
count each key ever reached, so a test asserts a limit from the executor's
own events, never from a sleep.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from tickwork import JobRecord


class RunningCounts:
    """An executor around ``inner`` that counts what runs at once."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.queues: Counter[str] = Counter()
        self.lanes: Counter[str] = Counter()
        self.most_in_queue: Counter[str] = Counter()
        self.most_in_lane: Counter[str] = Counter()
        self.starts: Counter[str] = Counter()

    async def __call__(self, job: JobRecord, signal: Any) -> Any:
        self.starts[job.job_id] += 1
        self.queues[job.queue] += 1
        self.lanes[job.lane] += 1
        self.most_in_queue[job.queue] = max(self.most_in_queue[job.queue], self.queues[job.queue])
        self.most_in_lane[job.lane] = max(self.most_in_lane[job.lane], self.lanes[job.lane])
        try:
            return await self.inner(job, signal)
        finally:
            self.queues[job.queue] -= 1
            self.lanes[job.lane] -= 1
