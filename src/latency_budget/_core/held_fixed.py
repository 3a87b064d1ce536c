"""A robust fit of latency on input tokens with output tokens held fixed.

Longer inputs often bring longer answers, and a call's duration grows with its answer:
a fit of duration on input tokens alone then credits the context with the answer's time,
and advice to trim it promises savings that trimming would not give. Holding the output
fixed separates the two (the Frisch-Waugh-Lovell construction): duration and input
tokens are each taken net of their robust line on output tokens (the median pairwise
slope, as Theil-Sen's), and the fit of one remainder on the other is the time an input
token costs at a given output length, with the usual tests of
:func:`~latency_budget._core.estimators.theil_sen` (an interval above zero, an R²). Where
input and output always move together, nothing is left to fit, and there is no estimate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from latency_budget._core.estimators import MAX_FIT_POINTS, Z95, Fit, median, theil_sen

__all__ = ["NUISANCE_POINTS", "held_fixed_fit", "median_slope"]

# Points (thinned evenly along output tokens) behind each line on output tokens: bounded, so
# that the fit's cost past thinning is that of the one Theil-Sen fit on the remainders. The
# lines only remove what output explains; their slopes need not be as exact as the fit's.
NUISANCE_POINTS = 64


def median_slope(points: Sequence[tuple[float, float]], *, max_points: int = MAX_FIT_POINTS) -> float:
    """The median of the pairwise slopes of ``(x, y)`` points with distinct x (0 when there are none).

    More than ``max_points`` points are first thinned evenly along x, as the fits are.
    """
    ordered = sorted(points)
    if len(ordered) > max_points >= 2:
        last = len(ordered) - 1
        ordered = [ordered[round(i * last / (max_points - 1))] for i in range(max_points)]
    slopes: list[float] = []
    for i, (xi, yi) in enumerate(ordered):
        for xj, yj in ordered[i + 1 :]:
            if xj != xi:  # sorted by x, so xj > xi
                slopes.append((yj - yi) / (xj - xi))
    return median(slopes) if slopes else 0.0


def held_fixed_fit(
    points: Sequence[tuple[float, float, float]], *, max_points: int = MAX_FIT_POINTS, z: float = Z95
) -> Fit | None:
    """The fit of y on x with c held fixed, from ``(x, c, y)`` points: here input tokens, output tokens, duration.

    ``None`` when the data cannot support one (see :func:`~latency_budget._core.estimators.theil_sen`),
    which includes x moving in step with c. The fit's slope is y's growth per unit of x at
    a fixed c; its intercept and range are those of the remainders, not of x.
    """
    finite = [(x, c, y) for x, c, y in points if math.isfinite(x) and math.isfinite(c) and math.isfinite(y)]
    thinned = min(max_points, NUISANCE_POINTS)
    x_on_c = median_slope([(c, x) for x, c, _ in finite], max_points=thinned)
    y_on_c = median_slope([(c, y) for _, c, y in finite], max_points=thinned)
    return theil_sen([(x - x_on_c * c, y - y_on_c * c) for x, c, y in finite], max_points=max_points, z=z)
