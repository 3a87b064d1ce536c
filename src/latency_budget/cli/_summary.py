"""The per-stage summary shared by ``report`` and ``demo``: rows, and their table, Markdown and JSON forms.

Each stage gives a row for its duration, whose "over budget" figure counts the requests
in which the stage broke any of its budgets, and, where it has them, rows for its time
to first token and its number of calls, which count only that budget. The profile's
``total`` (end-to-end duration) and request-level ``first token`` close each profile.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from latency_budget._core.report import format_ms
from latency_budget._core.wording import plural
from latency_budget._encode import markdown_cell, markdown_text
from latency_budget.cli._stats import Optimisation, ProfileSummary, RunSummary, StageSummary, percentile

from ._table import markdown_table, text_table

__all__ = [
    "SummaryRow",
    "closing_lines",
    "end_to_end_line",
    "format_rate",
    "most_often_line",
    "optimisation_json",
    "optimisation_lines",
    "summary_json",
    "summary_markdown",
    "summary_rows",
    "summary_table",
]

QUANTILES = (50.0, 95.0, 99.0)


@dataclass(frozen=True, slots=True)
class SummaryRow:
    """One line of the summary: a stage metric of one profile, over the requests where it was measured."""

    profile: str
    stage: str
    metric: str  # "duration", "first_token" or "calls"
    budget: float | None  # ms, or a number of calls
    values: tuple[float, ...]  # sorted
    over: int  # requests over budget (see the module docstring)
    severity: str

    @property
    def label(self) -> str:
        """``model_call``, ``model_call first token`` or ``model_call calls``."""
        if self.metric == "duration":
            return self.stage
        if self.stage == "total" and self.metric == "first_token":
            return "first token"
        return f"{self.stage} {self.metric.replace('_', ' ')}"

    @property
    def count(self) -> int:
        """Requests where the metric was measured."""
        return len(self.values)

    @property
    def over_own_budget(self) -> int:
        """Requests over this row's own budget (a duration row's ``over`` counts any of the stage's budgets)."""
        return _over(self.values, self.budget)

    @property
    def rate(self) -> float:
        """``over`` as a share of ``count`` (0 when nothing was measured)."""
        return self.over / self.count if self.values else 0.0

    def p(self, q: float) -> float | None:
        """The ``q``-th percentile of the values, or ``None`` when there are none."""
        return percentile(self.values, q, presorted=True) if self.values else None

    def show(self, value: float | None) -> str:
        """A budget or a percentile in this row's unit."""
        if value is None:
            return "-"
        if self.metric == "calls":
            return f"{value:.1f}".rstrip("0").rstrip(".")
        return format_ms(value)


def _over(values: Sequence[float], budget: float | None) -> int:
    return 0 if budget is None else sum(1 for value in values if value > budget)


def stage_rows(stage: StageSummary) -> list[SummaryRow]:
    """The rows of one stage summary (or of a profile's total)."""
    rows = [
        SummaryRow(
            stage.profile, stage.stage, "duration", stage.budget_ms, stage.actual_ms, stage.violations, stage.severity
        )
    ]
    if stage.first_token_ms and (stage.stage == "total" or stage.first_token_budget_ms is not None):
        rows.append(
            SummaryRow(
                stage.profile,
                stage.stage,
                "first_token",
                stage.first_token_budget_ms,
                stage.first_token_ms,
                _over(stage.first_token_ms, stage.first_token_budget_ms),
                stage.severity,
            )
        )
    if stage.max_calls is not None and stage.calls:
        calls = tuple(float(c) for c in stage.calls)
        rows.append(
            SummaryRow(
                stage.profile,
                stage.stage,
                "calls",
                stage.max_calls,
                calls,
                _over(calls, stage.max_calls),
                stage.severity,
            )
        )
    return rows


def _total_rows(profile: ProfileSummary) -> list[SummaryRow]:
    total = profile.total
    rows = [
        SummaryRow(
            total.profile,
            total.stage,
            "duration",
            total.budget_ms,
            total.actual_ms,
            _over(total.actual_ms, total.budget_ms),
            total.severity,
        )
    ]
    if total.first_token_ms:
        rows.append(
            SummaryRow(
                total.profile,
                total.stage,
                "first_token",
                total.first_token_budget_ms,
                total.first_token_ms,
                _over(total.first_token_ms, total.first_token_budget_ms),
                total.severity,
            )
        )
    return rows


def summary_rows(summary: RunSummary) -> list[SummaryRow]:
    """All rows, profile by profile: stages in config order, then total and first token."""
    rows: list[SummaryRow] = []
    for profile in summary.profiles:
        for stage in profile.stages:
            rows.extend(stage_rows(stage))
        rows.extend(_total_rows(profile))
    return rows


def format_rate(over: int, count: int) -> str:
    """``12.5% (25/200)``, or ``-`` when nothing was measured."""
    if not count:
        return "-"
    return f"{100 * over / count:.1f}% ({over}/{count})"


