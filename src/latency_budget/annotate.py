"""Render a :class:`TraceReport` as span attributes and violation events."""

from __future__ import annotations

from latency_budget import attributes as attr
from latency_budget.hints import Hint
from latency_budget.report import TraceReport, Violation

__all__ = ["hint_attributes", "root_attributes", "violation_attributes"]

AttributeMap = dict[str, "str | bool | int | float | tuple[str, ...]"]


def root_attributes(report: TraceReport, *, truncated: bool = False) -> AttributeMap:
    """The attributes the local root span gains. All ``_ms`` values are floats."""
    out: AttributeMap = {
        attr.VIOLATED: report.violated,
        attr.OVER_BUDGET_STAGES: report.over_budget_stages,
        attr.TOTAL_ACTUAL_MS: float(report.total_actual_ms),
        attr.PROFILE: report.profile,
    }
    if report.total_budget_ms is not None:
        out[attr.TOTAL_BUDGET_MS] = float(report.total_budget_ms)
    warn = report.warn_stages
    if warn:
        out[attr.WARN_STAGES] = warn
    if report.first_token_ms is not None:
        out[attr.FIRST_TOKEN_MS] = float(report.first_token_ms)
    if truncated:
        out[attr.TRUNCATED] = True
    if report.unattributed_ms is not None:
        out[attr.UNATTRIBUTED_MS] = float(report.unattributed_ms)
    critical_stage = report.critical_stage
    if critical_stage is not None:
        out[attr.CRITICAL_STAGE] = critical_stage
    for stage in report.stages:
        if not stage.seen:
            continue
        name = stage.stage
        out[attr.stage_key(name, "actual_ms")] = float(stage.actual_ms)
        out[attr.stage_key(name, "busy_ms")] = float(stage.busy_ms)
        out[attr.stage_key(name, "count")] = stage.count
        if stage.budget_ms is not None:
            out[attr.stage_key(name, "budget_ms")] = float(stage.budget_ms)
        if stage.first_token_ms is not None:
            out[attr.stage_key(name, "first_token_ms")] = float(stage.first_token_ms)
    for stage in report.stages:
        if stage.critical_ms:  # stages with critical time, seen or not (a parent stage may own it)
            out[attr.stage_key(stage.stage, "critical_ms")] = float(stage.critical_ms)
    return out


def hint_attributes(hint: Hint) -> AttributeMap:
    """The attributes of one ``latency_budget.hint`` event."""
    return {
        attr.HINT_KIND: hint.kind,
        attr.STAGE: hint.stage,
        attr.HINT_SPAN_COUNT: hint.span_count,
        attr.HINT_SAVINGS_MS: float(hint.potential_savings_ms),
    }


def violation_attributes(violation: Violation) -> AttributeMap:
    """The attributes of one ``latency_budget.violation`` event (or log record)."""
    out: AttributeMap = {
        attr.STAGE: violation.stage,
        attr.KIND: violation.kind,
        attr.SEVERITY: violation.severity,
    }
    if violation.kind == "calls":
        if violation.max_calls is not None:
            out[attr.MAX_CALLS] = violation.max_calls
        if violation.calls is not None:
            out[attr.CALLS] = violation.calls
    else:
        if violation.budget_ms is not None:
            out[attr.BUDGET_MS] = float(violation.budget_ms)
        if violation.actual_ms is not None:
            out[attr.ACTUAL_MS] = float(violation.actual_ms)
        if violation.over_ms is not None:
            out[attr.OVER_MS] = float(violation.over_ms)
    return out
