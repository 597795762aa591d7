"""Rate limits: how often jobs of one queue, or of one lane, may start.

A rate limit lets a queue or a lane start ``starts`` jobs per ``period_ms``,
with up to ``burst`` of them at once after a quiet spell (``burst``
defaults to ``starts``). It is a token bucket, checked and spent inside
the claim on every store: a job is claimed only while its queue's bucket
and its lane's bucket (each where one is set) allow a start, and the claim
spends one start of each.

An executor that meets someone else's limit (an API answering 429) returns
``RateLimited(retry_after_ms)``: the job goes back to its queue without
using an attempt, and a *hold* keeps its lane (or its queue) from starting
any job until then. A hold lives beside the bucket, on the same key; a key
may have a hold and no bucket.

How the bucket is stored (GCRA, the "generic cell rate algorithm"): one
integer, ``next_start``, the earliest time the bucket allows a start, kept
in units of ``1 / starts`` ms so that every step is exact integer
arithmetic (``starts`` per ``period_ms`` need not divide). A claim at
``now`` is allowed when ``next_start <= now * starts``, and moves it to
``max(next_start, now * starts - (burst - 1) * period_ms) + period_ms``:
one start's worth later, where a quiet bucket has first refilled to its
burst. The stores write exactly these expressions in SQL; the functions
below are the same rule in Python, for ``explain`` and the reference
models the tests compare the stores with.

Pure Python: this module runs on Pyodide as well.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from tickwork.model.errors import InvalidArgument
from tickwork.model.limits import LIMIT_KINDS, LimitKind, check_limit_key, check_limit_kind

__all__ = [
    "MAX_RATE_PERIOD_MS",
    "MAX_RATE_STARTS",
    "RateLimit",
    "allows_start",
    "check_rate",
    "next_start_after",
    "rate_in_order",
    "rate_limits_for",
    "released_at",
    "validate_rate_limit",
]

#: The most starts a bucket may allow per period (and the largest burst).
#: With ``now`` in epoch ms, ``now * starts`` stays far inside a signed
#: 64-bit integer (about 4e17 in the year 2100).
MAX_RATE_STARTS: Final = 100_000
#: The longest period: 31 days (a monthly quota).
MAX_RATE_PERIOD_MS: Final = 31 * 24 * 3600 * 1000


@dataclass(frozen=True, slots=True)
class RateLimit:
    """The rate limit and the hold of the queue or lane ``key``.

    ``starts`` per ``period_ms`` with ``burst`` at once: the bucket (all
    three None for a key that only has a hold). Read from a store, it also
    says ``next_start_at``: when the bucket next allows a start (epoch ms;
    at or before the read when it allows one now; None without a bucket),
    ``held_until``: until when an executor's ``RateLimited`` holds the key
    (None when no hold is in force), and ``updated_at``.
    """

    kind: LimitKind
    key: str
    starts: int | None
    period_ms: int | None
    burst: int | None
    next_start_at: int | None = None
    held_until: int | None = None
    updated_at: int | None = None


def _check_count(name: str, value: object, most: int) -> int:
    if (not isinstance(value, int) or isinstance(value, bool)
            or not 1 <= value <= most):
        raise InvalidArgument(name, f"must be an integer from 1 to {most}, got {value!r}")
    return value


def check_rate(starts: object, period_ms: object,
               burst: object = None) -> tuple[int, int, int]:
    """``starts`` (1 to MAX_RATE_STARTS), ``period_ms`` (1 to
    MAX_RATE_PERIOD_MS) and ``burst`` (1 to MAX_RATE_STARTS; None: as many
    as ``starts``), checked."""
    checked_starts = _check_count("starts", starts, MAX_RATE_STARTS)
    checked_period = _check_count("period_ms", period_ms, MAX_RATE_PERIOD_MS)
    checked_burst = (checked_starts if burst is None
                     else _check_count("burst", burst, MAX_RATE_STARTS))
    return checked_starts, checked_period, checked_burst


def validate_rate_limit(kind: object, key: object, starts: object, period_ms: object,
                        burst: object = None) -> RateLimit:
    """A rate limit to store, every argument checked (InvalidArgument naming
    the first bad one)."""
    checked_kind = check_limit_kind(kind)
    checked_key = check_limit_key(checked_kind, key)
    checked = check_rate(starts, period_ms, burst)
    return RateLimit(checked_kind, checked_key, *checked)


def allows_start(next_start: int, starts: int, now: int) -> bool:
    """Whether a bucket whose ``next_start`` (in 1/starts ms) allows a start at ``now``."""
    return next_start <= now * starts


def next_start_after(next_start: int, starts: int, period_ms: int, burst: int,
                     now: int) -> int:
    """``next_start`` after a claim at ``now`` spends one start."""
    return max(next_start, now * starts - (burst - 1) * period_ms) + period_ms


def released_at(limit: RateLimit, now: int) -> int | None:
    """When ``limit`` next lets a job of its key start (epoch ms), or None
    when it lets one start at ``now``: the later of its hold and its
    bucket's next start."""
    waits = [at for at in (limit.held_until, limit.next_start_at)
             if at is not None and at > now]
    return max(waits) if waits else None


def rate_in_order(limits: Iterable[RateLimit]) -> list[RateLimit]:
    """Rate limits as every surface lists them: queues first, then lanes, each by key."""
    return sorted(limits, key=lambda limit: (LIMIT_KINDS.index(limit.kind), limit.key))


def rate_limits_for(queue: str, lane: str,
                    limits: Iterable[RateLimit]) -> tuple[RateLimit | None, RateLimit | None]:
    """The rate limits a job of ``queue`` and ``lane`` starts under: its
    queue's and its lane's (None where the key has none)."""
    queue_limit = lane_limit = None
    for limit in limits:
        if limit.kind == "queue" and limit.key == queue:
            queue_limit = limit
        elif limit.kind == "lane" and limit.key == lane:
            lane_limit = limit
    return queue_limit, lane_limit
