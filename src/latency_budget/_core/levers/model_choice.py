"""``model_choice``: calls to a model slower than the stage's fastest.

Calls to a model whose median duration in the stage is above the fastest model's there
(each with at least the baseline's ``min_model_calls``: :data:`MIN_MODEL_CALLS` over a
recording, a full window of recent calls in process, where a young series' medians would
wander): each would take its duration times the ratio of the two medians.

Quality beside it: a slower model's calls count only where the fastest model's answers in
the same stage are not worse by more than the budget file's ``quality.max_drop`` on any
measure (each evaluation that counts, the guardrail block rate, the error rate), shown by a
non-inferiority test at ``quality.significance`` (:func:`~latency_budget._core.levers.weigh.weigh_quality`).
Where they are worse, or not shown to be no worse, the faster model is not recommended, and
the finding says the trade instead of a saving. Where neither model has quality data, the
saving stands with the caveat (``Finding.unweighed``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from latency_budget._core.levers.baseline import MIN_MODEL_CALLS
from latency_budget._core.levers.finding import Finding, capped_saving, span_ids_of
from latency_budget._core.levers.lever import Advice, AdviceFor, Lever
from latency_budget._core.levers.weigh import Weighed, weigh_quality
from latency_budget._core.report import format_ms

from ..wording import plural

if TYPE_CHECKING:
    from latency_budget._config.model import QualityPolicy
    from latency_budget._core.call_facts import Call
    from latency_budget._core.levers.baseline import Baseline, ModelStats

__all__ = ["LEVER", "QUALITY_CHECKED", "QUALITY_NOT_RECORDED", "find"]

# What a model-choice estimate rests on (``latency_budget.hint.basis``): the faster model's
# answers weighed against the slower's and not worse by more than the tolerance, or no
# quality data to weigh them against.
QUALITY_CHECKED = "quality_checked"
QUALITY_NOT_RECORDED = "quality_not_recorded"


def find(
    stage: str,
    members: Sequence[Call],
    baseline: Baseline,
    cap: float,
    stats: dict[str, ModelStats | None],
    policy: QualityPolicy,
) -> Finding | None:
    """The model-choice lever in one stage: its calls to slower models whose answers the fastest's match."""
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
    weighed: dict[str, Weighed] = {}  # each slower model's answers against the fastest's
    rejected: dict[int, int] = {}  # calls of slower models whose answers the fastest's do not match
    basis = best.n  # the fewest calls of any model compared
    for index, call in enumerate(members):
        model = call.model
        ratio = ratios.get(model) if model is not None else None
        if model is None or ratio is None or ratio >= 1:
            continue
        verdict = weighed.get(model)
        if verdict is None:
            verdict = weighed[model] = weigh_quality(
                baseline.quality(stage, fastest), baseline.quality(stage, model), policy
            )
        if model not in slower:
            slower[model] = None
            basis = min(basis, next(found.n for name, found in compared if name == model))
        if verdict.known and not verdict.passed:
            rejected[index] = 0
            continue
        shorter[index] = round(call.duration_ns * ratio)
    if rejected and not shorter:  # every slower model answers better: the trade, not a saving
        faster_p50 = best.duration_p50_ms
        trades = [
            f"saves {format_ms(found.duration_p50_ms - faster_p50)} p50; {weighed[model].words(failed_only=True)}"
            for model, found in compared
            if model in weighed and weighed[model].known and not weighed[model].passed
        ]
        return Finding(
            "model_choice",
            stage,
            len(rejected),
            None,
            basis,
            (*slower, fastest),
            fastest,
            span_ids=span_ids_of(members, rejected),
            trade="; ".join(trades) + ": not recommended",
        )
    outcome = capped_saving(members, shorter, cap)
    if outcome is None:
        return None
    saving, ids = outcome
    counted = [weighed[model] for model in slower if model in weighed and weighed[model].passed]
    unweighed = any(not weighed[model].known for model in slower if model in weighed)
    test = f"at least {plural(least, 'call')} of each model compared"
    if counted and not unweighed:
        test += "; " + counted[0].test(policy)
    return Finding(
        "model_choice",
        stage,
        len(shorter),
        saving,
        basis,
        tuple(m for m in (*slower, fastest) if m not in weighed or not weighed[m].known or weighed[m].passed),
        fastest,
        span_ids=ids,
        test=test,
        rests_on=QUALITY_NOT_RECORDED if unweighed else QUALITY_CHECKED,
        unweighed=unweighed,
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
    if given.not_recommended and not given.estimated:
        return basis, f"keep {given.named} in {stage}: {fastest[0]} is faster, but its answers are worse"
    return basis, f"try {fastest[0]} instead of {given.named} in {stage}"


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
    evidence="each model's evaluation scores (those quality.evaluations counts), error rate and guardrail block rate "
    "in the stage: the faster model is recommended only where a non-inferiority test shows its answers are not worse "
    "by more than quality.max_drop, else the trade is said instead; with none of them, it says so",
    never="swapping the model of a protected stage's calls",
    needs=("evaluation_scores", "guardrail_outcomes", "error_status"),
    advise=advise,
    find_in_stage=find,
)
