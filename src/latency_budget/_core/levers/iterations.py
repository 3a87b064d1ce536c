"""``iterations``: a stage made more calls than its ``max_calls``.

The calls beyond the limit (in start order) are the time an agent that planned better
would not spend: the stage's union less its union over the calls within the limit, at
most the stage's time on the critical path. Read from the trace's shape by
:func:`latency_budget._core.hints.find_hints`.

Quality beside it: in ``report`` and in process (``RecentCalls.add_loops``), the saving is claimed only where the
requests whose stage kept within ``max_calls`` succeeded as often as those past it (their
calls' error status, guardrail blocks and refusals, and evaluation scores: a
non-inferiority test within the budget file's ``quality.max_drop``,
:func:`~latency_budget._core.levers.weigh.weigh_outcomes`); where fewer loops succeed less,
``report`` says the trade instead, and with no such data it says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING

from latency_budget._core.intervals import union_length
from latency_budget._core.levers.lever import Advice, AdviceFor, Lever
from latency_budget._core.levers.shape import capped, stage_calls

if TYPE_CHECKING:
    from latency_budget._core.critical_path import RecordedSpan

__all__ = ["LEVER", "find"]


def find(
    spans: Sequence[RecordedSpan],
    index: int,
    limit: int,
    nested: AbstractSet[int],
    critical_ns: Sequence[int] | None,
) -> tuple[float, int, list[RecordedSpan]] | None:
    """Stage ``index``'s calls past ``limit``: (their saving in ms, the stage's calls, those past it), if any."""
    calls = stage_calls(spans, index, nested)
    if len(calls) <= limit:
        return None
    kept = [(s[2], s[3]) for s in calls[:limit]]
    removed = union_length([(s[2], s[3]) for s in calls]) - (union_length(kept) if kept else 0)
    return capped(removed, index, critical_ns), len(calls), calls[limit:]


def advise(given: AdviceFor) -> Advice:
    """Iterations' basis and advice over a recording."""
    return (
        "the calls past max_calls, in start order",
        f"cut {given.stage} iterations: better tools or a planning step, or a lower max_calls",
    )


LEVER = Lever(
    name="iterations",
    estimated=False,
    saves="end_to_end",
    text="{calls} past max_calls took {saving}",
    unit="call",
    changes="skip_calls",
    fits="a stage with a max_calls that made more calls than that",
    controls_for="counts calls, not spans (a span nested in a call of its own stage is part of it); the saving "
    "is wall-clock and capped at the stage's critical-path time",
    evidence="the success (no call in error, blocked or refused) and evaluation scores of the requests within "
    "max_calls against those past it: no saving is claimed where fewer loops are not shown to succeed as often "
    "(within quality.max_drop); with neither, it says so",
    never="skipping a protected stage's calls",
    needs=("task_success", "error_status", "guardrail_outcomes", "evaluation_scores"),
    advise=advise,
)
