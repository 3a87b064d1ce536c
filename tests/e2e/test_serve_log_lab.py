"""serve behind the real Collector: a small write-ahead log, and a flood of traces whose root never comes.

The sender is the real Collector running collector-tier.yaml (its sending queue and
retries hold what ``serve`` refuses); ``serve`` runs as a process; the next hop is an
OTLP/gRPC receiver of this test that keeps every request. The test's own client sends
paced traffic to the Collector for about ten seconds and records the span ids the
Collector acknowledged; after ``serve`` drains (SIGTERM), each case asserts by span id
that every acknowledged span reached the next hop exactly once.

Before issue 44 both fail: the log jams once 1 MB is written (its one segment never rolls
below 16 MiB), and the rootless traces fill ``--max-traces`` and keep every request
refused until ``--max-wait``.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanKind, Tracer

from latency_budget._serve.otlp import attributes_of
from tests.ci import skip_or_fail_in_ci
from tests.serve.harness import NextHop, at, record
from tests.serve.test_command import BUDGET_FILE
from tests.serve.test_judging import agent_trace
from tests.serve.test_receiver_faults import _children_only

from .services import (
    ManagedProcess,
    ServeService,
    TierCollectorService,
    Tools,
    find_tools,
    poll,
    start_serve,
    start_tier_collector,
)

pytestmark = pytest.mark.e2e

TRAFFIC_S = 10.0
TICK_S = 0.1
TIMEOUT_S = 90.0


@pytest.fixture
def collector_tools() -> Tools:
    """The built Collector; skip, or fail under CI=true, when missing."""
    tools, _ = find_tools()
    if not os.access(tools.otelcol, os.X_OK):
        skip_or_fail_in_ci(f"the Collector is not built: missing {tools.otelcol}; run scripts/build-tools")
    return tools


@pytest.fixture
def hop() -> Iterator[NextHop]:
    next_hop = NextHop()
    yield next_hop
    next_hop.stop()


def _ids(spans: list[ReadableSpan]) -> list[tuple[int, int]]:
    return [(int(span.context.trace_id), int(span.context.span_id)) for span in spans]


def _forwarded(hop: NextHop) -> Counter[tuple[int, int]]:
    return Counter((int.from_bytes(s.trace_id, "big"), int.from_bytes(s.span_id, "big")) for _, _, s in hop.spans())


def _run(
    tools: Tools,
    tmp_path: Path,
    hop: NextHop,
    attach_log: Callable[[ManagedProcess], None],
    serve_args: list[str],
    tick: Callable[[int], list[ReadableSpan]],
) -> tuple[list[tuple[int, int]], ServeService, dict[str, int]]:
    """Paced traffic through the Collector into one serve; what the Collector acknowledged, serve, its last counters."""
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(BUDGET_FILE, encoding="utf-8")
    serve = start_serve(tmp_path, name="serve", budgets=budgets, forward_endpoint=hop.url, args=serve_args)
    attach_log(serve.process)
    collector: TierCollectorService | None = None
    try:
        collector = start_tier_collector(
            tools,
            tmp_path,
            backends=[serve.grpc_endpoint],
            extra_env={"OTELCOL_TIER_RETRY_INITIAL_INTERVAL": "100ms", "OTELCOL_TIER_RETRY_MAX_INTERVAL": "500ms"},
        )
        attach_log(collector.process)
        acknowledged: list[tuple[int, int]] = []
        exporter = OTLPSpanExporter(endpoint=collector.otlp_grpc_endpoint, insecure=True, timeout=10)
        start = time.monotonic()
        number = 0
        while time.monotonic() - start < TRAFFIC_S:  # the traffic's pace, not a synchronisation
            spans = tick(number)
            number += 1
            if exporter.export(spans) == SpanExportResult.SUCCESS:
                acknowledged += _ids(spans)
            time.sleep(TICK_S)
        exporter.shutdown()
        counters = poll(
            lambda: found if (found := serve.counters())["spans_received"] >= len(acknowledged) else None,
            timeout=TIMEOUT_S,
            what="every span the Collector acknowledged taken by serve (its retries included)",
        )
        if "--wal-dir" in serve_args:  # the log turns over: what it holds goes out without a drain
            poll(
                lambda: True if set(_forwarded(hop)) >= set(acknowledged) else None,
                timeout=TIMEOUT_S,
                what="every acknowledged span forwarded",
            )
            counters = serve.counters()
    finally:
        serve.process.stop()  # SIGTERM: the drain forwards what is held (rootless traces unjudged)
        if collector is not None:
            collector.process.stop()
    return acknowledged, serve, counters


def _twenty_with_prompts(tracer: Tracer) -> None:
    """Twenty traces of agent_trace's shape, each model call carrying a 2.5 KB prompt (about 11 KB a trace)."""
    for _ in range(20):
        root = tracer.start_span("POST /ask", kind=SpanKind.SERVER, start_time=at(0))
        ctx = trace.set_span_in_context(root)
        tracer.start_span("retrieve docs", context=ctx, start_time=at(10)).end(end_time=at(70))
        for start in (80, 210):
            call = tracer.start_span("chat gpt-4o", context=ctx, kind=SpanKind.CLIENT, start_time=at(start))
            call.set_attribute("gen_ai.prompt", "p" * 2_500)
            call.end(end_time=at(start + 120))
        root.end(end_time=at(400))


