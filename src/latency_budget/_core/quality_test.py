"""Non-inferiority tests: is one set of answers worse than another by more than a tolerance?

A lever that would change answers (a faster model, fewer agent loops) may claim its
saving only where its answers are not worse by more than the budget file's
``quality.max_drop``: the null hypothesis is that they are, and the test must reject it
at ``quality.significance`` (one-sided). Scores are compared with Welch's t test on their
means (:func:`scores_not_worse`), rates of bad outcomes (errors, guardrail blocks) and of
good ones (request success) with a two-proportion z test (:func:`rate_not_worse`). Each
result says its n on both sides. Pure Python: the t distribution's tail comes from the
regularised incomplete beta function (a continued fraction), no SciPy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from latency_budget._core.quality import Scores

__all__ = ["MIN_SCORES", "Comparison", "normal_sf", "rate_not_worse", "scores_not_worse", "t_sf"]

# Scores of each side before two means are compared: below it a mean says little, and a
# pair of identical scores (no variance) would pass on nothing.
MIN_SCORES = 5


@dataclass(frozen=True, slots=True)
class Comparison:
    """One measure of two sets of answers, ``candidate`` (the change) against ``current``.

    ``candidate`` and ``current`` are the means (or rates), ``n_candidate`` and
    ``n_current`` what each rests on; ``margin`` the tolerated drop; ``p_value`` the
    one-sided p-value of "worse by more than the margin"; ``passed``: rejected at the
    level, so the candidate is not worse by more than the margin.
    """

    measure: str
    candidate: float
    current: float
    n_candidate: int
    n_current: int
    margin: float
    higher_is_better: bool
    p_value: float
    passed: bool

    @property
    def words(self) -> str:
        """``correctness 0.58 vs 0.91, n 120/118``: the candidate's figure first."""
        return (
            f"{self.measure} {_figure(self.candidate)} vs {_figure(self.current)}, "
            f"n {self.n_candidate}/{self.n_current}"
        )


def _figure(value: float) -> str:
    return f"{value:.2f}" if abs(value) < 100 else f"{value:,.0f}"


def scores_not_worse(
    measure: str,
    candidate: Scores,
    current: Scores,
    *,
    margin: float,
    alpha: float,
    higher_is_better: bool = True,
) -> Comparison | None:
    """Welch's t test of "the candidate's mean is worse than the current's by more than ``margin``".

    ``None`` when either side has fewer than :data:`MIN_SCORES` scores.
    """
    if candidate.n < MIN_SCORES or current.n < MIN_SCORES:
        return None
    # Higher is better: H0 candidate - current <= -margin. Lower is better: the sign turned.
    gain = candidate.mean - current.mean if higher_is_better else current.mean - candidate.mean
    a, b = candidate.variance / candidate.n, current.variance / current.n
    se = math.sqrt(a + b)
    if se == 0.0:  # every score the same on both sides: the difference is known exactly
        p = 0.0 if gain + margin > 0 else 1.0
    else:
        df = (a + b) ** 2 / (a * a / (candidate.n - 1) + b * b / (current.n - 1))
        p = t_sf((gain + margin) / se, df)
    return Comparison(
        measure, candidate.mean, current.mean, candidate.n, current.n, margin, higher_is_better, p, p < alpha
    )


def rate_not_worse(
    measure: str,
    candidate: tuple[int, int],
    current: tuple[int, int],
    *,
    margin: float,
    alpha: float,
    higher_is_better: bool,
) -> Comparison | None:
    """Two-proportion z test (unpooled) of "the candidate's rate is worse by more than ``margin``".

    Each side is (count, of); ``None`` when either side has no trials.
    """
    (hits_a, n_a), (hits_b, n_b) = candidate, current
    if n_a <= 0 or n_b <= 0:
        return None
    p_a, p_b = hits_a / n_a, hits_b / n_b
    gain = p_a - p_b if higher_is_better else p_b - p_a
    se = math.sqrt(p_a * (1 - p_a) / n_a + p_b * (1 - p_b) / n_b)
    # No spread on either side (all or none of each): the difference is known exactly.
    p = (0.0 if gain + margin > 0 else 1.0) if se == 0.0 else normal_sf((gain + margin) / se)
    return Comparison(measure, p_a, p_b, n_a, n_b, margin, higher_is_better, p, p < alpha)


def normal_sf(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom (any positive real; ``inf``: normal)."""
    if math.isinf(df):
        return normal_sf(t)
    tail = 0.5 * _betainc(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def _betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function I_x(a, b), by its continued fraction (Lentz)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast only below this point
        return 1.0 - math.exp(log_front) * _fraction(b, a, 1.0 - x) / b
    return math.exp(log_front) * _fraction(a, b, x) / a


def _fraction(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h
