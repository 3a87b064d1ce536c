"""End to end: what LatencyBudgetProcessor writes, through the real OTLP exporters, Collector and Jaeger.

One request over budget and one within it are sent twice, once set up with
``latency_budget.export.configure()`` (OTLP/HTTP) and once with hand-built providers, the
processor, ``ViolationLogEmitter`` and ``BudgetMetrics`` (OTLP/gRPC), as the README shows.
The collector keeps every trace, so a search that leaves out the good trace means
something. Then Jaeger's HTTP API, the collector's log file and its Prometheus endpoint
are read back.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import pytest

import latency_budget.export
from latency_budget import LatencyBudgetProcessor
from latency_budget.export import BudgetMetrics, ViolationLogEmitter

from .otlp import otlp_providers
from .pipeline import (
    BUDGETS,
    MODEL_BUDGET_MS,
    OVER_MODEL_MS,
    STAGE_OF,
    TOTAL_BUDGET_MS,
    WITHIN_MODEL_MS,
    EmittedRequest,
    emit_request,
)
from .services import CollectorService, JaegerService, poll
from .signals import (
    LogRecord,
    collector_log_records,
    jaeger_events,
    jaeger_root,
    jaeger_spans,
    jaeger_tags,
    prometheus_samples,
    total,
)

pytestmark = pytest.mark.e2e

DELIVERY_TIMEOUT_S = 60.0
VIOLATION = "latency_budget.violation"
STAGE_DURATION = "latency_budget_stage_duration_milliseconds"
TRACE_DURATION = "latency_budget_trace_duration_milliseconds"
VIOLATIONS = "latency_budget_violations_total"


@dataclass(frozen=True)
class Sent:
    """Two requests sent through one setup: ``over`` breaks its budgets, ``within`` does not."""

    setup: str
    service: str
    collector: CollectorService
    over: EmittedRequest
    within: EmittedRequest


def _send_with_configure(collector: CollectorService, service: str) -> tuple[EmittedRequest, EmittedRequest]:
    telemetry = latency_budget.export.configure(
        BUDGETS,
        service_name=service,
        endpoint=collector.otlp_http_endpoint,
        protocol="http/protobuf",
        set_global=False,
    )
    tracer = telemetry.tracer_provider.get_tracer("e2e.support-assistant")
    try:
        within = emit_request(tracer, model_ms=WITHIN_MODEL_MS)
        over = emit_request(tracer, model_ms=OVER_MODEL_MS)
    finally:
        telemetry.shutdown()  # flushes traces, logs and metrics
    return over, within


def _send_with_hand_built_providers(collector: CollectorService, service: str) -> tuple[EmittedRequest, EmittedRequest]:
    with otlp_providers(collector, service) as providers:
        providers.tracer.add_span_processor(
            LatencyBudgetProcessor(
                BUDGETS,
                providers.span_exporting_processor(),
                on_report=[ViolationLogEmitter(providers.logger), BudgetMetrics(providers.meter)],
            )
        )
        tracer = providers.tracer.get_tracer("e2e.support-assistant")
        within = emit_request(tracer, model_ms=WITHIN_MODEL_MS)
        over = emit_request(tracer, model_ms=OVER_MODEL_MS)
    return over, within


_SETUPS = {
    "configure-http": _send_with_configure,
    "hand-built-grpc": _send_with_hand_built_providers,
}


@pytest.fixture(scope="module", params=sorted(_SETUPS))
def sent(request: pytest.FixtureRequest, otel_collector_keep_all: CollectorService) -> Sent:
    """The two requests, sent once per setup under a service name of their own."""
    setup: str = request.param
    service = f"e2e-pipeline-{setup}-{uuid.uuid4().hex[:8]}"
    over, within = _SETUPS[setup](otel_collector_keep_all, service)
    return Sent(setup, service, otel_collector_keep_all, over, within)


def _ids(traces: list[dict[str, object]]) -> set[str]:
    return {str(t["traceID"]) for t in traces}


def _complete_trace(jaeger: JaegerService, trace_id: str) -> dict[str, Any]:
    """The trace from ``/api/traces/{id}`` once all of its spans are in Jaeger."""

    def probe() -> dict[str, Any] | None:
        found = jaeger.get_trace(trace_id)
        return found if found is not None and len(jaeger_spans(found)) == len(STAGE_OF) else None

    return poll(probe, timeout=DELIVERY_TIMEOUT_S, what=f"all spans of trace {trace_id} in Jaeger")


def test_tag_search_finds_the_violating_trace_and_not_the_good_one(sent: Sent, jaeger: JaegerService) -> None:
    """Jaeger's search for latency_budget.violated=true finds the request over budget only, though both are stored."""

    def both_stored() -> set[str] | None:
        ids = _ids(jaeger.find_traces(service=sent.service))
        return ids if {sent.over.trace_id, sent.within.trace_id} <= ids else None

    stored = poll(both_stored, timeout=DELIVERY_TIMEOUT_S, what="both traces in Jaeger")
    violated = jaeger.find_traces(service=sent.service, tags=json.dumps({"latency_budget.violated": "true"}))

    assert stored == {sent.over.trace_id, sent.within.trace_id}
    assert _ids(violated) == {sent.over.trace_id}


