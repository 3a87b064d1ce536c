"""serve judges a whole trace once, with the in-process accounting, and annotates only its root."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags, Tracer

from latency_budget import LatencyBudgetProcessor, load_budgets
from latency_budget._serve.assembly import Limits
from latency_budget._serve.otlp import attributes_of

from .harness import NextHop, at, record, running, send_grpc, send_http, send_http_json

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


@pytest.mark.parametrize(
    "send", [send_grpc, send_http, send_http_json], ids=["otlp-grpc", "otlp-http", "otlp-http-json"]
)
def test_root_annotated_exactly_as_in_process(hop: NextHop, send) -> None:  # type: ignore[no-untyped-def]
    """Over OTLP, the trace is judged once, its root gains the in-process root's attributes and events, nothing else."""
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
        assert resource["service.name"] == "agent"
        assert scope == "tests.serve"
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
    assert counters["traces_forwarded_unjudged"] == 1
    assert counters["traces_judged"] == 0
    for _, _, span in hop.spans():  # no verdict; each span whose parent is missing is marked partial
        attributes = attributes_of(span.attributes)
        added = {key: value for key, value in attributes.items() if key.startswith("latency_budget.")}
        assert added == {"latency_budget.partial": True, "latency_budget.partial.reason": "no_root"}


def test_trace_annotated_in_process_is_not_judged_again(hop: NextHop) -> None:
    """A trace whose root already has a verdict is forwarded untouched and counted, never judged twice."""
    annotated = _in_process()
    root = next(s for s in annotated if s.parent is None)
    with running(BUDGETS, hop.url) as serve:
        assert send_grpc(annotated, serve.grpc_endpoint).name == "SUCCESS"
        counters = serve.wait_for(lambda c: c["spans_forwarded"] == 4, "4 spans forwarded")
    assert counters["traces_already_annotated"] == 1
    assert counters["traces_judged"] == 0
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


RESOURCE_BUDGETS = load_budgets(
    text="""
version: 1
stages:
  retrieval:
    budget_ms: 50
    match: {name: "retrieve*", resource: {service.name: retrieval}}
  model_call:
    budget_ms: 100
    match: {name: "chat*"}
total_ms: 300
""",
    source="budgets.yaml",
)


def test_match_rule_reads_the_resource_of_each_span(hop: NextHop) -> None:
    """A rule with resource: service.name counts the retrieval span only when the retrieval service sent it."""

    def retrieval_count(retrieval_service: str) -> object:
        spans = record(agent_trace)
        retrieval = [s for s in record(agent_trace, service=retrieval_service) if s.name.startswith("retrieve")]
        rest = [s for s in spans if not s.name.startswith("retrieve")]
        hop.requests.clear()
        with running(RESOURCE_BUDGETS, hop.url) as serve:
            assert send_grpc(retrieval, serve.grpc_endpoint).name == "SUCCESS"  # one request per service
            assert send_grpc(rest, serve.grpc_endpoint).name == "SUCCESS"
            serve.wait_for(lambda c: c["spans_forwarded"] == 4, "4 spans forwarded")
        (root,) = [s for _, _, s in hop.spans() if not s.parent_span_id]
        return attributes_of(root.attributes).get("latency_budget.stages.retrieval.count")

    assert retrieval_count("retrieval") == 1
    assert retrieval_count("agent") is None


def test_resource_rule_in_process_reads_the_providers_resource() -> None:
    """In process, a resource: rule holds for spans of a provider whose resource matches, and not for another's."""

    def wrap(downstream: SpanProcessor) -> SpanProcessor:
        return LatencyBudgetProcessor(RESOURCE_BUDGETS, downstream)

    def retrieval_count(service: str) -> object:
        spans = record(agent_trace, service=service, processor=wrap)
        root = next(s for s in spans if s.parent is None)
        return (root.attributes or {}).get("latency_budget.stages.retrieval.count")

    assert retrieval_count("retrieval") == 1
    assert retrieval_count("agent") is None


