"""`latency-budget serve` under load: spans per CPU-second, memory per open trace, one and two instances.

Run from the repository root, with the package importable and the Collector built
(scripts/build-tools; ``LATENCY_BUDGET_TOOLS_DIR`` as for the e2e tests):

    python benchmarks/serve.py                         # every measurement, both shapes
    python benchmarks/serve.py --only throughput --case standard --traces 2000

What is measured, each on loopback, each in a process of its own:

``throughput``  serve receives pre-encoded OTLP/gRPC requests (``--traces`` traces of the
    case's shape, 50 a request) and decodes, assembles, judges, encodes and forwards
    them to a sink. The figure is spans / serve's CPU time (user + system, all threads,
    from /proc/<pid>/stat) between the first request and the last span forwarded, so the
    sender and the sink (this process) are not counted, and neither is waiting for a core.
``anchor``      the same requests through the Collector's own tail-sampling processor
    (the policies of collector-config.yaml) and batch processor to the same sink: the
    Collector's spans per CPU-second, the yardstick for serve's.
``memory``      resident set size of serve (and of the Collector) before and after
    ``--traces`` traces arrive that it holds open (decision wait of an hour): bytes per
    open trace.
``scaling``     the Collector running collector-tier.yaml in front of one, then two,
    serve instances: spans per second from the first request to the last span forwarded
    (wall clock, the decision wait included), and each process's CPU time.

The sender is a plain gRPC channel sending bytes encoded before the clock starts; a
request refused as full (RESOURCE_EXHAUSTED, UNAVAILABLE) is sent again after 50 ms and
counted. Every wait is bounded (``--timeout``); nothing listens beyond 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import grpc
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from workloads import BUDGETS, standard_trace, unmatched_trace

REPO = Path(__file__).resolve().parents[1]
TIER_CONFIG = REPO / "collector-tier.yaml"
LOOPBACK = "127.0.0.1"
EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
TRACES_PER_REQUEST = 50
IN_FLIGHT = 8
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
SHAPES = {"standard": (standard_trace, 10), "web": (unmatched_trace, 20)}
CASE_NAMES = {"standard": "standard AI trace (10 spans)", "web": "web request (20 spans)"}
T = TypeVar("T")


# -- the workload, encoded before anything is measured ---------------------------------


def encode_requests(case: str, traces: int) -> list[bytes]:
    """``traces`` traces of ``case``'s shape made by the real SDK, as serialized ExportTraceServiceRequests."""
    shape, _ = SHAPES[case]
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": f"bench-{case}"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("benchmarks.serve")
    requests = []
    for first in range(0, traces, TRACES_PER_REQUEST):
        for _ in range(min(TRACES_PER_REQUEST, traces - first)):
            shape(tracer)
        requests.append(encode_spans(exporter.get_finished_spans()).SerializeToString())
        exporter.clear()
    provider.shutdown()
    return requests


# -- processes, probes and bounded waits -----------------------------------------------


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((LOOPBACK, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid``, all its threads (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime: fields 14 and 15


def rss_bytes(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE


def http_get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()
    except OSError:
        return 0, b""


def wait_for(probe: Callable[[], T | None], *, timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.05)


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    health_url: str

    @property
    def pid(self) -> int:
        return self.popen.pid

    def healthy(self, timeout: float) -> None:
        def probe() -> bool | None:
            if self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.popen.returncode}")
            return True if http_get(self.health_url)[0] == 200 else None

        wait_for(probe, timeout=timeout, what=f"{self.name} to be healthy")

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)


def launch(name: str, argv: list[str], health_url: str, log_dir: Path, env: dict[str, str], timeout: float) -> Process:
    with (log_dir / f"{name}.log").open("wb") as log:
        popen = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env})
    process = Process(name, popen, health_url)
    try:
        process.healthy(timeout)
    except BaseException:
        process.stop()
        raise
    return process


@dataclass
class Serve:
    process: Process
    grpc: str  # host:port of its OTLP/gRPC receiver

    @property
    def pid(self) -> int:
        return self.process.pid

    def counters(self) -> dict[str, int]:
        status, body = http_get(self.process.health_url)
        if status != 200:
            raise RuntimeError(f"{self.process.name} /health answered {status}")
        return {str(k): int(v) for k, v in json.loads(body)["counters"].items()}


