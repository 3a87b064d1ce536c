"""End to end: a collector outage never breaks or blocks the application.

The application is set up with ``latency_budget.export.configure()`` (traces, violation
logs and metrics over OTLP/gRPC, exported on the SDK's background threads) and a short
``OTEL_EXPORTER_OTLP_TIMEOUT``; the span exporter is the real OTLP one, wrapped to note how
many requests had completed as each export began and ended. The collector is stopped while
requests keep coming, and started again. What is checked is ordering and counts, never a
duration: requests complete while a failing export is in flight, and every request
arrives once the collector is back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

import latency_budget.export

from .pipeline import BUDGETS, OVER_MODEL_MS, STAGE_OF, WITHIN_MODEL_MS, EmittedRequest, emit_request
from .services import CollectorService, JaegerService, poll
from .signals import LogRecord, collector_log_records, prometheus_samples, total

pytestmark = pytest.mark.e2e

EXPORT_TIMEOUT_S = 2  # OTEL_EXPORTER_OTLP_TIMEOUT, in seconds for the Python exporters
REQUESTS_DURING = 40  # requests served while the collector is down
DELIVERY_TIMEOUT_S = 60.0
# Only a guard against a hang: the exporter reports the outage after EXPORT_TIMEOUT_S, and
# this is loose enough for a loaded 2-core machine. No assertion depends on a duration.
OUTAGE_TIMEOUT_S = 120.0


class _ObservedExporter(SpanExporter):
    """The real OTLP/gRPC span exporter, noting how many requests had completed as each export began and ended."""

    def __init__(self, inner: SpanExporter, completed: Sequence[object]) -> None:
        self._inner = inner
        self._completed = completed
        self._lock = threading.Lock()
        self.exports: list[tuple[int, int, SpanExportResult]] = []  # (completed at start, at end, result)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        begun = len(self._completed)
        result = self._inner.export(spans)
        with self._lock:
            self.exports.append((begun, len(self._completed), result))
        return result

    def failed(self) -> list[tuple[int, int, SpanExportResult]]:
        with self._lock:
            return [e for e in self.exports if e[2] is not SpanExportResult.SUCCESS]

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)


def test_requests_go_on_unblocked_while_the_collector_is_down_and_arrive_after_it_is_back(
    private_collector: CollectorService,
    jaeger: JaegerService,
    service_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Requests complete while a failing export is in flight, with no error; traces flow again after restart."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", str(EXPORT_TIMEOUT_S))
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # ms: export soon, so exports run into the outage
    monkeypatch.setenv("OTEL_BLRP_SCHEDULE_DELAY", "100")
    emitted: list[EmittedRequest] = []
    exporter = _ObservedExporter(
        OTLPSpanExporter(endpoint=private_collector.otlp_grpc_endpoint, insecure=True), emitted
    )
    telemetry = latency_budget.export.configure(
        BUDGETS,
        service_name=service_name,
        endpoint=private_collector.otlp_grpc_endpoint,
        set_global=False,
        metric_interval_s=0.5,
        span_exporter=exporter,
    )
    tracer = telemetry.tracer_provider.get_tracer("e2e.support-assistant")

    def request(model_ms: int) -> EmittedRequest:
        sent = emit_request(tracer, model_ms=model_ms)  # raises if a hook raised into the application
        emitted.append(sent)
        return sent

    try:
        before = request(WITHIN_MODEL_MS)
        _wait_for_trace(jaeger, before.trace_id)

        private_collector.stop()
        first_during = len(emitted)
        deadline = time.monotonic() + OUTAGE_TIMEOUT_S
        # Keep serving requests (alternately over and within budget) until an export that ran
        # into the outage has given up, and REQUESTS_DURING requests have been served.
        while not exporter.failed() or len(emitted) - first_during < REQUESTS_DURING:
            assert time.monotonic() < deadline, "the span exporter never gave up on the stopped collector"
            request(OVER_MODEL_MS if len(emitted) % 2 else WITHIN_MODEL_MS)
        failed_exports = exporter.failed()

        private_collector.start()
        after = request(OVER_MODEL_MS)
        _wait_for_trace(jaeger, after.trace_id)
        records = poll(
            lambda: _violation_records(private_collector, after.trace_id),
            timeout=DELIVERY_TIMEOUT_S,
            what="the violation log records of the request made after the restart",
        )
        # Metrics are cumulative: the first export after the restart counts every request.
        counted = poll(
            lambda: _requests_counted(private_collector, service_name, len(emitted)),
            timeout=DELIVERY_TIMEOUT_S,
            what="every request counted on the Prometheus endpoint",
        )
    finally:
        telemetry.shutdown()

    # Ordering, not timing: had the application waited for exports, no request could have
    # completed between a failing export's start and its end.
    assert max(end - begun for begun, end, _ in failed_exports) >= 1, failed_exports
    assert {r.attributes["latency_budget.stage"] for r in records} == {"model_call", "total"}
    assert counted == len(emitted)


def _wait_for_trace(jaeger: JaegerService, trace_id: str) -> None:
    def complete() -> bool | None:
        found = jaeger.get_trace(trace_id)
        return True if found is not None and len(found["spans"]) == len(STAGE_OF) else None  # type: ignore[arg-type]

    poll(complete, timeout=DELIVERY_TIMEOUT_S, what=f"trace {trace_id} in Jaeger")


def _violation_records(collector: CollectorService, trace_id: str) -> list[LogRecord] | None:
    found = [r for r in collector_log_records(collector.logs_file) if r.record.get("traceId") == trace_id]
    return found or None


def _requests_counted(collector: CollectorService, service_name: str, expected: int) -> float | None:
    samples = prometheus_samples(collector.scrape(), service_name=service_name)
    count = total(samples, "latency_budget_trace_duration_milliseconds_count")
    return count if count == expected else None
