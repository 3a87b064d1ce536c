"""The latency levers of one request, estimated from calls seen before (a :class:`Baseline`).

Five levers are read from the calls' attributes (sequential calls and iterations, in
:mod:`latency_budget._core.hints`, from the trace's shape):

``streaming``
    The first model call of the request that produced output for the user without
    streaming it (``gen_ai.request.stream`` not true and no first token recorded; not a
    call that answered with tool calls), in a stage on the critical path, before the
    request's first token. Streamed, its first token would have come after about the
    median time to first token of streamed calls to the same model in the same stage:
    the saving is its duration minus that median (first-token time, not total time).
``cache``
    Calls identical to an earlier one (same stage, target and arguments, where the span
    carries arguments), earlier in the same request or in an earlier one: the stage time
    they took, if a cache hit cost nothing. Where calls of one identity recorded
    different results (``Call.result``), a cache would change the answer: none of them
    counts. Where the results were not recorded, they are assumed identical, and the
    finding says so.
``model_choice``
    Calls to a model whose median duration in the stage is above the fastest model's
    there (each with at least the baseline's ``min_model_calls``: :data:`MIN_MODEL_CALLS`
    over a recording, a full window of recent calls in process, where a young series'
    medians would wander): each would take its duration times the ratio of the two medians.
``context_size``
    Calls with more input tokens than their model's median in the stage, where a
    Theil-Sen fit of what input moves is supported: trimming them to the median saves
    the fitted slope times the excess. Where at least :data:`MIN_FIRST_TOKEN_CALLS` of
    the model's calls record a first token, that fit is of time to first token on input
    tokens (``basis`` ``"ttft"``: prefill, which the answer's length does not lengthen);
    else of duration on input tokens with output tokens held fixed
    (``"duration_given_output"``, :mod:`~latency_budget._core.held_fixed`), where most
    calls record both counts; else of duration on input tokens (``"duration"``: calls
    with no output count, such as embeddings). A longer input that brings a longer
    answer is not mistaken for a slower prefill.
``output_length``
    Generation calls whose output was for the user (not tool calls), with more output
    tokens than their model's median: the excess times the model's generation time per
    output token (the median of (duration - time to first token) / output tokens over
    streamed calls, else a supported fit of duration on output tokens). Calls that
    answered with tool calls only (``Call.to_tools``: every spelling the first-token rule
    knows) stay out of the median, the rate and the fit alike: their many cheap tokens
    would pull an answer's rate down.

Every saving is a wall-clock saving of the stage (overlapping calls count once, see
:func:`~latency_budget._core.estimators.shrunk_saving_ns`), capped at the stage's time
in the request and, for total-time levers, at its critical-path time. A lever that would
save less than the profile's ``hints.min_saving_ms`` in a request is left out, as the
hints read from the trace's shape are.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from operator import attrgetter
from typing import Literal, Protocol

from latency_budget._config.model import DEFAULT_MIN_SAVING_MS
from latency_budget._core.call_facts import Call, Sample
from latency_budget._core.estimators import (
    MAX_FIT_POINTS,
    MIN_R_SQUARED,
    Z95,
    Fit,
    median,
    rank_test,
    shrunk_saving_ns,
    theil_sen,
)
from latency_budget._core.held_fixed import held_fixed_fit
from latency_budget._core.kinds import LEVER_KINDS, LeverKind
from latency_budget._core.report import TraceReport

__all__ = [
    "CACHE_ASSUMED",
    "CACHE_RESULTS",
    "DIFFERING",
    "FITTED",
    "FIT_NAMES",
    "LEVER_KINDS",
    "MIN_FIRST_TOKEN_CALLS",
    "MIN_MODEL_CALLS",
    "MIN_RATE_CALLS",
    "MIN_STREAMED",
    "Baseline",
    "ContextBasis",
    "Finding",
    "FitName",
    "LeverKind",
    "ModelStats",
    "RecordedBaseline",
    "Result",
    "merged_result",
    "passed_fits",
    "request_levers",
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


# The columns summarise reads of a Call (a Sample, a tuple, is transposed by position).
_CALL_COLUMNS = tuple(
    attrgetter(name)
    for name in ("start_ns", "end_ns", "first_token_ns", "input_tokens", "output_tokens", "generation", "to_tools")
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
        _, _, starts, ends, ttfts, inputs_col, outputs_col, generation_col, _, tools_col, _, _, _ = zip(
            *calls, strict=True
        )
    except (TypeError, ValueError):  # calls (the CLI's), or none
        starts, ends, ttfts, inputs_col, outputs_col, generation_col, tools_col = (
            tuple(map(getter, calls)) for getter in _CALL_COLUMNS
        )
    durations = [(end - start) / 1e6 if end > start else 0.0 for start, end in zip(starts, ends, strict=True)]
    first_tokens = [ttft / 1e6 for ttft in ttfts if ttft is not None]
    inputs = [tokens for tokens in inputs_col if tokens is not None]
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

    def remember(self, calls: Iterable[Call]) -> None:
        """Add the identities of a request's calls, and what they returned, to ``earlier``."""
        results = self.results
        for call in calls:
            key = call.key
            if key is not None:
                self.earlier.add(key)
                if call.result is not None:
                    results[key] = merged_result(results.get(key), call.result)


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
    (:data:`CACHE_ASSUMED`): ``latency_budget.hint.basis``.
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


