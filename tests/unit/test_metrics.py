"""Metrics from events, and their Prometheus text (parsed back here)."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from tickwork.events import Event, fan_out
from tickwork.metrics import DEFAULT_BUCKETS, Metrics, escape_label_value

_SAMPLE = re.compile(r'([a-z_]+)\{((?:[a-z_]+="(?:[^"\\]|\\.)*",?)*)\} (\S+)')
_LABEL = re.compile(r'([a-z_]+)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples of a text exposition, labels unescaped; every line is
    either a comment or a sample."""
    samples = {}
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.fullmatch(r"# (HELP|TYPE) [a-z_]+ .+", line), line
            continue
        match = _SAMPLE.fullmatch(line)
        assert match, line
        labels = tuple((name, re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], value))
                       for name, value in _LABEL.findall(match[2]))
        samples[(match[1], labels)] = float(match[3])
    return samples


def settled(queue: str, ms: int | None, outcome: str = "completed") -> Event:
    return Event("settled", "j", queue, "lane", 0, outcome=outcome, attempt=1, duration_ms=ms)


def test_events_are_counted_by_kind_queue_and_outcome() -> None:
    metrics = Metrics()
    for event in (Event("ingested", "a", "q", "l", 0), Event("ingested", "b", "q", "l", 0),
                  settled("q", 5), settled("q", 7, "failed"),
                  Event("refused", None, None, "l", 0, reason="r", count=3),
                  Event("purged", None, "q", None, 0, count=9)):
        metrics(event)
    assert metrics.snapshot().events == {
        ("ingested", "q", ""): 2, ("settled", "q", "completed"): 1,
        ("settled", "q", "failed"): 1, ("refused", "", ""): 1, ("purged", "q", ""): 1}


def test_durations_fill_cumulative_buckets_with_inclusive_bounds() -> None:
    metrics = Metrics(buckets=(0.01, 0.1, 1.0))
    for ms in (10, 11, 100, 5_000):
        metrics(settled("q", ms))
    metrics(Event("retried", "j", "q", "l", 0, outcome="failed", duration_ms=1))
    metrics(settled("q", None))  # no execution of this runtime ended it: not timed
    histogram = metrics.snapshot().durations["q"]
    assert histogram.buckets == ((0.01, 2), (0.1, 4), (1.0, 4), (math.inf, 5))
    assert histogram.count == 5 and histogram.sum == pytest.approx(5.122)


def test_prometheus_text_parses_back_to_the_snapshot() -> None:
    metrics = Metrics()
    metrics(settled("q", 20))
    metrics(settled("q", 2_000, "failed"))
    metrics(Event("claimed", "j", "other", "l", 0, attempt=1))
    samples = parse(metrics.prometheus_text())
    assert samples[("tickwork_events_total", (("kind", "settled"), ("queue", "q"),
                                             ("outcome", "completed")))] == 1
    assert samples[("tickwork_events_total", (("kind", "claimed"), ("queue", "other"),
                                             ("outcome", "")))] == 1
    buckets = {dict(labels)["le"]: value for (name, labels), value in samples.items()
               if name == "tickwork_execution_duration_seconds_bucket"}
    assert len(buckets) == len(DEFAULT_BUCKETS) + 1
    assert (buckets["0.025"], buckets["2.5"], buckets["+Inf"]) == (1, 2, 2)
    assert samples[("tickwork_execution_duration_seconds_sum", (("queue", "q"),))] == 2.02
    assert samples[("tickwork_execution_duration_seconds_count", (("queue", "q"),))] == 2
    text = metrics.prometheus_text()
    assert "# TYPE tickwork_events_total counter\n" in text
    assert "# TYPE tickwork_execution_duration_seconds histogram\n" in text


def test_label_values_are_escaped() -> None:
    odd = 'a "quoted"\\ queue\nwith a line feed'
    assert escape_label_value(odd) == 'a \\"quoted\\"\\\\ queue\\nwith a line feed'
    metrics = Metrics()
    metrics(settled(odd, 1))
    samples = parse(metrics.prometheus_text())
    assert ("tickwork_execution_duration_seconds_count", (("queue", odd),)) in samples


def test_an_empty_registry_still_describes_its_metrics() -> None:
    assert Metrics().prometheus_text() == (
        "# HELP tickwork_events_total Lifecycle transitions tickwork reported, by kind, "
        "queue and outcome.\n"
        "# TYPE tickwork_events_total counter\n"
        "# HELP tickwork_execution_duration_seconds How long attempts ran, from their claim "
        "to their settlement or retry.\n"
        "# TYPE tickwork_execution_duration_seconds histogram\n")


@pytest.mark.parametrize("buckets", [(), (1.0, 0.5), (0.0,), (math.inf,), (1.0, 1.0), ("1",)])
def test_bad_buckets_are_refused(buckets: tuple[object, ...]) -> None:
    with pytest.raises(ValueError, match="buckets"):
        Metrics(buckets=buckets)  # type: ignore[arg-type]


