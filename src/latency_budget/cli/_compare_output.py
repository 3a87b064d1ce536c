"""``compare``'s words and tables: terminal text, Markdown and JSON, from one :class:`Comparison`.

The headline lines and the table cells are made once, as plain text, and each output
language encodes them (``terminal_text`` through :func:`text_table`, ``markdown_cell`` and
``markdown_text``, ``json.dumps``): nothing from a recording is concatenated into any of them raw.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from latency_budget._core.comparison import (
    ALL_PROFILES,
    VERDICTS,
    Change,
    Comparison,
    Mix,
    QualityChange,
    Row,
    Side,
)
from latency_budget._core.report import TOTAL, format_ms
from latency_budget._core.wording import plural
from latency_budget._encode import markdown_cell, markdown_text, terminal_text

from ._applied import Applied
from ._recorded import Recorded
from ._summary import QUANTILES
from ._table import markdown_table, text_table

__all__ = ["compare_json", "compare_markdown", "compare_table", "headline", "signed_ms", "verdict_text"]

# A broken limit: the limit as given, where (end to end, or profile), what moved, and the change, for people.
Gated = list[tuple[str, str, str]]


def signed_ms(value: float) -> str:
    """``+12.5ms`` or ``-3ms`` (``0ms`` for nothing)."""
    text = format_ms(abs(value))
    return text if text == "0ms" else ("+" if value > 0 else "-") + text


def _interval(change: Change) -> str:
    return f"{signed_ms(change.low)} to {signed_ms(change.high)}"


def _change(change: Change) -> str:
    percent = change.percent
    return signed_ms(change.value) + (f" ({percent:+.1f}%)" if percent is not None else "")


def verdict_text(row: Row, reweighted: Change | None = None) -> str:
    """The row's verdict for people: ``faster``, ``slower``, ``no change the data can show`` or
    ``too few to compare``, and for a stage whose change did not reach the end to end time, that.

    ``reweighted``: the end to end's change reweighted to the before mix, which decides its verdict.
    """
    verdict = row.verdict
    if verdict is None:
        return "too few to compare"
    if reweighted is not None:
        return f"{VERDICTS[reweighted.verdict]}, reweighted to the before mix (as measured: {VERDICTS[verdict]})"
    text = VERDICTS[verdict]
    worse = row.worse_quality
    if worse and verdict == "faster":
        text += ", but worse answers (" + ", ".join(q.metric for q in worse) + ")"
    if row.reached_end_to_end is False:
        text += "; the end to end did not move with it"
    return text


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _pair(before: float | None, after: float | None) -> str:
    if before is None and after is None:
        return "-"
    return f"{format_ms(before)} → {format_ms(after)}"


def _number(value: float | None, *, sign: bool = False) -> str:
    """A table's millisecond figure without its unit: whole ms from 100 up, else one decimal."""
    if value is None:
        return "-"
    text = f"{abs(value):,.0f}" if abs(value) >= 100 else f"{abs(value):.1f}".rstrip("0").rstrip(".")
    if text == "0":
        return text
    return ("+" if value > 0 else "-") + text if sign else ("-" + text if value < 0 else text)


def _numbers(before: float | None, after: float | None) -> str:
    if before is None and after is None:
        return "-"
    return f"{_number(before)} → {_number(after)}"