def request_levers(
    calls: Sequence[Call],
    report: TraceReport,
    baseline: Baseline,
    *,
    min_saving_ms: float = DEFAULT_MIN_SAVING_MS,
    left_out: list[Finding] | None = None,
) -> list[Finding]:
    """The levers that apply to one request: its calls (start order) and its report, against ``baseline``.

    A finding whose estimated saving is below ``min_saving_ms`` (the profile's
    ``hints.min_saving_ms``) is left out, and appended to ``left_out`` when given.
    A finding without an estimate (``saving_ms`` ``None``) is kept.
    """
    found = _findings(calls, report, baseline)
    kept = [f for f in found if f.saving_ms is None or f.saving_ms >= min_saving_ms]
    if left_out is not None and len(kept) < len(found):
        left_out.extend(f for f in found if f.saving_ms is not None and f.saving_ms < min_saving_ms)
    return kept


def _findings(calls: Sequence[Call], report: TraceReport, baseline: Baseline) -> list[Finding]:
    # Only stages with a model call or a call with arguments can have a lever: most spans of
    # most stages have neither, and a root's end should not pay for them.
    by_stage: dict[str, list[Call]] = {}
    relevant: dict[str, tuple[bool, bool]] = {}  # stage -> (has a model call, has a call with arguments)
    streamable = False
    for call in calls:
        members = by_stage.get(call.stage)
        if members is None:
            members = by_stage[call.stage] = []
        members.append(call)
        if call.model is not None or call.key is not None:
            modelled, keyed = relevant.get(call.stage, (False, False))
            relevant[call.stage] = (modelled or call.model is not None, keyed or call.key is not None)
            streamable = streamable or (call.generation and not call.streamed and not call.to_tools)
    if not relevant:
        return []
    limits: dict[str, tuple[float, float]] = {}  # stage -> (its time, the most a total-time lever may save)
    for measured in report.stages:
        if measured.stage in relevant:
            actual, critical = measured.actual_ms, measured.critical_ms
            limits[measured.stage] = (actual, actual if critical is None else min(actual, critical))
    found: list[Finding] = []
    if streamable:
        streaming = _streaming(calls, report, limits, baseline)
        if streaming is not None:
            found.append(streaming)
    for stage, (modelled, keyed) in relevant.items():
        cap = limits[stage][1] if stage in limits else 0.0
        if cap <= 0:
            continue
        members = by_stage[stage]
        if keyed and (finding := _cache(stage, members, baseline, cap)) is not None:
            found.append(finding)
        if not modelled:
            continue
        if baseline.model_count(stage) >= 2 and (finding := _model_choice(stage, members, baseline, cap)) is not None:
            found.append(finding)
        stats: dict[str, ModelStats | None] = {}
        for call in members:
            if call.model is not None and call.model not in stats:
                stats[call.model] = baseline.stats(stage, call.model)
        found.extend(_token_levers(stage, members, stats, cap))
    return found


