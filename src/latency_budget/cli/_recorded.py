"""What ``check``, ``report`` and ``suggest`` share: where the traces come from, the budget
file, and judging every recorded request with :func:`latency_budget._replay.evaluate_spans`."""

from __future__ import annotations

import argparse
import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from latency_budget._config import BudgetConfig, load_budgets
from latency_budget._core.report import TraceReport
from latency_budget._replay import evaluate_spans
from latency_budget.cli._stats import RunSummary, summarize

from ._common import CliError, load_budgets_option, service_name
from ._inputs import MAX_JSON_DEPTH, InputLimits, TraceSet, parse_size, read_jaeger, read_trace_files
from ._output import warn
from ._summary import plural

__all__ = [
    "BUILTIN_LABEL",
    "Recorded",
    "add_budgets_argument",
    "add_trace_arguments",
    "load_config",
    "load_recorded",
    "load_traces",
    "percentile_arg",
    "positive_int",
]

BUILTIN_LABEL = "the built-in GenAI stages"
_MAX_TIMEOUT_S = 86_400.0
_BUILTIN_YAML = "version: 1\n"  # no stages: retrieval, model_call and tool_calls, tracked with the built-in matchers


def add_trace_arguments(parser: argparse.ArgumentParser) -> None:
    """TRACES files, or ``--jaeger URL --service NAME [--lookback 1h]``."""
    parser.add_argument(
        "traces",
        metavar="TRACES",
        nargs="*",
        help="trace files: OTLP JSON lines (the Collector's file exporter) or Jaeger JSON (/api/traces); "
        "'-' reads standard input; .gz files are decompressed",
    )
    live = parser.add_argument_group("live from Jaeger (instead of TRACES)")
    live.add_argument("--jaeger", metavar="URL", help="Jaeger query service, e.g. http://localhost:16686")
    live.add_argument(
        "--service", metavar="NAME", type=service_name, help="the service whose traces to fetch (with --jaeger)"
    )
    live.add_argument("--lookback", metavar="DURATION", default="1h", help="how far back to search (default: 1h)")
    live.add_argument(
        "--limit", metavar="N", type=positive_int, default=1000, help="most traces to fetch (default: 1000)"
    )
    live.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=_seconds,
        default=30.0,
        help="deadline for Jaeger's whole answer, connection included (default: 30)",
    )
    bounds = parser.add_argument_group("limits on the input (see docs/reliability.md)")
    defaults = InputLimits()
    bounds.add_argument(
        "--max-input-size",
        metavar="SIZE",
        type=_size,
        default=defaults.max_bytes,
        help="largest file, standard input or Jaeger answer, after decompression (default: 1G)",
    )
    bounds.add_argument(
        "--max-line-size",
        metavar="SIZE",
        type=_size,
        default=defaults.max_line_bytes,
        help="longest line of JSON lines (default: 256M)",
    )
    bounds.add_argument(
        "--max-json-depth",
        metavar="N",
        type=_depth,
        default=defaults.max_depth,
        help=f"deepest nesting of JSON objects and arrays (default: {defaults.max_depth}; at most {MAX_JSON_DEPTH})",
    )
    bounds.add_argument(
        "--max-spans",
        metavar="N",
        type=positive_int,
        default=defaults.max_spans,
        help=f"most spans over all inputs (default: {defaults.max_spans:,})",
    )


def add_budgets_argument(parser: argparse.ArgumentParser, *, required: bool) -> None:
    """``--budgets FILE``: the stages (and, for ``check``, the budgets) to judge by."""
    parser.add_argument(
        "--budgets",
        "-b",
        metavar="FILE",
        required=required,
        help="budget YAML file"
        + ("" if required else f" (default: {BUILTIN_LABEL}: retrieval, model_call, tool_calls)"),
    )


@dataclass(frozen=True, slots=True)
class Recorded:
    """Recorded traces judged under a budget configuration."""

    config: BudgetConfig
    budgets_label: str
    traces: TraceSet
    reports: list[TraceReport]
    summary: RunSummary

    def intro(self) -> str:
        """``1000 requests (1000 traces, 15000 spans) from traces.jsonl, budgets from budgets.yaml``,
        with what reading the input repaired (duplicate spans left out, parent cycles broken)."""
        repairs = self.traces.repairs
        mended = [
            *([plural(repairs.duplicate_spans, "duplicate span") + " left out"] if repairs.duplicate_spans else []),
            *([plural(repairs.parent_cycles, "parent cycle") + " broken"] if repairs.parent_cycles else []),
        ]
        return (
            f"{plural(self.summary.requests, 'request')} ({plural(self.traces.trace_count, 'trace')}, "
            f"{plural(len(self.traces.spans), 'span')}{''.join(', ' + m for m in mended)}) "
            f"from {self.traces.source_label}; budgets from {self.budgets_label}"
        )


