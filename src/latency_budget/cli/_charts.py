"""The lever sections of ``report --html``: where to win, each stage's models, context size.

Plain SVG and HTML strings, no scripts and no network, like the rest of the page: a
chart per stage of its models' durations (p50 bar, p95 whisker, p99 tick, median first
token as a dot), and per model two scatter plots against input tokens, of duration and
of time to first token, each with its Theil-Sen line drawn only where the data supports
a fit.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from latency_budget._core.estimators import Fit
from latency_budget._core.kinds import KINDS, HintKind
from latency_budget._core.report import format_ms
from latency_budget._core.wording import plural
from latency_budget._encode import html_text

from ._levers import LeverAnalysis, ModelRow, fit_caption
from ._where import total_text

__all__ = ["LEVER_CSS", "context_section", "escape", "models_section", "nice_ceiling", "svg_ticks", "where_section"]

LEVER_CSS = """
table.levers { border-collapse: collapse; background: var(--card); width: 100%; }
table.levers th, table.levers td { border: 1px solid var(--line); padding: 4px 10px; text-align: left;
  vertical-align: top; }
table.levers td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.levers td.try { color: var(--muted); font-size: 12px; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(540px, 1fr)); gap: 14px; }
.chart-card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 12px 14px; }
.chart-card h3 { margin: 0 0 4px; font-size: 15px; }
svg.models, svg.context { width: 100%; height: auto; display: block; }
svg .p50 { fill: var(--accent); opacity: .8; }
svg .p95, svg .p99 { stroke: var(--accent); stroke-width: 1.5; }
svg .ttft { fill: var(--warn); }
svg .pt { fill: var(--accent); opacity: .45; }
svg .pt-ft { fill: var(--warn); opacity: .45; }
svg .fit { stroke: var(--ink); stroke-width: 2; }
svg .fit-ft { stroke: var(--warn); stroke-width: 2; stroke-dasharray: 6 3; }
svg text.model { fill: var(--ink); font-size: 11px; }
.context-cards { display: grid; gap: 14px; }
.context-card .pair { display: grid; grid-template-columns: repeat(auto-fill, minmax(420px, 1fr)); gap: 10px; }
.context-card figure { margin: 0; }
.context-card figcaption { color: var(--muted); font-size: 12px; min-height: 32px; }
.chart-card h3 small { color: var(--muted); font-weight: normal; }
"""

_W, _PAD_L, _PAD_R, _ROW_H, _TOP, _BOTTOM = 560, 150, 12, 24, 8, 22
_SC_W, _SC_H, _SC_L, _SC_B, _SC_T = 420, 230, 52, 30, 10


def escape(text: object) -> str:
    """HTML text or attribute value (``html_text``): markup escaped, bidi and control characters shown escaped."""
    return html_text(str(text))


def nice_ceiling(value: float) -> float:
    """A round number at or above ``value`` (1, 2, 2.5 or 5 times a power of ten)."""
    if value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if value <= step * power:
            return step * power
    return 10 * power


def where_section(levers: LeverAnalysis) -> str:
    """The ranked levers as a table: requests, savings, what to try and what it rests on."""
    if not levers.levers:
        return '<p class="sub" id="where">No lever applies to these requests.</p>'
    rows = []
    for lever in levers.levers:
        requests = f"{100 * lever.share:.0f}% ({lever.requests})"
        if not lever.savings_ms:
            requests = (
                f"held back by {', '.join(lever.held_back_by)} ({lever.held_back})"
                if lever.held_back and not lever.unestimated
                else f"not recommended ({lever.not_recommended})"
                if lever.not_recommended and not lever.unestimated
                else f"none estimated ({lever.unestimated})"
            )
        basis = f" Based on {lever.basis}." if lever.basis else ""
        if lever.quality:
            basis += f" Quality: {lever.quality}."
        rows.append(
            f'<tr data-lever="{escape(lever.kind)}"><td title="{escape(_controls_for(lever.kind))}">'
            f"{escape(lever.kind)}</td><td>{escape(lever.stage)}</td>"
            f'<td class="num">{escape(requests)}</td><td class="num">{escape(format_ms(lever.p(50)))}</td>'
            f'<td class="num">{escape(format_ms(lever.p(95)))}</td>'
            f'<td class="num">{escape(total_text(lever.total_ms) if lever.savings_ms else "-")}</td>'
            f"<td>{'first token' if lever.saves == 'first_token' else 'end to end'}</td>"
            f'<td class="try">{escape(lever.advice[:1].upper() + lever.advice[1:])}.{escape(basis)}</td></tr>'
        )
    return (
        '<table class="levers" id="where"><thead><tr><th>Lever</th><th>Stage</th><th>Requests</th>'
        "<th>p50 saving</th><th>p95 saving</th><th>Total</th><th>Saves</th><th>What to try</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _controls_for(kind: HintKind) -> str:
    """A lever's words from the table, shown on its name: what it controls for, and what it never proposes."""
    lever = KINDS[kind]
    return f"Controls for: {lever.controls_for}. Never proposes {lever.never}."


