"""Forward assembled spans to the next OTLP hop through a bounded queue, retrying while it is down.

The requests go out through the SDK's own OTLP span exporters (gRPC or HTTP, chosen and
configured by the standard ``OTEL_EXPORTER_OTLP_*`` variables, as
:mod:`latency_budget.export._otlp` resolves them), fed already-encoded requests: the
spans leave as the bytes they came as, resource and scope kept, with no round trip
through protobuf messages or SDK span objects. The exporters' private parts that send
an encoded request (the gRPC channel, the HTTP client) are the one thing used here that
their public API does not offer; ``tests/serve`` exercises both.

While the next hop is unreachable or refuses for now, the head of the queue is retried
with backoff and new batches wait behind it, up to ``queue_spans`` spans; past that a new
batch is dropped and counted (``spans_dropped``), never silently. A batch the next hop
refuses for good (gRPC ``INVALID_ARGUMENT``, HTTP 400) is dropped and counted at once.
A batch may carry a ``done`` callback, called once it has left either way (sent, or
dropped and counted), after every batch queued before it: the write-ahead log settles
its traces then.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Literal, Protocol

import grpc
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from latency_budget._serve.stats import Counters, EventLog
from latency_budget.export._otlp import OtlpTarget

__all__ = ["Forwarder", "Sender", "open_sender"]

_BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)

Done = Callable[[], object]


Outcome = Literal["sent", "retry", "rejected"]
"""What the next hop did with a request: took it, failed for now (retry), or refused it for good."""

# Reconnect soon after the next hop comes back (grpc's own backoff grows to two minutes).
_CHANNEL_OPTIONS = (("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 5000))
# HTTP statuses that say "not now" rather than "never" (as the OTLP/HTTP specification lists them).
_HTTP_RETRYABLE = frozenset({408, 429, 502, 503, 504})
_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


class Sender(Protocol):
    """Sends one encoded request to the next hop, once (the forwarder retries)."""

    def send(self, request: bytes) -> Outcome: ...

    def shutdown(self) -> None: ...


class _GrpcSender(GrpcSpanExporter):
    """The SDK's gRPC span exporter (its channel, credentials, headers, compression, timeout), fed encoded requests.

    One attempt per call, through the exporter's channel with no request serializer (the
    request is bytes already): the forwarder does the retrying, and needs the status code
    to tell a refusal for good (``INVALID_ARGUMENT``) from one for now (the exporter's
    retryable codes, ``OTEL_PYTHON_EXPORTER_OTLP_GRPC_RETRYABLE_ERROR_CODES``).
    """

    def __init__(self, endpoint: str | None = None) -> None:
        super().__init__(endpoint=endpoint, channel_options=_CHANNEL_OPTIONS)  # type: ignore[arg-type]
        self._raw_export: tuple[object, Callable[..., object]] | None = None

    def send(self, request: bytes) -> Outcome:
        channel = self._channel
        if channel is None or self._shutdown:
            return "retry"
        if self._raw_export is None or self._raw_export[0] is not channel:  # the exporter may open a new channel
            method = channel.unary_unary(
                _EXPORT, request_serializer=None, response_deserializer=ExportTraceServiceResponse.FromString
            )
            self._raw_export = (channel, method)
        try:
            self._raw_export[1](request, metadata=self._headers, timeout=self._timeout)
        except grpc.RpcError as error:
            return "retry" if error.code() in self._retryable_error_codes else "rejected"
        return "sent"


class _HttpSender(HttpSpanExporter):
    """The SDK's OTLP/HTTP span exporter (its session, headers, TLS, compression, timeout), fed encoded requests."""

    def send(self, request: bytes) -> Outcome:
        if self._shutdown:
            return "retry"
        result = self._client.export(request)
        if result.success:
            return "sent"
        status = result.status_code
        return "rejected" if status is not None and 400 <= status < 500 and status not in _HTTP_RETRYABLE else "retry"


def open_sender(target: OtlpTarget) -> Sender:
    """The sender for ``target``'s traces protocol and endpoint (None: the exporters read the environment)."""
    if target.protocols["traces"] == "grpc":
        return _GrpcSender(endpoint=target.endpoint)
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
        self._queue: deque[tuple[bytes, int, list[Done]]] = deque()
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

    def put(self, request: bytes, spans: int, done: Done | None = None) -> None:
        """Queue ``request`` (holding ``spans`` spans); dropped and counted when the queue is full.

        ``done`` is called once the request has left, sent or dropped, and every request
        queued before it too (a dropped one's ``done`` waits for the batch ahead of it).
        """
        if not spans:
            if done is not None:
                self._finish([done])
            return
        dones = [done] if done is not None else []
        with self._cond:
            if not self._stop and self._queued + spans <= self._capacity:
                self._queue.append((request, spans, dones))
                self._queued += spans
                self._cond.notify()
                return
            if self._queue and not self._stop:
                self._queue[-1][2].extend(dones)
                dones = []
        self._counters.add("spans_dropped", spans)
        reason = "shut down" if self._stop else "forward queue full"
        self._log.event("spans_dropped", reason=reason, spans=spans, to=self._destination)
        self._finish(dones)

    def _finish(self, dones: list[Done]) -> None:
        for done in dones:
            try:
                done()
            except Exception as exc:  # a bug of ours: logged, forwarding goes on
                self._log.event("internal_error", where="forward_done", error=repr(exc)[:300])

    def close(self, deadline: float) -> None:
        """Send what is queued until ``deadline`` (monotonic seconds); count the rest as dropped."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(max(0.0, deadline - self._clock()))
        with self._cond:
            self._stop = True
            left = self._queued
            dones = [done for _, _, waiting in self._queue for done in waiting]
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
        self._finish(dones)

    def _run(self) -> None:
        attempt = 0
        while True:
            with self._cond:
                while not self._queue and not self._closing and not self._stop:
                    self._cond.wait()
                if self._stop or not self._queue:
                    return  # stopped, or closing with nothing left
                request, spans, dones = self._queue[0]
            try:
                outcome = self._sender.send(request)
            except Exception as exc:  # an exporter bug must not stop forwarding
                logging.getLogger("latency_budget").debug("forward failed: %r", exc)
                outcome = "retry"
            if outcome != "retry":
                attempt = 0
                with self._cond:
                    if self._queue and self._queue[0][0] is request:
                        self._queue.popleft()
                        self._queued -= spans
                    else:
                        dones = []  # cleared by close(), which calls them
                self._finish(dones)  # before the count: a batch counted has been settled
                if outcome == "sent":
                    self._counters.add("spans_forwarded", spans)
                else:  # refused for good: sending it again would block the queue behind it forever
                    self._counters.add("spans_dropped", spans)
                    self._log.event(
                        "spans_dropped", reason="refused by the next hop", spans=spans, to=self._destination
                    )
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
