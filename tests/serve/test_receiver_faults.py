"""serve's receivers and assembly against hostile clients and odd traces (issue 44 items 5 and 6).

Slow and half-open clients, clients that go away, malformed headers, concatenated gzip
members, several parentless spans in one trace, a flood of rootless traces. Every case
checks by span id that what was acknowledged is forwarded once (or counted), and waits by
polling an observable effect with a deadline, never by sleeping.
"""

from __future__ import annotations

import gzip
import socket
import struct
import threading
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.trace import SpanKind, Tracer

from latency_budget._serve.assembly import Limits
from latency_budget._serve.otlp import attributes_of
from latency_budget.cli._main import main
from tests.e2e.services import poll

from .harness import WAIT_S, NextHop, Running, at, record, running, send_grpc
from .test_command import BUDGET_FILE, _drain, _listening, _start
from .test_judging import BUDGETS, agent_trace

SPANS = 4  # agent_trace: a root, a retrieval and two model calls
VERDICT = "latency_budget.verdict"
VIOLATED = "latency_budget.violated"


@pytest.fixture
def hop() -> Iterator[NextHop]:
    next_hop = NextHop()
    yield next_hop
    next_hop.stop()


def _request(first_trace: int) -> trace_service_pb2.ExportTraceServiceRequest:
    return encode_spans(record(agent_trace, first_trace=first_trace))


def _ids(request: trace_service_pb2.ExportTraceServiceRequest) -> list[tuple[int, int]]:
    return [
        (int.from_bytes(span.trace_id, "big"), int.from_bytes(span.span_id, "big"))
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]


def _forwarded(hop: NextHop) -> Counter[tuple[int, int]]:
    return Counter((int.from_bytes(s.trace_id, "big"), int.from_bytes(s.span_id, "big")) for _, _, s in hop.spans())


