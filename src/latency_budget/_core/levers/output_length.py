"""``output_length``: answers with more output tokens than their model's median.

Generation calls whose output was for the user (not tool calls), with more output tokens
than their model's median: the excess times the model's generation time per output token
(the median of (duration - time to first token) / output tokens over streamed calls, else
a supported fit of duration on output tokens). Calls that answered with tool calls only
(``Call.to_tools``: every spelling the first-token rule knows) stay out of the median, the
rate and the fit alike: their many cheap tokens would pull an answer's rate down.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from latency_budget._core.estimators import MIN_R_SQUARED
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
    """The output lever in one stage: its answers' tokens beyond their model's median, at its time per token."""
    stage_stats(stats, baseline, stage, members)
    cut_short: dict[int, int] = {}  # index -> duration with the output cut to the median
    models: dict[str, None] = {}
    basis = 0
    test = ""
    for index, call in enumerate(members):
        model = call.model
        found = stats.get(model) if model is not None else None
        if found is None or model is None:
            continue
        rate = found.ms_per_output_token
        out = call.output_tokens
        if rate is not None and rate > 0 and out is not None and found.output_p50 is not None:
            if not call.generation or call.to_tools:
                continue
            duration = call.duration_ns
            excess = out - found.output_p50
            floor = min(call.first_token_ns or 0, duration)  # generation cannot start before the first token
            cut = min(duration - floor, round(rate * excess * 1e6)) if excess > 0 else 0
            if cut > 0:
                cut_short[index] = duration - cut
                models[model] = None
                if found.rate_calls > basis:
                    basis = found.rate_calls
                    test = (
                        "rank test (Kendall): generation time grows with output tokens, one-sided 2.5%"
                        if found.rate_from == "streamed"
                        else "Theil-Sen fit of duration on output tokens: 95% interval above zero, "
                        f"R² at least {MIN_R_SQUARED}"
                    )
    outcome = capped_saving(members, cut_short, cap)
    if outcome is None:
        return None
    saving, ids = outcome
    return Finding("output_length", stage, len(cut_short), saving, basis, tuple(models), span_ids=ids, test=test)


def advise(given: AdviceFor) -> Advice:
    """Output length's basis and advice over a recording."""
    stats = given.stats
    if stats is None or stats.ms_per_output_token is None or stats.output_p50 is None:
        return "", ""
    source = "median over" if stats.rate_from == "streamed" else "Theil-Sen fit over"
    basis = (
        f"{format_ms(stats.ms_per_output_token)} per output token of {given.main} ({source} "
        f"{plural(stats.rate_calls, 'call')}); outputs above the median {stats.output_p50:,.0f} tokens cut to it"
    )
    advice = (
        f"ask {given.named} for shorter output (max_tokens, a terser prompt): each 100 output tokens cost "
        f"about {format_ms(stats.ms_per_output_token * 100)}"
    )
    return basis, advice


LEVER = Lever(
    name="output_length",
    estimated=True,
    saves="end_to_end",
    text="cutting the output of {calls} to the usual length would save about {saving}",
    unit="output token",
    changes="shorten_output",
    fits="answers for the user (not tool calls) with more output tokens than their model's median in the stage",
    controls_for="the time per output token is taken from generation time after the first token (streamed "
    "calls) where a rank test shows it grows with tokens, else from a tested fit; tool-call outputs stay out",
    evidence="evaluation scores and finish reasons (length) of shorter and longer answers: a cut answer can "
    "be a worse one; with no quality data, it says so",
    never="shortening a protected stage's output",
    needs=("evaluation_scores", "finish_reasons"),
    advise=advise,
    find_in_stage=find,
)
