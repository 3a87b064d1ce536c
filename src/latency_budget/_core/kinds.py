"""The kinds of hint (the latency levers): their names, and the one table every consumer reads.

The table, :data:`KINDS`, is :data:`latency_budget._core.levers.LEVERS`: one row per lever,
a :class:`~latency_budget._core.levers.Lever` defined in the lever's own module. Adding a
kind means a module with its ``LEVER``, a line in that table and its name in
:data:`HintKind`. The type checker then names the ``match`` statements that end in
:func:`unknown_kind`, and ``tests/unit/test_lever_kinds.py`` and
``tests/unit/test_lever_registry.py`` fail for every other consumer (the gate, the log
text, the CLI's advice, the HTML page, the demo, the README).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NoReturn, get_args

from latency_budget._core.levers.lever import Lever
from latency_budget._core.levers.table import LEVERS

__all__ = [
    "HINT_KINDS",
    "KINDS",
    "LEVER_KINDS",
    "SHAPE_KINDS",
    "HintKind",
    "KindInfo",
    "LeverKind",
    "Saves",
    "unknown_kind",
]

HintKind = Literal[
    "sequential_calls", "iterations", "streaming", "cache", "model_choice", "context_size", "output_length", "reasoning"
]
# The levers estimated from recent calls (see _core/levers); the other two are read from the trace's shape.
LeverKind = Literal["streaming", "cache", "model_choice", "context_size", "output_length", "reasoning"]
Saves = Literal["end_to_end", "first_token"]

KindInfo = Lever  # a row of the table (its older name)

KINDS: Mapping[HintKind, Lever] = LEVERS
if tuple(KINDS) != get_args(HintKind):  # the Literal and the table name the same kinds, in order
    raise AssertionError(f"KINDS {tuple(KINDS)} != HintKind {get_args(HintKind)}")

HINT_KINDS: tuple[HintKind, ...] = tuple(KINDS)
LEVER_KINDS: tuple[LeverKind, ...] = get_args(LeverKind)
SHAPE_KINDS: tuple[HintKind, ...] = tuple(kind for kind, info in KINDS.items() if not info.estimated)
if set(LEVER_KINDS) != {kind for kind, info in KINDS.items() if info.estimated}:
    raise AssertionError("LeverKind must name exactly the estimated kinds of KINDS")


def unknown_kind(kind: NoReturn) -> NoReturn:
    """The last case of a ``match`` on a kind: the type checker names every ``match`` that misses one."""
    raise AssertionError(f"unknown hint kind {kind!r}")
