"""``reasoning``: generation calls that spent more reasoning tokens than their model's median.

A reasoning model writes its reasoning as output tokens before its answer
(``gen_ai.usage.reasoning.output_tokens`` and its spellings: ``Call.reasoning_tokens``),
at the time per output token the baseline fits for the output lever
(``ModelStats.ms_per_output_token``). Calls whose reasoning tokens are above the model's
median in the stage (``ModelStats.reasoning_p50``) would each take the excess times that
rate less, at most their duration: what a lower reasoning level (``reasoning_effort``,
``gen_ai.request.reasoning.level``) or a smaller thinking budget would save, if it
brought the calls to the usual amount of reasoning. Fewer reasoning tokens can mean worse
answers: the lever needs evaluation scores before its saving can be called free.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from latency_budget._core.estimators import median
from latency_budget._core.levers.finding import Finding, capped_saving, stage_stats
from latency_budget._core.levers.lever import Advice, AdviceFor, Lever
from latency_budget._core.report import format_ms

from ..wording import plural

if TYPE_CHECKING:
    from latency_budget._config.model import QualityPolicy
    from latency_budget._core.call_facts import Call
    from latency_budget._core.levers.baseline import Baseline, ModelStats

__all__ = ["LEVER", "find"]


def find(
    stage: str,
    members: Sequence[Call],
    baseline: Baseline,
    cap: float,
    stats: dict[str, ModelStats | None],
    policy: QualityPolicy,
) -> Finding | None:
    """The reasoning lever in one stage: reasoning tokens beyond the model's median, at its time per token."""
    stage_stats(stats, baseline, stage, members)
    less: dict[int, int] = {}  # index -> duration with the reasoning cut to the median
    models: dict[str, None] = {}
    basis = 0
    for index, call in enumerate(members):
        model, reasoning = call.model, call.reasoning_tokens
        found = stats.get(model) if model is not None else None
        if found is None or model is None or reasoning is None or not call.generation:
            continue
        rate, usual = found.ms_per_output_token, found.reasoning_p50
        if rate is None or rate <= 0 or usual is None or reasoning <= usual:
            continue
        duration = call.duration_ns
        cut = min(duration, round(rate * (reasoning - usual) * 1e6))
        if cut > 0:
            less[index] = duration - cut
            models[model] = None
            basis = max(basis, found.rate_calls)
    outcome = capped_saving(members, less, cap)
    if outcome is None:
        return None
    saving, ids = outcome
    test = f"time per output token of {plural(basis, 'call')} (the output lever's rate and its test)"
    return Finding("reasoning", stage, len(less), saving, basis, tuple(models), span_ids=ids, test=test)


def advise(given: AdviceFor) -> Advice:
    """Reasoning's basis and advice over a recording: its share of the calls' time, and by level where recorded."""
    stats, main = given.stats, given.main
    if stats is None or main is None or stats.ms_per_output_token is None or stats.reasoning_p50 is None:
        return "", ""
    rate = stats.ms_per_output_token
    calls = [c for c in given.baseline.calls(given.stage, main) if c.reasoning_tokens is not None]
    spent = sum(min(c.duration_ns / 1e6, rate * (c.reasoning_tokens or 0)) for c in calls)
    took = sum(c.duration_ns / 1e6 for c in calls)
    share = f"{spent / took:.0%}" if took > 0 else "none"
    basis = (
        f"{format_ms(rate)} per output token of {main}; reasoning tokens took about {share} of the time of "
        f"its {plural(len(calls), 'call')} that record them; reasoning above the median "
        f"{stats.reasoning_p50:,.0f} tokens cut to it"
    )
    by_level: dict[str, list[int]] = {}
    for call in calls:
        if call.reasoning_level is not None and call.reasoning_tokens is not None:
            by_level.setdefault(call.reasoning_level, []).append(call.reasoning_tokens)
    if by_level:
        levels = Counter({level: len(tokens) for level, tokens in by_level.items()})
        basis += "; median reasoning tokens by level asked for: " + ", ".join(
            f"{level} {median(by_level[level]):,.0f} (n {count})" for level, count in levels.most_common()
        )
    advice = (
        f"ask {given.named} for less reasoning (a lower reasoning level or effort, a smaller thinking budget) "
        f"where its answers stay good enough: each 1,000 reasoning tokens cost about {format_ms(rate * 1000)}"
    )
    return basis, advice


LEVER = Lever(
    name="reasoning",
    estimated=True,
    saves="end_to_end",
    text="less reasoning in {calls} (a lower reasoning level) would save about {saving}",
    unit="reasoning token",
    changes="reduce_reasoning",
    fits="generation calls with more reasoning tokens than their model's median in the stage, where the model's "
    "time per output token is known",
    controls_for="reasoning tokens are costed at the model's own time per output token (the output lever's tested "
    "rate), each call's saving at most its duration; models and stages are never mixed",
    evidence="evaluation scores and finish reasons of calls with more and less reasoning: less reasoning can "
    "mean a worse answer; with no quality data, it says so",
    never="shortening the reasoning of a protected stage's calls",
    needs=("evaluation_scores", "finish_reasons"),
    advise=advise,
    find_in_stage=find,
    reasoned=True,  # read only in stages with a call that records reasoning tokens
)
