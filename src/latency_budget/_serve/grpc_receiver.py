"""The OTLP/gRPC trace receiver: opentelemetry-proto's ``TraceService`` on a grpcio server.

Full or draining, it answers ``RESOURCE_EXHAUSTED`` or ``UNAVAILABLE`` with a
``google.rpc.RetryInfo`` detail (as the ``grpc-status-details-bin`` trailer the
Collector's exporter reads, and the ``google.rpc.retryinfo-bin`` trailer the Python
SDK's reads), so the sender's queue retries; a message over ``max_request_bytes`` is
refused by grpcio itself (``RESOURCE_EXHAUSTED``, counted by no one but the sender).

The method is registered without a request deserializer: it gets the message's bytes,
which :mod:`.intake` decodes and splits into the spans' own bytes (a body that is not
protobuf is ``INVALID_ARGUMENT``, counted in ``bad_requests``), so the write-ahead log
stores those bytes as they came and the spans are held and forwarded as they came,
with no second encoding.
"""

from __future__ import annotations

from concurrent import futures
from typing import Any

import grpc
from google.protobuf.any_pb2 import Any as AnyMessage
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from latency_budget._serve.intake import Answer, Intake

__all__ = ["GrpcReceiver"]

_CODES = {
    "full": (grpc.StatusCode.RESOURCE_EXHAUSTED, code_pb2.RESOURCE_EXHAUSTED),
    "draining": (grpc.StatusCode.UNAVAILABLE, code_pb2.UNAVAILABLE),
    "bad": (grpc.StatusCode.INVALID_ARGUMENT, code_pb2.INVALID_ARGUMENT),
}


_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"


class _TraceService:
    def __init__(self, intake: Intake) -> None:
        self._intake = intake

    def export(self, body: bytes, context: Any) -> trace_service_pb2.ExportTraceServiceResponse:
        answer = self._intake.accept(body, protocol="grpc")
        if answer.status == "ok":
            response = trace_service_pb2.ExportTraceServiceResponse()
            if answer.rejected_spans:
                response.partial_success.rejected_spans = answer.rejected_spans
                response.partial_success.error_message = answer.message
            return response
        _abort(context, answer)
        raise AssertionError("unreachable: context.abort raises")


def _abort(context: Any, answer: Answer) -> None:
    code, rpc_code = _CODES[answer.status]
    status = status_pb2.Status(code=rpc_code, message=answer.message)
    if answer.retry_after_s:
        retry = error_details_pb2.RetryInfo()
        retry.retry_delay.FromNanoseconds(int(answer.retry_after_s * 1e9))
        detail = AnyMessage()
        detail.Pack(retry)
        status.details.append(detail)
        context.set_trailing_metadata(
            (
                ("grpc-status-details-bin", status.SerializeToString()),
                ("google.rpc.retryinfo-bin", retry.SerializeToString()),
            )
        )
    context.abort(code, answer.message)


class GrpcReceiver:
    """A grpcio server serving ``TraceService`` on ``endpoint`` (``host:port``; port 0 picks one)."""

    def __init__(self, intake: Intake, endpoint: str, *, max_request_bytes: int, workers: int = 4) -> None:
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="latency-budget-grpc"),
            options=(
                ("grpc.max_receive_message_length", max_request_bytes),
                ("grpc.max_concurrent_streams", 64),
            ),
            maximum_concurrent_rpcs=workers * 16,  # past it grpcio answers RESOURCE_EXHAUSTED itself
        )
        export: grpc.RpcMethodHandler[bytes, trace_service_pb2.ExportTraceServiceResponse] = (
            grpc.unary_unary_rpc_method_handler(
                _TraceService(intake).export,
                request_deserializer=None,  # the bytes as they came: see the module's docstring
                response_serializer=trace_service_pb2.ExportTraceServiceResponse.SerializeToString,
            )
        )
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE, {"Export": export}),))
        host = endpoint.rsplit(":", 1)[0]
        self.port = self._server.add_insecure_port(endpoint)
        if not self.port:
            raise OSError(f"cannot listen on {endpoint}")
        self.address = f"{host.strip('[]')}:{self.port}"

    def start(self) -> None:
        self._server.start()

    def stop(self, grace_s: float) -> None:
        """Refuse new calls now; let calls in progress finish within ``grace_s``."""
        self._server.stop(grace_s).wait(grace_s + 1.0)
