"""Robust statistics behind the latency levers: medians and the Theil-Sen line.

Latencies have slow tails and the odd outlier (a retried call, a cold start), so the
levers use estimators that a few bad points cannot drag: medians rather than means, and
the Theil-Sen line (the median of the slopes between every pair of points) rather than
least squares. A fit is only returned when the data supports one: enough points, enough
distinct sizes, a slope whose confidence interval excludes zero, and a line that explains
some of the variance.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from statistics import NormalDist

from latency_budget._core.intervals import union_length

from .wording import plural

__all__ = [
    "MAX_FIT_POINTS",
    "MIN_DISTINCT_X",
    "MIN_FIT_POINTS",
    "MIN_R_SQUARED",
    "Z95",
    "Fit",
    "fit_or_reason",
    "kendall_s",
    "median",
    "rank_test",
    "shrunk_saving_ns",
    "theil_sen",
    "z_for",
]

MIN_FIT_POINTS = 10  # fewer points than this: no fit
MIN_DISTINCT_X = 5  # fewer distinct sizes than this: no fit (a cloud at one size has no slope)
MAX_FIT_POINTS = 400  # more are thinned evenly along x first (the pairs grow as n squared)
MIN_R_SQUARED = 0.05  # a line that explains less of the variance than this supports no estimate
Z95 = 1.959963984540054  # the standard normal's 97.5th percentile: a one-sided 2.5% test


def median(values: Sequence[float]) -> float:
    """The median of ``values`` (the mean of the middle two for an even count); ``ValueError`` for none."""
    if not values:
        raise ValueError("median of no values")
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return float(ordered[middle])
    return (ordered[middle - 1] + ordered[middle]) / 2


@dataclass(frozen=True, slots=True)
class Fit:
    """A Theil-Sen line ``y = intercept + slope * x`` and how well the data supports it.

    ``slope_low`` and ``slope_high`` bound an approximate 95% confidence interval for the
    slope (Sen's rank method); ``r_squared`` is the share of the variance of y the line
    explains on the fitted points; ``x_low`` and ``x_high`` are the range it was fitted
    over (predictions outside it are extrapolations). ``n`` counts the points fitted and
    ``of`` the finite points given: more than :data:`MAX_FIT_POINTS` are thinned evenly
    along x first, so ``n`` < ``of`` says the fit rests on a deterministic sample of them.
    """

    slope: float
    intercept: float
    n: int
    slope_low: float
    slope_high: float
    r_squared: float
    x_low: float
    x_high: float
    of: int

    @property
    def thinned(self) -> bool:
        """Whether the fit rests on fewer points than it was given (thinned evenly along x)."""
        return self.n < self.of

    def sample_note(self) -> str:
        """`` (of 25,000, thinned evenly by size)`` after the count of a thinned fit's points, else nothing."""
        return f" (of {self.of:,}, thinned evenly by size)" if self.thinned else ""

    def predict(self, x: float) -> float:
        """The line's value at ``x``."""
        return self.intercept + self.slope * x


def z_for(alpha: float) -> float:
    """The standard normal's quantile for a one-sided test at level ``alpha``."""
    return NormalDist().inv_cdf(1 - alpha)


def rank_test(points: Sequence[tuple[float, float]], *, z: float = Z95) -> bool:
    """Whether y demonstrably grows with x: Kendall's S above ``z`` standard deviations (ties ignored).

    At the default ``z`` a one-sided test at 2.5%; ``z`` 0 asks only for a positive S.
    S is counted in O(n log n) (:func:`kendall_s`), so the test reads every call.
    """
    finite = [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y)]
    n = len(finite)
    if n < 2:
        return False
    return kendall_s(finite) > z * math.sqrt(n * (n - 1) * (2 * n + 5) / 18)


def kendall_s(points: Sequence[tuple[float, float]]) -> int:
    """Kendall's S: concordant minus discordant pairs, pairs tied in x or in y counting for neither.

    Knight's method: sorted by (x, y), the discordant pairs are the inversions of the y
    sequence (counted while merge-sorting it), and the pairs tied in x, in y and in both
    follow from how often each value occurs, so the whole is O(n log n) rather than a
    pass over the n²/2 pairs. The points must be finite.
    """
    ordered = sorted(points)
    n = len(ordered)
    ys = [y for _, y in ordered]
    tied_x = _tied_pairs(x for x, _ in ordered)
    untied = n * (n - 1) // 2 - tied_x - _tied_pairs(ys) + _tied_pairs(ordered)
    return untied - 2 * _inversions(ys)


