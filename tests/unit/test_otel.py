"""OpenTelemetry spans and metrics from a real runtime's events, recorded by
the SDK's in-memory exporter and reader."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the test extra installs opentelemetry-sdk")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind, StatusCode

from tests.support import ScriptedExecutor, job
from tests.support.shared import ManualNow
from tickwork import OwnerRuntime, Retry
from tickwork.otel import OpenTelemetryHook
from tickwork.stores import Sqlite3Database


class NoWake:
    def recompute(self) -> None:
        return None


@pytest.fixture
def recorded(tmp_path: Path) -> Any:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    hook = OpenTelemetryHook(tracer_provider=tracer_provider,
                             meter_provider=MeterProvider(metric_readers=[reader]))
    import sqlite3

    now = ManualNow()
    connection = sqlite3.connect(tmp_path / "jobs.sqlite3", isolation_level=None)
    runtime = OwnerRuntime(Sqlite3Database(connection), execute=ScriptedExecutor(),
                           is_alive=lambda job: False, wake=NoWake(), clock=now,
                           on_event=hook)
    yield runtime, now, spans, reader
    connection.close()


def metric_points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    assert data is not None
    found: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "tickwork"
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


async def test_one_consumer_span_per_executed_attempt(recorded: Any) -> None:
    runtime, now, spans, _ = recorded
    runtime.ingest(job("ok", queue="mail"))
    runtime.ingest(job("no", queue="mail", payload={"do": "fail_until"},
                       retry=Retry(attempts=2, base_delay_ms=1_000)))
    started = now()
    assert (await runtime.tick()).job_id == "ok"
    assert (await runtime.tick()).status == "retried"
    now.advance(1_000)
    assert (await runtime.tick()).outcome == "failed"
    ok, retried, failed = spans.get_finished_spans()
    for span in (ok, retried, failed):
        assert (span.name, span.kind) == ("process mail", SpanKind.CONSUMER)
        assert span.attributes is not None
        assert {key: span.attributes[key] for key in (
            "messaging.system", "messaging.operation.type", "messaging.operation.name",
            "messaging.destination.name")} == {
            "messaging.system": "tickwork", "messaging.operation.type": "process",
            "messaging.operation.name": "tick", "messaging.destination.name": "mail"}
    assert ok.attributes is not None and failed.attributes is not None
    assert (ok.attributes["messaging.message.id"], ok.attributes["tickwork.outcome"],
            ok.attributes["tickwork.attempt"], ok.attributes["tickwork.lane"]) == (
        "ok", "completed", 1, "lane")
    assert "error.type" not in ok.attributes and ok.status.status_code == StatusCode.UNSET
    assert ok.start_time == ok.end_time == started * 1_000_000  # the manual clock did not move
    assert (failed.attributes["messaging.message.id"], failed.attributes["error.type"],
            failed.attributes["tickwork.attempt"]) == ("no", "failed", 2)
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.status.description == "attempt-2"
    assert failed.end_time == (started + 1_000) * 1_000_000
    assert "tickwork.error" not in failed.attributes  # it returned Failed: nothing raised


async def test_a_raising_executor_puts_its_error_line_on_the_span(recorded: Any) -> None:
    runtime, _, spans, _ = recorded
    runtime.ingest(job("boom", queue="mail", payload={"do": "raise"}))
    assert (await runtime.tick()).failure_reason == "execution_failed"
    (span,) = spans.get_finished_spans()
    record = runtime.read("boom")
    assert span.attributes is not None and record is not None and record.error is not None
    assert span.attributes["tickwork.error"] == record.error.line
    assert span.status.status_code == StatusCode.ERROR


async def test_metrics_per_queue_with_the_error_type(recorded: Any) -> None:
    runtime, _, _, reader = recorded
    runtime.ingest(job("ok", queue="mail"))
    runtime.ingest(job("no", queue="mail", payload={"do": "fail"}))
    runtime.ingest(job("other", queue="sms"))
    for _ in range(3):
        await runtime.tick()
    points = metric_points(reader)
    consumed = {(point.attributes["messaging.destination.name"],
                 point.attributes.get("error.type")): point.value
                for point in points["messaging.client.consumed.messages"]}
    assert consumed == {("mail", None): 1, ("mail", "failed"): 1, ("sms", None): 1}
    durations = {(point.attributes["messaging.destination.name"],
                  point.attributes.get("error.type")): point.count
                 for point in points["messaging.process.duration"]}
    assert durations == consumed
    kinds = {(point.attributes["tickwork.event.kind"],
              point.attributes["messaging.destination.name"]): point.value
             for point in points["tickwork.events"]
             if point.attributes["tickwork.outcome"] in ("", "completed")}
    assert kinds[("ingested", "mail")] == 2 and kinds[("settled", "sms")] == 1


def test_without_the_api_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if not installed
    with pytest.raises(ImportError, match=r"pip install 'tickwork\[otel\]'"):
        OpenTelemetryHook()
