"""The OTLP/gRPC receiver: opentelemetry-proto's ``TraceService`` (and ``LogsService``) on a grpcio asyncio server.

Full or draining, it answers ``RESOURCE_EXHAUSTED`` or ``UNAVAILABLE`` with a
``google.rpc.RetryInfo`` detail (as the ``grpc-status-details-bin`` trailer the
Collector's exporter reads, and the ``google.rpc.retryinfo-bin`` trailer the Python
SDK's reads), so the sender's queue retries; a message over ``max_request_bytes`` is
refused by grpcio itself (``RESOURCE_EXHAUSTED``, counted by no one but the sender).

The server is grpcio's asyncio one, on an event loop thread of its own: a call waits for
its message as a coroutine, not on a thread, so calls whose message is slow to come (or
never comes) cost no handler; only a whole message is handed to a small pool of
``workers`` threads, which run the intake. At most ``max_calls`` calls are open at once
(past that grpcio answers ``RESOURCE_EXHAUSTED`` itself, which senders retry).

The method is registered without a request deserializer: it gets the message's bytes,
which :mod:`.intake` decodes and splits into the spans' own bytes (a body that is not
protobuf is ``INVALID_ARGUMENT``, counted in ``bad_requests``), so the write-ahead log
stores those bytes as they came and the spans are held and forwarded as they came,
with no second encoding.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from concurrent import futures
from functools import partial
from typing import Any

import grpc
from google.protobuf.any_pb2 import Any as AnyMessage
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from latency_budget._serve.intake import Answer, Intake

__all__ = ["GrpcReceiver"]

_CODES = {
    "full": (grpc.StatusCode.RESOURCE_EXHAUSTED, code_pb2.RESOURCE_EXHAUSTED),
    "draining": (grpc.StatusCode.UNAVAILABLE, code_pb2.UNAVAILABLE),
    "bad": (grpc.StatusCode.INVALID_ARGUMENT, code_pb2.INVALID_ARGUMENT),
}


_SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
_LOGS_SERVICE = "opentelemetry.proto.collector.logs.v1.LogsService"


class _TraceService:
    def __init__(self, intake: Intake, pool: futures.ThreadPoolExecutor) -> None:
        self._intake = intake
        self._pool = pool

    async def export(self, body: bytes, context: Any) -> trace_service_pb2.ExportTraceServiceResponse:
        loop = asyncio.get_running_loop()
        answer = await loop.run_in_executor(self._pool, partial(self._intake.accept, body, protocol="grpc"))
        if answer.status == "ok":
            response = trace_service_pb2.ExportTraceServiceResponse()
            if answer.rejected_spans:
                response.partial_success.rejected_spans = answer.rejected_spans
                response.partial_success.error_message = answer.message
            return response
        await _abort(context, answer)
        raise AssertionError("unreachable: context.abort raises")


class _LogsService:
    def __init__(self, take: Callable[..., Answer], pool: futures.ThreadPoolExecutor) -> None:
        self._take = take
        self._pool = pool

    async def export(self, body: bytes, context: Any) -> logs_service_pb2.ExportLogsServiceResponse:
        loop = asyncio.get_running_loop()
        answer = await loop.run_in_executor(self._pool, partial(self._take, body, protocol="grpc"))
        if answer.status == "ok":
            return logs_service_pb2.ExportLogsServiceResponse()
        await _abort(context, answer)
        raise AssertionError("unreachable: context.abort raises")


async def _abort(context: Any, answer: Answer) -> None:
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
    await context.abort(code, answer.message)


class GrpcReceiver:
    """A grpcio asyncio server serving ``TraceService`` on ``endpoint`` (``host:port``; port 0 picks one).

    ``logs``: takes the ``LogsService`` calls (an encoded log export request, ``protocol=``);
    None: that service is not served (``UNIMPLEMENTED``).
    """

    def __init__(
        self,
        intake: Intake,
        endpoint: str,
        *,
        max_request_bytes: int,
        workers: int = 4,
        max_calls: int = 1024,
        logs: Callable[..., Answer] | None = None,
    ) -> None:
        self._pool = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="latency-budget-grpc")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="latency-budget-grpc-loop", daemon=True)
        self._thread.start()
        service = _TraceService(intake, self._pool)

        async def make() -> tuple[grpc.aio.Server, int]:
            server = grpc.aio.server(
                options=(
                    ("grpc.max_receive_message_length", max_request_bytes),
                    ("grpc.max_concurrent_streams", 256),
                ),
                maximum_concurrent_rpcs=max_calls,  # past it grpcio answers RESOURCE_EXHAUSTED itself
            )
            export: grpc.RpcMethodHandler[bytes, trace_service_pb2.ExportTraceServiceResponse] = (
                grpc.unary_unary_rpc_method_handler(
                    service.export,  # a coroutine: grpc.aio awaits it
                    request_deserializer=None,  # the bytes as they came: see the module's docstring
                    response_serializer=trace_service_pb2.ExportTraceServiceResponse.SerializeToString,
                )
            )
            server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE, {"Export": export}),))
            if logs is not None:
                logs_export: grpc.RpcMethodHandler[bytes, logs_service_pb2.ExportLogsServiceResponse] = (
                    grpc.unary_unary_rpc_method_handler(
                        _LogsService(logs, self._pool).export,
                        request_deserializer=None,
                        response_serializer=logs_service_pb2.ExportLogsServiceResponse.SerializeToString,
                    )
                )
                server.add_generic_rpc_handlers(
                    (grpc.method_handlers_generic_handler(_LOGS_SERVICE, {"Export": logs_export}),)
                )
            return server, server.add_insecure_port(endpoint)

        try:
            self._server, self.port = asyncio.run_coroutine_threadsafe(make(), self._loop).result()
        except BaseException:
            self._close_loop()
            raise
        if not self.port:
            self._close_loop()
            raise OSError(f"cannot listen on {endpoint}")
        host = endpoint.rsplit(":", 1)[0]
        self.address = f"{host.strip('[]')}:{self.port}"

    def start(self) -> None:
        asyncio.run_coroutine_threadsafe(self._server.start(), self._loop).result()

    def stop(self, grace_s: float) -> None:
        """Refuse new calls now; let calls in progress finish within ``grace_s``."""
        stopping = asyncio.run_coroutine_threadsafe(self._server.stop(grace_s), self._loop)
        with contextlib.suppress(Exception):  # a call still running past the grace: the drain goes on
            stopping.result(grace_s + 1.0)
        self._close_loop()

    def _close_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(1.0)
        self._pool.shutdown(wait=False)
