"""``serve`` as a process under a hard memory cap, and its signals: no OOM, no hang, nothing acknowledged lost.

The memory test caps the process's address space (``RLIMIT_AS``, set in the child before
it runs Python) and sends what used to blow it up: a valid 15 MiB request of tiny spans,
a root carrying a million small events, and GenAI traffic with large prompts while the
next hop is down. ``serve`` must answer each request OK or with the retryable
``RESOURCE_EXHAUSTED`` (never ``INVALID_ARGUMENT`` for valid data), keep its health
endpoint answering, forward everything it acknowledged once the hop is back, and exit 0
on SIGTERM.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tests.e2e.services import free_ports, http_get, poll

from .forward_lab import EXPORT, LabHop, RetryingSender, assert_invariant, genai_request
from .test_command import BUDGET_FILE

MIB = 1024 * 1024
ADDRESS_SPACE = 768 * MIB  # serve idles at about 250 MiB of address space (MALLOC_ARENA_MAX=2)
WAIT_S = 40.0


@pytest.fixture
def hop() -> Iterator[LabHop]:
    next_hop = LabHop()
    yield next_hop
    next_hop.stop()


class Serve:
    """A ``serve`` process on free loopback ports; its stderr (the JSON log) in a file."""

    def __init__(self, tmp_path: Path, hop: LabHop, *args: str, address_space: int | None = None) -> None:
        budgets = tmp_path / "budgets.yaml"
        budgets.write_text(BUDGET_FILE)
        grpc_port, health_port = free_ports(2)
        self.grpc_endpoint = f"127.0.0.1:{grpc_port}"
        self.health_url = f"http://127.0.0.1:{health_port}/health"
        self.log_path = tmp_path / "serve.log"
        argv = [
            *(sys.executable, "-m", "latency_budget", "serve", "--budgets", str(budgets)),
            *("--grpc-endpoint", self.grpc_endpoint, "--http-endpoint", "none"),
            *("--health-endpoint", f"127.0.0.1:{health_port}", "--forward-endpoint", hop.url, "--reports", "none"),
            *args,
        ]

        def cap() -> None:
            if address_space is not None:
                resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))

        env = {**os.environ, "MALLOC_ARENA_MAX": "2", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2"}
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(argv, stderr=log, env=env, preexec_fn=cap)  # noqa: PLW1509
        poll(lambda: True if self.health()[0] == 200 else None, timeout=WAIT_S, what="serve healthy")

    def health(self) -> tuple[int, dict[str, Any]]:
        assert self.process.poll() is None, self.log_path.read_text()
        status, body = http_get(self.health_url, timeout=5.0)
        return status, json.loads(body) if body else {}

    def counters(self) -> dict[str, int]:
        status, document = self.health()
        assert status == 200, document
        return dict(document["counters"])

    def peak_rss(self) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmHWM")

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log_path.read_text().splitlines() if line.startswith("{")]

    def stop(self, timeout: float) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return -1
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()


def _tiny_spans(megabytes: int) -> bytes:
    """A valid request of about ``megabytes`` MiB of the smallest spans (ids only), 1,000 a trace."""
    request = trace_service_pb2.ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    count = megabytes * MIB // 38
    for index in range(count):
        trace_number = 1_000_000 + index // 1000
        span = spans.add(trace_id=trace_number.to_bytes(16, "big"), span_id=(index + 1).to_bytes(8, "big"))
        if index % 1000:
            span.parent_span_id = (index // 1000 * 1000 + 1).to_bytes(8, "big")
    return request.SerializeToString()


def _many_events(megabytes: int) -> bytes:
    """A valid request of one root span carrying about ``megabytes`` MiB of small events."""
    request = trace_service_pb2.ExportTraceServiceRequest()
    span = (
        request.resource_spans.add()
        .scope_spans.add()
        .spans.add(trace_id=(2_000_000).to_bytes(16, "big"), span_id=(2_000_000).to_bytes(8, "big"), name="POST /ask")
    )
    for index in range(megabytes * MIB // 16):
        span.events.add(name="tok", time_unix_nano=index)
    return request.SerializeToString()


def _code(endpoint: str, body: bytes) -> grpc.StatusCode:
    with grpc.insecure_channel(endpoint, options=(("grpc.max_send_message_length", 64 * MIB),)) as channel:
        try:
            channel.unary_unary(EXPORT)(body, timeout=60)
        except grpc.RpcError as error:
            return error.code()
    return grpc.StatusCode.OK


def test_under_a_hard_memory_cap_hostile_requests_are_refused_retryably_and_nothing_acknowledged_is_lost(
    tmp_path: Path, hop: LabHop
) -> None:
    """RLIMIT_AS 768 MiB, --max-bytes 64 MiB: 15 MiB of tiny spans, a million events, a hop outage; no OOM, no loss."""
    hop.stop()
    serve = Serve(
        tmp_path,
        hop,
        *("--max-bytes", str(64 * MIB), "--decision-wait", "0.2", "--shutdown-timeout", "10"),
        address_space=ADDRESS_SPACE,
    )
    try:
        tiny = _code(serve.grpc_endpoint, _tiny_spans(15))
        assert tiny in (grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED)
        assert serve.health()[0] == 200
        events = _code(serve.grpc_endpoint, _many_events(15))
        assert events in (grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED)
        assert serve.health()[0] == 200
        sender = RetryingSender(serve.grpc_endpoint, backoff_s=0.1)
        give_up = time.monotonic() + WAIT_S
        first = 1
        while first < 20_000:  # one try each: the first refusal ends it
            if not sender.send(genai_request(first, 50), give_up_at=0.0):
                break
            first += 50
            assert serve.health()[0] == 200
        assert dict(sender.refusals) == {"RESOURCE_EXHAUSTED": 1}
        held = serve.health()[1]["held"]
        assert held["bytes"] + held["judging_bytes"] + held["forward_queue_bytes"] <= 64 * MIB
        hop.start()
        for start in range(first, first + 500, 50):  # the refused one again, and more: all taken now
            assert sender.send(genai_request(start, 50), give_up_at=give_up)
        wanted = set(sender.acknowledged)
        poll(lambda: True if wanted <= set(hop.received()) else None, timeout=WAIT_S, what="all acknowledged at hop")
        counters = serve.counters()
        peak = serve.peak_rss()
        print(f"tiny: {tiny.name}, events: {events.name}, peak RSS {peak / MIB:.0f} MiB, {counters}")
        assert serve.stop(timeout=30) == 0
    finally:
        serve.stop(timeout=5)
    sender.close()
    forwarded = hop.received()
    assert_invariant(sender.acknowledged, Counter({key: forwarded[key] for key in wanted if key in forwarded}))
    assert counters["spans_dropped"] == 0
    assert counters["spans_too_large"] == 0
    assert counters["spans_truncated"] == (1 if events == grpc.StatusCode.OK else 0)  # events past 128 cut
    assert peak < ADDRESS_SPACE
    assert "internal_error" not in [event["event"] for event in serve.events()]


def test_second_sigterm_keeps_draining_and_sighup_checks_the_budget_file(tmp_path: Path, hop: LabHop) -> None:
    """SIGHUP: one line, a check of the budget file, serving goes on; a second SIGTERM while draining: one line."""
    hop.stop()
    serve = Serve(tmp_path, hop, "--decision-wait", "0.1", "--shutdown-timeout", "3")
    try:
        serve.process.send_signal(signal.SIGHUP)
        poll(
            lambda: True if any(e["event"] == "reload_requested" for e in serve.events()) else None,
            timeout=WAIT_S,
            what="the SIGHUP line",
        )
        sender = RetryingSender(serve.grpc_endpoint)
        assert sender.send(genai_request(1, 5), give_up_at=time.monotonic() + WAIT_S)
        poll(lambda: True if serve.counters()["traces_judged"] == 5 else None, timeout=WAIT_S, what="5 traces judged")
        serve.process.send_signal(signal.SIGTERM)
        poll(
            lambda: True if any(e["event"] == "draining" for e in serve.events()) else None,
            timeout=WAIT_S,
            what="draining",
        )
        serve.process.send_signal(signal.SIGTERM)
        assert serve.process.wait(timeout=30) == 0
    finally:
        serve.stop(timeout=5)
    sender.close()
    names = [event["event"] for event in serve.events()]
    assert names.count("reload_requested") == 1, names
    assert names.count("signal_during_drain") == 1, names
    shutdown = next(e for e in serve.events() if e["event"] == "shutdown")
    assert shutdown["counters"]["spans_dropped"] == 20, shutdown  # no log: what the hop never took, counted
