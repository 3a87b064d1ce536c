"""The lever analysis for people and programs: "Where to win", models by stage, context size.

Text and Markdown for ``report``, ``check`` and ``demo``; plain data for ``--format json``.
"""

from __future__ import annotations

from typing import Any

from latency_budget._core.estimators import Fit
from latency_budget._core.quality import QualityStats, Scores
from latency_budget._core.report import format_ms
from latency_budget._core.wording import plural
from latency_budget._encode import markdown_cell, markdown_text, terminal_text

from ._levers import ContextRow, LeverAnalysis, LeverSummary, ModelRow, fit_caption
from ._table import markdown_table, text_table

__all__ = [
    "context_lines",
    "levers_json",
    "model_lines",
    "quality_json",
    "quality_lines",
    "total_text",
    "where_lines",
]

QUANTILES = (50.0, 95.0, 99.0)
_SAVES = {"end_to_end": "end to end", "first_token": "first token"}


def total_text(ms: float) -> str:
    """A total for people: seconds past ten of them (``133.3s``), else ``format_ms``."""
    return f"{ms / 1000:,.1f}s" if ms >= 10_000 else format_ms(ms)


def _share(lever: LeverSummary) -> str:
    return f"{100 * lever.share:.0f}% ({lever.requests})"


def _lever_cells(lever: LeverSummary) -> list[str]:
    return [
        lever.kind,
        lever.stage,
        _share(lever) if lever.savings_ms else _no_saving(lever),
        format_ms(lever.p(50)),
        format_ms(lever.p(95)),
        total_text(lever.total_ms) if lever.savings_ms else "-",
        _SAVES[lever.saves],
    ]


def _no_saving(lever: LeverSummary) -> str:
    if lever.not_recommended and not lever.unestimated and not lever.held_back:
        return f"- ({lever.not_recommended} not recommended)"
    if lever.held_back and not lever.unestimated:
        return f"- ({lever.held_back} held back by {', '.join(lever.held_back_by)})"
    return f"- ({lever.unestimated} without estimate)"


_LEVER_HEADER = ["Lever", "Stage", "Requests", "p50 saving", "p95 saving", "Total", "Saves"]


def _title(analysis: LeverAnalysis) -> str:
    return (
        f"Where to win, estimated over {plural(analysis.requests, 'request')} "
        "(per request where a lever applies; levers overlap, so their savings do not add up):"
    )


def _advice(n: int, lever: LeverSummary, *, markdown: bool = False) -> str:
    """One numbered line; names from the traces in it are shown as terminal or Markdown text."""
    basis = f" Based on {lever.basis}." if lever.basis else ""
    test = f" Passed: {lever.test}." if lever.test else ""
    quality = f" Quality: {lever.quality}." if lever.quality else ""
    text = f"{lever.kind}, {lever.stage}: {lever.advice[:1].upper()}{lever.advice[1:]}.{basis}{test}{quality}"
    return f"{n}. {markdown_text(text) if markdown else terminal_text(text)}"


def _markdown_names(rows: list[list[str]], columns: int) -> list[list[str]]:
    """The first ``columns`` cells of each row (names) as Markdown code spans."""
    return [[markdown_cell(cell) for cell in row[:columns]] + row[columns:] for row in rows]


def where_lines(analysis: LeverAnalysis, *, markdown: bool = False) -> list[str]:
    """The ranked levers as a table, then one line each: what to try, and what the estimate rests on."""
    under = _left_out(analysis)
    if not analysis.levers:
        return ["Where to win: no lever applies to these requests.", *under]
    rows = [_lever_cells(lever) for lever in analysis.levers]
    if markdown:
        table = markdown_table(_LEVER_HEADER, _markdown_names(rows, 2), right=range(2, 6))
        advice = [_advice(n, lever, markdown=True) for n, lever in _numbered(analysis)]
        return [f"**{_title(analysis)}**", "", table, "", *advice, *(markdown_text(line) for line in under)]
    table = text_table(_LEVER_HEADER, rows, right=range(2, 6))
    return [_title(analysis), table, *(_advice(n, lever) for n, lever in _numbered(analysis)), *under]


