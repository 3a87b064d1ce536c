"""Wall-clock time covered by intervals: a leaf module, so that every part of the core can use it."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["union_length"]


def union_length(intervals: Sequence[tuple[int, int]]) -> int:
    """Total length covered by half-open intervals ``(start, end)``; overlaps count once."""
    if len(intervals) == 1:  # the common case: one call of the stage
        start, end = intervals[0]
        return end - start if end > start else 0
    total = 0
    current_start = current_end = None
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if current_end is None or start > current_end:
            if current_end is not None and current_start is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        elif end > current_end:
            current_end = end
    if current_end is not None and current_start is not None:
        total += current_end - current_start
    return total
