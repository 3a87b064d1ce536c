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

Where a call records input tokens its provider served from its prompt cache (a prefix of
the prompt: ``Call.cached_input_tokens``, and those it wrote to it,
``Call.cache_creation_input_tokens``), only the tokens after that prefix are trimmed: a
cached token is not prefilled, so trimming it saves nothing, and trimming into the prefix
changes it, so the provider would prefill the rest of the prompt again (the hit lost).
The net saving is then the slope times the smaller of the excess and the uncached tail;
a call whose excess lies all in its cached prefix gives none (docs/levers.md has the
arithmetic).
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

from ..wording import plural

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
    naive: dict[int, int] = {}  # the same, were no token served from the prompt cache
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
            if excess <= 0:
                continue
            naive[index] = duration - min(duration, round(fit.slope * excess * 1e6))
            cut = min(duration, round(fit.slope * min(excess, _uncached_tail(call)) * 1e6))
            if cut > 0:
                trimmed[index] = duration - cut
                models[model] = None
                if fit.n > basis:
                    basis, fitted = fit.n, found.context_basis
                    test = fit_test(fit, fitted)
    if not trimmed:
        return None
    intervals = intervals_of(members)
    saving = min(cap, shrunk_saving_ns(intervals, trimmed) / 1e6)
    if saving <= 0:
        return None
    ids = span_ids_of(members, trimmed)
    without_cache: float | None = None
    if any(naive[index] != trimmed.get(index) for index in naive):  # the prompt cache lowered it
        without_cache = min(cap, shrunk_saving_ns(intervals, naive) / 1e6)
    return Finding(
        "context_size",
        stage,
        len(trimmed),
        saving,
        basis,
        tuple(models),
        span_ids=ids,
        test=test,
        rests_on=fitted,
        naive_ms=without_cache,
    )


def _uncached_tail(call: Call) -> float:
    """The input tokens after the prefix its provider read from, or wrote to, its prompt cache (all, if none)."""
    tokens = call.input_tokens or 0
    prefix = (call.cached_input_tokens or 0) + (call.cache_creation_input_tokens or 0)
    return max(0, tokens - prefix)


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
    if given.cached:
        basis += (
            f"; in {plural(given.cached, 'request')} a prefix of the prompt came from the provider's prompt "
            "cache: only the tokens after it are counted (trimming into it would lose the cache hit)"
        )
        advice += ", after the prefix the provider caches (keep that prefix as it is)"
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
    "with output tokens held fixed: a longer input that brings a longer answer is not counted as prefill; where "
    "the provider served a prefix of the prompt from its prompt cache, only the tokens after it are trimmed "
    "(trimming into it would lose the cache hit)",
    evidence="evaluation scores of calls with trimmed and full contexts; with no quality data, it says so",
    never="trimming a protected stage's input",
    needs=("evaluation_scores",),
    advise=advise,
    find_in_stage=find,
)
