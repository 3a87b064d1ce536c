"""``latency-budget compare BEFORE AFTER``: did the change win the time back, in which stage, for certain?

Each side is read and judged as ``report`` reads it (:func:`load_recorded`: trace by trace,
the same memory per request), by the same budget file; :func:`compare` does the
statistics; ``--max-regression`` turns the result into a CI gate (exit 1).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Any, Literal

from latency_budget._core.bootstrap import DEFAULT_RESAMPLES, DEFAULT_SEED
from latency_budget._core.comparison import ALL_PROFILES, Change, Comparison, QualityChange, compare
from latency_budget._core.report import TOTAL

from ._applied import Applied, applied_levers
from ._common import CliError, example_epilog, raw_help, service_name
from ._compare_html import render_compare_html
from ._compare_output import compare_json, compare_markdown, compare_table, gated_quality, gated_time
from ._inputs import parse_duration
from ._levers import analyse_levers
from ._output import emit, write_file, wrote
from ._recorded import Recorded, add_budgets_argument, add_limit_arguments, load_recorded, percentile_arg, positive_int

__all__ = ["Limit", "QualityLimit", "gate", "parse_limit", "parse_quality_limit", "quality_gate", "register"]

MAX_RESAMPLES = 100_000

_DESCRIPTION = """\
Before against after: two recordings of the same service, one from before a change and one
from after it (streamed answers, a cache, a smaller model, a trimmed context), judged by the
same budget file. Per profile and stage: the requests, p50, p95 and p99 on each side, the
change at --percentile with an interval, time to first token, calls per request and the
stage's share of the critical path; per model, the calls' durations; a verdict per row:
faster, slower, or no change the data can show.

The intervals come from a seeded bootstrap (--resamples, --seed) and hold together over
every change compared (Bonferroni), so two samples of the same traffic show no change in
19 runs of 20. Rows compare within a profile (and, for model calls, within a model); when the
mix of profiles or models differs, the end to end change is reweighted to the before mix,
and that decides. A headline says which stages moved the end to end time, and which
changes did not reach it (off the critical path). Where the after side shows a lever that
report estimated on the before side applied, the estimate stands beside the measured change.

