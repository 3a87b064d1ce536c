"""Every latency lever over all recorded requests: "Where to win", models by stage, context size.

The estimates rest on the whole recording (a
:class:`~latency_budget._core.levers.RecordedBaseline` of every request's calls), not on
the recent calls the live processor remembers, so a report over many requests is as
well founded as the data allows. Requests are looked at in start order, so the cache
lever counts a call as repeated only when an identical one came before it. Sequential
calls and iterations come from each report's own hints.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from latency_budget._config import BudgetConfig
from latency_budget._config.model import DEFAULT_MIN_SAVING_MS
from latency_budget._core.estimators import Fit, fit_or_reason
from latency_budget._core.kinds import KINDS, SHAPE_KINDS, HintKind, Saves, unknown_kind
from latency_budget._core.levers import (
    FITTED,
    MIN_MODEL_CALLS,
    MIN_STREAMED,
    Finding,
    RecordedBaseline,
    request_levers,
)
from latency_budget._core.report import TraceReport, format_ms
from latency_budget.cli._stats import percentile

__all__ = ["ContextRow", "LeverAnalysis", "LeverSummary", "ModelRow", "analyse_levers", "fit_caption"]

_SCATTER_POINTS = 300  # points kept per context-size plot


@dataclass(frozen=True, slots=True)
class LeverSummary:
    """One lever in one stage, over all requests.

    ``savings_ms`` holds, sorted, its estimated saving in each request where it applies
    with an estimate; ``unestimated`` counts the requests where it applies without one.
    ``saves`` says whose time it saves: the whole request's, or its first token's.
    """

    kind: HintKind
    stage: str
    of_requests: int
    savings_ms: tuple[float, ...]
    unestimated: int
    saves: Saves
    targets: tuple[str, ...]  # models, tools or data sources involved, most frequent first
    basis: str  # what the estimate rests on, for people
    advice: str  # what to try, for people
    test: str = ""  # what the data passed for the estimate to be given (empty for the shape's hints)

    @property
    def requests(self) -> int:
        """Requests with an estimated saving."""
        return len(self.savings_ms)

    @property
    def share(self) -> float:
        """The share of all requests with an estimated saving (0 to 1)."""
        return self.requests / self.of_requests if self.of_requests else 0.0

    @property
    def total_ms(self) -> float:
        """The estimated savings added up over the requests."""
        return sum(self.savings_ms)

    def p(self, q: float) -> float | None:
        """The ``q``-th percentile of the per-request savings, when any."""
        return percentile(self.savings_ms, q, presorted=True) if self.savings_ms else None


@dataclass(frozen=True, slots=True)
class ModelRow:
    """One model in one stage: its calls' durations and first tokens (each sorted, ms)."""

    stage: str
    model: str
    providers: tuple[str, ...]
    response_models: tuple[str, ...]
    duration_ms: tuple[float, ...]
    first_token_ms: tuple[float, ...]
    ms_per_output_token: float | None
    rate_calls: int
    rate_from: str | None

    @property
    def count(self) -> int:
        """Calls of the model in the stage."""
        return len(self.duration_ms)

    def p(self, q: float) -> float:
        """The ``q``-th percentile of the calls' durations."""
        return percentile(self.duration_ms, q, presorted=True)

    def first_token_p(self, q: float) -> float | None:
        """The ``q``-th percentile of the streamed calls' times to first token, when any."""
        return percentile(self.first_token_ms, q, presorted=True) if self.first_token_ms else None


@dataclass(frozen=True, slots=True)
class ContextRow:
    """How one model's latency in one stage grows with its input tokens.

    A fit is ``None`` when the data cannot support one; ``*_reason`` then says why.
    ``points`` are (input tokens, duration ms, first token ms or None), thinned for plots.
    """

    stage: str
    model: str
    count: int  # calls with input tokens
    input_p50: float | None
    duration_fit: Fit | None
    duration_reason: str
    first_token_fit: Fit | None
    first_token_reason: str
    points: tuple[tuple[float, float, float | None], ...]


@dataclass(frozen=True, slots=True)
class LeverAnalysis:
    """Where to win, the models by stage and the context-size fits, over ``requests`` requests.

    ``left_out`` counts the findings (a lever in a request, or a hint of its shape: sequential
    calls, iterations) whose estimated saving was below their profile's
    ``hints.min_saving_ms``, and that are in no figure here.
    """

    requests: int
    levers: tuple[LeverSummary, ...]  # largest total saving first; levers without estimates last
    models: tuple[ModelRow, ...]
    contexts: tuple[ContextRow, ...]
    left_out: int = 0


