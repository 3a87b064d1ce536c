"""Judge an assembled trace with the in-process accounting, and annotate its root as the processor does.

The spans are replayed through :func:`latency_budget._replay.judge_roots` (the live
processor's own :class:`~latency_budget._core.trace_state.TraceState` rule), lever hints
come from the calls of recent traces as in process, and the root gains exactly what
:func:`latency_budget._core.annotate.root_annotation` gives the in-process root. No other
span changes. A root that already carries a verdict (judged in process) is left as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Literal, cast

from latency_budget import _attributes as attr
from latency_budget._config.model import BudgetConfig
from latency_budget._core.accounting import LeverHints
from latency_budget._core.annotate import root_annotation
from latency_budget._core.recent import RecentCalls
from latency_budget._core.report import TraceReport
from latency_budget._core.trace_state import TraceState
from latency_budget._replay import judge_roots
from latency_budget._serve.otlp import Received, annotated

__all__ = ["Judge", "Roots", "Verdicts"]

logger = logging.getLogger("latency_budget")

Roots = Literal["trace", "local"]


@dataclass(slots=True)
class Verdicts:
    """What judging one trace gave: its reports, and how many roots were judged, skipped or not requests."""

    reports: list[TraceReport] = field(default_factory=list)
    judged: int = 0
    already_annotated: int = 0
    not_requests: int = 0


class Judge:
    """Judges assembled traces under one budget file; one thread at a time (the server's decider)."""

    def __init__(self, config: BudgetConfig, *, roots: Roots = "trace", max_spans_per_trace: int = 10_000) -> None:
        self.config = config
        self.roots = roots
        self._max_spans = max_spans_per_trace
        self._recent = RecentCalls(on_error=_lever_hints_failed)

    def judge(self, spans: Sequence[Received]) -> Verdicts:
        """Judge the spans of one trace, giving each judged root its annotated bytes (``Received.encoded``)."""
        verdicts = Verdicts()
        whole = self.roots == "trace"
        if whole:
            root = _trace_root(spans)
            if root is None:
                return verdicts
            if attr.VERDICT in root.attributes:
                verdicts.already_annotated = 1
                return verdicts
        found = judge_roots(
            self.config,
            spans,
            max_spans_per_trace=self._max_spans,
            whole_trace=whole,
            every_root=False,
            levers=self._levers_of,
        )
        if whole and not found:
            verdicts.not_requests = 1
        for judged in found:
            record = cast("Received", judged.root)  # the spans given are the roots found
            if attr.VERDICT in record.attributes:  # local roots only: a whole-trace root was checked above
                verdicts.already_annotated += 1
                continue
            state, report = judged.state, judged.report
            extra, events = root_annotation(
                state,
                report,
                judged.stage,
                record.name,
                record.kind,
                record.scope,
                record.start_ns,
                record.end_ns,
                record.attributes,
            )
            if judged.stage >= 0:  # in process the root carries its stage label from its start
                extra = {**state.budgets.stages[judged.stage].label, **extra}
            record.encoded = annotated(record, extra, events)
            verdicts.reports.append(report)
            verdicts.judged += 1
        return verdicts

    def _levers_of(self, state: TraceState) -> LeverHints:
        """The lever estimate of one judged trace, from this instance's recent calls (as in process)."""
        return partial(RecentCalls.lever_hints, self._recent, state.names, state.budgets)


def _lever_hints_failed(exc: Exception) -> None:
    logger.debug("latency_budget serve: lever hints failed: %r", exc)  # the verdict stands without them


def _trace_root(spans: Sequence[Received]) -> Received | None:
    """The trace's span with no parent (the earliest, if several), as ``judge_roots`` picks it."""
    best: Received | None = None
    for item in spans:
        if item.parent_id is None and (best is None or (item.start_ns, item.span_id) < (best.start_ns, best.span_id)):
            best = item
    return best
