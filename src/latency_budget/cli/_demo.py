"""``latency-budget demo``: run the simulated support assistant and print what its budgets said."""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, SynchronousMultiSpanProcessor
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from latency_budget._core.report import TraceReport
from latency_budget._core.wording import plural
from latency_budget._demo import EXAMPLE_BUDGETS_NAME, DemoRun, example_budgets, run_demo
from latency_budget._demo.run import demo_resource
from latency_budget._demo.scenario import APPLIED_LEVERS
from latency_budget._processor import ReportCallback
from latency_budget.cli._stats import optimisation, summarize
from latency_budget.export._otlp import PROTOCOLS, OtlpSettingError, OtlpTarget, otlp_target
from latency_budget.export.file import OtlpJsonFileSpanExporter
from latency_budget.export.sinks import report_sinks

from ._common import CliError, example_epilog, load_budgets_option, raw_help
from ._levers import analyse_levers
from ._output import OutputError, emit, finish_output
from ._progress import ProgressBar
from ._recorded import positive_int
from ._summary import closing_lines, summary_table
from ._where import where_lines

if TYPE_CHECKING:  # named LogExporter before SDK 1.39; only the type checker needs the name
    pass

__all__ = ["register"]

_DESCRIPTION = """\
Simulate an AI support assistant and watch its latency budgets being checked.

Simulated requests (retrieval, a semantic cache that can miss, an agent loop of model
calls to a small or a large model with growing context, streamed except for a legacy
client, and tool calls run in parallel or one after another, now and then repeated)
become real OpenTelemetry spans with GenAI semantic-convention attributes, which go
through LatencyBudgetProcessor with budgets.example.yaml. The summary ends with where
to win: every latency lever, estimated from the requests. Latencies come from seeded
distributions with slow tails, so a seed replays a run exactly. Nothing sleeps, and
by default nothing leaves the process: add --otlp-endpoint to send the spans (and one
log record per violation and per hint, and the budget metrics) to a Collector, or
--save-traces to try `check` and `report` on them."""

_SPANS_PER_REQUEST = 30  # an upper bound, to size the export queue so that no span is dropped
_LOGS_PER_REQUEST = 16  # likewise for the violation and hint log records
_METRIC_INTERVAL_MS = 5_000


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
            "latency-budget demo --apply streaming --seed 8 --save-traces after.jsonl   # to compare",
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
        "--apply",
        action="append",
        choices=tuple(APPLIED_LEVERS),
        default=[],
        metavar="LEVER",
        help="apply a latency lever to the simulated app, to compare a run before and after it "
        f"(latency-budget compare); the same seed draws the same requests: {_applied_help()}",
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
        help="send the spans, a log record per violation and per hint, and the budget metrics to an OTLP "
        "receiver such as a Collector, e.g. http://localhost:4317; without it, OTEL_EXPORTER_OTLP_ENDPOINT is "
        "used when set (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT alone sends the spans only)",
    )
    export.add_argument(
        "--otlp-protocol",
        choices=PROTOCOLS,
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


def _applied_help() -> str:
    return "; ".join(f"{name}: {what}" for name, what in APPLIED_LEVERS.items())


def run(args: argparse.Namespace) -> int:
    """Run the simulation, print sample requests and the summary."""
    config, budgets_label = load_budgets_option(args.budgets, example_budgets, f"{EXAMPLE_BUDGETS_NAME} (built in)")
    targets: list[tuple[str, _Counting]] = []
    otlp = _otlp_target(args)
    if otlp is not None:
        targets.append((otlp.label, otlp.spans))
    if args.save_traces:
        try:
            targets.append((args.save_traces, _Counting(OtlpJsonFileSpanExporter(args.save_traces, append=False))))
        except OSError as exc:
            raise OutputError(f"{args.save_traces}: cannot write: {exc.strerror or exc}") from None
    downstream: SpanProcessor | None = None
    if targets:
        multi = SynchronousMultiSpanProcessor()  # type: ignore[no-untyped-call]
        queue = max(2048, args.requests * _SPANS_PER_REQUEST)
        for _, exporter in targets:
            multi.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=queue, max_export_batch_size=512))
        downstream = multi
    sinks, close_signals = _signal_sinks(otlp, args.requests) if otlp is not None else ([], None)

    progress = ProgressBar(args.requests, "simulating")
    try:
        result = run_demo(
            config,
            requests=args.requests,
            concurrency=args.concurrency,
            seed=args.seed,
            downstream=downstream,
            on_progress=progress.update,
            on_report=sinks,
            resource=demo_resource(EXAMPLE_BUDGETS_NAME if args.budgets is None else None),
            applied=frozenset(args.apply),
        )
    finally:
        progress.close()
        if close_signals is not None:
            # When no span got through, the receiver is down: don't wait for logs and metrics too.
            close_signals(otlp is not None and otlp.spans.exported > 0)
    emit(_render(result, args, budgets_label))
    finish_output()

    produced = sum(request.span_count for request in result.requests)
    code = 0
    for name, counter in targets:
        lost = produced - counter.exported
        if lost:
            why = f": {counter.errors[0]}" if counter.errors else " (see the exporter's messages above)"
            print(
                f"latency-budget: could not export {lost} of {plural(produced, 'span')} to {name}{why}", file=sys.stderr
            )
            code = 2  # the surroundings failed; 1 means a budget failed
        else:
            print(f"Exported {plural(produced, 'span')} to {name}.", file=sys.stderr)
    return code


