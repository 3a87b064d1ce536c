"""The collector tier under a crash and a change of its backend list: the real Collector in front of three serves.

A real Collector runs collector-tier.yaml (``load_balancing`` by trace id) in front of
three ``latency-budget serve`` processes, each with its write-ahead log (``--wal-dir``),
forwarding to one OTLP/gRPC receiver that keeps every request, so a span forwarded twice
is seen twice. Traces arrive in two parts, a trace's children first and its root a few
traces later, for several seconds.

- ``kill -9`` of one instance while traces arrive, then a restart on the same log: no
  trace is lost, none is forwarded twice, none is judged on part of its spans (the root's
  stage times are those of the whole trace). Without ``--wal-dir`` this test fails: what
  the killed instance had acknowledged is gone.
- The backend list grows from two instances to three while traces are open: a trace whose
  root is routed to another instance than its children is split. Nothing is lost or sent
  twice; the part with the root is judged on what reached it, and the rootless part is
  forwarded unjudged after ``--max-wait``, counted in ``traces_forwarded_unjudged`` and
  ``traces_partial``, its spans marked ``latency_budget.partial.reason=no_root``
  (docs/collector-tier.md, "Durability" and "Partial traces").

Waiting is polling the health counters and the receiver, with generous deadlines; the
sender paces its requests (it is the traffic, not a synchronisation).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from latency_budget._serve.otlp import attributes_of
from tests.serve.harness import NextHop, record
from tests.serve.test_command import BUDGET_FILE
from tests.serve.test_judging import agent_trace

from .services import (
    ManagedProcess,
    ServeService,
    TierCollectorService,
    Tools,
    poll,
    start_serve,
    start_tier_collector,
)

pytestmark = pytest.mark.e2e

SPANS = 4  # agent_trace: the root, a retrieval of 60 ms and two model calls of 120 ms
RETRIEVAL_MS, MODEL_MS = 60.0, 240.0  # the stage times of the whole trace
ROOT_LAG = 5  # a trace's root is sent this many traces after its children
TIMEOUT_S = 180.0


@pytest.fixture
def hop() -> Iterator[NextHop]:
    next_hop = NextHop()
    yield next_hop
    next_hop.stop()


@dataclass
class Tier:
    serves: list[ServeService]
    collector: TierCollectorService
    started: list[ManagedProcess]


def _start_tier(
    tools: Tools,
    tmp_path: Path,
    hop: NextHop,
    attach_log: Callable[[ManagedProcess], None],
    *,
    routed: int,
    max_wait: str,
) -> Tier:
    """Three serves with their logs; the tier Collector routing to the first ``routed`` of them."""
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text(BUDGET_FILE, encoding="utf-8")
    serves: list[ServeService] = []
    started: list[ManagedProcess] = []
    try:
        for index in range(3):
            serve = start_serve(
                tmp_path,
                name=f"serve-{index}",
                budgets=budgets,
                forward_endpoint=hop.url,
                args=[
                    *("--decision-wait", "3", "--max-wait", max_wait, "--reports", "none"),
                    *("--wal-dir", str(tmp_path / f"wal-{index}")),
                ],
            )
            serves.append(serve)
            started.append(serve.process)
            attach_log(serve.process)
        collector = _collector(tools, tmp_path, serves[:routed])
        started.append(collector.process)
        attach_log(collector.process)
    except BaseException:
        for process in reversed(started):
            process.stop()
        raise
    return Tier(serves, collector, started)


def _collector(tools: Tools, tmp_path: Path, serves: list[ServeService]) -> TierCollectorService:
    return start_tier_collector(
        tools,
        tmp_path,
        backends=[serve.grpc_endpoint for serve in serves],
        # Retry a down instance often, so a restarted one gets its queue back well within --decision-wait.
        extra_env={"OTELCOL_TIER_RETRY_INITIAL_INTERVAL": "100ms", "OTELCOL_TIER_RETRY_MAX_INTERVAL": "500ms"},
    )


def _traces(count: int) -> list[tuple[list[ReadableSpan], list[ReadableSpan]]]:
    """``count`` traces (ids 1 to ``count``), each as (its children, its root)."""
    traces = []
    for trace_id in range(1, count + 1):
        spans = record(agent_trace, first_trace=trace_id)
        traces.append(([s for s in spans if s.parent is not None], [s for s in spans if s.parent is None]))
    return traces


class Sender(threading.Thread):
    """Sends each trace's children, and the root of the trace ``ROOT_LAG`` before, every ``pace_s`` seconds."""

    def __init__(self, endpoint: str, traces: list[tuple[list[ReadableSpan], list[ReadableSpan]]], pace_s: float):
        super().__init__(name="e2e-sender", daemon=True)
        self.exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=30)
        self.traces = traces
        self.pace_s = pace_s
        self.sent = 0  # traces whose children are sent
        self.failed = 0

    def run(self) -> None:
        count = len(self.traces)
        for index in range(count + ROOT_LAG):
            batch = list(self.traces[index][0]) if index < count else []
            if index >= ROOT_LAG:
                batch += self.traces[index - ROOT_LAG][1]
            if self.exporter.export(batch) != SpanExportResult.SUCCESS:
                self.failed += 1
            self.sent = min(index + 1, count)
            time.sleep(self.pace_s)
        self.exporter.shutdown()


