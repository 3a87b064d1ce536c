"""Two recordings compared, before and after a change: per profile and stage, did the time come back?

:func:`compare` takes the judged requests of each side (:class:`TraceReport` values, as
``report`` keeps them) and builds one :class:`Comparison`: per profile and stage the
chosen percentile's change with a bootstrap interval (:mod:`.bootstrap`), per model the
calls' durations, per profile and end to end the request's time, each with a verdict:
faster, slower, or no change the data can show. The intervals hold *together* at the
chosen level (Bonferroni over every change compared), so two samples of the same traffic
show no change in all but about 1 comparison in 20.

Fair comparison: rows are within a profile (and, for model calls, within a model). When
the mix of profiles or of models differs between the sides (a chi-square test), the end
to end change is also given reweighted to the before side's mix, and that one decides its
verdict. Each stage's share of the critical path is compared too (the mean critical-path
time per request, with Welch's interval), so a stage that got faster off the critical path
is reported as not having moved the end to end time.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from latency_budget._core.bootstrap import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Estimate,
    mean_difference,
    mix_test,
    percentile_difference,
    simultaneous_alpha,
    sorted_percentile,
    weighted_percentile_difference,
)
from latency_budget._core.quality import CallQuality
from latency_budget._core.report import TOTAL, TraceReport

__all__ = [
    "ALL_PROFILES",
    "MIN_SAMPLE",
    "VERDICTS",
    "Change",
    "Comparison",
    "Mix",
    "QualityChange",
    "Row",
    "Side",
    "Verdict",
    "compare",
    "wait_for_text",
]

ALL_PROFILES = "*"  # the end-to-end row's profile: every request
MIN_SAMPLE = 10  # values a side needs for a change to be computed
MIX_ALPHA = 0.05  # a mix test below this says the mixes differ
MIN_COVERED = 0.5  # strata of profile and models must hold this share of each side, else profiles alone

Verdict = Literal["faster", "slower", "no change"]
# Each verdict as people read it: one table, which every output reads.
VERDICTS: Mapping[Verdict, str] = {
    "faster": "faster",
    "slower": "slower",
    "no change": "no change the data can show",
}


@dataclass(frozen=True, slots=True)
class Change:
    """A change (after minus before, ms) with its interval, and the before figure it is a change of."""

    value: float
    low: float
    high: float
    before: float

    @property
    def verdict(self) -> Verdict:
        """``faster`` when the whole interval is below zero, ``slower`` when above, else ``no change``."""
        if self.high < 0:
            return "faster"
        if self.low > 0:
            return "slower"
        return "no change"

    @property
    def percent(self) -> float | None:
        """The change as a percentage of the before figure (``None`` when that is zero)."""
        return 100 * self.value / self.before if self.before else None


@dataclass(frozen=True, slots=True)
class Side:
    """One side's values of a row, sorted (ms)."""

    values: tuple[float, ...]

    @property
    def n(self) -> int:
        """How many values."""
        return len(self.values)

    def p(self, q: float) -> float | None:
        """The ``q``-th percentile (``None`` with no values)."""
        return sorted_percentile(self.values, q) if self.values else None

    @property
    def mean(self) -> float | None:
        """The mean (``None`` with no values)."""
        return sum(self.values) / len(self.values) if self.values else None


QUALITY_RATES: Mapping[str, str] = {  # the rates a request's calls give, each lower-is-better, for people
    "errors": "requests with a call in error",
    "blocked": "guarded requests with an answer blocked",
    "cut or refused": "requests with an answer cut at the length limit or refused by a filter",
}


