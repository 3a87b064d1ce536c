"""The kinds of hint (the latency levers): one table that every consumer reads.

Adding a kind means one entry in :data:`KINDS` plus the function that finds it. The
type checker then names the places that must say something about it (``match``
statements that end in :func:`unknown_kind`), and ``tests/unit/test_lever_kinds.py`` fails
for every other consumer (the gate, the log text, the CLI's advice, the demo).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, NoReturn, get_args

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
    "sequential_calls", "iterations", "streaming", "cache", "model_choice", "context_size", "output_length"
]
# The levers estimated from recent calls (see _core/levers.py); the other two are read from the trace's shape.
LeverKind = Literal["streaming", "cache", "model_choice", "context_size", "output_length"]
Saves = Literal["end_to_end", "first_token"]


@dataclass(frozen=True, slots=True)
class KindInfo:
    """One kind of hint.

    ``estimated``: from the calls seen before (the levers), else from the trace's shape.
    ``saves``: whose time the saving is, the whole request's or its first token's.
    ``text``: the hint's one-line description, with ``{calls}`` (``3 calls``) and
    ``{saving}`` (``230ms``). ``unit``: what the estimate scales with, for people.
    """

    name: HintKind
    estimated: bool
    saves: Saves
    text: str
    unit: str


def _table(*rows: KindInfo) -> Mapping[HintKind, KindInfo]:
    table = {row.name: row for row in rows}
    if tuple(table) != get_args(HintKind):  # the Literal and the table name the same kinds, in order
        raise AssertionError(f"KINDS {tuple(table)} != HintKind {get_args(HintKind)}")
    return MappingProxyType(table)


KINDS: Mapping[HintKind, KindInfo] = _table(
    KindInfo(
        "sequential_calls",
        False,
        "end_to_end",
        "{calls} ran one after another; run concurrently they would save {saving}",
        "call",
    ),
    KindInfo("iterations", False, "end_to_end", "{calls} past max_calls took {saving}", "call"),
    KindInfo(
        "streaming",
        True,
        "first_token",
        "streaming the response would bring the first token about {saving} sooner",
        "call",
    ),
    KindInfo(
        "cache",
        True,
        "end_to_end",
        "{calls} repeated an identical earlier call; a cache would save about {saving}",
        "call",
    ),
    KindInfo("model_choice", True, "end_to_end", "a faster model for {calls} would save about {saving}", "call"),
    KindInfo(
        "context_size",
        True,
        "end_to_end",
        "trimming the context of {calls} to the usual size would save about {saving}",
        "input token",
    ),
    KindInfo(
        "output_length",
        True,
        "end_to_end",
        "cutting the output of {calls} to the usual length would save about {saving}",
        "output token",
    ),
)

HINT_KINDS: tuple[HintKind, ...] = tuple(KINDS)
LEVER_KINDS: tuple[LeverKind, ...] = get_args(LeverKind)
SHAPE_KINDS: tuple[HintKind, ...] = tuple(kind for kind, info in KINDS.items() if not info.estimated)
if set(LEVER_KINDS) != {kind for kind, info in KINDS.items() if info.estimated}:
    raise AssertionError("LeverKind must name exactly the estimated kinds of KINDS")


def unknown_kind(kind: NoReturn) -> NoReturn:
    """The last case of a ``match`` on a kind: the type checker names every ``match`` that misses one."""
    raise AssertionError(f"unknown hint kind {kind!r}")