def _received(hop: NextHop) -> Counter[tuple[int, int]]:
    """How many times each (trace id, span id) reached the receiver."""
    return Counter((int.from_bytes(s.trace_id, "big"), int.from_bytes(s.span_id, "big")) for _, _, s in hop.spans())


def _settled(serves: list[ServeService]) -> bool:
    """Nothing held or queued in any instance."""
    for serve in serves:
        held = serve.health()["held"]
        if held["traces"] or held["forward_queue_spans"]:
            return False
    return True


def _all_delivered(
    hop: NextHop, tier: Tier, spans: int, what: str
) -> tuple[Counter[tuple[int, int]], list[dict[str, int]]]:
    """Once ``spans`` distinct spans arrived and no instance holds anything: each span's count, the counters."""

    def probe() -> Counter[tuple[int, int]] | None:
        seen = _received(hop)
        return seen if len(seen) == spans and _settled(tier.serves) else None

    seen = poll(probe, timeout=TIMEOUT_S, what=what)
    return seen, [serve.counters() for serve in tier.serves]


def _send(endpoint: str, batches: list[list[ReadableSpan]]) -> None:
    """Export each batch through the SDK's OTLP/gRPC exporter, one request each."""
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True, timeout=30)
    try:
        for batch in batches:
            assert exporter.export(batch) == SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def _roots(hop: NextHop) -> dict[int, list[dict[str, object]]]:
    """Each trace's forwarded roots' attributes."""
    roots: dict[int, list[dict[str, object]]] = {}
    for _, _, span in hop.spans():
        if not span.parent_span_id:
            roots.setdefault(int.from_bytes(span.trace_id, "big"), []).append(attributes_of(span.attributes))
    return roots


def _judged_whole(root: dict[str, object]) -> bool:
    return (
        root.get("latency_budget.stages.retrieval.actual_ms") == RETRIEVAL_MS
        and root.get("latency_budget.stages.model_call.actual_ms") == MODEL_MS
    )


def _stop(tier: Tier) -> None:
    for process in reversed(tier.started):
        process.stop()