@dataclass(frozen=True, slots=True)
class QualityChange:
    """One quality measure of a row before and after (issue 46's reader fills what it rests on).

    ``metric`` is a rate of :data:`QUALITY_RATES` (the share of requests, lower is better) or
    ``score: NAME``, an evaluation's mean score (each request's mean over its calls; higher
    is taken as better). ``change`` is after minus before, with Welch's interval.
    """

    metric: str
    before: float
    after: float
    n_before: int
    n_after: int
    change: Change

    @property
    def higher_is_better(self) -> bool:
        """Scores: higher is better; rates: lower is."""
        return self.metric.startswith("score: ")

    @property
    def worse(self) -> bool:
        """Whether the interval says the answers got worse."""
        return self.change.high < 0 if self.higher_is_better else self.change.low > 0

    @property
    def better(self) -> bool:
        """Whether the interval says the answers got better."""
        return self.change.low > 0 if self.higher_is_better else self.change.high < 0


@dataclass(frozen=True, slots=True)
class Row:
    """One profile's stage (or ``total``), or one model's calls in a stage, before and after.

    ``before`` and ``after`` are the stage's time in each request where it ran (a model
    row: in each request that called the model in the stage, the mean duration of those
    calls); ``change`` is the percentile's change, ``None`` when a side has fewer than
    :data:`MIN_SAMPLE` values. ``calls_*`` are the calls per request where it
    ran; ``critical_*`` the stage's share of the requests' critical path and
    ``critical_change`` the change of its mean critical-path time per request. A total's
    ``first_token_*`` is the user's wait for text (:func:`wait_for_text`), in every request.
    ``quality`` holds what the calls' quality evidence says, where both sides have it
    (:class:`QualityChange`): a faster row with :attr:`worse_quality` is no plain win.
    """

    profile: str
    stage: str
    model: str | None
    before: Side
    after: Side
    change: Change | None
    first_token_before: Side
    first_token_after: Side
    first_token_change: Change | None
    calls_before: float | None = None
    calls_after: float | None = None
    critical_before: float | None = None
    critical_after: float | None = None
    critical_change: Change | None = None
    quality: tuple[QualityChange, ...] = ()

    @property
    def worse_quality(self) -> tuple[QualityChange, ...]:
        """The quality measures that demonstrably got worse."""
        return tuple(q for q in self.quality if q.worse)

    @property
    def verdict(self) -> Verdict | None:
        """The duration's verdict (``None``: too few values to compare)."""
        return self.change.verdict if self.change is not None else None

    @property
    def reached_end_to_end(self) -> bool | None:
        """For a stage that got faster or slower: whether its critical-path time moved the same way.

        ``False`` is a change that did not reach the end to end time (the stage is off the
        critical path, or something else took its place there). ``None`` for a total, a
        model row, or a stage whose duration did not demonstrably change.
        """
        verdict = self.verdict
        if self.stage == TOTAL or self.model is not None or verdict is None or verdict == "no change":
            return None
        return self.critical_change is not None and self.critical_change.verdict == verdict


@dataclass(frozen=True, slots=True)
class Mix:
    """How many requests of each profile, and of each set of models called, each side has.

    ``shifted`` when either mix differs by a chi-square test at :data:`MIX_ALPHA` (split
    between the two tests). ``strata`` says what the end to end change was reweighted by;
    ``covered`` is the share of (before, after) requests in strata both sides have.
    """

    profiles_before: Mapping[str, int]
    profiles_after: Mapping[str, int]
    profiles_p: float
    models_before: Mapping[str, int]
    models_after: Mapping[str, int]
    models_p: float
    strata: Literal["profile and models", "profile"]
    covered: tuple[float, float]

    @property
    def profiles_shifted(self) -> bool:
        """Whether the mix of profiles differs."""
        return self.profiles_p < MIX_ALPHA / 2

    @property
    def models_shifted(self) -> bool:
        """Whether the mix of sets of models called differs."""
        return self.models_p < MIX_ALPHA / 2

    @property
    def shifted(self) -> bool:
        """Whether the mix of profiles or of models differs."""
        return self.profiles_shifted or self.models_shifted