def start_serve(name: str, budgets: Path, sink: str, log_dir: Path, args: Sequence[str], timeout: float) -> Serve:
    grpc_port, health_port = free_ports(2)
    argv = [
        sys.executable,
        "-m",
        "latency_budget",
        "serve",
        "--budgets",
        str(budgets),
        "--grpc-endpoint",
        f"{LOOPBACK}:{grpc_port}",
        "--http-endpoint",
        "none",
        "--health-endpoint",
        f"{LOOPBACK}:{health_port}",
        "--forward-endpoint",
        f"http://{sink}",
        *args,
    ]
    # --forward-endpoint takes the violation logs and budget metrics too: the sink accepts them.
    process = launch(name, argv, f"http://{LOOPBACK}:{health_port}/health", log_dir, {}, timeout)
    return Serve(process, f"{LOOPBACK}:{grpc_port}")


@dataclass
class Collector:
    process: Process
    metrics_url: str  # the Collector's own metrics, Prometheus text

    @property
    def pid(self) -> int:
        return self.process.pid

    def sent_spans(self) -> int:
        """Spans the Collector's exporters have sent (its own otelcol_exporter_sent_spans metric)."""
        _, body = http_get(self.metrics_url)
        pattern = re.compile(r"^otelcol_exporter_sent_spans(?:_total)?\{[^}]*\} ([0-9.e+]+)$", re.MULTILINE)
        return int(sum(float(value) for value in pattern.findall(body.decode(errors="replace"))))


def start_collector(
    name: str, tools_bin: Path, config: Path, env: dict[str, str], log_dir: Path, timeout: float
) -> Collector:
    health, metrics = free_ports(2)
    env = {
        **env,
        "OTELCOL_HEALTH_CHECK_ENDPOINT": f"{LOOPBACK}:{health}",
        "OTELCOL_TELEMETRY_METRICS_HOST": LOOPBACK,
        "OTELCOL_TELEMETRY_METRICS_PORT": str(metrics),
    }
    argv = [str(tools_bin / "otelcol-latency-budget"), "--config", str(config)]
    process = launch(name, argv, f"http://{LOOPBACK}:{health}/", log_dir, env, timeout)
    return Collector(process, f"http://{LOOPBACK}:{metrics}/metrics")


def anchor_config(directory: Path, sink: str, decision_wait: str) -> Path:
    """A Collector config: OTLP in, collector-config.yaml's tail-sampling policies, batch, OTLP out to ``sink``."""
    config = {
        "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": "${env:OTELCOL_OTLP_GRPC_ENDPOINT}"}}}},
        "processors": {
            "tail_sampling": {
                "decision_wait": decision_wait,
                "num_traces": 1_000_000,
                "policies": [
                    {
                        "name": "keep-latency-budget-violations",
                        "type": "boolean_attribute",
                        "boolean_attribute": {"key": "latency_budget.violated", "value": True},
                    },
                    {"name": "sample-the-rest", "type": "probabilistic", "probabilistic": {"sampling_percentage": 100}},
                ],
            },
            "batch": {"timeout": "200ms", "send_batch_size": 2048},
        },
        "exporters": {
            "otlp_grpc/sink": {"endpoint": sink, "tls": {"insecure": True}, "sending_queue": {"queue_size": 100_000}}
        },
        "extensions": {"health_check": {"endpoint": "${env:OTELCOL_HEALTH_CHECK_ENDPOINT}"}},
        "service": {
            "extensions": ["health_check"],
            "pipelines": {
                "traces": {
                    "receivers": ["otlp"],
                    "processors": ["tail_sampling", "batch"],
                    "exporters": ["otlp_grpc/sink"],
                }
            },
            "telemetry": {
                "metrics": {
                    "level": "normal",
                    "readers": [
                        {
                            "pull": {
                                "exporter": {
                                    "prometheus": {
                                        "host": "${env:OTELCOL_TELEMETRY_METRICS_HOST}",
                                        "port": "${env:OTELCOL_TELEMETRY_METRICS_PORT}",
                                    }
                                }
                            }
                        }
                    ],
                }
            },
        },
    }
    path = directory / f"anchor-{decision_wait}.yaml"
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML
    return path


