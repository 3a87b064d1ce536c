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
    # Children per parent as (-end, start, id, stage): a plain sort puts the latest end
    # first; on equal ends the earlier start (the longer child), then the lower id, so
    # the path does not depend on the order in which spans were recorded.
    children: dict[int, list[tuple[int, int, int, int]]] = {}
    root_stage = -1
    for span_id, parent_id, start, end, stage in spans:
        if span_id == root_id:
            root_stage = stage
        elif parent_id is not None:
            siblings = children.get(parent_id)
            if siblings is None:
                children[parent_id] = [(-end, start, span_id, stage)]
            else:
                siblings.append((-end, start, span_id, stage))
    for siblings in children.values():
        if len(siblings) > 1:
            siblings.sort()

    per_stage = [0] * stage_count
    unattributed = 0
    # Work items: (span id, window start, cursor, stage owning the span's own time).
    stack: list[tuple[int, int, int, int]] = [(root_id, root_start, root_end, root_stage)]
    while stack:
        span_id, start, cursor, owner = stack.pop()
        kids = children.get(span_id)
        if kids is not None:
            for neg_end, begin, child_id, child_stage in kids:
                if cursor <= start:
                    break
                child_end = -neg_end
                if child_end > cursor:
                    child_end = cursor
                child_start = begin if begin > start else start
                if child_end <= child_start:
                    continue
                own = cursor - child_end  # the span's own time after this child
                if own > 0:
                    if owner >= 0:
                        per_stage[owner] += own
                    else:
                        unattributed += own
                child_owner = child_stage if child_stage >= 0 else owner
                if child_id in children:
                    stack.append((child_id, child_start, child_end, child_owner))
                elif child_owner >= 0:  # a leaf: all of its window is its own time
                    per_stage[child_owner] += child_end - child_start
                else:
                    unattributed += child_end - child_start
                cursor = child_start
        if cursor > start:
            if owner >= 0:
                per_stage[owner] += cursor - start
            else:
                unattributed += cursor - start
    return per_stage, unattributed
