"""``compare --html``: one self-contained page, each stage's two distributions overlaid.

Per row (each profile's stages and total, and the end to end), the before side's histogram
as an outline and the after side's filled, on shared bins, each side's percentile marked,
with the change, its interval and the verdict above; no scripts, no network assets.
"""

from __future__ import annotations

from collections.abc import Sequence

from latency_budget._core.bootstrap import sorted_percentile
from latency_budget._core.comparison import ALL_PROFILES, VERDICTS, Change, Comparison, Row
from latency_budget._core.report import TOTAL, format_ms
from latency_budget._core.wording import plural
from latency_budget._version import __version__

from ._applied import Applied
from ._charts import escape, nice_ceiling, svg_ticks
from ._compare_output import deciding, headline, quality_text, signed_ms, verdict_text
from ._recorded import Recorded

__all__ = ["render_compare_html"]

_BINS = 40
_W, _H, _PAD_L, _PAD_B, _PAD_T = 560, 150, 8, 22, 14

_CSS = """
:root { --before: #5b6474; --after: #3b5bdb; --faster: #2e7d5b; --slower: #c62828; --ink: #1d2330;
  --muted: #5b6474; --line: #e3e6ec; --bg: #f7f8fa; --card: #fff; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
  background: var(--bg); }
header, main, footer { max-width: 1180px; margin: 0 auto; padding: 0 24px; }
header { padding-top: 28px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 12px; }
.sub { color: var(--muted); margin: 0 0 10px; }
.rows { display: grid; grid-template-columns: repeat(auto-fill, minmax(540px, 1fr)); gap: 14px; align-items: start; }
.row-card { background: var(--card); border: 1px solid var(--line); border-radius: 10px; padding: 12px 14px; }
.row-card h3 { margin: 0; font-size: 15px; display: flex; justify-content: space-between; gap: 8px; }
.row-card .verdict { font-weight: 600; }
.row-card.faster .verdict { color: var(--faster); }
.row-card.slower .verdict { color: var(--slower); }
.stats { color: var(--muted); font-size: 12px; margin: 2px 0 6px; }
svg { width: 100%; height: auto; display: block; }
svg .before { fill: none; stroke: var(--before); stroke-width: 1.5; }
svg .after { fill: var(--after); opacity: .45; }
svg .mark-before { stroke: var(--before); stroke-width: 2; }
svg .mark-after { stroke: var(--after); stroke-width: 2; }
svg text { font-size: 10px; fill: var(--muted); }
svg .axis { stroke: var(--line); }
.legend i { display: inline-block; width: 12px; height: 12px; border-radius: 3px; vertical-align: -2px;
  margin: 0 4px 0 12px; }
ul.levers li { margin: 4px 0; }
footer { margin: 32px auto; color: var(--muted); font-size: 12px; }
"""


def _overlay(before: Sequence[float], after: Sequence[float], q: float) -> str:
    """Two histograms of sorted values on shared bins: before as an outline, after filled; p``q`` marked."""
    top = max(values[min(len(values) - 1, int(0.995 * len(values)))] for values in (before, after) if values)
    span = nice_ceiling(top)
    width = span / _BINS
    plot_w, plot_h = _W - 2 * _PAD_L, _H - _PAD_B - _PAD_T

    def shares(values: Sequence[float]) -> list[float]:
        counts = [0] * _BINS
        for value in values:
            counts[min(_BINS - 1, int(value / width))] += 1
        return [count / len(values) if values else 0.0 for count in counts]

    one, two = shares(before), shares(after)
    tallest = max(*one, *two) or 1.0

    def x(ms: float) -> float:
        return _PAD_L + min(ms, span) / span * plot_w

    def y(share: float) -> float:
        return _PAD_T + plot_h - share / tallest * plot_h

    bar = plot_w / _BINS
    parts = [
        f'<svg viewBox="0 0 {_W} {_H}" role="img" aria-label="before and after, '
        f'{escape(plural(len(before), "value"))} and {escape(plural(len(after), "value"))}">',
        f'<line class="axis" x1="{_PAD_L}" y1="{_PAD_T + plot_h}" x2="{_PAD_L + plot_w}" y2="{_PAD_T + plot_h}"/>',
    ]
    for n, share in enumerate(two):
        if share:
            parts.append(
                f'<rect class="after" x="{_PAD_L + n * bar + 0.5:.1f}" y="{y(share):.1f}" width="{bar - 1:.1f}" '
                f'height="{_PAD_T + plot_h - y(share):.1f}"><title>after: {share:.1%} of the values</title></rect>'
            )
    if before:
        points = [f"{_PAD_L:.1f},{_PAD_T + plot_h:.1f}"]
        for n, share in enumerate(one):
            points.append(f"{_PAD_L + n * bar:.1f},{y(share):.1f}")
            points.append(f"{_PAD_L + (n + 1) * bar:.1f},{y(share):.1f}")
        points.append(f"{_PAD_L + plot_w:.1f},{_PAD_T + plot_h:.1f}")
        parts.append(f'<polyline class="before" points="{" ".join(points)}"/>')
    for side, values in (("before", before), ("after", after)):
        if values:
            mark = sorted_percentile(values, q)
            parts.append(
                f'<line class="mark-{side}" x1="{x(mark):.1f}" y1="{_PAD_T - 6}" x2="{x(mark):.1f}" '
                f'y2="{_PAD_T + plot_h}"><title>{side} p{q:g} {escape(format_ms(mark))}</title></line>'
            )
    parts.extend(svg_ticks(span, x, _H - 4, format_ms))
    parts.append("</svg>")
    return "".join(parts)