def _streaming(
    calls: Sequence[Call], report: TraceReport, limits: dict[str, tuple[float, float]], baseline: Baseline
) -> Finding | None:
    first_token_at = None
    if report.first_token_ms is not None and report.start_time_ns is not None:
        first_token_at = report.start_time_ns + round(report.first_token_ms * 1e6)
    candidates = [
        c
        for c in calls
        if c.generation
        and not c.streamed
        and not c.to_tools
        and c.model is not None
        and c.stage in limits
        and limits[c.stage][1] > 0  # the stage is on the critical path
        and (first_token_at is None or c.start_ns < first_token_at)
    ]
    if not candidates:
        return None
    call = min(candidates, key=lambda c: (c.end_ns, c.start_ns))
    assert call.model is not None
    stats = baseline.stats(call.stage, call.model)
    streamed = stats.streamed if stats is not None else 0
    if stats is None or stats.first_token_p50_ms is None or streamed < MIN_STREAMED:
        return Finding("streaming", call.stage, 1, None, streamed, (call.model,), span_ids=(call.span_id,))
    test = f"at least {MIN_STREAMED} streamed calls of the model"
    duration = call.duration_ns / 1e6
    saving = min(duration - stats.first_token_p50_ms, limits[call.stage][0])
    if saving <= 0:  # not shorter than a streamed call's first token: streaming would not help
        return None
    return Finding("streaming", call.stage, 1, saving, streamed, (call.model,), span_ids=(call.span_id,), test=test)


def _intervals(members: Sequence[Call]) -> list[tuple[int, int]]:
    return [(c.start_ns, c.end_ns) for c in members]


def _span_ids(members: Sequence[Call], chosen: dict[int, int]) -> tuple[int, ...]:
    """The span ids of the chosen calls (indexes into ``members``), in start order."""
    return tuple(members[index].span_id for index in sorted(chosen))


CACHE_RESULTS = "identical_results"  # the cache hint's basis: every repeated call's results recorded, and equal
CACHE_ASSUMED = "results_not_recorded"  # ... some not recorded: identical results assumed


def _cache(stage: str, members: Sequence[Call], baseline: Baseline, cap: float) -> Finding | None:
    # What each identity returned, here and in earlier requests: a call whose identical
    # calls returned different results is not one a cache could answer.
    results: dict[int, Result] = {}
    for call in members:
        key = call.key
        if key is not None:
            before = results[key] if key in results else baseline.result(key)
            results[key] = merged_result(before, call.result)
    here: set[int] = set()  # identities called earlier in this request
    repeated: dict[int, int] = {}  # index -> 0: the call would not be made
    within = 0
    assumed = False  # a repeated identity whose results were not recorded
    targets: dict[str, None] = {}
    for index, call in enumerate(members):
        key = call.key
        if key is None:
            continue
        if key in here:
            within_request = True
        elif not baseline.seen(key):
            here.add(key)
            continue
        else:
            within_request = False
        here.add(key)
        returned = results[key]
        if returned == DIFFERING:
            continue
        within += within_request
        assumed = assumed or returned is None
        repeated[index] = 0
        if call.target is not None:
            targets[call.target] = None
    if not repeated:
        return None
    saving = min(cap, shrunk_saving_ns(_intervals(members), repeated) / 1e6)
    if saving <= 0:  # identical calls side by side: a cache would not shorten the stage
        return None
    ids = _span_ids(members, repeated)
    if assumed:
        test, basis = (
            "identical stage, target and arguments; assumes identical results; results not recorded",
            CACHE_ASSUMED,
        )
    else:
        test, basis = "identical stage, target, arguments and recorded results", CACHE_RESULTS
    return Finding("cache", stage, len(repeated), saving, len(repeated), tuple(targets), None, within, ids, test, basis)


