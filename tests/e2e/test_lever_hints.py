"""End to end: every lever's hint on a real trace, through the real OTLP exporters, Collector and Jaeger.

One processor sees some earlier requests (two chat models, streamed calls whose first
token grows with the context, a knowledge-base query), then a request that pulls every
lever: a non-streamed long answer of the slower model, a call with a large context, an
identical query and an identical tool call repeated back to back, more reasoning tokens
than the model's usual, and more model calls than ``max_calls``. Jaeger's copy of its root
span must carry one ``latency_budget.hint`` per lever, each within its stage's time; the
collector's log file one hint record per hint, and its Prometheus endpoint the savings
histogram, with bounded dimensions only.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from opentelemetry.util.types import AttributeValue

from latency_budget import LatencyBudgetProcessor, load_budgets
from latency_budget._core.kinds import HINT_KINDS
from latency_budget._processor import ReportCallback
from latency_budget.export import BudgetMetrics, HintLogEmitter, ViolationLogEmitter

from .otlp import otlp_providers
from .services import CollectorService, JaegerService, poll
from .signals import collector_log_records, jaeger_events, jaeger_root, jaeger_spans, jaeger_tags, prometheus_samples

pytestmark = pytest.mark.e2e

DELIVERY_TIMEOUT_S = 60.0
MS = 1_000_000
BUDGETS = load_budgets(
    text="""\
version: 1
stages:
  retrieval: {budget_ms: 500}
  model_call: {budget_ms: 20000, max_calls: 2}
  tool_calls: {budget_ms: 1000}
