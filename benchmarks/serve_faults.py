"""`latency-budget serve` at its defaults with large prompts: peak memory, throughput, and spans lost in a hop outage.

Run from the repository root, with the package importable:

    python benchmarks/serve_faults.py                  # 5,000 traces; a 20 s outage
    python benchmarks/serve_faults.py --outage 60      # the issue's 60 s outage (about 2 minutes)

The traffic is the standard AI trace of benchmarks/workloads.py (10 spans) whose chat and
embeddings spans each carry a 2.5 KB ``gen_ai.prompt``: about 8 KB a trace, so 500 traces
are more than the 4 MiB a Collector or Jaeger takes in one request. ``serve`` runs with
every option at its default (``--max-bytes`` 256 MiB, ``--queue-size`` 100,000,
``--forward-batch-bytes`` 3 MiB) but ``--decision-wait`` (1 s).

``throughput``  ``--traces`` traces as fast as the sender goes (8 requests in flight, a
    refused one sent again after 50 ms) to a next hop that takes up to 4 MiB a request (as
    the Collector's default receive limit): spans per CPU-second of serve, spans per second,
    serve's peak resident set size (VmHWM), and whether the hop refused anything.
``outage``      2,000 spans a second for ``--outage`` seconds plus 10: the next hop (a gRPC
    receiver of this process that records span ids, 4 MiB limit) goes down 5 s in, its port
    closed, for ``--outage`` seconds, then comes back. The sender keeps each request until
    serve acknowledges it (a refused one is retried, as a Collector's retry queue would).
    Once serve holds nothing the figure is the spans acknowledged that never reached the
    hop (the goal: 0), and those that reached it twice.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from serve import EXPORT, LOOPBACK, free_ports, measure, start_serve
from workloads import BUDGETS, standard_trace

PROMPT_BYTES = 2500
TRACES_PER_REQUEST = 50
HOP_LIMIT = 4 * 1024 * 1024
SPANS_PER_TRACE = 10


def encode_requests(traces: int) -> list[bytes]:
    """``traces`` standard AI traces with 2.5 KB prompts, 50 a request, encoded."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench-faults"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("benchmarks.serve_faults")
    requests = []
    number = 0
    for first in range(0, traces, TRACES_PER_REQUEST):
        for _ in range(min(TRACES_PER_REQUEST, traces - first)):
            standard_trace(tracer)
        request = encode_spans(exporter.get_finished_spans())
        exporter.clear()
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    if span.name.startswith(("chat", "embeddings")):
                        number += 1
                        pair = span.attributes.add()
                        pair.key = "gen_ai.prompt"
                        pair.value.string_value = (f"prompt {number}: " + "lorem ipsum " * 300)[:PROMPT_BYTES]
        requests.append(request.SerializeToString())
    provider.shutdown()
    return requests


def ids_of(body: bytes) -> list[tuple[bytes, bytes]]:
    request = ExportTraceServiceRequest.FromString(body)
    return [(s.trace_id, s.span_id) for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]


class Hop:
    """The next hop: an OTLP/gRPC receiver taking up to 4 MiB a request, counting or recording spans."""

    def __init__(self, *, record: bool) -> None:
        self.record = record
        self.lock = threading.Lock()
        self.received: dict[tuple[bytes, bytes], int] = {}
        self.spans = 0
        self.requests = 0
        (self.port,) = free_ports(1)
        self._server: grpc.Server | None = None

    def _export(self, body: bytes, context: Any) -> bytes:
        count = 0
        if self.record:
            keys = ids_of(body)
            count = len(keys)
            with self.lock:
                for key in keys:
                    self.received[key] = self.received.get(key, 0) + 1
        else:
            count = len(ExportTraceServiceRequest.FromString(body).resource_spans[0].scope_spans[0].spans)
        with self.lock:
            self.spans += count
            self.requests += 1
        return b""

    def start(self) -> None:
        hop = self

        class Handler(grpc.GenericRpcHandler):
            def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
                if handler_call_details.method == EXPORT:  # type: ignore[attr-defined]
                    return grpc.unary_unary_rpc_method_handler(hop._export)
                return grpc.unary_unary_rpc_method_handler(lambda request, context: b"")

        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4), options=[("grpc.max_receive_message_length", HOP_LIMIT)]
        )
        server.add_generic_rpc_handlers([Handler()])
        server.add_insecure_port(f"{LOOPBACK}:{self.port}")
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"