def _model_choice(stage: str, members: Sequence[Call], baseline: Baseline, cap: float) -> Finding | None:
    if not any(c.model is not None for c in members):
        return None
    least = baseline.min_model_calls
    compared = [(model, stats) for model, stats in baseline.models(stage) if stats.n >= least]
    if len(compared) < 2:
        return None
    fastest, best = min(compared, key=lambda item: (item[1].duration_p50_ms, item[0]))
    ratios = {model: best.duration_p50_ms / stats.duration_p50_ms for model, stats in compared if model != fastest}
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
            basis = min(basis, next(stats.n for name, stats in compared if name == model))
    if not shorter:
        return None
    saving = min(cap, shrunk_saving_ns(_intervals(members), shorter) / 1e6)
    if saving <= 0:
        return None
    ids = _span_ids(members, shorter)
    test = f"at least {least} calls of each model compared"
    return Finding(
        "model_choice", stage, len(shorter), saving, basis, (*slower, fastest), fastest, span_ids=ids, test=test
    )


def _token_levers(
    stage: str, members: Sequence[Call], stats: dict[str, ModelStats | None], cap: float
) -> list[Finding]:
    """``context_size`` and ``output_length``: calls with more input (output) tokens than their model's median."""
    trimmed: dict[int, int] = {}  # index -> duration with the context trimmed to the median
    trimmed_models: dict[str, None] = {}
    trimmed_basis = 0
    trimmed_test = ""
    trimmed_from: ContextBasis | None = None
    cut_short: dict[int, int] = {}  # index -> duration with the output cut to the median
    cut_models: dict[str, None] = {}
    cut_basis = 0
    cut_test = ""
    for index, call in enumerate(members):
        model = call.model
        found = stats.get(model) if model is not None else None
        if found is None or model is None:
            continue
        duration = call.duration_ns
        fit = found.context_fit
        if fit is not None and call.input_tokens is not None and found.input_p50 is not None:
            excess = call.input_tokens - found.input_p50
            cut = min(duration, round(fit.slope * excess * 1e6)) if excess > 0 else 0
            if cut > 0:
                trimmed[index] = duration - cut
                trimmed_models[model] = None
                if fit.n > trimmed_basis:
                    trimmed_basis, trimmed_from = fit.n, found.context_basis
                    trimmed_test = _fit_test(fit, trimmed_from)
        rate = found.ms_per_output_token
        out = call.output_tokens
        if rate is not None and rate > 0 and out is not None and found.output_p50 is not None:
            if not call.generation or call.to_tools:
                continue
            excess = out - found.output_p50
            floor = min(call.first_token_ns or 0, duration)  # generation cannot start before the first token
            cut = min(duration - floor, round(rate * excess * 1e6)) if excess > 0 else 0
            if cut > 0:
                cut_short[index] = duration - cut
                cut_models[model] = None
                if found.rate_calls > cut_basis:
                    cut_basis = found.rate_calls
                    cut_test = (
                        "rank test (Kendall): generation time grows with output tokens, one-sided 2.5%"
                        if found.rate_from == "streamed"
                        else "Theil-Sen fit of duration on output tokens: 95% interval above zero, "
                        f"R² at least {MIN_R_SQUARED}"
                    )
    found_levers: list[Finding] = []
    levers: tuple[tuple[LeverKind, dict[int, int], dict[str, None], int, str, ContextBasis | None], ...] = (
        ("context_size", trimmed, trimmed_models, trimmed_basis, trimmed_test, trimmed_from),
        ("output_length", cut_short, cut_models, cut_basis, cut_test, None),
    )
    for kind, shorter, models, basis, test, fitted in levers:
        if shorter:
            saving = min(cap, shrunk_saving_ns(_intervals(members), shorter) / 1e6)
            if saving > 0:
                ids = _span_ids(members, shorter)
                found_levers.append(
                    Finding(
                        kind,
                        stage,
                        len(shorter),
                        saving,
                        basis,
                        tuple(models),
                        span_ids=ids,
                        test=test,
                        rests_on=fitted,
                    )
                )
    return found_levers


FITTED: dict[ContextBasis, str] = {
    "ttft": "time to first token on input tokens",
    "duration_given_output": "duration on input tokens, output tokens held fixed",
    "duration": "duration on input tokens (no output tokens recorded)",
}


def _fit_test(fit: Fit, basis: ContextBasis | None) -> str:
    what = f" of {FITTED[basis]}" if basis is not None else ""
    return (
        f"Theil-Sen fit{what} over {fit.n} calls{fit.sample_note()}: slope's 95% interval above zero, "
        f"R² {fit.r_squared:.2f} (at least {MIN_R_SQUARED})"
    )