""",
    source="e2e-lever-budgets.yaml",
)
STAGES = {"retrieval", "model_call", "tool_calls"}
KINDS = set(HINT_KINDS)
# The target request's hints: (lever, stage), one each.
HINTED = {
    ("streaming", "model_call"),
    ("model_choice", "model_call"),
    ("context_size", "model_call"),
    ("output_length", "model_call"),
    ("reasoning", "model_call"),
    ("iterations", "model_call"),
    ("cache", "retrieval"),
    ("cache", "tool_calls"),
    ("sequential_calls", "tool_calls"),
}
HINT_KEYS = {
    "latency_budget.hint.kind",
    "latency_budget.stage",
    "latency_budget.hint.span_count",
    "latency_budget.hint.potential_savings_ms",
    "latency_budget.hint.basis_count",
    "latency_budget.hint.basis",  # context_size only: what its fit is of
    "latency_budget.hint.span_names",  # at most five, each at most 120 characters
    "latency_budget.hint.span_ids",
}
QUERY = "where is my order"
# Two models: a first token after base + prefill per input token, then per_token per output token.
MODELS = {"gpt-4o-mini": (200.0, 0.05, 5.0), "gpt-4o": (300.0, 0.1, 10.0)}


@dataclass(frozen=True)
class Sent:
    """What was sent: the service, the request that pulls every lever (hex ids), and where it went."""

    service: str
    trace_id: str
    root_span_id: str
    collector: CollectorService


class Timeline:
    """Child spans of one root laid out back to back from its start."""

    def __init__(self, tracer: trace.Tracer, name: str, start_ns: int) -> None:
        self.tracer = tracer
        self.now = start_ns
        self.root = tracer.start_span(name, kind=SpanKind.SERVER, start_time=start_ns)

    def child(self, name: str, duration_ms: float, attributes: Mapping[str, AttributeValue]) -> None:
        context = trace.set_span_in_context(self.root)
        span = self.tracer.start_span(name, context=context, start_time=self.now, attributes=attributes)
        self.now += round(duration_ms * MS)
        span.end(end_time=self.now)

    def end(self) -> trace.SpanContext:
        self.root.end(end_time=self.now + 5 * MS)
        return self.root.get_span_context()


def chat(
    model: str, tokens_in: int, tokens_out: int, *, stream: bool, reasoning: int | None = None
) -> tuple[float, dict[str, AttributeValue]]:
    """A chat call's duration (ms) and attributes; streamed, it records its time to first chunk.

    ``reasoning``: how many of the output tokens the model spent reasoning (recorded where given).
    """
    base, prefill, per_token = MODELS[model]
    first = base + prefill * tokens_in
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": model,
        "gen_ai.request.stream": stream,
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.usage.input_tokens": tokens_in,
        "gen_ai.usage.output_tokens": tokens_out,
    }
    if stream:
        attributes["gen_ai.response.time_to_first_chunk"] = first / 1000
    if reasoning is not None:
        attributes["gen_ai.usage.reasoning.output_tokens"] = reasoning
    return first + per_token * tokens_out, attributes


def retrieval() -> dict[str, AttributeValue]:
    return {
        "gen_ai.operation.name": "retrieval",
        "gen_ai.data_source.id": "support-kb",
        "gen_ai.retrieval.query.text": QUERY,
    }


def send(collector: CollectorService, service: str) -> Sent:
    """Earlier requests, then the one that pulls every lever, through the processor and the real exporters."""
    with otlp_providers(collector, service) as providers:
        sinks: list[ReportCallback] = [
            ViolationLogEmitter(providers.logger),
            HintLogEmitter(providers.logger),
            BudgetMetrics(providers.meter),
        ]
        providers.tracer.add_span_processor(
            LatencyBudgetProcessor(BUDGETS, providers.span_exporting_processor(), on_report=sinks)
        )
        context = _requests(providers.tracer.get_tracer("e2e.support-assistant"))
    return Sent(service, f"{context.trace_id:032x}", f"{context.span_id:016x}", collector)


def _requests(tracer: trace.Tracer) -> trace.SpanContext:
    """The earlier requests and the target one; the target root's context."""
    start = time.time_ns() - 600_000 * MS
    # Earlier requests: each model streams, at 12 context sizes and answer lengths in turn; 63 of
    # them, so that both models' windows of 64 calls are full in the target request (fits are
    # tested then, and models are compared only then: MIN_MODEL_CALLS_IN_PROCESS).
    for n in range(63):
        request = Timeline(tracer, "POST /v1/support/chat", start)
        if n == 0:
            request.child("retrieval support-kb", 40, retrieval())
        for model in MODELS:
            size = n % 12 + 1
            duration, attributes = chat(model, 1000 * size, 50 * size, stream=True, reasoning=10 * size)
            request.child(f"chat {model}", duration, attributes)
        request.end()
        start = request.now + 50 * MS
    target = Timeline(tracer, "POST /v1/support/chat", start)
    target.child("retrieval support-kb", 40, retrieval())  # asked before: cache
    # Not streamed, long, the slower model, and 600 of its 900 tokens spent reasoning: reasoning.
    duration, attributes = chat("gpt-4o", 2000, 900, stream=False, reasoning=600)
    target.child("chat gpt-4o", duration, attributes)
    duration, attributes = chat("gpt-4o", 11_500, 40, stream=True)  # a large context
    target.child("chat gpt-4o", duration, attributes)
    duration, attributes = chat("gpt-4o-mini", 3000, 60, stream=True)  # a third model call: past max_calls
    target.child("chat gpt-4o-mini", duration, attributes)
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup_order"}
    arguments = {**tool, "gen_ai.tool.call.arguments": '{"order_id": "A-10423"}'}
    target.child("execute_tool lookup_order", 120, arguments)  # twice, back to back: cache, sequential
    target.child("execute_tool lookup_order", 120, arguments)
    return target.end()


@pytest.fixture(scope="module")
def sent(otel_collector_keep_all: CollectorService) -> Sent:
    """The requests, sent once under a service name of their own."""
    return send(otel_collector_keep_all, f"e2e-levers-{uuid.uuid4().hex[:8]}")


