"""Predicted against measured: the levers the before side estimated that the after side shows applied.

For each lever ``report`` estimated on the before recording (:func:`analyse_levers`), one
rule per kind (:func:`_shows`) reads whether the after recording shows it applied: more
answers streamed, a model's share of the calls changed, fewer calls identical to an
earlier one, shorter contexts or outputs, fewer requests with sequential calls or extra
iterations. Where it does, the estimate (its savings over all before requests, per
request: the mean saving) stands beside the measured change of the mean, end to end or
of the wait for text (the first token, or the whole response when nothing streamed), so
a team learns how far to trust the levers. Levers applied together share one measured
change: the estimates of each are shown against it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from latency_budget._core.bootstrap import mean_difference, simultaneous_alpha
from latency_budget._core.comparison import Change, wait_for_text
from latency_budget._core.estimators import median
from latency_budget._core.kinds import HintKind, Saves, unknown_kind
from latency_budget._core.report import TraceReport

from ._levers import LeverAnalysis

__all__ = ["Applied", "applied_levers"]

MIN_SHIFT = 0.05  # a share (streamed answers, repeated calls, requests with a hint) must move this much
MIN_TOKENS_CUT = 0.10  # a median token count must fall this much (10%)
MIN_MODEL_SHIFT = 0.10  # a model's share of a stage's calls must move this much


@dataclass(frozen=True, slots=True)
class Applied:
    """One lever the after side shows applied: what shows it, the estimate, and the measured change of the mean."""

    kind: HintKind
    stage: str
    saves: Saves
    shows: str
    predicted_ms: float  # the mean saving per before request (positive: time saved)
    measured: Change  # after minus before of the mean end to end time, or of the wait for text


@dataclass(slots=True)
class _Facts:
    """What one side shows of one stage's calls, for the rules of :func:`_shows`."""

    requests: int = 0
    answers: int = 0  # generation calls that answered (not with tool calls only)
    streamed: int = 0
    models: Counter[str] = field(default_factory=Counter)
    keyed: int = 0
    repeats: int = 0  # keyed calls identical to an earlier one
    input_tokens: list[int] = field(default_factory=list)
    output_tokens: list[int] = field(default_factory=list)
    reasoning_tokens: list[int] = field(default_factory=list)
    hinted: Counter[HintKind] = field(default_factory=Counter)  # requests with a hint of the shape, by kind


def _facts(reports: Sequence[TraceReport]) -> dict[str, _Facts]:
    by_stage: dict[str, _Facts] = {}
    seen_keys: set[tuple[str, int]] = set()
    for report in reports:
        for stage in report.stages:
            by_stage.setdefault(stage.stage, _Facts()).requests += 1
        for call in report.calls:
            facts = by_stage.setdefault(call.stage, _Facts())
            if call.model is not None:
                facts.models[call.model] += 1
            if call.generation and not call.to_tools:
                facts.answers += 1
                facts.streamed += call.streamed
            if call.key is not None:
                facts.keyed += 1
                facts.repeats += (call.stage, call.key) in seen_keys
                seen_keys.add((call.stage, call.key))
            if call.input_tokens is not None:
                facts.input_tokens.append(call.input_tokens)
            if call.output_tokens is not None and call.generation:
                facts.output_tokens.append(call.output_tokens)
            if call.reasoning_tokens is not None and call.generation:
                facts.reasoning_tokens.append(call.reasoning_tokens)
        for kind, stage_name in {(hint.kind, hint.stage) for hint in report.hints}:
            by_stage.setdefault(stage_name, _Facts()).hinted[kind] += 1
    return by_stage


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _percent(value: float) -> str:
    return f"{100 * value:.0f}%"


def _moved_down(before: float | None, after: float | None, least: float) -> bool:
    return before is not None and after is not None and before - after >= least


