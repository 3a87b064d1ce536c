"""The latency levers: one module each, behind one interface (:class:`Lever`), in one table (:data:`LEVERS`).

Two read a trace's shape (``sequential_calls``, ``iterations``: found by
:func:`latency_budget._core.hints.find_hints`); six are estimated from the calls seen
before, a :class:`Baseline` (:func:`request_levers`): ``streaming``, ``cache``,
``model_choice``, ``context_size``, ``output_length``, ``reasoning``. Each module's docstring says what
it finds and how it estimates the saving; its ``LEVER`` says what it changes, what it
controls for, what quality evidence it needs and what it never proposes.

Every saving is a wall-clock saving of the stage (overlapping calls count once, see
:func:`~latency_budget._core.estimators.shrunk_saving_ns`), capped at the stage's time
in the request and, for total-time levers, at its critical-path time. A lever that would
save less than the profile's ``hints.min_saving_ms`` in a request is left out, as the
hints read from the trace's shape are. No lever reads a protected stage's calls, and
``streaming`` claims no saving that a protected stage's check would have to pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from latency_budget._core.levers.baseline import (
    DIFFERING,
    FIT_NAMES,
    MIN_FIRST_TOKEN_CALLS,
    MIN_MODEL_CALLS,
    MIN_RATE_CALLS,
    MIN_STREAMED,
    Baseline,
    ContextBasis,
    FitName,
    ModelStats,
    RecordedBaseline,
    Result,
    merged_result,
    passed_fits,
    summarise,
)
from latency_budget._core.levers.cache import CACHE_ASSUMED, CACHE_RESULTS
from latency_budget._core.levers.finding import FITTED, Finding, fit_caption
from latency_budget._core.levers.lever import AdviceFor, Change, Evidence, Lever
from latency_budget._core.levers.request import request_levers
from latency_budget._core.levers.table import LEVERS

if TYPE_CHECKING:
    from latency_budget._core.kinds import LeverKind

# The estimated levers, in the table's order (kinds.LEVER_KINDS, checked there against LeverKind).
LEVER_KINDS: tuple[LeverKind, ...] = tuple(name for name, lever in LEVERS.items() if lever.estimated)  # type: ignore[misc]

__all__ = [
    "CACHE_ASSUMED",
    "CACHE_RESULTS",
    "DIFFERING",
    "FITTED",
    "FIT_NAMES",
    "LEVERS",
    "LEVER_KINDS",
    "MIN_FIRST_TOKEN_CALLS",
    "MIN_MODEL_CALLS",
    "MIN_RATE_CALLS",
    "MIN_STREAMED",
    "AdviceFor",
    "Baseline",
    "Change",
    "ContextBasis",
    "Evidence",
    "Finding",
    "FitName",
    "Lever",
    "ModelStats",
    "RecordedBaseline",
    "Result",
    "fit_caption",
    "merged_result",
    "passed_fits",
    "request_levers",
    "summarise",
]
