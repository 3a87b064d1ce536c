"""The table of active traces on its own: admission, LRU and idle eviction, several local roots per trace."""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import astuple

import pytest

from latency_budget import _guard, load_budgets
from latency_budget._core.trace_state import TraceState
from latency_budget._trace_table import TraceTable

from .helpers import TECHCORP_YAML, at

CONFIG = load_budgets(text=TECHCORP_YAML)
TTL_NS = at(1_000) - at(0)  # one second


def root(span_id: int, trace_id: int, start_ms: float = 0.0) -> TraceState:
    """The state of a local root that started ``start_ms`` after T0."""
    return TraceState(CONFIG, CONFIG.default, span_id, at(start_ms), trace_id, 1_000, nullcontext(), lambda _: ())


def active(table: TraceTable) -> int:
    return astuple(table.stats())[0]


@pytest.fixture
def fresh_log_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget which messages were already logged once, so the test sees its own first time."""
    monkeypatch.setattr(_guard, "_seen", set())


def test_open_then_close_leaves_an_empty_table_and_counts_one_closed() -> None:
    """A root's trace is found by its trace id while open, gone after close, and counted as closed."""
    table = TraceTable(10, TTL_NS)
    state = root(1, 100)
    table.open(state)
    assert table.by_trace[100] is state
    assert table.close(state) is True
    assert table.by_trace == {}
    assert astuple(table.stats())[:5] == (0, 0, 0, 1, 0)


def test_close_after_eviction_reports_false_and_counts_nothing() -> None:
    """A trace evicted before its root ends is not closed again: close says so and leaves the counts alone."""
    table = TraceTable(1, TTL_NS)
    first, second = root(1, 100), root(2, 200)
    table.open(first)
    first.referenced = False  # no span since it started: first in line for eviction
    table.open(second)
    assert first.finished
    assert table.close(first) is False
    assert astuple(table.stats())[:5] == (1, 1, 0, 0, 0)


def test_full_table_gives_recently_active_traces_a_second_chance() -> None:
    """When full, a trace that saw a span since the last pass moves to the back; an unreferenced one goes."""
    table = TraceTable(2, TTL_NS)
    old, busy = root(1, 100), root(2, 200)
    table.open(old)
    table.open(busy)
    old.referenced = True
    busy.referenced = False
    table.open(root(3, 300))
    assert 100 in table.by_trace  # referenced: kept, its flag cleared
    assert not old.referenced
    assert 200 not in table.by_trace
    assert busy.finished
    assert astuple(table.stats())[:3] == (2, 1, 0)


def test_idle_head_is_dropped_when_a_root_starts_past_its_ttl(
    caplog: pytest.LogCaptureFixture, fresh_log_memory: None
) -> None:
    """A trace with no span for longer than the TTL (span time) is evicted as idle at the next root, and logged once."""
    table = TraceTable(100, TTL_NS)
    idle = root(1, 100, start_ms=0)
    table.open(idle)
    with caplog.at_level(logging.WARNING, logger="latency_budget"):
        table.open(root(2, 200, start_ms=500))  # within the TTL: kept
        assert 100 in table.by_trace
        table.open(root(3, 300, start_ms=1_001))
        table.open(root(4, 400, start_ms=5_000))
    assert idle.finished
    assert 100 not in table.by_trace
    assert astuple(table.stats())[:3] == (1, 0, 3)
    assert sum("idle for over 1 s" in r.getMessage() for r in caplog.records) == 1


def test_idle_trace_behind_a_busy_head_is_found_by_the_periodic_sweep() -> None:
    """An idle trace is dropped within eight roots even when the head of the LRU order is busy."""
    table = TraceTable(100, TTL_NS)
    busy, idle = root(1, 100, start_ms=0), root(2, 200, start_ms=0)
    table.open(busy)
    table.open(idle)
    for n in range(8):
        busy.last_seen = at(2_000 + n)  # the head keeps seeing spans
        table.open(root(10 + n, 1_000 + n, start_ms=2_000 + n))
    assert idle.finished
    assert not busy.finished


def test_second_local_root_of_a_trace_owns_its_spans_and_takes_over_when_the_first_ends() -> None:
    """With two local roots in one trace, spans go to their parent's root, and the second is promoted on close."""
    table = TraceTable(10, TTL_NS)
    first, second = root(1, 100), root(2, 100)
    table.open(first)
    table.open(second)
    assert table.by_trace[100] is first
    assert first.shared == [second]
    assert table.owner_of_new_span(first, span_id=3, parent_id=2) is second  # child of the second root
    assert table.owner_of_new_span(first, span_id=4, parent_id=1) is first  # child of the first
    assert table.owner_of_ended_span(first, 3) is second
    assert table.owner_of_ended_span(first, 4) is first
    assert table.close(first)
    assert table.by_trace[100] is second
    assert second.shared == []
    assert table.close(second)
    assert table.by_trace == {}
    assert astuple(table.stats())[:5] == (0, 0, 0, 2, 0)


def test_closing_the_second_local_root_first_leaves_the_first_in_place() -> None:
    """The second root's close unregisters it and its spans; the first root still owns the trace."""
    table = TraceTable(10, TTL_NS)
    first, second = root(1, 100), root(2, 100)
    table.open(first)
    table.open(second)
    table.owner_of_new_span(first, span_id=3, parent_id=2)
    assert table.close(second)
    assert table.by_trace[100] is first
    assert first.shared == []
    assert table.owner_of_ended_span(first, 3) is first  # no longer registered to the closed root


def test_roots_sharing_a_span_id_in_different_traces_are_counted_separately() -> None:
    """Two traces whose roots have the same span id are two entries, each closed on its own."""
    table = TraceTable(10, TTL_NS)
    a, b = root(7, 100), root(7, 200)
    table.open(a)
    table.open(b)
    assert active(table) == 2
    assert table.close(a)
    assert table.by_trace == {200: b}


def test_truncated_traces_are_counted() -> None:
    """count_truncated adds to the truncated figure of the snapshot."""
    table = TraceTable(10, TTL_NS)
    table.count_truncated()
    table.count_truncated()
    assert astuple(table.stats())[4] == 2


def test_reset_after_fork_empties_the_table_in_place() -> None:
    """After a fork the table is empty and its counters zero, and the by_trace map is the same object."""
    table = TraceTable(1, TTL_NS)
    by_trace = table.by_trace
    table.open(root(1, 100))
    table.count_truncated()
    table.reset_after_fork()
    assert table.by_trace is by_trace
    assert by_trace == {}
    assert astuple(table.stats())[:5] == (0, 0, 0, 0, 0)
    table.open(root(2, 200))  # usable afterwards, with a lock no thread holds
    assert active(table) == 1