def _shows(kind: HintKind, before: _Facts, after: _Facts) -> str | None:
    """What the after side shows of ``kind`` applied in a stage, for people; ``None`` when it does not show it."""
    match kind:
        case "streaming":
            one, two = _share(before.streamed, before.answers), _share(after.streamed, after.answers)
            if one is not None and two is not None and two - one >= MIN_SHIFT:
                return f"answers streamed: {_percent(one)} → {_percent(two)}"
            return None
        case "model_choice":
            total_one, total_two = sum(before.models.values()), sum(after.models.values())
            if not total_one or not total_two:
                return None
            shifts = {
                model: after.models[model] / total_two - before.models[model] / total_one
                for model in before.models | after.models
            }
            model, shift = max(shifts.items(), key=lambda item: (abs(item[1]), item[0]))
            if abs(shift) < MIN_MODEL_SHIFT:
                return None
            old = before.models[model] / total_one
            return f"{model}: {_percent(old)} → {_percent(old + shift)} of the calls"
        case "cache":
            one, two = _share(before.repeats, before.keyed), _share(after.repeats, after.keyed)
            if _moved_down(one, two, MIN_SHIFT) and one is not None and two is not None:
                return f"calls identical to an earlier one: {_percent(one)} → {_percent(two)}"
            return None
        case "context_size" | "output_length" | "reasoning":
            what, tokens_one, tokens_two = {
                "context_size": ("input", before.input_tokens, after.input_tokens),
                "output_length": ("output", before.output_tokens, after.output_tokens),
                "reasoning": ("reasoning", before.reasoning_tokens, after.reasoning_tokens),
            }[kind]
            if not tokens_one or not tokens_two:
                return None
            one, two = median(tokens_one), median(tokens_two)
            if one > 0 and (one - two) / one >= MIN_TOKENS_CUT:
                return f"median {what} tokens: {one:,.0f} → {two:,.0f}"
            return None
        case "sequential_calls" | "iterations":
            one, two = _share(before.hinted[kind], before.requests), _share(after.hinted[kind], after.requests)
            if _moved_down(one, two, MIN_SHIFT) and one is not None and two is not None:
                what = "sequential calls" if kind == "sequential_calls" else "extra iterations"
                return f"requests with {what}: {_percent(one)} → {_percent(two)}"
            return None
        case _:
            unknown_kind(kind)


def applied_levers(
    levers: LeverAnalysis, before: Sequence[TraceReport], after: Sequence[TraceReport], *, level: float = 0.95
) -> list[Applied]:
    """Each lever of ``levers`` (estimated on ``before``) that ``after`` shows applied, with its
    estimate and the measured change of the mean; intervals hold together over those shown."""
    if len(before) < 2 or len(after) < 2:
        return []
    facts_one, facts_two = _facts(before), _facts(after)
    shown: list[tuple[HintKind, str, Saves, str, float]] = []
    for lever in levers.levers:
        if not lever.savings_ms:
            continue
        shows = _shows(lever.kind, facts_one.get(lever.stage, _Facts()), facts_two.get(lever.stage, _Facts()))
        if shows is not None:
            shown.append((lever.kind, lever.stage, lever.saves, shows, lever.total_ms / max(1, levers.requests)))
    if not shown:
        return []
    alpha = simultaneous_alpha(len({saves for *_, saves, _, _ in shown}), level)
    measured: dict[Saves, Change] = {}
    for saves in {saves for _, _, saves, _, _ in shown}:
        pick = wait_for_text if saves == "first_token" else _end_to_end
        one, two = [pick(r) for r in before], [pick(r) for r in after]
        found = mean_difference(one, two)
        low, high = found.interval(alpha)
        measured[saves] = Change(found.value, low, high, sum(one) / len(one))
    return [
        Applied(kind, stage, saves, shows, predicted, measured[saves]) for kind, stage, saves, shows, predicted in shown
    ]


def _end_to_end(report: TraceReport) -> float:
    return report.total_actual_ms