def _cells(row: SummaryRow) -> list[str]:
    return [
        row.show(row.budget),
        str(row.count),
        *(row.show(row.p(q)) for q in QUANTILES),
        format_rate(row.over, row.count) if row.budget is not None or row.over else "-",
    ]


_HEADER = ["Budget", "n", "p50", "p95", "p99", "Over budget"]


def _with_profiles(summary: RunSummary) -> bool:
    return len(summary.profiles) > 1 or any(p.profile != "default" for p in summary.profiles)


def summary_table(summary: RunSummary) -> str:
    """The summary as a text table (a Profile column appears when profiles were used)."""
    profiles = _with_profiles(summary)
    header = (["Profile"] if profiles else []) + ["Stage", *_HEADER]
    rows = [([row.profile] if profiles else []) + [row.label, *_cells(row)] for row in summary_rows(summary)]
    first_number = 2 if profiles else 1
    return text_table(header, rows, right=range(first_number, len(header) - 1))


def summary_markdown(summary: RunSummary) -> str:
    """The summary as a Markdown table."""
    profiles = _with_profiles(summary)
    header = (["Profile"] if profiles else []) + ["Stage", *_HEADER]
    rows = [
        ([markdown_text(row.profile)] if profiles else []) + [markdown_cell(row.label), *_cells(row)]
        for row in summary_rows(summary)
    ]
    first_number = 2 if profiles else 1
    return markdown_table(header, rows, right=range(first_number, len(header) - 1))


def end_to_end_line(summary: RunSummary) -> str:
    """``End to end over 200 requests: p50 2.1s ...; 51 requests (25.5%) over an error-level budget.``"""
    e2e = summary.end_to_end
    parts = ", ".join(f"p{q:g} {format_ms(e2e.p(q))}" for q in QUANTILES)
    line = f"End to end over {plural(summary.requests, 'request')}: {parts}"
    if e2e.first_token_ms:
        ft = ", ".join(f"p{q:g} {format_ms(e2e.first_token_p(q))}" for q in QUANTILES)
        line += f"; first token {ft}"
    if not _has_budgets(summary):
        return f"{line}.\nNo budgets set: give --budgets FILE to judge the stages."
    return f"{line}.\nOver an error-level budget: {format_rate(summary.violated, summary.requests)} of requests."


def _has_budgets(summary: RunSummary) -> bool:
    return any(row.budget is not None for row in summary_rows(summary))


def most_often_line(summary: RunSummary) -> str:
    """Which stage broke its budgets in the most requests."""
    worst = summary.most_often_over()
    if worst is None:
        return "No stage went over budget." if _has_budgets(summary) else ""
    stage, count = worst
    ran = sum(s.count for s in summary.stages if s.stage == stage)
    share = f" ({100 * count / ran:.1f}%)" if ran else ""
    return f"Most often over budget: {stage}, in {count} of the {plural(ran, 'request')} where it ran{share}."


def optimisation_lines(found: Optimisation) -> list[str]:
    """Critical-path shares, as a line for people (the levers have a section of their own)."""
    lines: list[str] = []
    if found.critical_share:
        shares = ", ".join(f"{name} {100 * share:.0f}%" for name, share in found.critical_share)
        lines.append(f"Critical path (share of end-to-end time): {shares}.")
    return lines


def closing_lines(summary: RunSummary, found: Optimisation | None = None) -> list[str]:
    """The end-to-end figures, the stage most often over budget and where to optimise."""
    lines = [line for line in (end_to_end_line(summary), most_often_line(summary)) if line]
    return lines + (optimisation_lines(found) if found is not None else [])


def optimisation_json(found: Optimisation) -> dict[str, Any]:
    """Critical-path shares and hints as plain JSON-ready data."""
    return {
        "critical_path_share": dict(found.critical_share),
        "hints": [
            {
                "kind": hint.kind,
                "stage": hint.stage,
                "requests": hint.requests,
                "share": hint.share,
                "savings_p50_ms": percentile(hint.savings_ms, 50, presorted=True),
                "savings_total_ms": sum(hint.savings_ms),
            }
            for hint in found.hints
        ],
    }


def summary_json(summary: RunSummary) -> dict[str, Any]:
    """The summary as plain JSON-ready data."""
    worst = summary.most_often_over()
    e2e = summary.end_to_end
    return {
        "requests": summary.requests,
        "violated_requests": summary.violated,
        "end_to_end": {
            **{f"p{q:g}_ms": e2e.p(q) for q in QUANTILES},
            **{f"first_token_p{q:g}_ms": e2e.first_token_p(q) for q in QUANTILES},
        },
        "most_often_over_budget": None if worst is None else {"stage": worst[0], "requests": worst[1]},
        "rows": [
            {
                "profile": row.profile,
                "stage": row.stage,
                "metric": row.metric,
                "budget": row.budget,
                "severity": row.severity,
                "count": row.count,
                **{f"p{q:g}": row.p(q) for q in QUANTILES},
                "over_budget": row.over,
                "violation_rate": row.rate,
            }
            for row in summary_rows(summary)
        ],
    }