Each side is a recording (OTLP JSON lines or Jaeger JSON; '-' reads standard input, for one
side), or with --jaeger a time window FROM..TO of durations ago (2h..1h, 1h..now).
--max-regression fails the command (exit 1) when a stage, or the end to end time (total),
is demonstrably slower by more than the limit at --percentile."""


@dataclass(frozen=True, slots=True)
class Limit:
    """One ``--max-regression``: a stage (or ``total``) may be slower by at most ``amount`` ms or percent."""

    stage: str
    amount: float
    unit: Literal["ms", "%"]

    def text(self) -> str:
        """As given on the command line."""
        return f"{self.stage}={self.amount:g}{self.unit}"

    def exceeded_by(self, change: Change) -> bool:
        """Whether ``change`` is demonstrably slower (its interval above zero) by more than the limit."""
        if change.verdict != "slower":
            return False
        if self.unit == "ms":
            return change.value > self.amount
        percent = change.percent
        return percent is None or percent > self.amount


_LIMIT = re.compile(r"(?:(?P<stage>[^=]+)=)?(?P<amount>\d+(?:\.\d+)?)\s*(?P<unit>ms|%)")


def parse_limit(text: str) -> Limit:
    """``[STAGE=]LIMIT`` (``10%``, ``50ms``, ``model_call=200ms``): ``ValueError`` when it is not one."""
    match = _LIMIT.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"expected [STAGE=]LIMIT with LIMIT in ms or percent, like 10%, 50ms or model_call=200ms, got {text!r}"
        )
    stage = (match.group("stage") or TOTAL).strip()
    return Limit(stage, float(match.group("amount")), match.group("unit"))  # type: ignore[arg-type]


def _limit(text: str) -> Limit:
    try:
        return parse_limit(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _resamples(text: str) -> int:
    value = positive_int(text)
    if value < 100 or value > MAX_RESAMPLES:
        raise argparse.ArgumentTypeError(f"expected 100 to {MAX_RESAMPLES:,} resamples, got {value}")
    return value


def _seed(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def register(commands: Any) -> None:
    """Add the ``compare`` subcommand."""
    parser = commands.add_parser(
        "compare",
        help="before against after: which stage's time changed, with intervals (a CI gate)",
        description=_DESCRIPTION,
        epilog=example_epilog(
            "latency-budget compare before.jsonl after.jsonl -b budgets.yaml",
            "latency-budget compare before.jsonl after.jsonl --max-regression 10%",
            "latency-budget compare before.jsonl after.jsonl -p p95 --max-regression model_call=200ms",
            "latency-budget compare before.jsonl after.jsonl --format markdown --html compare.html",
            "latency-budget compare --jaeger http://localhost:16686 --service support-assistant 2h..1h 1h..now",
        ),
        formatter_class=raw_help(),
    )
    parser.add_argument("before", metavar="BEFORE", help="the recording from before the change ('-': standard input)")
    parser.add_argument("after", metavar="AFTER", help="the recording from after the change ('-': standard input)")
    live = parser.add_argument_group("live from Jaeger (BEFORE and AFTER are then windows FROM..TO, e.g. 2h..1h)")
    live.add_argument("--jaeger", metavar="URL", help="Jaeger query service, e.g. http://localhost:16686")
    live.add_argument(
        "--service", metavar="NAME", type=service_name, help="the service whose traces to fetch (with --jaeger)"
    )
    live.add_argument(
        "--limit", metavar="N", type=positive_int, default=1000, help="most traces to fetch per side (default: 1000)"
    )
    live.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=float,
        default=30.0,
        help="deadline for each of Jaeger's answers, connection included (default: 30)",
    )
    quality = parser.add_argument_group("the answers' quality (read as report reads it)")
    for side in ("before", "after"):
        quality.add_argument(
            f"--{side}-logs",
            metavar="FILE",
            action="append",
            default=[],
            help=f"OTLP JSON log records holding evaluation results of {side.upper()}'s calls; repeatable "
            "(a trace file's own log records are read too)",
        )
    add_budgets_argument(parser, required=False, restage=True)
    stats = parser.add_argument_group("statistics")
    stats.add_argument(
        "--percentile",
        "-p",
        type=percentile_arg,
        default=50.0,
        metavar="P",
        help="the percentile whose change is judged and gated: p50, p95 or p99 (default: p50)",
    )
    stats.add_argument(
        "--resamples",
        type=_resamples,
        default=DEFAULT_RESAMPLES,
        metavar="N",
        help=f"bootstrap resamples per change (default: {DEFAULT_RESAMPLES:,})",
    )
    stats.add_argument(
        "--seed", type=_seed, default=DEFAULT_SEED, metavar="N", help=f"bootstrap seed (default: {DEFAULT_SEED})"
    )
    parser.add_argument(
        "--max-regression",
        type=_limit,
        action="append",
        default=[],
        metavar="[STAGE=]LIMIT",
        help="fail (exit 1) when the end to end time (or STAGE, in any profile) is demonstrably slower at "
        "--percentile by more than LIMIT: a percentage (10%%) or milliseconds (50ms); repeatable",
    )
    parser.add_argument(
        "--max-quality-drop",
        type=_quality_limit,
        action="append",
        default=[],
        metavar="[STAGE=]N%",
        help="fail (exit 1) when the answers of STAGE (or of any stage, or end to end) are demonstrably worse "
        "by more than N: a rate (errors, blocked, cut or refused) up by N percentage points, a mean evaluation "
        "score down by N%%; needs quality evidence in the recordings; repeatable",
    )
    parser.add_argument(
        "--format", "-f", choices=("table", "json", "markdown"), default="table", help="output format (default: table)"
    )
    parser.add_argument(
        "--html", metavar="FILE", help="also write a self-contained HTML page: each stage's two distributions overlaid"
    )
    add_limit_arguments(parser)
    parser.set_defaults(run=run)


def _side(args: argparse.Namespace, which: str, value: str) -> argparse.Namespace:
    """The arguments ``load_recorded`` reads for one side."""
    side = argparse.Namespace(**vars(args))
    side.traces, side.lookback, side.until = [value], "1h", None
    side.logs = args.before_logs if which == "BEFORE" else args.after_logs
    if args.jaeger:
        start, sep, end = value.partition("..")
        if not sep or not start.strip():
            raise CliError(
                f"{which}: with --jaeger, expected a window FROM..TO of durations ago, like 2h..1h, got {value!r}"
            )
        side.traces = []
        side.lookback = start.strip()
        side.until = None if end.strip() in ("", "now") else end.strip()
        try:
            begins = parse_duration(side.lookback)
            ends = parse_duration(side.until) if side.until is not None else 0.0
        except ValueError as exc:
            raise CliError(f"{value}: {exc}") from None
        if ends >= begins:
            raise CliError(f"{value}: the window must start before it ends (from {side.lookback} ago)")
    return side


def run(args: argparse.Namespace) -> int:
    """Print the comparison (and write the HTML page); exit 1 when a --max-regression fails."""
    if not args.jaeger and args.before == "-" and args.after == "-":
        raise CliError("only one side can read standard input ('-')")
    if not 0 < args.timeout <= 86_400:
        raise CliError(f"--timeout: expected a positive number of seconds, at most a day, got {args.timeout:g}")
    sides = _side(args, "BEFORE", args.before), _side(args, "AFTER", args.after)  # both checked before any read
    before = load_recorded(sides[0])
    after = load_recorded(sides[1])
    if before.budgets_label != after.budgets_label:
        raise CliError(
            f"BEFORE is judged by {before.budgets_label}, AFTER by {after.budgets_label}: "
            "give --budgets FILE so that both are judged alike"
        )
    config = before.config
    for limit in (*args.max_regression, *args.max_quality_drop):
        if limit.stage not in (None, TOTAL) and limit.stage not in config.stage_names:
            option = "--max-regression" if isinstance(limit, Limit) else "--max-quality-drop"
            raise CliError(
                f"{option} {limit.text()}: no stage {limit.stage!r} in {before.budgets_label} "
                f"(stages: {', '.join(config.stage_names)}; 'total' is the end to end time)"
            )
    found = compare(
        before.reports,
        after.reports,
        stages=config.stage_names,
        profiles=["default", *(p.name for p in config.profiles)],
        percentile=args.percentile,
        resamples=args.resamples,
        seed=args.seed,
    )
    applied = applied_levers(analyse_levers(before.reports, config), before.reports, after.reports)
    failures = gate(found, args.max_regression)
    dropped = quality_gate(found, args.max_quality_drop)
    gated = [(limit.text(), *gated_time(profile, change)) for limit, profile, change in failures]
    gated += [(limit.text(), *gated_quality(p, stage, change)) for limit, p, stage, change in dropped]
    checked = [limit.text() for limit in (*args.max_regression, *args.max_quality_drop)]
    output = _render(args.format, before, after, found, applied, checked, gated)
    page = render_compare_html(before, after, found, applied) if args.html else None
    if page is not None:
        write_file(args.html, page)
    emit(output)
    if page is not None:
        wrote(args.html)
    return 1 if gated else 0


def gate(found: Comparison, limits: list[Limit]) -> list[tuple[Limit, str, Change]]:
    """Each limit a row breaks: (the limit, the row's profile, its change). ``total`` reads the end to end
    change that decides (reweighted to the before mix when the mix shifted); a stage, its row in each profile."""
    failures: list[tuple[Limit, str, Change]] = []
    for limit in limits:
        if limit.stage == TOTAL:
            change = found.end_to_end_change
            if change is not None and limit.exceeded_by(change):
                failures.append((limit, ALL_PROFILES, change))
            continue
        for row in found.stage_rows:
            if row.stage == limit.stage and row.change is not None and limit.exceeded_by(row.change):
                failures.append((limit, row.profile, row.change))
    return failures


@dataclass(frozen=True, slots=True)
class QualityLimit:
    """One ``--max-quality-drop``: a rate may rise by at most ``points`` percentage points, a mean
    score fall by at most ``points`` percent of its before value; in ``stage``, or any row."""

    stage: str | None
    points: float

    def text(self) -> str:
        """As given on the command line."""
        return f"{self.stage + '=' if self.stage else ''}{self.points:g}%"

    def exceeded_by(self, change: QualityChange) -> bool:
        """Whether ``change`` is demonstrably worse by more than the limit."""
        if not change.worse:
            return False
        if change.higher_is_better:
            return change.before <= 0 or -100 * change.change.value / change.before > self.points
        return 100 * change.change.value > self.points


_QUALITY_LIMIT = re.compile(r"(?:(?P<stage>[^=]+)=)?(?P<points>\d+(?:\.\d+)?)\s*%")


def parse_quality_limit(text: str) -> QualityLimit:
    """``[STAGE=]N%``: ``ValueError`` when it is not one."""
    match = _QUALITY_LIMIT.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"expected [STAGE=]N% (percentage points of a rate, percent of a score), got {text!r}")
    stage = match.group("stage")
    return QualityLimit(stage.strip() if stage else None, float(match.group("points")))


def _quality_limit(text: str) -> QualityLimit:
    try:
        return parse_quality_limit(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def quality_gate(found: Comparison, limits: list[QualityLimit]) -> list[tuple[QualityLimit, str, str, QualityChange]]:
    """Each quality limit a row breaks: (the limit, the row's profile, its stage, the quality change).

    Rows of stages and totals (not of models, whose calls their stage's row already holds);
    a limit without a stage reads every one of them, the end to end included.
    """
    broken: list[tuple[QualityLimit, str, str, QualityChange]] = []
    for limit in limits:
        for row in (*found.rows, found.end_to_end):
            if row.model is not None or (limit.stage is not None and row.stage != limit.stage):
                continue
            broken.extend((limit, row.profile, row.stage, q) for q in row.quality if limit.exceeded_by(q))
    return broken


def _render(
    form: str,
    before: Recorded,
    after: Recorded,
    found: Comparison,
    applied: list[Applied],
    checked: list[str],
    gated: list[tuple[str, str, str]],
) -> str:
    if form == "json":
        return compare_json(before, after, found, applied, checked, gated)
    if form == "markdown":
        return compare_markdown(before, after, found, applied, checked, gated)
    return compare_table(before, after, found, applied, checked, gated)
