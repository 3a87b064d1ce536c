"""The table of latency levers: one row per lever, each from its module, in the order they are reported.

Adding a lever is one module (its ``LEVER`` and its finder) and one line here; the type
checker and ``tests/unit/test_lever_registry.py`` then name each consumer that misses it
(the ``HintKind`` literal in :mod:`latency_budget._core.kinds`, the processor, ``report``,
the HTML page, the demo, docs/levers.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from latency_budget._core.levers import (
    cache,
    context_size,
    iterations,
    model_choice,
    output_length,
    reasoning,
    sequential_calls,
    streaming,
)
from latency_budget._core.levers.lever import Lever, RequestFinder, StageFinder

if TYPE_CHECKING:
    from latency_budget._core.kinds import HintKind

__all__ = ["LEVERS", "REQUEST_FINDERS", "STAGE_FINDERS"]


def _table(*rows: Lever) -> Mapping[HintKind, Lever]:
    table = {row.name: row for row in rows}
    if len(table) != len(rows):
        raise AssertionError("a lever is listed twice")
    return MappingProxyType(table)


LEVERS: Mapping[HintKind, Lever] = _table(
    sequential_calls.LEVER,
    iterations.LEVER,
    streaming.LEVER,
    cache.LEVER,
    model_choice.LEVER,
    context_size.LEVER,
    output_length.LEVER,
    reasoning.LEVER,
)

# The estimated levers' finders, in the table's order: those of the whole request, then
# those of one stage with whether they read stages with arguments, and stages with reasoning
# tokens (else with a model call).
REQUEST_FINDERS: tuple[RequestFinder, ...] = tuple(
    lever.find_in_request for lever in LEVERS.values() if lever.find_in_request is not None
)
STAGE_FINDERS: tuple[tuple[StageFinder, bool, bool], ...] = tuple(
    (lever.find_in_stage, lever.keyed, lever.reasoned) for lever in LEVERS.values() if lever.find_in_stage is not None
)
