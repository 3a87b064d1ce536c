"""A long-lived series keeps its statistics: the tests of its fits stop before their level underflows."""

from __future__ import annotations

from latency_budget._core.recent import MAX_DECISIONS, RETEST, WINDOW, RecentCalls

from .test_levers import call


def test_a_series_past_its_last_test_still_gives_statistics() -> None:
    """After more calls than its tests can take (each at half the level before), a series still summarises."""
    recent = RecentCalls()
    calls = WINDOW + (MAX_DECISIONS + 10) * RETEST
    for index in range(calls):
        start = index * 10.0
        recent.add([call(start, start + 100 + index % 7, model="gpt", ttft=20, inp=500 + index % 11)])
    stats = recent.stats("model_call", "gpt")
    assert stats is not None
    assert stats.n == WINDOW