def test_root_span_tags_carry_the_totals_and_the_stages_over_budget(sent: Sent, jaeger: JaegerService) -> None:
    """The root span's tags in Jaeger hold the total budget and actual, the profile and the stages over budget."""
    over = jaeger_tags(jaeger_root(_complete_trace(jaeger, sent.over.trace_id))["tags"])
    within = jaeger_tags(jaeger_root(_complete_trace(jaeger, sent.within.trace_id))["tags"])

    assert over["latency_budget.violated"] is True
    assert over["latency_budget.total.budget_ms"] == TOTAL_BUDGET_MS
    assert over["latency_budget.total.actual_ms"] == pytest.approx(sent.over.total_ms)
    assert json.loads(over["latency_budget.over_budget_stages"]) == ["model_call", "total"]  # Jaeger: arrays as JSON
    assert over["latency_budget.profile"] == "default"
    assert over["latency_budget.critical_stage"] == "model_call"
    assert within["latency_budget.violated"] is False
    assert within["latency_budget.total.actual_ms"] == pytest.approx(sent.within.total_ms)
    assert json.loads(within.get("latency_budget.over_budget_stages", "[]")) == []


def test_violation_events_are_logs_of_the_root_span(sent: Sent, jaeger: JaegerService) -> None:
    """Each broken budget is a latency_budget.violation log on the root span, with its stage and over_ms."""
    over_root = jaeger_root(_complete_trace(jaeger, sent.over.trace_id))
    within_root = jaeger_root(_complete_trace(jaeger, sent.within.trace_id))
    events = {(e["latency_budget.stage"], e["latency_budget.kind"]): e for e in jaeger_events(over_root, VIOLATION)}

    assert set(events) == {("model_call", "duration"), ("total", "total")}
    model = events["model_call", "duration"]
    assert model["latency_budget.over_ms"] == pytest.approx(OVER_MODEL_MS - MODEL_BUDGET_MS)
    assert model["latency_budget.budget_ms"] == MODEL_BUDGET_MS
    assert model["latency_budget.actual_ms"] == pytest.approx(OVER_MODEL_MS)
    assert model["latency_budget.severity"] == "error"
    assert events["total", "total"]["latency_budget.over_ms"] == pytest.approx(sent.over.total_ms - TOTAL_BUDGET_MS)
    assert jaeger_events(within_root, VIOLATION) == []