def _tied_pairs(values: Iterable[Hashable]) -> int:
    """Pairs of equal values: the sum of k(k-1)/2 over the values seen k times."""
    return sum(k * (k - 1) // 2 for k in Counter(values).values())


def _inversions(values: list[float]) -> int:
    """Pairs i < j with ``values[i] > values[j]`` (strictly), by a bottom-up merge sort.

    Merging two sorted blocks, each element of the right block is inverted with the
    elements of the left block greater than it, ``len(left) - bisect_right(left, r)``;
    the counting and the merge (``sorted`` of two runs) both run at C speed.
    """
    items = values
    n = len(items)
    count = 0
    width = 1
    while width < n:
        merged: list[float] = []
        for start in range(0, n, 2 * width):
            left = items[start : start + width]
            right = items[start + width : start + 2 * width]
            if right and left[-1] > right[0]:
                count += len(left) * len(right) - sum(map(partial(bisect_right, left), right))
                left += right
                left.sort()
                merged += left
            else:
                merged += left
                merged += right
        items = merged
        width *= 2
    return count


def theil_sen(points: Sequence[tuple[float, float]], *, max_points: int = MAX_FIT_POINTS, z: float = Z95) -> Fit | None:
    """The Theil-Sen line through ``(x, y)`` points, or ``None`` when the data cannot support one.

    ``None`` when there are fewer than :data:`MIN_FIT_POINTS` points or
    :data:`MIN_DISTINCT_X` distinct x values, when the slope's 95% interval does not
    lie wholly above zero (y does not demonstrably grow with x), or when the line
    explains less than :data:`MIN_R_SQUARED` of y's variance. More than
    ``max_points`` (default :data:`MAX_FIT_POINTS`) points are first thinned to that
    many, evenly along x. ``z`` sets the interval (default 95%, a one-sided 2.5% test
    that the slope is above zero; 0 asks only for a positive median slope).
    """
    found = fit_or_reason(points, max_points=max_points, z=z)
    return found if isinstance(found, Fit) else None


def fit_or_reason(
    points: Sequence[tuple[float, float]], *, max_points: int = MAX_FIT_POINTS, z: float = Z95
) -> Fit | str:
    """The fit :func:`theil_sen` gives, or why there is none, in a few words for people."""
    # The common refusals first, on the points as given: dropping non-finite ones only lowers both counts.
    if len(points) < MIN_FIT_POINTS:
        return f"{plural(len(points), 'call')}, fewer than {MIN_FIT_POINTS}"
    if len({x for x, _ in points}) < MIN_DISTINCT_X:
        return f"fewer than {MIN_DISTINCT_X} distinct sizes"
    finite = [(float(x), float(y)) for x, y in points if math.isfinite(x) and math.isfinite(y)]
    if len(finite) < MIN_FIT_POINTS:
        return f"{plural(len(finite), 'call')}, fewer than {MIN_FIT_POINTS}"
    if len({x for x, _ in finite}) < MIN_DISTINCT_X:
        return f"fewer than {MIN_DISTINCT_X} distinct sizes"
    finite.sort()
    given = len(finite)
    if given > max_points:
        last = given - 1
        finite = [finite[round(i * last / (max_points - 1))] for i in range(max_points)]
    n = len(finite)
    slopes: list[float] = []
    for i in range(n - 1):
        xi, yi = finite[i]
        for xj, yj in finite[i + 1 :]:
            if xj != xi:  # sorted by x, so xj > xi
                slopes.append((yj - yi) / (xj - xi))
    slopes.sort()
    pairs = len(slopes)
    slope = _middle(slopes)
    # Sen's interval: the order statistics of the pairwise slopes at ranks (N -/+ C) / 2,
    # with C from the normal approximation to Kendall's S (ties in x ignored).
    spread = z * math.sqrt(n * (n - 1) * (2 * n + 5) / 18)
    low_rank = math.floor((pairs - spread) / 2)  # 1-based rank of the lower bound
    high_rank = math.ceil((pairs + spread) / 2) + 1  # ... and of the upper bound
    if low_rank < 1 or high_rank > pairs:
        return "too few pairs of distinct sizes for an interval"
    slope_low, slope_high = slopes[low_rank - 1], slopes[high_rank - 1]
    if not slope_low > 0:
        return "no significant growth with size"
    intercept = _middle(sorted(y - slope * x for x, y in finite))
    mean_y = sum(y for _, y in finite) / n
    total = sum((y - mean_y) ** 2 for _, y in finite)  # > 0: a rising slope means y varies
    residual = sum((y - intercept - slope * x) ** 2 for x, y in finite)
    r_squared = 1 - residual / total
    if r_squared < MIN_R_SQUARED:
        return f"the line explains too little (R² {r_squared:.2f})"
    return Fit(slope, intercept, n, slope_low, slope_high, r_squared, finite[0][0], finite[-1][0], given)


def _middle(ordered: Sequence[float]) -> float:
    """The median of values already sorted."""
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def shrunk_saving_ns(intervals: Sequence[tuple[int, int]], shorter: dict[int, int]) -> int:
    """Wall-clock time a stage would lose if some of its calls took less time.

    ``intervals`` are the stage's calls in one request (start, end); ``shorter`` maps the
    index of a call to the duration it would take instead (0: not made at all). Each
    such call keeps its start and ends earlier; the saving is the union of the intervals
    before, minus the union after. Overlapping calls therefore save only what no other
    call still covers, and the saving never exceeds the stage's own time.
    """
    if not shorter:
        return 0
    before = union_length(intervals)
    after: list[tuple[int, int]] = []
    for index, (start, end) in enumerate(intervals):
        length = shorter.get(index)
        if length is None:
            after.append((start, end))
        elif length > 0:
            after.append((start, min(end, start + length)))
    return max(0, before - (union_length(after) if after else 0))
