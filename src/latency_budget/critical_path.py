"""Critical-path attribution: which stage owned the time that decided the request's latency.

The rule, walking backwards from the local root's end (as Jaeger's critical-path view):

1. Start at the root with a cursor at its end.
2. Among the span's children, take the one that finished last at or before the cursor
   (a child still running at the cursor is cut at the cursor; between children that
   finished at the same instant, the one that started first, then the lower span id). The time between that
   child's end and the cursor is the span's own time on the critical path.
3. Walk into that child with the cursor at its (cut) end, then move the span's cursor
   to the child's start, and repeat step 2 with the children that end before it.
4. When no child is left, the time from the span's start to the cursor is its own.

Children are cut to their parent's interval, so the pieces partition the root's
duration exactly. Each piece is attributed to the innermost stage span that contains
it (the span itself or its nearest stage ancestor), or to ``unattributed``.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["RecordedSpan", "critical_path_ns"]

# (span_id, parent_id or None, start_ns, end_ns, stage index or -1)
RecordedSpan = tuple[int, "int | None", int, int, int]


def critical_path_ns(
    root_id: int, root_start: int, root_end: int, spans: Sequence[RecordedSpan], stage_count: int
) -> tuple[list[int], int]:
    """Critical nanoseconds per stage index, and the unattributed remainder.

    ``spans`` are the recorded spans of one local-root trace (the root may be among
    them, and is identified by ``root_id``). Spans whose parent was not recorded are
    unreachable and their time counts for the nearest recorded ancestor.
    """
    children: dict[int, list[RecordedSpan]] = {}
    root_stage = -1
    for span in spans:
        span_id, parent_id, _, _, stage = span
        if span_id == root_id:
            root_stage = stage
        elif parent_id is not None:
            children.setdefault(parent_id, []).append(span)
    for siblings in children.values():
        # Latest end first; on equal ends the earlier start (the longer child), then the id,
        # so the path does not depend on the order in which spans were recorded.
        siblings.sort(key=lambda s: (-s[3], s[2], s[0]))

    per_stage = [0] * stage_count
    unattributed = 0
    # Work items: (span id, window start, cursor, stage owning the span's own time).
    stack: list[tuple[int, int, int, int]] = [(root_id, root_start, root_end, root_stage)]
    while stack:
        span_id, start, cursor, owner = stack.pop()
        pieces: list[tuple[int, int, int, int]] = []
        for child in children.get(span_id, ()):
            if cursor <= start:
                break
            child_id, _, child_start, child_end, child_stage = child
            child_end = min(child_end, cursor)
            child_start = max(child_start, start)
            if child_end <= child_start or child_start >= cursor:
                continue
            own = cursor - child_end  # the span's own time after this child
            if own > 0:
                if owner >= 0:
                    per_stage[owner] += own
                else:
                    unattributed += own
            pieces.append((child_id, child_start, child_end, child_stage if child_stage >= 0 else owner))
            cursor = child_start
        if cursor > start:
            if owner >= 0:
                per_stage[owner] += cursor - start
            else:
                unattributed += cursor - start
        stack.extend(pieces)
    return per_stage, unattributed
