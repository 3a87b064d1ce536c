"""Real parts for the serve tests: a gRPC next hop, real OTLP exporters as senders, a server in process.

The next hop is opentelemetry-proto's ``TraceService`` on a grpcio server, the senders
are the SDK's OTLP span exporters (gRPC and HTTP), and the spans are recorded by a real
``TracerProvider`` with explicit timestamps and sequential ids, so a test can record the
same trace twice (once plain, for the tier; once through the in-process processor) and
compare the roots attribute for attribute. Waiting is polling the health counters with
a deadline, never a sleep.
"""

from __future__ import annotations

import io
import json
import threading
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import grpc
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import Tracer

from latency_budget._config.model import BudgetConfig
from latency_budget._demo.otlp_json import encode_otlp_json
from latency_budget._serve.assembly import Limits
from latency_budget._serve.forwarder import Sender, open_logs_sender, open_sender
from latency_budget._serve.otlp import attributes_of
from latency_budget._serve.reports import open_report_sinks
from latency_budget._serve.server import ServeOptions, Server
from latency_budget._serve.stats import EventLog
from latency_budget.export._otlp import otlp_target
from tests.e2e.services import poll

MS = 1_000_000
T0 = 1_700_000_000_000_000_000
WAIT_S = 30.0  # the deadline of every poll: generous on a loaded machine, never reached when it works


def at(ms: float) -> int:
    """The instant ``ms`` milliseconds after T0, in ns."""
    return T0 + round(ms * MS)


class SequentialIds(IdGenerator):
    """Ids 1, 2, 3... from ``first``: two recordings of one trace get the same ids."""

    def __init__(self, first_trace: int = 1, first_span: int = 1) -> None:
        self._span = first_span - 1
        self._trace = first_trace - 1

    def generate_span_id(self) -> int:
        self._span += 1
        return self._span

    def generate_trace_id(self) -> int:
        self._trace += 1
        return self._trace


def record(
    build: Callable[[Tracer], None],
    *,
    service: str = "agent",
    processor: Callable[[SpanProcessor], SpanProcessor] | None = None,
    first_trace: int = 1,
    first_span: int = 1,
) -> list[ReadableSpan]:
    """The spans ``build`` makes on a real provider (through ``processor`` when given), in the order they ended."""
    exporter = InMemorySpanExporter()
    downstream: SpanProcessor = SimpleSpanProcessor(exporter)
    provider = TracerProvider(
        resource=Resource.create({"service.name": service}), id_generator=SequentialIds(first_trace, first_span)
    )
    provider.add_span_processor(processor(downstream) if processor is not None else downstream)
    build(provider.get_tracer("tests.serve"))
    provider.shutdown()
    return list(exporter.get_finished_spans())


def send_grpc(spans: Sequence[ReadableSpan], endpoint: str) -> SpanExportResult:
    """Export ``spans`` with the SDK's OTLP/gRPC exporter."""
    exporter = GrpcSpanExporter(endpoint=endpoint, insecure=True, timeout=10)
    try:
        return exporter.export(spans)
    finally:
        exporter.shutdown()


