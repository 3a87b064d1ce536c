"""``latency-budget demo``: run the simulated support assistant and print what its budgets said."""

from __future__ import annotations

import argparse
import os
import sys
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, SynchronousMultiSpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from latency_budget.config import BudgetConfig, BudgetConfigError, load_budgets
from latency_budget.demo import EXAMPLE_BUDGETS_NAME, DemoRun, example_budgets, run_demo
from latency_budget.demo.otlp_json import OtlpJsonLinesExporter
from latency_budget.report import TraceReport
from latency_budget.stats import summarize

from ._common import CliError, example_epilog, raw_help
from ._progress import ProgressBar
from ._recorded import positive_int
from ._summary import closing_lines, summary_table

__all__ = ["register"]

_DESCRIPTION = """\
Simulate an AI support assistant and watch its latency budgets being checked.

Simulated requests (retrieval, a semantic cache, an agent loop of streamed model
calls, and tool calls run in parallel or one after another) become real OpenTelemetry
spans with GenAI semantic-convention attributes, which go through
LatencyBudgetProcessor with budgets.example.yaml. Latencies come from seeded
distributions with slow tails, so a seed replays a run exactly. Nothing sleeps, and
by default nothing leaves the process: add --otlp-endpoint to send the spans to a
Collector, or --save-traces to try `check` and `report` on them."""

_PROTOCOLS = ("grpc", "http/protobuf")
_SPANS_PER_REQUEST = 30  # an upper bound, to size the export queue so that no span is dropped


def register(commands: Any) -> None:
    """Add the ``demo`` subcommand."""
    parser = commands.add_parser(
        "demo",
        help="simulate an AI support assistant and check its latency budgets",
        description=_DESCRIPTION,
        epilog=example_epilog(
            "latency-budget demo",
            "latency-budget demo --requests 5000 --seed 42 --show 1",
            "latency-budget demo --budgets my-budgets.yaml --save-traces traces.jsonl",
            "latency-budget demo --otlp-endpoint http://localhost:4317      # to a Collector",
            "OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf \\",
            "    latency-budget demo",
        ),
        formatter_class=raw_help(),
    )
    parser.add_argument(
        "--requests", "-n", type=positive_int, default=200, metavar="N", help="requests to simulate (default: 200)"
    )
    parser.add_argument(
        "--concurrency",
        "-c",
        type=positive_int,
        default=4,
        metavar="N",
        help="simulated users sending requests at once (default: 4)",
    )
    parser.add_argument(
        "--seed", type=int, default=7, metavar="N", help="random seed; the same seed replays the same run (default: 7)"
    )
    parser.add_argument(
        "--budgets", "-b", metavar="FILE", help=f"budget YAML file (default: the built-in {EXAMPLE_BUDGETS_NAME})"
    )
    parser.add_argument(
        "--show",
        type=int,
        default=3,
        metavar="N",
        help="requests to print in full before the summary (default: 3; 0: none)",
    )
    export = parser.add_argument_group("export (default: nothing leaves the process)")
    export.add_argument(
        "--otlp-endpoint",
        metavar="URL",
        help="send the spans to an OTLP receiver such as a Collector, e.g. http://localhost:4317; "
        "without it, OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT is used when set",
    )
    export.add_argument(
        "--otlp-protocol",
        choices=_PROTOCOLS,
        help="OTLP transport (default: OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL, else grpc)",
    )
    export.add_argument(
        "--save-traces",
        metavar="FILE",
        help="also write the spans as OTLP JSON lines, as the Collector's file exporter does",
    )
    parser.set_defaults(run=run)


@dataclass
class _Counting(SpanExporter):
    """Counts what an exporter accepted and refused, to report it at the end."""

    inner: SpanExporter
    exported: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    def export(self, spans: Any) -> SpanExportResult:
        batch: list[ReadableSpan] = list(spans)
        try:
            result = self.inner.export(batch)
        except Exception as exc:  # an exporter bug must not hide the demo's results
            self.errors.append(str(exc))
            result = SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self.exported += len(batch)
        else:
            self.failed += len(batch)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


def run(args: argparse.Namespace) -> int:
    """Run the simulation, print sample requests and the summary."""
    config, budgets_label = _budgets(args.budgets)
    targets: list[tuple[str, _Counting]] = []
    endpoint = _otlp_target(args)
    if endpoint is not None:
        targets.append(endpoint)
    if args.save_traces:
        try:
            targets.append((args.save_traces, _Counting(OtlpJsonLinesExporter(args.save_traces))))
        except OSError as exc:
            raise CliError(f"{args.save_traces}: cannot write: {exc.strerror or exc}") from None
    downstream: SpanProcessor | None = None
    if targets:
        multi = SynchronousMultiSpanProcessor()  # type: ignore[no-untyped-call]
        queue = max(2048, args.requests * _SPANS_PER_REQUEST)
        for _, exporter in targets:
            multi.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=queue, max_export_batch_size=512))
        downstream = multi

    progress = ProgressBar(args.requests, "simulating")
    try:
        result = run_demo(
            config,
            requests=args.requests,
            concurrency=args.concurrency,
            seed=args.seed,
            downstream=downstream,
            on_progress=progress.update,
        )
    finally:
        progress.close()
    print(_render(result, args, budgets_label))
    sys.stdout.flush()

    produced = sum(request.span_count for request in result.requests)
    code = 0
    for name, counter in targets:
        lost = produced - counter.exported
        if lost:
            why = f": {counter.errors[0]}" if counter.errors else " (see the exporter's messages above)"
            print(f"latency-budget: could not export {lost} of {produced} spans to {name}{why}", file=sys.stderr)
            code = 1
        else:
            print(f"Exported {produced} spans to {name}.", file=sys.stderr)
    return code