def _post(url: str, body: bytes, **headers: str) -> int:
    request = urllib.request.Request(
        f"{url}/v1/traces", data=body, method="POST", headers={"Content-Type": "application/x-protobuf", **headers}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def _raw(address: str, data: bytes) -> bytes:
    """Send ``data`` on a fresh connection; what comes back until the server closes it (or 10 s)."""
    host, _, port = address.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as connection:
        connection.sendall(data)
        connection.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    return answer


def _half_open(address: str, count: int, first_bytes: bytes) -> list[socket.socket]:
    """``count`` connections that sent ``first_bytes`` of a request and then nothing more (a byte every 10 s, say)."""
    host, _, port = address.rpartition(":")
    connections = []
    for _ in range(count):
        connection = socket.create_connection((host, int(port)), timeout=10)
        connection.sendall(first_bytes)
        connections.append(connection)
    return connections


def _http_address(serve: Running) -> str:
    return serve.http_url.removeprefix("http://")


def _health_address(serve: Running) -> str:
    return serve.health_url.removeprefix("http://").removesuffix("/health")


# -- item 5: slow clients --------------------------------------------------------------------


def test_64_trickling_connections_do_not_refuse_other_clients(hop: NextHop) -> None:
    """64 connections stuck in their headers (at the defaults) leave OTLP/HTTP answering 200 to everyone else."""
    with running(BUDGETS, hop.url) as serve:
        slow = _half_open(_http_address(serve), 64, b"POST /v1/traces HTTP/1.1\r\nHost: x\r\n")
        try:
            poll(
                lambda: True if serve.health()[1]["held"].get("http_connections", 0) >= 64 else None,
                timeout=WAIT_S,
                what="the 64 slow connections taken",
            )
            for trace_id in (1, 2, 3):
                assert _post(serve.http_url, _request(trace_id).SerializeToString()) == 200
            serve.wait_for(lambda c: c["spans_forwarded"] == 3 * SPANS, "3 traces forwarded")
        finally:
            for connection in slow:
                connection.close()
    assert _forwarded(hop) == Counter(pair for trace_id in (1, 2, 3) for pair in _ids(_request(trace_id)))


def test_16_half_open_connections_leave_health_answering(hop: NextHop) -> None:
    """16 connections to the health endpoint that never finish a request: health still answers 200."""
    with running(BUDGETS, hop.url) as serve:
        stuck = _half_open(_health_address(serve), 16, b"GET /health HTTP/1.1\r\n")
        try:
            for _ in range(3):
                status, document = serve.health()
                assert status == 200
                assert document["status"] == "serving"
        finally:
            for connection in stuck:
                connection.close()


def test_at_the_connection_limit_the_oldest_waiting_connection_makes_room(hop: NextHop) -> None:
    """With every slot taken by clients that send nothing, a new client is served: the oldest idle one is closed."""
    with running(BUDGETS, hop.url, http_max_connections=4, http_header_timeout_s=60.0) as serve:
        idle = _half_open(_http_address(serve), 4, b"POST /v1/traces HTTP/1.1\r\n")
        try:
            poll(
                lambda: True if serve.health()[1]["held"].get("http_connections", 0) >= 4 else None,
                timeout=WAIT_S,
                what="4 idle connections taken",
            )
            assert _post(serve.http_url, _request(1).SerializeToString()) == 200
            idle[0].settimeout(WAIT_S)
            assert idle[0].recv(100) == b""  # the oldest was closed to make room
            serve.wait_for(lambda c: c["spans_forwarded"] == SPANS, "the trace forwarded")
        finally:
            for connection in idle:
                connection.close()


def test_a_client_stuck_in_its_headers_or_body_is_timed_out(hop: NextHop) -> None:
    """Headers not finished within the header timeout, or a body not within the body timeout: the connection ends."""
    with running(BUDGETS, hop.url, http_header_timeout_s=0.3, http_body_timeout_s=0.3) as serve:
        in_headers, in_body = (
            _half_open(_http_address(serve), 1, b"POST /v1/traces HTTP/1.1\r\n")[0],
            _half_open(
                _http_address(serve),
                1,
                b"POST /v1/traces HTTP/1.1\r\nContent-Type: application/x-protobuf\r\nContent-Length: 100\r\n\r\nab",
            )[0],
        )
        for connection in (in_headers, in_body):
            connection.settimeout(WAIT_S)
            answer = b""
            while chunk := connection.recv(65536):
                answer += chunk
            connection.close()
            assert answer == b"" or answer.startswith(b"HTTP/1.1 408")
        assert _post(serve.http_url, _request(1).SerializeToString()) == 200


def test_clients_that_go_away_cost_a_rate_limited_line_and_no_traceback(
    hop: NextHop, capfd: pytest.CaptureFixture[str]
) -> None:
    """Twenty clients resetting their connection mid-request: no traceback, far fewer than twenty log lines."""
    with running(BUDGETS, hop.url) as serve:
        host, _, port = _http_address(serve).rpartition(":")
        for _ in range(20):
            connection = socket.create_connection((host, int(port)), timeout=10)
            connection.sendall(b"POST /v1/traces HTTP/1.1\r\nContent-Type: application/x-protobuf\r\nContent-Le")
            connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            connection.close()  # a reset, not a clean close
        serve.wait_for(lambda c: c["http_clients_gone"] == 20, "the 20 resets seen")
        assert _post(serve.http_url, _request(1).SerializeToString()) == 200
        lines = [e for e in serve.events() if e["event"] == "http_client_gone"]
    assert 1 <= len(lines) < 20
    assert "Traceback" not in capfd.readouterr().err


# -- item 6: malformed headers, gzip members ---------------------------------------------------


@pytest.mark.parametrize("length", ["\u00b2", "12abc", "-1", "1e3", " ", "99999999999999999999999999"])
def test_a_content_length_that_is_not_a_number_is_400(
    hop: NextHop, capfd: pytest.CaptureFixture[str], length: str
) -> None:
    """A Content-Length that is not a decimal number is answered 400, with no traceback; the next request is served."""
    with running(BUDGETS, hop.url) as serve:
        head = (
            "POST /v1/traces HTTP/1.1\r\nContent-Type: application/x-protobuf\r\n"
            f"Content-Length: {length}\r\nConnection: close\r\n\r\n"
        )
        answer = _raw(_http_address(serve), head.encode("utf-8"))
        assert answer.split(b" ", 2)[1] in (b"400", b"413")
        assert _post(serve.http_url, _request(1).SerializeToString()) == 200
    assert "Traceback" not in capfd.readouterr().err


def test_concatenated_gzip_members_are_decoded_whole(hop: NextHop) -> None:
    """A gzip body of two members (two requests, as a protobuf merge) delivers the spans of both."""
    first, second = _request(1), _request(2)
    body = gzip.compress(first.SerializeToString()) + gzip.compress(second.SerializeToString())
    with running(BUDGETS, hop.url) as serve:
        assert _post(serve.http_url, body, **{"Content-Encoding": "gzip"}) == 200
        serve.wait_for(lambda c: c["spans_forwarded"] == 2 * SPANS, "both members' spans forwarded")
    assert _forwarded(hop) == Counter(_ids(first) + _ids(second))


def test_gzip_members_together_past_the_limit_are_413(hop: NextHop) -> None:
    """The request limit holds over all members: two members of 8 KB each under a 10 KB limit are 413."""
    member = gzip.compress(b"\0" * 8_000)
    with running(BUDGETS, hop.url, max_request_bytes=10_000) as serve:
        assert _post(serve.http_url, member + member, **{"Content-Encoding": "gzip"}) == 413


# -- item 6: several parentless spans, rootless floods ----------------------------------------


def _gateway(tracer: Tracer) -> None:
    """A short parentless span of another service in trace 1, starting 1 ms before agent_trace's root."""
    tracer.start_span("GET /edge", kind=SpanKind.SERVER, start_time=at(-1)).end(end_time=at(5))


def test_each_parentless_span_keeps_its_own_verdict(hop: NextHop) -> None:
    """A second parentless span from another service, 1 ms earlier, does not take the over-budget root's verdict."""
    agent = record(agent_trace, first_trace=1)
    gateway = record(_gateway, service="gateway", first_trace=1, first_span=100)
    with running(BUDGETS, hop.url) as serve:
        assert send_grpc(agent + gateway, serve.grpc_endpoint).name == "SUCCESS"
        serve.wait_for(lambda c: c["spans_forwarded"] == SPANS + 1, "the trace forwarded")
    roots = {span.name: attributes_of(span.attributes) for _, _, span in hop.spans() if not span.parent_span_id}
    assert roots["POST /ask"][VIOLATED] is True
    assert str(roots["POST /ask"][VERDICT]).startswith("OVER BUDGET")
    assert roots["GET /edge"][VIOLATED] is False  # judged on its own spans: itself
    assert VERDICT in roots["GET /edge"]
    assert _forwarded(hop) == Counter(
        (int(span.context.trace_id), int(span.context.span_id)) for span in agent + gateway
    )


def _children_only(tracer: Tracer) -> None:
    """agent_trace's children, under a root that is never exported."""
    root = tracer.start_span("POST /ask", kind=SpanKind.SERVER, start_time=at(0))
    ctx = trace.set_span_in_context(root)
    tracer.start_span("retrieve docs", context=ctx, start_time=at(10)).end(end_time=at(70))
    tracer.start_span("chat gpt-4o", context=ctx, kind=SpanKind.CLIENT, start_time=at(80)).end(end_time=at(200))


def test_a_flood_of_rootless_traces_does_not_refuse_every_sender(hop: NextHop) -> None:
    """Rootless traces past --max-traces are forwarded unjudged to make room: every sender gets in, roots are judged."""
    limits = Limits(decision_wait_s=0.05, max_wait_s=600.0, max_traces=20)
    acknowledged: list[tuple[int, int]] = []
    with running(BUDGETS, hop.url, limits=limits) as serve:
        for trace_id in range(1, 61):  # three times what the buffer holds, none ever rooted
            spans = [span for span in record(_children_only, first_trace=trace_id) if span.parent is not None]
            assert send_grpc(spans, serve.grpc_endpoint).name == "SUCCESS"
            acknowledged += [(int(s.context.trace_id), int(s.context.span_id)) for s in spans]
        rooted = record(agent_trace, first_trace=100)
        assert send_grpc(rooted, serve.grpc_endpoint).name == "SUCCESS"
        acknowledged += [(int(s.context.trace_id), int(s.context.span_id)) for s in rooted]
        counters = serve.wait_for(lambda c: c["traces_judged"] == 1, "the rooted trace judged")
        # A request may be refused for a moment, until the oldest rootless traces are quiet; never for good.
        assert counters["traces_forwarded_unjudged"] >= 40
    assert _forwarded(hop) == Counter(acknowledged)  # each once: the rest at the drain


# -- the options -------------------------------------------------------------------------------


def test_the_http_bounds_are_options_of_the_command(tmp_path: Path, hop: NextHop) -> None:
    """--http-header-timeout (and its variable) closes a half-open connection; the process still serves and drains."""
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(BUDGET_FILE)
    process = _start(
        budgets,
        hop,
        "--http-header-timeout",
        "0.3",
        "--http-max-connections",
        "8",
        env={"LATENCY_BUDGET_SERVE_HTTP_BODY_TIMEOUT": "0.3"},
    )
    listening = _listening(process)
    (stuck,) = _half_open(str(listening["http"]), 1, b"POST /v1/traces HTTP/1.1\r\n")
    stuck.settimeout(WAIT_S)
    assert stuck.recv(100) == b""  # closed by the server at the header deadline
    stuck.close()
    assert _post(f"http://{listening['http']}", _request(1).SerializeToString()) == 200
    _drain(process, listening["health"], "spans_received", SPANS, timeout=30)
    assert len(hop.spans()) == SPANS


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--http-max-connections", "0"], "--http-max-connections: expected a positive whole number"),
        (["--http-header-timeout", "never"], "--http-header-timeout: expected a number of seconds"),
        (["--http-body-timeout", "-1"], "--http-body-timeout: expected a positive number of seconds"),
    ],
)
def test_bad_http_bounds_are_one_line_and_exit_2(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad --http-* value is one line naming the option, and exit status 2."""
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(BUDGET_FILE)
    assert main(["serve", "--budgets", str(budgets), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert message in err[0]


def test_grpc_calls_that_never_send_their_message_do_not_starve_other_senders(hop: NextHop) -> None:
    """Eight gRPC calls whose message never comes (more than the handler threads) leave Export answering others."""
    held = threading.Event()

    def nothing() -> Iterator[bytes]:
        held.wait(WAIT_S)
        yield from ()

    with running(BUDGETS, hop.url) as serve:
        channels: list[grpc.Channel] = []
        stuck = []
        try:
            for _ in range(8):
                channel = grpc.insecure_channel(serve.grpc_endpoint)
                grpc.channel_ready_future(channel).result(timeout=WAIT_S)
                channels.append(channel)
                call = channel.stream_unary(
                    "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                    request_serializer=None,
                    response_deserializer=None,
                )
                stuck.append(call.future(nothing(), timeout=WAIT_S))
            assert send_grpc(record(agent_trace, first_trace=1), serve.grpc_endpoint).name == "SUCCESS"
            serve.wait_for(lambda c: c["spans_forwarded"] == SPANS, "the trace forwarded")
        finally:
            held.set()
            for channel in channels:
                channel.close()


def test_an_idle_kept_alive_connection_closed_at_the_deadline_is_reopened_by_the_sdk(hop: NextHop) -> None:
    """The SDK's OTLP/HTTP exporter, its kept-alive connection closed at the header deadline, exports again."""
    with running(BUDGETS, hop.url, http_header_timeout_s=0.3) as serve:
        exporter = HttpSpanExporter(endpoint=f"{serve.http_url}/v1/traces", timeout=10)
        try:
            assert exporter.export(record(agent_trace, first_trace=1)).name == "SUCCESS"
            poll(
                lambda: True if serve.health()[1]["held"]["http_connections"] == 0 else None,
                timeout=WAIT_S,
                what="the idle connection closed",
            )
            assert exporter.export(record(agent_trace, first_trace=2)).name == "SUCCESS"
        finally:
            exporter.shutdown()
        serve.wait_for(lambda c: c["spans_forwarded"] == 2 * SPANS, "both traces forwarded")
