"""End to end: a collector outage never breaks or blocks the application.

The application is set up with ``latency_budget.export.configure()`` (traces, violation
logs and metrics over OTLP/gRPC, exported on the SDK's background threads) and a short
``OTEL_EXPORTER_OTLP_TIMEOUT``. The collector is stopped while requests keep coming, and
started again.
"""

from __future__ import annotations

import logging
import time

import pytest

import latency_budget.export

from .pipeline import BUDGETS, OVER_MODEL_MS, STAGE_OF, WITHIN_MODEL_MS, EmittedRequest, emit_request
from .services import CollectorService, JaegerService, poll
from .signals import LogRecord, collector_log_records, prometheus_samples, total

pytestmark = pytest.mark.e2e

EXPORT_TIMEOUT_S = 2  # OTEL_EXPORTER_OTLP_TIMEOUT, in seconds for the Python exporters
# A request whose spans took this long to start and end would have waited for an export.
BLOCKED_S = EXPORT_TIMEOUT_S / 4
DELIVERY_TIMEOUT_S = 60.0
OUTAGE_TIMEOUT_S = 30.0
EXPORTER_LOGGER = "opentelemetry.exporter.otlp.proto.grpc.exporter"


def test_requests_go_on_unblocked_while_the_collector_is_down_and_arrive_after_it_is_back(
    private_collector: CollectorService,
    jaeger: JaegerService,
    service_name: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Spans start and end without waiting and without errors during an outage; traces flow again after restart."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", str(EXPORT_TIMEOUT_S))
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")  # ms: export soon, so exports run into the outage
    monkeypatch.setenv("OTEL_BLRP_SCHEDULE_DELAY", "100")
    caplog.set_level(logging.WARNING, logger=EXPORTER_LOGGER)
    telemetry = latency_budget.export.configure(
        BUDGETS,
        service_name=service_name,
        endpoint=private_collector.otlp_grpc_endpoint,
        set_global=False,
        metric_interval_s=0.5,
    )
    tracer = telemetry.tracer_provider.get_tracer("e2e.support-assistant")
    emitted: list[EmittedRequest] = []
    durations: list[float] = []

    def request(model_ms: int) -> EmittedRequest:
        started = time.perf_counter()
        sent = emit_request(tracer, model_ms=model_ms)
        durations.append(time.perf_counter() - started)
        emitted.append(sent)
        return sent

    def export_failed() -> bool:
        return any(r.name == EXPORTER_LOGGER and "traces" in r.getMessage() for r in caplog.records)

    try:
        before = request(WITHIN_MODEL_MS)
        _wait_for_trace(jaeger, before.trace_id)

        private_collector.stop()
        deadline = time.monotonic() + OUTAGE_TIMEOUT_S
        # Keep serving requests until the span exporter has run into the outage, then for
        # as long as one export may wait: each request alternates over and within budget.
        while not export_failed():
            assert time.monotonic() < deadline, "the span exporter never reported the outage"
            request(OVER_MODEL_MS if len(emitted) % 2 else WITHIN_MODEL_MS)
        failed_at = time.monotonic()
        while time.monotonic() < failed_at + EXPORT_TIMEOUT_S:
            request(OVER_MODEL_MS if len(emitted) % 2 else WITHIN_MODEL_MS)
        during = len(durations) - 1
        slowest_during = max(durations[1:])

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

    assert during >= 40
    assert slowest_during < BLOCKED_S, f"a request took {slowest_during:.3f}s to trace while the collector was down"
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