def _budgets(path: str | None) -> tuple[BudgetConfig, str]:
    if path is None:
        return example_budgets(), f"{EXAMPLE_BUDGETS_NAME} (built in)"
    try:
        return load_budgets(path), path
    except BudgetConfigError as exc:
        raise CliError(str(exc)) from None


def _otlp_target(args: argparse.Namespace) -> tuple[str, _Counting] | None:
    """The OTLP exporter: argument > OTEL_EXPORTER_OTLP_TRACES_* > OTEL_EXPORTER_OTLP_* > none."""
    env_endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    endpoint = args.otlp_endpoint
    if endpoint is None and not env_endpoint:
        return None
    protocol = (
        args.otlp_protocol
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    )
    if protocol not in _PROTOCOLS:
        raise CliError(f"OTLP protocol {protocol!r} is not supported; use one of: {', '.join(_PROTOCOLS)}")
    shown = endpoint or env_endpoint or ""
    if endpoint is not None:
        parts = urllib.parse.urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise CliError(f"--otlp-endpoint: expected a URL such as http://localhost:4317, got {endpoint!r}")
    exporter: SpanExporter
    if protocol == "grpc":
        # Imported here: gRPC takes a moment to load, and only this path needs it.
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter as GrpcExporter,
        )

        exporter = GrpcExporter(endpoint=endpoint) if endpoint else GrpcExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
            OTLPSpanExporter as HttpExporter,
        )

        if endpoint is not None and urllib.parse.urlsplit(endpoint).path in ("", "/"):
            endpoint = endpoint.rstrip("/") + "/v1/traces"  # the signal path, as for OTEL_EXPORTER_OTLP_ENDPOINT
            shown = endpoint
        exporter = HttpExporter(endpoint=endpoint) if endpoint else HttpExporter()
    return f"{shown} (OTLP {protocol})", _Counting(exporter)


def _render(result: DemoRun, args: argparse.Namespace, budgets_label: str) -> str:
    judged = result.judged()
    lines = [
        f"Simulated {len(result.requests)} support-assistant requests (seed {result.seed}, "
        f"{args.concurrency} concurrent users) through LatencyBudgetProcessor; budgets from {budgets_label}.",
    ]
    for index in _sample(judged, args.show):
        request, report = judged[index]
        lines += ["", _request_heading(request.index, len(result.requests), request.describe(), report), report.table()]
    summary = summarize(result.config, [report for _, report in judged])
    over = f"{summary.violated} over an error-level budget"
    lines += ["", f"Summary of {summary.requests} requests ({over}):", summary_table(summary), ""]
    lines += closing_lines(summary)
    missing = len(result.requests) - len(judged)
    if missing:
        lines.append(f"Warning: the processor made no report for {missing} requests.")
    return "\n".join(lines)


def _request_heading(index: int, total: int, description: str, report: TraceReport) -> str:
    if report.violated:
        verdict = f"OVER BUDGET: {', '.join(report.over_budget_stages) or 'total'}"
    elif report.violations:
        verdict = "within budget (with warnings)"
    else:
        verdict = "within budget"
    trace = f"{report.trace_id:032x}" if report.trace_id is not None else "-"
    profile = "" if report.profile == "default" else f", profile {report.profile}"
    return f"Request {index + 1} of {total}: {description} -- {verdict}\n  trace {trace}{profile}"


def _sample(judged: list[tuple[Any, TraceReport]], show: int) -> list[int]:
    """Which requests to print: the first within budget, the first over it, the slowest, then the earliest."""
    if show <= 0 or not judged:
        return []
    picks: list[int] = []
    first_ok = next((i for i, (_, r) in enumerate(judged) if not r.violations), None)
    first_over = next((i for i, (_, r) in enumerate(judged) if r.violated), None)
    slowest = max(range(len(judged)), key=lambda i: judged[i][1].total_actual_ms)
    for candidate in (first_ok, first_over, slowest, *range(len(judged))):
        if candidate is not None and candidate not in picks:
            picks.append(candidate)
        if len(picks) == show:
            break
    return sorted(picks)
