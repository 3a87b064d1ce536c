"""How a series re-tests its fits: again at each refresh once passed; the tests stop before their level underflows."""

from __future__ import annotations

import random

from latency_budget._core.call_facts import Call, sample_of
from latency_budget._core.levers import summarise
from latency_budget._core.recent import FIT_POINTS, MAX_DECISIONS, RETEST, WINDOW, RecentCalls

from .test_levers import call


def test_a_series_past_its_last_test_still_gives_statistics() -> None:
    """After more calls than its tests can take (each at half the level before), a series still summarises."""
    recent = RecentCalls()
    calls = WINDOW + (MAX_DECISIONS + 10) * RETEST
    for index in range(calls):
        start = index * 10.0
        recent.add([sample_of(call(start, start + 100 + index % 7, model="gpt", ttft=20, inp=500 + index % 11))])
    stats = recent.stats("model_call", "gpt")
    assert stats is not None
    assert stats.n == WINDOW


def _context_calls(first: int, slope: float, noise: random.Random | None) -> list[Call]:
    """WINDOW calls of 600 ms + ``slope`` ms per input token (1000..10000), with +-100 ms of noise when given."""
    found = []
    for i in range(first, first + WINDOW):
        tokens = 1000 * (1 + i % 10)
        jitter = noise.uniform(-100, 100) if noise is not None else 0.0
        found.append(call(i * 1000.0, i * 1000.0 + 600 + slope * tokens + jitter, inp=tokens))
    return found


def test_a_fit_that_passed_must_pass_again_at_the_next_refresh() -> None:
    """A window where time grows 0.05 ms per token passes the test; on the next refresh's window the growth is
    lost in the noise (its median slope is still positive, and its R² above 0.05): the fit stops there, at
    the test's own level, and stays off, as report would find no fit on that window either."""
    recent = RecentCalls()
    for c in _context_calls(0, 0.05, None):
        recent.add([sample_of(c)])
    stats = recent.stats("model_call", "m")
    assert stats is not None
    assert stats.context_fit is not None  # tested once the window is full: passed
    weak = _context_calls(WINDOW, 0.004, random.Random(1))
    assert summarise(weak, max_fit_points=FIT_POINTS, z=0.0).duration_fit is not None  # a positive slope alone
    assert summarise(weak).duration_fit is None  # what report says of these calls
    for c in weak:
        recent.add([sample_of(c)])
    stats = recent.stats("model_call", "m")
    assert stats is not None
    assert stats.n == WINDOW  # the window holds the weak calls only
    assert stats.context_fit is None
    for c in _context_calls(2 * WINDOW, 0.05, None):  # the growth is back: off until the next test
        recent.add([sample_of(c)])
    stats = recent.stats("model_call", "m")
    assert stats is not None
    assert stats.context_fit is None