def _trace(jaeger: JaegerService, trace_id: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        found = jaeger.get_trace(trace_id)
        return found if found is not None and len(jaeger_spans(found)) == 7 else None

    return poll(probe, timeout=DELIVERY_TIMEOUT_S, what=f"all spans of trace {trace_id} in Jaeger")


def _root(jaeger: JaegerService, trace_id: str) -> dict[str, Any]:
    return jaeger_root(_trace(jaeger, trace_id))


def test_every_lever_hint_is_on_the_root_span_in_jaeger(sent: Sent, jaeger: JaegerService) -> None:
    """Jaeger's root has a hint per lever, with bounded fields, within its stage's time, the levers with a basis."""
    root = _root(jaeger, sent.trace_id)
    tags = jaeger_tags(root["tags"])
    hints = jaeger_events(root, "latency_budget.hint")
    by_lever = {(h["latency_budget.hint.kind"], h["latency_budget.stage"]): h for h in hints}
    assert set(by_lever) == HINTED
    for (kind, stage), hint in by_lever.items():
        assert set(hint) <= HINT_KEYS
        saving = hint["latency_budget.hint.potential_savings_ms"]
        assert 0 < saving <= tags[f"latency_budget.stages.{stage}.actual_ms"], (kind, stage)
        if kind not in ("sequential_calls", "iterations"):
            assert hint["latency_budget.hint.basis_count"] >= 1, kind
    # The non-streamed answer took 500 ms to its first token and 9 s more; gpt-4o's 63 streamed calls (62
    # earlier, 400..1500 ms in turn, and 1450 ms in this request) had a median first chunk of 900 ms.
    streaming = by_lever["streaming", "model_call"]
    assert streaming["latency_budget.hint.potential_savings_ms"] == 9500.0 - 900.0
    assert streaming["latency_budget.hint.basis_count"] == 63
    assert by_lever["iterations", "model_call"]["latency_budget.hint.span_count"] == 3
    # Each names its spans: the non-streamed answer, the two identical tool calls' second.
    assert streaming["latency_budget.hint.span_names"] == '["chat gpt-4o"]'  # Jaeger: arrays as JSON
    assert json.loads(by_lever["cache", "tool_calls"]["latency_budget.hint.span_names"]) == [
        "execute_tool lookup_order"
    ]
    spans = {s["spanID"]: s["operationName"] for s in jaeger_spans(_trace(jaeger, sent.trace_id))}
    for hint in hints:
        assert all(spans[span_id] for span_id in str(hint["latency_budget.hint.span_ids"]).split())


def test_each_hint_is_a_bounded_log_record_in_the_collector(sent: Sent) -> None:
    """The collector's log file has one latency_budget.hint record per hint of the request, linked to its root."""

    def written() -> list[Any] | None:
        records = [
            r
            for r in collector_log_records(sent.collector.logs_file)
            if r.resource.get("service.name") == sent.service and r.record.get("eventName") == "latency_budget.hint"
        ]
        mine = [r for r in records if r.record["traceId"] == sent.trace_id]
        return records if len(mine) >= len(HINTED) else None

    records = poll(written, timeout=DELIVERY_TIMEOUT_S, what="the hint log records in the collector's file")
    mine = [r for r in records if r.record["traceId"] == sent.trace_id]
    assert {r.attributes["latency_budget.hint.kind"] for r in mine} == KINDS
    assert len(mine) == len(HINTED)
    for record in records:
        assert set(record.attributes) <= {*HINT_KEYS, "event.name", "latency_budget.profile"}
        assert record.attributes["latency_budget.hint.kind"] in KINDS
        assert record.attributes["latency_budget.stage"] in STAGES
        assert record.attributes["latency_budget.profile"] == "default"
        assert record.record["severityText"] == "INFO"
    assert all(r.record["spanId"] == sent.root_span_id for r in mine)
    streaming = next(r for r in mine if r.attributes["latency_budget.hint.kind"] == "streaming")
    assert streaming.record["body"]["stringValue"].startswith("model_call: streaming the response would bring")


def test_hint_savings_reach_prometheus_by_stage_and_kind_only(sent: Sent) -> None:
    """The savings histogram on the Prometheus endpoint has stage and kind labels, from fixed sets, and nothing else."""
    name = "latency_budget_hint_potential_savings_milliseconds_count"

    def scraped() -> list[Any] | None:
        samples = [s for s in prometheus_samples(sent.collector.scrape(), service_name=sent.service) if s.name == name]
        kinds = {s.labels.get("latency_budget_hint_kind") for s in samples}
        return samples if kinds >= KINDS else None

    samples = poll(scraped, timeout=DELIVERY_TIMEOUT_S, what="the hint savings histogram on the Prometheus endpoint")
    for sample in samples:
        ours = {key for key in sample.labels if key.startswith("latency_budget")}
        assert ours == {"latency_budget_stage", "latency_budget_hint_kind"}
        assert sample.labels["latency_budget_stage"] in STAGES
        assert sample.labels["latency_budget_hint_kind"] in KINDS
    assert len(samples) <= len(KINDS) * len(STAGES)
    assert sum(s.value for s in samples if s.labels["latency_budget_hint_kind"] == "streaming") == 1
