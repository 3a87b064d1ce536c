"""Two samples compared: seeded bootstrap intervals for percentile differences, Welch intervals for
means, and a test of whether two mixes of strata differ.

A percentile difference's interval is the percentile interval of its bootstrap draws: the
draws' own quantiles, not a normal law around them, because a percentile's sampling law is
lumpy where the values are (a stage whose time is one call or two has a median that jumps
between them), and at the tails that many simultaneous intervals reach a normal law
understates it.

The bootstrap never builds a resample. A resample's order statistics have a known law: the
k-th smallest of n uniform draws is Beta(k, n - k + 1), and, given it, the next one lies
a Beta(1, n - k) share of the rest of the way to 1; index n uniform draws into the sorted
sample and the k-th smallest index is where the k-th smallest draw lands. So a resample's
percentile (the linear "type 7" percentile, interpolated between two order statistics) is
drawn in O(1), with the same law as sorting a resample of n values and reading it, and a
recording of a million requests costs what a hundred cost. A weighted percentile (for a
mix reweighted to another) has no such short cut: it resamples, from at most
:data:`MAX_WEIGHTED_POINTS` values, thinned evenly by rank, which widens its interval.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

__all__ = [
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "MAX_WEIGHTED_POINTS",
    "Estimate",
    "mean_difference",
    "mix_test",
    "percentile_difference",
    "percentile_draws",
    "simultaneous_alpha",
    "sorted_percentile",
    "weighted_percentile",
    "weighted_percentile_difference",
]

DEFAULT_RESAMPLES = 2_000
DEFAULT_SEED = 0
MAX_WEIGHTED_POINTS = 2_000  # values per side a reweighted percentile's bootstrap resamples from


@dataclass(frozen=True, slots=True)
class Estimate:
    """A difference (after minus before), before an interval is set on it: with its bootstrap draws
    (sorted) the interval is theirs, else (``draws`` empty) ``value`` plus and minus z standard errors."""

    value: float
    se: float
    draws: tuple[float, ...] = ()

    def interval(self, alpha: float) -> tuple[float, float]:
        """The two-sided interval that misses the truth with probability ``alpha``.

        From draws: the percentile interval, their ``alpha / 2`` and ``1 - alpha / 2`` quantiles
        (past the last draw's share, the extreme draw). Without: the normal interval.
        """
        if self.draws:
            return sorted_percentile(self.draws, 50 * alpha), sorted_percentile(self.draws, 100 - 50 * alpha)
        z = NormalDist().inv_cdf(1 - alpha / 2)
        return self.value - z * self.se, self.value + z * self.se


def simultaneous_alpha(tests: int, level: float = 0.95) -> float:
    """Each interval's miss rate that makes ``tests`` of them hold together at ``level`` (Bonferroni)."""
    return (1 - level) / max(1, tests)


def sorted_percentile(ordered: Sequence[float], q: float) -> float:
    """The linear (type 7) ``q``-th percentile of sorted, non-empty values, as ``cli._stats.percentile``."""
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def percentile_draws(ordered: Sequence[float], q: float, resamples: int, rng: random.Random) -> list[float]:
    """``resamples`` bootstrap draws of the ``q``-th percentile of ``ordered`` (sorted, non-empty).

    Each draw has the law of the percentile of a resample of ``len(ordered)`` values drawn
    with replacement (see the module's docstring), without building the resample.
    """
    n = len(ordered)
    rank = (n - 1) * q / 100
    low = math.floor(rank)
    fraction = rank - low
    k = low + 1  # the 1-based rank of the lower order statistic
    last = n - 1
    beta = rng.betavariate
    uniform = rng.random
    draws: list[float] = []
    if fraction == 0 or k >= n:
        for _ in range(resamples):
            draws.append(ordered[min(last, int(beta(k, n - k + 1) * n))])
        return draws
    rest = 1 / (n - k)
    for _ in range(resamples):
        u = beta(k, n - k + 1)
        lower = ordered[min(last, int(u * n))]
        v = u + (1 - u) * (1 - uniform() ** rest)
        upper = ordered[min(last, int(v * n))]
        draws.append(lower + (upper - lower) * fraction)
    return draws


def _stdev(values: Sequence[float]) -> float:
    n = len(values)
    if n < 2:
        return 0.0
    mean = sum(values) / n
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def percentile_difference(
    before: Sequence[float], after: Sequence[float], q: float, *, resamples: int, rng: random.Random
) -> Estimate:
    """The ``q``-th percentile of ``after`` minus that of ``before`` (both sorted), with its bootstrap error."""
    draws_before = percentile_draws(before, q, resamples, rng)
    draws_after = percentile_draws(after, q, resamples, rng)
    value = sorted_percentile(after, q) - sorted_percentile(before, q)
    differences = sorted(a - b for a, b in zip(draws_after, draws_before, strict=True))
    return Estimate(value, _stdev(differences), tuple(differences))


def mean_difference(before: Sequence[float], after: Sequence[float]) -> Estimate:
    """The mean of ``after`` minus that of ``before``, with Welch's standard error (samples of at least 2)."""
    n_before, n_after = len(before), len(after)
    se = math.sqrt(_stdev(before) ** 2 / n_before + _stdev(after) ** 2 / n_after)
    return Estimate(sum(after) / n_after - sum(before) / n_before, se)


def weighted_percentile(values: Sequence[tuple[float, float]], q: float) -> float:
    """The ``q``-th percentile of (value, weight) pairs sorted by value: the least value whose cumulative
    weight reaches ``q`` percent of the whole (the inverse of the weighted distribution function)."""
    total = sum(w for _, w in values)
    goal = total * q / 100
    cumulative = 0.0
    for value, weight in values:
        cumulative += weight
        if cumulative >= goal:
            return value
    return values[-1][0]


def _thinned(ordered: Sequence[float], most: int) -> list[float]:
    """At most ``most`` of the sorted values, evenly by rank (all of them when there are fewer)."""
    n = len(ordered)
    if n <= most:
        return list(ordered)
    return [ordered[round(i * (n - 1) / (most - 1))] for i in range(most)]


def _weighted_sample(strata: Mapping[str, Sequence[float]], weights: Mapping[str, float]) -> list[tuple[float, float]]:
    return sorted((v, weights[name]) for name, values in strata.items() for v in values)


def weighted_percentile_difference(
    before: Mapping[str, Sequence[float]],
    after: Mapping[str, Sequence[float]],
    q: float,
    *,
    resamples: int,
    rng: random.Random,
) -> Estimate:
    """The ``q``-th percentile of ``after`` reweighted to ``before``'s mix of strata, minus ``before``'s.

    ``before`` and ``after`` map each stratum to its sorted values; only strata of both
    sides count. Each value of an after stratum weighs (its share of before) / (its share of
    after), per value. The bootstrap resamples within each stratum (the mix is held at the
    before side's), from at most :data:`MAX_WEIGHTED_POINTS` values per side in all.
    """
    names = [name for name in before if before[name] and after.get(name)]
    n_before = sum(len(before[name]) for name in names)
    n_after = sum(len(after[name]) for name in names)
    weights_before = dict.fromkeys(names, 1.0)
    weights_after = {name: (len(before[name]) / n_before) / (len(after[name]) / n_after) for name in names}
    value = weighted_percentile(_weighted_sample({n: after[n] for n in names}, weights_after), q) - weighted_percentile(
        _weighted_sample({n: before[n] for n in names}, weights_before), q
    )
    thin_before = {n: _thinned(before[n], max(1, MAX_WEIGHTED_POINTS * len(before[n]) // n_before)) for n in names}
    thin_after = {n: _thinned(after[n], max(1, MAX_WEIGHTED_POINTS * len(after[n]) // n_after)) for n in names}
    # The thinned strata keep the sides' own shares, so the weights above still hold.
    shares_before = {n: len(thin_before[n]) for n in names}
    shares_after = {n: len(thin_after[n]) for n in names}
    total_before, total_after = sum(shares_before.values()), sum(shares_after.values())
    thin_weights = {n: (shares_before[n] / total_before) / (shares_after[n] / total_after) for n in names}
    choices = rng.choices
    differences: list[float] = []
    for _ in range(resamples):
        drawn_before = sorted((v, 1.0) for n in names for v in choices(thin_before[n], k=len(thin_before[n])))
        drawn_after = sorted((v, thin_weights[n]) for n in names for v in choices(thin_after[n], k=len(thin_after[n])))
        differences.append(weighted_percentile(drawn_after, q) - weighted_percentile(drawn_before, q))
    differences.sort()
    return Estimate(value, _stdev(differences), tuple(differences))


def mix_test(before: Mapping[str, int], after: Mapping[str, int]) -> float:
    """The p-value of a chi-square test that two samples' counts per stratum come from one mix.

    Pearson's test of homogeneity on the 2 x k table; the chi-square law's tail by the
    Wilson-Hilferty cube-root approximation (close enough to say "differs" or not). 1.0
    when there is one stratum or a side has no counts.
    """
    names = sorted(set(before) | set(after))
    total_before, total_after = sum(before.values()), sum(after.values())
    if len(names) < 2 or not total_before or not total_after:
        return 1.0
    total = total_before + total_after
    statistic = 0.0
    for name in names:
        column = before.get(name, 0) + after.get(name, 0)
        for count, side in ((before.get(name, 0), total_before), (after.get(name, 0), total_after)):
            expected = column * side / total
            statistic += (count - expected) ** 2 / expected
    freedom = len(names) - 1
    if statistic <= 0:
        return 1.0
    z = ((statistic / freedom) ** (1 / 3) - (1 - 2 / (9 * freedom))) / math.sqrt(2 / (9 * freedom))
    return 1 - NormalDist().cdf(z)
