"""The O(n log n) Kendall S against the pass over every pair it replaces, ties included."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from latency_budget._core.estimators import Z95, kendall_s, rank_test


def brute_kendall_s(points: list[tuple[float, float]]) -> int:
    """Concordant minus discordant over every pair; pairs tied in x or y count for neither."""
    score = 0
    for i, (xi, yi) in enumerate(points):
        for xj, yj in points[i + 1 :]:
            dx, dy = xj - xi, yj - yi
            if dx and dy:
                score += 1 if (dx > 0) == (dy > 0) else -1
    return score


def brute_rank_test(points: list[tuple[float, float]], z: float) -> bool:
    n = len(points)
    return n >= 2 and brute_kendall_s(points) > z * math.sqrt(n * (n - 1) * (2 * n + 5) / 18)


# Few distinct values make ties in x, in y and in both common; floats make them rare.
tied = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), max_size=40)
spread = st.lists(st.tuples(st.floats(-1e6, 1e6, allow_nan=False), st.floats(-1e6, 1e6, allow_nan=False)), max_size=40)


@settings(max_examples=400, deadline=None)
@given(st.one_of(tied, spread))
def test_kendall_s_equals_the_pass_over_every_pair(points: list[tuple[float, float]]) -> None:
    assert kendall_s(points) == brute_kendall_s(points)


@settings(max_examples=200, deadline=None)
@given(st.one_of(tied, spread), st.sampled_from((0.0, 1.0, Z95)))
def test_rank_test_gives_the_answer_of_the_pass_over_every_pair(points: list[tuple[float, float]], z: float) -> None:
    assert rank_test(points, z=z) == brute_rank_test(points, z)


def test_kendall_s_on_known_orders() -> None:
    rising = [(float(i), float(i)) for i in range(50)]
    assert kendall_s(rising) == 50 * 49 // 2
    assert kendall_s([(x, -y) for x, y in rising]) == -(50 * 49 // 2)
    assert kendall_s([(1.0, float(i)) for i in range(50)]) == 0  # every pair tied in x
    assert kendall_s([(float(i), 3.0) for i in range(50)]) == 0  # every pair tied in y
    assert kendall_s([]) == 0


def test_rank_test_leaves_out_points_that_are_not_finite() -> None:
    rising = [(float(i), 2.0 * i) for i in range(30)]
    assert rank_test(rising)
    assert rank_test([*rising, (math.inf, 0.0), (5.0, math.nan)]) == rank_test(rising)
