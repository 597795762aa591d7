"""Metrics: counters and execution durations from lifecycle events.

``Metrics()`` is an event hook (pass it as ``on_event``, or through
``tickwork.events.fan_out`` beside other hooks) that keeps, in memory:

* ``tickwork_events_total{kind, queue, outcome}``: one per event (a
  ``purged``, ``pruned`` or ``refused`` event counts once, whatever its ``count``);
  ``queue`` is empty for a lane refusal, ``outcome`` for kinds without one;
* ``tickwork_execution_duration_seconds{queue}``: a histogram of how long
  attempts ran, claim to settlement or retry (the ``settled`` and
  ``retried`` events with a ``duration_ms``), over ``DEFAULT_BUCKETS``
  (seconds) unless other buckets are given.

Cardinality is bounded: the first ``max_queues`` queue names seen (100 by
default), or exactly the ``queues`` given, get series of their own; every
other queue is counted under ``queue="_other"`` (``OTHER_QUEUE``). So a
host with 10,000 queue names answers a scrape of a few hundred lines, not
220,000 (measured before the cap: 16.6 MB, 364 ms).

and, when ``prometheus_text`` is given the stores' backlog
(``QueueBacklog``, from a runtime's ``backlog()``), gauges read at scrape
time:

* ``tickwork_queue_jobs{queue, state}``: jobs ``ready`` to run, ``delayed``
  (waiting for their time) and ``running``;
* ``tickwork_queue_oldest_ready_age_seconds{queue}``: how long the oldest
  ready job has waited since it became ready (0 without one): the queue's
  latency, the gauge to alert on.

A runtime's ``backlog()`` reads only its indexes of unsettled jobs, never
the settled history, so a scrape costs in proportion to the backlog. The
gauges sum (and the age takes the largest) over every backlog given for a
queue label: several owners' queues of one name are one series. A queue
with a series of its own reads 0 once nothing of it is unsettled.

``snapshot()`` returns the counters as plain data, ``prometheus_text()`` in the
Prometheus text exposition format 0.0.4 (what ``tickwork serve`` answers at
``GET /v1/metrics``). Counts start at zero with the process: Prometheus
reads a restart as a counter reset.

Pure Python, no locks: a runtime calls its hook from its event loop's
thread. Runs on Pyodide as well.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from tickwork.events import Event
from tickwork.model.outcomes import QueueBacklog

__all__ = ["DEFAULT_BUCKETS", "DEFAULT_MAX_QUEUES", "OTHER_QUEUE", "PROMETHEUS_CONTENT_TYPE",
           "DurationHistogram", "Metrics", "MetricsSnapshot", "escape_label_value"]

#: Upper bounds (seconds) of the duration histogram's buckets: from 5 ms to
#: 15 minutes, the span of a webhook call to a long job. ``+Inf`` is implied.
DEFAULT_BUCKETS: Final[tuple[float, ...]] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
    300.0, 900.0)

#: Queue names with series of their own, unless ``queues`` names them.
DEFAULT_MAX_QUEUES: Final = 100
#: The ``queue`` label every other queue's events are counted under.
OTHER_QUEUE: Final = "_other"

#: The content type of ``prometheus_text()``.
PROMETHEUS_CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

_EVENTS: Final = "tickwork_events_total"
_DURATION: Final = "tickwork_execution_duration_seconds"
_QUEUE_JOBS: Final = "tickwork_queue_jobs"
_OLDEST_READY: Final = "tickwork_queue_oldest_ready_age_seconds"


@dataclass(frozen=True, slots=True)
class DurationHistogram:
    """One queue's durations: cumulative counts per bucket upper bound (the
    last one is ``+Inf``, equal to ``count``), their sum in seconds."""

    buckets: tuple[tuple[float, int], ...]
    sum: float
    count: int


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """What ``Metrics`` counted so far: ``events[(kind, queue, outcome)]``
    (empty strings where an event has none) and ``durations[queue]``."""

    events: dict[tuple[str, str, str], int]
    durations: dict[str, DurationHistogram]


class Metrics:
    """An event hook counting events and timing executions (see the module doc)."""

    def __init__(self, buckets: Sequence[float] = DEFAULT_BUCKETS, *,
                 max_queues: int = DEFAULT_MAX_QUEUES,
                 queues: Collection[str] | None = None) -> None:
        if isinstance(max_queues, bool) or not isinstance(max_queues, int) or max_queues < 0:
            raise ValueError(f"max_queues must be 0 or more, got {max_queues!r}")
        if queues is not None and (isinstance(queues, str)
                                   or not all(isinstance(name, str) for name in queues)):
            raise ValueError("queues must be a collection of queue names")
        #: Queue names labelled as themselves; the fixed set when ``queues`` is given.
        self._labelled: set[str] = set(queues) if queues is not None else set()
        self._fixed = queues is not None
        self._max_queues = max_queues
        bounds = tuple(buckets)
        if not bounds:
            raise ValueError("buckets must name at least one upper bound")
        for bound in bounds:
            if isinstance(bound, bool) or not isinstance(bound, int | float) or not (
                    math.isfinite(bound) and bound > 0):
                raise ValueError(f"buckets must be positive finite seconds, got {bound!r}")
        if list(bounds) != sorted(set(bounds)):
            raise ValueError(f"buckets must be strictly increasing, got {bounds!r}")
        self._bounds: tuple[float, ...] = tuple(float(bound) for bound in bounds)
        self._events: dict[tuple[str, str, str], int] = {}
        # Per queue: a count per bucket (not cumulative; +Inf last), the sum.
        self._durations: dict[str, tuple[list[int], list[float]]] = {}

    @property
    def buckets(self) -> tuple[float, ...]:
        return self._bounds

    def _queue_label(self, queue: str | None) -> str:
        if not queue:
            return ""  # a lane refusal names no queue
        labelled = self._labelled
        if queue in labelled:
            return queue
        if not self._fixed and len(labelled) < self._max_queues:
            labelled.add(queue)
            return queue
        return OTHER_QUEUE

    def __call__(self, event: Event) -> None:
        queue = self._queue_label(event.queue)
        key = (event.kind, queue, event.outcome or "")
        self._events[key] = self._events.get(key, 0) + 1
        if event.duration_ms is not None and event.kind in ("settled", "retried"):
            slot = self._durations.get(queue)
            if slot is None:
                slot = self._durations[queue] = ([0] * (len(self._bounds) + 1), [0.0])
            seconds = max(0, event.duration_ms) / 1000
            # le is inclusive: a duration equal to a bound falls in its bucket.
            slot[0][bisect_left(self._bounds, seconds)] += 1
            slot[1][0] += seconds

    def snapshot(self) -> MetricsSnapshot:
        durations = {}
        for queue, (counts, total) in self._durations.items():
            running, cumulative = 0, []
            for bound, count in zip((*self._bounds, math.inf), counts, strict=True):
                running += count
                cumulative.append((bound, running))
            durations[queue] = DurationHistogram(tuple(cumulative), total[0], running)
        return MetricsSnapshot(dict(self._events), durations)

    def prometheus_text(self, backlog: Iterable[QueueBacklog] | None = None) -> str:
        """Every metric in the Prometheus text exposition format 0.0.4; the
        queue gauges too when ``backlog`` is given (see the module doc)."""
        snapshot = self.snapshot()
        lines = [
            f"# HELP {_EVENTS} Lifecycle transitions tickwork reported, by kind, queue "
            "and outcome.",
            f"# TYPE {_EVENTS} counter",
        ]
        for (kind, queue, outcome), value in sorted(snapshot.events.items()):
            lines.append(f"{_EVENTS}{_labels(kind=kind, queue=queue, outcome=outcome)} {value}")
        lines += [
            f"# HELP {_DURATION} How long attempts ran, from their claim to their "
            "settlement or retry.",
            f"# TYPE {_DURATION} histogram",
        ]
        for queue, histogram in sorted(snapshot.durations.items()):
            for bound, count in histogram.buckets:
                lines.append(f"{_DURATION}_bucket{_labels(queue=queue, le=_number(bound))} "
                             f"{count}")
            lines.append(f"{_DURATION}_sum{_labels(queue=queue)} {_number(histogram.sum)}")
            lines.append(f"{_DURATION}_count{_labels(queue=queue)} {histogram.count}")
        if backlog is not None:
            lines += self._gauge_lines(backlog)
        return "\n".join(lines) + "\n"

    def _gauge_lines(self, backlog: Iterable[QueueBacklog]) -> list[str]:
        # Per queue label: ready, delayed, running, the oldest ready age (ms).
        # Every queue with a series of its own reads 0 once it has nothing
        # unsettled: a series that vanished would look like a broken scrape.
        gauges: dict[str, list[int]] = {queue: [0, 0, 0, 0] for queue in self._labelled}
        for entry in backlog:
            values = gauges.setdefault(self._queue_label(entry.queue), [0, 0, 0, 0])
            values[0] += entry.ready
            values[1] += entry.delayed
            values[2] += entry.running
            values[3] = max(values[3], entry.oldest_ready_age_ms)
        lines = [
            f"# HELP {_QUEUE_JOBS} Unsettled jobs by queue: ready to run, delayed (waiting "
            "for their time) and running.",
            f"# TYPE {_QUEUE_JOBS} gauge",
        ]
        for queue, values in sorted(gauges.items()):
            for state, value in zip(("ready", "delayed", "running"), values, strict=False):
                lines.append(f"{_QUEUE_JOBS}{_labels(queue=queue, state=state)} {value}")
        lines += [
            f"# HELP {_OLDEST_READY} How long the queue's oldest ready job has waited since "
            "it became ready (0 without one).",
            f"# TYPE {_OLDEST_READY} gauge",
        ]
        for queue, values in sorted(gauges.items()):
            lines.append(f"{_OLDEST_READY}{_labels(queue=queue)} {_number(values[3] / 1000)}")
        return lines


def escape_label_value(value: str) -> str:
    """A label value as the text format writes it: backslash, double quote
    and line feed escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{name}="{escape_label_value(value)}"'
                          for name, value in labels.items()) + "}"


def _number(value: float) -> str:
    if value == math.inf:
        return "+Inf"
    return repr(float(value))