def _card(row: Row, q: float, *, show_profile: bool, reweighted: Change | None = None) -> str:
    verdict = row.verdict
    title = row.stage if row.model is None else f"{row.stage}: {row.model} (mean call per request)"
    if row.profile == ALL_PROFILES:
        title = "end to end (all requests)"
    elif show_profile:
        title = f"{row.profile} / {title}"
    change = row.change
    stats = f"n {row.before.n:,} → {row.after.n:,}; p{q:g} {format_ms(row.before.p(q))} → {format_ms(row.after.p(q))}"
    if change is not None:
        stats += f", {signed_ms(change.value)} ({signed_ms(change.low)} to {signed_ms(change.high)})"
    if row.quality:
        stats += "; quality: " + quality_text(row)
    chart = _overlay(row.before.values, row.after.values, q) if row.before.n or row.after.n else ""
    first = ""
    if row.first_token_before.n or row.first_token_after.n:
        ft = row.first_token_change
        first = (
            f'<p class="stats">{"wait for text" if row.stage == TOTAL else "time to first token"}, '
            f"p{q:g} {escape(format_ms(row.first_token_before.p(q)))} → "
            f"{escape(format_ms(row.first_token_after.p(q)))}"
            + (f": {escape(VERDICTS[ft.verdict])}" if ft is not None else "")
            + "</p>"
            + _overlay(row.first_token_before.values, row.first_token_after.values, q)
        )
    return (
        f'<div class="row-card {escape(verdict or "few")}"><h3><span>{escape(title)}</span>'
        f'<span class="verdict">{escape(verdict_text(row, reweighted))}</span></h3>'
        f'<p class="stats">{escape(stats)}</p>{chart}{first}</div>'
    )


def render_compare_html(before: Recorded, after: Recorded, found: Comparison, applied: list[Applied]) -> str:
    """The whole page of a comparison."""
    q = found.percentile
    show_profile = len({row.profile for row in found.rows}) > 1
    cards = "".join(
        _card(row, q, show_profile=show_profile, reweighted=deciding(found, row))
        for row in (found.end_to_end, *found.rows)
    )
    lines = "".join(f'<p class="sub">{escape(line)}</p>' for line in headline(found))
    levers = ""
    if applied:
        items = "".join(
            f"<li>{escape(f'{a.kind}, {a.stage} ({a.shows}): estimated {signed_ms(-a.predicted_ms)} a request')}; "
            f"{escape(f'measured {signed_ms(a.measured.value)} ({signed_ms(a.measured.low)} to ')}"
            f"{escape(signed_ms(a.measured.high) + ')')}</li>"
            for a in applied
        )
        levers = f'<h2>Predicted against measured</h2><ul class="levers">{items}</ul>'
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Latency budget: before against after</title>
<style>{_CSS}</style>
</head>
<body>
<header>
<h1>Before against after</h1>
<p class="sub">Before: {escape(before.intro())}.<br>After: {escape(after.intro())}.</p>
{lines}
</header>
<main>
<h2>Each stage, before and after</h2>
<p class="sub legend">Share of the values per bin:<i style="border:1.5px solid var(--before)"></i>before
<i style="background:var(--after);opacity:.45"></i>after; the vertical lines mark each side's p{q:g}.</p>
<div class="rows" id="rows">{cards}</div>
{levers}
</main>
<footer>Generated by latency-budget {escape(__version__)} (otel-latency-budget).</footer>
</body>
</html>
"""