@dataclass(frozen=True, slots=True)
class Comparison:
    """Before against after: every row, the end to end, the mix, and how the intervals were made."""

    percentile: float
    level: float
    resamples: int
    seed: int
    tests: int  # changes compared: the intervals hold together over all of them
    requests_before: int
    requests_after: int
    rows: tuple[Row, ...]  # per profile: its stages, its stages' models, its total (with several profiles)
    end_to_end: Row
    reweighted: Change | None  # the end to end change reweighted to the before side's mix, when it shifted
    mix: Mix

    @property
    def end_to_end_change(self) -> Change | None:
        """The end to end change that decides: reweighted when the mix shifted, else as measured."""
        if self.mix.shifted and self.reweighted is not None:
            return self.reweighted
        return self.end_to_end.change

    @property
    def end_to_end_verdict(self) -> Verdict | None:
        """The end to end verdict (``None``: too few requests to compare)."""
        change = self.end_to_end_change
        return change.verdict if change is not None else None

    @property
    def stage_rows(self) -> tuple[Row, ...]:
        """The rows of stages (no totals, no model rows)."""
        return tuple(r for r in self.rows if r.stage != TOTAL and r.model is None)

    def moved(self) -> list[Row]:
        """Stage rows whose critical-path time demonstrably changed, largest change first."""
        found = [
            r for r in self.stage_rows if r.critical_change is not None and r.critical_change.verdict != "no change"
        ]
        return sorted(found, key=lambda r: -abs(r.critical_change.value if r.critical_change else 0.0))

    def not_reached(self) -> list[Row]:
        """Stage rows that got faster or slower without their critical-path time moving with them."""
        return [r for r in self.stage_rows if r.reached_end_to_end is False]

    def row(self, stage: str, profile: str = "default", model: str | None = None) -> Row:
        """The row of ``stage`` in ``profile`` (of ``model``'s calls, when given); ``KeyError`` when none."""
        if stage == TOTAL and profile == ALL_PROFILES:
            return self.end_to_end
        for row in self.rows:
            if (row.profile, row.stage, row.model) == (profile, stage, model):
                return row
        raise KeyError((profile, stage, model))


Key = tuple[str, str, "str | None"]  # (profile, stage or total, model or None: the stage's own)


@dataclass(slots=True)
class _Gathered:
    """One side's values: per row key, one value per request (see :class:`Row`), and the side's mix."""

    requests: int = 0
    actual: dict[Key, list[float]] = field(default_factory=dict)
    first_token: dict[Key, list[float]] = field(default_factory=dict)
    calls: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    critical: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # every request of the profile
    totals: dict[str, float] = field(default_factory=dict)  # per profile, summed end to end time
    profiles: dict[str, int] = field(default_factory=dict)
    models: dict[str, int] = field(default_factory=dict)  # requests per set of models called
    strata: dict[str, list[float]] = field(default_factory=dict)  # profile/models -> end to end times
    by_profile: dict[str, list[float]] = field(default_factory=dict)
    quality: dict[Key, dict[str, list[float]]] = field(default_factory=dict)  # key -> metric -> per request

    def add(self, report: TraceReport) -> None:
        """Take one judged request's values."""
        self.requests += 1
        profile = report.profile
        self.profiles[profile] = self.profiles.get(profile, 0) + 1
        self.totals[profile] = self.totals.get(profile, 0.0) + report.total_actual_ms
        self.actual.setdefault((profile, TOTAL, None), []).append(report.total_actual_ms)
        self.first_token.setdefault((profile, TOTAL, None), []).append(wait_for_text(report))
        for stage in report.stages:
            key = (profile, stage.stage)
            self.critical.setdefault(key, []).append(stage.critical_ms or 0.0)
            if not stage.seen:
                continue
            self.actual.setdefault((profile, stage.stage, None), []).append(stage.actual_ms)
            self.calls.setdefault(key, []).append(stage.count)
            if stage.first_token_ms is not None:
                self.first_token.setdefault((profile, stage.stage, None), []).append(stage.first_token_ms)
        # A model's calls in one request are alike (one context, one answer's length): its row takes
        # one value per request, the mean of those calls, so that the bootstrap resamples independent values.
        durations: dict[Key, list[float]] = {}
        first_tokens: dict[Key, list[float]] = {}
        for call in report.calls:
            if call.model is None:
                continue
            model_key: Key = (profile, call.stage, call.model)
            durations.setdefault(model_key, []).append(call.duration_ns / 1e6)
            if call.first_token_ns is not None:
                first_tokens.setdefault(model_key, []).append(call.first_token_ns / 1e6)
        for found_key, values in durations.items():
            self.actual.setdefault(found_key, []).append(sum(values) / len(values))
        for found_key, values in first_tokens.items():
            self.first_token.setdefault(found_key, []).append(sum(values) / len(values))
        _gather_quality(report, self.quality)
        model_set = "+".join(sorted({model for _, _, model in durations if model is not None})) or "(no model)"
        self.models[model_set] = self.models.get(model_set, 0) + 1
        self.strata.setdefault(f"{profile}/{model_set}", []).append(report.total_actual_ms)
        self.by_profile.setdefault(profile, []).append(report.total_actual_ms)


