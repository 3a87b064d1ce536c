"""OpenTelemetry log records linked to the trace they are about: one per budget violation, and
(with :class:`HintLogEmitter`) one per place where time could be won."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry._logs import LoggerProvider, SeverityNumber, get_logger_provider
from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from latency_budget import _attributes as attr
from latency_budget._core.annotate import hint_attributes, violation_attributes
from latency_budget._core.hints import Hint
from latency_budget._core.kinds import KINDS
from latency_budget._core.report import TraceReport, Violation, format_ms
from latency_budget._core.wording import plural
from latency_budget._version import __version__

__all__ = ["EVENT_NAME", "HINT_EVENT_NAME", "HintLogEmitter", "ViolationLogEmitter"]

EVENT_NAME = attr.VIOLATION_EVENT
HINT_EVENT_NAME = attr.HINT_EVENT
_SEVERITY = {"warn": SeverityNumber.WARN, "error": SeverityNumber.ERROR}


class ViolationLogEmitter:
    """An ``on_report`` sink that emits each violation as a log record.

    Records carry ``event_name`` (and the ``event.name`` attribute, for backends that
    predate the field) ``latency_budget.violation``, the attributes of the span event,
    the profile (and, for a trace ``serve`` judged on part of its spans, the partial
    attributes), and the trace and span ids of the local root. Emitting hands the record
    to the logger provider's processors (a batch processor queues it): no I/O here.
    """

    def __init__(self, logger_provider: LoggerProvider | None = None) -> None:
        provider = logger_provider or get_logger_provider()
        self._logger = provider.get_logger("latency_budget", __version__)

    def __call__(self, report: TraceReport) -> None:
        if not report.violations:
            return
        context = _root_context(report)
        for violation in report.violations:
            attributes = violation_attributes(violation)
            attributes["event.name"] = EVENT_NAME
            attributes[attr.PROFILE] = report.profile
            if report.partial is not None:  # serve judged it on part of its trace
                attributes[attr.PARTIAL] = True
                attributes[attr.PARTIAL_REASON] = report.partial
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
        return f"{violation.stage} made {plural(violation.calls or 0, 'call')} > max_calls {violation.max_calls}"
    what = {"duration": "duration", "first_token": "time to first token", "total": "end-to-end"}[violation.kind]
    return (
        f"{violation.stage} {what} {format_ms(violation.actual_ms)} > budget {format_ms(violation.budget_ms)}"
        f" (+{format_ms(violation.over_ms)})"
    )


def _root_context(report: TraceReport) -> Context | None:
    """A context whose span is the report's local root, so records link to it (``None`` when unknown)."""
    if report.trace_id is None or report.span_id is None:
        return None
    sampled = TraceFlags(TraceFlags.SAMPLED)
    root = SpanContext(report.trace_id, report.span_id, is_remote=False, trace_flags=sampled)
    return trace.set_span_in_context(NonRecordingSpan(root))


class HintLogEmitter:
    """An ``on_report`` sink that emits each ``latency_budget.hint`` as an INFO log record.

    Records carry ``event_name`` (and ``event.name``) ``latency_budget.hint``, the hint
    event's attributes (kind, stage, span count, estimated saving, and for the levers
    estimated from recent calls the number of calls behind the estimate), the profile,
    a one-line body and the trace and span ids of the local root. Every value comes from
    the budget file or is a number, so the records' dimensions stay bounded.
    """

    def __init__(self, logger_provider: LoggerProvider | None = None) -> None:
        provider = logger_provider or get_logger_provider()
        self._logger = provider.get_logger("latency_budget", __version__)

    def __call__(self, report: TraceReport) -> None:
        if not report.hints:
            return
        context = _root_context(report)
        for hint in report.hints:
            attributes = hint_attributes(hint)
            attributes["event.name"] = HINT_EVENT_NAME
            attributes[attr.PROFILE] = report.profile
            self._logger.emit(
                timestamp=report.end_time_ns,
                context=context,
                severity_number=SeverityNumber.INFO,
                severity_text="INFO",
                body=describe_hint(hint),
                attributes=attributes,
                event_name=HINT_EVENT_NAME,
            )


def describe_hint(hint: Hint) -> str:
    """A one-line human description, e.g. ``tool_calls: 3 calls ran one after another; ... save 230ms``."""
    calls = plural(hint.span_count, "call")
    text = KINDS[hint.kind].text.format(calls=calls, saving=format_ms(hint.potential_savings_ms))
    basis = hint.basis_count
    if basis is None or hint.kind == "cache":  # a cache hint's basis is its repeated calls, said already
        return f"{hint.stage}: {text}"
    return f"{hint.stage}: {text} (estimated from {plural(basis, 'recent call')})"
