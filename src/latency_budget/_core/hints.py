"""Where time could be won, read from a trace's shape: the hints of ``sequential_calls`` and ``iterations``.

Each lever is a module of :mod:`latency_budget._core.levers` (what it finds, and why);
this is the one pass the processor makes over a trace's stage spans for both. Stages that
are ``protected`` are never read: no lever moves or skips a protected stage's work.

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
from latency_budget._core.call_facts import RawCall
from latency_budget._core.critical_path import RecordedSpan
from latency_budget._core.kinds import HintKind
from latency_budget._core.levers import iterations, sequential_calls
from latency_budget._core.levers.sequential_calls import call_text

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
    # For ``sequential_calls``: whether the calls' independence was checked on their recorded
    # arguments and results (True) or assumed (False). For people (``report``), not on the trace.
    checked: bool | None = None


def find_hints(
    budgets: BudgetSet,
    root_id: int,
    spans: Sequence[RecordedSpan],
    counts: Sequence[int] | None = None,
    names: Mapping[int, str] | None = None,
    kinds: Callable[[], Mapping[int, str]] | None = None,
    nested: AbstractSet[int] = frozenset(),
    critical_ns: Sequence[int] | None = None,
    raw: Sequence[RawCall] = (),
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
    ``raw`` holds the recorded stage spans' attributes: their tool names, arguments and
    results are read only when a stage may earn a sequential-calls hint, with the
    profile's ``side_effects``.
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
    protected = budgets.protected_indexes
    parallelizable = {
        i for i, stage in enumerate(stages) if stage.parallelizable and counts[i] >= 2 and i not in protected
    }
    over_calls = [
        i
        for i, stage in enumerate(stages)
        if stage.max_calls is not None and counts[i] > stage.max_calls and i not in protected
    ]
    if not parallelizable and not over_calls:
        return _NOTHING
    least_ms = budgets.min_saving_ms
    left_out = 0
    hints: list[Hint] = []
    known = names if names is not None else _NO_NAMES
    if parallelizable:
        of_kind = kinds() if kinds is not None else _NO_NAMES
        recorded = {call[0]: call_text(call[5]) for call in raw[:]} if raw else {}
        runs = sequential_calls.find(
            spans, root_id, parallelizable, of_kind, nested, critical_ns, recorded, budgets.side_effects
        )
        for index, savings, in_runs, checked in runs:
            if savings > 0 and savings < least_ms:
                left_out += 1
            elif savings > 0:
                ids, span_names = _named(in_runs, known)
                name = stages[index].name
                hints.append(Hint("sequential_calls", name, len(in_runs), savings, ids, span_names, checked=checked))
    for index in over_calls:
        budget = stages[index]
        found = iterations.find(spans, index, budget.max_calls or 0, nested, critical_ns)
        if found is not None:
            extra, count, past = found
            if extra > 0 and extra < least_ms:
                left_out += 1
            elif extra > 0:
                ids, span_names = _named(past, known)
                hints.append(Hint("iterations", budget.name, count, extra, ids, span_names))
    hints.sort(key=lambda h: (h.kind != "sequential_calls", -h.potential_savings_ms))
    return tuple(hints), left_out


def _named(spans: Sequence[RecordedSpan], names: Mapping[int, str]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The ids and names of the first NAMED_SPANS of ``spans`` (already in start order)."""
    ids = tuple(span[0] for span in spans[:NAMED_SPANS])
    return ids, tuple(names.get(span_id, "") for span_id in ids)
