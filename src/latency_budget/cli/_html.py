"""``report --html``: one self-contained page, no scripts and no network assets.

Per stage, a histogram of its time in each request and one of its time to first token,
each with its budget drawn across it and the bins beyond the budget in red; where to win,
each stage's models and the context-size scatter plots (:mod:`._charts`); then a
waterfall of the slowest request, whose spans of over-budget stages are highlighted, and
its verdict naming every broken budget as the root span's does. A Content-Security-Policy
that forbids every external load keeps the page honest about being self-contained.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from latency_budget._core.annotate import verdict_text
from latency_budget._core.report import TOTAL, TraceReport, ViolationKind, format_ms
from latency_budget._core.wording import plural
from latency_budget._replay import SpanRecord
from latency_budget._version import __version__
from latency_budget.cli._stats import StageSummary

from ._charts import LEVER_CSS, context_section, escape, models_section, nice_ceiling, svg_ticks, where_section
from ._levers import LeverAnalysis
from ._quality_chart import QUALITY_CSS, quality_section
from ._recorded import Recorded
from ._summary import QUANTILES, SummaryRow, format_rate, stage_rows

__all__ = ["render_html"]

_BINS = 40
_CHART_W, _CHART_H, _PAD_L, _PAD_B, _PAD_T = 560, 150, 8, 22, 18

_CSS = """
:root { --ok: #2e7d5b; --ok-soft: #cfe8dc; --over: #c62828; --over-soft: #f6d1d1; --warn: #b26a00;
  --ink: #1d2330; --muted: #5b6474; --line: #e3e6ec; --bg: #f7f8fa; --card: #fff; --accent: #3b5bdb; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
  background: var(--bg); }
header, main { max-width: 1180px; margin: 0 auto; padding: 0 24px; }
header { padding-top: 28px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 32px 0 12px; }
.sub { color: var(--muted); margin: 0 0 18px; }
.figures { display: flex; flex-wrap: wrap; gap: 12px; }
.figure { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 10px 16px;
  min-width: 150px; }