def _two_services(*, retrieval_processor: bool) -> tuple[list[ReadableSpan], list[ReadableSpan]]:
    """An agent request whose client call reaches a retrieval service (a remote parent): each service's spans."""

    def agent(tracer: Tracer) -> None:
        root = tracer.start_span("POST /ask", kind=SpanKind.SERVER, start_time=at(0))
        ctx = trace.set_span_in_context(root)
        tracer.start_span("GET /search", context=ctx, kind=SpanKind.CLIENT, start_time=at(5)).end(end_time=at(95))
        tracer.start_span("chat gpt-4o", context=ctx, kind=SpanKind.CLIENT, start_time=at(100)).end(end_time=at(250))
        root.end(end_time=at(300))

    def retrieval(tracer: Tracer) -> None:
        caller = SpanContext(
            1, 2, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED)
        )  # the agent's client span
        ctx = trace.set_span_in_context(NonRecordingSpan(caller))
        server = tracer.start_span("GET /search", context=ctx, kind=SpanKind.SERVER, start_time=at(10))
        inner = trace.set_span_in_context(server)
        tracer.start_span("retrieve docs", context=inner, start_time=at(15)).end(end_time=at(85))
        server.end(end_time=at(90))

    def wrap(downstream: SpanProcessor) -> SpanProcessor:
        return LatencyBudgetProcessor(BUDGETS, downstream)

    agent_spans = record(agent)
    retrieval_spans = record(
        retrieval, service="retrieval", first_span=100, processor=wrap if retrieval_processor else None
    )
    return agent_spans, retrieval_spans


@pytest.mark.parametrize(("roots", "judged"), [("trace", 1), ("local", 2)])
def test_roots_trace_judges_the_request_local_judges_each_service(hop: NextHop, roots: str, judged: int) -> None:
    """--roots trace judges one request across both services; --roots local judges each local root as in process."""
    agent_spans, retrieval_spans = _two_services(retrieval_processor=False)
    _, in_process = _two_services(retrieval_processor=True)
    with running(BUDGETS, hop.url, roots=roots) as serve:
        assert send_grpc(retrieval_spans, serve.grpc_endpoint).name == "SUCCESS"
        assert send_grpc(agent_spans, serve.grpc_endpoint).name == "SUCCESS"
        counters = serve.wait_for(lambda c: c["spans_forwarded"] == 5, "5 spans forwarded")
    assert counters["traces_judged"] == judged
    by_id = {int.from_bytes(s.span_id, "big"): s for _, _, s in hop.spans()}
    request_root = attributes_of(by_id[1].attributes)
    service_root = attributes_of(by_id[100].attributes)
    if roots == "trace":
        assert request_root["latency_budget.stages.retrieval.count"] == 1  # the other service's span counts
        assert "latency_budget.verdict" not in service_root
    else:
        assert "latency_budget.stages.retrieval.count" not in request_root
        expected = next(s for s in in_process if s.context.span_id == 100)
        assert service_root == dict(expected.attributes or {})


def test_violations_go_out_as_otlp_logs_and_budget_metrics(hop: NextHop) -> None:
    """A violating trace gives the in-process violation log records and budget metrics, over OTLP, as serve."""
    with running(BUDGETS, hop.url, reports=True) as serve:
        assert send_grpc(record(agent_trace), serve.grpc_endpoint).name == "SUCCESS"
        serve.wait_for(lambda c: c["traces_judged"] == 1, "the trace judged")
    # drained: the logs and metrics were flushed before the server stopped
    records = [
        (attributes_of(rl.resource.attributes), r)
        for request in hop.log_requests
        for rl in request.resource_logs
        for sl in rl.scope_logs
        for r in sl.log_records
    ]
    expected_root = next(s for s in _in_process() if s.parent is None)
    for event_name in ("latency_budget.violation", "latency_budget.hint"):
        logged = sorted(
            attributes_of(r.attributes)["latency_budget.stage"]
            for _, r in records
            if attributes_of(r.attributes)["event.name"] == event_name
        )
        expected = sorted(
            str(e.attributes["latency_budget.stage"]) for e in expected_root.events if e.name == event_name
        )
        assert logged == expected
        assert logged  # this trace both breaks budgets and earns a hint
    assert {resource["service.name"] for resource, _ in records} == {"latency-budget-serve"}
    assert all(r.trace_id == (1).to_bytes(16, "big") for _, r in records)  # linked to the judged trace
    names = {
        m.name
        for request in hop.metric_requests
        for rm in request.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert {"latency_budget.stage.duration", "latency_budget.violations"} <= names


def test_roots_local_judges_a_service_whose_request_root_never_came(hop: NextHop) -> None:
    """With --roots local, a service's local root is judged at --max-wait even though the trace's root never came."""
    _, retrieval_spans = _two_services(retrieval_processor=False)
    limits = Limits(decision_wait_s=0.05, max_wait_s=0.3)
    with running(BUDGETS, hop.url, roots="local", limits=limits) as serve:
        assert send_grpc(retrieval_spans, serve.grpc_endpoint).name == "SUCCESS"
        counters = serve.wait_for(lambda c: c["spans_forwarded"] == 2, "2 spans forwarded")
    assert counters["traces_judged"] == 1
    assert counters["traces_forwarded_unjudged"] == 0
