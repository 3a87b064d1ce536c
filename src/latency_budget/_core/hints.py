"""Where time could be won: sequential calls that could run in parallel, and extra iterations.

``sequential_calls``: under one parent, two or more consecutive children of a
parallelizable stage ran one after another, with no overlap and no span of another
stage between them. Running them concurrently would save the sum of their durations
minus the longest one.

``iterations``: a stage ran more spans than its ``max_calls``. The calls beyond the
limit (in start order) are the time an agent that planned better would not spend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from latency_budget._config.model import BudgetSet
from latency_budget._core.critical_path import RecordedSpan

__all__ = ["NAMED_SPANS", "Hint", "HintKind", "find_hints"]

# The last five are the levers estimated from recent calls (see _core/levers.py).
HintKind = Literal[
    "sequential_calls", "iterations", "streaming", "cache", "model_choice", "context_size", "output_length"
]

# A hint names at most this many of its spans (the first, in start order): enough to find
# them on a timeline, and a bounded attribute whatever the trace holds.
NAMED_SPANS = 5


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


def find_hints(
    budgets: BudgetSet,
    root_id: int,
    spans: Sequence[RecordedSpan],
    counts: Sequence[int] | None = None,
    names: Mapping[int, str] | None = None,
) -> tuple[Hint, ...]:
    """Hints for one trace, sequential-call hints first, then iterations, in stage order.

    ``counts`` (spans per stage index, when the caller already has them) lets a trace
    with nothing to hint skip the work: most traces have no repeated stage. ``names``
    (span id -> span name, for stage spans) names the spans of each hint.
    """
    stages = budgets.stages
    if counts is None:
        counts = [0] * len(stages)
        for span in spans:
            if span[4] >= 0:
                counts[span[4]] += 1
    for index, least in budgets.hint_thresholds:
        if counts[index] >= least:
            break
    else:
        return ()
    parallelizable = {i for i, stage in enumerate(stages) if stage.parallelizable and counts[i] >= 2}
    over_calls = [i for i, stage in enumerate(stages) if stage.max_calls is not None and counts[i] > stage.max_calls]
    if not parallelizable and not over_calls:
        return ()
    hints: list[Hint] = []
    known = names if names is not None else {}
    if parallelizable:
        by_parent: dict[int, list[RecordedSpan]] = {}
        for span in spans:
            if span[0] != root_id and span[1] is not None and span[4] >= 0:
                by_parent.setdefault(span[1], []).append(span)
        for siblings in by_parent.values():
            if len(siblings) >= 2:
                hints.extend(_sequential_runs(budgets, siblings, parallelizable, known))
    for index in over_calls:
        stage = stages[index]
        limit = stage.max_calls or 0
        calls = sorted((s for s in spans if s[4] == index), key=lambda s: (s[2], s[3], s[0]))
        if len(calls) > limit:
            extra = sum(max(0, end - start) for _, _, start, end, _ in calls[limit:])
            ids, span_names = _named(calls[limit:], known)
            hints.append(Hint("iterations", stage.name, len(calls), extra / 1e6, ids, span_names))
    hints.sort(key=lambda h: (h.kind != "sequential_calls", -h.potential_savings_ms))
    return tuple(hints)


def _named(spans: Sequence[RecordedSpan], names: Mapping[int, str]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The ids and names of the first NAMED_SPANS of ``spans`` (already in start order)."""
    ids = tuple(span[0] for span in spans[:NAMED_SPANS])
    return ids, tuple(names.get(span_id, "") for span_id in ids)


def _sequential_runs(
    budgets: BudgetSet, siblings: list[RecordedSpan], parallelizable: set[int], names: Mapping[int, str]
) -> list[Hint]:
    """Runs of back-to-back, non-overlapping same-stage siblings (stage siblings only)."""
    found: list[Hint] = []
    siblings.sort(key=lambda s: (s[2], s[3], s[0]))
    run: list[RecordedSpan] = []
    run_end = 0  # the latest end in the run: a span starting at or after it does not overlap

    def close() -> None:
        if len(run) >= 2:
            durations = [max(0, end - start) for _, _, start, end, _ in run]
            savings = sum(durations) - max(durations)
            if savings > 0:
                ids, span_names = _named(run, names)
                name = budgets.stages[run[0][4]].name
                found.append(Hint("sequential_calls", name, len(run), savings / 1e6, ids, span_names))

    for span in siblings:
        stage = span[4]
        if run and stage == run[0][4]:
            if span[2] >= run_end:
                run.append(span)
                run_end = max(run_end, span[3])
            else:
                # Overlaps the run: these calls already run concurrently; no hint for this group.
                run = []
            continue
        close()
        run = [span] if stage in parallelizable else []
        run_end = span[3]
    close()
    return found
