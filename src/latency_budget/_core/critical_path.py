"""Critical-path attribution: which stage owned the time that decided the request's latency.

Our own rule, walking backwards from the local root's end:

1. Start at the root with a cursor at its end.
2. Take the span's children in the order they finished, latest first (between children
   that finished at the same instant, the one that started first, then the lower span
   id), skipping those that end up empty: a child still running at the cursor is cut at
   the cursor, and its part before the span's start is cut off. The time between the
   next child's (cut) end and the cursor is the span's own time on the critical path.
3. Walk into that child with the cursor at its (cut) end, then move the span's cursor
   to the child's (cut) start and go on with the next child in that order.
4. When no child is left, the time from the span's start to the cursor is its own.

Children are cut to their parent's interval, so the pieces partition the root's
duration exactly, and each piece belongs to a span that was running at that instant.
Each piece is attributed to the innermost stage span that contains it (the span itself
or its nearest stage ancestor), or to ``unattributed``.

It resembles Jaeger UI's critical-path view but is not the same rule, and the two often
disagree on traces with overlapping siblings. Jaeger, going back from a child's start,
takes only a sibling that ended strictly before it: a sibling still running at that
instant is skipped (here it is cut at the cursor), and one that ended exactly then is
skipped too (here it is on the path); the time such a sibling ran is then the parent's
own. Jaeger also breaks ties between equal ends by the order of the spans in the trace,
where this rule prefers the earlier start, then the lower span id, so that the path
never depends on the order spans were recorded in. The tests in
``tests/unit/test_critical_path.py`` whose names mention Jaeger pin these differences.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["RecordedSpan", "critical_path_ns"]

# (span_id, parent_id or None, start_ns, end_ns, stage index or -1): one per recorded span.
# A plain tuple read by index and unpacking, not a NamedTuple: made per span on the hot
# path, a NamedTuple costs about 3,500 instructions more per span (built, read by index
# and unpacked once; callgrind, CPython 3.11: its __new__ is a Python-level call, and
# index and unpacking lose their exact-tuple fast paths), 1.7% of a standard trace.
RecordedSpan = tuple[int, "int | None", int, int, int]


def critical_path_ns(
    root_id: int, root_start: int, root_end: int, spans: Sequence[RecordedSpan], stage_count: int
) -> tuple[list[int], int]:
    """Critical nanoseconds per stage index, and the unattributed remainder.

    ``spans`` are the recorded spans of one local-root trace (the root may be among
    them, and is identified by ``root_id``). Spans whose parent was not recorded are
    unreachable and their time counts for the nearest recorded ancestor.
    """
    # Children per parent as (-end, start, id, stage, end): a plain sort puts the latest
    # end first; on equal ends the earlier start (the longer child), then the lower id, so
    # the path does not depend on the order in which spans were recorded.
    children: dict[int, list[tuple[int, int, int, int, int]]] = {}
    root_stage = -1
    for span_id, parent_id, start, end, stage in spans:
        if span_id == root_id:
            root_stage = stage
        elif parent_id is not None:
            siblings = children.get(parent_id)
            if siblings is None:
                children[parent_id] = [(-end, start, span_id, stage, end)]
            else:
                siblings.append((-end, start, span_id, stage, end))
    for siblings in children.values():
        if len(siblings) > 1:
            siblings.sort()

    # Only stage time is added up; the pieces partition the root's window, so what is
    # left of it is unattributed. Work items: (span id, window start, cursor, owner stage).
    per_stage = [0] * stage_count
    stack: list[tuple[int, int, int, int]] = [(root_id, root_start, root_end, root_stage)]
    while stack:
        span_id, start, cursor, owner = stack.pop()
        kids = children.get(span_id)
        if kids is not None:
            for _, kid_start, child_id, kid_stage, kid_end in kids:
                if cursor <= start:
                    break
                child_end = cursor if kid_end > cursor else kid_end
                begin = start if kid_start < start else kid_start
                if child_end <= begin:
                    continue
                if owner >= 0:  # the span's own time after this child
                    per_stage[owner] += cursor - child_end
                child_stage = kid_stage if kid_stage >= 0 else owner
                if child_id in children:
                    stack.append((child_id, begin, child_end, child_stage))
                elif child_stage >= 0:  # a leaf: all of its window is its own time
                    per_stage[child_stage] += child_end - begin
                cursor = begin
        if owner >= 0 and cursor > start:
            per_stage[owner] += cursor - start
    total = root_end - root_start
    unattributed = total - sum(per_stage) if total > 0 else 0
    return per_stage, unattributed
