"""End to end: the collector's tail sampler keeps what LatencyBudgetProcessor marked as violated.

The ``otel_collector`` fixture keeps no trace within budget (sampling percentage 0), as a
deployment that stores only the slow requests would.
"""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from latency_budget import LatencyBudgetProcessor

from .pipeline import BUDGETS, OVER_MODEL_MS, STAGE_OF, WITHIN_MODEL_MS, emit_request
from .services import CollectorService, JaegerService, poll
from .signals import collector_trace_ids

pytestmark = pytest.mark.e2e

DELIVERY_TIMEOUT_S = 60.0


def test_violating_trace_is_kept_and_trace_within_budget_is_dropped(
    otel_collector: CollectorService, jaeger: JaegerService, service_name: str
) -> None:
    """With sampling at 0%, Jaeger and the trace file get the request the processor marked violated, not the other."""
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    exporter = OTLPSpanExporter(endpoint=otel_collector.otlp_grpc_endpoint, insecure=True)
    provider.add_span_processor(LatencyBudgetProcessor(BUDGETS, BatchSpanProcessor(exporter)))
    tracer = provider.get_tracer("e2e.support-assistant")
    # The good request goes first, in the same export: once the violating one is stored,
    # the sampler has decided about both.
    within = emit_request(tracer, model_ms=WITHIN_MODEL_MS)
    over = emit_request(tracer, model_ms=OVER_MODEL_MS)
    provider.shutdown()

    def stored() -> dict[str, object] | None:
        found = jaeger.get_trace(over.trace_id)
        return found if found is not None and len(found["spans"]) == len(STAGE_OF) else None  # type: ignore[arg-type]

    poll(stored, timeout=DELIVERY_TIMEOUT_S, what="the violating trace in Jaeger")
    written = poll(
        lambda: ids if over.trace_id in (ids := collector_trace_ids(otel_collector.traces_file)) else None,
        timeout=DELIVERY_TIMEOUT_S,
        what="the violating trace in the collector's trace file",
    )

    assert {str(t["traceID"]) for t in jaeger.find_traces(service=service_name)} == {over.trace_id}
    assert jaeger.get_trace(within.trace_id) is None
    assert within.trace_id not in written