def test_a_1_mb_log_behind_the_collector_carries_every_span_once(
    collector_tools: Tools, tmp_path: Path, hop: NextHop, attach_log: Callable[[ManagedProcess], None]
) -> None:
    """--wal-max-bytes 1000000, ten seconds of GenAI traces with prompts: every acknowledged span forwarded once."""

    def tick(number: int) -> list[ReadableSpan]:
        return record(_twenty_with_prompts, first_trace=number * 20 + 1)

    acknowledged, _, counters = _run(
        collector_tools,
        tmp_path,
        hop,
        attach_log,
        ["--wal-dir", str(tmp_path / "wal"), "--wal-max-bytes", "1000000", "--decision-wait", "0.5"],
        tick,
    )
    assert len(acknowledged) > 4 * 1_000_000 // 5_000  # several times what the log holds went through it
    assert _forwarded(hop) == Counter(acknowledged)
    assert counters["wal_segments_deleted"] > 0
    assert not list((tmp_path / "wal").glob("*.wal"))  # all settled, drained: nothing left


def test_a_rootless_flood_behind_the_collector_leaves_rooted_traces_judged(
    collector_tools: Tools, tmp_path: Path, hop: NextHop, attach_log: Callable[[ManagedProcess], None]
) -> None:
    """100 rootless traces a second past --max-traces 300: every span forwarded once, every rooted trace judged."""
    rooted: list[int] = []

    def tick(number: int) -> list[ReadableSpan]:
        spans: list[ReadableSpan] = []
        base = number * 11 + 1
        for offset in range(10):
            spans += [s for s in record(_children_only, first_trace=base + offset) if s.parent is not None]
        spans += record(agent_trace, first_trace=base + 10)
        rooted.append(base + 10)
        return spans

    acknowledged, _, counters = _run(
        collector_tools,
        tmp_path,
        hop,
        attach_log,
        ["--max-traces", "300", "--decision-wait", "0.5", "--max-wait", "600"],
        tick,
    )
    assert _forwarded(hop) == Counter(acknowledged)
    judged = {
        int.from_bytes(span.trace_id, "big")
        for _, _, span in hop.spans()
        if not span.parent_span_id and "latency_budget.verdict" in attributes_of(span.attributes)
    }
    acknowledged_traces = {trace_id for trace_id, _ in acknowledged}
    assert {trace_id for trace_id in rooted if trace_id in acknowledged_traces} <= judged
    assert counters["traces_forwarded_unjudged"] > 0
