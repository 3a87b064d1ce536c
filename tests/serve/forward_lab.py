"""Parts of the forwarding fault lab: GenAI traffic with large prompts, a sender that retries, hops that fail.

The traffic is OTLP protobuf built directly (explicit ids and timestamps): each trace is a
request root, a retrieval and two model calls, each with a 2.5 KB ``gen_ai.prompt`` and
``gen_ai.completion``, so a few hundred traces pass the 4 MiB that the Collector and Jaeger take in
one request. The sender is a gRPC client that keeps every request until ``serve``
acknowledges it, and retries it after a refusal (as the SDK's and the Collector's
exporters do); it records the span ids acknowledged, so a test asserts the invariant of
docs/collector-tier.md by span id: acknowledged = forwarded once + still held + counted
as too large.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span

from .harness import NextHop, at

PROMPT_BYTES = 2500
SPANS_PER_TRACE = 4
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_RETRYABLE = (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE)


def _kv(key: str, value: str) -> KeyValue:
    pair = KeyValue(key=key)
    pair.value.string_value = value
    return pair


def span_key(trace_id: bytes, span_id: bytes) -> tuple[int, int]:
    return int.from_bytes(trace_id, "big"), int.from_bytes(span_id, "big")


def genai_request(first_trace: int, traces: int, *, prompt_bytes: int = PROMPT_BYTES) -> bytes:
    """``traces`` GenAI traces (ids from ``first_trace``) as one encoded ExportTraceServiceRequest."""
    request = trace_service_pb2.ExportTraceServiceRequest()
    resource_spans: ResourceSpans = request.resource_spans.add()
    resource_spans.resource.attributes.append(_kv("service.name", "agent"))
    scope_spans = resource_spans.scope_spans.add()
    scope_spans.scope.name = "tests.serve.lab"
    for number in range(first_trace, first_trace + traces):
        trace_id = number.to_bytes(16, "big")
        base = number * 16
        root = scope_spans.spans.add(
            trace_id=trace_id, span_id=base.to_bytes(8, "big"), name="POST /ask", kind=Span.SPAN_KIND_SERVER
        )
        root.start_time_unix_nano, root.end_time_unix_nano = at(0), at(400)
        parent = root.span_id
        for offset, (name, start, end) in enumerate(
            (("retrieve docs", 10, 70), ("chat gpt-4o", 80, 200), ("chat gpt-4o", 210, 330)), start=1
        ):
            span = scope_spans.spans.add(
                trace_id=trace_id, span_id=(base + offset).to_bytes(8, "big"), parent_span_id=parent, name=name
            )
            span.start_time_unix_nano, span.end_time_unix_nano = at(start), at(end)
            if name.startswith("chat"):
                span.kind = Span.SPAN_KIND_CLIENT
                span.attributes.append(_kv("gen_ai.operation.name", "chat"))
                text = (f"trace {number} " * prompt_bytes)[:prompt_bytes]
                span.attributes.append(_kv("gen_ai.prompt", text))
                span.attributes.append(_kv("gen_ai.completion", text))
    return request.SerializeToString()


def span_ids(body: bytes) -> list[tuple[int, int]]:
    """The (trace id, span id) of every span of an encoded request."""
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
    return [
        span_key(span.trace_id, span.span_id)
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    ]


class RetryingSender:
    """Sends encoded requests over gRPC, each until acknowledged (a refusal is retried after ``backoff_s``)."""

    def __init__(self, endpoint: str, *, backoff_s: float = 0.05, timeout_s: float = 10.0) -> None:
        self._channel = grpc.insecure_channel(endpoint)
        self._export = self._channel.unary_unary(EXPORT)
        self._backoff = backoff_s
        self._timeout = timeout_s
        self.acknowledged: list[tuple[int, int]] = []
        self.refusals: Counter[str] = Counter()

    def send(self, body: bytes, *, give_up_at: float) -> bool:
        """Send ``body`` until acknowledged (True) or ``give_up_at`` (monotonic) passes (False)."""
        while True:
            try:
                self._export(body, timeout=self._timeout)
            except grpc.RpcError as error:
                self.refusals[error.code().name] += 1
                if error.code() not in _RETRYABLE or time.monotonic() > give_up_at:
                    return False
                time.sleep(self._backoff)  # the sender's retry backoff, not a synchronisation
                continue
            self.acknowledged.extend(span_ids(body))
            return True

    def close(self) -> None:
        self._channel.close()


class LabHop(NextHop):
    """A next hop with a receive limit (as the Collector's ``max_recv_msg_size_mib``) and a delay per request."""

    def __init__(self, *, max_receive_bytes: int = 4 * 1024 * 1024, delay_s: float = 0.0, port: int = 0) -> None:
        self.max_receive_bytes = max_receive_bytes
        self.delay_s = delay_s
        self.calls = 0
        super().__init__(port)

    def start(self) -> None:
        from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc  # noqa: PLC0415
        from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc  # noqa: PLC0415

        from .harness import _Collecting, _CollectingLogs, _CollectingMetrics  # noqa: PLC0415

        hop = self

        class Slow(_Collecting):
            def Export(self, request: Any, context: Any) -> Any:
                with hop.lock:
                    hop.calls += 1
                if hop.delay_s:
                    time.sleep(hop.delay_s)  # the fault: a hop that answers slowly
                return super().Export(request, context)

        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=8),
            options=(("grpc.max_receive_message_length", self.max_receive_bytes),),
        )
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Slow(self), server)
        logs_service_pb2_grpc.add_LogsServiceServicer_to_server(_CollectingLogs(self), server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_CollectingMetrics(self), server)
        self.port = server.add_insecure_port(f"127.0.0.1:{self.port}")
        server.start()
        self._server = server

    def received(self) -> Counter[tuple[int, int]]:
        """How many times each (trace id, span id) arrived."""
        return Counter(span_key(span.trace_id, span.span_id) for _, _, span in self.spans())