@contextmanager
def serving(work: Path, hop: Hop, timeout: float) -> Iterator[Any]:
    budgets = work / "budgets.yaml"
    budgets.write_text(BUDGETS)
    serve = start_serve("serve", budgets, hop.address, work, ["--decision-wait", "1", "--reports", "none"], timeout)
    try:
        yield serve
    finally:
        serve.process.stop()


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def throughput(work: Path, requests: list[bytes], spans: int, timeout: float) -> dict[str, Any]:
    hop = Hop(record=False)
    hop.start()
    try:
        with serving(work, hop, timeout) as serve:
            measured = measure(
                [serve.pid], serve.grpc, requests, lambda: serve.counters()["spans_forwarded"], spans, timeout
            )
            counters = serve.counters()
            peak = peak_rss(serve.pid)
    finally:
        hop.stop()
    return {
        "spans_per_cpu_s": round(spans / measured.cpu_s[0]),
        "spans_per_s": round(spans / measured.wall_s),
        "peak_rss_mib": round(peak / 2**20, 1),
        "refused": measured.refused,
        "forward_batches_split": counters.get("forward_batches_split", 0),
        "spans_dropped": counters["spans_dropped"],
        "hop_requests": hop.requests,
    }


def outage(work: Path, requests: list[bytes], down_s: float, timeout: float) -> dict[str, Any]:
    """2,000 spans/s; the hop down from 5 s for ``down_s``; acknowledged spans that never arrived."""
    hop = Hop(record=True)
    hop.start()
    acknowledged: list[tuple[bytes, bytes]] = []
    refused = 0
    pace = TRACES_PER_REQUEST * SPANS_PER_TRACE / 2000  # seconds a request
    try:
        with serving(work, hop, timeout) as serve:
            channel = grpc.insecure_channel(serve.grpc, options=[("grpc.max_send_message_length", 64 << 20)])
            export = channel.unary_unary(EXPORT)
            start = time.monotonic()
            down_at, up_at = start + 5.0, start + 5.0 + down_s
            state = "up"
            for index, body in enumerate(requests):
                due = start + index * pace
                while True:
                    now = time.monotonic()
                    if state == "up" and now >= down_at:
                        hop.stop()
                        state = "down"
                    elif state == "down" and now >= up_at:
                        hop.start()
                        state = "back"
                    if now >= due:
                        break
                    time.sleep(min(0.01, due - now))
                while True:  # the sender's retry queue: this request until acknowledged
                    try:
                        export(body, timeout=30)
                        break
                    except grpc.RpcError as error:
                        if error.code() not in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE):
                            raise
                        refused += 1
                        time.sleep(0.1)
                        if state == "down" and time.monotonic() >= up_at:
                            hop.start()
                            state = "back"
                acknowledged.extend(ids_of(body))
            if state == "down":
                while time.monotonic() < up_at:
                    time.sleep(0.05)
                hop.start()
            wanted = set(acknowledged)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:  # until serve holds nothing, or the hop has every span
                with hop.lock:
                    arrived = wanted <= hop.received.keys()
                if arrived:
                    break
                time.sleep(0.2)
            counters = serve.counters()
            channel.close()
    finally:
        hop.stop()
    with hop.lock:
        received = dict(hop.received)
    lost = sum(1 for key in set(acknowledged) if key not in received)
    twice = sum(1 for key, count in received.items() if count > 1)
    return {
        "outage_s": down_s,
        "acknowledged_spans": len(acknowledged),
        "acknowledged_but_lost": lost,
        "forwarded_twice": twice,
        "requests_refused": counters["requests_refused"],
        "sender_retries": refused,
        "spans_dropped": counters["spans_dropped"],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=5000, help="traces for the throughput run (default 5000)")
    parser.add_argument("--outage", type=float, default=20.0, help="seconds the next hop is down (default 20)")
    parser.add_argument("--only", action="append", choices=["throughput", "outage"], help="(repeatable)")
    parser.add_argument("--timeout", type=float, default=300.0, help="bound on every wait, seconds (default 300)")
    args = parser.parse_args(argv)
    only = set(args.only or ["throughput", "outage"])
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-serve-faults-") as work:
        if "throughput" in only:
            requests = encode_requests(args.traces)
            results["request_bytes_per_trace"] = round(sum(map(len, requests)) / args.traces)
            results["throughput"] = throughput(Path(work), requests, args.traces * SPANS_PER_TRACE, args.timeout)
            print(json.dumps(results), file=sys.stderr)
        if "outage" in only:
            traces = int((args.outage + 10) * 2000 / SPANS_PER_TRACE)
            requests = encode_requests(traces)
            results["outage"] = outage(Path(work), requests, args.outage, args.timeout)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
