"""What ``check``, ``report`` and ``suggest`` share: where the traces come from, the budget
file, and judging every recorded request with :func:`latency_budget._replay.judge_roots`.

Trace files are judged as they are read, trace by trace (:class:`TraceWindow`): of each
request only its report is kept (stage actuals, violations, and the stage calls the levers
read), and of the spans only those of the slowest request, for the HTML waterfall. See
docs/cli.md, "What a recording costs".
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import itertools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from latency_budget import _attributes as attr
from latency_budget._config import BudgetConfig, load_budgets
from latency_budget._core.quality_reader import EVALUATION_EVENTS, RecordingQuality
from latency_budget._core.report import TraceReport
from latency_budget._core.wording import plural
from latency_budget._demo import DEMO_BUDGETS_ATTRIBUTE, EXAMPLE_BUDGETS_NAME, example_budgets
from latency_budget._replay import JudgedRoot, SpanRecord, judge_roots
from latency_budget.cli._stats import RunSummary, summarize

from ._common import CliError, load_budgets_option, service_name
from ._inputs import (
    MAX_JSON_DEPTH,
    STREAMED_MAX_SPANS,
    InputLimits,
    TraceInputError,
    TraceSet,
    TraceWindow,
    parse_size,
    parse_trace_files,
    read_jaeger,
    read_log_files,
    read_trace_files,
    source_names,
)
from ._inputs._spans import ParsedSpan
from ._output import warn
from ._progress import ProgressBar

__all__ = [
    "BUILTIN_LABEL",
    "DEMO_LABEL",
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
DEFAULT_WINDOW = 100_000
_GC_THRESHOLD = 50_000  # allocations between collections of the youngest generation while reading
_BUILTIN_YAML = "version: 1\n"  # no stages: the built-in ones (genai_defaults.BUILTIN_STAGES), with their matchers


def add_trace_arguments(parser: argparse.ArgumentParser, *, streamed: bool = True) -> None:
    """TRACES files, or ``--jaeger URL --service NAME [--lookback 1h]``.

    ``streamed`` commands judge files trace by trace, so their ``--max-spans`` is
    :data:`STREAMED_MAX_SPANS`; the others hold every span and keep the default of :class:`InputLimits`.
    """
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
    if streamed:
        parser.add_argument(
            "--logs",
            metavar="FILE",
            action="append",
            default=[],
            help="OTLP JSON log records (the Collector's file exporter of a logs pipeline) holding evaluation "
            "results (gen_ai.evaluation.result) of the traces' calls; repeatable. A trace file may hold both "
            "signals: its log records are read too",
        )
    bounds = parser.add_argument_group("limits on the input (see docs/reliability.md)")
    defaults = InputLimits()
    max_spans = STREAMED_MAX_SPANS if streamed else defaults.max_spans
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
        default=max_spans,
        help=f"most spans over all inputs (default: {max_spans:,})",
    )
    bounds.add_argument(
        "--window",
        metavar="N",
        type=positive_int,
        default=DEFAULT_WINDOW,
        help="spans read after a trace's last span before it is judged and forgotten: how far out of order "
        f"a trace's spans may be (default: {DEFAULT_WINDOW:,})",
    )


def add_budgets_argument(parser: argparse.ArgumentParser, *, required: bool, restage: bool = False) -> None:
    """``--budgets FILE``: the stages (and, for ``check``, the budgets) to judge by; with ``restage``, ``--restage``.

    Not ``required`` for a recording of the demo, whose resource names the demo's budgets.
    """
    parser.add_argument(
        "--budgets",
        "-b",
        metavar="FILE",
        help="budget YAML file"
        + (
            " (required, but for a recording of the demo: its budgets)"
            if required
            else f" (default: the demo's budgets for a recording of the demo, else {BUILTIN_LABEL}:"
            " retrieval, model_call, tool_calls, validation)"
        ),
    )
    parser.set_defaults(budgets_required=required)
    if restage:
        parser.add_argument(
            "--restage",
            action="store_true",
            help="classify every span by the budget file's rules, ignoring the latency_budget.stage labels "
            "a live processor recorded (to try a change of match rules on a recording)",
        )


@dataclass(frozen=True, slots=True)
class Recorded:
    """Recorded traces judged under a budget configuration."""

    config: BudgetConfig
    budgets_label: str
    traces: TraceSet
    reports: list[TraceReport]
    summary: RunSummary
    quality: RecordingQuality = dataclasses.field(default_factory=RecordingQuality)
    """What was read of the calls' quality (each call's ``quality`` is set): evaluation records read and unjoined."""

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
            f"{plural(self.traces.span_count, 'span')}{''.join(', ' + m for m in mended)}) "
            f"from {self.traces.source_label}; budgets from {self.budgets_label}"
        )


def load_config(path: str | None) -> tuple[BudgetConfig, str]:
    """The budget file (errors exit 2) or the built-in GenAI stages, with a label for people."""
    return load_budgets_option(path, _builtin_budgets, BUILTIN_LABEL)


DEMO_LABEL = f"{EXAMPLE_BUDGETS_NAME}, the demo's budgets (the recording is the demo's; -b FILE chooses others)"


def _config_for(args: argparse.Namespace, first: SpanRecord | None) -> tuple[BudgetConfig, str]:
    """``--budgets``; else the demo's budgets for a recording of the demo; else the built-in stages (or, for
    ``check``, which has budgets to check, an error)."""
    demo = first is not None and first.resource.get(DEMO_BUDGETS_ATTRIBUTE) == EXAMPLE_BUDGETS_NAME
    if args.budgets is None and demo:
        return example_budgets(), DEMO_LABEL
    if args.budgets is None and getattr(args, "budgets_required", False):
        raise CliError(
            "--budgets FILE is needed to check a recording other than the demo's "
            "('latency-budget init' writes one; 'latency-budget init --from TRACES' drafts it from the recording)"
        )
    return load_config(args.budgets)


@dataclass(slots=True)
class _Labels:
    """The recorded ``latency_budget.stage`` labels: dropped under ``--restage``, else counted where the file's
    rules, on the span's final attributes, would give another stage of the file (the label decides, as live)."""

    config: BudgetConfig
    restage: bool
    disagree: int = 0
    first: str = ""

    def apply(self, records: list[SpanRecord]) -> list[SpanRecord]:
        if self.restage:
            return [_unlabelled(r) if attr.STAGE in r.attributes else r for r in records]
        index = self.config.stage_index
        for record in records:
            label = record.attributes.get(attr.STAGE)
            if label.__class__ is not str or label not in index:
                continue  # no label, or one this file does not know: the rules decide already
            config = self.config.for_resource(record.resource) if self.config.resource_keys else self.config
            found = config.classifier.classify(record.name, record.kind, record.scope, record.attributes)
            if found != index[label]:
                self.disagree += 1
                if not self.first:
                    ruled = config.stages[found].name if found >= 0 else "no stage"
                    self.first = f"{record.name!r} labelled {label}, by the rules {ruled}"
        return records

    def warn(self, source: str) -> None:
        if self.disagree:
            warn(
                f"{source}: {plural(self.disagree, 'span')} {'carries' if self.disagree == 1 else 'carry'} a recorded "
                "latency_budget.stage label that the "
                f"budget file's rules would not give (first: {self.first}); the labels decide, as live: "
                "--restage classifies every span by the file's rules"
            )