def assert_invariant(
    acknowledged: Iterable[tuple[int, int]],
    forwarded: Counter[tuple[int, int]],
    *,
    held: Iterable[tuple[int, int]] = (),
    too_large: int = 0,
) -> None:
    """acknowledged = forwarded once + still held + counted as too large, by span id."""
    acked = Counter(acknowledged)
    twice = {key: n for key, n in acked.items() if n > 1}
    assert not twice, f"the sender got an acknowledgement twice for {sorted(twice)[:5]}"
    doubled = {key: n for key, n in forwarded.items() if n > 1}
    assert not doubled, f"forwarded more than once: {len(doubled)} spans, e.g. {sorted(doubled)[:5]}"
    unasked = set(forwarded) - set(acked)
    assert not unasked, f"forwarded but never acknowledged: {len(unasked)}"
    missing = set(acked) - set(forwarded) - set(held)
    assert len(missing) == too_large, (
        f"{len(missing)} acknowledged spans neither forwarded nor held ({too_large} counted as too large)"
    )


class Pacer(threading.Thread):
    """Sends ``requests`` in turn through a :class:`RetryingSender`, one every ``pace_s`` at most."""

    def __init__(self, sender: RetryingSender, requests: list[bytes], *, pace_s: float, give_up_s: float) -> None:
        super().__init__(name="lab-sender", daemon=True)
        self.sender = sender
        self.requests = requests
        self.pace_s = pace_s
        self.give_up_s = give_up_s
        self.sent = 0
        self.failed = 0

    def run(self) -> None:
        give_up_at = time.monotonic() + self.give_up_s
        for body in self.requests:
            started = time.monotonic()
            if not self.sender.send(body, give_up_at=give_up_at):
                self.failed += 1
            self.sent += 1
            left = self.pace_s - (time.monotonic() - started)
            if left > 0:
                time.sleep(left)  # the traffic's pace, not a synchronisation