# -- the sink and the sender -----------------------------------------------------------


class _AnyExport(grpc.GenericRpcHandler):
    """Answers every unary call (traces, logs, metrics Export) with an empty message, reading nothing."""

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(lambda request, context: b"")


@contextmanager
def sink() -> Iterator[str]:
    """An OTLP/gRPC endpoint in this process that accepts and discards: the next hop."""
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=4), options=[("grpc.max_receive_message_length", 64 << 20)]
    )
    server.add_generic_rpc_handlers([_AnyExport()])
    port = server.add_insecure_port(f"{LOOPBACK}:0")
    server.start()
    try:
        yield f"{LOOPBACK}:{port}"
    finally:
        server.stop(grace=None)


def send(target: str, requests: Sequence[bytes], *, timeout: float) -> int:
    """Send every request (``IN_FLIGHT`` at a time), again after 50 ms when refused; return the refusals."""
    refused = 0
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(target, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        export = channel.unary_unary(EXPORT)  # bytes in, bytes out: nothing encoded while measured
        pending: list[tuple[bytes, Any]] = []
        queue = list(reversed(requests))
        while queue or pending:
            while queue and len(pending) < IN_FLIGHT:
                body = queue.pop()
                pending.append((body, export.future(body, timeout=30)))
            body, call = pending.pop(0)
            try:
                call.result()
            except grpc.RpcError as error:
                if error.code() not in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE):
                    raise
                if time.monotonic() > deadline:
                    raise TimeoutError(f"requests still refused after {timeout:.0f}s") from error
                refused += 1
                time.sleep(0.05)
                queue.append(body)
    return refused


# -- the measurements ------------------------------------------------------------------


@dataclass
class Measured:
    cpu_s: list[float]  # per pid
    wall_s: float  # first request sent to last span forwarded, the decision wait included
    refused: int


def measure(
    pids: Sequence[int],
    target: str,
    requests: Sequence[bytes],
    forwarded: Callable[[], int],
    total: int,
    timeout: float,
) -> Measured:
    """Send ``requests`` to ``target`` (from a thread) until ``forwarded()`` reaches ``total``; CPU time per pid."""
    outcome: dict[str, Any] = {}

    def sender() -> None:
        try:
            outcome["refused"] = send(target, requests, timeout=timeout)
        except BaseException as error:  # re-raised below, in the measuring thread
            outcome["error"] = error

    cpu = [cpu_seconds(pid) for pid in pids]
    start = time.monotonic()
    thread = threading.Thread(target=sender, name="bench-sender")
    thread.start()
    deadline = start + timeout
    while (count := forwarded()) < total:
        now = time.monotonic()
        if "error" in outcome:
            raise outcome["error"]
        if now > deadline:
            raise TimeoutError(f"{count} of {total} spans forwarded after {timeout:.0f}s")
        # Each poll is an HTTP request the measured process answers (about 0.5 ms of serve's
        # CPU, a thread per connection): coarse until the last tenth, fine for the end time.
        time.sleep(0.02 if count >= total * 0.9 else 0.2)
    wall = time.monotonic() - start
    used = [cpu_seconds(pid) - before for pid, before in zip(pids, cpu, strict=True)]
    thread.join(timeout)
    if "error" in outcome:
        raise outcome["error"]
    return Measured(used, wall, outcome.get("refused", 0))


def _summary(measured: Measured, spans: int, cpu_s: float) -> dict[str, Any]:
    return {
        "spans_per_cpu_s": spans / cpu_s if cpu_s else float("nan"),
        "cpu_s": cpu_s,
        "spans_per_s": spans / measured.wall_s,
        "wall_s": measured.wall_s,
        "refused": measured.refused,
    }


def serve_throughput(requests: list[bytes], spans: int, env: Env) -> dict[str, Any]:
    """serve alone: pre-encoded requests in, every span forwarded to the sink."""
    with sink() as next_hop:
        serve = start_serve("serve", env.budgets, next_hop, env.logs, env.serve_args(), env.timeout)
        try:
            measured = measure(
                [serve.pid], serve.grpc, requests, lambda: serve.counters()["spans_forwarded"], spans, env.timeout
            )
            judged = serve.counters()["traces_judged"]
        finally:
            serve.process.stop()
    return {**_summary(measured, spans, measured.cpu_s[0]), "traces_judged": judged}


