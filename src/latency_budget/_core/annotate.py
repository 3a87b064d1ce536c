"""Render a :class:`TraceReport` as span attributes and violation events."""

from __future__ import annotations

from latency_budget import _attributes as attr
from latency_budget._core.hints import Hint
from latency_budget._core.report import TraceReport, Violation

__all__ = ["hint_attributes", "root_attributes", "violation_attributes"]

AttributeMap = dict[str, "str | bool | int | float | tuple[str, ...]"]


def root_attributes(report: TraceReport, *, truncated: bool = False) -> AttributeMap:
    """The attributes the local root span gains. All ``_ms`` values are floats.

    The verdicts (violated, over-budget and warn stages, critical stage) are the report's own.
    """
    out: AttributeMap = {}
    for stage in report.stages:
        name = stage.stage
        keys = _KEYS.get(name) or _stage_keys(name)
        if stage.count:
            out[keys[0]] = float(stage.actual_ms)
            out[keys[1]] = float(stage.busy_ms)
            out[keys[2]] = stage.count
            if stage.budget_ms is not None:
                out[keys[3]] = float(stage.budget_ms)
            if stage.first_token_ms is not None:
                out[keys[4]] = float(stage.first_token_ms)
        if stage.critical_ms:
            out[keys[5]] = float(stage.critical_ms)
    if report.violations:
        out[attr.VIOLATED] = report.violated
        out[attr.OVER_BUDGET_STAGES] = report.over_budget_stages
        warn = report.warn_stages
    else:  # the common case: nothing broken, so no verdict to derive
        out[attr.VIOLATED] = False
        out[attr.OVER_BUDGET_STAGES] = warn = ()
    out[attr.TOTAL_ACTUAL_MS] = float(report.total_actual_ms)
    out[attr.PROFILE] = report.profile
    if report.total_budget_ms is not None:
        out[attr.TOTAL_BUDGET_MS] = float(report.total_budget_ms)
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
    return out


_FIELDS = ("actual_ms", "busy_ms", "count", "budget_ms", "first_token_ms", "critical_ms")
_KEYS: dict[str, tuple[str, ...]] = {}


def _stage_keys(stage: str) -> tuple[str, ...]:
    """The per-stage attribute keys, built once per stage name (names come from the config)."""
    keys = _KEYS.get(stage)
    if keys is None:
        keys = _KEYS[stage] = tuple(attr.stage_key(stage, field) for field in _FIELDS)
    return keys


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
