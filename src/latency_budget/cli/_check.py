"""``latency-budget check TRACES --budgets FILE``: a CI gate over recorded traces (see ``_DESCRIPTION``)."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any, Literal

from latency_budget._core.report import TOTAL, format_ms
from latency_budget._core.wording import plural
from latency_budget._encode import markdown_cell, markdown_text, terminal_text
from latency_budget.cli._stats import StageSummary, optimisation

from ._common import example_epilog, raw_help
from ._levers import analyse_levers
from ._output import emit
from ._recorded import (
    Recorded,
    add_budgets_argument,
    add_percentile_argument,
    add_trace_arguments,
    load_recorded,
)
from ._summary import optimisation_json, optimisation_lines
from ._table import markdown_table, text_table
from ._where import levers_json, where_lines

__all__ = ["Check", "checks_for", "register"]

Metric = Literal["duration", "first_token", "violation_rate"]
_DESCRIPTION = """\
Judge recorded traces against a budget file: a CI gate.

Like Lighthouse CI's assertions, it judges the distribution rather than single
requests. For each stage (and profile), the chosen percentile of the stage's time
must be within its budget, and so must its time to first token where the file sets
a budget for it. With --max-violation-rate, the share of requests in which a stage
broke any of its budgets must not exceed that ceiling either. Failed checks of
severity 'error' fail the command; 'warn' ones are reported and pass."""


_LISTED = 5  # failed checks named in the verdict line; the table has them all


@dataclass(frozen=True, slots=True)
class Check:
    """One assertion: ``actual <= budget`` for one metric of one stage of one profile."""

    profile: str
    stage: str
    metric: Metric
    budget: float  # ms, or a share (0 to 1) for violation_rate
    actual: float
    count: int
    severity: str
    percentile: float

    @property
    def passed(self) -> bool:
        """Whether the measured value is within the budget (equal passes, as in the processor)."""
        return self.actual <= self.budget

    @property
    def outcome(self) -> str:
        """``pass``, ``warn`` (a failed warn-level check) or ``fail``."""
        if self.passed:
            return "pass"
        return "warn" if self.severity == "warn" else "fail"

    @property
    def what(self) -> str:
        """``p95 duration``, ``p95 first token`` or ``violation rate``."""
        if self.metric == "violation_rate":
            return "violation rate"
        return f"p{self.percentile:g} {self.metric.replace('_', ' ')}"

    def show(self, value: float) -> str:
        """A budget or an actual in this check's unit."""
        if self.metric == "violation_rate":
            return f"{100 * value:.1f}%".replace(".0%", "%")
        return format_ms(value)

    def as_json(self) -> dict[str, Any]:
        """Plain data for ``--format json``."""
        unit = "ratio" if self.metric == "violation_rate" else "ms"
        return {
            "profile": self.profile,
            "stage": self.stage,
            "metric": self.metric,
            "percentile": None if self.metric == "violation_rate" else self.percentile,
            "budget": self.budget,
            "actual": self.actual,
            "unit": unit,
            "count": self.count,
            "severity": self.severity,
            "outcome": self.outcome,
        }


def checks_for(stage: StageSummary, q: float, max_violation_rate: float | None) -> list[Check]:
    """The checks that a stage summary (or a profile's total) is subject to."""
    found: list[Check] = []

    def add(metric: Metric, budget: float, actual: float | None, count: int) -> None:
        if actual is not None:
            found.append(Check(stage.profile, stage.stage, metric, budget, actual, count, stage.severity, q))

    if stage.budget_ms is not None:
        add("duration", stage.budget_ms, stage.p(q), stage.count)
    if stage.first_token_budget_ms is not None:
        add("first_token", stage.first_token_budget_ms, stage.first_token_p(q), len(stage.first_token_ms))
    judged = stage.budget_ms is not None or stage.first_token_budget_ms is not None or stage.max_calls is not None
    if max_violation_rate is not None and judged and stage.count:
        add("violation_rate", max_violation_rate, stage.violation_rate, stage.count)
    return found


def register(commands: Any) -> None:
    """Add the ``check`` subcommand."""
    parser = commands.add_parser(
        "check",
        help="fail CI when recorded traces break their latency budgets",
        description=_DESCRIPTION,
        epilog=example_epilog(
            "latency-budget check traces.jsonl --budgets budgets.yaml",
            "latency-budget check traces.jsonl -b budgets.yaml --percentile p99 --max-violation-rate 5%",
            'latency-budget check trace.json -b budgets.yaml --format markdown >> "$GITHUB_STEP_SUMMARY"',
            "latency-budget check --jaeger http://localhost:16686 --service checkout -b budgets.yaml",
            "latency-budget check traces.jsonl -b budgets.yaml --restage   # classify by the file's rules",
        ),
        formatter_class=raw_help(),
    )
    add_trace_arguments(parser)
    add_budgets_argument(parser, required=True, restage=True)
    add_percentile_argument(parser, purpose="the percentile each stage must keep within budget")
    parser.add_argument(
        "--max-violation-rate",
        type=_rate,
        metavar="RATE",
        help="also fail a stage that breaks its budget in more than this share of requests: 0.05 or 5%%",
    )
    parser.add_argument(
        "--format", "-f", choices=("table", "json", "markdown"), default="table", help="output format (default: table)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Judge the traces and print the checks; the exit code is the verdict."""
    recorded = load_recorded(args)
    q = args.percentile
    checks: list[Check] = []
    unseen: list[str] = []
    for profile in recorded.summary.profiles:
        for stage in (*profile.stages, profile.total):
            checks.extend(checks_for(stage, q, args.max_violation_rate))
            if not stage.count and stage.stage != TOTAL and stage.budget_ms is not None:
                unseen.append(stage.stage if profile.profile == "default" else f"{stage.stage} [{profile.profile}]")
    failed = [c for c in checks if c.outcome == "fail"]
    warned = [c for c in checks if c.outcome == "warn"]
    code = 1 if failed else 0
    if args.format == "json":
        emit(json.dumps(_json(recorded, checks, unseen, q, args.max_violation_rate, code), indent=2))
    elif args.format == "markdown":
        emit(_markdown(recorded, checks, unseen, q, failed, warned))
    else:
        emit(_table(recorded, checks, unseen, q, failed, warned))
    return code


def _rate(text: str) -> float:
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a share such as 0.05 or 5%, got {text!r}") from None
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"expected a share between 0 and 1 (or 0% and 100%), got {text!r}")
    return value


