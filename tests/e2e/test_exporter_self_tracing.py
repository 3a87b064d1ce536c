"""End to end: the exporters' own HTTP calls are never traced, so never budget-checked.

The OTLP/HTTP exporters send with ``requests``; here ``requests`` is instrumented with
opentelemetry-instrumentation-requests on the very provider ``configure()`` built. A GET
made by the application is traced (the instrumentation works); the POSTs to
``/v1/traces``, ``/v1/logs`` and ``/v1/metrics`` made by the exporters must not be.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping

import pytest
import requests
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import latency_budget.export

from .pipeline import BUDGETS, OVER_MODEL_MS, STAGE_OF, emit_request
from .services import CollectorService, JaegerService, poll
from .signals import jaeger_spans, jaeger_tags

pytestmark = pytest.mark.e2e

DELIVERY_TIMEOUT_S = 60.0
URL_KEYS = ("url.full", "http.url")  # stable and old HTTP semantic conventions
OTLP_PATHS = ("/v1/traces", "/v1/logs", "/v1/metrics")
FLUSH_TIMEOUT_S = 20.0


@pytest.fixture
def instrumented_requests() -> Iterator[RequestsInstrumentor]:
    """The requests instrumentor, uninstrumented again after the test."""
    instrumentor = RequestsInstrumentor()
    try:
        yield instrumentor
    finally:
        instrumentor.uninstrument()


def _flush_within(seconds: float, *flushes: Callable[[], bool]) -> None:
    """Run the flushes on a daemon thread; fail if they do not all succeed within ``seconds``.

    An exporter that traces its own calls never empties its queue (each export makes a
    span to export), and the SDK's span flush loops until the queue is empty.
    """
    results: list[bool] = []
    worker = threading.Thread(target=lambda: results.extend(flush() for flush in flushes), daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"flushing still running after {seconds:.0f}s: an export call is being traced"
    assert results == [True] * len(flushes)


def _url(attributes: Mapping[str, object]) -> str:
    return next((str(attributes[key]) for key in URL_KEYS if key in attributes), "")


def test_otlp_export_calls_are_not_traced(
    otel_collector_keep_all: CollectorService,
    jaeger: JaegerService,
    service_name: str,
    instrumented_requests: RequestsInstrumentor,
) -> None:
    """With requests instrumented, the application's GET is traced and the exporters' OTLP POSTs are not."""
    collector = otel_collector_keep_all
    telemetry = latency_budget.export.configure(
        BUDGETS,
        service_name=service_name,
        endpoint=collector.otlp_http_endpoint,
        protocol="http/protobuf",
        set_global=False,
    )
    seen = InMemorySpanExporter()
    telemetry.tracer_provider.add_span_processor(SimpleSpanProcessor(seen))
    instrumented_requests.instrument(tracer_provider=telemetry.tracer_provider)
    try:
        assert requests.get(collector.health_url, timeout=5).status_code == 200  # traced: a control
        over = emit_request(telemetry.tracer_provider.get_tracer("e2e.support-assistant"), model_ms=OVER_MODEL_MS)
        # Export everything while requests is instrumented: a violation log record, the
        # metrics, and last the spans (including any that exporting logs and metrics made).
        assert telemetry.logger_provider is not None
        assert telemetry.meter_provider is not None
        _flush_within(FLUSH_TIMEOUT_S, telemetry.logger_provider.force_flush, telemetry.meter_provider.force_flush)
        _flush_within(FLUSH_TIMEOUT_S, telemetry.tracer_provider.force_flush)
        local: list[ReadableSpan] = list(seen.get_finished_spans())
        reports = telemetry.processor.stats().reports
    finally:
        telemetry.shutdown()

    http_spans = [s for s in local if _url(s.attributes or {})]
    assert [(_url(s.attributes or {}), s.name) for s in http_spans] == [(collector.health_url, "GET")]
    assert sorted(s.name for s in local if s not in http_spans) == sorted(STAGE_OF)
    # The request only: the control GET is a client root with no model call, which the default
    # requests rule leaves alone (docs/budget-file.md#requests); no export call was judged.
    assert reports == 1

    # Jaeger holds the two traces the application made, and nothing of the exporters.
    traces = poll(
        lambda: found if len(found := jaeger.find_traces(service=service_name)) == 2 else None,
        timeout=DELIVERY_TIMEOUT_S,
        what="the request and the control GET in Jaeger",
    )
    stored = [jaeger_tags(span["tags"]) for t in traces for span in jaeger_spans(t)]
    urls = [_url(tags) for tags in stored if _url(tags)]
    assert urls == [collector.health_url]
    assert not any(path in url for url in urls for path in OTLP_PATHS)
    assert over.trace_id in {str(t["traceID"]) for t in traces}
