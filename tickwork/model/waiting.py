"""Why a job is not running yet: the answer of ``explain(job_id)``.

A queued job is held by every ``Hold`` that applies, in the order they
clear: its own due time, its queue's pause, its queue at its limit (its
running jobs) or the jobs ahead of it that take the queue's free places,
its lane at its limit, its queue's or its lane's rate limit (or an
executor's ``RateLimited`` hold) until a time, and the owner at its concurrency (every one of its
slots running a job). No holds means nothing holds it: the next tick may
claim it (in priority order across queues). A cancelled job that has not settled yet is held by its
cancellation: it settles ``cancelled`` at the next tick without running.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, Literal, TypeAlias

from tickwork.model.jobs import JobState

#: What can hold a queued job.
HoldKind: TypeAlias = Literal[
    "cancelled", "not_due", "queue_paused", "queue_busy", "behind_head", "lane_busy",
    "queue_rate_limited", "lane_rate_limited", "owner_busy"]
HOLD_KINDS: Final[tuple[HoldKind, ...]] = (
    "cancelled", "not_due", "queue_paused", "queue_busy", "behind_head", "lane_busy",
    "queue_rate_limited", "lane_rate_limited", "owner_busy")


@dataclass(frozen=True, slots=True)
class Hold:
    """One thing that holds a queued job: ``until`` (epoch ms) for a due time
    or the end of a rate limit's wait,
    ``job_ids`` for the jobs it waits on (the queue's or the lane's running
    jobs, the jobs ahead of it, the owner's running executions: one per
    slot, all of them when the owner is at its concurrency), ``limit`` for
    the queue's or lane's ``max_running`` it is at."""

    kind: HoldKind
    until: int | None = None
    job_ids: tuple[str, ...] = ()
    limit: int | None = None

    def describe(self) -> str:
        """The hold in words, for a page or a terminal."""
        named = ", ".join(self.job_ids)
        if self.kind == "cancelled":
            return "cancelled: it settles cancelled at the next tick, without running"
        if self.kind == "not_due":
            return f"not due until {_utc(self.until)}"
        if self.kind == "queue_paused":
            return "its queue is paused"
        if self.kind == "queue_busy":
            if self.limit is None or self.limit == 1:
                return f"its queue runs one job at a time and is running {named}"
            return f"its queue runs at most {self.limit} jobs at once and is running {named}"
        if self.kind == "behind_head":
            return f"behind {named}, ahead of it in its queue"
        if self.kind == "lane_busy":
            if self.limit == 1:
                return f"its lane runs one job at a time and is running {named}"
            return f"its lane runs at most {self.limit} jobs at once and is running {named}"
        if self.kind == "queue_rate_limited":
            return f"its queue is rate-limited until {_utc(self.until)}"
        if self.kind == "lane_rate_limited":
            return f"its lane is rate-limited until {_utc(self.until)}"
        return (f"the owner is at its concurrency ({len(self.job_ids)} running): "
                f"{named}")


@dataclass(frozen=True, slots=True)
class JobWait:
    """What ``explain`` found: the job's ``state`` and, for a queued job,
    what holds it (empty: nothing; the next tick may claim it), read at the
    store's ``read_at`` (epoch ms)."""

    job_id: str
    state: JobState
    holds: tuple[Hold, ...] = field(default=())
    read_at: int = 0

    @property
    def waiting(self) -> bool:
        """Whether the job is queued and something holds it."""
        return self.state == "queued" and bool(self.holds)


def _utc(epoch_ms: int | None) -> str:
    if epoch_ms is None:
        return "an unknown time"
    moment = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