@dataclass(frozen=True)
class _OtlpTarget:
    """Where the demo's telemetry goes over OTLP."""

    label: str  # for people: the endpoint and protocol
    spans: _Counting
    exporters: OtlpTarget
    signals: bool  # also send the violation log records and the budget metrics


def _otlp_target(args: argparse.Namespace) -> _OtlpTarget | None:
    """The OTLP export, when asked for (--otlp-endpoint, or OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT), else none.

    Protocol and endpoint follow the rule of ``configure()`` (latency_budget.export._otlp),
    except that a bad value is an error here, not a warning.
    """
    env_endpoint = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    if args.otlp_endpoint is None and not env_endpoint:
        return None
    try:
        target = otlp_target(args.otlp_endpoint, args.otlp_protocol, strict=True, endpoint_name="--otlp-endpoint")
    except OtlpSettingError as exc:
        raise CliError(str(exc)) from None
    # Logs and metrics follow the generic endpoint only: a traces-only variable means traces only.
    signals = args.otlp_endpoint is not None or bool(os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
    return _OtlpTarget(target.describe("traces"), _Counting(target.span_exporter()), target, signals)


def _signal_sinks(target: _OtlpTarget, requests: int) -> tuple[list[ReportCallback], Callable[[bool], None] | None]:
    """Report sinks that send violation log records and budget metrics where the spans go.

    Returns the sinks and ``close(deliver)``: with ``deliver`` it flushes and stops their
    providers (each export bounded by its exporter's timeout); without, it abandons what
    is still queued, for a receiver known to be down.
    """
    if not target.signals:
        return [], None
    log_exporter, metric_exporter = target.exporters.log_exporter(), target.exporters.metric_exporter()
    resource = demo_resource()
    logger_provider = LoggerProvider(resource=resource, shutdown_on_exit=False)
    queue = max(2048, requests * _LOGS_PER_REQUEST)
    logger_provider.add_log_record_processor(BatchLogRecordProcessor(log_exporter, max_queue_size=queue))
    reader = PeriodicExportingMetricReader(metric_exporter, export_interval_millis=_METRIC_INTERVAL_MS)
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)

    def close(deliver: bool) -> None:
        if deliver:
            logger_provider.shutdown()
            meter_provider.shutdown()

    return report_sinks(logger_provider=logger_provider, meter_provider=meter_provider), close


def _render(result: DemoRun, args: argparse.Namespace, budgets_label: str) -> str:
    judged = result.judged()
    lines = [
        f"Simulated {plural(len(result.requests), 'support-assistant request')} (seed {result.seed}, "
        f"{args.concurrency} concurrent users) through LatencyBudgetProcessor; budgets from {budgets_label}.",
    ]
    for index in _sample(judged, args.show):
        request, report = judged[index]
        lines += ["", _request_heading(request.index, len(result.requests), request.describe(), report), report.table()]
    reports = [report for _, report in judged]
    summary = summarize(result.config, reports)
    over = f"{summary.violated} over an error-level budget"
    lines += ["", f"Summary of {plural(summary.requests, 'request')} ({over}):", summary_table(summary), ""]
    lines += closing_lines(summary, optimisation(reports))
    lines += ["", *where_lines(analyse_levers(reports, result.config))]
    missing = len(result.requests) - len(judged)
    if missing:
        lines.append(f"Warning: the processor made no report for {plural(missing, 'request')}.")
    lines += ["", *next_steps(args.save_traces)]
    return "\n".join(lines)


def next_steps(saved: str | None) -> list[str]:
    """What to run after the demo: look at its recording, then the three commands that bring budgets to your app."""
    if saved:
        look = f"latency-budget report {shlex.quote(saved)} --html report.html   # this run, by the demo's budgets"
    else:
        look = "latency-budget demo --save-traces demo.jsonl && latency-budget report demo.jsonl --html report.html"
    return [
        "Next: look at this run, then bring budgets to your own app in three commands:",
        f"  {look}",
        "  latency-budget init                  # 1. budgets.yaml, commented, to edit",
        "  OTEL_LATENCY_BUDGET_FILE=budgets.yaml OTEL_LATENCY_BUDGET_TRACES_FILE=traces.jsonl \\",
        "    opentelemetry-instrument python app.py   # 2. record your app (or configure(traces_file=...))",
        "  latency-budget check traces.jsonl -b budgets.yaml   # 3. judge the recording",
    ]


def _request_heading(index: int, total: int, description: str, report: TraceReport) -> str:
    if report.violated:
        verdict = f"OVER BUDGET: {', '.join(report.broken_stages('error'))}"
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
