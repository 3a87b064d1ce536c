"""serve takes OTLP logs on /v1/logs: passes them on as they came, joins evaluation results of open traces."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags, Tracer

from latency_budget import load_budgets
from latency_budget._serve.otlp import attributes_of

from .harness import NextHop, at, record, running, send_http

BUDGETS = load_budgets(
    text="""
version: 1
stages:
  model_call:
    budget_ms: 100
    match: {name: "chat*"}
total_ms: 300
""",
    source="budgets.yaml",
)
MODEL = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}


def one_call(tracer: Tracer) -> None:
    """A request of 200 ms with one model call of 120 ms."""
    root = tracer.start_span("POST /ask", kind=SpanKind.SERVER, start_time=at(0))
    ctx = trace.set_span_in_context(root)
    tracer.start_span("chat gpt-4o", context=ctx, kind=SpanKind.CLIENT, start_time=at(10), attributes=MODEL).end(
        end_time=at(130)
    )
    root.end(end_time=at(200))


def send_evaluation(base_url: str, trace_id: int, span_id: int, name: str, score: float) -> None:
    """One gen_ai.evaluation.result record in the call's span context, through the SDK's OTLP/HTTP log exporter."""
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{base_url}/v1/logs")))
    context = trace.set_span_in_context(
        NonRecordingSpan(SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(1)))
    )
    provider.get_logger("tests.evaluator").emit(
        timestamp=at(500),
        context=context,
        body=f"{name} {score}",
        attributes={"gen_ai.evaluation.name": name, "gen_ai.evaluation.score.value": score},
        event_name="gen_ai.evaluation.result",
    )
    provider.shutdown()


@pytest.fixture
def hop() -> Iterator[NextHop]:
    next_hop = NextHop()
    yield next_hop
    next_hop.stop()


def _call(spans: list[ReadableSpan]) -> tuple[int, int]:
    call = next(s for s in spans if s.name.startswith("chat"))
    assert call.context is not None
    return call.context.trace_id, call.context.span_id


def _forwarded_evaluations(hop: NextHop) -> list[tuple[str, dict[str, object]]]:
    with hop.lock:
        requests = list(hop.log_requests)
    return [
        (record.body.string_value, attributes_of(record.attributes))
        for request in requests
        for resource_logs in request.resource_logs
        for scope_logs in resource_logs.scope_logs
        for record in scope_logs.log_records
    ]


def test_an_evaluation_for_an_open_trace_is_joined_and_forwarded(hop: NextHop) -> None:
    """A result that comes while its trace waits for its root joins the call's quality; the record goes on."""
    spans = record(one_call)
    trace_id, span_id = _call(spans)
    children, roots = [s for s in spans if s.parent], [s for s in spans if not s.parent]
    with running(BUDGETS, hop.url) as serve:
        assert send_http(children, serve.http_url).name == "SUCCESS"
        send_evaluation(serve.http_url, trace_id, span_id, "relevance", 0.25)
        assert serve.counters()["evaluations_joined"] == 1
        assert send_http(roots, serve.http_url).name == "SUCCESS"
        serve.wait_for(lambda c: c["traces_judged"] == 1, "the trace judged")
        quality = serve.server._judge._recent.quality("model_call", "gpt-4o")
        assert quality is not None
        assert "relevance" in quality.evaluations
        counters = serve.counters()
    assert (counters["evaluations_late"], counters["evaluations_unjoined"]) == (0, 0)
    assert counters["log_requests_forwarded"] == 1
    assert _forwarded_evaluations(hop) == [
        ("relevance 0.25", {"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.value": 0.25})
    ]