def anchor_throughput(requests: list[bytes], spans: int, env: Env) -> dict[str, Any]:
    """The Collector's tail sampling on the same requests, to the same sink."""
    with sink() as next_hop:
        (port,) = free_ports(1)
        config = anchor_config(env.logs, next_hop, env.collector_decision_wait)
        receiver = {"OTELCOL_OTLP_GRPC_ENDPOINT": f"{LOOPBACK}:{port}"}
        collector = start_collector("otelcol-anchor", env.tools_bin, config, receiver, env.logs, env.timeout)
        try:
            measured = measure(
                [collector.pid], f"{LOOPBACK}:{port}", requests, collector.sent_spans, spans, env.timeout
            )
        finally:
            collector.process.stop()
    return _summary(measured, spans, measured.cpu_s[0])


def open_trace_memory(case: str, requests: list[bytes], traces: int, env: Env) -> dict[str, float]:
    """RSS per open trace of serve and of the Collector's tail sampler, both holding every trace an hour."""
    warm, rest = requests[:1], requests[1:]
    held = traces - TRACES_PER_REQUEST
    _, per_trace = SHAPES[case]
    result: dict[str, float] = {}
    with sink() as next_hop:
        serve = start_serve("serve-memory", env.budgets, next_hop, env.logs, env.serve_args(hold=True), env.timeout)
        try:
            for batch, expected in ((warm, TRACES_PER_REQUEST), (rest, traces)):
                send(serve.grpc, batch, timeout=env.timeout)
                wait_for(
                    lambda expected=expected: (
                        True if serve.counters()["spans_received"] >= expected * per_trace else None
                    ),
                    timeout=env.timeout,
                    what="serve to receive every span",
                )
                if batch is warm:
                    before = rss_bytes(serve.pid)
            result["serve"] = (rss_bytes(serve.pid) - before) / held
        finally:
            serve.process.popen.kill()  # draining an hour's worth of open traces is not what is measured
            serve.process.popen.wait(timeout=10)
        (port,) = free_ports(1)
        config = anchor_config(env.logs, next_hop, "3600s")
        collector = start_collector(
            "otelcol-memory",
            env.tools_bin,
            config,
            {"OTELCOL_OTLP_GRPC_ENDPOINT": f"{LOOPBACK}:{port}"},
            env.logs,
            env.timeout,
        )
        try:
            send(f"{LOOPBACK}:{port}", warm, timeout=env.timeout)
            before = rss_bytes(collector.pid)
            send(f"{LOOPBACK}:{port}", rest, timeout=env.timeout)
            # The receiver has answered every request, so the tail sampler holds every trace.
            result["collector"] = (rss_bytes(collector.pid) - before) / held
        finally:
            collector.process.popen.kill()
            collector.process.popen.wait(timeout=10)
    return result


def tier_throughput(requests: list[bytes], spans: int, instances: int, env: Env) -> dict[str, Any]:
    """Spans per second through collector-tier.yaml and ``instances`` serve instances, and their CPU time."""
    with sink() as next_hop:
        serves = [
            start_serve(f"serve-{i}-of-{instances}", env.budgets, next_hop, env.logs, env.serve_args(), env.timeout)
            for i in range(instances)
        ]
        grpc_port, http_port = free_ports(2)
        tier_env = {
            "OTELCOL_OTLP_GRPC_ENDPOINT": f"{LOOPBACK}:{grpc_port}",
            "OTELCOL_OTLP_HTTP_ENDPOINT": f"{LOOPBACK}:{http_port}",
            "OTELCOL_TIER_BACKENDS": json.dumps([s.grpc for s in serves]),
        }
        collector = start_collector(
            f"otelcol-tier-{instances}", env.tools_bin, TIER_CONFIG, tier_env, env.logs, env.timeout
        )
        try:
            measured = measure(
                [collector.pid, *(s.pid for s in serves)],
                f"{LOOPBACK}:{grpc_port}",
                requests,
                lambda: sum(s.counters()["spans_forwarded"] for s in serves),
                spans,
                env.timeout,
            )
            judged = [s.counters()["traces_judged"] for s in serves]
        finally:
            collector.process.stop()
            for serve in serves:
                serve.process.stop()
    serve_cpu = sum(measured.cpu_s[1:])
    return {
        "instances": instances,
        **_summary(measured, spans, serve_cpu),
        "collector_cpu_s": measured.cpu_s[0],
        "traces_judged_per_instance": judged,
    }


