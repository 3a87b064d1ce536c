"""serve between two real Collectors: large GenAI batches, a next hop that goes down, nothing acknowledged lost.

The sender is the real Collector running collector-tier.yaml (its retry queue holds what
``serve`` refuses); the next hop is another real Collector, whose OTLP receiver takes at
most 4 MiB a request (``max_recv_msg_size_mib``, the default; and 1 MiB, below
``serve``'s own bound, so that the Collector refuses requests as too large) and which
passes every span to an OTLP/gRPC receiver of this test (no sending queue: the hop
answers ``serve`` only once that receiver has the spans). The test's own client sends
the traffic to the first Collector and records the span ids it acknowledged; every
test asserts by span id that each acknowledged span reached the end once (none of this
traffic is too large to go alone).

Before the fix of issue 44 the first test wedges (a batch of 2,048 spans with 2.5 KB
prompts is over 4 MiB, refused, and resent forever) and the second drops what the
queue could not hold while the hop was down.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.ci import skip_or_fail_in_ci
from tests.serve.forward_lab import LabHop, Pacer, RetryingSender, assert_invariant, genai_request
from tests.serve.test_command import BUDGET_FILE

from .services import (
    LOOPBACK,
    ManagedProcess,
    ServeService,
    Tools,
    find_tools,
    free_ports,
    poll,
    start_serve,
    start_tier_collector,
)

pytestmark = pytest.mark.e2e

TIMEOUT_S = 60.0
HOP_CONFIG = {
    "receivers": {
        "otlp": {
            "protocols": {
                "grpc": {"endpoint": "${env:HOP_GRPC_ENDPOINT}", "max_recv_msg_size_mib": "${env:HOP_MAX_RECV_MIB}"},
            }
        }
    },
    "exporters": {
        "otlp_grpc/end": {
            "endpoint": "${env:HOP_END_ENDPOINT}",
            "tls": {"insecure": True},
            "sending_queue": {"enabled": False},
            "retry_on_failure": {"enabled": True, "initial_interval": "100ms", "max_interval": "500ms"},
        }
    },
    "extensions": {"health_check": {"endpoint": "${env:HOP_HEALTH_ENDPOINT}"}},
    "service": {
        "extensions": ["health_check"],
        "pipelines": {"traces": {"receivers": ["otlp"], "exporters": ["otlp_grpc/end"]}},
        "telemetry": {"metrics": {"level": "none"}},
    },
}


@pytest.fixture
def collector_tools() -> Tools:
    """The built Collector (Jaeger is not needed here); skip, or fail under CI=true, when missing."""
    tools, _ = find_tools()
    if not os.access(tools.otelcol, os.X_OK):
        skip_or_fail_in_ci(f"the Collector is not built: missing {tools.otelcol}; run scripts/build-tools")
    return tools


@pytest.fixture
def end() -> Iterator[LabHop]:
    """Where the next hop Collector delivers: keeps every span; takes up to 64 MiB a request."""
    receiver = LabHop(max_receive_bytes=64 * 1024 * 1024)
    yield receiver
    receiver.stop()


def _hop_collector(tools: Tools, tmp_path: Path, end: LabHop, limit_mib: int) -> tuple[ManagedProcess, str]:
    """The next hop: a real Collector taking at most ``limit_mib`` MiB a request, passing everything to ``end``."""
    config = tmp_path / "hop-collector.yaml"
    config.write_text(json.dumps(HOP_CONFIG, indent=2), encoding="utf-8")  # JSON is YAML
    grpc_port, health_port = free_ports(2)
    process = ManagedProcess(
        name="otelcol-hop",
        argv=[str(tools.otelcol), "--config", str(config)],
        env={
            "HOP_GRPC_ENDPOINT": f"{LOOPBACK}:{grpc_port}",
            "HOP_END_ENDPOINT": f"{LOOPBACK}:{end.port}",
            "HOP_HEALTH_ENDPOINT": f"{LOOPBACK}:{health_port}",
            "HOP_MAX_RECV_MIB": str(limit_mib),
        },
        log_path=tmp_path / "otelcol-hop.log",
        health_url=f"http://{LOOPBACK}:{health_port}/",
    )
    process.start()
    return process, f"http://{LOOPBACK}:{grpc_port}"


class _Lab:
    def __init__(
        self,
        tools: Tools,
        tmp_path: Path,
        end: LabHop,
        attach: Callable[[ManagedProcess], None],
        *args: str,
        limit_mib: int = 4,
    ) -> None:
        budgets = tmp_path / "budgets.yaml"
        budgets.write_text(BUDGET_FILE, encoding="utf-8")
        self.started: list[ManagedProcess] = []
        try:
            self.hop, hop_url = _hop_collector(tools, tmp_path, end, limit_mib)
            self.started.append(self.hop)
            attach(self.hop)
            self.serve: ServeService = start_serve(
                tmp_path,
                name="serve",
                budgets=budgets,
                forward_endpoint=hop_url,
                args=["--decision-wait", "1", "--reports", "none", *args],
                extra_env={"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "2"},
            )
            self.started.append(self.serve.process)
            attach(self.serve.process)
            front = start_tier_collector(
                tools,
                tmp_path,
                backends=[self.serve.grpc_endpoint],
                extra_env={"OTELCOL_TIER_RETRY_INITIAL_INTERVAL": "100ms", "OTELCOL_TIER_RETRY_MAX_INTERVAL": "500ms"},
            )
            self.started.append(front.process)
            attach(front.process)
            self.front = front.otlp_grpc_endpoint.removeprefix("http://")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        for process in reversed(self.started):
            process.stop()


def _settled(lab: _Lab, end: LabHop, acknowledged: list[tuple[int, int]]) -> bool | None:
    """Every acknowledged span at the end and nothing held by serve."""
    if not set(acknowledged) <= set(end.received()):
        return None
    held = lab.serve.health()["held"]
    return True if not held["traces"] and not held["forward_queue_spans"] else None


@pytest.mark.parametrize("limit_mib", [4, 1], ids=["hop-4MiB", "hop-1MiB"])
def test_genai_batches_over_4_mib_reach_a_collector_that_takes_4_or_1_mib_once_each(
    collector_tools: Tools, tmp_path: Path, end: LabHop, attach_log: Callable[[ManagedProcess], None], limit_mib: int
) -> None:
    """1,000 GenAI traces with 2.5 KB prompts, Collector to serve to Collector (4 or 1 MiB): every span once."""
    lab = _Lab(collector_tools, tmp_path, end, attach_log, limit_mib=limit_mib)
    try:
        sender = RetryingSender(lab.front)
        give_up = time.monotonic() + TIMEOUT_S
        for first in range(1, 1001, 50):
            assert sender.send(genai_request(first, 50), give_up_at=give_up)
        poll(lambda: _settled(lab, end, sender.acknowledged), timeout=TIMEOUT_S, what="every span at the end")
        counters = lab.serve.counters()
    finally:
        lab.stop()
    assert len(sender.acknowledged) == 4000
    assert_invariant(sender.acknowledged, end.received())
    assert counters["spans_dropped"] == 0
    assert counters["spans_forwarded"] == 4000
    log = lab.serve.process.log_text()
    assert '"next_hop_down"' not in log  # the hop was up all along
    if limit_mib == 1:  # below --forward-batch-bytes: the Collector said too large (grpc-go's words), serve split
        assert counters["forward_batches_split"] >= 1


def test_the_next_hop_collector_down_then_back_loses_nothing_acknowledged(
    collector_tools: Tools, tmp_path: Path, end: LabHop, attach_log: Callable[[ManagedProcess], None]
) -> None:
    """The hop Collector stopped while traffic flows (serve's queue fills, it refuses), then back: every span once."""
    lab = _Lab(collector_tools, tmp_path, end, attach_log, "--queue-size", "1500")
    try:
        sender = RetryingSender(lab.front)
        requests = [genai_request(first, 10, prompt_bytes=500) for first in range(1, 1201, 10)]  # 4,800 spans
        pacer = Pacer(sender, requests, pace_s=0.05, give_up_s=TIMEOUT_S)
        lab.hop.stop()
        pacer.start()
        # Down until serve refuses (its queue full): the Collector in front holds the rest and retries.
        poll(
            lambda: True if lab.serve.counters()["requests_refused"] >= 5 else None,
            timeout=TIMEOUT_S,
            what="serve refusing, its forward queue full",
        )
        lab.hop.start()
        pacer.join(TIMEOUT_S)
        assert not pacer.is_alive()
        poll(lambda: _settled(lab, end, sender.acknowledged), timeout=TIMEOUT_S, what="every span at the end")
        counters = lab.serve.counters()
    finally:
        lab.stop()
    assert pacer.failed == 0
    assert len(sender.acknowledged) == 4800
    assert_invariant(sender.acknowledged, end.received())
    assert counters["spans_dropped"] == 0
    assert counters["requests_refused"] >= 5