def _calls(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _stage_label(row: Row) -> str:
    return f"{row.stage}: {row.model} (mean call)" if row.model is not None else row.stage


def _first_token(row: Row, q: float) -> str:
    if not row.first_token_before.n and not row.first_token_after.n:
        return "-"
    text = _numbers(row.first_token_before.p(q), row.first_token_after.p(q))
    change = row.first_token_change
    return text + (f" {change.verdict}" if change is not None and change.verdict != "no change" else "")


def quality_value(change: QualityChange, value: float) -> str:
    """A rate as a percentage, a score with two decimals."""
    return f"{value:.2f}" if change.higher_is_better else f"{100 * value:.1f}%"


def quality_text(row: Row) -> str:
    """``errors 2.0% → 8.0% worse; score: relevance 0.82 → 0.81``: each quality measure, marked where it moved."""
    parts = []
    for change in row.quality:
        mark = " worse" if change.worse else " better" if change.better else ""
        parts.append(
            f"{change.metric} {quality_value(change, change.before)} → {quality_value(change, change.after)}{mark}"
        )
    return "; ".join(parts) or "-"


def deciding(found: Comparison, row: Row) -> Change | None:
    """The reweighted change that decides ``row``'s verdict: the end to end's when the mix shifted."""
    if row is found.end_to_end and found.mix.shifted:
        return found.reweighted
    return None


def _cells(row: Row, q: float, *, quality: bool = False, reweighted: Change | None = None) -> list[str]:
    change = row.change
    return [
        "all" if row.profile == ALL_PROFILES else row.profile,
        _stage_label(row),
        f"{row.before.n:,} → {row.after.n:,}",
        *(_numbers(row.before.p(p), row.after.p(p)) for p in QUANTILES),
        _number(change.value, sign=True) + (f" ({change.percent:+.1f}%)" if change.percent is not None else "")
        if change is not None
        else "-",
        f"{_number(change.low, sign=True)} to {_number(change.high, sign=True)}" if change is not None else "-",
        verdict_text(row, reweighted),
        _first_token(row, q),
        f"{_calls(row.calls_before)} → {_calls(row.calls_after)}" if row.calls_before or row.calls_after else "-",
        f"{_percent(row.critical_before)} → {_percent(row.critical_after)}"
        if row.critical_before is not None or row.critical_after is not None
        else "-",
        *([quality_text(row)] if quality else []),
    ]


def _header(q: float, *, quality: bool = False) -> list[str]:
    return [
        "Profile",
        "Stage",
        "Requests",
        *(f"p{p:g} ms" for p in QUANTILES),
        f"Change at p{q:g}",
        "Interval",
        "Verdict",
        f"First token (total: wait) p{q:g}",
        "Calls/request",
        "Critical path",
        *(["Quality"] if quality else []),
    ]


_RIGHT = (2, 3, 4, 5, 6, 7)


def _rows(found: Comparison) -> list[Row]:
    return [*found.rows, found.end_to_end]


def _has_quality(found: Comparison) -> bool:
    return any(row.quality for row in _rows(found))


def _shares(mix: Mapping[str, int]) -> dict[str, float]:
    total = sum(mix.values())
    return {name: count / total for name, count in mix.items()} if total else {}


def _mix_line(what: str, before: Mapping[str, int], after: Mapping[str, int], p_value: float) -> str:
    one, two = _shares(before), _shares(after)
    names = sorted(set(one) | set(two), key=lambda name: -abs(two.get(name, 0.0) - one.get(name, 0.0)))
    moves = ", ".join(f"{name} {_percent(one.get(name, 0.0))} → {_percent(two.get(name, 0.0))}" for name in names[:4])
    return f"The mix of {what} differs (chi-square p {p_value:.2g}): {moves} of the requests."


def _mix_lines(mix: Mix) -> list[str]:
    lines = []
    if mix.profiles_shifted:
        lines.append(_mix_line("profiles", mix.profiles_before, mix.profiles_after, mix.profiles_p))
    if mix.models_shifted:
        lines.append(_mix_line("models called", mix.models_before, mix.models_after, mix.models_p))
    return lines


def headline(found: Comparison) -> list[str]:
    """What moved: the end to end change (reweighted when the mix shifted), the stages that moved it,
    the changes that did not reach it, the mix, and how the intervals were made."""
    q = found.percentile
    e2e = found.end_to_end
    lines: list[str] = []
    raw = e2e.change
    if raw is None:
        lines.append(
            f"End to end, p{q:g}: {_pair(e2e.before.p(q), e2e.after.p(q))}: too few requests to compare "
            f"(at least 10 a side)."
        )
    elif found.mix.shifted and found.reweighted is not None:
        again = found.reweighted
        lines.append(
            f"End to end, p{q:g}, reweighted to the before mix of {found.mix.strata}: {_change(again)} "
            f"({_interval(again)}): {VERDICTS[again.verdict]}; as measured, "
            f"{_pair(e2e.before.p(q), e2e.after.p(q))}, {_change(raw)} ({_interval(raw)})."
        )
    else:
        lines.append(
            f"End to end, p{q:g}: {_pair(e2e.before.p(q), e2e.after.p(q))}, {_change(raw)} "
            f"({_interval(raw)}): {VERDICTS[raw.verdict]}."
        )
    first = e2e.first_token_change
    if first is not None:
        lines.append(
            "Wait for text (first token, or the whole response unstreamed), "
            f"p{q:g}: {_pair(e2e.first_token_before.p(q), e2e.first_token_after.p(q))}, "
            f"{_change(first)} ({_interval(first)}): {VERDICTS[first.verdict]}."
        )
    multi = len({row.profile for row in found.rows}) > 1
    changed = []
    for row in found.rows:
        where = f" ({row.profile})" if multi else ""
        label = row.stage if row.model is None else f"{row.stage} {row.model}"
        for what, change in ((label, row.change), (_first_token_name(row, label), row.first_token_change)):
            if change is not None and change.verdict != "no change":
                changed.append(f"{what}{where} {change.verdict}, {signed_ms(change.value)}")
    lines.append(
        f"Changed at p{q:g}: " + "; ".join(changed) + "."
        if changed
        else f"No stage, model or total changed at p{q:g} that the data can show."
    )
    moved = found.moved()
    if moved:
        parts = []
        for row in moved:
            change = row.critical_change
            assert change is not None
            where = f" ({row.profile})" if multi else ""
            parts.append(f"{row.stage}{where} {signed_ms(change.value)} a request on average ({_interval(change)})")
        lines.append("Moved the end to end time (critical-path time): " + "; ".join(parts) + ".")
    missed = found.not_reached()
    if missed:
        parts = []
        for row in missed:
            change = row.change
            assert change is not None
            assert row.verdict is not None
            where = f" ({row.profile})" if multi else ""
            parts.append(
                f"{row.stage}{where} {row.verdict} ({signed_ms(change.value)} at p{q:g}), "
                f"{_percent(row.critical_before)} of the critical path before"
            )
        lines.append(
            "Did not reach the end to end time (off the critical path, or another stage took its place): "
            + "; ".join(parts)
            + "."
        )
    worse = [row for row in _rows(found) if row.verdict == "faster" and row.worse_quality]
    if worse:
        parts = []
        for row in worse:
            where = (
                "end to end"
                if row.profile == ALL_PROFILES
                else _stage_label(row) + (f" ({row.profile})" if multi else "")
            )
            parts.append(
                where
                + ": "
                + "; ".join(
                    f"{q.metric} {quality_value(q, q.before)} → {quality_value(q, q.after)}" for q in row.worse_quality
                )
            )
        lines.append("Faster but worse answers, no plain win: " + "; ".join(parts) + ".")
    lines.extend(_mix_lines(found.mix))
    lines.append(
        f"Changes at p{q:g}; intervals hold together at {found.level:.0%} over {plural(found.tests, 'comparison')} "
        f"(Bonferroni), from a seeded bootstrap of {found.resamples:,} resamples (seed {found.seed}); "
        "critical-path changes are of the mean, with Welch's interval."
    )
    return lines


def _first_token_name(row: Row, label: str) -> str:
    return "wait for text" if row.stage == TOTAL and row.model is None else f"{label} first token"


def _applied_lines(applied: list[Applied]) -> list[str]:
    if not applied:
        return []
    lines = ["Predicted against measured (levers report estimated before that the after side shows applied):"]
    for lever in applied:
        what = "wait for text" if lever.saves == "first_token" else "end to end time"
        measured = lever.measured
        lines.append(
            f"- {lever.kind}, {lever.stage} ({lever.shows}): estimated {signed_ms(-lever.predicted_ms)} a request "
            f"on average; measured {signed_ms(measured.value)} ({_interval(measured)}), the mean {what}."
        )
    return lines


def _gate_lines(checked: list[str], gated: Gated, q: float) -> list[str]:
    if not checked:
        return []
    if not gated:
        return [f"Gate: passed ({', '.join(checked)} at p{q:g})."]
    lines = [f"Gate: FAILED at p{q:g}:"]
    for limit, where, what in gated:
        lines.append(f"- {limit}: {where}, {what}")
    return lines


def gated_time(profile: str, change: Change) -> tuple[str, str]:
    """Where a time limit broke and by how much, for people."""
    return (
        "end to end" if profile == ALL_PROFILES else f"profile {profile}"
    ), f"{_change(change)} ({_interval(change)})"


def gated_quality(profile: str, stage: str, change: QualityChange) -> tuple[str, str]:
    """Where a quality limit broke and how, for people."""
    where = "end to end" if profile == ALL_PROFILES else f"profile {profile}, {stage}"
    return where, (
        f"{change.metric} {quality_value(change, change.before)} → {quality_value(change, change.after)} "
        f"({quality_value(change, change.change.low)} to {quality_value(change, change.change.high)})"
    )


def _intro(before: Recorded, after: Recorded) -> list[str]:
    return [f"Before: {before.intro()}.", f"After: {after.intro()}."]


def compare_table(
    before: Recorded, after: Recorded, found: Comparison, applied: list[Applied], checked: list[str], gated: Gated
) -> str:
    """The terminal text: what was read, the headline, the table, the levers and the gate."""
    q = found.percentile
    parts = [
        "latency-budget compare",
        *(terminal_text(line) for line in _intro(before, after)),
        "",
        *(terminal_text(line) for line in headline(found)),
        "",
        text_table(
            _header(q, quality=_has_quality(found)),
            [_cells(row, q, quality=_has_quality(found), reweighted=deciding(found, row)) for row in _rows(found)],
            right=_RIGHT,
        ),
    ]
    for block in (_applied_lines(applied), _gate_lines(checked, gated, q)):
        if block:
            parts += ["", *(terminal_text(line) for line in block)]
    return "\n".join(parts)


def compare_markdown(
    before: Recorded, after: Recorded, found: Comparison, applied: list[Applied], checked: list[str], gated: Gated
) -> str:
    """The same as Markdown (a CI job summary)."""
    q = found.percentile
    rows = [
        [markdown_text(cells[0]), markdown_cell(cells[1]), *(markdown_text(cell) for cell in cells[2:])]
        for cells in (
            _cells(row, q, quality=_has_quality(found), reweighted=deciding(found, row)) for row in _rows(found)
        )
    ]
    parts = [
        "### Before against after",
        "",
        *(markdown_text(line) + "  " for line in _intro(before, after)),
        "",
        *(markdown_text(line) + "  " for line in headline(found)),
        "",
        markdown_table([markdown_text(cell) for cell in _header(q, quality=_has_quality(found))], rows, right=_RIGHT),
    ]
    for block in (_applied_lines(applied), _gate_lines(checked, gated, q)):
        if block:
            parts += [
                "",
                *(
                    markdown_text(line) if not line.startswith("- ") else "- " + markdown_text(line[2:])
                    for line in block
                ),
            ]
    return "\n".join(parts)


def _change_json(change: Change | None) -> dict[str, Any] | None:
    if change is None:
        return None
    return {
        "change_ms": change.value,
        "low_ms": change.low,
        "high_ms": change.high,
        "percent": change.percent,
        "verdict": change.verdict,
    }


def _side_json(side: Side) -> dict[str, Any]:
    return {"n": side.n, **{f"p{q:g}_ms": side.p(q) for q in QUANTILES}}


def _row_json(row: Row) -> dict[str, Any]:
    return {
        "profile": row.profile,
        "stage": row.stage,
        "model": row.model,
        "before": _side_json(row.before),
        "after": _side_json(row.after),
        "change": _change_json(row.change),
        "verdict": row.verdict,
        "reached_end_to_end": row.reached_end_to_end,
        "first_token": {
            "before": _side_json(row.first_token_before),
            "after": _side_json(row.first_token_after),
            "change": _change_json(row.first_token_change),
        },
        "calls_per_request": {"before": row.calls_before, "after": row.calls_after},
        "critical_path_share": {"before": row.critical_before, "after": row.critical_after},
        "critical_path_change": _change_json(row.critical_change),
        "quality": [
            {
                "metric": change.metric,
                "before": change.before,
                "after": change.after,
                "n_before": change.n_before,
                "n_after": change.n_after,
                "change": change.change.value,
                "low": change.change.low,
                "high": change.change.high,
                "worse": change.worse,
                "better": change.better,
            }
            for change in row.quality
        ],
    }


def compare_json(
    before: Recorded, after: Recorded, found: Comparison, applied: list[Applied], checked: list[str], gated: Gated
) -> str:
    """Everything, as JSON for other programs."""
    mix = found.mix
    document = {
        "budgets": before.budgets_label,
        "before": {"sources": list(before.traces.sources), "requests": found.requests_before},
        "after": {"sources": list(after.traces.sources), "requests": found.requests_after},
        "statistics": {
            "percentile": found.percentile,
            "level": found.level,
            "comparisons": found.tests,
            "resamples": found.resamples,
            "seed": found.seed,
            "method": "bootstrap standard error of the percentile difference, normal interval, Bonferroni over "
            "the comparisons; critical-path changes: Welch",
        },
        "end_to_end": {
            **_row_json(found.end_to_end),
            "reweighted": _change_json(found.reweighted),
            "decides": "reweighted" if mix.shifted and found.reweighted is not None else "measured",
            "verdict": found.end_to_end_verdict,
        },
        "mix": {
            "shifted": mix.shifted,
            "profiles": {"before": dict(mix.profiles_before), "after": dict(mix.profiles_after), "p": mix.profiles_p},
            "models": {"before": dict(mix.models_before), "after": dict(mix.models_after), "p": mix.models_p},
            "reweighted_by": mix.strata,
            "covered": list(mix.covered),
        },
        "headline": headline(found),
        "rows": [_row_json(row) for row in found.rows],
        "predicted_against_measured": [
            {
                "kind": lever.kind,
                "stage": lever.stage,
                "saves": lever.saves,
                "shows": lever.shows,
                "predicted_saving_ms": lever.predicted_ms,
                "measured": _change_json(lever.measured),
            }
            for lever in applied
        ],
        "gate": {
            "max_regression": checked,
            "passed": not gated,
            "failures": [{"limit": limit, "where": where, "what": what} for limit, where, what in gated],
        },
    }
    return json.dumps(document, indent=2)  # ASCII: a name's control or bidi character shown escaped