def models_section(levers: LeverAnalysis) -> str:
    """One chart per stage with model calls: each model's p50, p95 and p99 duration and median first token,
    and under it the answer quality by model where the telemetry says any."""
    by_stage: dict[str, list[ModelRow]] = {}
    for row in levers.models:
        by_stage.setdefault(row.stage, []).append(row)
    if not by_stage:
        return '<p class="sub">No span carries a model name (gen_ai.request.model).</p>'
    cards = [
        f'<section class="chart-card" data-stage="{escape(stage)}"><h3>{escape(stage)}</h3>'
        f"{_models_chart(rows)}{_quality_table(rows)}</section>"
        for stage, rows in by_stage.items()
    ]
    return f'<div class="charts" id="models">{"".join(cards)}</div>'


def _quality_table(rows: list[ModelRow]) -> str:
    """The stage's answer quality by model, where the telemetry says any (empty otherwise)."""
    rated = [(row, row.quality) for row in rows if row.quality is not None]
    if not rated:
        return ""
    body = []
    for row, quality in rated:
        evaluations = "<br>".join(
            escape(
                f"{name} {scores.mean:.3g}"
                + (f" (95% CI {scores.interval()[0]:.3g}-{scores.interval()[1]:.3g}, " if scores.n > 1 else " (")
                + f"n {scores.n:,})"
            )
            for name, scores in sorted(quality.evaluations.items())
        )
        blocked = f"{quality.block_rate:.1%} of {quality.guarded:,}" if quality.block_rate is not None else "-"
        body.append(
            f"<tr><td>{escape(row.model)}</td><td>{quality.calls:,}</td>"
            f"<td>{quality.error_rate or 0:.1%}</td><td>{blocked}</td><td>{evaluations or '-'}</td></tr>"
        )
    return (
        '<table class="quality"><thead><tr><th>Model</th><th>n</th><th>errors</th><th>guardrail blocked</th>'
        f"<th>evaluations (mean)</th></tr></thead><tbody>{''.join(body)}</tbody></table>"
    )


def _models_chart(rows: list[ModelRow]) -> str:
    span = nice_ceiling(max(row.p(99) for row in rows))
    height = _TOP + _ROW_H * len(rows) + _BOTTOM
    plot_w = _W - _PAD_L - _PAD_R

    def x(ms: float) -> float:
        return _PAD_L + min(ms, span) / span * plot_w

    parts = [
        f'<svg class="models" viewBox="0 0 {_W} {height}" role="img" aria-label="call durations by model">',
        f'<line class="axis" x1="{_PAD_L}" y1="{height - _BOTTOM}" x2="{_W - _PAD_R}" y2="{height - _BOTTOM}"/>',
    ]
    for n, row in enumerate(rows):
        top = _TOP + n * _ROW_H
        mid = top + _ROW_H / 2
        p50, p95, p99 = row.p(50), row.p(95), row.p(99)
        label = f"{row.model} (n {row.count})"
        calls = plural(row.count, "call")
        tip = f"{row.model}: p50 {format_ms(p50)}, p95 {format_ms(p95)}, p99 {format_ms(p99)}, {calls}"
        parts.append(f'<text class="model" x="{_PAD_L - 6}" y="{mid + 4:.1f}" text-anchor="end">{escape(label)}</text>')
        parts.append(
            f'<rect class="p50" x="{_PAD_L}" y="{top + 5:.1f}" width="{max(1.0, x(p50) - _PAD_L):.1f}" '
            f'height="{_ROW_H - 10}"><title>{escape(tip)}</title></rect>'
        )
        parts.append(f'<line class="p95" x1="{x(p50):.1f}" y1="{mid:.1f}" x2="{x(p95):.1f}" y2="{mid:.1f}"/>')
        parts.append(
            f'<line class="p99" x1="{x(p99):.1f}" y1="{top + 6:.1f}" x2="{x(p99):.1f}" y2="{top + _ROW_H - 6:.1f}"/>'
        )
        first = row.first_token_p(50)
        if first is not None:
            parts.append(
                f'<circle class="ttft" cx="{x(first):.1f}" cy="{mid:.1f}" r="4">'
                f"<title>{escape(f'{row.model}: median first token {format_ms(first)}')}</title></circle>"
            )
    parts.extend(svg_ticks(span, x, height - 6, format_ms))
    parts.append("</svg>")
    return "".join(parts)


