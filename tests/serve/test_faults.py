"""serve under faults: full, bad input, hostile spans, the next hop down; every span forwarded or counted."""

from __future__ import annotations

import atexit
import gzip
import io
import json
import urllib.error
import urllib.request
from collections.abc import Iterator

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from latency_budget._demo.otlp_json import encode_otlp_json
from latency_budget._serve.assembly import Limits
from latency_budget._serve.otlp import attributes_of
from latency_budget._serve.reports import open_report_sinks
from latency_budget._serve.stats import EventLog
from latency_budget.export._otlp import otlp_target
from tests.e2e.services import poll

from .harness import NextHop, record, running, send_grpc
from .test_judging import BUDGETS, agent_trace


@pytest.fixture
def hop() -> Iterator[NextHop]:
    next_hop = NextHop()
    yield next_hop
    next_hop.stop()


def _post(url: str, body: bytes, content_type: str, **headers: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        f"{url}/v1/traces", data=body, method="POST", headers={"Content-Type": content_type, **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def _stub(endpoint: str) -> trace_service_pb2_grpc.TraceServiceStub:
    return trace_service_pb2_grpc.TraceServiceStub(grpc.insecure_channel(endpoint))


def _request(first_trace: int = 1) -> trace_service_pb2.ExportTraceServiceRequest:
    return encode_spans(record(agent_trace, first_trace=first_trace))


def test_full_refuses_with_retry_info_over_grpc_and_429_over_http(hop: NextHop) -> None:
    """Past --max-traces a request is refused (gRPC RESOURCE_EXHAUSTED + RetryInfo, HTTP 429 + Retry-After), counted."""
    with running(BUDGETS, hop.url, limits=Limits(decision_wait_s=60.0, max_traces=1)) as serve:
        _stub(serve.grpc_endpoint).Export(_request(1), timeout=10)
        with pytest.raises(grpc.RpcError) as refused:
            _stub(serve.grpc_endpoint).Export(_request(2), timeout=10)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        trailers = dict(refused.value.trailing_metadata())
        retry = error_details_pb2.RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"])
        assert retry.retry_delay.seconds >= 1
        status = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])  # what the Collector reads
        assert status.details[0].Unpack(detail := error_details_pb2.RetryInfo())
        assert detail.retry_delay == retry.retry_delay
        status, headers, _ = _post(serve.http_url, _request(3).SerializeToString(), "application/x-protobuf")
        assert status == 429
        assert int(headers["Retry-After"]) >= 1
        counters = serve.counters()
        assert counters["requests_refused"] == 2
        assert counters["spans_received"] == 4  # the first trace only
    assert len(hop.spans()) == 4  # drained on shutdown: the held trace judged and forwarded


@pytest.mark.parametrize(
    ("body", "content_type", "headers", "status"),
    [
        (b"\xff\xff\xff\xff not protobuf", "application/x-protobuf", {}, 400),
        (b"{not json", "application/json", {}, 400),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}', "application/json", {}, 400),
        (b"<xml/>", "text/xml", {}, 415),
        (b"x" * 20_000, "application/x-protobuf", {}, 413),
        (gzip.compress(b"\0" * 100_000), "application/x-protobuf", {"Content-Encoding": "gzip"}, 413),
        (b"abc", "application/x-protobuf", {"Content-Encoding": "br"}, 415),
    ],
    ids=["broken-protobuf", "broken-json", "bad-hex-id", "wrong-type", "oversize", "gzip-bomb", "unknown-encoding"],
)
def test_bad_http_input_is_an_error_and_the_server_keeps_serving(
    hop: NextHop, body: bytes, content_type: str, headers: dict[str, str], status: int
) -> None:
    """Bad input over HTTP gets its error status and one log line; the next good request is judged."""
    with running(BUDGETS, hop.url, max_request_bytes=10_000) as serve:
        got, _, _ = _post(serve.http_url, body, content_type, **headers)
        assert got == status
        assert serve.counters()["bad_requests"] == 1
        assert [e["event"] for e in serve.events()].count("bad_request") == 1
        good = json.dumps(encode_otlp_json(record(agent_trace))).encode()
        assert _post(serve.http_url, good, "application/json")[0] == 200
        serve.wait_for(lambda c: c["traces_judged"] == 1, "the good trace judged")


def test_oversized_and_broken_grpc_messages_are_refused_and_the_server_keeps_serving(hop: NextHop) -> None:
    """Over the receive limit: RESOURCE_EXHAUSTED; not protobuf: INVALID_ARGUMENT, counted; then a good one judged."""
    with running(BUDGETS, hop.url, max_request_bytes=10_000) as serve:
        big = _request(1)
        big.resource_spans[0].scope_spans[0].spans[0].name = "x" * 20_000
        with pytest.raises(grpc.RpcError) as oversized:
            _stub(serve.grpc_endpoint).Export(big, timeout=10)
        assert oversized.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        channel = grpc.insecure_channel(serve.grpc_endpoint)
        raw = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        with pytest.raises(grpc.RpcError) as broken:
            raw(b"\xff\xff\xff\xff", timeout=10)
        assert broken.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert serve.counters()["bad_requests"] == 1
        _stub(serve.grpc_endpoint).Export(_request(2), timeout=10)
        serve.wait_for(lambda c: c["traces_judged"] == 1, "the good trace judged")