def test_fan_out_isolates_each_hooks_failure(caplog: pytest.LogCaptureFixture,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from tickwork import events

    monkeypatch.setattr(events, "HOOK_FAILURE_LOG_INTERVAL_S", 0.0)  # log every failure
    seen: list[str] = []

    def broken(event: Event) -> None:
        raise RuntimeError("broken")

    hook = fan_out(broken, lambda event: seen.append(event.kind), broken)
    hook(Event("ingested", "a", "q", "l", 0))
    assert seen == ["ingested"]
    assert [record.exc_info is not None for record in caplog.records
            if record.name == "tickwork.events"] == [True, True]
    with pytest.raises(TypeError, match="callables"):
        fan_out(seen)  # type: ignore[arg-type]


def test_an_event_as_a_dict_leaves_out_what_is_not_set() -> None:
    event = Event("purged", None, "q", None, 5, count=2)
    assert event.to_dict() == {"kind": "purged", "queue": "q", "at": 5, "count": 2}


def test_queue_series_are_capped_with_an_other_bucket() -> None:
    """Found by an abuse test on main: 10,000 queue names made one scrape
    16.6 MB and 220,004 lines."""
    from tickwork.metrics import OTHER_QUEUE

    metrics = Metrics(max_queues=3)
    for number in range(10_000):
        metrics(Event("settled", f"j{number}", f"q{number}", "l", 0, outcome="completed",
                      duration_ms=5))
    metrics(Event("refused", None, None, "l", 0, reason="down", count=1))
    snapshot = metrics.snapshot()
    assert set(snapshot.durations) == {"q0", "q1", "q2", OTHER_QUEUE}
    assert snapshot.events[("settled", OTHER_QUEUE, "completed")] == 9_997
    assert snapshot.events[("settled", "q1", "completed")] == 1
    assert snapshot.events[("refused", "", "")] == 1
    text = metrics.prometheus_text()
    assert len(text.splitlines()) < 100 and len(text) < 10_000
    metrics(Event("settled", "late", "q2", "l", 0, outcome="failed"))
    assert metrics.snapshot().events[("settled", "q2", "failed")] == 1  # still its own


def test_named_queues_only_get_series_of_their_own() -> None:
    from tickwork.metrics import OTHER_QUEUE

    metrics = Metrics(queues={"billing"})
    for queue in ("billing", "mail", "export"):
        metrics(Event("ingested", "j", queue, "l", 0))
    assert metrics.snapshot().events == {("ingested", "billing", ""): 1,
                                         ("ingested", OTHER_QUEUE, ""): 2}


@pytest.mark.parametrize("options", [{"max_queues": -1}, {"max_queues": True},
                                     {"queues": "billing"}, {"queues": [1]}])
def test_bad_caps_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Metrics(**options)


def test_queue_gauges_sum_backlogs_by_queue_and_keep_the_longest_wait() -> None:
    from tickwork import QueueBacklog

    metrics = Metrics()
    # Two owners with a queue of one name, and another queue; read at 10 s.
    backlog = [QueueBacklog("mail", 3, 1, 1, 4_000, 10_000),
               QueueBacklog("mail", 2, 0, 0, 9_500, 10_000),
               QueueBacklog("export", 0, 5, 0, None, 10_000)]
    samples = parse(metrics.prometheus_text(backlog))
    jobs = {(dict(labels)["queue"], dict(labels)["state"]): value
            for (name, labels), value in samples.items() if name == "tickwork_queue_jobs"}
    assert jobs == {("mail", "ready"): 5, ("mail", "delayed"): 1, ("mail", "running"): 1,
                    ("export", "ready"): 0, ("export", "delayed"): 5, ("export", "running"): 0}
    ages = {dict(labels)["queue"]: value for (name, labels), value in samples.items()
            if name == "tickwork_queue_oldest_ready_age_seconds"}
    assert ages == {"mail": 6.0, "export": 0.0}
    # Once a queue has nothing unsettled its series read 0; they stay.
    emptied = parse(metrics.prometheus_text([]))
    assert emptied[("tickwork_queue_jobs", (("queue", "mail"), ("state", "ready")))] == 0
    assert emptied[("tickwork_queue_oldest_ready_age_seconds", (("queue", "export"),))] == 0
    # Without a backlog (a host that reads none), no gauge is described.
    assert "tickwork_queue_jobs" not in metrics.prometheus_text()


def test_queue_gauges_share_the_counters_cap() -> None:
    from tickwork import QueueBacklog
    from tickwork.metrics import OTHER_QUEUE

    metrics = Metrics(max_queues=2)
    backlog = [QueueBacklog(f"q{n}", 1, 0, 0, 1_000 - n, 2_000) for n in range(1_000)]
    text = metrics.prometheus_text(backlog)
    samples = parse(text)
    ages = {dict(labels)["queue"]: value for (name, labels), value in samples.items()
            if name == "tickwork_queue_oldest_ready_age_seconds"}
    assert ages == {"q0": 1.0, "q1": 1.001, OTHER_QUEUE: 1.999}
    assert samples[("tickwork_queue_jobs", (("queue", OTHER_QUEUE), ("state", "ready")))] == 998
    assert len(text.splitlines()) < 40
