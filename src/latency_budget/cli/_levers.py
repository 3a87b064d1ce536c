"""Every latency lever over all recorded requests: "Where to win", models by stage, context size.

The estimates rest on the whole recording (a
:class:`~latency_budget._core.levers.RecordedBaseline` of every request's calls), not on
the recent calls the live processor remembers, so a report over many requests is as
well founded as the data allows. Requests are looked at in start order, so the cache
lever counts a call as repeated only when an identical one came before it. Sequential
calls and iterations come from each report's own hints; an iterations saving is claimed
only where the requests of the stage that kept within ``max_calls`` succeeded as often
as those that made more calls (:func:`~latency_budget._core.levers.weigh.weigh_outcomes`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from latency_budget._config import BudgetConfig
from latency_budget._config.model import DEFAULT_MIN_SAVING_MS, DEFAULT_QUALITY, QualityPolicy
from latency_budget._core.estimators import Fit, fit_or_reason
from latency_budget._core.kinds import KINDS, SHAPE_KINDS, HintKind, Saves
from latency_budget._core.levers import AdviceFor, Finding, RecordedBaseline, fit_caption, request_levers
from latency_budget._core.levers.weigh import Outcome, outcome_of, quality_caveat, weigh_outcomes
from latency_budget._core.quality import QualityStats
from latency_budget._core.report import TraceReport
from latency_budget.cli._stats import percentile

__all__ = ["ContextRow", "LeverAnalysis", "LeverSummary", "ModelRow", "analyse_levers", "fit_caption"]

_SCATTER_POINTS = 300  # points kept per context-size plot


@dataclass(frozen=True, slots=True)
class LeverSummary:
    """One lever in one stage, over all requests.

    ``savings_ms`` holds, sorted, its estimated saving in each request where it applies
    with an estimate; ``unestimated`` counts the requests where it applies without one.
    ``saves`` says whose time it saves: the whole request's, or its first token's.
    ``held_back`` counts the requests where it would have saved time but a protected
    stage's check (``held_back_by``) followed: no saving is claimed there.
    ``not_recommended`` counts the requests where the quality evidence spoke against the
    change (a faster model with worse answers, fewer loops with less success); ``quality``
    says, for people, that trade, or that no quality data existed to weigh the saving
    against (empty: weighed, or a lever that keeps the answers).
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
    # Requests where a protected stage's check held the saving back (streaming ahead of it), and those stages.
    held_back: int = 0
    held_back_by: tuple[str, ...] = ()
    not_recommended: int = 0
    quality: str = ""

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
    """One model in one stage: its calls' durations and first tokens (each sorted, ms), and its answers' quality."""

    stage: str
    model: str
    providers: tuple[str, ...]
    response_models: tuple[str, ...]
    duration_ms: tuple[float, ...]
    first_token_ms: tuple[float, ...]
    ms_per_output_token: float | None
    rate_calls: int
    rate_from: str | None
    quality: QualityStats | None = None  # what the telemetry says of its answers (None: nothing)

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
    policy: QualityPolicy = DEFAULT_QUALITY  # the budget file's quality section (which evaluations count)


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
    held_back: Counter[tuple[HintKind, str]] = Counter()
    assumed: Counter[tuple[HintKind, str]] = Counter()  # sequential calls assumed independent
    cached: Counter[tuple[HintKind, str]] = Counter()  # context trimmed after a cached prefix only
    held_back_by: dict[tuple[HintKind, str], dict[str, None]] = {}
    unweighed: Counter[tuple[HintKind, str]] = Counter()
    not_recommended: Counter[tuple[HintKind, str]] = Counter()
    trades: dict[tuple[HintKind, str], str] = {}
    # Per stage with max_calls: the outcomes of requests within it and of those past it.
    loops: dict[str, tuple[list[Outcome], list[Outcome]]] = {}
    left_out: list[Finding] = []
    thresholds: dict[str, tuple[float, frozenset[str] | None, QualityPolicy]] = {}
    for report in ordered:
        per_request: dict[tuple[HintKind, str], float] = {}
        found = thresholds.get(report.profile)
        if found is None:
            found = thresholds[report.profile] = _threshold(config, report.profile)
        least, protected, policy = found
        _add_loops(loops, report)
        for finding in request_levers(
            report.calls, report, baseline, min_saving_ms=least, left_out=left_out, protected=protected, quality=policy
        ):
            key: tuple[HintKind, str] = (finding.kind, finding.stage)
            targets.setdefault(key, Counter()).update(_people(finding))
            if finding.trade is not None:
                not_recommended[key] += 1
                trades.setdefault(key, finding.trade)
                continue
            unweighed[key] += finding.unweighed
            if finding.held_back_by is not None:
                held_back[key] += 1
                held_back_by.setdefault(key, {})[finding.held_back_by] = None
                continue
            if finding.saving_ms is None:
                unestimated[key] += 1
                continue
            per_request[key] = finding.saving_ms
            tests.setdefault(key, finding.test)
            if finding.naive_ms is not None:
                cached[key] += 1
            if finding.kind == "cache":
                within[key] += finding.repeated_within
                repeats[key] += finding.spans
        for hint in report.hints:
            if hint.kind in SHAPE_KINDS:
                key = (hint.kind, hint.stage)
                per_request[key] = per_request.get(key, 0.0) + hint.potential_savings_ms
                if hint.checked is False:
                    assumed[key] += 1
        for key, value in per_request.items():
            savings.setdefault(key, []).append(value)
        baseline.remember(report.calls)
    policy = config.default.quality if config is not None else DEFAULT_QUALITY
    for key in [key for key in savings if key[0] == "iterations"]:
        fewer, more = loops.get(key[1], ([], []))
        weighed = weigh_outcomes(fewer, more, policy)
        if weighed.known and not weighed.passed:  # fewer loops succeeded less: no saving claimed
            not_recommended[key] = len(savings.pop(key))
            trades[key] = f"fewer loops: {weighed.words(failed_only=True)}: no saving claimed"
        elif not weighed.known or not any(outcome.evidence for outcome in (*fewer, *more)):
            unweighed[key] = len(savings[key])  # errors alone, or nothing to compare: the caveat
    keys = set(savings) | set(unestimated) | set(held_back) | set(not_recommended)
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
            held_back[key],
            tuple(held_back_by.get(key, ())),
            assumed[key],
            cached[key],
            unweighed[key],
            not_recommended[key],
            trades.get(key, ""),
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
        policy,
    )


