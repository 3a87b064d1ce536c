"""One OpenTelemetry log record per budget violation, linked to the trace that broke it."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry._logs import LoggerProvider, SeverityNumber, get_logger_provider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from latency_budget import _attributes as attr
from latency_budget._core.annotate import violation_attributes
from latency_budget._core.report import TraceReport, Violation, format_ms
from latency_budget._version import __version__

__all__ = ["EVENT_NAME", "ViolationLogEmitter"]

EVENT_NAME = attr.VIOLATION_EVENT
_SEVERITY = {"warn": SeverityNumber.WARN, "error": SeverityNumber.ERROR}


class ViolationLogEmitter:
    """An ``on_report`` sink that emits each violation as a log record.

    Records carry ``event_name`` (and the ``event.name`` attribute, for backends that
    predate the field) ``latency_budget.violation``, the attributes of the span event,
    the profile, and the trace and span ids of the local root. Emitting hands the record
    to the logger provider's processors (a batch processor queues it): no I/O here.
    """

    def __init__(self, logger_provider: LoggerProvider | None = None) -> None:
        provider = logger_provider or get_logger_provider()
        self._logger = provider.get_logger("latency_budget", __version__)

    def __call__(self, report: TraceReport) -> None:
        if not report.violations:
            return
        context = None
        if report.trace_id is not None and report.span_id is not None:
            sampled = TraceFlags(TraceFlags.SAMPLED)
            root = SpanContext(report.trace_id, report.span_id, is_remote=False, trace_flags=sampled)
            context = trace.set_span_in_context(NonRecordingSpan(root))
        for violation in report.violations:
            attributes = violation_attributes(violation)
            attributes["event.name"] = EVENT_NAME
            attributes[attr.PROFILE] = report.profile
            self._logger.emit(
                timestamp=report.end_time_ns,
                context=context,
                severity_number=_SEVERITY[violation.severity],
                severity_text=violation.severity.upper(),
                body=describe(violation),
                attributes=attributes,
                event_name=EVENT_NAME,
            )


def describe(violation: Violation) -> str:
    """A one-line human description, e.g. ``model_call duration 1250ms > budget 800ms (+450ms)``."""
    if violation.kind == "calls":
        return f"{violation.stage} made {violation.calls} calls > max_calls {violation.max_calls}"
    what = {"duration": "duration", "first_token": "time to first token", "total": "end-to-end"}[violation.kind]
    return (
        f"{violation.stage} {what} {format_ms(violation.actual_ms)} > budget {format_ms(violation.budget_ms)}"
        f" (+{format_ms(violation.over_ms)})"
    )