.figure b { display: block; font-size: 20px; }
.figure span { color: var(--muted); font-size: 12px; }
.figure.bad b { color: var(--over); }
.stages { display: grid; grid-template-columns: repeat(auto-fill, minmax(540px, 1fr)); gap: 14px; align-items: start; }
.stage-card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 12px 14px; }
.stage-card h3 { margin: 0; font-size: 15px; display: flex; justify-content: space-between; gap: 8px; }
.stage-card h3 small { color: var(--muted); font-weight: normal; }
.stage-card.over h3 .rate { color: var(--over); }
.stats { color: var(--muted); font-size: 12px; margin: 2px 0 6px; }
.metric { margin-top: 8px; }
.metric + .metric { border-top: 1px dashed var(--line); padding-top: 6px; }
.metric-head { font-size: 12px; font-weight: 600; }
.metric.over .metric-head { color: var(--over); }
.badge { display: inline-block; border-radius: 999px; padding: 0 8px; font-size: 11px; font-weight: 600; }
.badge.pass { background: var(--ok-soft); color: var(--ok); }
.badge.fail { background: var(--over-soft); color: var(--over); }
.badge.warn { background: #fde9c8; color: var(--warn); }
svg.histogram { width: 100%; height: auto; display: block; }
svg .ok { fill: var(--ok); opacity: .75; }
svg .over { fill: var(--over); opacity: .85; }
svg .budget { stroke: var(--ink); stroke-width: 1.5; stroke-dasharray: 5 3; }
svg .pct { stroke: var(--accent); stroke-width: 1; }
svg text { font-size: 10px; fill: var(--muted); }
svg text.budget-label { fill: var(--ink); font-weight: 600; }
svg .axis { stroke: var(--line); }
.waterfall { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 12px 14px; }
.wf-row { display: grid; grid-template-columns: 360px 1fr 80px; align-items: center; gap: 10px; min-height: 24px;
  border-bottom: 1px solid #f0f1f4; }
.wf-row:last-child { border-bottom: 0; }
.wf-ticks { position: relative; height: 16px; font-size: 11px; color: var(--muted); }
.wf-ticks span { position: absolute; transform: translateX(-50%); }
.wf-ticks span:first-child { transform: none; }
.wf-ticks span:last-child { transform: translateX(-100%); }
.wf-name { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; font-size: 13px; }
.wf-name .stage { color: var(--muted); font-size: 11px; margin-left: 6px; }
.wf-track { position: relative; height: 14px; background: repeating-linear-gradient(90deg, transparent 0,
  transparent calc(10% - 1px), #eef0f4 calc(10% - 1px), #eef0f4 10%); }
.bar { position: absolute; top: 0; height: 14px; border-radius: 3px; background: #9aa4b5; min-width: 2px; }
.bar.stage { background: var(--ok); }
.bar.over { background: var(--over); box-shadow: 0 0 0 2px var(--over-soft); }
.bar.warn { background: var(--warn); }
.wf-dur { text-align: right; font-variant-numeric: tabular-nums; font-size: 12px; color: var(--muted); }
.wf-row.over .wf-dur, .wf-row.over .wf-name { color: var(--over); font-weight: 600; }
.legend { display: flex; gap: 16px; color: var(--muted); font-size: 12px; margin: 8px 0 0; }
.legend i { display: inline-block; width: 12px; height: 12px; border-radius: 3px; vertical-align: -2px;
  margin-right: 4px; }
table.verdict { border-collapse: collapse; margin-top: 12px; background: var(--card); }
table.verdict th, table.verdict td { border: 1px solid var(--line); padding: 4px 10px; text-align: left; }
table.verdict td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.verdict tr.over td { color: var(--over); font-weight: 600; }
footer { max-width: 1180px; margin: 32px auto; padding: 0 24px; color: var(--muted); font-size: 12px; }
"""


_e = escape
_nice_ceiling = nice_ceiling


def render_html(recorded: Recorded, levers: LeverAnalysis) -> str:
    """The whole page for recorded traces judged under a budget file, with their levers."""
    summary = recorded.summary
    e2e = summary.end_to_end
    worst = summary.most_often_over()
    figures = [
        ("requests", str(summary.requests), False),
        ("over an error-level budget", format_rate(summary.violated, summary.requests), summary.violated > 0),
        *((f"end-to-end p{q:g}", format_ms(e2e.p(q)), False) for q in QUANTILES),
    ]
    if worst is not None:
        figures.append(("most often over budget", f"{worst[0]} ({worst[1]})", True))
    figure_html = "".join(
        f'<div class="figure{" bad" if bad else ""}"><b>{_e(value)}</b><span>{_e(label)}</span></div>'
        for label, value, bad in figures
    )
    multi = any(p.profile != "default" for p in summary.profiles)
    cards = []
    for profile in summary.profiles:
        for stage in (*profile.stages, profile.total):
            if stage.count:
                cards.append(_stage_card(stage, show_profile=multi))
    slowest = max(recorded.reports, key=lambda r: r.total_actual_ms, default=None)
    waterfall = _waterfall(recorded, slowest) if slowest is not None else "<p>No requests.</p>"
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Latency budget report</title>
<style>{_CSS}{LEVER_CSS}{QUALITY_CSS}</style>
</head>
<body>
<header>
<h1>Latency budget report</h1>
<p class="sub">{_e(recorded.intro())}</p>
<div class="figures" id="figures">{figure_html}</div>
</header>
<main>
<h2>Each stage against its budget</h2>
<p class="sub">Time per request, one histogram per timed budget of each stage (its duration and, where it has one,
its time to first token; the end to end's first token is the user's wait for text): bars past the dashed budget
line are requests over budget; the blue ticks mark p50, p95 and p99.</p>
<div class="stages" id="stages">{"".join(cards)}</div>
<h2>Where to win</h2>
<p class="sub">Each latency lever the spans show, ranked by the time it would save over all requests, estimated
per request where it applies; levers overlap, so their savings do not add up.</p>
{where_section(levers)}
<h2>Models by stage</h2>
<p class="sub">Call durations per model: the bar runs to p50, the whisker to p95, the tick marks p99; the orange dot is
the median time to first token of streamed calls.</p>
{models_section(levers)}
<h2>Latency against quality</h2>
<p class="sub">Per stage, each model's median call duration against its answers' quality (the evaluation that counts
under the budget file's quality section and that most models have, else the share a guardrail passed); green points
are the Pareto front, the models no other model beats on both, joined by the dashed line.</p>
{quality_section(levers)}
<h2>Context size</h2>
<p class="sub">Each call's duration (blue) and time to first token (orange, streamed calls) against its
gen_ai.usage.input_tokens; a line is drawn only where a Theil-Sen fit is supported (enough calls and sizes, a slope
whose 95% interval is above zero, R² of at least 0.05).</p>
{context_section(levers)}
<h2>The slowest request</h2>
{waterfall}
</main>
<footer>Generated by latency-budget {_e(__version__)} (otel-latency-budget).</footer>
</body>
</html>
"""


def _stage_card(stage: StageSummary, *, show_profile: bool) -> str:
    """A stage's (or the end-to-end) card: one histogram per timed budget, duration and first token.

    The card's rate counts the requests that broke any of the stage's budgets (for the end to
    end: its duration or its first token), each block's line only its own budget.
    """
    title = "end to end" if stage.stage == TOTAL else stage.stage
    profile = f" <small>profile {_e(stage.profile)}</small>" if show_profile else ""
    over = stage.violations
    rate = f"over budget in {over} of {stage.count} ({100 * over / stage.count:.1f}%)" if _has_budget(stage) else ""
    blocks = [_metric_block(row) for row in stage_rows(stage)]
    return f"""<section class="stage-card{" over" if over else ""}" data-stage="{_e(stage.stage)}">
<h3><span>{_e(title)}{profile}</span><small class="rate">{_e(rate)}</small></h3>
{"".join(blocks)}
</section>"""


def _has_budget(stage: StageSummary) -> bool:
    return stage.budget_ms is not None or stage.first_token_budget_ms is not None or stage.max_calls is not None


_METRIC_TITLES = {"duration": "duration", "first_token": "first token", "calls": "calls"}


def _metric_block(row: SummaryRow) -> str:
    """One budget of a stage: its badge, its percentiles and, for a time, its histogram with the budget line."""
    own_over = row.over_own_budget
    p95 = row.p(95)
    if row.budget is None:
        badge = '<span class="badge">no budget</span>'
    elif p95 is not None and p95 > row.budget:
        badge = f'<span class="badge {"warn" if row.severity == "warn" else "fail"}">p95 over budget</span>'
    else:
        badge = '<span class="badge pass">p95 within budget</span>'
    stats = " · ".join(
        [
            f"budget {row.show(row.budget)}" if row.budget is not None else "no budget",
            *(f"p{q:g} {row.show(row.p(q))}" for q in QUANTILES),
            f"n {row.count}",
            *([f"over in {own_over} of {row.count}"] if row.budget is not None else []),
        ]
    )
    chart = "" if row.metric == "calls" else _histogram(row.values, row.budget, [(q, row.p(q)) for q in QUANTILES])
    over_css = " over" if own_over else ""
    return f"""<div class="metric{over_css}" data-metric="{_e(row.metric)}" data-over="{own_over}">
<div class="metric-head">{_e(_METRIC_TITLES[row.metric])} {badge}</div>
<div class="stats">{_e(stats)}</div>
{chart}</div>"""


def _histogram(values: Sequence[float], budget: float | None, marks: list[tuple[float, float | None]]) -> str:
    """An SVG histogram of ``values`` (sorted, ms) with the budget line; the last bin holds the overflow."""
    top = max(values[min(len(values) - 1, math.ceil(0.995 * len(values)))], budget * 1.25 if budget else 0.0)
    span = _nice_ceiling(top)
    width = span / _BINS
    counts = [0] * _BINS
    for value in values:
        counts[min(_BINS - 1, int(value / width))] += 1
    tallest = max(counts) or 1
    plot_w = _CHART_W - 2 * _PAD_L
    plot_h = _CHART_H - _PAD_B - _PAD_T
    bar_w = plot_w / _BINS

    def x(ms: float) -> float:
        return _PAD_L + min(ms, span) / span * plot_w

    parts = [
        f'<svg class="histogram" viewBox="0 0 {_CHART_W} {_CHART_H}" role="img" '
        f'aria-label="distribution of {plural(len(values), "value")}">',
        f'<line class="axis" x1="{_PAD_L}" y1="{_PAD_T + plot_h}" x2="{_PAD_L + plot_w}" y2="{_PAD_T + plot_h}"/>',
    ]
    for n, count in enumerate(counts):
        if not count:
            continue
        low = n * width
        is_over = budget is not None and low + width / 2 > budget
        height = max(1.0, count / tallest * plot_h)
        label = (
            f"{format_ms(low)}{'+' if n == _BINS - 1 else ' to ' + format_ms(low + width)}: {plural(count, 'request')}"
        )
        parts.append(
            f'<rect class="{"over" if is_over else "ok"}" x="{_PAD_L + n * bar_w + 0.5:.1f}" '
            f'y="{_PAD_T + plot_h - height:.1f}" width="{bar_w - 1:.1f}" height="{height:.1f}">'
            f"<title>{_e(label)}</title></rect>"
        )
    for q, mark in marks:
        if mark is not None:
            parts.append(
                f'<line class="pct" x1="{x(mark):.1f}" y1="{_PAD_T + plot_h}" x2="{x(mark):.1f}" '
                f'y2="{_PAD_T + plot_h + 5}"><title>p{q:g} {_e(format_ms(mark))}</title></line>'
            )
    parts.extend(svg_ticks(span, x, _CHART_H - 4, format_ms))
    if budget is not None:
        bx = x(budget)
        parts.append(f'<line class="budget" x1="{bx:.1f}" y1="{_PAD_T - 4}" x2="{bx:.1f}" y2="{_PAD_T + plot_h}"/>')
        anchor = "end" if bx > _CHART_W * 0.75 else "start"
        offset = -4 if anchor == "end" else 4
        parts.append(
            f'<text class="budget-label" x="{bx + offset:.1f}" y="{_PAD_T - 6}" text-anchor="{anchor}">'
            f"budget {_e(format_ms(budget))}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True, slots=True)
class _Row:
    span: SpanRecord
    depth: int


def _request_spans(spans: Sequence[SpanRecord], report: TraceReport) -> list[_Row]:
    """The spans of the report's local root, depth first in start order, each with its stage."""
    in_trace = [s for s in spans if s.trace_id == report.trace_id]
    children: dict[int, list[SpanRecord]] = {}
    by_id = {s.span_id: s for s in in_trace}
    for span in in_trace:
        if span.parent_id is not None and not span.remote_parent and span.parent_id in by_id:
            children.setdefault(span.parent_id, []).append(span)
    root = by_id.get(report.span_id) if report.span_id is not None else None
    if root is None:
        return []
    rows: list[_Row] = []
    stack = [(root, 0)]
    seen: set[int] = set()
    while stack:
        span, depth = stack.pop()
        if span.span_id in seen:
            continue
        seen.add(span.span_id)
        rows.append(_Row(span, depth))
        for child in sorted(children.get(span.span_id, ()), key=lambda s: (s.start_ns, s.span_id), reverse=True):
            stack.append((child, depth + 1))
    return rows


def _waterfall(recorded: Recorded, report: TraceReport) -> str:
    config = recorded.config
    rows = _request_spans(recorded.traces.spans, report)
    over = set(report.over_budget_stages)
    warn = set(report.warn_stages)
    if not rows:
        return "<p>The slowest request's spans are not in the recording.</p>"
    root = rows[0].span
    start, end = root.start_ns, max(root.end_ns, *(r.span.end_ns for r in rows))
    length = max(1, end - start)
    ticks = "".join(
        f'<span style="left:{fraction * 100:.0f}%">{_e(format_ms(fraction * length / 1e6))}</span>'
        for fraction in (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    )
    lines = [f'<div class="wf-row wf-axis"><div></div><div class="wf-ticks">{ticks}</div><div></div></div>']
    for row in rows:
        span = row.span
        index = config.classifier.classify(span.name, span.kind, span.scope, span.attributes)
        stage = config.stages[index].name if index >= 0 else None
        css = "bar"
        row_css = "wf-row"
        if stage is not None:
            css += " stage"
            if stage in over:
                css += " over"
                row_css += " over"
            elif stage in warn:
                css += " warn"
        left = (span.start_ns - start) / length * 100
        width = max(0.0, (span.end_ns - span.start_ns) / length * 100)
        duration = format_ms((span.end_ns - span.start_ns) / 1e6)
        stage_label = f'<span class="stage">{_e(stage)}</span>' if stage else ""
        tip = f"{span.name}: starts at {format_ms((span.start_ns - start) / 1e6)}, takes {duration}"
        lines.append(
            f'<div class="{row_css}" data-stage="{_e(stage or "")}">'
            f'<div class="wf-name" style="padding-left:{row.depth * 14}px" title="{_e(span.name)}">'
            f"{_e(span.name)}{stage_label}</div>"
            f'<div class="wf-track"><div class="{css}" style="left:{left:.3f}%;width:{width:.3f}%" title="{_e(tip)}">'
            f"</div></div>"
            f'<div class="wf-dur">{_e(duration)}</div></div>'
        )
    trace = f"{report.trace_id:032x}" if report.trace_id is not None else "?"
    verdict_rows = [_verdict_row(report, *budget) for budget in _request_budgets(report)]
    over_text = verdict_text(report)
    return f"""<div class="waterfall" id="waterfall" data-trace-id="{_e(trace)}">
<p class="sub">{_e(report.root_name or "request")} · trace {_e(trace)} · {_e(format_ms(report.total_actual_ms))}
· profile {_e(report.profile)} · {_e(over_text)}</p>
{"".join(lines)}
<div class="legend"><span><i style="background:var(--over)"></i>stage over budget</span>
<span><i style="background:var(--ok)"></i>stage within budget</span>
<span><i style="background:var(--warn)"></i>stage over a warn-level budget</span>
<span><i style="background:#9aa4b5"></i>not a stage</span></div>
</div>
<table class="verdict"><thead><tr><th>Stage</th><th>Budget</th><th>Actual</th><th>Within budget?</th></tr></thead>
<tbody>{"".join(verdict_rows)}</tbody></table>"""


def _request_budgets(report: TraceReport) -> list[tuple[str, ViolationKind, float | None, float | None]]:
    """Each budget the request was measured against: (stage, kind, budget, actual), stages then the total."""
    rows: list[tuple[str, ViolationKind, float | None, float | None]] = []
    for stage in report.stages:
        if not stage.seen:
            continue
        rows.append((stage.stage, "duration", stage.budget_ms, stage.actual_ms))
        if stage.first_token_budget_ms is not None or stage.first_token_ms is not None:
            rows.append((stage.stage, "first_token", stage.first_token_budget_ms, stage.first_token_ms))
        if stage.max_calls is not None:
            rows.append((stage.stage, "calls", float(stage.max_calls), float(stage.count)))
    rows.append((TOTAL, "total", report.total_budget_ms, report.total_actual_ms))
    if report.first_token_budget_ms is not None or report.first_token_ms is not None:
        rows.append((TOTAL, "first_token", report.first_token_budget_ms, report.first_token_ms))
    return rows


def _verdict_row(
    report: TraceReport, stage: str, kind: ViolationKind, budget: float | None, actual: float | None
) -> str:
    """One budget of the request in the verdict table, named as the text table names it."""
    broke = [v for v in report.violations if v.stage == stage and v.kind == kind]
    verdict = "within" if not broke else "over budget" if broke[0].severity == "error" else "warn"
    if kind == "calls":
        label, shown = (
            f"{stage} calls",
            (f"{budget:g}" if budget is not None else "-", f"{actual:g}" if actual is not None else "-"),
        )
    else:
        what = "first token" if kind == "first_token" else ""
        label = (what or stage) if stage == TOTAL else f"{stage} {what}".strip()
        shown = (format_ms(budget), format_ms(actual) if actual is not None else "-")
    css = "over" if verdict == "over budget" else ""
    return (
        f'<tr class="{css}" data-kind="{_e(kind)}"><td>{_e(label)}</td><td class="num">{_e(shown[0])}</td>'
        f'<td class="num">{_e(shown[1])}</td><td>{_e(verdict)}</td></tr>'
    )
