"""Overhead of LatencyBudgetProcessor against the SDK's own cost, as a ratio.

Run:  python benchmarks/overhead.py            (full: about a minute)
      python benchmarks/overhead.py --quick --fail-above 2.0   (what CI runs)

Both providers in a round have the same downstream (a BatchSpanProcessor whose exporter
discards); the candidate adds LatencyBudgetProcessor in front of it. Rounds alternate
which provider goes first, in one process, and the ratio of per-trace times is reported
as the median and the spread (min..max) over rounds. Wall-clock numbers are noisy on a
shared machine; ratios taken within one round are not.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from latency_budget import LatencyBudgetProcessor, load_budgets

BUDGETS = """
version: 1
total_ms: 3000
stages:
  retrieval: {budget_ms: 300}
  model_call: {budget_ms: 2000, first_token_ms: 500}
  tool_calls: {budget_ms: 500}
"""

HTTP_SERVER = {
    "http.request.method": "POST",
    "http.route": "/v1/answer",
    "url.path": "/v1/answer",
    "url.scheme": "https",
    "server.address": "api.example.com",
    "server.port": 443,
    "user_agent.original": "python-httpx/0.27",
    "http.response.status_code": 200,
}
HTTP_CLIENT = {
    "http.request.method": "GET",
    "url.full": "https://internal.example.com/profile/42",
    "server.address": "internal.example.com",
    "server.port": 443,
    "http.response.status_code": 200,
    "network.protocol.version": "1.1",
}
DB = {
    "db.system.name": "postgresql",
    "db.namespace": "support",
    "db.operation.name": "SELECT",
    "db.query.text": "SELECT * FROM tickets WHERE id = $1",
    "server.address": "db.internal",
}
EMBED = {
    "gen_ai.operation.name": "embeddings",
    "gen_ai.provider.name": "openai",
    "gen_ai.request.model": "text-embedding-3-small",
    "gen_ai.usage.input_tokens": 42,
    "server.address": "api.openai.com",
}
CHAT = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "openai",
    "gen_ai.request.model": "gpt-4o-mini",
    "gen_ai.request.temperature": 0.2,
    "gen_ai.request.max_tokens": 512,
    "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
    "gen_ai.usage.input_tokens": 812,
    "gen_ai.usage.output_tokens": 163,
    "gen_ai.response.time_to_first_chunk": 0.31,
    "server.address": "api.openai.com",
}
TOOL = {
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.tool.name": "lookup_order",
    "gen_ai.tool.call.id": "call_abc123",
    "gen_ai.tool.type": "function",
    "gen_ai.provider.name": "openai",
}


class DiscardExporter(SpanExporter):
    """Accepts and forgets every batch, so export cost does not colour the ratio."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def standard_trace(tracer: trace.Tracer) -> None:
    """1 root, 3 stage spans and 6 unmatched spans, each with 5-10 attributes."""
    with tracer.start_as_current_span("POST /v1/answer", kind=trace.SpanKind.SERVER, attributes=HTTP_SERVER):
        with tracer.start_as_current_span("GET profile", kind=trace.SpanKind.CLIENT, attributes=HTTP_CLIENT):
            pass
        with tracer.start_as_current_span("SELECT tickets", kind=trace.SpanKind.CLIENT, attributes=DB):
            pass
        with tracer.start_as_current_span("embeddings text-embedding-3-small", attributes=EMBED):
            pass
        with tracer.start_as_current_span("SELECT documents", kind=trace.SpanKind.CLIENT, attributes=DB):
            pass
        with tracer.start_as_current_span("chat gpt-4o-mini", kind=trace.SpanKind.CLIENT, attributes=CHAT):
            pass
        with (
            tracer.start_as_current_span("execute_tool lookup_order", attributes=TOOL),
            tracer.start_as_current_span("GET order", kind=trace.SpanKind.CLIENT, attributes=HTTP_CLIENT),
        ):
            pass
        with tracer.start_as_current_span("render answer", attributes={"app.template": "answer", "app.locale": "en"}):
            pass


@dataclass
class Case:
    name: str
    workload: Callable[[trace.Tracer], None]


CASES = {"standard": Case("standard AI trace (1 root, 3 stage, 6 unmatched spans)", standard_trace)}


def _time_traces(tracer: trace.Tracer, workload: Callable[[trace.Tracer], None], traces: int) -> float:
    gc.collect()
    start = time.perf_counter()
    for _ in range(traces):
        workload(tracer)
    return (time.perf_counter() - start) / traces


def measure(case: Case, rounds: int, traces: int) -> list[float]:
    """Per-round ratios candidate/baseline for one case."""
    config = load_budgets(text=BUDGETS)
    baseline = TracerProvider(shutdown_on_exit=False)
    baseline.add_span_processor(BatchSpanProcessor(DiscardExporter()))
    candidate = TracerProvider(shutdown_on_exit=False)
    candidate.add_span_processor(LatencyBudgetProcessor(config, BatchSpanProcessor(DiscardExporter())))
    base_tracer, cand_tracer = baseline.get_tracer("bench"), candidate.get_tracer("bench")
    _time_traces(base_tracer, case.workload, traces // 4)  # warm up both
    _time_traces(cand_tracer, case.workload, traces // 4)
    ratios = []
    for n in range(rounds):
        if n % 2 == 0:
            base = _time_traces(base_tracer, case.workload, traces)
            cand = _time_traces(cand_tracer, case.workload, traces)
        else:
            cand = _time_traces(cand_tracer, case.workload, traces)
            base = _time_traces(base_tracer, case.workload, traces)
        ratios.append(cand / base)
    baseline.shutdown()
    candidate.shutdown()
    return ratios


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=sorted(CASES), action="append", help="cases to run (default: all)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--traces", type=int, default=2000, help="traces per provider per round")
    parser.add_argument("--quick", action="store_true", help="few short rounds: a smoke check, not a figure")
    parser.add_argument("--fail-above", type=float, default=None, help="exit 1 when a median ratio exceeds this")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.traces = 5, 500
    failed = False
    for key in args.case or sorted(CASES):
        case = CASES[key]
        ratios = measure(case, args.rounds, args.traces)
        median = statistics.median(ratios)
        print(
            f"{key:<10} {case.name}: ratio median {median:.3f} "
            f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {args.rounds} rounds x {args.traces} traces)"
        )
        if args.fail_above is not None and median > args.fail_above:
            print(f"{key}: median ratio {median:.3f} is above {args.fail_above}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