def analyse_levers(reports: Sequence[TraceReport], config: BudgetConfig | None = None) -> LeverAnalysis:
    """Estimate every lever in every request, and aggregate them.

    Each request's findings are held to its profile's ``hints.min_saving_ms`` in
    ``config`` (the default threshold without one), as the processor holds its hints.
    """
    ordered = sorted(reports, key=lambda r: (r.start_time_ns or 0, r.trace_id or 0, r.span_id or 0))
    baseline = RecordedBaseline(call for report in ordered for call in report.calls)
    savings: dict[tuple[HintKind, str], list[float]] = {}
    unestimated: Counter[tuple[HintKind, str]] = Counter()
    targets: dict[tuple[HintKind, str], Counter[str]] = {}
    within: Counter[tuple[HintKind, str]] = Counter()
    repeats: Counter[tuple[HintKind, str]] = Counter()
    tests: dict[tuple[HintKind, str], str] = {}
    left_out: list[Finding] = []
    thresholds: dict[str, float] = {}
    for report in ordered:
        per_request: dict[tuple[HintKind, str], float] = {}
        least = thresholds.get(report.profile)
        if least is None:
            least = thresholds[report.profile] = _threshold(config, report.profile)
        for finding in request_levers(report.calls, report, baseline, min_saving_ms=least, left_out=left_out):
            key: tuple[HintKind, str] = (finding.kind, finding.stage)
            targets.setdefault(key, Counter()).update(_people(finding))
            if finding.saving_ms is None:
                unestimated[key] += 1
                continue
            per_request[key] = finding.saving_ms
            tests.setdefault(key, finding.test)
            if finding.kind == "cache":
                within[key] += finding.repeated_within
                repeats[key] += finding.spans
        for hint in report.hints:
            if hint.kind in SHAPE_KINDS:
                key = (hint.kind, hint.stage)
                per_request[key] = per_request.get(key, 0.0) + hint.potential_savings_ms
        for key, value in per_request.items():
            savings.setdefault(key, []).append(value)
        baseline.remember(report.calls)
    keys = set(savings) | set(unestimated)
    levers = [
        _summary(
            key,
            len(ordered),
            tuple(sorted(savings.get(key, ()))),
            unestimated[key],
            tuple(name for name, _ in targets.get(key, Counter()).most_common()),
            baseline,
            within[key],
            repeats[key],
            tests.get(key, ""),
        )
        for key in keys
    ]
    levers.sort(key=lambda lever: (not lever.savings_ms, -lever.total_ms, lever.kind, lever.stage))
    return LeverAnalysis(
        len(ordered),
        tuple(levers),
        tuple(_model_rows(baseline)),
        tuple(_context_rows(baseline)),
        len(left_out) + sum(report.hints_left_out for report in ordered),
    )


def _threshold(config: BudgetConfig | None, profile: str) -> float:
    if config is None:
        return DEFAULT_MIN_SAVING_MS
    try:
        return config.budgets_by_profile(profile).min_saving_ms
    except KeyError:  # a report of a profile the file no longer has
        return config.default.min_saving_ms


def fit_caption(fit: Fit) -> str:
    """A Theil-Sen fit of milliseconds on tokens, for people: the one wording of the text, tables and page."""
    return (
        f"{format_ms(fit.slope * 1000)} per 1,000 tokens (95% CI {format_ms(fit.slope_low * 1000)} to "
        f"{format_ms(fit.slope_high * 1000)}), R² {fit.r_squared:.2f}, n {fit.n}{fit.sample_note()}"
    )


def _people(finding: Finding) -> list[str]:
    """The names a finding involves, the model to switch to left out."""
    return [name for name in finding.targets if name != finding.instead]


