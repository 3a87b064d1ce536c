"""serve judges a whole trace once, with the in-process accounting, and annotates only its root."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import SpanKind, Tracer

from latency_budget import LatencyBudgetProcessor, load_budgets
from latency_budget._serve.assembly import Limits
from latency_budget._serve.otlp import attributes_of

from .harness import NextHop, at, record, running, send_grpc, send_http

BUDGETS = load_budgets(
    text="""
version: 1
stages:
  retrieval:
    budget_ms: 50
    match: {name: "retrieve*"}
  model_call:
    budget_ms: 100
    match: {name: "chat*"}
    parallelizable: true
total_ms: 300
""",
    source="budgets.yaml",
)


def agent_trace(tracer: Tracer) -> None:
    """A request of 400 ms: retrieval 60 ms (over 50), two sequential model calls of 120 ms (over 100)."""
    root = tracer.start_span("POST /ask", kind=SpanKind.SERVER, start_time=at(0))
    ctx = trace.set_span_in_context(root)
    tracer.start_span("retrieve docs", context=ctx, start_time=at(10)).end(end_time=at(70))
    tracer.start_span("chat gpt-4o", context=ctx, kind=SpanKind.CLIENT, start_time=at(80)).end(end_time=at(200))
    tracer.start_span("chat gpt-4o", context=ctx, kind=SpanKind.CLIENT, start_time=at(210)).end(end_time=at(330))
    root.end(end_time=at(400))


@pytest.fixture
def hop() -> Iterator[NextHop]:
    next_hop = NextHop()
    yield next_hop
    next_hop.stop()


def _in_process(build=agent_trace) -> list[ReadableSpan]:  # type: ignore[no-untyped-def]
    def wrap(downstream: SpanProcessor) -> SpanProcessor:
        return LatencyBudgetProcessor(BUDGETS, downstream)

    return record(build, processor=wrap)


def _event_view(events: object) -> list[tuple[str, int, dict[str, object]]]:
    return [(e.name, e.timestamp, dict(e.attributes or {})) for e in events]  # type: ignore[attr-defined]


@pytest.mark.parametrize("send", [send_grpc, send_http], ids=["otlp-grpc", "otlp-http"])
def test_root_annotated_exactly_as_in_process(hop: NextHop, send) -> None:  # type: ignore[no-untyped-def]
    """Sent over OTLP, the trace is judged once and its root gains the in-process root's attributes and events; no other span changes."""
    plain = record(agent_trace)
    expected_root = next(s for s in _in_process() if s.parent is None)
    with running(BUDGETS, hop.url) as serve:
        target = serve.grpc_endpoint if send is send_grpc else serve.http_url
        assert send(plain, target).name == "SUCCESS"
        counters = serve.wait_for(lambda c: c["spans_forwarded"] == 4, "4 spans forwarded")
    assert counters["traces_judged"] == 1
    forwarded = {span.span_id: (resource, scope, span) for resource, scope, span in hop.spans()}
    assert len(forwarded) == 4
    for original in plain:
        resource, scope, span = forwarded[original.context.span_id.to_bytes(8, "big")]
        assert resource["service.name"] == "agent" and scope == "tests.serve"
        if original.parent is None:
            assert attributes_of(span.attributes) == dict(expected_root.attributes or {})
            got_events = [(e.name, e.time_unix_nano, attributes_of(e.attributes)) for e in span.events]
            assert got_events == _event_view(expected_root.events)
            assert expected_root.attributes["latency_budget.violated"] is True
        else:
            assert attributes_of(span.attributes) == dict(original.attributes or {})
            assert not span.events


def test_root_never_arrives_forwarded_unjudged(hop: NextHop) -> None:
    """A trace whose root never comes is forwarded unjudged after --max-wait, and counted."""
    children = [s for s in record(agent_trace) if s.parent is not None]
    with running(BUDGETS, hop.url, limits=Limits(decision_wait_s=0.05, max_wait_s=0.3)) as serve:
        assert send_grpc(children, serve.grpc_endpoint).name == "SUCCESS"
        counters = serve.wait_for(lambda c: c["spans_forwarded"] == 3, "3 spans forwarded")
    assert counters["traces_forwarded_unjudged"] == 1 and counters["traces_judged"] == 0
    assert all(not any(kv.key.startswith("latency_budget.") for kv in s.attributes) for _, _, s in hop.spans())


def test_trace_annotated_in_process_is_not_judged_again(hop: NextHop) -> None:
    """A trace whose root already has a verdict is forwarded untouched and counted, never judged twice."""
    annotated = _in_process()
    root = next(s for s in annotated if s.parent is None)
    with running(BUDGETS, hop.url) as serve:
        assert send_grpc(annotated, serve.grpc_endpoint).name == "SUCCESS"
        counters = serve.wait_for(lambda c: c["spans_forwarded"] == 4, "4 spans forwarded")
    assert counters["traces_already_annotated"] == 1 and counters["traces_judged"] == 0
    (forwarded_root,) = [s for _, _, s in hop.spans() if not s.parent_span_id]
    assert attributes_of(forwarded_root.attributes) == dict(root.attributes or {})
    assert len(forwarded_root.events) == len(root.events)


def test_spans_of_two_services_are_one_request(hop: NextHop) -> None:
    """Spans sent by two services in separate requests add up in one verdict on the trace's root."""
    spans = record(agent_trace)
    root = [s for s in spans if s.parent is None]
    model = [s for s in spans if s.name.startswith("chat")]
    retrieval = [s for s in spans if s.name.startswith("retrieve")]
    with running(BUDGETS, hop.url) as serve:
        for part in (model, retrieval, root):
            assert send_grpc(part, serve.grpc_endpoint).name == "SUCCESS"
        serve.wait_for(lambda c: c["spans_forwarded"] == 4, "4 spans forwarded")
    (forwarded_root,) = [s for _, _, s in hop.spans() if not s.parent_span_id]
    attributes = attributes_of(forwarded_root.attributes)
    assert attributes["latency_budget.stages.model_call.count"] == 2
    assert attributes["latency_budget.stages.retrieval.count"] == 1