def _unlabelled(record: SpanRecord) -> SpanRecord:
    attributes = {k: v for k, v in record.attributes.items() if k != attr.STAGE}
    return dataclasses.replace(record, attributes=attributes)


def _builtin_budgets() -> BudgetConfig:
    return load_budgets(text=_BUILTIN_YAML, source="<built-in>")


def load_recorded(args: argparse.Namespace, *, levers: bool = True) -> Recorded:
    """Read the traces named by ``args``, judge them, and refuse input with nothing to judge.

    Without ``levers`` (``suggest``) the reports keep no calls: nothing will read them.
    """
    restage = bool(getattr(args, "restage", False))
    quality = RecordingQuality()
    if args.jaeger:
        traces = load_traces(args)
        config, label = _config_for(args, traces.spans[0] if traces.spans else None)
        labels = _Labels(config, restage)
        judged = judge_roots(config, labels.apply(traces.spans))
        if levers:
            for found in judged:
                _read_quality(quality, found)
        reports = [found.report for found in judged]
        labels.warn(traces.source_label)
    else:
        chosen: list[tuple[BudgetConfig, str]] = []

        def choose(first: SpanRecord | None) -> BudgetConfig:
            chosen.append(_config_for(args, first))
            return chosen[0][0]

        traces, reports = _judge_files(args, choose, levers=levers, restage=restage, quality=quality)
        config, label = chosen[0]
    if levers:  # suggest's budgets rest on latency alone: its --logs are not read
        _read_logs(args, quality)
    if not reports and not config.every_root:
        if config.requests is not None:
            rules, fix = "the 'requests' rules", "check its requests rules"
        else:  # the default: a server or consumer span, a remote parent, an agent, or a model call
            rules = "the default 'requests' rule (server, consumer, remote parent, agent or workflow, model call)"
            fix = "'requests: all' judges every local root; 'latency-budget doctor' lists AI spans in no stage"
        raise CliError(
            f"{traces.source_label}: no local root is a request under {rules} of {label} "
            f"({plural(traces.span_count, 'span')} in {plural(traces.trace_count, 'trace')}); {fix}"
        )
    summary = summarize(config, reports)
    if summary.stage_span_count == 0:
        raise CliError(
            f"{traces.source_label}: no span matched a stage of {label} "
            f"({plural(traces.span_count, 'span')} in {plural(traces.trace_count, 'trace')}; "
            f"stages: {', '.join(config.stage_names)}); "
            "check --budgets and its match rules"
        )
    return Recorded(config, label, traces, reports, summary, quality)


