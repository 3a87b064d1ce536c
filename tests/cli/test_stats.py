"""Percentiles and per-stage aggregation, against simple oracles."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from latency_budget._config import load_budgets
from latency_budget._core.accounting import StageMeasurement, evaluate
from latency_budget._core.report import TraceReport
from latency_budget.cli._stats import percentile, summarize

finite = st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(st.lists(finite, min_size=2, max_size=60))
def test_percentile_matches_statistics_inclusive_quantiles(values: list[float]) -> None:
    """p1..p99 equal the standard library's 'inclusive' quantiles (linear interpolation, numpy's default)."""
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    for q, expected in enumerate(cuts, start=1):
        assert percentile(values, q) == pytest.approx(expected, rel=1e-9, abs=1e-9)


@given(st.lists(finite, min_size=1, max_size=40), st.floats(min_value=0, max_value=100))
def test_percentile_is_between_the_neighbouring_ranks(values: list[float], q: float) -> None:
    """Any percentile lies between the values at the floor and ceiling of rank (n - 1) * q / 100."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = ordered[math.floor(rank)], ordered[math.ceil(rank)]
    assert low - 1e-9 <= percentile(values, q) <= high + 1e-9


def test_percentile_small_cases() -> None:
    """Worked examples: median of 1..4 is 2.5, p0 is the minimum, p100 the maximum, one value is every percentile."""
    assert percentile([4, 1, 3, 2], 50) == 2.5
    assert percentile([10, 20, 30, 40, 50], 95) == pytest.approx(48.0)
    assert percentile([7, 3, 9], 0) == 3
    assert percentile([7, 3, 9], 100) == 9
    assert percentile([42.0], 99) == 42.0


@pytest.mark.parametrize(("values", "q"), [([], 50), ([1.0], -1), ([1.0], 100.5), ([1.0], float("nan"))])
def test_percentile_rejects_bad_input(values: list[float], q: float) -> None:
    """No values, or a percentile outside 0..100, is a ValueError rather than a made-up number."""
    with pytest.raises(ValueError, match="percentile"):
        percentile(values, q)


CONFIG = load_budgets(
    text="""
version: 1
total_ms: 1000
first_token_ms: 300
stages:
  retrieval: {budget_ms: 100}
  model_call: {budget_ms: 500, first_token_ms: 200, max_calls: 2}
  tool_calls: {budget_ms: 150, severity: warn}
profiles:
  - name: fast
    when: {attributes: {tier: fast}}
    total_ms: 600
    stages:
      model_call: {budget_ms: 300}
"""
)

measurement = st.one_of(
    st.none(),
    st.builds(
        StageMeasurement,
        actual_ms=st.floats(min_value=0, max_value=2000),
        busy_ms=st.just(0.0),
        count=st.integers(min_value=1, max_value=4),
        first_token_ms=st.one_of(st.none(), st.floats(min_value=0, max_value=500)),
    ),
)
request = st.tuples(
    st.sampled_from(["default", "fast"]),
    st.fixed_dictionaries({"retrieval": measurement, "model_call": measurement, "tool_calls": measurement}),
    st.floats(min_value=0, max_value=3000),
    st.one_of(st.none(), st.floats(min_value=0, max_value=600)),
)


def _report(
    profile: str, measured: dict[str, StageMeasurement | None], total: float, ttft: float | None
) -> TraceReport:
    present = {name: m for name, m in measured.items() if m is not None}
    return evaluate(CONFIG.budgets_by_profile(profile), present, total_actual_ms=total, first_token_ms=ttft)


@settings(max_examples=150)
@given(st.lists(request, min_size=1, max_size=30))
def test_summary_matches_a_naive_recount(requests: list[tuple]) -> None:  # type: ignore[type-arg]
    """Per profile and stage: count, sorted actuals, violations (any budget of the stage) and the total's figures."""
    reports = [_report(*r) for r in requests]
    summary = summarize(CONFIG, reports)
    assert summary.requests == len(requests)
    assert summary.violated == sum(1 for r in reports if r.violated)
    seen_profiles = [p for p in ("default", "fast") if any(r[0] == p for r in requests)]
    assert [p.profile for p in summary.profiles] == seen_profiles
    for profile in summary.profiles:
        budgets = CONFIG.budgets_by_profile(profile.profile)
        mine = [r for r in requests if r[0] == profile.profile]
        assert profile.requests == len(mine)
        for stage in profile.stages:
            budget = budgets.stage(stage.stage)
            ran = [r[1][stage.stage] for r in mine if r[1][stage.stage] is not None]
            assert stage.actual_ms == tuple(sorted(m.actual_ms for m in ran))  # type: ignore[union-attr]
            over = 0
            for m in ran:
                assert m is not None
                broke = budget.budget_ms is not None and m.actual_ms > budget.budget_ms
                broke |= (
                    budget.first_token_ms is not None
                    and m.first_token_ms is not None
                    and m.first_token_ms > budget.first_token_ms
                )
                broke |= budget.max_calls is not None and m.count > budget.max_calls
                over += broke
            assert stage.violations == over
            assert stage.violation_rate == (over / len(ran) if ran else 0.0)
            if len(ran) >= 2:
                cuts = statistics.quantiles(stage.actual_ms, n=100, method="inclusive")
                assert stage.p(95) == pytest.approx(cuts[94], abs=1e-9)
                assert stage.p(50) == pytest.approx(statistics.median(stage.actual_ms), abs=1e-9)
            elif not ran:
                assert stage.p(50) is None
        total = profile.total
        assert total.actual_ms == tuple(sorted(r[2] for r in mine))
        total_over = sum(
            1
            for r in mine
            if (budgets.total_ms is not None and r[2] > budgets.total_ms)
            or (budgets.first_token_ms is not None and r[3] is not None and r[3] > budgets.first_token_ms)
        )
        assert total.violations == total_over
    assert summary.end_to_end.actual_ms == tuple(sorted(r[2] for r in requests))


def test_most_often_over_sums_profiles_and_ignores_totals() -> None:
    """The stage over budget in the most requests wins, counted across profiles; the total never does."""
    reports = [
        _report(
            "default", {"retrieval": StageMeasurement(150, 150, 1), "model_call": None, "tool_calls": None}, 5000, None
        ),
        _report(
            "fast", {"retrieval": StageMeasurement(150, 150, 1), "model_call": None, "tool_calls": None}, 5000, None
        ),
        _report(
            "default", {"retrieval": None, "model_call": StageMeasurement(900, 900, 1), "tool_calls": None}, 5000, None
        ),
    ]
    assert summarize(CONFIG, reports).most_often_over() == ("retrieval", 2)
    assert (
        summarize(
            CONFIG, [_report("default", {"retrieval": None, "model_call": None, "tool_calls": None}, 9e3, None)]
        ).most_often_over()
        is None
    )