@dataclass
class Env:
    budgets: Path
    logs: Path
    tools_bin: Path
    timeout: float
    decision_wait: str
    collector_decision_wait: str

    def serve_args(self, *, hold: bool = False) -> list[str]:
        wait = "3600" if hold else self.decision_wait
        return [
            "--decision-wait",
            wait,
            "--max-wait",
            "3600" if hold else "60",
            "--max-traces",
            "1000000",
            "--max-bytes",
            str(4 << 30),
        ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(SHAPES), help="shape (repeatable; default: both)")
    parser.add_argument(
        "--only", action="append", choices=["throughput", "anchor", "memory", "scaling"], help="(repeatable)"
    )
    parser.add_argument("--traces", type=int, default=5000, help="traces per case and measurement (default 5000)")
    parser.add_argument("--decision-wait", default="1", help="serve's --decision-wait, seconds (default 1)")
    parser.add_argument("--timeout", type=float, default=300.0, help="bound on every wait, seconds (default 300)")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object")
    args = parser.parse_args(argv)
    cases = args.case or ["standard", "web"]
    only = set(args.only or ["throughput", "anchor", "memory", "scaling"])
    tools_dir = os.environ.get("LATENCY_BUDGET_TOOLS_DIR") or str(REPO / ".tools")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as work:
        logs = Path(work)
        budgets = logs / "budgets.yaml"
        budgets.write_text(BUDGETS)
        env = Env(budgets, logs, Path(tools_dir) / "bin", args.timeout, args.decision_wait, f"{args.decision_wait}s")
        for case in cases:
            requests = encode_requests(case, args.traces)
            spans = args.traces * SHAPES[case][1]
            row: dict[str, Any] = {"spans": spans, "request_bytes": sum(map(len, requests))}
            if "throughput" in only:
                row["serve"] = serve_throughput(requests, spans, env)
            if "anchor" in only:
                row["collector"] = anchor_throughput(requests, spans, env)
            if "memory" in only:
                row["bytes_per_open_trace"] = open_trace_memory(case, requests, args.traces, env)
            if "scaling" in only:
                row["tier"] = [tier_throughput(requests, spans, n, env) for n in (1, 2)]
            row["load_average"] = os.getloadavg()[0]  # the machine's 1-minute load when the case ended
            results[case] = row
            print(f"{CASE_NAMES[case]}: {json.dumps(row)}", file=sys.stderr)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(render(results))
    return 0


def render(results: dict[str, Any]) -> str:
    """The results as lines for people."""
    lines = []
    for case, row in results.items():
        lines.append(f"{CASE_NAMES[case]}, {row['spans']:,} spans (load average {row['load_average']:.1f})")
        for who, label in (("serve", "serve"), ("collector", "Collector, tail sampling")):
            if who in row:
                run = row[who]
                lines.append(
                    f"  {label}: {run['spans_per_cpu_s']:,.0f} spans per CPU-second ({run['cpu_s']:.2f} CPU-s),"
                    f" {run['spans_per_s']:,.0f} spans/s (wall)"
                )
        if "bytes_per_open_trace" in row:
            memory = row["bytes_per_open_trace"]
            lines.append(
                f"  open trace: {memory['serve']:,.0f} bytes in serve, {memory['collector']:,.0f} in the Collector"
            )
        for tier in row.get("tier", []):
            lines.append(
                f"  tier, {tier['instances']} instance(s): {tier['spans_per_s']:,.0f} spans/s (wall);"
                f" serve {tier['cpu_s']:.2f} CPU-s ({tier['spans_per_cpu_s']:,.0f} spans per CPU-s),"
                f" Collector {tier['collector_cpu_s']:.2f} CPU-s;"
                f" judged per instance {tier['traces_judged_per_instance']}"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
