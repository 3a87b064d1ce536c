"""Forward decided spans to the next OTLP hop: batches bounded in bytes, several in flight, nothing dropped.

The requests go out through the SDK's own OTLP span exporters (gRPC or HTTP, chosen and
configured by the standard ``OTEL_EXPORTER_OTLP_*`` variables, as
:mod:`latency_budget.export._otlp` resolves them), fed already-encoded requests: the
spans leave as the bytes they came as, resource and scope kept, with no round trip
through protobuf messages or SDK span objects. The exporters' private parts that send
an encoded request (the gRPC channel, the HTTP client) are the one thing used here that
their public API does not offer; ``tests/serve`` exercises both.

As the Collector's ``exporterhelper`` does, a request is bounded in bytes
(``max_batch_bytes``, below the 4 MiB the Collector and Jaeger take by default), and the
spans waiting are merged into requests up to that bound, ``workers`` requests in flight
at once. A request the next hop refuses as too large (gRPC ``RESOURCE_EXHAUSTED`` saying
the message is larger than its maximum, HTTP 413) is split in halves and each half sent,
never the same request again. A span that alone is over the bound has its attribute
values truncated until it fits (as the SDK's attribute limits truncate, counted in
``spans_truncated``); one that still does not fit, or that the hop refuses alone as too
large, is dropped and counted in ``spans_too_large``, the one rule by which an
acknowledged span is not forwarded.

While the next hop is unreachable or refuses for now, the spans wait and are retried
with backoff; nothing is dropped for want of room. The queue is bounded from the other
side: the intake refuses new requests while the spans and bytes held here are past
their bounds (:meth:`Forwarder.held`), so the sender's retry queue holds the data. A
request the next hop refuses for good (gRPC ``INVALID_ARGUMENT``, HTTP 400) is dropped
and counted at once (``spans_dropped``).

Spans are put in groups, each with an optional ``done`` callback, called once every span
of the group has left (taken by the hop, or dropped by rule and counted) and every group
put before it with a trace in common has too: the write-ahead log settles its traces then. What is still here
when :meth:`Forwarder.close`'s deadline passes is not settled: it stays in the log.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Literal, Protocol

import grpc
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from latency_budget._serve.otlp import Origin, encode_batch, shrink_span
from latency_budget._serve.stats import Counter, Counters, EventLog
from latency_budget.export._otlp import OtlpTarget

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_WORKERS",
    "Forwarder",
    "Outcome",
    "Sender",
    "open_logs_sender",
    "open_sender",
]

DEFAULT_BATCH_BYTES = 3 * 1024 * 1024  # below the 4 MiB the Collector and Jaeger receive by default
DEFAULT_WORKERS = 2
_BACKOFF_S = (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
FORWARD_BATCH_SPANS = 8192  # spans a request at most, whatever their size
# What a request costs beyond its spans' bytes, for each resource and scope group in it: tags and lengths.
_GROUP_OVERHEAD = 32

Done = Callable[[], object]
Pair = tuple[Origin, bytes]

Outcome = Literal["sent", "down", "busy", "too_large", "rejected"]
"""What the next hop did with a request: took it; unreachable; up but refusing for now; too large; refused for good."""

# Reconnect soon after the next hop comes back (grpc's own backoff grows to two minutes).
_CHANNEL_OPTIONS = (("grpc.initial_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 5000))
# HTTP statuses that say "not now" rather than "never" (as the OTLP/HTTP specification lists them).
_HTTP_DOWN = frozenset({408, 502, 503, 504})
_HTTP_BUSY = frozenset({429})
_GRPC_DOWN = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
# grpc-go: "grpc: received message larger than max (N vs. M)"; grpc-core: "Received message larger than max".
_TOO_LARGE = re.compile(r"larger than max|too large|exceeds .*(limit|max)", re.IGNORECASE)
_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
_EXPORT_LOGS = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"


class Sender(Protocol):
    """Sends one encoded request to the next hop, once (the forwarder retries)."""

    def send(self, request: bytes) -> Outcome: ...

    def shutdown(self) -> None: ...


class _GrpcSender(GrpcSpanExporter):
    """The SDK's gRPC span exporter (its channel, credentials, headers, compression, timeout), fed encoded requests.

    One attempt per call, through the exporter's channel with no request serializer (the
    request is bytes already): the forwarder does the retrying, and needs the status code
    to tell a refusal for good (``INVALID_ARGUMENT``) from one for now (the exporter's
    retryable codes, ``OTEL_PYTHON_EXPORTER_OTLP_GRPC_RETRYABLE_ERROR_CODES``), and a
    request too large from a hop that is full.
    """

    def __init__(self, endpoint: str | None = None, insecure: bool | None = None) -> None:
        super().__init__(endpoint=endpoint, insecure=insecure, channel_options=_CHANNEL_OPTIONS)  # type: ignore[arg-type]
        self._raw_export: tuple[object, Callable[..., object]] | None = None

    _export_method = _EXPORT
    _response = staticmethod(ExportTraceServiceResponse.FromString)

    def send(self, request: bytes) -> Outcome:
        channel = self._channel
        if channel is None or self._shutdown:
            return "down"
        if self._raw_export is None or self._raw_export[0] is not channel:  # the exporter may open a new channel
            method = channel.unary_unary(
                self._export_method, request_serializer=None, response_deserializer=self._response
            )
            self._raw_export = (channel, method)
        try:
            self._raw_export[1](request, metadata=self._headers, timeout=self._timeout)
        except grpc.RpcError as error:
            return _grpc_outcome(error.code(), error.details() or "", self._retryable_error_codes)
        return "sent"


class _GrpcLogsSender(GrpcLogExporter):
    """The SDK's gRPC log exporter, fed encoded log export requests, one attempt per call (as :class:`_GrpcSender`)."""

    def __init__(self, endpoint: str | None = None) -> None:
        super().__init__(endpoint=endpoint, channel_options=_CHANNEL_OPTIONS)  # type: ignore[arg-type]
        self._raw_export: tuple[object, Callable[..., object]] | None = None

    send = _GrpcSender.send
    _export_method = _EXPORT_LOGS
    _response = staticmethod(ExportLogsServiceResponse.FromString)


