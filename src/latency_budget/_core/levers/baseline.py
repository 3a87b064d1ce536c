"""What the calls seen before say, per model and stage: the statistics every estimated lever rests on.

A :class:`Baseline` is either the processor's recent calls
(:class:`~latency_budget._core.recent.RecentCalls`) or a whole recording
(:class:`RecordedBaseline`, the CLI's). :func:`summarise` computes a model's
:class:`ModelStats` in a stage: medians, the fits of latency on tokens (each tested, see
:mod:`~latency_budget._core.estimators`), and the time an output token costs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING, Literal, Protocol

from latency_budget._core.estimators import MAX_FIT_POINTS, Z95, Fit, median, rank_test, theil_sen
from latency_budget._core.held_fixed import held_fixed_fit
from latency_budget._core.quality_reader import QualityTally

if TYPE_CHECKING:
    from latency_budget._core.call_facts import Call, Sample
    from latency_budget._core.quality import QualityStats

__all__ = [
    "DIFFERING",
    "FIT_NAMES",
    "MIN_FIRST_TOKEN_CALLS",
    "MIN_MODEL_CALLS",
    "MIN_RATE_CALLS",
    "MIN_STREAMED",
    "Baseline",
    "ContextBasis",
    "FitName",
    "ModelStats",
    "RecordedBaseline",
    "Result",
    "merged_result",
    "passed_fits",
    "summarise",
]


MIN_STREAMED = 3  # streamed calls of a model before its first token is a basis for the streaming lever
MIN_MODEL_CALLS = 10  # calls of each model before two are compared
MIN_RATE_CALLS = 5  # streamed calls with output tokens before a time per output token is taken from them
# Calls of a model with a first token and input tokens from which the context lever fits
# time to first token, and only that (below it, duration with output tokens held fixed).
MIN_FIRST_TOKEN_CALLS = 10

# What the context lever's fit is of: time to first token, duration at a fixed output
# length, or duration (calls without output tokens).
ContextBasis = Literal["ttft", "duration_given_output", "duration"]


@dataclass(frozen=True, slots=True)
class ModelStats:
    """What the calls of one model in one stage say, for the estimates.

    ``streamed`` counts the calls with a first token, which ``first_token_p50_ms`` and
    ``first_token_fit`` rest on; ``rate_calls`` the calls behind ``ms_per_output_token``,
    taken from streamed calls (``rate_from == "streamed"``) or from a fit of duration on
    output tokens (``"fit"``).
    """

    n: int
    duration_p50_ms: float
    streamed: int
    first_token_p50_ms: float | None
    input_p50: float | None
    output_p50: float | None
    duration_fit: Fit | None  # duration (ms) on input tokens (tried only where it is the context basis)
    first_token_fit: Fit | None  # time to first token (ms) on input tokens, streamed calls
    # The fit the context lever uses, of what ``context_basis`` names (see the module's docstring).
    context_fit: Fit | None
    ms_per_output_token: float | None
    rate_calls: int
    rate_from: Literal["streamed", "fit"] | None
    context_basis: ContextBasis | None = None  # None: no call with input tokens
    # The median reasoning tokens of the generation calls that record them (None: none do).
    reasoning_p50: float | None = None


# The columns summarise reads of a Call (a Sample, a tuple, is transposed by position).
_CALL_COLUMNS = tuple(
    attrgetter(name)
    for name in (
        "start_ns",
        "end_ns",
        "first_token_ns",
        "input_tokens",
        "output_tokens",
        "generation",
        "to_tools",
        "reasoning_tokens",
    )
)

FitName = Literal["duration", "held", "first_token", "output", "rate"]
FIT_NAMES: frozenset[FitName] = frozenset(("duration", "held", "first_token", "output", "rate"))


def summarise(
    calls: Sequence[Call | Sample],
    *,
    max_fit_points: int = MAX_FIT_POINTS,
    z: float = Z95,
    fits: AbstractSet[FitName] = FIT_NAMES,
) -> ModelStats:
    """The statistics of a non-empty set of calls (of one model in one stage).

    ``max_fit_points`` bounds the points of each fit (they are thinned evenly along x).
    Each fit, and the rank test of the streamed per-token rate, is at level ``z`` (a
    one-sided 2.5% test by default); only those named in ``fits`` are tried.
    """
    # In columns, with the per-call work in C where it can be: the processor runs this on
    # a series' recent calls at each refresh, and a loop reading each call's fields cost
    # about 4,400 instructions per call (callgrind), the columns about a quarter of that.
    try:  # samples (the processor's) are tuples: transposed in one call
        _, _, starts, ends, ttfts, inputs_col, outputs_col, generation_col, _, tools_col, _, _, _, reasoning_col = zip(
            *calls, strict=True
        )
    except (TypeError, ValueError):  # calls (the CLI's), or none
        starts, ends, ttfts, inputs_col, outputs_col, generation_col, tools_col, reasoning_col = (
            tuple(map(getter, calls)) for getter in _CALL_COLUMNS
        )
    durations = [(end - start) / 1e6 if end > start else 0.0 for start, end in zip(starts, ends, strict=True)]
    first_tokens = [ttft / 1e6 for ttft in ttfts if ttft is not None]
    inputs = [tokens for tokens in inputs_col if tokens is not None]
    reasoning = [tokens for tokens in reasoning_col if tokens is not None]
    # Output for the user (not tool calls): what a shorter answer would shorten.
    outputs = [
        out
        for out, generation, to_tools in zip(outputs_col, generation_col, tools_col, strict=True)
        if out is not None and generation and not to_tools
    ]
    by_input: list[tuple[float, float]] = []
    first_by_input: list[tuple[float, float]] = []
    held: list[tuple[float, float, float]] = []  # (input tokens, output tokens, duration)
    if "duration" in fits or "held" in fits or "first_token" in fits:
        for tokens, out, duration, ttft in zip(inputs_col, outputs_col, durations, ttfts, strict=True):
            if tokens is not None:
                by_input.append((tokens, duration))
                if ttft is not None:
                    first_by_input.append((tokens, ttft / 1e6))
                if out is not None:  # tool-call tokens too: they take generation time as well
                    held.append((tokens, out, duration))
    by_output: list[tuple[float, float]] = []
    rates: list[float] = []
    generating: list[tuple[float, float]] = []  # (output tokens, generation time), streamed calls
    if "output" in fits or "rate" in fits:
        for out, duration, ttft, generation, to_tools in zip(
            outputs_col, durations, ttfts, generation_col, tools_col, strict=True
        ):
            # Tool-call outputs stay out (many cheap tokens): the rate is that of answers.
            if out is None or not generation or to_tools:
                continue
            if ttft is not None and out > 0 and duration >= (first := ttft / 1e6):
                rates.append((duration - first) / out)
                generating.append((out, duration - first))
            by_output.append((out, duration))
    rate: float | None = None
    rate_calls = 0
    rate_from: Literal["streamed", "fit"] | None = None
    # The streamed calls' median rate only where generation time demonstrably grows with
    # output tokens (a rank test): on calls where it does not, a shorter answer saves nothing.
    if len(rates) >= MIN_RATE_CALLS and "rate" in fits and rank_test(generating, z=z):
        rate, rate_calls, rate_from = median(rates), len(rates), "streamed"
    elif "output" in fits and (output_fit := theil_sen(by_output, max_points=max_fit_points, z=z)) is not None:
        rate, rate_calls, rate_from = output_fit.slope, output_fit.n, "fit"
    first_token_fit = theil_sen(first_by_input, max_points=max_fit_points, z=z) if "first_token" in fits else None
    # The context lever's fit: of what input tokens move, not of what moves with them.
    duration_fit: Fit | None = None
    context_fit: Fit | None = None
    basis: ContextBasis | None = None
    if len(first_by_input) >= MIN_FIRST_TOKEN_CALLS:
        basis, context_fit = "ttft", first_token_fit
    elif by_input and 2 * len(held) >= len(by_input):
        basis = "duration_given_output"
        if "held" in fits:
            context_fit = held_fixed_fit(held, max_points=max_fit_points, z=z)
    elif by_input:
        basis = "duration"
        if "duration" in fits:
            duration_fit = context_fit = theil_sen(by_input, max_points=max_fit_points, z=z)
    return ModelStats(
        n=len(durations),
        duration_p50_ms=median(durations),
        streamed=len(first_tokens),
        first_token_p50_ms=median(first_tokens) if first_tokens else None,
        input_p50=median(inputs) if inputs else None,
        output_p50=median(outputs) if outputs else None,
        duration_fit=duration_fit,
        first_token_fit=first_token_fit,
        context_fit=context_fit,
        ms_per_output_token=rate,
        rate_calls=rate_calls,
        rate_from=rate_from,
        context_basis=basis,
        reasoning_p50=median(reasoning) if reasoning else None,
    )


def passed_fits(stats: ModelStats) -> frozenset[FitName]:
    """The fits (and the rate's rank test) that ``stats`` found supported."""
    found: set[FitName] = set()
    if stats.duration_fit is not None:
        found.add("duration")
    if stats.first_token_fit is not None:
        found.add("first_token")
    if stats.context_basis == "duration_given_output" and stats.context_fit is not None:
        found.add("held")
    if stats.rate_from == "streamed":
        found.add("rate")
    elif stats.rate_from == "fit":
        found.add("output")
    return frozenset(found)


class Baseline(Protocol):
    """The calls the estimates rest on: recent traffic (the processor) or a whole recording (the CLI)."""

    def stats(self, stage: str, model: str) -> ModelStats | None:
        """The statistics of ``model``'s calls in ``stage``, if any were seen."""

    def models(self, stage: str) -> Sequence[tuple[str, ModelStats]]:
        """Every model seen in ``stage``, with its statistics."""

    @property
    def min_model_calls(self) -> int:
        """Calls of each model before two are compared: :data:`MIN_MODEL_CALLS` on a recording, more in process."""

    def model_count(self, stage: str) -> int:
        """How many models were seen in ``stage`` (cheap: no statistics computed)."""

    def seen(self, key: int) -> bool:
        """Whether a call with this identity was made in an earlier request."""

    def result(self, key: int) -> Result:
        """What the earlier requests' calls with this identity returned (see :func:`merged_result`)."""

    def quality(self, stage: str, model: str) -> QualityStats | None:
        """What is known of the quality of ``model``'s answers in ``stage`` (``None``: nothing)."""


# What calls of one identity returned: one result's hash, None (not recorded), or DIFFERING.
Result = int | str | None
DIFFERING = "differing results"  # calls of one identity returned different results: no cache's


def merged_result(before: Result, result: Result) -> Result:
    """What calls of one identity returned, with one more: a result not recorded contradicts none."""
    if before is None:
        return result
    if result is None or result == before:
        return before
    return DIFFERING


class RecordedBaseline:
    """A :class:`Baseline` over a fixed set of calls, such as a whole recording.

    Statistics per stage and model are computed once, when first asked for. ``earlier``
    holds the identities of the calls of the requests already looked at: a caller going
    through the requests in order adds each request's after judging it.
    """

    def __init__(self, calls: Iterable[Call]) -> None:
        self._groups: dict[str, dict[str, list[Call]]] = {}
        for call in calls:
            if call.model is not None:
                self._groups.setdefault(call.stage, {}).setdefault(call.model, []).append(call)
        self._stats: dict[tuple[str, str], ModelStats] = {}
        self._quality: dict[tuple[str, str], QualityStats | None] = {}  # read from the calls' quality when asked
        self.min_model_calls = MIN_MODEL_CALLS
        self.earlier: set[int] = set()
        self.results: dict[int, Result] = {}  # identity -> what its earlier calls returned, where recorded

    def calls(self, stage: str, model: str) -> list[Call]:
        """The calls of ``model`` in ``stage``, in the order given."""
        return self._groups.get(stage, {}).get(model, [])

    def stages(self) -> list[str]:
        """The stages with model calls, in the order first seen."""
        return list(self._groups)

    def stats(self, stage: str, model: str) -> ModelStats | None:
        found = self._stats.get((stage, model))
        if found is None:
            calls = self.calls(stage, model)
            if not calls:
                return None
            found = self._stats[stage, model] = summarise(calls)
        return found

    def models(self, stage: str) -> list[tuple[str, ModelStats]]:
        found: list[tuple[str, ModelStats]] = []
        for model in self._groups.get(stage, {}):
            stats = self.stats(stage, model)
            if stats is not None:
                found.append((model, stats))
        return found

    def model_count(self, stage: str) -> int:
        return len(self._groups.get(stage, ()))

    def seen(self, key: int) -> bool:
        return key in self.earlier

    def result(self, key: int) -> Result:
        return self.results.get(key)

    def quality(self, stage: str, model: str) -> QualityStats | None:
        key = (stage, model)
        if key not in self._quality:
            tally = QualityTally()
            for call in self.calls(stage, model):
                tally.add(call.quality)
            self._quality[key] = tally.stats()
        return self._quality[key]

    def remember(self, calls: Iterable[Call]) -> None:
        """Add the identities of a request's calls, and what they returned, to ``earlier``."""
        results = self.results
        for call in calls:
            key = call.key
            if key is not None:
                self.earlier.add(key)
                if call.result is not None:
                    results[key] = merged_result(results.get(key), call.result)