def _gather(reports: Iterable[TraceReport]) -> _Gathered:
    side = _Gathered()
    for report in reports:
        side.add(report)
    return side


def _gather_quality(report: TraceReport, into: dict[Key, dict[str, list[float]]]) -> None:
    """One value per metric for each of the request's stages, stage models and total with quality evidence."""
    groups: dict[Key, list[CallQuality]] = {}
    for call in report.calls:
        evidence = call.quality
        if evidence is None:
            continue
        stage_key: Key = (report.profile, call.stage, None)
        groups.setdefault(stage_key, []).append(evidence)
        groups.setdefault((report.profile, TOTAL, None), []).append(evidence)
        if call.model is not None:
            groups.setdefault((report.profile, call.stage, call.model), []).append(evidence)
    for key, found in groups.items():
        metrics = into.setdefault(key, {})
        metrics.setdefault("errors", []).append(float(any(q.error for q in found)))
        metrics.setdefault("cut or refused", []).append(float(any(q.cut or q.refused for q in found)))
        guarded = [q.blocked for q in found if q.blocked is not None]
        if guarded:
            metrics.setdefault("blocked", []).append(float(any(guarded)))
        scores: dict[str, list[float]] = {}
        for q in found:
            for evaluation in q.evaluations:
                if evaluation.score is not None:
                    scores.setdefault(evaluation.name, []).append(evaluation.score)
        for name, values in scores.items():
            metrics.setdefault(f"score: {name}", []).append(sum(values) / len(values))


def wait_for_text(report: TraceReport) -> float:
    """What the user waited for text: the first token, or the whole response when nothing streamed."""
    return report.first_token_ms if report.first_token_ms is not None else report.total_actual_ms


def _sorted(values: Sequence[float] | None) -> tuple[float, ...]:
    return tuple(sorted(values)) if values else ()