def _grpc_outcome(code: grpc.StatusCode, details: str, retryable: object) -> Outcome:
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and _TOO_LARGE.search(details):
        return "too_large"
    if code in _GRPC_DOWN:
        return "down"
    return "busy" if code in retryable else "rejected"  # type: ignore[operator]


class _HttpSender(HttpSpanExporter):
    """The SDK's OTLP/HTTP span exporter (its session, headers, TLS, compression, timeout), fed encoded requests."""

    def send(self, request: bytes) -> Outcome:
        return _http_send(self, request)


class _HttpLogsSender(HttpLogExporter):
    """The SDK's OTLP/HTTP log exporter, fed encoded log export requests."""

    def send(self, request: bytes) -> Outcome:
        return _http_send(self, request)


def _http_send(exporter: HttpSpanExporter | HttpLogExporter, request: bytes) -> Outcome:
    """One attempt to send ``request`` through ``exporter``'s HTTP client; what the next hop did."""
    if exporter._shutdown:
        return "down"
    result = exporter._client.export(request)
    if result.success:
        return "sent"
    status = result.status_code
    if status is None or status in _HTTP_DOWN or status >= 500:
        return "down"
    if status == 413:
        return "too_large"
    return "busy" if status in _HTTP_BUSY else "rejected"


def open_logs_sender(target: OtlpTarget) -> Sender:
    """The sender of log export requests to ``target``'s logs protocol and endpoint (None: from the environment)."""
    if target.protocols["logs"] == "grpc":
        return _GrpcLogsSender(endpoint=target.endpoint)
    return _HttpLogsSender(endpoint=target.url("logs")) if target.endpoint else _HttpLogsSender()


def open_sender(target: OtlpTarget, *, tls_by_scheme: bool = False) -> Sender:
    """The sender for ``target``'s traces protocol and endpoint (None: the exporters read the environment).

    ``tls_by_scheme``: over gRPC, ``http://`` is plaintext and ``https://`` TLS whatever
    ``OTEL_EXPORTER_OTLP_INSECURE`` says (it is the next hop's): the handover's layer 1.
    """
    if target.protocols["traces"] == "grpc":
        endpoint = target.endpoint
        insecure = endpoint.startswith("http://") if tls_by_scheme and endpoint is not None else None
        return _GrpcSender(endpoint=endpoint, insecure=insecure)
    return _HttpSender(endpoint=target.url("traces")) if target.endpoint else _HttpSender()