def test_hostile_spans_are_judged_or_rejected_never_crash(hop: NextHop) -> None:
    """Parent cycles, repeated ids, a 200 KB attribute, bad ids: bad ids rejected, the rest judged and forwarded."""
    request = _request(1)
    spans = request.resource_spans[0].scope_spans[0].spans
    root = next(s for s in spans if not s.parent_span_id)
    a, b = spans.add(), spans.add()
    a.CopyFrom(spans[0])
    b.CopyFrom(spans[0])
    a.span_id, b.span_id = b"\x00" * 7 + b"\xa1", b"\x00" * 7 + b"\xb2"
    a.parent_span_id, b.parent_span_id = b.span_id, a.span_id  # a cycle off the tree
    twin = spans.add()
    twin.CopyFrom(spans[0])  # a repeated span id
    twin.parent_span_id = twin.span_id  # and its own parent
    huge = spans[1].attributes.add()
    huge.key = "huge"
    huge.value.string_value = "y" * 200_000
    bad = spans.add()
    bad.CopyFrom(spans[0])
    bad.trace_id = b"\x01\x02"
    with running(BUDGETS, hop.url) as serve:
        response = _stub(serve.grpc_endpoint).Export(request, timeout=10)
        assert response.partial_success.rejected_spans == 1
        counters = serve.wait_for(lambda c: c["spans_forwarded"] == 7, "7 spans forwarded")
    assert counters["traces_judged"] == 1
    assert counters["spans_rejected"] == 1
    (forwarded_root,) = [s for _, _, s in hop.spans() if s.span_id == root.span_id]
    assert "latency_budget.verdict" in attributes_of(forwarded_root.attributes)


def test_next_hop_down_then_up_delivers_everything(hop: NextHop, monkeypatch: pytest.MonkeyPatch) -> None:
    """While the next hop is down the spans wait in the queue, retried; when it is back they all arrive."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")
    hop.stop()
    with running(BUDGETS, hop.url) as serve:
        assert send_grpc(record(agent_trace), serve.grpc_endpoint).name == "SUCCESS"
        serve.wait_for(lambda c: c["traces_judged"] == 1, "the trace judged")
        poll(lambda: "next_hop_down" in [e["event"] for e in serve.events()] or None, timeout=30, what="hop down")
        hop.start()
        counters = serve.wait_for(lambda c: c["spans_forwarded"] == 4, "4 spans forwarded")
    assert counters["spans_dropped"] == 0
    assert "next_hop_up" in [e["event"] for e in serve.events()]
    assert len(hop.spans()) == 4


def test_next_hop_down_past_the_queue_refuses_intake_and_drops_nothing(
    hop: NextHop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the next hop down and --queue-size reached, a new request is refused (retry); the queued spans are kept."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")
    hop.stop()
    with running(BUDGETS, hop.url, queue_spans=4, shutdown_timeout_s=1.0) as serve:
        send_grpc(record(agent_trace, first_trace=1), serve.grpc_endpoint)
        serve.wait_for(lambda c: c["traces_judged"] == 1, "the first trace judged")
        with pytest.raises(grpc.RpcError) as refused:
            _stub(serve.grpc_endpoint).Export(_request(2), timeout=10)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        counters = serve.counters()
    assert counters["spans_dropped"] == 0
    assert counters["spans_received"] == 4
    assert serve.server.counters.snapshot()["spans_dropped"] == 4  # no log: counted at the shutdown deadline


def test_batch_refused_for_good_is_dropped_and_counted_and_the_queue_moves_on(hop: NextHop) -> None:
    """A batch the next hop refuses with INVALID_ARGUMENT is dropped and counted; one refused UNAVAILABLE is retried."""
    hop.refuse = [grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAVAILABLE]
    with running(BUDGETS, hop.url) as serve:
        send_grpc(record(agent_trace, first_trace=1), serve.grpc_endpoint)
        serve.wait_for(lambda c: c["spans_dropped"] == 4, "the first trace dropped")
        send_grpc(record(agent_trace, first_trace=2), serve.grpc_endpoint)
        counters = serve.wait_for(lambda c: c["spans_forwarded"] == 4, "the second trace forwarded")
    assert counters["spans_dropped"] == 4
    assert {s.trace_id for _, _, s in hop.spans()} == {(2).to_bytes(16, "big")}


def test_the_event_log_is_one_ascii_line_per_event_whatever_a_field_holds() -> None:
    """A field holding control and bidi characters (a client's message, say) is escaped: one ASCII JSON line."""
    stream = io.StringIO()
    log = EventLog(stream, clock=lambda: 0.0)
    hostile = "bad\x1b]0;pwned\x07\u202e\nlatency-budget serve: OK"
    log.event("bad_request", message=hostile)
    (line,) = stream.getvalue().splitlines()
    assert line.isascii()
    assert json.loads(line) == {"event": "bad_request", "message": hostile}


def test_the_report_sinks_leave_their_shutdown_to_the_drain(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """serve shuts its log and metric providers down itself, within the drain deadline.

    An exit hook of the SDK's would shut them down a second time after a missed deadline
    (printing a line that is not JSON on serve's stderr) and wait up to 30 s more for metrics.
    """
    registered: list[object] = []
    monkeypatch.setattr(atexit, "register", lambda function, *args, **kwargs: registered.append(function))
    flush = open_report_sinks(otlp_target("http://127.0.0.1:9", "grpc", strict=True), metric_interval_s=3600).flush
    try:
        assert registered == []
    finally:
        flush(0.5)
