"""Percentiles, and per-stage summaries over many requests' :class:`TraceReport` values.

The CLI's ``check``, ``report`` and ``suggest`` and the demo's summary all aggregate
here, so a p95 means the same thing everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from latency_budget._config.model import BudgetConfig, Severity
from latency_budget._core.report import TOTAL, TraceReport, format_ms

__all__ = [
    "HintSummary",
    "Optimisation",
    "ProfileSummary",
    "RunSummary",
    "StageSummary",
    "optimisation",
    "percentile",
    "summarize",
]


def percentile(values: Sequence[float], q: float, *, presorted: bool = False) -> float:
    """The ``q``-th percentile (0 to 100) of ``values``, by linear interpolation.

    This is the "linear" method (Hyndman and Fan's type 7), numpy's and Excel's
    ``PERCENTILE.INC`` default: the value at rank ``(n - 1) * q / 100`` of the sorted
    values, interpolating between the two nearest ranks. p0 is the minimum, p100 the
    maximum, and a single value is every percentile. Raises ``ValueError`` for no
    values or a ``q`` outside 0 to 100.
    """
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100 or math.isnan(q):
        raise ValueError(f"percentile must be between 0 and 100, got {q}")
    ordered = values if presorted else sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    fraction = rank - low
    return ordered[low] + (ordered[high] - ordered[low]) * fraction


@dataclass(frozen=True, slots=True)
class StageSummary:
    """One stage (or ``total``) of one profile, over the requests judged by that profile.

    ``actual_ms`` holds, sorted, the stage's wall-clock time in each request where it ran;
    ``count`` is that number of requests. ``violations`` counts those requests in which
    the stage broke any of its budgets (duration, first token or calls), so
    ``violation_rate`` is a share of the requests where the stage ran. For ``total``,
    every request counts and a violation is a broken total or first-token budget.
    """

    profile: str
    stage: str
    budget_ms: float | None
    severity: Severity
    requests: int
    actual_ms: tuple[float, ...]
    violations: int
    first_token_ms: tuple[float, ...] = ()
    first_token_budget_ms: float | None = None
    calls: tuple[int, ...] = ()
    max_calls: int | None = None

    @property
    def count(self) -> int:
        """Requests in which the stage ran."""
        return len(self.actual_ms)

    @property
    def violation_rate(self) -> float:
        """Share of the requests where the stage ran that broke one of its budgets (0 when it never ran)."""
        return self.violations / self.count if self.actual_ms else 0.0

    def p(self, q: float) -> float | None:
        """The ``q``-th percentile of ``actual_ms`` (``None`` when the stage never ran)."""
        return percentile(self.actual_ms, q, presorted=True) if self.actual_ms else None

    def first_token_p(self, q: float) -> float | None:
        """The ``q``-th percentile of the recorded times to first token, when any."""
        return percentile(self.first_token_ms, q, presorted=True) if self.first_token_ms else None


@dataclass(frozen=True, slots=True)
class ProfileSummary:
    """The stages and the total of one profile, over the requests it judged."""

    profile: str
    requests: int
    violated: int
    stages: tuple[StageSummary, ...]
    total: StageSummary


@dataclass(frozen=True, slots=True)
class RunSummary:
    """Every profile that judged at least one request, in config order, plus end-to-end figures."""

    requests: int
    violated: int
    profiles: tuple[ProfileSummary, ...]
    end_to_end: StageSummary

    @property
    def stages(self) -> tuple[StageSummary, ...]:
        """All stage summaries of all profiles (no totals)."""
        return tuple(stage for profile in self.profiles for stage in profile.stages)

    @property
    def stage_span_count(self) -> int:
        """Requests x stages in which a stage ran: zero means no span matched any stage."""
        return sum(stage.count for stage in self.stages)

    def most_often_over(self) -> tuple[str, int] | None:
        """The stage name with the most over-budget requests, summed over profiles, and that number.

        Ties go to the stage listed first. ``None`` when no stage broke a budget.
        """
        totals: dict[str, int] = {}
        for stage in self.stages:
            totals[stage.stage] = totals.get(stage.stage, 0) + stage.violations
        best = max(totals.items(), key=lambda item: item[1], default=None)
        return best if best is not None and best[1] > 0 else None


def summarize(config: BudgetConfig, reports: Iterable[TraceReport]) -> RunSummary:
    """Aggregate ``reports`` (as produced under ``config``) per profile and stage."""
    by_profile: dict[str, list[TraceReport]] = {}
    all_reports: list[TraceReport] = []
    for report in reports:
        by_profile.setdefault(report.profile, []).append(report)
        all_reports.append(report)
    order = {name: n for n, name in enumerate(["default", *(p.name for p in config.profiles)])}
    profiles = tuple(
        _profile_summary(_total_severity(config, name), group)
        for name, group in sorted(by_profile.items(), key=lambda item: order.get(item[0], len(order)))
    )
    end_to_end = StageSummary(
        profile="*",
        stage=TOTAL,
        budget_ms=None,
        severity="error",
        requests=len(all_reports),
        actual_ms=tuple(sorted(r.total_actual_ms for r in all_reports)),
        violations=sum(1 for r in all_reports if any(v.stage == TOTAL for v in r.violations)),
        first_token_ms=tuple(sorted(r.first_token_ms for r in all_reports if r.first_token_ms is not None)),
    )
    return RunSummary(
        requests=len(all_reports),
        violated=sum(1 for r in all_reports if r.violated),
        profiles=profiles,
        end_to_end=end_to_end,
    )


def _total_severity(config: BudgetConfig, profile: str) -> Severity:
    try:
        return config.budgets_by_profile(profile).severity
    except KeyError:  # reports made under another budget file
        return "error"


def _profile_summary(total_severity: Severity, reports: list[TraceReport]) -> ProfileSummary:
    """Summarise reports of one profile (non-empty; they share one budget set)."""
    profile = reports[0].profile
    stages: list[StageSummary] = []
    for name in (stage.stage for stage in reports[0].stages):
        actual: list[float] = []
        first_token: list[float] = []
        calls: list[int] = []
        violations = 0
        template = reports[0].stage(name)
        for report in reports:
            stage = report.stage(name)
            if not stage.seen:
                continue
            actual.append(stage.actual_ms)
            calls.append(stage.count)
            if stage.first_token_ms is not None:
                first_token.append(stage.first_token_ms)
            if stage.violations:
                violations += 1
        stages.append(
            StageSummary(
                profile=profile,
                stage=name,
                budget_ms=template.budget_ms,
                severity=template.severity,
                requests=len(reports),
                actual_ms=tuple(sorted(actual)),
                violations=violations,
                first_token_ms=tuple(sorted(first_token)),
                first_token_budget_ms=template.first_token_budget_ms,
                calls=tuple(sorted(calls)),
                max_calls=template.max_calls,
            )
        )
    total = StageSummary(
        profile=profile,
        stage=TOTAL,
        budget_ms=reports[0].total_budget_ms,
        severity=total_severity,
        requests=len(reports),
        actual_ms=tuple(sorted(r.total_actual_ms for r in reports)),
        violations=sum(1 for r in reports if any(v.stage == TOTAL for v in r.violations)),
        first_token_ms=tuple(sorted(r.first_token_ms for r in reports if r.first_token_ms is not None)),
        first_token_budget_ms=reports[0].first_token_budget_ms,
    )
    return ProfileSummary(
        profile=profile,
        requests=len(reports),
        violated=sum(1 for r in reports if r.violated),
        stages=tuple(stages),
        total=total,
    )


@dataclass(frozen=True, slots=True)
class HintSummary:
    """One kind of hint for one stage, over many requests."""

    kind: str
    stage: str
    requests: int  # requests that had the hint
    of_requests: int  # all requests
    savings_ms: tuple[float, ...]  # per request that had it (sum over its hints), sorted

    @property
    def share(self) -> float:
        """The share of requests that had the hint (0 to 1)."""
        return self.requests / self.of_requests if self.of_requests else 0.0

    def sentence(self) -> str:
        """``tool_calls ran sequentially in 38% of requests; parallel execution would save p50 120ms``."""
        p50 = format_ms(percentile(self.savings_ms, 50, presorted=True))
        if self.kind == "sequential_calls":
            return (
                f"{self.stage} ran sequentially in {100 * self.share:.0f}% of requests; "
                f"parallel execution would save p50 {p50}"
            )
        return f"{self.stage} exceeded max_calls in {100 * self.share:.0f}% of requests; the extra calls took p50 {p50}"


@dataclass(frozen=True, slots=True)
class Optimisation:
    """Where the time went and where it could be won, over many requests."""

    critical_share: tuple[tuple[str, float], ...]  # stage (or "unattributed") -> share of end-to-end time
    hints: tuple[HintSummary, ...]  # largest total savings first

    @property
    def largest_hint(self) -> HintSummary | None:
        """The hint with the largest total savings, if any request had one."""
        return self.hints[0] if self.hints else None


def optimisation(reports: Sequence[TraceReport]) -> Optimisation:
    """Critical-path shares per stage and hints, aggregated over ``reports``.

    A stage's share is its critical-path time summed over requests, divided by the
    requests' summed end-to-end time; with ``unattributed`` the shares add up to 1.
    """
    total = sum(r.total_actual_ms for r in reports)
    critical: dict[str, float] = {}
    unattributed = 0.0
    savings: dict[tuple[str, str], list[float]] = {}
    for report in reports:
        for stage in report.stages:
            if stage.critical_ms:
                critical[stage.stage] = critical.get(stage.stage, 0.0) + stage.critical_ms
        unattributed += report.unattributed_ms or 0.0
        per_request: dict[tuple[str, str], float] = {}
        for hint in report.hints:
            key: tuple[str, str] = (hint.kind, hint.stage)
            per_request[key] = per_request.get(key, 0.0) + hint.potential_savings_ms
        for pair, value in per_request.items():
            savings.setdefault(pair, []).append(value)
    shares: list[tuple[str, float]] = []
    if total > 0:
        shares = sorted(((name, ms / total) for name, ms in critical.items()), key=lambda item: -item[1])
        if unattributed > 0:
            shares.append(("unattributed", unattributed / total))
    hints = sorted(
        (
            HintSummary(kind, stage, len(values), len(reports), tuple(sorted(values)))
            for (kind, stage), values in savings.items()
        ),
        key=lambda h: -sum(h.savings_ms),
    )
    return Optimisation(tuple(shares), tuple(hints))