def _read_quality(quality: RecordingQuality, found: JudgedRoot) -> None:
    """Set the quality of a judged request's model calls from what its stage spans said when recorded."""
    calls = found.report.calls
    if calls:
        attributes = {raw[0]: raw[5] for raw in found.state.calls}
        quality.read_request(found.report.trace_id or 0, calls, found.state.quality, attributes)


def _read_logs(args: argparse.Namespace, quality: RecordingQuality) -> None:
    """Read ``--logs`` files, join every evaluation record read to its call, and warn of those that name none."""
    paths = getattr(args, "logs", None) or []
    if paths:
        try:
            read_log_files(paths, _limits(args), _log_sink(quality), EVALUATION_EVENTS)
        except TraceInputError as exc:
            raise CliError(str(exc)) from None
    quality.join()
    if quality.unjoined:
        source = ", ".join(source_names([*args.traces, *paths])) if not args.jaeger else "--logs"
        warn(
            f"{source}: {plural(quality.unjoined, 'evaluation result')} of {quality.records:,} named no call of the "
            "recording (by trace and span id, or response id) and "
            f"{'was' if quality.unjoined == 1 else 'were'} left out"
        )


def _log_sink(quality: RecordingQuality) -> Callable[[tuple[str, dict[str, object], int | None, int | None]], None]:
    def sink(record: tuple[str, dict[str, object], int | None, int | None]) -> None:
        quality.add_log_record(*record)

    return sink


def _limits(args: argparse.Namespace) -> InputLimits:
    return InputLimits(
        max_bytes=args.max_input_size,
        max_line_bytes=args.max_line_size,
        max_depth=args.max_json_depth,
        max_spans=args.max_spans,
    )


def _check_files_args(args: argparse.Namespace) -> None:
    if not args.traces:
        raise CliError("no traces given: name trace files (or '-'), or use --jaeger URL --service NAME")
    if args.service:
        raise CliError("--service is only used with --jaeger")