def _label(check: Check, profiles: bool) -> list[str]:
    return [check.profile, check.stage] if profiles else [check.stage]


def _uses_profiles(recorded: Recorded) -> bool:
    return any(p.profile != "default" for p in recorded.summary.profiles)


def _name(check: Check) -> str:
    return check.stage if check.profile == "default" else f"{check.stage} [{check.profile}]"


def _verdict(checks: list[Check], failed: list[Check], warned: list[Check], q: float) -> str:
    if failed:
        shown = "; ".join(f"{_name(c)} {c.what} {c.show(c.actual)} > {c.show(c.budget)}" for c in failed[:_LISTED])
        more = f"; and {len(failed) - _LISTED} more" if len(failed) > _LISTED else ""
        return f"FAIL: {len(failed)} of {plural(len(checks), 'check')} over an error-level budget: {shown}{more}"
    warn = f" ({plural(len(warned), 'warning')})" if warned else ""
    return f"PASS: {plural(len(checks), 'check')} at p{q:g} within budget{warn}"


def _table(
    recorded: Recorded, checks: list[Check], unseen: list[str], q: float, failed: list[Check], warned: list[Check]
) -> str:
    profiles = _uses_profiles(recorded)
    header = [*(["Profile"] if profiles else []), "Stage", "Check", "Budget", "Actual", "n", "Result"]
    rows = [
        [*_label(c, profiles), c.what, c.show(c.budget), c.show(c.actual), str(c.count), _result_text(c)]
        for c in checks
    ]
    first = 3 if profiles else 2
    lines = [
        f"latency-budget check: {terminal_text(recorded.intro())}",
        "",
        text_table(header, rows, right=range(first, first + 3)),
    ]
    if unseen:
        lines.append(terminal_text(f"No spans for: {', '.join(unseen)} (nothing to check)."))
    where = optimisation_lines(optimisation(recorded.reports))
    if where:
        lines += ["", *where]
    lines += ["", *where_lines(analyse_levers(recorded.reports, recorded.config))]
    lines += ["", terminal_text(_verdict(checks, failed, warned, q))]
    return "\n".join(lines)


def _result_text(check: Check) -> str:
    return {"pass": "pass", "warn": "warn (over budget)", "fail": "FAIL <-- over budget"}[check.outcome]


def _markdown(
    recorded: Recorded, checks: list[Check], unseen: list[str], q: float, failed: list[Check], warned: list[Check]
) -> str:
    profiles = _uses_profiles(recorded)
    icon = {"pass": "✅ pass", "warn": "⚠️ warn", "fail": "❌ **fail**"}
    header = [*(["Profile"] if profiles else []), "Stage", "Check", "Budget", "Actual", "n", "Result"]
    rows = [
        [
            *([markdown_text(c.profile)] if profiles else []),
            markdown_cell(c.stage),
            c.what,
            c.show(c.budget),
            c.show(c.actual),
            str(c.count),
            icon[c.outcome],
        ]
        for c in checks
    ]
    first = 3 if profiles else 2
    title = "❌ Latency budgets: FAIL" if failed else "✅ Latency budgets: PASS"
    parts = [
        f"### {title}",
        "",
        markdown_text(recorded.intro() + f"; checked at p{q:g}."),
        "",
        markdown_table(header, rows, right=range(first, first + 3)),
    ]
    if unseen:
        parts += ["", markdown_text(f"No spans for: {', '.join(unseen)} (nothing to check).")]
    where = optimisation_lines(optimisation(recorded.reports))
    if where:
        parts += ["", *(f"{markdown_text(line)}  " for line in where)]
    levers = where_lines(analyse_levers(recorded.reports, recorded.config), markdown=True)
    parts += ["", *(line + "  " if line[:1].isdigit() else line for line in levers)]
    parts += ["", markdown_text(_verdict(checks, failed, warned, q))]
    return "\n".join(parts)


def _json(
    recorded: Recorded,
    checks: list[Check],
    unseen: list[str],
    q: float,
    max_rate: float | None,
    code: int,
) -> dict[str, Any]:
    return {
        "status": "fail" if code else "pass",
        "exit_code": code,
        "percentile": q,
        "max_violation_rate": max_rate,
        "budgets": recorded.budgets_label,
        "sources": list(recorded.traces.sources),
        "requests": recorded.summary.requests,
        "violated_requests": recorded.summary.violated,
        "checks": [c.as_json() for c in checks],
        "not_seen": unseen,
        "input_repairs": recorded.traces.repairs.as_json(),
        **optimisation_json(optimisation(recorded.reports)),
        "where_to_win": levers_json(analyse_levers(recorded.reports, recorded.config))["where_to_win"],
    }