class _Group:
    """The spans of one :meth:`Forwarder.put`: how many of its parcels are still out, what to call after, its traces."""

    __slots__ = ("done", "pending", "traces")

    def __init__(self, done: Done | None, traces: frozenset[int]) -> None:
        self.done = done
        self.pending = 0
        self.traces = traces


class _Parcel:
    """Spans of one group that travel together, and their size as a request (an upper bound)."""

    __slots__ = ("group", "pairs", "size")

    def __init__(self, pairs: list[Pair], size: int, group: _Group) -> None:
        self.pairs = pairs
        self.size = size
        self.group = group


def _size_of(pairs: Sequence[Pair]) -> int:
    """The encoded size of a request holding ``pairs``, at most (each resource and scope counted once a span run)."""
    size = 0
    last: Origin | None = None
    for origin, encoded in pairs:
        if origin is not last:
            size += _origin_size(origin)
            last = origin
        size += len(encoded)
    return size


def _origin_size(origin: Origin) -> int:
    return (
        len(origin.resource or b"")
        + len(origin.scope or b"")
        + len(origin.resource_schema)
        + len(origin.scope_schema)
        + _GROUP_OVERHEAD
    )


class Forwarder:
    """The spans waiting for the next hop, and the threads that send them in requests bounded in bytes."""

    def __init__(
        self,
        sender: Sender,
        *,
        counters: Counters,
        log: EventLog,
        destination: str,
        max_batch_bytes: int = DEFAULT_BATCH_BYTES,
        workers: int = DEFAULT_WORKERS,
        clock: Callable[[], float] = time.monotonic,
        sent: Counter = "spans_forwarded",
        name: str = "forward",
    ) -> None:
        """``sent``: the counter of the spans the hop took; ``name``: its threads' (``latency-budget-<name>-N``)."""
        self._sender = sender
        self._sent: Counter = sent
        self._limit = max_batch_bytes
        self._cap = max_batch_bytes  # lowered when the hop refuses a request as too large: its own limit is lower
        self._counters = counters
        self._log = log
        self._destination = destination
        self._clock = clock
        self._queue: deque[_Parcel] = deque()
        self._groups: deque[_Group] = deque()
        self._spans = 0  # held here: queued and in flight
        self._bytes = 0
        self._in_flight = 0
        self._cond = threading.Condition()
        self._closing = False
        self._stop = False
        self._state: Outcome = "sent"  # the last answer: "down" and "busy" are logged once each, until "sent"
        self._attempt = 0
        self._retry_at = 0.0
        self._threads = [
            threading.Thread(target=self._run, name=f"latency-budget-{name}-{index}", daemon=True)
            for index in range(max(1, workers))
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def queued(self) -> int:
        """Spans waiting to be sent, or on their way."""
        with self._cond:
            return self._spans

    def held(self) -> tuple[int, int]:
        """Spans and bytes held here (waiting, or on their way), for the intake's bounds."""
        with self._cond:
            return self._spans, self._bytes

    def put(self, pairs: Sequence[Pair], done: Done | None = None, traces: frozenset[int] = frozenset()) -> None:
        """Queue these spans (never dropped for want of room), of these ``traces``; ``done`` once they have left.

        ``done`` waits for every group put before this one that shares a trace with it, so
        that settling a trace's later spans never settles earlier ones still on their way;
        a group that shares none is settled as soon as it has left, whatever is before it.
        """
        group = _Group(done, traces)
        parcels = self._parcels(pairs, group)
        with self._cond:
            if self._stop:  # after close: a bug of the caller's; counted, never silent
                left = sum(len(parcel.pairs) for parcel in parcels)
                self._counters.add("spans_dropped", left)
                self._log.event("spans_dropped", reason="forwarder closed", spans=left, to=self._destination)
                return
            group.pending = len(parcels)
            self._groups.append(group)
            for parcel in parcels:
                self._queue.append(parcel)
                self._spans += len(parcel.pairs)
                self._bytes += parcel.size
            self._cond.notify(len(parcels) or 1)
            dones = self._completed() if not parcels else []
        self._finish(dones)

    def close(self, deadline: float, *, kept: bool = False) -> int:
        """Send what is here until ``deadline`` (monotonic s); how many spans were left (``kept``: in the log)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            while (self._queue or self._in_flight) and not self._stop:
                left = deadline - self._clock()
                if left <= 0:
                    break
                self._cond.wait(left)
            self._stop = True
            self._queue.clear()
            self._groups.clear()  # not settled: what they hold stays in the log
            self._cond.notify_all()
        try:
            self._sender.shutdown()  # also cuts short a send in flight
        except Exception as exc:
            self._log.event("forward_shutdown_failed", error=repr(exc)[:200])
        for thread in self._threads:
            thread.join(max(0.0, min(1.0, deadline + 1.0 - self._clock())))
        with self._cond:
            left = self._spans  # a request the hop took in the last instant is not among them
        if left:
            if kept:
                self._counters.add("spans_kept_in_wal", left)
                self._log.event("spans_kept_in_wal", always=True, reason="shutdown deadline", spans=left)
            else:
                self._counters.add("spans_dropped", left)
                self._log.event(
                    "spans_dropped", always=True, reason="shutdown deadline", spans=left, to=self._destination
                )
        return left

    # -- internals -----------------------------------------------------------------------

    def _parcels(self, pairs: Sequence[Pair], group: _Group) -> list[_Parcel]:
        """``pairs`` cut into parcels under the byte bound; a span alone over it truncated, or dropped and counted."""
        limit = self._limit
        parcels: list[_Parcel] = []
        current: list[Pair] = []
        size = 0
        last: Origin | None = None
        for origin, as_received in pairs:
            encoded = as_received
            extra = len(encoded) + (_origin_size(origin) if origin is not last else 0)
            if current and (size + extra > limit or len(current) >= FORWARD_BATCH_SPANS):
                parcels.append(_Parcel(current, size, group))
                current, size, last = [], 0, None
                extra = len(encoded) + _origin_size(origin)
            if extra > limit:
                fitted = self._fit(origin, encoded)
                if fitted is None:
                    continue
                encoded = fitted
                extra = len(encoded) + _origin_size(origin)
            current.append((origin, encoded))
            size += extra
            last = origin
        if current:
            parcels.append(_Parcel(current, size, group))
        return parcels

    def _fit(self, origin: Origin, encoded: bytes) -> bytes | None:
        """A span alone over the bound: its attribute values truncated to fit, or None (dropped, counted)."""
        budget = self._limit - _origin_size(origin)
        try:
            fitted = shrink_span(encoded, budget)
        except Exception as exc:  # a bug of ours: the span is counted as too large rather than lost silently
            self._log.event("internal_error", where="shrink_span", error=repr(exc)[:300])
            fitted = None
        if fitted is None:
            self._counters.add("spans_too_large")
            self._log.event("span_too_large", bytes=len(encoded), limit=self._limit, to=self._destination)
            return None
        self._counters.add("spans_truncated")
        self._log.event("span_truncated", bytes=len(encoded), to_bytes=len(fitted), limit=self._limit)
        return fitted

    def _take(self) -> list[_Parcel] | None:
        """Parcels from the head of the queue up to the byte bound (the lock held); None: stop."""
        cond = self._cond
        while True:
            if self._stop:
                return None
            if self._queue:
                wait = self._retry_at - self._clock()
                if wait <= 0:
                    break
                cond.wait(wait)
                continue
            if self._closing and not self._in_flight:
                cond.notify_all()  # close() waits for this
                return None
            cond.wait()
        queue, limit = self._queue, self._cap
        while queue[0].size > limit and len(queue[0].pairs) > 1:  # the hop takes less than it was cut for
            head = queue.popleft()
            halves = _halves(head)
            queue.extendleft(reversed(halves))
            head.group.pending += 1
            self._bytes += halves[0].size + halves[1].size - head.size
        taken = [queue.popleft()]
        size, spans = taken[0].size, len(taken[0].pairs)
        while queue and size + queue[0].size <= limit and spans + len(queue[0].pairs) <= FORWARD_BATCH_SPANS:
            parcel = queue.popleft()
            taken.append(parcel)
            size += parcel.size
            spans += len(parcel.pairs)
        self._in_flight += 1
        return taken

    def _run(self) -> None:
        while True:
            with self._cond:
                taken = self._take()
            if taken is None:
                return
            size = 0
            try:
                request = encode_batch(pair for parcel in taken for pair in parcel.pairs)
                size = len(request)
                outcome = self._sender.send(request)
            except Exception as exc:  # an exporter bug must not stop forwarding
                logging.getLogger("latency_budget").debug("forward failed: %r", exc)
                outcome = "down"
            self._settle(taken, outcome, size)

    def _settle(self, taken: list[_Parcel], outcome: Outcome, size: int) -> None:
        spans = sum(len(parcel.pairs) for parcel in taken)
        dones: list[Done] = []
        back: list[_Parcel] = []
        gone: list[_Parcel] = []
        too_large = 0
        if outcome in ("sent", "rejected"):
            gone = taken
        elif outcome == "too_large":
            if spans == 1:  # a span the hop will not take even alone: dropped by rule, counted
                gone, too_large = taken, 1
            else:
                back = taken
        else:
            back = taken
        with self._cond:
            self._in_flight -= 1
            stopped = self._stop  # closed meanwhile: nothing goes back in the queue, no group settles
            for parcel in gone:
                self._spans -= len(parcel.pairs)
                self._bytes -= parcel.size
                parcel.group.pending -= 1
            if outcome == "too_large" and back:  # the next requests are cut to half of this one
                self._cap = max(1, min(self._cap, size // 2))
            if not stopped:
                self._queue.extendleft(reversed(back))
            if outcome in ("down", "busy"):
                self._retry_at = self._clock() + _BACKOFF_S[min(self._attempt, len(_BACKOFF_S) - 1)]
                self._attempt += 1
            else:
                self._attempt = 0
                self._retry_at = 0.0
            dones = self._completed() if not stopped else []
            previous, self._state = self._state, outcome if outcome in ("down", "busy") else "sent"
            self._cond.notify_all()
        self._finish(dones)
        if outcome == "sent":
            self._counters.add(self._sent, spans)
        elif outcome == "rejected":  # refused for good: sending it again would block the spans behind it forever
            self._counters.add("spans_dropped", spans)
            self._log.event("spans_dropped", reason="refused by the next hop", spans=spans, to=self._destination)
        elif outcome == "too_large":
            if too_large:
                self._counters.add("spans_too_large", too_large)
                self._log.event("span_too_large", reason="refused alone by the next hop", to=self._destination)
            else:
                self._counters.add("forward_batches_split")
                self._log.event("batch_split", reason="too large for the next hop", spans=spans, to=self._destination)
        if outcome in ("down", "busy") and previous != outcome:
            name = "next_hop_down" if outcome == "down" else "next_hop_busy"
            self._log.event(name, always=True, to=self._destination, queued_spans=self.queued())
        elif outcome not in ("down", "busy") and previous != "sent":
            self._log.event("next_hop_up", always=True, to=self._destination)

    def _completed(self) -> list[Done]:
        """The ``done`` of each finished group no unfinished earlier group shares a trace with (the lock held)."""
        groups = self._groups
        dones: list[Done] = []
        while groups and groups[0].pending <= 0:
            done = groups.popleft().done
            if done is not None:
                dones.append(done)
        if not any(group.pending <= 0 for group in groups):
            return dones
        waiting: deque[_Group] = deque()
        blocked: set[int] = set()  # the traces of the groups kept: a later group of one of them waits
        for group in groups:
            if group.pending <= 0 and blocked.isdisjoint(group.traces):
                if group.done is not None:
                    dones.append(group.done)
                continue
            waiting.append(group)
            blocked.update(group.traces)
        self._groups = waiting
        return dones

    def _finish(self, dones: list[Done]) -> None:
        for done in dones:
            try:
                done()
            except Exception as exc:  # a bug of ours: logged, forwarding goes on
                self._log.event("internal_error", where="forward_done", error=repr(exc)[:300])


def _halves(parcel: _Parcel) -> list[_Parcel]:
    """A parcel's spans as two parcels of the same group (the caller counts the group's one more parcel)."""
    middle = len(parcel.pairs) // 2
    first, second = parcel.pairs[:middle], parcel.pairs[middle:]
    return [_Parcel(first, _size_of(first), parcel.group), _Parcel(second, _size_of(second), parcel.group)]
