"""Where to optimise, over many requests: critical-path shares and the largest hints."""

from __future__ import annotations

import pytest

from latency_budget.cli._stats import optimisation

from .helpers import at, op, pipeline


def test_shares_add_up_and_the_sequential_hint_is_reported_with_its_rate() -> None:
    """Two requests, one with back-to-back tools: shares sum to 1, the hint covers 50% of requests."""
    p = pipeline()
    root = p.start("sequential", 0)
    p.run("chat", 0, 100, parent=root, attributes=op("chat"))
    p.run("tool a", 100, 200, parent=root, attributes=op("execute_tool"))
    p.run("tool b", 200, 350, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(400))
    root = p.start("parallel", 1_000)
    p.run("tool a", 1_000, 1_100, parent=root, attributes=op("execute_tool"))
    p.run("tool b", 1_000, 1_150, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(1_200))

    found = optimisation(p.reports)
    shares = dict(found.critical_share)
    assert sum(shares.values()) == pytest.approx(1.0)
    # tools: 250 (sequential request) + 150 (parallel) of 600 ms; model 100; the rest is the roots' own time.
    assert shares["tool_calls"] == pytest.approx(400 / 600)
    assert shares["model_call"] == pytest.approx(100 / 600)
    assert shares["unattributed"] == pytest.approx(100 / 600)
    hint = found.largest_hint
    assert hint is not None
    assert (hint.kind, hint.stage, hint.requests, hint.share) == ("sequential_calls", "tool_calls", 1, 0.5)
    assert hint.sentence() == (
        "tool_calls ran sequentially in 50% of requests; parallel execution would save p50 100ms"
    )


def test_no_reports_means_nothing_to_say() -> None:
    """With no requests there are no shares and no hints (and no division by zero)."""
    found = optimisation([])
    assert (found.critical_share, found.hints, found.largest_hint) == ((), (), None)
