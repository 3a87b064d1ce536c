"""Judge an assembled trace with the in-process accounting, and annotate its root as the processor does.

The spans are replayed through :func:`latency_budget._replay.judge_roots` (the live
processor's own :class:`~latency_budget._core.trace_state.TraceState` rule), lever hints
come from the calls of recent traces as in process, and the root gains exactly what
:func:`latency_budget._core.annotate.root_annotation` gives the in-process root. No other
span changes. A root that already carries a verdict (judged in process) is left as it is.

A trace with several parentless spans (a second service that started its own trace
context, a gateway span exported apart) is judged as several requests: each parentless
span on the spans under it, each with its own verdict, so none takes another's. A span
whose parents never reach a parentless span counts with the earliest one.

With ``--roots trace``, a root judged on spans one of whose parents is missing (another
instance holds it, :mod:`.partial`) is marked ``missing_parent``: its attributes say so and
its report's ``partial`` names the reason, which keeps it out of the budget metrics.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Literal, cast

from latency_budget import _attributes as attr
from latency_budget._config.model import BudgetConfig
from latency_budget._core.accounting import LeverHints
from latency_budget._core.annotate import root_annotation
from latency_budget._core.quality import Evaluation
from latency_budget._core.recent import RecentCalls
from latency_budget._core.report import TraceReport
from latency_budget._core.trace_state import TraceState
from latency_budget._replay import judge_roots
from latency_budget._serve.otlp import Received, annotated
from latency_budget._serve.partial import PartialReason, gaps, marks

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
    partial: int = 0  # judged roots marked partial (missing_parent)


class Judge:
    """Judges assembled traces under one budget file; one thread at a time (the server's decider)."""

    def __init__(self, config: BudgetConfig, *, roots: Roots = "trace", max_spans_per_trace: int = 10_000) -> None:
        self.config = config
        self.roots = roots
        self._max_spans = max_spans_per_trace
        self._recent = RecentCalls(on_error=_lever_hints_failed)
        self._recent.join_evaluations()  # evaluation log records (serve's /v1/logs) name recent calls

    def add_evaluation(self, trace_id: int, span_id: int | None, response: str | None, evaluation: Evaluation) -> None:
        """An evaluation result for a call of a trace held open: joined when the trace is judged (in-process rule)."""
        self._recent.add_evaluation(trace_id, span_id, response, evaluation)

    def judge(self, spans: Sequence[Received]) -> Verdicts:
        """Judge the spans of one trace, giving each judged root its annotated bytes (``Received.encoded``)."""
        verdicts = Verdicts()
        if self.roots != "trace":
            self._judge(spans, verdicts, whole=False)
            return verdicts
        missing = gaps(spans)
        for root, members in _by_parentless_span(spans):
            partial: PartialReason | None = None
            if missing and any(item.span_id in missing for item in members):
                partial = "missing_parent"
            if attr.VERDICT in root.attributes:
                verdicts.already_annotated += 1
            elif not self._judge(members, verdicts, whole=True, partial=partial):
                verdicts.not_requests += 1
        return verdicts

    def _judge(
        self, spans: Sequence[Received], verdicts: Verdicts, *, whole: bool, partial: PartialReason | None = None
    ) -> bool:
        """Judge ``spans`` (one parentless span and its spans, or a trace's local roots) into ``verdicts``."""
        found = judge_roots(
            self.config,
            spans,
            max_spans_per_trace=self._max_spans,
            whole_trace=whole,
            every_root=False,
            levers=self._levers_of,
        )
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
            if partial is not None:
                extra = {**extra, **marks(partial)}
                report = dataclasses.replace(report, partial=partial)
                verdicts.partial += 1
            record.encoded = annotated(record, extra, events)
            verdicts.reports.append(report)
            verdicts.judged += 1
        return bool(found)

    def _levers_of(self, state: TraceState) -> LeverHints:
        """The lever estimate of one judged trace, from this instance's recent calls (as in process)."""
        return partial(RecentCalls.lever_hints, self._recent, state.names, state.budgets)


def _lever_hints_failed(exc: Exception) -> None:
    logger.debug("latency_budget serve: lever hints failed: %r", exc)  # the verdict stands without them


def _by_parentless_span(spans: Sequence[Received]) -> list[tuple[Received, list[Received]]]:
    """The trace split by parentless span: each with the spans under it, earliest first.

    A span whose chain of parents does not reach a parentless span (its parent never
    arrived, or a cycle) goes with the earliest one, whose account held every span of the
    trace before several parentless spans were told apart. One parentless span: the trace
    whole, as it came.
    """
    parentless = [item for item in spans if item.parent_id is None]
    if len(parentless) <= 1 or len({item.span_id for item in parentless}) < len(parentless):
        return [(parentless[0], list(spans))] if parentless else []  # one, or repeated ids: the earliest rule
    parentless.sort(key=lambda item: (item.start_ns, item.span_id))
    earliest = parentless[0]
    by_id = {item.span_id: item for item in spans}
    owner: dict[int, Received] = {item.span_id: item for item in parentless}
    groups: dict[int, list[Received]] = {item.span_id: [] for item in parentless}
    for item in spans:
        path: list[int] = []
        seen: set[int] = set()
        step = item
        while True:
            root = owner.get(step.span_id)
            if root is not None:
                break
            parent = by_id.get(step.parent_id) if step.parent_id is not None else None
            if parent is None or parent.span_id in seen or parent is step:
                root = earliest
                break
            path.append(step.span_id)
            seen.add(step.span_id)
            step = parent
        for span_id in path:
            owner[span_id] = root
        groups[root.span_id].append(item)
    return [(root, groups[root.span_id]) for root in parentless]
