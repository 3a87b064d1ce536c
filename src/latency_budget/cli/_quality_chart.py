"""The latency-versus-quality section of ``report --html``: per stage, one point per model, the Pareto front marked.

A model's point is its median call duration in the stage (x) against its answers' quality
(y): the mean of the evaluation that counts under the budget file's ``quality`` and that
most of the stage's models have (the first by name among equals), else the share of
answers a guardrail passed. A model is on the front when no other model is both at least
as fast and at least as good, and better on one of the two; the front is joined by a line.
A model with no such quality data is named under the chart, not drawn.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from latency_budget._config.model import QualityPolicy
from latency_budget._core.report import format_ms

from ._charts import escape, nice_ceiling, svg_ticks
from ._levers import LeverAnalysis, ModelRow

__all__ = ["QUALITY_CSS", "Point", "pareto_front", "quality_section"]

QUALITY_CSS = """
svg.quality { width: 100%; height: auto; display: block; }
svg .q-front { fill: var(--ok); }
svg .q-off { fill: var(--muted); opacity: .7; }
svg .front { stroke: var(--ok); stroke-width: 1.5; fill: none; stroke-dasharray: 4 3; }
svg text.q-model { fill: var(--ink); font-size: 11px; }
.chart-card p.unmeasured { color: var(--muted); font-size: 12px; margin: 4px 0 0; }
"""

_W, _H, _L, _R, _T, _B = 540, 260, 52, 16, 12, 34
_GUARDRAIL = "guardrail pass rate"


@dataclass(frozen=True, slots=True)
class Point:
    """One model in one stage: its median duration (ms), its quality figure and what that rests on."""

    model: str
    latency_ms: float
    quality: float
    n: int


def pareto_front(points: Sequence[Point], *, higher_is_better: bool = True) -> list[Point]:
    """The points no other point beats on both (at least as fast and as good, better on one), fastest first."""
    sign = 1.0 if higher_is_better else -1.0

    def beats(a: Point, b: Point) -> bool:
        as_good = a.latency_ms <= b.latency_ms and sign * a.quality >= sign * b.quality
        return as_good and (a.latency_ms < b.latency_ms or sign * a.quality > sign * b.quality)

    front = [p for p in points if not any(beats(other, p) for other in points if other is not p)]
    return sorted(front, key=lambda p: (p.latency_ms, -sign * p.quality, p.model))


def _measure(rows: Sequence[ModelRow], policy: QualityPolicy) -> tuple[str, bool, list[Point]] | None:
    """The measure the stage's chart shows, whether higher is better, and the models' points on it."""
    names: Counter[str] = Counter()
    for row in rows:
        if row.quality is not None:
            names.update(name for name, scores in row.quality.evaluations.items() if scores.n and policy.rule(name))
    if names:
        name = min(names, key=lambda found: (-names[found], found))
        rule = policy.rule(name)
        higher = rule[0] if rule is not None else True
        points = [
            Point(row.model, row.p(50), scores.mean, scores.n)
            for row in rows
            if row.quality is not None and (scores := row.quality.evaluations.get(name)) is not None and scores.n
        ]
        return name, higher, points
    guarded = [
        Point(row.model, row.p(50), 1 - row.quality.blocked / row.quality.guarded, row.quality.guarded)
        for row in rows
        if row.quality is not None and row.quality.guarded
    ]
    return (_GUARDRAIL, True, guarded) if guarded else None


def quality_section(levers: LeverAnalysis) -> str:
    """One chart per stage with model calls and quality data; a line saying so where there is none."""
    by_stage: dict[str, list[ModelRow]] = {}
    for row in levers.models:
        by_stage.setdefault(row.stage, []).append(row)
    cards = []
    for stage, rows in by_stage.items():
        found = _measure(rows, levers.policy)
        if found is None:
            continue
        name, higher, points = found
        drawn = {p.model for p in points}
        missing = [row.model for row in rows if row.model not in drawn]
        note = f'<p class="unmeasured">No {escape(name)} for {escape(", ".join(missing))}.</p>' if missing else ""
        cards.append(
            f'<section class="chart-card" data-stage="{escape(stage)}"><h3>{escape(stage)} '
            f"<small>median duration against {escape(name)}</small></h3>"
            f"{_chart(points, name, higher)}{note}</section>"
        )
    if not cards:
        return (
            '<p class="sub" id="quality">No quality data: no evaluation results (gen_ai.evaluation.result) or '
            "guardrail outcomes of the model calls.</p>"
        )
    return f'<div class="charts" id="quality">{"".join(cards)}</div>'


def _chart(points: list[Point], name: str, higher: bool) -> str:
    front = pareto_front(points, higher_is_better=higher)
    on_front = {p.model for p in front}
    x_span = nice_ceiling(max(p.latency_ms for p in points))
    low = min(0.0, *(p.quality for p in points))
    high = max(1.0, *(p.quality for p in points))
    plot_w, plot_h = _W - _L - _R, _H - _T - _B

    def px(ms: float) -> float:
        return _L + min(ms, x_span) / x_span * plot_w

    def py(value: float) -> float:
        return _T + plot_h - (value - low) / (high - low) * plot_h

    better = "higher is better" if higher else "lower is better"
    parts = [
        f'<svg class="quality" viewBox="0 0 {_W} {_H}" role="img" '
        f'aria-label="{escape(f"median duration against {name} ({better}), one point per model")}">',
        f'<line class="axis" x1="{_L}" y1="{_T + plot_h}" x2="{_W - _R}" y2="{_T + plot_h}"/>',
        f'<line class="axis" x1="{_L}" y1="{_T}" x2="{_L}" y2="{_T + plot_h}"/>',
    ]
    if len(front) > 1:
        path = " ".join(f"{px(p.latency_ms):.1f},{py(p.quality):.1f}" for p in front)
        parts.append(f'<polyline class="front" points="{path}"/>')
    for p in points:
        where = "front" if p.model in on_front else "off"
        tip = (
            f"{p.model}: median {format_ms(p.latency_ms)}, {name} {p.quality:.2f} (n {p.n})"
            f"{', on the Pareto front' if where == 'front' else ''}"
        )
        x, y = px(p.latency_ms), py(p.quality)
        parts.append(
            f'<circle class="q-{where}" data-model="{escape(p.model)}" data-front="{str(where == "front").lower()}" '
            f'cx="{x:.1f}" cy="{y:.1f}" r="5"><title>{escape(tip)}</title></circle>'
        )
        parts.append(f'<text class="q-model" x="{x + 7:.1f}" y="{y - 6:.1f}">{escape(p.model)}</text>')
    parts.extend(svg_ticks(x_span, px, _H - 18, format_ms, steps=2))
    parts.append(f'<text x="{_W - _R}" y="{_H - 2}" text-anchor="end">median call duration</text>')
    for tick in (low, (low + high) / 2, high):
        parts.append(f'<text x="{_L - 4}" y="{py(tick) + 4:.1f}" text-anchor="end">{tick:.2f}</text>')
    parts.append(f'<text x="{_L + 4}" y="{_T + 10}">{escape(f"{name} ({better})")}</text>')
    parts.append("</svg>")
    return "".join(parts)
