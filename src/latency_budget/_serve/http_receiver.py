"""The OTLP/HTTP receiver (``POST /v1/traces``, and ``/v1/logs`` for the server's logs path) and the health endpoint.

On the standard library.

``http.server.ThreadingHTTPServer`` is enough here: one short request per connection
turn, no streaming, no TLS (the tier runs behind the Collector on a private network),
and it adds no dependency to an install that already has grpcio for the gRPC side
(README, "Dependencies"). It is bounded where the standard library is not, so that slow
clients cannot starve the others (the Collector's ``confighttp`` server is the model):

- a request's line and headers must arrive within ``header_timeout_s`` of its start (an
  idle kept-alive connection counts as a request not yet started), and its body within
  ``body_timeout_s`` (past that: 408 and close): whole deadlines, not per read, so a byte
  every few seconds does not keep a connection;
- at most ``max_connections`` connections at once; at the limit a new connection closes
  the one that has waited longest for (the rest of) its request, so idle and trickling
  clients make room for working ones; only when every connection is being answered is
  a new one told 503 (``Retry-After``) and closed;
- a body is read only up to ``max_request_bytes`` (past that: 413), gzip included, every
  member of a multi-member gzip body decoded;
- a client that resets or closes its connection mid-request is counted
  (``http_clients_gone``) and logged at most once a second, never with a traceback.

The health endpoint is a server of its own with the same bounds (16 connections), so it
never waits behind the OTLP clients.

Bodies: ``application/x-protobuf`` or ``application/json`` (OTLP/JSON), optionally
``Content-Encoding: gzip``; the answer is in the request's encoding. Full: 429 with
``Retry-After``; draining: 503 with ``Retry-After``; bad input: 400 (a ``Content-Length``
that is not a decimal number included), 408, 411, 413 or 415.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from latency_budget._serve.exposition import CONTENT_TYPE
from latency_budget._serve.intake import Answer, Intake
from latency_budget._serve.logs import parse_logs_json
from latency_budget._serve.otlp import BadRequest, parse_json
from latency_budget._serve.stats import Counters, EventLog

__all__ = ["HealthServer", "HttpReceiver"]

_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"

_STATUS = {"ok": 200, "full": 429, "draining": 503, "bad": 400}
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
MAX_CONNECTIONS = 128
HEALTH_CONNECTIONS = 16
_WRITE_TIMEOUT_S = 10.0  # an answer not taken by then: the client is gone
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class _Deadline(io.RawIOBase):
    """A connection's bytes, each read bounded by what is left of the current deadline (monotonic seconds)."""

    def __init__(self, connection: socket.socket) -> None:
        self._connection = connection
        self.deadline = math.inf

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("read deadline passed")
        self._connection.settimeout(left)
        try:
            return self._connection.recv_into(buffer)
        finally:
            self._connection.settimeout(_WRITE_TIMEOUT_S)


