"""``context_size``: calls with more input tokens than their model's median, where input demonstrably costs time.

Trimming them to the median saves the fitted slope times the excess. Where at least
:data:`~latency_budget._core.levers.baseline.MIN_FIRST_TOKEN_CALLS` of the model's calls
record a first token, that fit is of time to first token on input tokens (``basis``
``"ttft"``: prefill, which the answer's length does not lengthen); else of duration on
input tokens with output tokens held fixed (``"duration_given_output"``,
:mod:`~latency_budget._core.held_fixed`), where most calls record both counts; else of
duration on input tokens (``"duration"``: calls with no output count, such as
embeddings). A longer input that brings a longer answer is not mistaken for a slower
prefill.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from latency_budget._core.estimators import shrunk_saving_ns
from latency_budget._core.levers.finding import (
    FITTED,
    Finding,
    fit_caption,
    fit_test,
    intervals_of,
    span_ids_of,
    stage_stats,
)
from latency_budget._core.levers.lever import Advice, AdviceFor, Lever
from latency_budget._core.report import format_ms

if TYPE_CHECKING:
    from latency_budget._config.model import QualityPolicy
    from latency_budget._core.call_facts import Call
    from latency_budget._core.levers.baseline import Baseline, ContextBasis, ModelStats

__all__ = ["LEVER", "find"]


def find(
    stage: str,
    members: Sequence[Call],
    baseline: Baseline,
    cap: float,
    stats: dict[str, ModelStats | None],
    policy: QualityPolicy,
) -> Finding | None:
    """The context lever in one stage: its calls' input beyond their model's median, at the fitted cost."""
    stage_stats(stats, baseline, stage, members)
    trimmed: dict[int, int] = {}  # index -> duration with the context trimmed to the median
    models: dict[str, None] = {}
    basis = 0
    test = ""
    fitted: ContextBasis | None = None
    for index, call in enumerate(members):
        model = call.model
        found = stats.get(model) if model is not None else None
        if found is None or model is None:
            continue
        fit = found.context_fit
        if fit is not None and call.input_tokens is not None and found.input_p50 is not None:
            duration = call.duration_ns
            excess = call.input_tokens - found.input_p50
            cut = min(duration, round(fit.slope * excess * 1e6)) if excess > 0 else 0
            if cut > 0:
                trimmed[index] = duration - cut
                models[model] = None
                if fit.n > basis:
                    basis, fitted = fit.n, found.context_basis
                    test = fit_test(fit, fitted)
    if not trimmed:
        return None
    saving = min(cap, shrunk_saving_ns(intervals_of(members), trimmed) / 1e6)
    if saving <= 0:
        return None
    ids = span_ids_of(members, trimmed)
    return Finding(
        "context_size", stage, len(trimmed), saving, basis, tuple(models), span_ids=ids, test=test, rests_on=fitted
    )


def advise(given: AdviceFor) -> Advice:
    """Context size's basis and advice over a recording."""
    stats = given.stats
    fit = stats.context_fit if stats is not None else None
    if fit is None or stats is None or stats.input_p50 is None:
        return "", ""
    what = FITTED[stats.context_basis] if stats.context_basis is not None else "duration on input tokens"
    basis = (
        f"Theil-Sen fit for {given.main} of {what}: {fit_caption(fit)}; "
        f"contexts above the median {stats.input_p50:,.0f} tokens trimmed to it"
    )
    advice = (
        f"trim the context of {given.named} calls (fewer or shorter documents, a summarised history): "
        f"each 1,000 input tokens cost about {format_ms(fit.slope * 1000)}"
    )
    return basis, advice


LEVER = Lever(
    name="context_size",
    estimated=True,
    saves="end_to_end",
    text="trimming the context of {calls} to the usual size would save about {saving}",
    unit="input token",
    changes="trim_input",
    fits="calls with more input tokens than their model's median in the stage, where a fit shows input tokens "
    "cost time",
    controls_for="fits time to first token on input tokens where calls stream (prefill alone), else duration "
    "with output tokens held fixed: a longer input that brings a longer answer is not counted as prefill",
    evidence="evaluation scores of calls with trimmed and full contexts; cached input tokens (trimming a prefix "
    "the provider serves from its prompt cache can cost more than it saves); with no quality data, it says so",
    never="trimming a protected stage's input",
    needs=("evaluation_scores",),
    advise=advise,
    find_in_stage=find,
)