def test_stage_spans_carry_their_stage(sent: Sent, jaeger: JaegerService) -> None:
    """Every stage span has latency_budget.stage in Jaeger; the root and the database query have none."""
    for emitted in (sent.over, sent.within):
        spans = {
            s["operationName"]: jaeger_tags(s["tags"]) for s in jaeger_spans(_complete_trace(jaeger, emitted.trace_id))
        }
        assert {name: tags.get("latency_budget.stage") for name, tags in spans.items()} == STAGE_OF
    over_chat = next(
        jaeger_tags(s["tags"])
        for s in jaeger_spans(_complete_trace(jaeger, sent.over.trace_id))
        if s["operationName"] == "chat gpt-4o"
    )
    assert over_chat["latency_budget.violated"] is True
    assert over_chat["latency_budget.actual_ms"] == pytest.approx(OVER_MODEL_MS)
    assert over_chat["latency_budget.stage_budget_ms"] == MODEL_BUDGET_MS


def test_violation_log_records_reach_the_collector(sent: Sent) -> None:
    """Each violation is an OTLP log record in the collector's file output, linked to the root span."""

    def written() -> list[LogRecord] | None:
        records = [
            r for r in collector_log_records(sent.collector.logs_file) if r.resource.get("service.name") == sent.service
        ]
        return records if len(records) >= 2 else None

    records = poll(written, timeout=DELIVERY_TIMEOUT_S, what="the violation log records in the collector's file")
    by_violation = {(r.attributes["latency_budget.stage"], r.attributes["latency_budget.kind"]): r for r in records}

    assert len(records) == 2
    assert set(by_violation) == {("model_call", "duration"), ("total", "total")}
    for record in records:
        assert record.record.get("eventName") == VIOLATION
        assert record.attributes["event.name"] == VIOLATION
        assert record.record["traceId"] == sent.over.trace_id
        assert record.record["spanId"] == sent.over.root_span_id
        assert record.record["severityText"] == "ERROR"
        assert record.attributes["latency_budget.profile"] == "default"
    model = by_violation["model_call", "duration"]
    assert model.attributes["latency_budget.over_ms"] == pytest.approx(OVER_MODEL_MS - MODEL_BUDGET_MS)
    assert "model_call" in model.record["body"]["stringValue"]


def test_budget_metrics_reach_the_prometheus_endpoint(sent: Sent) -> None:
    """Stage and trace duration histograms and the violation counter are scraped from the collector, by label."""

    def scraped() -> list[Any] | None:
        samples = prometheus_samples(sent.collector.scrape(), service_name=sent.service)
        return samples if total(samples, f"{TRACE_DURATION}_count") == 2 else None

    samples = poll(scraped, timeout=DELIVERY_TIMEOUT_S, what="the budget metrics on the Prometheus endpoint")

    def stage(name: str, violated: str, suffix: str = "count") -> float | None:
        labels = {
            "latency_budget_stage": name,
            "latency_budget_profile": "default",
            "latency_budget_violated": violated,
        }
        return total(samples, f"{STAGE_DURATION}_{suffix}", **labels)

    assert stage("model_call", "true") == 1
    assert stage("model_call", "true", "sum") == pytest.approx(OVER_MODEL_MS)
    assert stage("model_call", "false") == 1
    assert stage("retrieval", "false") == 2
    assert stage("tool_calls", "false") == 2
    assert stage("retrieval", "true") is None
    error = {"latency_budget_severity": "error"}
    assert total(samples, VIOLATIONS, latency_budget_stage="model_call", latency_budget_kind="duration", **error) == 1
    assert total(samples, VIOLATIONS, latency_budget_stage="total", latency_budget_kind="total", **error) == 1
    assert total(samples, VIOLATIONS) == 2
    assert total(samples, f"{TRACE_DURATION}_count", latency_budget_violated="true") == 1
    assert total(samples, f"{TRACE_DURATION}_count", latency_budget_violated="false") == 1
    assert total(samples, f"{TRACE_DURATION}_sum") == pytest.approx(sent.over.total_ms + sent.within.total_ms)