def context_section(levers: LeverAnalysis) -> str:
    """Per stage and model with input tokens: duration and time to first token against them, each with its fit."""
    rows = [row for row in levers.contexts if row.points]
    if not rows:
        return '<p class="sub">No model call records gen_ai.usage.input_tokens.</p>'
    cards = []
    for row in rows:
        durations = [(x, y) for x, y, _ in row.points]
        firsts = [(x, first) for x, _, first in row.points if first is not None]
        plots = [
            f'<figure data-metric="duration"><figcaption>duration: '
            f"{escape(_fit_caption(row.duration_fit, row.duration_reason))}</figcaption>"
            f"{_scatter(durations, row.duration_fit, 'pt', 'fit', 'duration')}</figure>"
        ]
        if firsts:
            plots.append(
                f'<figure data-metric="first_token"><figcaption>first token: '
                f"{escape(_fit_caption(row.first_token_fit, row.first_token_reason))}</figcaption>"
                f"{_scatter(firsts, row.first_token_fit, 'pt-ft', 'fit-ft', 'time to first token')}</figure>"
            )
        where = f'data-stage="{escape(row.stage)}" data-model="{escape(row.model)}"'
        cards.append(
            f'<section class="chart-card context-card" {where}>'
            f"<h3>{escape(row.stage)} · {escape(row.model)} <small>({plural(row.count, 'call')})</small></h3>"
            f'<div class="pair">{"".join(plots)}</div></section>'
        )
    return f'<div class="context-cards" id="context">{"".join(cards)}</div>'


def _fit_caption(fit: Fit | None, reason: str) -> str:
    return fit_caption(fit) if fit is not None else f"no fit ({reason})"


def svg_ticks(
    span: float, x: Callable[[float], float], y: float, label: Callable[[float], str], *, steps: int = 4
) -> list[str]:
    """The labels of a horizontal axis from 0 to ``span`` in ``steps`` equal steps: the first
    anchored at its start, the last at its end, the others centred (escaped for HTML and SVG)."""
    parts = []
    for step in range(steps + 1):
        tick = span * step / steps
        anchor = "start" if step == 0 else "end" if step == steps else "middle"
        parts.append(f'<text x="{x(tick):.1f}" y="{y}" text-anchor="{anchor}">{escape(label(tick))}</text>')
    return parts


def _scatter(points: list[tuple[float, float]], fit: Fit | None, dot: str, line: str, what: str) -> str:
    """Points (input tokens, ms) on axes from zero, the fit's line over the range it was fitted on."""
    ys = sorted(y for _, y in points)
    x_span = nice_ceiling(max(x for x, _ in points))
    y_span = nice_ceiling(ys[min(len(ys) - 1, math.ceil(0.995 * len(ys)))])
    plot_w = _SC_W - _SC_L - _PAD_R
    plot_h = _SC_H - _SC_T - _SC_B

    def px(tokens: float) -> float:
        return _SC_L + min(tokens, x_span) / x_span * plot_w

    def py(ms: float) -> float:
        return _SC_T + plot_h - max(0.0, min(ms, y_span)) / y_span * plot_h

    parts = [
        f'<svg class="context" viewBox="0 0 {_SC_W} {_SC_H}" role="img" '
        f'aria-label="{escape(what)} against input tokens, {plural(len(points), "call")}">',
        f'<line class="axis" x1="{_SC_L}" y1="{_SC_T + plot_h}" x2="{_SC_W - _PAD_R}" y2="{_SC_T + plot_h}"/>',
        f'<line class="axis" x1="{_SC_L}" y1="{_SC_T}" x2="{_SC_L}" y2="{_SC_T + plot_h}"/>',
    ]
    parts.extend(f'<circle class="{dot}" cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.5"/>' for x, y in points)
    if fit is not None:
        parts.append(
            f'<line class="{line}" x1="{px(fit.x_low):.1f}" y1="{py(fit.predict(fit.x_low)):.1f}" '
            f'x2="{px(fit.x_high):.1f}" y2="{py(fit.predict(fit.x_high)):.1f}">'
            f"<title>{escape(_fit_caption(fit, ''))}</title></line>"
        )
    parts.extend(svg_ticks(x_span, px, _SC_H - 14, lambda tick: f"{tick:,.0f}", steps=2))
    parts.append(f'<text x="{_SC_W - _PAD_R}" y="{_SC_H - 2}" text-anchor="end">input tokens</text>')
    for tick in (0.0, y_span / 2, y_span):
        parts.append(f'<text x="{_SC_L - 4}" y="{py(tick) + 4:.1f}" text-anchor="end">{escape(format_ms(tick))}</text>')
    parts.append("</svg>")
    return "".join(parts)