def send_http_json(spans: Sequence[ReadableSpan], base_url: str) -> SpanExportResult:
    """POST ``spans`` as OTLP/JSON (Python's SDK has no JSON exporter: the body is the demo's OTLP/JSON encoding)."""
    body = json.dumps(encode_otlp_json(spans)).encode()
    request = urllib.request.Request(
        f"{base_url}/v1/traces", data=body, method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return SpanExportResult.SUCCESS if response.status == 200 else SpanExportResult.FAILURE


def send_http(spans: Sequence[ReadableSpan], base_url: str) -> SpanExportResult:
    """Export ``spans`` with the SDK's OTLP/HTTP (protobuf) exporter."""
    exporter = HttpSpanExporter(endpoint=f"{base_url}/v1/traces", timeout=10)
    try:
        return exporter.export(spans)
    finally:
        exporter.shutdown()


class _Collecting(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, hop: NextHop) -> None:
        self._hop = hop

    def Export(self, request: Any, context: Any) -> Any:
        with self._hop.lock:
            refuse = self._hop.refuse.pop(0) if self._hop.refuse else None
            if refuse is None:
                self._hop.requests.append(request)
        if refuse is not None:
            context.abort(refuse, "refused by the test")
        return trace_service_pb2.ExportTraceServiceResponse()


class _CollectingLogs(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self, hop: NextHop) -> None:
        self._hop = hop

    def Export(self, request: Any, context: Any) -> Any:
        with self._hop.lock:
            self._hop.log_requests.append(request)
        return logs_service_pb2.ExportLogsServiceResponse()


class _CollectingMetrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, hop: NextHop) -> None:
        self._hop = hop

    def Export(self, request: Any, context: Any) -> Any:
        with self._hop.lock:
            self._hop.metric_requests.append(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class NextHop:
    """A real OTLP/gRPC receiver of traces, logs and metrics that keeps every request; stops and starts on its port."""

    def __init__(self, port: int = 0) -> None:
        self.lock = threading.Lock()
        self.requests: list[Any] = []
        self.refuse: list[grpc.StatusCode] = []  # the next trace requests answer these, in turn
        self.log_requests: list[Any] = []
        self.metric_requests: list[Any] = []
        self.port = port
        self._server: grpc.Server | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Collecting(self), server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_CollectingLogs(self), server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_CollectingMetrics(self), server)
        self.port = server.add_insecure_port(f"127.0.0.1:{self.port}")
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0).wait()
            self._server = None

    def spans(self) -> list[tuple[dict[str, object], str, ProtoSpan]]:
        """Every span received: (its resource's attributes, its scope's name, the span)."""
        with self.lock:
            requests = list(self.requests)
        return [
            (attributes_of(rs.resource.attributes), ss.scope.name, span)
            for request in requests
            for rs in request.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]


@dataclass
class Running:
    """A serve in this process, and how to reach it."""

    server: Server
    grpc_endpoint: str
    http_url: str
    health_url: str
    log: io.StringIO

    def health(self) -> tuple[int, dict[str, Any]]:
        try:
            with urllib.request.urlopen(self.health_url, timeout=5) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def counters(self) -> dict[str, int]:
        return dict(self.health()[1]["counters"])

    def wait_for(self, condition: Callable[[Mapping[str, int]], bool], what: str) -> dict[str, int]:
        """Poll the health counters until ``condition`` holds; the counters then."""
        return poll(lambda: found if condition(found := self.counters()) else None, timeout=WAIT_S, what=what)

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.getvalue().splitlines() if line.strip()]


def open_handover(url: str) -> Sender:
    """The handover's sender to ``url`` (layer 1), as ``serve --handover-endpoint`` opens it."""
    return open_sender(otlp_target(url, "grpc", strict=True), tls_by_scheme=True)


@contextmanager
def running(
    config: BudgetConfig,
    next_hop_url: str,
    *,
    limits: Limits | None = None,
    drain: bool = True,
    reports: bool = False,
    partial_in_metrics: bool = False,
    **options: Any,
) -> Iterator[Running]:
    """A started server forwarding to ``next_hop_url`` (with ``reports``, its logs and metrics too); drained after."""
    log = io.StringIO()
    endpoints = {"grpc_endpoint": "127.0.0.1:0", "http_endpoint": "127.0.0.1:0", "health_endpoint": "127.0.0.1:0"}
    settings = ServeOptions(limits=limits or Limits(decision_wait_s=0.05, max_wait_s=30.0), **{**endpoints, **options})
    handover = settings.handover_endpoint
    target = otlp_target(next_hop_url, "grpc", strict=True)
    sinks = open_report_sinks(target, partial_in_metrics=partial_in_metrics) if reports else None
    server = Server(
        config,
        settings,
        open_sender(target),
        destination=next_hop_url,
        log=EventLog(log),
        sinks=sinks.sinks if sinks is not None else (),
        flush_sinks=sinks.flush if sinks is not None else None,
        metric_bank=sinks.bank if sinks is not None else None,
        handover=open_handover(handover) if handover is not None else None,
        handover_destination=handover or "",
        logs_sender=open_logs_sender(target),
    )
    fields = server.start()
    handle = Running(server, str(fields["grpc"]), f"http://{fields['http']}", f"http://{fields['health']}/health", log)
    try:
        yield handle
    finally:
        if drain:
            server.drain()