def load_config(path: str | None) -> tuple[BudgetConfig, str]:
    """The budget file (errors exit 2) or the built-in GenAI stages, with a label for people."""
    return load_budgets_option(path, _builtin_budgets, BUILTIN_LABEL)


def _builtin_budgets() -> BudgetConfig:
    return load_budgets(text=_BUILTIN_YAML, source="<built-in>")


def load_recorded(args: argparse.Namespace) -> Recorded:
    """Read the traces named by ``args``, judge them, and refuse input with nothing to judge."""
    with cycle_collection_paused():
        return _load_recorded(args)


@contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a recording is read and judged.

    Reading allocates millions of objects that live to the end (spans, reports) and
    form no reference cycles (JSON values, tuples, slotted records), and every full
    collection walks all of them: at 250,000 spans the collector took half the CPU
    time of ``report``, and more the larger the file. Reference counting still frees
    what dies; the collector runs again as usual afterwards.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _load_recorded(args: argparse.Namespace) -> Recorded:
    config, label = load_config(args.budgets)
    traces = load_traces(args)
    reports = evaluate_spans(config, traces.spans)
    if not reports and not config.every_root:
        if config.requests is not None:
            rules, fix = "the 'requests' rules", "check its requests rules"
        else:  # the default: a server or consumer span, a remote parent, an agent, or a model call
            rules = "the default 'requests' rule (server, consumer, remote parent, agent or workflow, model call)"
            fix = "'requests: all' judges every local root; 'latency-budget doctor' lists AI spans in no stage"
        raise CliError(
            f"{traces.source_label}: no local root is a request under {rules} of {label} "
            f"({len(traces.spans)} spans in {traces.trace_count} traces); {fix}"
        )
    summary = summarize(config, reports)
    if summary.stage_span_count == 0:
        raise CliError(
            f"{traces.source_label}: no span matched a stage of {label} "
            f"({len(traces.spans)} spans in {traces.trace_count} traces; stages: {', '.join(config.stage_names)}); "
            "check --budgets and its match rules"
        )
    return Recorded(config, label, traces, reports, summary)


def load_traces(args: argparse.Namespace) -> TraceSet:
    """The traces named by ``args`` (files, or Jaeger), within the input limits; none at all is an error."""
    with cycle_collection_paused():
        return _load_traces(args)


def _load_traces(args: argparse.Namespace) -> TraceSet:
    limits = InputLimits(
        max_bytes=args.max_input_size,
        max_line_bytes=args.max_line_size,
        max_depth=args.max_json_depth,
        max_spans=args.max_spans,
    )
    if args.jaeger:
        if args.traces:
            raise CliError("give trace files or --jaeger, not both")
        if not args.service:
            raise CliError("--jaeger needs --service NAME (the service whose traces to check)")
        traces = read_jaeger(
            args.jaeger, args.service, args.lookback, limit=args.limit, timeout_s=args.timeout, limits=limits
        )
        if not traces.spans:
            raise CliError(f"{traces.sources[0]}: Jaeger returned no traces")
    else:
        if not args.traces:
            raise CliError("no traces given: name trace files (or '-'), or use --jaeger URL --service NAME")
        if args.service:
            raise CliError("--service is only used with --jaeger")
        traces = read_trace_files(args.traces, limits)
        if not traces.spans:
            raise CliError(f"{traces.source_label}: no spans found")
    for message in traces.repairs.messages():
        warn(f"{traces.source_label}: {message}")
    return traces


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (and of at most 18 digits)."""
    try:
        if len(text.strip()) > 18:
            raise ValueError(text)
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value <= _MAX_TIMEOUT_S:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, at most a day, got {text!r}")
    return value


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _depth(text: str) -> int:
    value = positive_int(text)
    if value > MAX_JSON_DEPTH:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_JSON_DEPTH}, got {value}")
    return value


def percentile_arg(text: str) -> float:
    """An argparse type: ``p50``, ``p95``, ``p99`` (or ``50``, ``95``, ``99``, or ``p90`` and the like)."""
    raw = text.strip().lower().removeprefix("p")
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected p50, p95 or p99, got {text!r}") from None
    if not 0 < value < 100:
        raise argparse.ArgumentTypeError(f"expected a percentile between p0 and p100, got {text!r}")
    return value


def add_percentile_argument(parser: argparse.ArgumentParser, *, purpose: str) -> None:
    """``--percentile/-p P`` (p50, p95 or p99; default p95), described by ``purpose``."""
    parser.add_argument(
        "--percentile",
        "-p",
        type=percentile_arg,
        default=95.0,
        metavar="P",
        help=f"{purpose}: p50, p95 or p99 (default: p95)",
    )
