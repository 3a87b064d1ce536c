"""What the two levers read from a trace's shape (``sequential_calls``, ``iterations``) share.

Both count calls, not spans: a span nested inside a span of its own stage is part of that
call (see :mod:`latency_budget._core.calls`), and is never a call of its own here. Their
spans are the processor's ``RecordedSpan`` tuples: (span id, parent id, start, end, stage
index).
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from latency_budget._core.critical_path import RecordedSpan

__all__ = ["capped", "stage_calls"]


def stage_calls(spans: Sequence[RecordedSpan], index: int, nested: AbstractSet[int]) -> list[RecordedSpan]:
    """The calls of stage ``index`` (its spans not nested in a call of their own), in start order."""
    return sorted(
        (s for n, s in enumerate(spans) if s[4] == index and n not in nested), key=lambda s: (s[2], s[3], s[0])
    )


def capped(saving_ns: int, index: int, critical_ns: Sequence[int] | None) -> float:
    """A wall-clock saving of stage ``index`` in ms, at most the stage's time on the critical path."""
    if critical_ns is not None and saving_ns > critical_ns[index]:
        saving_ns = critical_ns[index]
    return max(0, saving_ns) / 1e6