def test_kill_9_of_an_instance_mid_stream_loses_nothing_and_judges_each_trace_once_whole(
    otel_tools: Tools, tmp_path: Path, hop: NextHop, attach_log: Callable[[ManagedProcess], None]
) -> None:
    """kill -9 of one serve while traces arrive, restarted on its log: every span once, each trace judged once whole."""
    traces = _traces(240)
    tier = _start_tier(otel_tools, tmp_path, hop, attach_log, routed=3, max_wait="60")
    try:
        victim = tier.serves[1]
        sender = Sender(tier.collector.otlp_grpc_endpoint, traces, pace_s=0.03)
        sender.start()

        # Kill it while it holds open traces it acknowledged and has no batch on its way out
        # (a batch the next hop took in the instant before the kill would be sent again:
        # the log's one at-least-once window, docs/collector-tier.md "Durability").
        def holding() -> bool | None:
            health = victim.health()
            held = health["held"]
            return True if held["traces"] >= 5 and not held["forward_queue_spans"] else None

        poll(holding, timeout=TIMEOUT_S, what="the victim holding open traces")
        assert victim.process.kill() == -9
        killed_at = sender.sent
        assert killed_at < len(traces)  # traces are still arriving
        # Traces go on arriving while it is down: the Collector queues its share.
        poll(
            lambda: True if sender.sent >= min(len(traces), killed_at + 20) else None,
            timeout=TIMEOUT_S,
            what="20 more traces sent",
        )
        victim.process.start()
        sender.join(TIMEOUT_S)
        assert not sender.is_alive()
        assert sender.failed == 0

        seen, counters = _all_delivered(hop, tier, len(traces) * SPANS, "every span of every trace at the next hop")
    finally:
        _stop(tier)

    duplicates = {key: n for key, n in seen.items() if n > 1}
    assert duplicates == {}, f"forwarded more than once: {sorted(duplicates)[:10]}"
    roots = _roots(hop)
    assert sorted(roots) == list(range(1, len(traces) + 1))
    for trace_id, found in roots.items():
        assert len(found) == 1, trace_id
        assert "latency_budget.verdict" in found[0], trace_id
        assert _judged_whole(found[0]), (trace_id, found[0])
    restarted = counters[1]
    assert restarted["wal_spans_replayed"] > 0  # it held acknowledged spans when it was killed
    assert restarted["wal_traces_replayed"] > 0
    assert restarted["wal_spans_lost"] == 0
    for found in counters:
        assert found["traces_forwarded_unjudged"] == 0, found
        assert found["traces_partial"] == 0, found  # replayed traces are whole again
        assert found["spans_dropped"] == 0, found
        assert found["spans_late"] == 0, found


def test_a_backend_added_while_traces_are_open_splits_the_rerouted_ones_and_counts_them(
    otel_tools: Tools, tmp_path: Path, hop: NextHop, attach_log: Callable[[ManagedProcess], None]
) -> None:
    """Two backends to three mid-trace: nothing lost or doubled; a split trace's rootless part is counted unjudged."""
    traces = _traces(90)
    tier = _start_tier(otel_tools, tmp_path, hop, attach_log, routed=2, max_wait="5")
    try:
        # Every trace's children, through the two-instance list, held open (no root yet).
        _send(tier.collector.otlp_grpc_endpoint, [children for children, _ in traces])
        poll(
            lambda: True if sum(s.counters()["spans_received"] for s in tier.serves) == len(traces) * 3 else None,
            timeout=TIMEOUT_S,
            what="every child held by the first two instances",
        )
        # The list changes: the Collector restarted with the third instance in it (a static resolver's only way).
        tier.collector.process.stop()
        tier.started.remove(tier.collector.process)
        tier.collector = _collector(otel_tools, tmp_path, tier.serves)
        tier.started.append(tier.collector.process)
        attach_log(tier.collector.process)
        _send(tier.collector.otlp_grpc_endpoint, [root for _, root in traces])
        seen, counters = _all_delivered(
            hop, tier, len(traces) * SPANS, "every span at the next hop, split traces' rootless parts after --max-wait"
        )
    finally:
        _stop(tier)

    assert max(seen.values()) == 1  # nothing forwarded twice
    roots = _roots(hop)
    assert all(len(found) == 1 for found in roots.values())
    split = [trace_id for trace_id, found in roots.items() if not _judged_whole(found[0])]
    # Consistent hashing moves about a third of the traces to the new instance: those are split,
    # their roots judged alone where they went, their children forwarded unjudged where they were.
    assert 0 < len(split) < len(traces)
    assert sum(c["traces_forwarded_unjudged"] for c in counters) == len(split)  # their children, counted
    assert sum(c["traces_partial"] for c in counters) == len(split)  # ... as partial, where they were
    for _, _, span in hop.spans():  # each split trace's children marked; nothing of a whole one
        if span.parent_span_id:
            reason = attributes_of(span.attributes).get("latency_budget.partial.reason")
            split_trace = int.from_bytes(span.trace_id, "big") in split
            assert reason == ("no_root" if split_trace else None), (span.trace_id.hex(), reason)
    assert sum(c["traces_judged"] for c in counters) == len(traces)
    assert all(c["spans_dropped"] == 0 for c in counters)
