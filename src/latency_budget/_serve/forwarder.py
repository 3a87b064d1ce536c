"""Forward assembled spans to the next OTLP hop through a bounded queue, retrying while it is down.

The requests go out through the SDK's own OTLP span exporters (gRPC or HTTP, chosen and
configured by the standard ``OTEL_EXPORTER_OTLP_*`` variables, as
:mod:`latency_budget.export._otlp` resolves them), fed already-encoded requests: the
spans leave as they came, resource and scope kept, with no round trip through SDK span
objects. The exporters' private entry points that take an encoded request are the one
thing used here that their public API does not offer; ``tests/serve`` exercises both.

While the next hop refuses or is unreachable, the head of the queue is retried with
backoff and new batches wait behind it, up to ``queue_spans`` spans; past that a new
batch is dropped and counted (``spans_dropped``), never silently.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from latency_budget._serve.stats import Counters, EventLog
from latency_budget.export._otlp import OtlpTarget

__all__ = ["Forwarder", "Sender", "open_sender"]

_BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


class Sender(Protocol):
    """Sends one encoded request to the next hop; True when it took it."""

    def send(self, request: ExportTraceServiceRequest) -> bool: ...

    def shutdown(self) -> None: ...


class _GrpcSender(GrpcSpanExporter):
    """The SDK's gRPC span exporter (its channel, headers, TLS, timeout and retries), fed encoded requests."""

    def _translate_data(self, data: Any) -> ExportTraceServiceRequest:
        request: ExportTraceServiceRequest = data
        return request

    def _count_data(self, data: Any) -> int:
        return sum(len(scope.spans) for resource in data.resource_spans for scope in resource.scope_spans)

    def send(self, request: ExportTraceServiceRequest) -> bool:
        return bool(self._export(request) == self._result.SUCCESS)  # type: ignore[arg-type]


class _HttpSender(HttpSpanExporter):
    """The SDK's OTLP/HTTP span exporter (its session, headers, TLS, timeout and retries), fed encoded requests."""

    def send(self, request: ExportTraceServiceRequest) -> bool:
        if self._shutdown:
            return False
        return bool(self._client.export(request.SerializeToString()).success)


def open_sender(target: OtlpTarget) -> Sender:
    """The sender for ``target``'s traces protocol and endpoint (None: the exporters read the environment)."""
    if target.protocols["traces"] == "grpc":
        return _GrpcSender(endpoint=target.endpoint) if target.endpoint else _GrpcSender()
    return _HttpSender(endpoint=target.url("traces")) if target.endpoint else _HttpSender()


class Forwarder:
    """A bounded queue of encoded requests and the thread that sends them, in order."""

    def __init__(
        self,
        sender: Sender,
        *,
        queue_spans: int,
        counters: Counters,
        log: EventLog,
        destination: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sender = sender
        self._capacity = queue_spans
        self._counters = counters
        self._log = log
        self._destination = destination
        self._clock = clock
        self._queue: deque[tuple[ExportTraceServiceRequest, int]] = deque()
        self._queued = 0
        self._cond = threading.Condition()
        self._closing = False
        self._stop = False
        self._down = False
        self._thread = threading.Thread(target=self._run, name="latency-budget-forward", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def queued(self) -> int:
        """Spans waiting to be sent."""
        with self._cond:
            return self._queued

    def put(self, request: ExportTraceServiceRequest, spans: int) -> None:
        """Queue ``request`` (holding ``spans`` spans); dropped and counted when the queue is full."""
        if not spans:
            return
        with self._cond:
            if not self._stop and self._queued + spans <= self._capacity:
                self._queue.append((request, spans))
                self._queued += spans
                self._cond.notify()
                return
        self._counters.add("spans_dropped", spans)
        reason = "shut down" if self._stop else "forward queue full"
        self._log.event("spans_dropped", reason=reason, spans=spans, to=self._destination)

    def close(self, deadline: float) -> None:
        """Send what is queued until ``deadline`` (monotonic seconds); count the rest as dropped."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(max(0.0, deadline - self._clock()))
        with self._cond:
            self._stop = True
            left = self._queued
            self._queue.clear()
            self._queued = 0
            self._cond.notify_all()
        try:
            self._sender.shutdown()  # also cuts short an exporter's retry wait
        except Exception as exc:
            self._log.event("forward_shutdown_failed", error=repr(exc)[:200])
        self._thread.join(1.0)
        if left:
            self._counters.add("spans_dropped", left)
            self._log.event("spans_dropped", always=True, reason="shutdown deadline", spans=left, to=self._destination)

    def _run(self) -> None:
        attempt = 0
        while True:
            with self._cond:
                while not self._queue and not self._closing and not self._stop:
                    self._cond.wait()
                if self._stop or not self._queue:
                    return  # stopped, or closing with nothing left
                request, spans = self._queue[0]
            try:
                sent = self._sender.send(request)
            except Exception as exc:  # an exporter bug must not stop forwarding
                logging.getLogger("latency_budget").debug("forward failed: %r", exc)
                sent = False
            if sent:
                attempt = 0
                with self._cond:
                    if self._queue and self._queue[0][0] is request:
                        self._queue.popleft()
                        self._queued -= spans
                self._counters.add("spans_forwarded", spans)
                if self._down:
                    self._down = False
                    self._log.event("next_hop_up", always=True, to=self._destination)
                continue
            if not self._down:
                self._down = True
                self._log.event("next_hop_down", always=True, to=self._destination, queued_spans=self.queued())
            delay = _BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)]
            attempt += 1
            with self._cond:
                if self._stop:
                    return
                self._cond.wait(delay)
