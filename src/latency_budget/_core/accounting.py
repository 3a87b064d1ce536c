"""The accounting core shared by the span processor, the hand tracker and the CLI.

It knows nothing about OpenTelemetry: it turns per-stage measurements into a
:class:`TraceReport` under a :class:`BudgetSet`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from latency_budget._config.model import BudgetSet, Severity
from latency_budget._core.call_facts import Call
from latency_budget._core.hints import Hint
from latency_budget._core.inference import InferenceSplit
from latency_budget._core.intervals import union_length
from latency_budget._core.report import TOTAL, StageReport, TraceReport, Violation, ViolationKind

__all__ = ["LeverHints", "StageMeasurement", "busy_length", "evaluate", "union_length"]

# The latency levers' estimate for one request: its calls and its judged report in, the
# report's hints as the levers leave them out (see evaluate).
LeverHints = Callable[[Sequence[Call], TraceReport], tuple[Hint, ...]]


def busy_length(intervals: Sequence[tuple[int, int]]) -> int:
    """The busy time of intervals ``(start, end)``: the sum of their lengths (0 for one that ends first)."""
    busy = 0
    for start, end in intervals:
        if end > start:
            busy += end - start
    return busy


@dataclass(slots=True)
class StageMeasurement:
    """What one request spent in one stage."""

    actual_ms: float
    busy_ms: float
    count: int
    first_token_ms: float | None = None


def evaluate(
    budgets: BudgetSet,
    measurements: Mapping[str, StageMeasurement],
    *,
    total_actual_ms: float,
    first_token_ms: float | None = None,
    critical_ms: Mapping[str, float] | None = None,
    unattributed_ms: float | None = None,
    hints: tuple[Hint, ...] = (),
    calls: Sequence[Call] = (),
    levers: LeverHints | None = None,
    trace_id: int | None = None,
    span_id: int | None = None,
    root_name: str | None = None,
    start_time_ns: int | None = None,
    end_time_ns: int | None = None,
    hints_left_out: int = 0,
    inference: InferenceSplit | None = None,
    protected_spans: tuple[tuple[str, int, int], ...] = (),
) -> TraceReport:
    """Judge one request's measurements against ``budgets``.

    ``measurements`` is keyed by stage name; stages without one were not seen.
    ``first_token_ms`` is the request-level time to first token, when known.
    ``critical_ms`` (per stage) and ``unattributed_ms`` split the critical path, when
    a timeline is known; ``hints`` (with ``hints_left_out``, the number
    ``hints.min_saving_ms`` held back) and ``calls`` (the request's stage calls, for the
    latency levers) are passed through to the report, as ``protected_spans`` (the spans
    of protected stages, which the levers must not pass over). ``levers``, given the calls and the
    judged report, returns the report's hints as the levers leave them: ``hints`` itself
    (nothing to change), or ``hints`` with the lever hints after them, less any hint of the
    trace's shape the quality evidence speaks against (fewer loops that succeed less). ``inference`` (where
    the model calls' time went) is passed through too. This is the one
    builder of a report: nothing assigns to one after it returns.
    """
    # The records are built with keywords on a bare instance (object.__new__, then the
    # class's __init__): this runs once per trace on the application's thread, and a class
    # called with keywords packs them into a dict first, which costs about as much again
    # as building the record: about 5 K instructions per 11-field record under callgrind
    # (benchmarks/README.md, "How the figures got here").
    stage_reports: list[StageReport] = []
    violations: list[Violation] = []
    for budget in budgets.stages:
        name = budget.name
        critical = critical_ms.get(name) if critical_ms is not None else None
        measured = measurements.get(name)
        if measured is None:
            unseen = object.__new__(StageReport)
            StageReport.__init__(
                unseen,
                stage=name,
                budget_ms=budget.budget_ms,
                actual_ms=0.0,
                busy_ms=0.0,
                count=0,
                severity=budget.severity,
                first_token_budget_ms=budget.first_token_ms,
                max_calls=budget.max_calls,
                critical_ms=critical,
            )
            stage_reports.append(unseen)
            continue
        found: tuple[Violation, ...] = ()
        severity = budget.severity
        actual = measured.actual_ms
        if budget.budget_ms is not None and actual > budget.budget_ms:
            found += (_timed(name, "duration", severity, budget.budget_ms, actual),)
        ttft = measured.first_token_ms
        if budget.first_token_ms is not None and ttft is not None and ttft > budget.first_token_ms:
            found += (_timed(name, "first_token", severity, budget.first_token_ms, ttft),)
        if budget.max_calls is not None and measured.count > budget.max_calls:
            found += (Violation(name, "calls", severity, max_calls=budget.max_calls, calls=measured.count),)
        if found:
            violations.extend(found)
        seen = object.__new__(StageReport)
        StageReport.__init__(
            seen,
            stage=name,
            budget_ms=budget.budget_ms,
            actual_ms=actual,
            busy_ms=measured.busy_ms,
            count=measured.count,
            severity=severity,
            first_token_ms=ttft,
            first_token_budget_ms=budget.first_token_ms,
            max_calls=budget.max_calls,
            violations=found,
            critical_ms=critical,
        )
        stage_reports.append(seen)
    if budgets.first_token_ms is not None and first_token_ms is not None and first_token_ms > budgets.first_token_ms:
        violations.append(_timed(TOTAL, "first_token", budgets.severity, budgets.first_token_ms, first_token_ms))
    if budgets.total_ms is not None and total_actual_ms > budgets.total_ms:
        violations.append(_timed(TOTAL, "total", budgets.severity, budgets.total_ms, total_actual_ms))
    report = object.__new__(TraceReport)
    TraceReport.__init__(
        report,
        profile=budgets.profile,
        stages=tuple(stage_reports),
        total_budget_ms=budgets.total_ms,
        total_actual_ms=total_actual_ms,
        violations=tuple(violations),
        first_token_ms=first_token_ms,
        first_token_budget_ms=budgets.first_token_ms,
        unattributed_ms=unattributed_ms,
        hints=hints,
        trace_id=trace_id,
        span_id=span_id,
        root_name=root_name,
        start_time_ns=start_time_ns,
        end_time_ns=end_time_ns,
        calls=calls,
        hints_left_out=hints_left_out,
        inference=inference,
        protected_spans=protected_spans,
    )
    # Only an empty tuple is tested for emptiness: a RecordedCalls's truth is a Python-level
    # call, and one the processor gives is never empty (any other empty sequence gives no hint).
    if levers is None or (type(calls) is tuple and not calls):
        return report
    # The levers read the judged report (stage times, first token); the report they give
    # hints for is a copy (rare: most requests have no lever), built by position.
    lever_hints = levers(calls, report)
    if lever_hints is report.hints:
        return report
    return TraceReport(
        report.profile,
        report.stages,
        report.total_budget_ms,
        report.total_actual_ms,
        report.violations,
        report.first_token_ms,
        report.first_token_budget_ms,
        report.unattributed_ms,
        lever_hints,
        report.trace_id,
        report.span_id,
        report.root_name,
        report.start_time_ns,
        report.end_time_ns,
        report.calls,
        report.hints_left_out,
        report.inference,
        report.protected_spans,
    )


def _timed(stage: str, kind: ViolationKind, severity: Severity, budget_ms: float, actual_ms: float) -> Violation:
    # ns precision, without float noise
    return Violation(stage, kind, severity, budget_ms, actual_ms, round(actual_ms - budget_ms, 6))
