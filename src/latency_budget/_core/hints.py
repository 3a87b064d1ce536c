"""Where time could be won: sequential calls that could run in parallel, and extra iterations.

Both count calls, not spans: a span nested inside a span of its own stage is part of
that call (see calls.py), and is never a call of its own here.

``sequential_calls``: under one parent, two or more consecutive calls of a
parallelizable stage, of one kind (the same operation), ran one after another, with no
overlap and no stage span of another stage or kind between them. Run concurrently,
each run's calls would all start when its first did.

``iterations``: a stage made more calls than its ``max_calls``. The calls beyond the
limit (in start order) are the time an agent that planned better would not spend.

One hint per kind and stage, whatever the number of runs: its saving is wall-clock, the
stage's union before minus its union with all of the lever's changes applied together
(runs in concurrent sub-agents overlap, and count once), and at most the stage's time on
the request's critical path. A hint is given only when it would save at least the
profile's ``min_saving_ms``; one left out is counted (``TraceReport.hints_left_out``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from latency_budget._config.model import BudgetSet
from latency_budget._core.critical_path import RecordedSpan
from latency_budget._core.intervals import union_length
from latency_budget._core.kinds import HintKind

__all__ = ["NAMED_SPANS", "Hint", "HintKind", "find_hints"]


# A hint names at most this many of its spans (the first, in start order): enough to find
# them on a timeline, and a bounded attribute whatever the trace holds.
NAMED_SPANS = 5

_NO_NAMES: Mapping[int, str] = {}
_NOTHING: tuple[tuple[Hint, ...], int] = ((), 0)


@dataclass(slots=True)
class Hint:
    """One opportunity to make the request faster.

    ``span_ids`` and ``span_names`` are the first :data:`NAMED_SPANS` spans it is about,
    in start order: the calls of a sequential run, or the calls beyond ``max_calls``. A
    name is ``""`` when the caller did not record it. ``basis_count`` is the number of
    calls an estimate rests on, for the levers estimated from recent calls (``None`` for
    the two read from the trace's shape).
    """

    kind: HintKind
    stage: str
    span_count: int
    potential_savings_ms: float
    span_ids: tuple[int, ...] = ()
    span_names: tuple[str, ...] = ()
    basis_count: int | None = None
    basis: str | None = None  # for ``context_size``: what its fit is of (``ttft``, ``duration_given_output``...)


def find_hints(
    budgets: BudgetSet,
    root_id: int,
    spans: Sequence[RecordedSpan],
    counts: Sequence[int] | None = None,
    names: Mapping[int, str] | None = None,
    kinds: Callable[[], Mapping[int, str]] | None = None,
    nested: AbstractSet[int] = frozenset(),
    critical_ns: Sequence[int] | None = None,
) -> tuple[tuple[Hint, ...], int]:
    """Hints for one trace, sequential-call hints first, then iterations, by savings; and how many were left out.

    A hint that would save less than ``min_saving_ms`` (but something) is left out, and
    counted in the second value, as the levers' findings are (``report``'s left-out count).

    ``counts`` (calls per stage index, when the caller already has them) lets a trace
    with nothing to hint skip the work: most traces have no repeated stage. ``names``
    (span id -> span name, for stage spans) names the spans of each hint; ``kinds``
    gives (span id -> operation, for stage spans), which calls are of one kind (calls
    without one are all of one kind); it is called only when a stage may earn a
    sequential-calls hint. ``nested`` holds the positions in ``spans`` of
    stage spans nested in a call of their own stage: parts of a call, not calls.
    ``critical_ns`` (per stage index) caps each saving at the stage's critical-path time.
    """
    stages = budgets.stages
    if counts is None:
        tally = [0] * len(stages)
        for index, span in enumerate(spans):
            if span[4] >= 0 and index not in nested:
                tally[span[4]] += 1
        counts = tally
    for index, least in budgets.hint_thresholds:
        if counts[index] >= least:
            break
    else:
        return _NOTHING
    parallelizable = {i for i, stage in enumerate(stages) if stage.parallelizable and counts[i] >= 2}
    over_calls = [i for i, stage in enumerate(stages) if stage.max_calls is not None and counts[i] > stage.max_calls]
    if not parallelizable and not over_calls:
        return _NOTHING
    least_ms = budgets.min_saving_ms
    left_out = 0
    hints: list[Hint] = []
    known = names if names is not None else _NO_NAMES
    runs: dict[int, list[list[_Sibling]]] = {}  # stage index -> its sequential runs
    if parallelizable:
        of_kind = kinds() if kinds is not None else _NO_NAMES
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
        for siblings in by_parent.values():
            if len(siblings) >= 2:
                for run in _sequential_runs(siblings, parallelizable):
                    runs.setdefault(run[0][3], []).append(run)
    for index, stage_runs in runs.items():
        calls = _calls(spans, index, nested)
        moved: dict[int, tuple[int, int]] = {}  # span id -> its interval with its run made concurrent
        for run in stage_runs:
            first = run[0][0]
            for start, end, span_id, *_ in run:
                moved[span_id] = (first, first + max(0, end - start))
        after = [moved.get(span[0], (span[2], span[3])) for span in calls]
        savings = _capped(union_length([(s[2], s[3]) for s in calls]) - union_length(after), index, critical_ns)
        if savings > 0 and savings < least_ms:
            left_out += 1
        elif savings > 0:
            in_runs = sorted((sibling for run in stage_runs for sibling in run), key=_start_order)
            ids, span_names = _named([sibling[6] for sibling in in_runs], known)
            hints.append(Hint("sequential_calls", stages[index].name, len(in_runs), savings, ids, span_names))
    for index in over_calls:
        budget = stages[index]
        limit = budget.max_calls or 0
        calls = _calls(spans, index, nested)
        if len(calls) > limit:
            kept = [(s[2], s[3]) for s in calls[:limit]]
            removed = union_length([(s[2], s[3]) for s in calls]) - (union_length(kept) if kept else 0)
            extra = _capped(removed, index, critical_ns)
            if extra > 0 and extra < least_ms:
                left_out += 1
            elif extra > 0:
                ids, span_names = _named(calls[limit:], known)
                hints.append(Hint("iterations", budget.name, len(calls), extra, ids, span_names))
    hints.sort(key=lambda h: (h.kind != "sequential_calls", -h.potential_savings_ms))
    return tuple(hints), left_out


def _calls(spans: Sequence[RecordedSpan], index: int, nested: AbstractSet[int]) -> list[RecordedSpan]:
    """The calls of stage ``index`` (its spans not nested in a call of their own), in start order."""
    return sorted(
        (s for n, s in enumerate(spans) if s[4] == index and n not in nested), key=lambda s: (s[2], s[3], s[0])
    )


def _capped(saving_ns: int, index: int, critical_ns: Sequence[int] | None) -> float:
    """A wall-clock saving of stage ``index`` in ms, at most the stage's time on the critical path."""
    if critical_ns is not None and saving_ns > critical_ns[index]:
        saving_ns = critical_ns[index]
    return max(0, saving_ns) / 1e6


def _named(spans: Sequence[RecordedSpan], names: Mapping[int, str]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The ids and names of the first NAMED_SPANS of ``spans`` (already in start order)."""
    ids = tuple(span[0] for span in spans[:NAMED_SPANS])
    return ids, tuple(names.get(span_id, "") for span_id in ids)


# A stage span among its siblings: (start, end, span id, stage, kind, nested, the span).
_Sibling = tuple[int, int, int, int, "str | None", bool, RecordedSpan]


def _sequential_runs(siblings: list[_Sibling], parallelizable: set[int]) -> list[list[_Sibling]]:
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
