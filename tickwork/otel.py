"""OpenTelemetry traces and metrics from lifecycle events (CPython hosts).

Needs the ``otel`` extra (``pip install 'tickwork[otel]'``: the
``opentelemetry-api`` package; an SDK and an exporter are the host's
choice). ``OpenTelemetryHook`` is an event hook::

    from tickwork.otel import OpenTelemetryHook
    runtime = OwnerRuntime(db, ..., on_event=OpenTelemetryHook())

It follows the OpenTelemetry semantic conventions for messaging where they
fit, a queue being the destination and a job the message:

* one span per executed attempt, ``process {queue}`` of kind CONSUMER,
  made when the attempt ended (its ``settled`` or ``retried`` event) with
  the claim as its start and the settlement as its end. Attributes:
  ``messaging.system`` ("tickwork"), ``messaging.operation.type``
  ("process"), ``messaging.operation.name`` ("tick"),
  ``messaging.destination.name`` (the queue), ``messaging.message.id`` (the
  job id), ``tickwork.outcome``, ``tickwork.attempt``, ``tickwork.lane``
  and, for an attempt that did not complete, ``error.type`` (its outcome)
  with status ERROR (described by its failure reason);
* ``messaging.process.duration`` (histogram, seconds) and
  ``messaging.client.consumed.messages`` (counter), per executed attempt,
  with ``messaging.system``, ``messaging.operation.name``,
  ``messaging.destination.name`` and ``error.type`` when it did not complete;
* ``tickwork.events`` (counter): every event, by ``tickwork.event.kind``,
  ``messaging.destination.name`` and ``tickwork.outcome``.

Not for Workers (it imports nothing until built, so the bundle may carry it):
the Worker and the Durable Object log JSON lines instead
(``tickwork.logs``).
"""

from __future__ import annotations

from typing import Any, Final

from tickwork.events import Event

__all__ = ["OpenTelemetryHook"]

#: The instrumentation scope of tickwork's spans and instruments.
SCOPE: Final = "tickwork"
SYSTEM: Final = "tickwork"

_MISSING = ("tickwork.otel needs the opentelemetry-api package: install the otel extra "
            "(pip install 'tickwork[otel]')")


def _api() -> tuple[Any, Any, Any]:
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.trace import SpanKind, Status, StatusCode
    except ImportError as error:
        raise ImportError(_MISSING) from error
    return (trace, metrics, (SpanKind, Status, StatusCode))


class OpenTelemetryHook:
    """An event hook making spans and metrics (see the module doc).

    ``tracer_provider`` and ``meter_provider``: the providers to use (the
    globally registered ones by default).
    """

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        trace, metrics, (span_kind, status, status_code) = _api()
        self._tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(SCOPE, meter_provider=meter_provider)
        self._consumer = span_kind.CONSUMER
        self._status, self._error = status, status_code.ERROR
        self._duration = meter.create_histogram(
            "messaging.process.duration", unit="s",
            description="How long an executed attempt of a job ran, claim to settlement")
        self._consumed = meter.create_counter(
            "messaging.client.consumed.messages", unit="{message}",
            description="Executed attempts of jobs")
        self._events = meter.create_counter(
            "tickwork.events", unit="{event}", description="Lifecycle transitions")

    def __call__(self, event: Event) -> None:
        self._events.add(1, {"tickwork.event.kind": event.kind,
                             "messaging.destination.name": event.queue or "",
                             "tickwork.outcome": event.outcome or ""})
        if event.kind not in ("settled", "retried") or event.duration_ms is None:
            return  # no execution of this runtime ended here: no span
        queue = event.queue or ""
        failed = event.outcome != "completed"
        metric_attributes: dict[str, Any] = {
            "messaging.system": SYSTEM, "messaging.operation.name": "tick",
            "messaging.destination.name": queue}
        if failed:
            metric_attributes["error.type"] = event.outcome or "unknown"
        self._duration.record(event.duration_ms / 1000, metric_attributes)
        self._consumed.add(1, metric_attributes)
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM, "messaging.operation.type": "process",
            "messaging.operation.name": "tick", "messaging.destination.name": queue,
            "messaging.message.id": event.job_id or "",
            "tickwork.outcome": event.outcome or "", "tickwork.lane": event.lane or ""}
        if event.attempt is not None:
            attributes["tickwork.attempt"] = event.attempt
        if failed:
            attributes["error.type"] = event.outcome or "unknown"
        if event.error is not None:  # what the executor raised ("Type: message")
            attributes["tickwork.error"] = event.error
        end_ns = event.at * 1_000_000
        span = self._tracer.start_span(f"process {queue}", kind=self._consumer,
                                       attributes=attributes,
                                       start_time=end_ns - event.duration_ms * 1_000_000)
        if failed:
            span.set_status(self._status(self._error, event.reason or event.outcome))
        span.end(end_time=end_ns)