def _left_out(analysis: LeverAnalysis) -> list[str]:
    """One line saying how many findings the saving threshold left out, when any."""
    n = analysis.left_out
    if not n:
        return []
    return [f"Left out: {plural(n, 'finding')} that would save less than hints.min_saving_ms."]


def _numbered(analysis: LeverAnalysis) -> list[tuple[int, LeverSummary]]:
    return list(enumerate(analysis.levers, 1))


def _model_cells(row: ModelRow) -> list[str]:
    rate = "-" if row.ms_per_output_token is None else format_ms(row.ms_per_output_token)
    return [
        row.stage,
        row.model,
        ", ".join(row.providers[:2]) or "-",
        str(row.count),
        *(format_ms(row.p(q)) for q in QUANTILES),
        str(len(row.first_token_ms)),
        *(format_ms(row.first_token_p(q)) for q in QUANTILES),
        rate,
    ]


_MODEL_HEADER = [
    "Stage",
    "Model",
    "Provider",
    "n",
    "p50",
    "p95",
    "p99",
    "streamed",
    "first token p50",
    "p95",
    "p99",
    "per output token",
]


def model_lines(analysis: LeverAnalysis, *, markdown: bool = False) -> list[str]:
    """Each stage's latency by model (request model; providers as recorded)."""
    if not analysis.models:
        return []
    rows = [_model_cells(row) for row in analysis.models]
    title = "Model calls by stage and model (gen_ai.request.model): duration and time to first token"
    if markdown:
        return [f"**{title}**", "", markdown_table(_MODEL_HEADER, _markdown_names(rows, 3), right=range(3, 12))]
    return [title + ":", text_table(_MODEL_HEADER, rows, right=range(3, 12))]


def _rate_cell(part: int, whole: int) -> str:
    return f"{part / whole:.1%} ({part:,}/{whole:,})" if whole else "-"


def _score_text(name: str, scores: Scores) -> str:
    """``correctness 0.91 (0.88-0.94, n 120)``: the mean, its 95% confidence interval and n (``name`` encoded)."""
    low, high = scores.interval()
    interval = f"{low:.3g}-{high:.3g}, " if scores.n > 1 else ""
    return f"{name} {scores.mean:.3g} ({interval}n {scores.n:,})"


def _quality_cells(row: ModelRow, quality: QualityStats, *, markdown: bool) -> list[str]:
    name = markdown_cell if markdown else str
    evaluations = "; ".join(_score_text(name(n), scores) for n, scores in sorted(quality.evaluations.items()))
    return [
        row.stage,
        row.model,
        f"{quality.calls:,}",
        _rate_cell(quality.errors, quality.calls),
        _rate_cell(quality.blocked, quality.guarded),
        _rate_cell(quality.cut, quality.calls),
        _rate_cell(quality.refused, quality.calls),
        evaluations or "-",
    ]


_QUALITY_HEADER = ["Stage", "Model", "n", "errors", "guardrail blocked", "cut (length)", "refused", "evaluations"]


def quality_lines(analysis: LeverAnalysis, *, markdown: bool = False) -> list[str]:
    """Each stage's answer quality by model, where the telemetry says any: errors, guardrail blocks, finish
    reasons and each evaluation's mean with its 95% confidence interval and n."""
    rated = [(row, row.quality) for row in analysis.models if row.quality is not None]
    if not rated:
        return []
    rows = [_quality_cells(row, quality, markdown=markdown) for row, quality in rated]
    title = (
        "Answer quality by stage and model (gen_ai.evaluation.result, guardrail decisions, error status, "
        "finish reasons): evaluation means with 95% CI"
    )
    if markdown:
        return [f"**{title}**", "", markdown_table(_QUALITY_HEADER, _markdown_names(rows, 2), right=range(2, 7))]
    return [title + ":", text_table(_QUALITY_HEADER, rows, right=range(2, 7))]


def quality_json(quality: QualityStats | None) -> dict[str, Any] | None:
    """A model's quality figures as plain data (``None``: the telemetry says nothing of its answers)."""
    if quality is None:
        return None
    return {
        "calls": quality.calls,
        "errors": quality.errors,
        "error_rate": quality.error_rate,
        "guarded": quality.guarded,
        "blocked": quality.blocked,
        "block_rate": quality.block_rate,
        "cut": quality.cut,
        "refused": quality.refused,
        "evaluations": [
            {
                "name": name,
                "mean": scores.mean,
                "ci95": list(scores.interval()) if scores.n > 1 else None,
                "n": scores.n,
            }
            for name, scores in sorted(quality.evaluations.items())
        ],
    }


