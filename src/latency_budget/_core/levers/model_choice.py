"""``model_choice``: calls to a model slower than the stage's fastest.

Calls to a model whose median duration in the stage is above the fastest model's there
(each with at least the baseline's ``min_model_calls``: :data:`MIN_MODEL_CALLS` over a
recording, a full window of recent calls in process, where a young series' medians would
wander): each would take its duration times the ratio of the two medians.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from latency_budget._core.estimators import shrunk_saving_ns
from latency_budget._core.levers.baseline import MIN_MODEL_CALLS
from latency_budget._core.levers.finding import Finding, intervals_of, span_ids_of
from latency_budget._core.levers.lever import Advice, AdviceFor, Lever
from latency_budget._core.report import format_ms

from ..wording import plural

if TYPE_CHECKING:
    from latency_budget._core.call_facts import Call
    from latency_budget._core.levers.baseline import Baseline, ModelStats

__all__ = ["LEVER", "find"]


def find(
    stage: str, members: Sequence[Call], baseline: Baseline, cap: float, stats: dict[str, ModelStats | None]
) -> Finding | None:
    """The model-choice lever in one stage: its calls to models slower than the stage's fastest."""
    if baseline.model_count(stage) < 2:
        return None
    if not any(c.model is not None for c in members):
        return None
    least = baseline.min_model_calls
    compared = [(model, found) for model, found in baseline.models(stage) if found.n >= least]
    if len(compared) < 2:
        return None
    fastest, best = min(compared, key=lambda item: (item[1].duration_p50_ms, item[0]))
    ratios = {model: best.duration_p50_ms / found.duration_p50_ms for model, found in compared if model != fastest}
    shorter: dict[int, int] = {}
    slower: dict[str, None] = {}
    basis = best.n  # the fewest calls of any model compared
    for index, call in enumerate(members):
        model = call.model
        ratio = ratios.get(model) if model is not None else None
        if model is None or ratio is None or ratio >= 1:
            continue
        shorter[index] = round(call.duration_ns * ratio)
        if model not in slower:
            slower[model] = None
            basis = min(basis, next(found.n for name, found in compared if name == model))
    if not shorter:
        return None
    saving = min(cap, shrunk_saving_ns(intervals_of(members), shorter) / 1e6)
    if saving <= 0:
        return None
    ids = span_ids_of(members, shorter)
    test = f"at least {plural(least, 'call')} of each model compared"
    return Finding(
        "model_choice", stage, len(shorter), saving, basis, (*slower, fastest), fastest, span_ids=ids, test=test
    )


def advise(given: AdviceFor) -> Advice:
    """Model choice's basis and advice over a recording."""
    stage, stats = given.stage, given.stats
    compared = [(m, s) for m, s in given.baseline.models(stage) if s.n >= MIN_MODEL_CALLS]
    fastest = min(compared, key=lambda item: (item[1].duration_p50_ms, item[0]))
    basis = ""
    if stats is not None:
        basis = (
            f"median call of {given.main} {format_ms(stats.duration_p50_ms)} (n {stats.n}) against "
            f"{fastest[0]} {format_ms(fastest[1].duration_p50_ms)} (n {fastest[1].n}) in {stage}"
        )
    return basis, f"try {fastest[0]} instead of {given.named} in {stage}, where its answers are good enough"


LEVER = Lever(
    name="model_choice",
    estimated=True,
    saves="end_to_end",
    text="a faster model for {calls} would save about {saving}",
    unit="call",
    changes="swap_model",
    fits="calls to a model whose median duration in the stage is above the fastest model's there",
    controls_for="compares models within one stage only (the same kind of work), each with enough calls for a "
    "steady median; the saving scales each call by the ratio of the medians",
    evidence="each model's evaluation scores, error rate and guardrail block rate in the stage: a faster model "
    "is only a saving where its answers are as good",
    never="swapping the model of a protected stage's calls",
    needs=("evaluation_scores", "guardrail_outcomes", "error_status"),
    advise=advise,
    find_in_stage=find,
)
