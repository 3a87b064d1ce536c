"""The OTLP/HTTP trace receiver (``POST /v1/traces``) and the health endpoint, on the standard library.

``http.server.ThreadingHTTPServer`` is enough here: one short request per connection
turn, no streaming, no TLS (the tier runs behind the Collector on a private network),
and it adds no dependency to an install that already has grpcio for the gRPC side
(README, "Dependencies"). It is bounded where the standard library is not: at most
``max_connections`` connections are served at once (past that: 503 and close), a slow
client times out, and a body is read only up to ``max_request_bytes`` (past that: 413),
gzip included.

Bodies: ``application/x-protobuf`` or ``application/json`` (OTLP/JSON), optionally
``Content-Encoding: gzip``; the answer is in the request's encoding. Full: 429 with
``Retry-After``; draining: 503 with ``Retry-After``; bad input: 400, 411, 413 or 415.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import zlib
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from latency_budget._serve.intake import Answer, Intake
from latency_budget._serve.otlp import BadRequest, parse_json

__all__ = ["HealthServer", "HttpReceiver"]

_PROTOBUF = "application/x-protobuf"
_JSON = "application/json"
_STATUS = {"ok": 200, "full": 429, "draining": 503, "bad": 400}
_TIMEOUT_S = 30.0
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class _BoundedServer(ThreadingHTTPServer):
    """A threading HTTP server that serves at most ``max_connections`` connections at once."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], max_connections: int) -> None:
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(_BUSY)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _BoundedServer6(_BoundedServer):
    address_family = socket.AF_INET6


def _listen(endpoint: str, handler: type[BaseHTTPRequestHandler], max_connections: int) -> tuple[_BoundedServer, str]:
    host, _, port = endpoint.rpartition(":")
    host = host.strip("[]")
    server_class = _BoundedServer6 if ":" in host else _BoundedServer  # an IPv6 literal, or a name or IPv4
    server = server_class((host, int(port)), handler, max_connections)
    return server, f"{host}:{server.server_address[1]}"


class _Quiet(BaseHTTPRequestHandler):
    """No access log on stderr (the server logs events, not requests), and a read timeout."""

    timeout = _TIMEOUT_S
    protocol_version = "HTTP/1.1"
    server_version = "latency-budget-serve"
    sys_version = ""

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
    """``POST /v1/traces`` on ``endpoint`` (``host:port``; port 0 picks one)."""

    def __init__(self, intake: Intake, endpoint: str, *, max_request_bytes: int, max_connections: int = 64) -> None:
        limit = max_request_bytes

        class Handler(_Quiet):
            def do_POST(self) -> None:
                if self.path.split("?", 1)[0] != "/v1/traces":
                    self.close_connection = True
                    self.reply(404, b"not found: POST /v1/traces\n", "text/plain")
                    return
                answer, kind = self.export()
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

            def export(self) -> tuple[Answer, str]:
                self.bad_status = 400
                kind = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
                if kind not in (_PROTOBUF, _JSON):
                    self.bad_status = 415
                    return intake.bad(f"unsupported content type {kind[:60]!r}", protocol="http"), _PROTOBUF
                length_text = self.headers.get("Content-Length")
                if length_text is None or not length_text.strip().isdigit():
                    self.bad_status = 411
                    return intake.bad("a Content-Length is required", protocol="http"), kind
                length = int(length_text)
                if length > limit:
                    self.bad_status = 413
                    return intake.bad(f"body of {length} bytes is over {limit}", protocol="http"), kind
                try:
                    body = self.rfile.read(length)
                except OSError:
                    return intake.bad("the body could not be read", protocol="http"), kind
                if len(body) < length:
                    return intake.bad("the body ended early", protocol="http"), kind
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
                        body = parse_json(body).SerializeToString()
                    except BadRequest as exc:
                        return intake.bad(str(exc), protocol="http"), kind
                return intake.accept(body, protocol="http"), kind

        self._server, self.address = _listen(endpoint, Handler, max_connections)
        self._thread = threading.Thread(target=self._server.serve_forever, name="latency-budget-http", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting connections (requests in progress finish on their threads)."""
        self._server.shutdown()
        self._server.server_close()


class HealthServer:
    """``GET /`` and ``GET /health``: 200 and the counters while serving, 503 while draining."""

    def __init__(self, endpoint: str, status: Callable[[], tuple[bool, dict[str, object]]]) -> None:
        class Handler(_Quiet):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] not in ("/", "/health"):
                    self.reply(404, b'{"error":"not found"}', _JSON)
                    return
                serving, document = status()
                body = json.dumps(document, separators=(",", ":")).encode()
                self.reply(200 if serving else 503, body, _JSON)

            do_HEAD = do_GET

        self._server, self.address = _listen(endpoint, Handler, 16)
        self._thread = threading.Thread(target=self._server.serve_forever, name="latency-budget-health", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _TooLarge(Exception):
    pass


def _gunzip(body: bytes, limit: int) -> bytes:
    """``body`` gunzipped, refusing (``_TooLarge``) to produce more than ``limit`` bytes."""
    inflater = zlib.decompressobj(wbits=31)
    out = inflater.decompress(body, limit + 1)
    if len(out) > limit or inflater.unconsumed_tail:
        raise _TooLarge
    if not inflater.eof:
        raise zlib.error("truncated gzip body")
    return out


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
