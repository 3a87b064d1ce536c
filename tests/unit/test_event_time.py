"""Where the root's events are stamped: inside the span as every backend stores it.

Jaeger keeps whole microseconds and truncates a span's start and duration apart; other
backends round (half up, or to even), apart or from the start and end. The stamp must
fall inside the span in each of those views, and inside it in nanoseconds too.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import example, given
from hypothesis import strategies as st
from opentelemetry.trace import SpanKind

from latency_budget import _attributes as attr
from latency_budget._core.annotate import event_time_ns

from .helpers import T0, pipeline

US = 1000

# Instants around now in epoch ns, and durations from 0 to about 3 hours, with every
# sub-microsecond part equally likely.
starts = st.integers(min_value=T0 - 10**15, max_value=T0 + 10**15)
durations = st.one_of(st.integers(min_value=0, max_value=3 * US), st.integers(min_value=0, max_value=10**13))


def _half_up(ns: int) -> int:
    return (ns + US // 2) // US


def _half_even(ns: int) -> int:
    quotient, rest = divmod(ns, US)
    if rest * 2 > US or (rest * 2 == US and quotient % 2 == 1):
        return quotient + 1
    return quotient


def _inside_apart(to_us: Callable[[int], int], start: int, end: int, stamp: int) -> bool:
    """Inside [start_us, start_us + duration_us], each converted on its own (Jaeger's way)."""
    start_us = to_us(start)
    return start_us <= to_us(stamp) <= start_us + to_us(end - start)


def _inside_ends(to_us: Callable[[int], int], start: int, end: int, stamp: int) -> bool:
    """Inside [start_us, end_us], the start and the end converted on their own."""
    return to_us(start) <= to_us(stamp) <= to_us(end)


def _truncate(ns: int) -> int:
    return ns // US


@given(starts, durations)
@example(start=T0 + 999, duration=1_002)  # the end's sub-us part is smaller than the start's
@example(start=T0 + 999, duration=0)
@example(start=T0 + 999, duration=1)  # shorter than 1 us, across a microsecond boundary
@example(start=T0, duration=999)
def test_the_stamp_is_inside_the_span_in_every_microsecond_view(start: int, duration: int) -> None:
    """Truncated or rounded (half up, half even), start and duration apart or start and end: the stamp is inside."""
    end = start + duration
    stamp = event_time_ns(start, end)
    assert start <= stamp <= end
    for to_us in (_truncate, _half_up, _half_even):
        assert _inside_apart(to_us, start, end, stamp)
        assert _inside_ends(to_us, start, end, stamp)


@given(starts, durations)
def test_the_stamp_is_the_end_jaeger_shows(start: int, duration: int) -> None:
    """From 1 us on, the stamp is the end Jaeger shows (start_us + duration_us), less than 2 us before the end."""
    end = start + duration
    stamp = event_time_ns(start, end)
    if duration >= US:
        assert stamp == (start // US + duration // US) * US
        assert end - stamp < 2 * US
    else:
        assert stamp in {start, (start // US + duration // US) * US}


def test_events_on_a_root_with_sub_microsecond_times_are_stamped_at_jaegers_end() -> None:
    """A root from T0+999 ns to T0+2001 ns over budget: its events are stamped at T0+1000 ns, where Jaeger ends it."""
    p = pipeline("version: 1\ntotal_ms: 0.0005\nstages:\n  model_call: {budget_ms: 100}\n")
    root = p.tracer.start_span("request", start_time=T0 + 999, kind=SpanKind.SERVER)
    root.end(end_time=T0 + 2_001)
    (exported,) = p.finished()
    added = [e for e in exported.events if e.name.startswith(attr.PREFIX)]
    assert [e.name for e in added] == [attr.VIOLATION_EVENT]
    assert [e.timestamp for e in added] == [T0 + 1_000]
    assert exported.end_time == T0 + 2_001  # the span itself keeps its own times