def compare(
    before: Iterable[TraceReport],
    after: Iterable[TraceReport],
    *,
    stages: Sequence[str],
    profiles: Sequence[str] = ("default",),
    percentile: float = 50.0,
    level: float = 0.95,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Comparison:
    """Compare the judged requests of two recordings; see the module's docstring.

    ``stages`` and ``profiles`` give the rows' order (the budget file's); profiles not named
    there follow in the order first seen. Each change's bootstrap draws come from a
    generator seeded by ``seed`` and the row, so a row's interval does not depend on the others.
    """
    one, two = _gather(before), _gather(after)
    seen_profiles = [*profiles, *(p for p in {**one.profiles, **two.profiles} if p not in profiles)]
    present = [p for p in seen_profiles if one.profiles.get(p) or two.profiles.get(p)]
    keys: list[Key] = []
    for profile in present:
        for stage in stages:
            if (profile, stage, None) in one.actual or (profile, stage, None) in two.actual:
                keys.append((profile, stage, None))
                stage_models = {m for p, s, m in (*one.actual, *two.actual) if (p, s) == (profile, stage) and m}
                keys.extend((profile, stage, model) for model in sorted(stage_models))
        if len(present) > 1:
            keys.append((profile, TOTAL, None))

    def estimate(kind: str, key: Key, first: Sequence[float], second: Sequence[float]) -> tuple[Estimate, float] | None:
        if len(first) < MIN_SAMPLE or len(second) < MIN_SAMPLE:
            return None
        rng = random.Random(f"{seed}/{kind}/{key[0]}/{key[1]}/{key[2]}")
        found = percentile_difference(first, second, percentile, resamples=resamples, rng=rng)
        return found, sorted_percentile(first, percentile)

    estimates: dict[tuple[str, Key], tuple[Estimate, float] | None] = {}
    sides: dict[tuple[str, Key], tuple[tuple[float, ...], tuple[float, ...]]] = {}
    all_key = (ALL_PROFILES, TOTAL, None)
    one_all = _sorted([v for (_, s, m), vs in one.actual.items() if s == TOTAL and m is None for v in vs])
    two_all = _sorted([v for (_, s, m), vs in two.actual.items() if s == TOTAL and m is None for v in vs])
    one_all_ft = _sorted([v for (_, s, m), vs in one.first_token.items() if s == TOTAL and m is None for v in vs])
    two_all_ft = _sorted([v for (_, s, m), vs in two.first_token.items() if s == TOTAL and m is None for v in vs])
    for key in [*keys, all_key]:
        if key == all_key:
            pairs = {"time": (one_all, two_all), "first_token": (one_all_ft, two_all_ft)}
        else:
            pairs = {
                "time": (_sorted(one.actual.get(key)), _sorted(two.actual.get(key))),
                "first_token": (_sorted(one.first_token.get(key)), _sorted(two.first_token.get(key))),
            }
        for kind, (first, second) in pairs.items():
            sides[kind, key] = (first, second)
            estimates[kind, key] = estimate(kind, key, first, second)

    mix = _mix(one, two)
    reweighted_estimate: tuple[Estimate, float] | None = None
    if mix.shifted and len(one_all) >= MIN_SAMPLE and len(two_all) >= MIN_SAMPLE:
        strata_one, strata_two = _strata(one, two, mix)
        rng = random.Random(f"{seed}/reweighted")
        found = weighted_percentile_difference(strata_one, strata_two, percentile, resamples=resamples, rng=rng)
        reweighted_estimate = found, sorted_percentile(one_all, percentile)

    critical: dict[tuple[str, str], Estimate] = {}
    for profile, stage, model in keys:
        if model is not None or stage == TOTAL:
            continue
        spent_one = one.critical.get((profile, stage), [])
        spent_two = two.critical.get((profile, stage), [])
        if len(spent_one) >= 2 and len(spent_two) >= 2:
            critical[profile, stage] = mean_difference(spent_one, spent_two)

    qualities: dict[Key, list[tuple[str, Estimate, Sequence[float], Sequence[float]]]] = {}
    for key in [*keys, all_key]:
        for metric, rated_one, rated_two in _quality_pairs(one, two, key):
            if len(rated_one) >= MIN_SAMPLE and len(rated_two) >= MIN_SAMPLE:
                found_mean = mean_difference(rated_one, rated_two)
                qualities.setdefault(key, []).append((metric, found_mean, rated_one, rated_two))
    quality_tests = sum(len(found) for found in qualities.values())

    tests = sum(found is not None for found in estimates.values()) + (reweighted_estimate is not None)
    alpha = simultaneous_alpha(tests + len(critical) + quality_tests, level)

    def change(found: tuple[Estimate, float] | None) -> Change | None:
        if found is None:
            return None
        low, high = found[0].interval(alpha)
        return Change(found[0].value, low, high, found[1])

    def row(key: Key) -> Row:
        profile, stage, model = key
        before_values, after_values = sides["time", key]
        before_ft, after_ft = sides["first_token", key]
        extra: dict[str, object] = {}
        if model is None and stage != TOTAL and key != all_key:
            calls_one = one.calls.get((profile, stage))
            calls_two = two.calls.get((profile, stage))
            extra["calls_before"] = sum(calls_one) / len(calls_one) if calls_one else None
            extra["calls_after"] = sum(calls_two) / len(calls_two) if calls_two else None
            extra["critical_before"] = _share(one, profile, stage)
            extra["critical_after"] = _share(two, profile, stage)
            found = critical.get((profile, stage))
            if found is not None:
                first = one.critical.get((profile, stage), [])
                low, high = found.interval(alpha)
                extra["critical_change"] = Change(found.value, low, high, sum(first) / len(first))
        changes = []
        for metric, found_quality, rated_one, rated_two in qualities.get(key, []):
            low, high = found_quality.interval(alpha)
            mean_one, mean_two = sum(rated_one) / len(rated_one), sum(rated_two) / len(rated_two)
            change_q = Change(found_quality.value, low, high, mean_one)
            changes.append(QualityChange(metric, mean_one, mean_two, len(rated_one), len(rated_two), change_q))
        extra["quality"] = tuple(changes)
        return Row(
            profile,
            stage,
            model,
            Side(before_values),
            Side(after_values),
            change(estimates["time", key]),
            Side(before_ft),
            Side(after_ft),
            change(estimates["first_token", key]),
            **extra,  # type: ignore[arg-type]
        )

    return Comparison(
        percentile=percentile,
        level=level,
        resamples=resamples,
        seed=seed,
        tests=tests + len(critical) + quality_tests,
        requests_before=one.requests,
        requests_after=two.requests,
        rows=tuple(row(key) for key in keys),
        end_to_end=row(all_key),
        reweighted=change(reweighted_estimate),
        mix=mix,
    )


def _quality_pairs(one: _Gathered, two: _Gathered, key: Key) -> list[tuple[str, list[float], list[float]]]:
    """Each quality metric of ``key`` on both sides (the end to end's: every profile's total)."""

    def values(side: _Gathered) -> dict[str, list[float]]:
        found = side.quality
        if key[0] != ALL_PROFILES:
            return found.get(key, {})
        merged: dict[str, list[float]] = {}
        for (_, stage, model), metrics in found.items():
            if stage == TOTAL and model is None:
                for metric, listed in metrics.items():
                    merged.setdefault(metric, []).extend(listed)
        return merged

    first, second = values(one), values(two)
    return [(metric, first[metric], second[metric]) for metric in sorted(set(first) & set(second))]


def _share(side: _Gathered, profile: str, stage: str) -> float | None:
    """The stage's critical-path time over the profile's end to end time, summed over its requests."""
    total = side.totals.get(profile)
    values = side.critical.get((profile, stage))
    if not total or values is None:
        return None
    return sum(values) / total


def _mix(one: _Gathered, two: _Gathered) -> Mix:
    profiles_one, profiles_two = one.profiles, two.profiles
    models_one, models_two = one.models, two.models
    strata_one, strata_two = one.strata, two.strata
    common = set(strata_one) & set(strata_two)
    covered = (
        sum(len(strata_one[s]) for s in common) / max(1, one.requests),
        sum(len(strata_two[s]) for s in common) / max(1, two.requests),
    )
    by = "profile and models" if min(covered) >= MIN_COVERED else "profile"
    if by == "profile":
        shared = set(profiles_one) & set(profiles_two)
        covered = (
            sum(profiles_one[p] for p in shared) / max(1, one.requests),
            sum(profiles_two[p] for p in shared) / max(1, two.requests),
        )
    return Mix(
        dict(profiles_one),
        dict(profiles_two),
        mix_test(profiles_one, profiles_two),
        dict(models_one),
        dict(models_two),
        mix_test(models_one, models_two),
        by,  # type: ignore[arg-type]
        covered,
    )


def _strata(one: _Gathered, two: _Gathered, mix: Mix) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    source_one = one.strata if mix.strata == "profile and models" else one.by_profile
    source_two = two.strata if mix.strata == "profile and models" else two.by_profile
    return (
        {name: sorted(values) for name, values in source_one.items()},
        {name: sorted(values) for name, values in source_two.items()},
    )