def _judge_files(
    args: argparse.Namespace,
    config_for: BudgetConfig | Callable[[SpanRecord | None], BudgetConfig],
    *,
    levers: bool = True,
    restage: bool = False,
    quality: RecordingQuality | None = None,
) -> tuple[TraceSet, list[TraceReport]]:
    """Read the trace files and judge them trace by trace as they close; the reports in root start order.

    Of each trace only its reports are kept, and the spans of the slowest request (the
    first of the slowest, in report order, as the HTML page picks it). A report's calls
    are read as the trace closes (the levers would read them all later), so the spans'
    attributes they were read from go with the trace; without ``levers`` none are kept.
    ``config_for`` is the config, or chooses it from the first span read (the demo's recording
    names its budgets). ``restage`` drops the recorded stage labels (see :class:`_Labels`).
    """
    _check_files_args(args)
    window = TraceWindow(args.window)
    judged: list[tuple[int, int, int, TraceReport]] = []
    spans = 0
    slowest: tuple[float, tuple[int, int, int], list[SpanRecord]] | None = None
    names = source_names(args.traces)
    total = _total_bytes(args.traces)
    progress = ProgressBar(total, "reading", counter=_megabytes if total else _nothing)

    def judge(records: list[SpanRecord]) -> None:
        nonlocal spans, slowest
        spans += len(records)
        records = labels.apply(records)
        for found in judge_roots(config, records):
            root, report = found.root, found.report
            report.calls = tuple(report.calls) if levers else ()
            if quality is not None:
                _read_quality(quality, found)
            key = (root.start_ns, root.trace_id, root.span_id)
            judged.append((*key, report))
            total = report.total_actual_ms
            if slowest is None or total > slowest[0] or (total == slowest[0] and key < slowest[1]):
                slowest = (total, key, records)

    def advance(count: int, read: int) -> None:
        progress.update(read, items=count)

    try:
        with _fewer_collections():
            sink = _log_sink(quality) if quality is not None and levers else None
            batches = parse_trace_files(
                args.traces, _limits(args), advance if progress.enabled else None, sink, EVALUATION_EVENTS
            )
            head = _first_batch(batches)
            first = head[0].record if head else None
            config = config_for if isinstance(config_for, BudgetConfig) else config_for(first)
            labels = _Labels(config, restage)
            for batch in itertools.chain([head] if head else [], batches):
                for records in window.add(batch):
                    judge(records)
            for records in window.finish():
                judge(records)
    finally:
        progress.close()
    judged.sort(key=lambda item: item[:3])
    kept = slowest[2] if slowest is not None else []
    traces = TraceSet(kept, names, window.repairs(), (spans, window.trace_count), window.late_spans)
    if not spans:
        raise CliError(f"{traces.source_label}: no spans found")
    _warn_repairs(traces)
    labels.warn(traces.source_label)
    if window.late_spans:
        warn(
            f"{traces.source_label}: {plural(window.late_spans, 'span')} came more than --window "
            f"{plural(args.window, 'span', grouped=True)} after the rest of their trace, "
            "which had been judged without them "
            f"(first at {window.first_late}); raise --window to judge them together"
        )
    return traces, [report for *_, report in judged]


def _first_batch(batches: Iterator[list[ParsedSpan]]) -> list[ParsedSpan]:
    """The first document's spans that holds any (a recording may start with log records), or none."""
    for batch in batches:
        if batch:
            return batch
    return []


@contextlib.contextmanager
def _fewer_collections() -> Iterator[None]:
    """Run the cyclic garbage collector less often while a recording is read (restored after).

    Parsing makes millions of objects, nearly all freed by reference counting, and the
    reports it keeps grow all along; at the default threshold (700 allocations) the
    collector's passes over them were a large share of the time spent reading.
    """
    thresholds = gc.get_threshold()
    gc.set_threshold(_GC_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


def _total_bytes(paths: list[str]) -> int:
    total = 0
    for path in paths:
        with contextlib.suppress(OSError):  # the read says why
            total += os.path.getsize(path) if path != "-" else 0
    return total


def _megabytes(done: int, total: int) -> str:
    return f"{done / 1e6:,.0f}/{total / 1e6:,.0f} MB"


def _nothing(done: int, total: int) -> str:
    return "(standard input)"  # its size is not known: the spans and their rate follow


def _warn_repairs(traces: TraceSet) -> None:
    for message in traces.repairs.messages():
        warn(f"{traces.source_label}: {message}")


def load_traces(args: argparse.Namespace) -> TraceSet:
    """The traces named by ``args`` (files, or Jaeger), within the input limits, every span kept; none is an error."""
    limits = _limits(args)
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
        _check_files_args(args)
        with _fewer_collections():
            traces = read_trace_files(args.traces, limits)
        if not traces.spans:
            raise CliError(f"{traces.source_label}: no spans found")
    _warn_repairs(traces)
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