class _BoundedServer(ThreadingHTTPServer):
    """A threading HTTP server of at most ``max_connections`` connections; the longest waiting makes room."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        max_connections: int,
        counters: Counters | None,
        log: EventLog | None,
    ) -> None:
        self._max = max_connections
        self._guard = threading.Lock()
        self._open = 0
        self._waiting: dict[socket.socket, float] = {}  # connections waiting for (the rest of) a request: since when
        self.counters = counters
        self.log = log
        super().__init__(address, handler)

    def connections(self) -> int:
        """Connections open now."""
        with self._guard:
            return self._open

    def waiting(self, connection: socket.socket) -> None:
        """``connection`` waits for its next request (or the rest of it): it may be closed to make room."""
        with self._guard:
            self._waiting.setdefault(connection, time.monotonic())  # a new connection: since it was accepted

    def working(self, connection: socket.socket) -> None:
        """``connection``'s request has arrived whole and is being answered: it is not closed to make room."""
        with self._guard:
            self._waiting.pop(connection, None)

    def client_gone(self, error: BaseException) -> None:
        """A client reset or closed its connection mid-request, or stopped reading: counted, one line a second."""
        if self.counters is not None:
            self.counters.add("http_clients_gone")
        if self.log is not None:
            self.log.event("http_client_gone", error=type(error).__name__)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._guard:
            if self._open >= self._max:
                victim = min(self._waiting, key=self._waiting.__getitem__) if self._waiting else None
                if victim is None or self._open >= 2 * self._max:  # every one is being answered
                    victim = None
                else:
                    del self._waiting[victim]
            else:
                victim = None
            admitted = self._open < self._max or victim is not None
            if admitted:
                self._open += 1
                self._waiting[request] = time.monotonic()
        if not admitted:
            with contextlib.suppress(OSError):
                request.sendall(_BUSY)
            self.shutdown_request(request)
            return
        if victim is not None:  # its thread sees the end of its connection and leaves
            with contextlib.suppress(OSError):
                victim.shutdown(socket.SHUT_RDWR)
            if self.counters is not None:
                self.counters.add("http_connections_evicted")
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._guard:
                self._open -= 1
                self._waiting.pop(request, None)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Whatever escaped a handler: one counted, rate-limited line, never a traceback on stderr."""
        error = sys.exc_info()[1]
        if isinstance(error, OSError):
            self.client_gone(error)
        elif self.log is not None:
            self.log.event("internal_error", where="http", error=repr(error)[:300])


class _BoundedServer6(_BoundedServer):
    address_family = socket.AF_INET6


def _listen(
    endpoint: str,
    handler: type[BaseHTTPRequestHandler],
    max_connections: int,
    counters: Counters | None,
    log: EventLog | None,
) -> tuple[_BoundedServer, str]:
    host, _, port = endpoint.rpartition(":")
    host = host.strip("[]")
    server_class = _BoundedServer6 if ":" in host else _BoundedServer  # an IPv6 literal, or a name or IPv4
    server = server_class((host, int(port)), handler, max_connections, counters, log)
    return server, f"{host}:{server.server_address[1]}"


class _Gone(Exception):
    """The client went away mid-request: nothing to answer."""


class _Quiet(BaseHTTPRequestHandler):
    """No access log on stderr (the server logs events, not requests), and whole-request read deadlines."""

    timeout = _WRITE_TIMEOUT_S
    protocol_version = "HTTP/1.1"
    server_version = "latency-budget-serve"
    sys_version = ""
    header_timeout_s = HEADER_TIMEOUT_S
    server: _BoundedServer

    def setup(self) -> None:
        super().setup()
        self.deadline = _Deadline(self.connection)
        self.rfile = io.BufferedReader(self.deadline, 65536)

    def handle_one_request(self) -> None:
        self.deadline.deadline = time.monotonic() + self.header_timeout_s
        self.server.waiting(self.connection)
        try:
            super().handle_one_request()
        except OSError as exc:  # reset, closed or stalled mid-request (a timed-out request line ends quietly)
            self.close_connection = True
            self.server.client_gone(exc)

    def log_message(self, format: str, *args: Any) -> None:
        return

    def reply(self, status: int, body: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)


class HttpReceiver:
    """``POST /v1/traces`` (and ``/v1/logs``) on ``endpoint`` (``host:port``; port 0 picks one)."""

    def __init__(
        self,
        intake: Intake,
        endpoint: str,
        *,
        max_request_bytes: int,
        max_connections: int = MAX_CONNECTIONS,
        header_timeout_s: float = HEADER_TIMEOUT_S,
        body_timeout_s: float = BODY_TIMEOUT_S,
        counters: Counters | None = None,
        log: EventLog | None = None,
        logs: Callable[..., Answer] | None = None,
    ) -> None:
        """``logs``: takes ``POST /v1/logs`` (an encoded log export request, ``protocol=``); None: 404."""
        limit = max_request_bytes

        class Handler(_Quiet):
            def do_POST(self) -> None:
                path = self.path.split("?", 1)[0]
                if path != "/v1/traces" and (path != "/v1/logs" or logs is None):
                    self.close_connection = True
                    self.reply(404, b"not found: POST /v1/traces\n", "text/plain")
                    return
                try:
                    answer, kind = self.export(path == "/v1/logs")
                except _Gone as gone:
                    self.close_connection = True
                    self.server.client_gone(gone.__cause__ or gone)
                    return
                if kind == _JSON:
                    body = _json_response(answer)
                else:
                    body = _protobuf_response(answer)
                    kind = _PROTOBUF
                headers = {"Retry-After": str(max(1, round(answer.retry_after_s)))} if answer.retry_after_s else {}
                status = _STATUS[answer.status] if answer.status != "bad" else self.bad_status
                if answer.status != "ok":
                    self.close_connection = True
                self.reply(status, body, kind, headers)

            def export(self, is_logs: bool) -> tuple[Answer, str]:
                self.bad_status = 400
                kind = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
                if kind not in (_PROTOBUF, _JSON):
                    self.bad_status = 415
                    return intake.bad(f"unsupported content type {kind[:60]!r}", protocol="http"), _PROTOBUF
                lengths = {text.strip() for text in self.headers.get_all("Content-Length") or ()}
                if not lengths:
                    self.bad_status = 411
                    return intake.bad("a Content-Length is required", protocol="http"), kind
                length_text = lengths.pop()
                if lengths or not (length_text.isascii() and length_text.isdigit()):
                    return intake.bad("the Content-Length is not one decimal number", protocol="http"), kind
                if len(length_text) > 19 or int(length_text) > limit:
                    self.bad_status = 413
                    return intake.bad(f"body of {length_text[:30]} bytes is over {limit}", protocol="http"), kind
                length = int(length_text)
                self.deadline.deadline = time.monotonic() + body_timeout_s
                try:
                    body = self.rfile.read(length)
                except TimeoutError:
                    self.bad_status = 408
                    return intake.bad(f"the body did not arrive within {body_timeout_s:g} s", protocol="http"), kind
                except OSError as exc:
                    raise _Gone from exc
                if len(body) < length:
                    raise _Gone from ConnectionError("the body ended early")
                self.server.working(self.connection)
                encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
                if encoding == "gzip":
                    try:
                        body = _gunzip(body, limit)
                    except _TooLarge:
                        self.bad_status = 413
                        return intake.bad(f"body is over {limit} bytes uncompressed", protocol="http"), kind
                    except zlib.error:
                        return intake.bad("broken gzip body", protocol="http"), kind
                elif encoding != "identity":
                    self.bad_status = 415
                    return intake.bad(f"unsupported content encoding {encoding[:40]!r}", protocol="http"), kind
                if kind == _JSON:  # encoded as protobuf, as the intake reads it (and the log stores it)
                    try:
                        body = parse_logs_json(body) if is_logs else parse_json(body).SerializeToString()
                    except BadRequest as exc:
                        return intake.bad(str(exc), protocol="http"), kind
                if is_logs and logs is not None:
                    return logs(body, protocol="http"), kind
                return intake.accept(body, protocol="http"), kind

        Handler.header_timeout_s = header_timeout_s
        self._server, self.address = _listen(endpoint, Handler, max_connections, counters, log)
        self._thread = threading.Thread(target=self._server.serve_forever, name="latency-budget-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def connections(self) -> int:
        """Connections open now."""
        return self._server.connections()

    def stop(self) -> None:
        """Stop accepting connections (requests in progress finish on their threads)."""
        self._server.shutdown()
        self._server.server_close()


class HealthServer:
    """``GET /`` and ``GET /health``: 200 and the counters while serving, 503 while draining.

    ``GET /metrics``: the counters and gauges in Prometheus' text format (``metrics``), 200
    while draining too, so the last of them is scraped.
    """

    def __init__(
        self,
        endpoint: str,
        status: Callable[[], tuple[bool, dict[str, object]]],
        *,
        metrics: Callable[[], str] | None = None,
        header_timeout_s: float = HEADER_TIMEOUT_S,
        counters: Counters | None = None,
        log: EventLog | None = None,
    ) -> None:
        class Handler(_Quiet):
            def do_GET(self) -> None:
                self.server.working(self.connection)
                path = self.path.split("?", 1)[0]
                if path == "/metrics" and metrics is not None:
                    self.reply(200, metrics().encode(), CONTENT_TYPE)
                    return
                if path not in ("/", "/health"):
                    self.reply(404, b'{"error":"not found"}', _JSON)
                    return
                serving, document = status()
                body = json.dumps(document, separators=(",", ":")).encode()
                self.reply(200 if serving else 503, body, _JSON)

            do_HEAD = do_GET

        Handler.header_timeout_s = header_timeout_s
        self._server, self.address = _listen(endpoint, Handler, HEALTH_CONNECTIONS, counters, log)
        self._thread = threading.Thread(target=self._server.serve_forever, name="latency-budget-health", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _TooLarge(Exception):
    pass


def _gunzip(body: bytes, limit: int) -> bytes:
    """``body`` gunzipped, every member of it, refusing (``_TooLarge``) to produce more than ``limit`` bytes."""
    out = bytearray()
    rest = body
    while True:
        inflater = zlib.decompressobj(wbits=31)
        out += inflater.decompress(rest, limit + 1 - len(out))  # at least 1: 0 would mean no limit
        if len(out) > limit or inflater.unconsumed_tail:
            raise _TooLarge
        if not inflater.eof:
            raise zlib.error("truncated gzip body")
        rest = inflater.unused_data
        if not rest:
            return bytes(out)


def _protobuf_response(answer: Answer) -> bytes:
    response = ExportTraceServiceResponse()
    if answer.status == "ok" and answer.rejected_spans:
        response.partial_success.rejected_spans = answer.rejected_spans
        response.partial_success.error_message = answer.message
    if answer.status != "ok":
        # OTLP/HTTP answers an error with a google.rpc.Status; its message is enough here.
        encoded: bytes = status_pb2.Status(message=answer.message).SerializeToString()
        return encoded
    return response.SerializeToString()


def _json_response(answer: Answer) -> bytes:
    if answer.status != "ok":
        return json.dumps({"message": answer.message}, ensure_ascii=False).encode()
    response = ExportTraceServiceResponse()
    if answer.rejected_spans:
        response.partial_success.rejected_spans = answer.rejected_spans
        response.partial_success.error_message = answer.message
    return json_format.MessageToJson(response, indent=None).encode()
