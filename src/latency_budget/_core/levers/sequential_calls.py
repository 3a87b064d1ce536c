"""``sequential_calls``: calls that ran one after another where they could have run together.

Under one parent, two or more consecutive calls of a parallelizable stage, of one kind (the
same operation), ran one after another, with no overlap and no stage span of another stage
or kind between them. Run concurrently, each run's calls would all start when its first did.
The saving is wall-clock: the stage's union before, minus its union with every run made
concurrent at once (runs in concurrent sub-agents overlap, and count once), at most the
stage's time on the critical path. Read from the trace's shape by
:func:`latency_budget._core.hints.find_hints`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from latency_budget._core.intervals import union_length
from latency_budget._core.levers.lever import Advice, AdviceFor, Lever
from latency_budget._core.levers.shape import capped, stage_calls

if TYPE_CHECKING:
    from latency_budget._core.critical_path import RecordedSpan

__all__ = ["LEVER", "find"]

# A stage span among its siblings: (start, end, span id, stage, kind, nested, the span).
_Sibling = tuple[int, int, int, int, "str | None", bool, "RecordedSpan"]


def find(
    spans: Sequence[RecordedSpan],
    root_id: int,
    parallelizable: AbstractSet[int],
    of_kind: Mapping[int, str],
    nested: AbstractSet[int],
    critical_ns: Sequence[int] | None,
) -> list[tuple[int, float, list[RecordedSpan]]]:
    """Per stage index with sequential runs: (index, its saving in ms, the spans of its runs in start order).

    ``parallelizable`` holds the stage indexes that may have a run; ``of_kind`` maps span
    ids to their kind of call (calls without one are all of one kind).
    """
    by_parent: dict[int, list[_Sibling]] = {}
    for index, span in enumerate(spans):
        span_id, parent_id, start, end, stage = span
        if stage >= 0 and span_id != root_id and parent_id is not None:
            sibling = (start, end, span_id, stage, of_kind.get(span_id), index in nested, span)
            group = by_parent.get(parent_id)
            if group is None:
                by_parent[parent_id] = [sibling]
            else:
                group.append(sibling)
    runs: dict[int, list[list[_Sibling]]] = {}  # stage index -> its sequential runs
    for siblings in by_parent.values():
        if len(siblings) >= 2:
            for run in _sequential_runs(siblings, parallelizable):
                runs.setdefault(run[0][3], []).append(run)
    found: list[tuple[int, float, list[RecordedSpan]]] = []
    for index, stage_runs in runs.items():
        calls = stage_calls(spans, index, nested)
        moved: dict[int, tuple[int, int]] = {}  # span id -> its interval with its run made concurrent
        for run in stage_runs:
            first = run[0][0]
            for start, end, span_id, *_ in run:
                moved[span_id] = (first, first + max(0, end - start))
        after = [moved.get(span[0], (span[2], span[3])) for span in calls]
        savings = capped(union_length([(s[2], s[3]) for s in calls]) - union_length(after), index, critical_ns)
        in_runs = sorted((sibling for run in stage_runs for sibling in run), key=_start_order)
        found.append((index, savings, [sibling[6] for sibling in in_runs]))
    return found


def _sequential_runs(siblings: list[_Sibling], parallelizable: AbstractSet[int]) -> list[list[_Sibling]]:
    """Runs of two or more back-to-back, non-overlapping calls of one stage and kind among siblings."""
    found: list[list[_Sibling]] = []
    siblings.sort(key=_start_order)
    run: list[_Sibling] = []
    run_end = 0  # the latest end in the run: a call starting at or after it does not overlap

    def close() -> None:
        if len(run) >= 2:
            found.append(run)

    for sibling in siblings:
        start, end, _, stage, kind, nested, _ = sibling
        if run and stage == run[0][3] and kind == run[0][4] and not nested:
            if start >= run_end:
                run.append(sibling)
                run_end = max(run_end, end)
            else:
                # Overlaps the run: these calls already run concurrently; no hint for this group.
                run = []
            continue
        close()
        # A nested span is part of a call, not a call: it starts no run, but as a step of
        # another call between two calls, it still ends one.
        run = [sibling] if stage in parallelizable and not nested else []
        run_end = end
    close()
    return found


def _start_order(sibling: _Sibling) -> tuple[int, int, int]:
    return sibling[0], sibling[1], sibling[2]  # start, then end, then span id


def advise(given: AdviceFor) -> Advice:
    """Sequential calls' basis and advice over a recording."""
    return (
        "back-to-back sibling calls, each run made concurrent: the stage's time before less after",
        f"run independent {given.stage} spans concurrently (asyncio.gather, a thread pool)",
    )


LEVER = Lever(
    name="sequential_calls",
    estimated=False,
    saves="end_to_end",
    text="{calls} ran one after another; run concurrently they would save {saving}",
    unit="call",
    changes="run_concurrently",
    fits="two or more back-to-back calls of one kind under one parent, in a stage marked parallelizable",
    controls_for="only calls of one kind (the same operation) with no other stage's span between them; runs "
    "that already overlap are left alone; the saving is wall-clock and capped at the stage's critical-path time",
    evidence="whether a later call's arguments hold an earlier call's result, and which tools have side effects "
    "(not yet read: it assumes the calls are independent)",
    never="running a protected stage's calls concurrently, or in another order",
    needs=("recorded_results",),
    advise=advise,
)
