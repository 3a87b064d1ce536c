"""What a lever found in one request (a :class:`Finding`), and the helpers every estimated lever shares."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from latency_budget._core.estimators import MIN_R_SQUARED, Fit, shrunk_saving_ns
from latency_budget._core.levers.baseline import ContextBasis
from latency_budget._core.report import format_ms

from ..wording import plural

if TYPE_CHECKING:
    from latency_budget._core.call_facts import Call
    from latency_budget._core.kinds import LeverKind
    from latency_budget._core.levers.baseline import Baseline, ModelStats

__all__ = ["FITTED", "Finding", "fit_caption", "fit_test", "intervals_of", "span_ids_of", "stage_stats"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One lever in one request.

    ``saving_ms`` is ``None`` when the lever applies but the data gives no estimate (a
    non-streamed call to a model never seen streaming). ``basis`` is the number of calls
    the estimate rests on; ``targets`` the models, tools or data sources involved, and
    ``instead`` the faster model for ``model_choice``: for people, never for telemetry.
    ``repeated_within`` counts, for ``cache``, the calls repeated within the request
    (the others repeated an earlier request's); ``span_ids`` are the calls it concerns.
    ``test`` says, for people, what the data passed for the estimate to be given: a
    sample size, a fit's interval and R², or a rank test. ``rests_on`` says, for
    ``context_size``, what was fitted on input tokens, and for ``cache``, whether the
    repeated calls' results were recorded (:data:`CACHE_RESULTS`) or assumed identical
    (:data:`CACHE_ASSUMED`): ``latency_budget.hint.basis``. ``held_back_by`` names the
    protected stage whose check follows the call, for a lever whose saving would pass
    that check (``streaming``): then ``saving_ms`` is ``None`` and ``held_back_ms`` is
    what it would save once the check could keep up (a streaming-capable check).
    ``naive_ms`` is, for ``context_size``, the saving were no input token served from the
    provider's prompt cache, where the cache lowered it (else ``None``).
    ``unweighed``: the lever changes answers, and no quality data was there to weigh the
    saving against (the caveat, :data:`~latency_budget._core.levers.weigh.NO_QUALITY_DATA`).
    ``trade``, for ``model_choice``: the faster model's answers were worse by more than the
    budget file's tolerance, so it is not recommended (``saving_ms`` ``None``): the trade in
    words ("saves 400ms p50; correctness 0.58 vs 0.91, n 120/118: not recommended").
    """

    kind: LeverKind
    stage: str
    spans: int
    saving_ms: float | None
    basis: int
    targets: tuple[str, ...] = ()
    instead: str | None = None
    repeated_within: int = 0
    span_ids: tuple[int, ...] = ()  # the calls it concerns, in start order
    test: str = ""
    # What the estimate rests on (``latency_budget.hint.basis``): for ``context_size`` what its
    # fit is of (ModelStats.context_basis); for ``cache`` whether results were recorded.
    rests_on: str | None = None
    held_back_by: str | None = None
    held_back_ms: float | None = None
    naive_ms: float | None = None
    unweighed: bool = False
    trade: str | None = None


def intervals_of(members: Sequence[Call]) -> list[tuple[int, int]]:
    """The (start, end) of each call, in the order given."""
    return [(c.start_ns, c.end_ns) for c in members]


def span_ids_of(members: Sequence[Call], chosen: dict[int, int]) -> tuple[int, ...]:
    """The span ids of the chosen calls (indexes into ``members``), in start order."""
    return tuple(members[index].span_id for index in sorted(chosen))


FITTED: dict[ContextBasis, str] = {
    "ttft": "time to first token on input tokens",
    "duration_given_output": "duration on input tokens, output tokens held fixed",
    "duration": "duration on input tokens (no output tokens recorded)",
}


def capped_saving(members: Sequence[Call], changed: dict[int, int], cap: float) -> tuple[float, tuple[int, ...]] | None:
    """The stage's saving (ms, at most ``cap``) with the ``changed`` calls' new durations, and their span ids.

    ``None`` when no call changed or the stage would not be shorter (calls side by side).
    """
    if not changed:
        return None
    saving = min(cap, shrunk_saving_ns(intervals_of(members), changed) / 1e6)
    if saving <= 0:
        return None
    return saving, span_ids_of(members, changed)


def fit_test(fit: Fit, basis: ContextBasis | None) -> str:
    """What a token lever's fit passed, for people: what it is of, its points, its interval and R²."""
    what = f" of {FITTED[basis]}" if basis is not None else ""
    return (
        f"Theil-Sen fit{what} over {plural(fit.n, 'call')}{fit.sample_note()}: slope's 95% interval above zero, "
        f"R² {fit.r_squared:.2f} (at least {MIN_R_SQUARED})"
    )


def stage_stats(
    stats: dict[str, ModelStats | None], baseline: Baseline, stage: str, members: Sequence[Call]
) -> dict[str, ModelStats | None]:
    """``stats`` filled, once per stage, with the statistics of each model among ``members``."""
    if not stats:
        for call in members:
            if call.model is not None and call.model not in stats:
                stats[call.model] = baseline.stats(stage, call.model)
    return stats


def fit_caption(fit: Fit) -> str:
    """A Theil-Sen fit of milliseconds on tokens, for people: the one wording of the text, tables and page."""
    return (
        f"{format_ms(fit.slope * 1000)} per 1,000 tokens (95% CI {format_ms(fit.slope_low * 1000)} to "
        f"{format_ms(fit.slope_high * 1000)}), R² {fit.r_squared:.2f}, n {fit.n}{fit.sample_note()}"
    )