def test_an_evaluation_after_the_decision_is_late_and_one_for_an_unknown_trace_unjoined(hop: NextHop) -> None:
    """A result for a trace already judged is counted late, one for a trace never seen unjoined; both go on."""
    spans = record(one_call)
    trace_id, span_id = _call(spans)
    with running(BUDGETS, hop.url) as serve:
        assert send_http(spans, serve.http_url).name == "SUCCESS"
        serve.wait_for(lambda c: c["traces_judged"] == 1, "the trace judged")
        send_evaluation(serve.http_url, trace_id, span_id, "relevance", 0.5)
        send_evaluation(serve.http_url, trace_id + 1000, span_id, "faithfulness", 1.0)
        counters = serve.counters()
    assert (counters["evaluations_joined"], counters["evaluations_late"], counters["evaluations_unjoined"]) == (0, 1, 1)
    assert [body for body, _ in _forwarded_evaluations(hop)] == ["relevance 0.5", "faithfulness 1.0"]


def test_traces_without_logs_are_judged_as_before(hop: NextHop) -> None:
    """Null control: with no log record sent, no evaluation or log request is counted and the trace is judged."""
    spans = record(one_call)
    with running(BUDGETS, hop.url) as serve:
        assert send_http(spans, serve.http_url).name == "SUCCESS"
        counters = serve.wait_for(lambda c: c["traces_judged"] == 1, "the trace judged")
    assert counters["spans_received"] == 2
    assert counters.get("log_requests_forwarded", 0) == counters.get("evaluations_joined", 0) == 0
    assert _forwarded_evaluations(hop) == []
    root = next(span for _, _, span in hop.spans() if not span.parent_span_id)
    assert "latency_budget.verdict" in attributes_of(root.attributes)


def test_the_grpc_logs_service_joins_and_forwards_as_http_does(hop: NextHop) -> None:
    """An evaluation record sent by the SDK's gRPC log exporter joins an open trace and reaches the next hop."""
    spans = record(one_call)
    trace_id, span_id = _call(spans)
    children = [s for s in spans if s.parent]
    with running(BUDGETS, hop.url) as serve:
        assert send_http(children, serve.http_url).name == "SUCCESS"
        provider = LoggerProvider()
        exporter = GrpcLogExporter(endpoint=serve.grpc_endpoint, insecure=True)
        provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
        context = trace.set_span_in_context(
            NonRecordingSpan(SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(1)))
        )
        provider.get_logger("tests.evaluator").emit(
            timestamp=at(500),
            context=context,
            body="relevance 0.75",
            attributes={"gen_ai.evaluation.name": "relevance", "gen_ai.evaluation.score.value": 0.75},
            event_name="gen_ai.evaluation.result",
        )
        provider.shutdown()
        counters = serve.counters()
    assert (counters["evaluations_joined"], counters["log_requests_forwarded"]) == (1, 1)
    assert [body for body, _ in _forwarded_evaluations(hop)] == ["relevance 0.75"]


def test_logs_the_next_hop_cannot_take_are_refused_for_a_retry_never_acknowledged(hop: NextHop) -> None:
    """With the next hop down, an OTLP/JSON log request is answered 429 (retry) and nothing of it is counted joined."""
    document = {
        "resourceLogs": [
            {
                "scopeLogs": [
                    {
                        "logRecords": [
                            {
                                "traceId": f"{7:032x}",
                                "spanId": f"{9:016x}",
                                "eventName": "gen_ai.evaluation.result",
                                "attributes": [
                                    {"key": "gen_ai.evaluation.name", "value": {"stringValue": "relevance"}},
                                    {"key": "gen_ai.evaluation.score.value", "value": {"doubleValue": 0.5}},
                                ],
                            }
                        ]
                    }
                ]
            }
        ]
    }
    with running(BUDGETS, hop.url) as serve:
        hop.stop()
        request = urllib.request.Request(
            f"{serve.http_url}/v1/logs",
            data=json.dumps(document).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        counters = serve.counters()
    assert refused.value.code == 429
    assert refused.value.headers["Retry-After"] == "1"
    assert (counters["log_requests_refused"], counters["log_requests_forwarded"]) == (1, 0)
    assert counters["evaluations_joined"] + counters["evaluations_unjoined"] == 0