def _threshold(config: BudgetConfig | None, profile: str) -> tuple[float, frozenset[str] | None, QualityPolicy]:
    """A profile's ``hints.min_saving_ms``, protected stages (``None``: those of each report's spans) and quality."""
    if config is None:
        return DEFAULT_MIN_SAVING_MS, None, DEFAULT_QUALITY
    try:
        budgets = config.budgets_by_profile(profile)
    except KeyError:  # a report of a profile the file no longer has
        budgets = config.default
    return budgets.min_saving_ms, budgets.protected_stages, budgets.quality


def _add_loops(loops: dict[str, tuple[list[Outcome], list[Outcome]]], report: TraceReport) -> None:
    """The request's outcome, with the requests within each stage's ``max_calls`` or past it."""
    limited = [stage for stage in report.stages if stage.max_calls is not None and stage.count > 0]
    if not limited:
        return
    outcome = outcome_of(call.quality for call in report.calls)
    for stage in limited:
        within, over = loops.setdefault(stage.stage, ([], []))
        (over if stage.count > (stage.max_calls or 0) else within).append(outcome)


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
    held_back: int = 0,
    held_back_by: tuple[str, ...] = (),
    assumed: int = 0,
    cached: int = 0,
    unweighed: int = 0,
    not_recommended: int = 0,
    trade: str = "",
) -> LeverSummary:
    kind, stage = key
    main = targets[0] if targets else None
    lever = KINDS[kind]
    given = AdviceFor(
        stage,
        main,
        baseline.stats(stage, main) if main is not None else None,
        _names(targets),
        baseline,
        estimated=len(savings),
        unestimated=unestimated,
        held_back=held_back,
        held_back_by=held_back_by,
        repeats=repeats,
        within=within,
        assumed=assumed,
        cached=cached,
        unweighed=unweighed,
        not_recommended=not_recommended,
    )
    basis, advice = lever.advise(given)
    quality = trade
    if unweighed:
        caveat = quality_caveat(unweighed, len(savings))
        quality = f"{quality}; {caveat}" if quality else caveat
    return LeverSummary(
        kind,
        stage,
        of_requests,
        savings,
        unestimated,
        lever.saves,
        targets,
        basis,
        advice,
        test,
        held_back,
        held_back_by,
        not_recommended,
        quality,
    )


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
                    baseline.quality(stage, model),
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
