"""The non-inferiority tests the levers weigh a saving with, held against independent computations.

The t distribution's tail is checked against exact closed forms (one and two degrees of
freedom) and against a simulation with a fixed seed; each test's decision against the
share of simulated samples on which it rejects (its size at the boundary of the null, its
power away from it).
"""

from __future__ import annotations

import math
import random

import pytest

from latency_budget._core.quality import Scores
from latency_budget._core.quality_test import MIN_SCORES, normal_sf, rate_not_worse, scores_not_worse, t_sf


def _scores(values: list[float]) -> Scores:
    found = Scores()
    for value in values:
        found = found.add(value)
    return found


@pytest.mark.parametrize("t", [-3.0, -0.7, 0.0, 0.4, 1.0, 2.5, 12.0])
def test_the_t_tail_matches_the_closed_forms_of_one_and_two_degrees_of_freedom(t: float) -> None:
    """df 1 is Cauchy (1/2 - atan(t)/pi); df 2 has tail (1 - t/sqrt(2 + t^2)) / 2."""
    assert t_sf(t, 1) == pytest.approx(0.5 - math.atan(t) / math.pi, abs=1e-12)
    assert t_sf(t, 2) == pytest.approx((1 - t / math.sqrt(2 + t * t)) / 2, abs=1e-12)


@pytest.mark.parametrize(("t", "df"), [(1.0, 5), (2.0, 10), (1.7, 3), (-1.2, 7)])
def test_the_t_tail_matches_a_simulation_of_the_t_distribution(t: float, df: int) -> None:
    """P(T > t) against the share of 200,000 draws of Z / sqrt(chi2_df / df) above t (seed 7)."""
    rng = random.Random(7)
    draws = 200_000
    above = 0
    for _ in range(draws):
        chi2 = sum(rng.gauss(0, 1) ** 2 for _ in range(df))
        above += rng.gauss(0, 1) / math.sqrt(chi2 / df) > t
    share = above / draws
    tolerance = 4 * math.sqrt(share * (1 - share) / draws)  # four standard errors of the share
    assert abs(t_sf(t, df) - share) < tolerance


def test_a_large_df_is_the_normal_tail() -> None:
    """With many degrees of freedom, and with infinitely many, the t tail is the normal's."""
    assert t_sf(1.645, math.inf) == normal_sf(1.645)
    assert t_sf(1.645, 1e7) == pytest.approx(normal_sf(1.645), abs=1e-6)
    assert normal_sf(1.959963984540054) == pytest.approx(0.025, abs=1e-12)


def _rejections(trials: int, n: int, mean_a: float, mean_b: float, sd: float, margin: float, seed: int = 11) -> float:
    """The share of simulated samples (normal scores) on which Welch's test says 'not worse by more than margin'."""
    rng = random.Random(seed)
    passed = 0
    for _ in range(trials):
        a = _scores([rng.gauss(mean_a, sd) for _ in range(n)])
        b = _scores([rng.gauss(mean_b, sd) for _ in range(n)])
        found = scores_not_worse("s", a, b, margin=margin, alpha=0.05)
        assert found is not None
        passed += found.passed
    return passed / trials


def test_welch_keeps_its_level_at_the_margin() -> None:
    """Candidate exactly margin worse (the null's edge): it passes in about 5% of 2,000 samples, as its level says."""
    share = _rejections(2000, 30, 0.80, 0.85, 0.1, 0.05)
    assert 0.03 < share < 0.07


def test_welch_passes_equal_answers_and_fails_clearly_worse_ones() -> None:
    """Equal means (n 120, sd 0.1, margin 0.05) pass nearly always; 0.58 against 0.91 never passes."""
    assert _rejections(300, 120, 0.91, 0.91, 0.1, 0.05) > 0.95
    assert _rejections(300, 120, 0.58, 0.91, 0.1, 0.05) == 0.0


def test_welch_says_its_figures_and_needs_enough_scores() -> None:
    """The comparison names the measure, both means and both n; below MIN_SCORES on a side there is none."""
    worse = scores_not_worse(
        "correctness", Scores(120, 0.58, 0.04 * 119), Scores(118, 0.91, 0.01 * 117), margin=0.05, alpha=0.05
    )
    assert worse is not None
    assert worse.words == "correctness 0.58 vs 0.91, n 120/118"
    assert not worse.passed
    assert (
        scores_not_worse("c", Scores(MIN_SCORES - 1, 0.9, 0.1), Scores(50, 0.9, 0.1), margin=0.05, alpha=0.05) is None
    )


def test_lower_is_better_turns_the_test_round() -> None:
    """For a score where lower is better (toxicity), a higher candidate mean is the worse one."""
    low, high = Scores(100, 0.10, 0.01 * 99), Scores(100, 0.30, 0.01 * 99)
    up = scores_not_worse("toxicity", low, high, margin=0.05, alpha=0.05, higher_is_better=False)
    down = scores_not_worse("toxicity", high, low, margin=0.05, alpha=0.05, higher_is_better=False)
    assert up is not None
    assert up.passed
    assert down is not None
    assert not down.passed


def test_the_two_proportion_test_matches_its_normal_approximation_by_hand() -> None:
    """Error rates 6/100 against 2/100, margin 0.05 (lower is better): z = (0.02 - 0.06 + 0.05) / se, computed apart."""
    found = rate_not_worse("error rate", (6, 100), (2, 100), margin=0.05, alpha=0.05, higher_is_better=False)
    assert found is not None
    se = math.sqrt(0.06 * 0.94 / 100 + 0.02 * 0.98 / 100)
    z = (0.02 - 0.06 + 0.05) / se
    assert found.p_value == pytest.approx(0.5 * math.erfc(z / math.sqrt(2)))
    assert not found.passed  # p about 0.37
    assert rate_not_worse("e", (0, 100), (0, 80), margin=0.05, alpha=0.05, higher_is_better=False).passed  # type: ignore[union-attr]
    assert rate_not_worse("e", (1, 0), (0, 80), margin=0.05, alpha=0.05, higher_is_better=False) is None


def test_the_two_proportion_test_keeps_its_level_at_the_margin() -> None:
    """Success 0.85 against 0.90 with margin 0.05 (the null's edge), n 400 each: it passes in about 5% of samples."""
    rng = random.Random(5)
    trials, passed = 2000, 0
    for _ in range(trials):
        a = sum(rng.random() < 0.85 for _ in range(400))
        b = sum(rng.random() < 0.90 for _ in range(400))
        found = rate_not_worse("success", (a, 400), (b, 400), margin=0.05, alpha=0.05, higher_is_better=True)
        assert found is not None
        passed += found.passed
    assert 0.03 < passed / trials < 0.075
