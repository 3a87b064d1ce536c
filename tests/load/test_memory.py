"""Load and memory: a million spans leave nothing behind, and leaked roots stay bounded.

These run whole scenarios of benchmarks/memory.py in subprocesses (about a minute of CPU
each on an idle machine) and check counts and resident memory, never wall-clock time.
"""

from __future__ import annotations

import pytest

from .conftest import LoadRuns

pytestmark = pytest.mark.load

MILLION_SPANS = 1_000_000
MILLION_TRACES = 100_000
LEAKED_TRACES = 200_000
MAX_ACTIVE_TRACES = 10_000  # the processor's default, which the leaks scenario uses
RSS_ABOVE_BASELINE_MB = 50
# Once the leaks scenario's state is full (its first 20,000 traces fill 10,000 slots),
# the rest of the run may not add more than allocator noise.
PLATEAU_FROM = 0.3
PLATEAU_GROWTH_MB = 8


def test_million_spans_are_all_forwarded(load_runs: LoadRuns) -> None:
    """A million spans in 100,000 traces all reach the downstream exporter, with and without the processor."""
    for name in ("million-baseline", "million-candidate"):
        run = load_runs.result(name)
        assert run["spans_ended"] == MILLION_SPANS
        assert run["exported"] == MILLION_SPANS


def test_million_spans_leave_no_active_traces(load_runs: LoadRuns) -> None:
    """After 100,000 traces whose roots ended, no trace state is left and every root was reported."""
    stats = load_runs.result("million-candidate")["stats"]
    assert stats["active_traces"] == 0
    assert stats["reports"] == MILLION_TRACES
    assert stats["evicted_lru"] == stats["evicted_idle"] == stats["truncated_traces"] == 0
    # Open at any sample: the trace in flight, and ended roots held late_span_grace_ms for late spans.
    samples = load_runs.result("million-candidate")["samples"]
    assert all(sample["active_traces"] - sample["held_roots"] <= 1 for sample in samples)


def test_million_spans_resident_memory_near_baseline(load_runs: LoadRuns) -> None:
    """Resident memory after a million spans is within 50 MB of the baseline process's."""
    baseline = load_runs.result("million-baseline")
    candidate = load_runs.result("million-candidate")
    assert candidate["rss_mb"] - baseline["rss_mb"] <= RSS_ABOVE_BASELINE_MB, (baseline, candidate)


def test_million_spans_log_no_errors(load_runs: LoadRuns) -> None:
    """A million ordinary spans make the processor log nothing at all."""
    assert load_runs.result("million-candidate")["logs"] == {}


def test_leaked_roots_forward_every_ended_span(load_runs: LoadRuns) -> None:
    """With 200,000 roots that never end, every span that does end is still forwarded, evicted traces' too."""
    run = load_runs.result("leaks-candidate")
    assert run["exported"] == run["spans_ended"]
    assert run["spans_ended"] >= 2 * LEAKED_TRACES


def test_leaked_roots_are_evicted_and_counted(load_runs: LoadRuns) -> None:
    """Leaked traces are evicted by both bounds, and each is either still active or counted as evicted."""
    stats = load_runs.result("leaks-candidate")["stats"]
    assert stats["evicted_lru"] > 0
    assert stats["evicted_idle"] > 0
    assert stats["active_traces"] + stats["evicted_lru"] + stats["evicted_idle"] == LEAKED_TRACES
    assert stats["reports"] == 0


def test_leaked_roots_active_state_stays_bounded(load_runs: LoadRuns) -> None:
    """Active traces never exceed max_active_traces, at any sample of the run."""
    samples = load_runs.result("leaks-candidate")["samples"]
    assert max(sample["active_traces"] for sample in samples) <= MAX_ACTIVE_TRACES


def test_leaked_roots_resident_memory_plateaus(load_runs: LoadRuns) -> None:
    """Once the state is full, resident memory stops growing however many more roots leak."""
    samples = load_runs.result("leaks-candidate")["samples"]
    plateau = [s["rss_mb"] for s in samples if s["traces"] >= PLATEAU_FROM * LEAKED_TRACES]
    assert len(plateau) >= 5
    assert max(plateau) - plateau[0] <= PLATEAU_GROWTH_MB, samples
    assert samples[-1]["rss_mb"] - samples[0]["rss_mb"] <= RSS_ABOVE_BASELINE_MB, samples


def test_leaked_roots_log_once_per_kind(load_runs: LoadRuns) -> None:
    """Evictions are logged once per kind (LRU, idle), never per span, and nothing is logged as an error."""
    assert load_runs.result("leaks-candidate")["logs"] == {"WARNING": 2}
