"""Smoke test of the deployment pipeline: OTLP SDK -> Collector -> Jaeger / file / Prometheus.

Uses only the plain OpenTelemetry SDK, so it checks collector-config.yaml itself, not the
latency_budget package.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from opentelemetry._logs import LogRecord, SeverityNumber
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from .services import CollectorService, JaegerService, poll

pytestmark = pytest.mark.e2e

DELIVERY_TIMEOUT_S = 60.0
VIOLATED_KEY = "latency_budget.violated"


@pytest.fixture
def service_name() -> str:
    """A service.name unique to this test, so the shared Jaeger holds only our traces."""
    return f"e2e-smoke-{uuid.uuid4().hex[:12]}"


def _send_two_traces(collector: CollectorService, resource: Resource) -> tuple[int, int]:
    """Export one trace within budget and one violating it; return (ok_id, violated_id)."""
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=collector.otlp_grpc_endpoint, insecure=True))
    )
    tracer = provider.get_tracer("e2e-smoke")
    # The trace within budget goes first: once the later, violating trace has reached
    # Jaeger, the sampler has already decided about the earlier one.
    with tracer.start_as_current_span("request within budget") as root:
        with tracer.start_as_current_span("model_call"):
            pass
        ok_id = root.get_span_context().trace_id
    with tracer.start_as_current_span("request over budget", attributes={VIOLATED_KEY: True}) as root:
        with tracer.start_as_current_span("model_call"):
            pass
        violated_id = root.get_span_context().trace_id
    provider.shutdown()
    return ok_id, violated_id


def _trace_ids(traces: list[dict[str, object]]) -> set[int]:
    return {int(str(trace["traceID"]), 16) for trace in traces}


def test_violating_trace_is_kept_and_other_trace_is_dropped(
    otel_collector: CollectorService, jaeger: JaegerService, service_name: str
) -> None:
    """Tail sampling keeps the trace whose root span has latency_budget.violated=true and drops the other."""
    resource = Resource.create({"service.name": service_name})
    ok_id, violated_id = _send_two_traces(otel_collector, resource)

    found = poll(
        lambda: jaeger.find_traces(service=service_name, tags=json.dumps({VIOLATED_KEY: "true"})) or None,
        timeout=DELIVERY_TIMEOUT_S,
        what="the violating trace in Jaeger",
    )

    assert _trace_ids(found) == {violated_id}
    assert _trace_ids(jaeger.find_traces(service=service_name)) == {violated_id}
    assert ok_id != violated_id


def test_log_record_reaches_file_exporter(otel_collector: CollectorService) -> None:
    """A log record sent over OTLP/HTTP is written by the collector's file exporter."""
    marker = f"e2e-smoke-log-{uuid.uuid4().hex}"
    provider = LoggerProvider(resource=Resource.create({"service.name": "e2e-smoke"}))
    provider.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{otel_collector.otlp_http_endpoint}/v1/logs"))
    )
    provider.get_logger("e2e-smoke").emit(
        LogRecord(
            timestamp=time.time_ns(),
            severity_number=SeverityNumber.WARN,
            severity_text="WARN",
            body=f"budget exceeded {marker}",
            attributes={"stage": "model_call"},
        )
    )
    provider.shutdown()

    def written() -> str | None:
        if not otel_collector.logs_file.exists():
            return None
        for line in otel_collector.logs_file.read_text().splitlines():
            if marker in line:
                return line
        return None

    line = poll(written, timeout=DELIVERY_TIMEOUT_S, what="the log record in the file exporter")
    record = json.loads(line)["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
    assert record["body"]["stringValue"] == f"budget exceeded {marker}"
    assert record["severityText"] == "WARN"
    assert {"key": "stage", "value": {"stringValue": "model_call"}} in record["attributes"]


def test_metric_reaches_prometheus_scrape(otel_collector: CollectorService) -> None:
    """A counter sent over OTLP/gRPC appears on the collector's Prometheus endpoint."""
    service_name = f"e2e-smoke-{uuid.uuid4().hex[:12]}"
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=otel_collector.otlp_grpc_endpoint, insecure=True),
        export_interval_millis=60_000,  # exported explicitly by shutdown() below
    )
    provider = MeterProvider(resource=Resource.create({"service.name": service_name}), metric_readers=[reader])
    counter = provider.get_meter("e2e-smoke").create_counter(
        "latency_budget.e2e_smoke_requests", unit="1", description="e2e smoke counter"
    )
    counter.add(3, {"stage": "model_call"})
    provider.shutdown()

    def scraped() -> str | None:
        for line in otel_collector.scrape().splitlines():
            if line.startswith("latency_budget_e2e_smoke_requests") and f'service_name="{service_name}"' in line:
                return line
        return None

    line = poll(scraped, timeout=DELIVERY_TIMEOUT_S, what="the counter on the Prometheus scrape")
    assert 'stage="model_call"' in line
    assert float(line.rsplit(" ", 1)[1]) == 3.0