def _summary(
    key: tuple[HintKind, str],
    of_requests: int,
    savings: tuple[float, ...],
    unestimated: int,
    targets: tuple[str, ...],
    baseline: RecordedBaseline,
    within: int,
    repeats: int,
    test: str,
) -> LeverSummary:
    kind, stage = key
    main = targets[0] if targets else None
    stats = baseline.stats(stage, main) if main is not None else None
    named = _names(targets)
    basis, advice = "", ""
    match kind:
        case "streaming":
            if stats is not None and stats.first_token_p50_ms is not None and stats.streamed >= MIN_STREAMED:
                first = format_ms(stats.first_token_p50_ms)
                basis = f"median first token of {stats.streamed} streamed calls of {main}: {first}"
            if unestimated:
                basis += (
                    "; " if basis else ""
                ) + f"no estimate in {unestimated} requests: fewer than {MIN_STREAMED} streamed calls of the model"
            advice = f"stream the responses of {named} (gen_ai.request.stream): the user sees the first token sooner"
        case "cache":
            earlier = repeats - within
            basis = (
                f"{repeats} calls identical to an earlier one ({within} within a request, {earlier} from an "
                "earlier request), if a cache hit cost nothing"
            )
            advice = f"cache the results of {named}: identical calls repeat"
        case "model_choice":
            compared = [(m, s) for m, s in baseline.models(stage) if s.n >= MIN_MODEL_CALLS]
            fastest = min(compared, key=lambda item: (item[1].duration_p50_ms, item[0]))
            if stats is not None:
                basis = (
                    f"median call of {main} {format_ms(stats.duration_p50_ms)} (n {stats.n}) against "
                    f"{fastest[0]} {format_ms(fastest[1].duration_p50_ms)} (n {fastest[1].n}) in {stage}"
                )
            advice = f"try {fastest[0]} instead of {named} in {stage}, where its answers are good enough"
        case "context_size":
            fit = stats.context_fit if stats is not None else None
            if fit is not None and stats is not None and stats.input_p50 is not None:
                what = FITTED[stats.context_basis] if stats.context_basis is not None else "duration on input tokens"
                basis = (
                    f"Theil-Sen fit for {main} of {what}: {fit_caption(fit)}; "
                    f"contexts above the median {stats.input_p50:,.0f} tokens trimmed to it"
                )
                advice = (
                    f"trim the context of {named} calls (fewer or shorter documents, a summarised history): "
                    f"each 1,000 input tokens cost about {format_ms(fit.slope * 1000)}"
                )
        case "output_length":
            if stats is not None and stats.ms_per_output_token is not None and stats.output_p50 is not None:
                source = "median over" if stats.rate_from == "streamed" else "Theil-Sen fit over"
                basis = (
                    f"{format_ms(stats.ms_per_output_token)} per output token of {main} ({source} {stats.rate_calls} "
                    f"calls); outputs above the median {stats.output_p50:,.0f} tokens cut to it"
                )
                advice = (
                    f"ask {named} for shorter output (max_tokens, a terser prompt): each 100 output tokens cost "
                    f"about {format_ms(stats.ms_per_output_token * 100)}"
                )
        case "sequential_calls":
            basis = "back-to-back sibling calls, each run made concurrent: the stage's time before less after"
            advice = f"run independent {stage} spans concurrently (asyncio.gather, a thread pool)"
        case "iterations":
            basis = "the calls past max_calls, in start order"
            advice = f"cut {stage} iterations: better tools or a planning step, or a lower max_calls"
        case _:
            unknown_kind(kind)
    saves = KINDS[kind].saves
    return LeverSummary(kind, stage, of_requests, savings, unestimated, saves, targets, basis, advice, test)


def _names(targets: tuple[str, ...]) -> str:
    """``gpt-4o's``, ``gpt-4o and o1's``, ``a, b and 3 more``, for a sentence."""
    if not targets:
        return "these"
    if len(targets) == 1:
        return targets[0]
    if len(targets) <= 3:
        return ", ".join(targets[:-1]) + " and " + targets[-1]
    return ", ".join(targets[:2]) + f" and {len(targets) - 2} more"


def _model_rows(baseline: RecordedBaseline) -> list[ModelRow]:
    rows: list[ModelRow] = []
    for stage in baseline.stages():
        for model, stats in baseline.models(stage):
            calls = baseline.calls(stage, model)
            providers = Counter(c.provider for c in calls if c.provider is not None)
            responses = Counter(c.response_model for c in calls if c.response_model is not None)
            rows.append(
                ModelRow(
                    stage,
                    model,
                    tuple(name for name, _ in providers.most_common()),
                    tuple(name for name, _ in responses.most_common()),
                    tuple(sorted(c.duration_ns / 1e6 for c in calls)),
                    tuple(sorted(c.first_token_ns / 1e6 for c in calls if c.first_token_ns is not None)),
                    stats.ms_per_output_token,
                    stats.rate_calls,
                    stats.rate_from,
                )
            )
    return rows


def _context_rows(baseline: RecordedBaseline) -> list[ContextRow]:
    rows: list[ContextRow] = []
    for stage in baseline.stages():
        for model, stats in baseline.models(stage):
            sized = [c for c in baseline.calls(stage, model) if c.input_tokens is not None]
            if not sized:
                continue
            by_input = [(float(c.input_tokens or 0), c.duration_ns / 1e6) for c in sized]
            first = [
                (float(c.input_tokens or 0), c.first_token_ns / 1e6) for c in sized if c.first_token_ns is not None
            ]
            duration = stats.duration_fit if stats.duration_fit is not None else fit_or_reason(by_input)
            ttft: Fit | str = "no streamed calls"
            if stats.first_token_fit is not None:
                ttft = stats.first_token_fit
            elif first:
                ttft = fit_or_reason(first)
            step = max(1, -(-len(sized) // _SCATTER_POINTS))
            points = tuple(
                (
                    float(c.input_tokens or 0),
                    c.duration_ns / 1e6,
                    c.first_token_ns / 1e6 if c.first_token_ns is not None else None,
                )
                for c in sized[::step]
            )
            rows.append(
                ContextRow(
                    stage,
                    model,
                    len(sized),
                    stats.input_p50,
                    duration if isinstance(duration, Fit) else None,
                    "" if isinstance(duration, Fit) else duration,
                    ttft if isinstance(ttft, Fit) else None,
                    "" if isinstance(ttft, Fit) else ttft,
                    points,
                )
            )
    return rows