def _fit_text(fit: Fit | None, reason: str) -> str:
    return fit_caption(fit) if fit is not None else f"no fit: {reason}"


def _context_cells(row: ContextRow) -> list[str]:
    return [
        row.stage,
        row.model,
        str(row.count),
        "-" if row.input_p50 is None else f"{row.input_p50:,.0f}",
        _fit_text(row.duration_fit, row.duration_reason),
        _fit_text(row.first_token_fit, row.first_token_reason),
    ]


_CONTEXT_HEADER = ["Stage", "Model", "n", "median input tokens", "duration", "first token"]


def context_lines(analysis: LeverAnalysis, *, markdown: bool = False) -> list[str]:
    """How latency grows with gen_ai.usage.input_tokens, per stage and model (Theil-Sen, or why no fit)."""
    if not analysis.contexts:
        return []
    rows = [_context_cells(row) for row in analysis.contexts]
    title = "Context size: latency against gen_ai.usage.input_tokens (Theil-Sen fit, shown only where supported)"
    if markdown:
        return [f"**{title}**", "", markdown_table(_CONTEXT_HEADER, _markdown_names(rows, 2), right=range(2, 4))]
    return [title + ":", text_table(_CONTEXT_HEADER, rows, right=range(2, 4))]


def _fit_json(fit: Fit | None, reason: str) -> dict[str, Any]:
    if fit is None:
        return {"fit": None, "reason": reason}
    return {
        "fit": {
            "ms_per_token": fit.slope,
            "intercept_ms": fit.intercept,
            "ms_per_token_ci95": [fit.slope_low, fit.slope_high],
            "r_squared": fit.r_squared,
            "n": fit.n,
            "of": fit.of,
            "input_tokens_range": [fit.x_low, fit.x_high],
        },
        "reason": None,
    }


def levers_json(analysis: LeverAnalysis) -> dict[str, Any]:
    """The whole analysis as plain JSON-ready data."""
    return {
        "left_out_under_min_saving_ms": analysis.left_out,
        "where_to_win": [
            {
                "kind": lever.kind,
                "stage": lever.stage,
                "requests": lever.requests,
                "share": lever.share,
                "without_estimate": lever.unestimated,
                "saves": lever.saves,
                "savings_p50_ms": lever.p(50),
                "savings_p95_ms": lever.p(95),
                "savings_total_ms": lever.total_ms,
                "targets": list(lever.targets),
                "basis": lever.basis,
                "test": lever.test,
                "try": lever.advice,
                # Only where a protected stage's check held a saving back (streaming ahead of it).
                **({"held_back": lever.held_back, "held_back_by": list(lever.held_back_by)} if lever.held_back else {}),
                # Only for a lever that changes answers: the trade that stopped it, or the caveat.
                **({"quality": lever.quality} if lever.quality else {}),
                **({"not_recommended": lever.not_recommended} if lever.not_recommended else {}),
            }
            for lever in analysis.levers
        ],
        "models": [
            {
                "stage": row.stage,
                "model": row.model,
                "providers": list(row.providers),
                "response_models": list(row.response_models),
                "count": row.count,
                **{f"p{q:g}_ms": row.p(q) for q in QUANTILES},
                "streamed": len(row.first_token_ms),
                **{f"first_token_p{q:g}_ms": row.first_token_p(q) for q in QUANTILES},
                "ms_per_output_token": row.ms_per_output_token,
                "ms_per_output_token_from": row.rate_from,
                "ms_per_output_token_calls": row.rate_calls,
                "quality": quality_json(row.quality),
            }
            for row in analysis.models
        ],
        "context_size": [
            {
                "stage": row.stage,
                "model": row.model,
                "count": row.count,
                "input_tokens_p50": row.input_p50,
                "duration": _fit_json(row.duration_fit, row.duration_reason),
                "first_token": _fit_json(row.first_token_fit, row.first_token_reason),
            }
            for row in analysis.contexts
        ],
    }
