"""Name the trace formats we do not read, so a wrong input gets one line saying what it is and what to record.

Each entry of :data:`FOREIGN_FORMATS` is one format: a test on the first JSON value of
the input (or of a line) and the name shown. The readers ask :func:`foreign_format` only
after a document failed to parse or was not OTLP or Jaeger JSON, so a good input never
pays for it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["FOREIGN_FORMATS", "RECORD_HINT", "ForeignFormat", "first_value", "foreign_format"]

RECORD_HINT = (
    "record OTLP JSON lines instead: configure(traces_file=...), latency_budget.export.OtlpJsonFileSpanExporter, "
    "or the Collector's file exporter (docs/cli.md, 'Record your traces')"
)


@dataclass(frozen=True, slots=True)
class ForeignFormat:
    """A format we recognise but do not read: how to tell it, and its name for people."""

    name: str
    test: Callable[[object], bool]


def _console_span(value: object) -> bool:
    # ConsoleSpanExporter writes ReadableSpan.to_json(): ids as "0x..." under "context", the kind as "SpanKind.X".
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("context"), Mapping)
        and "span_id" in value["context"]
        and "name" in value
    )


def _console_log(value: object) -> bool:
    # ConsoleLogRecordExporter writes LogRecord.to_json(): "body", "severity_text", "trace_id" at the top.
    return isinstance(value, Mapping) and "body" in value and ("severity_text" in value or "severity_number" in value)


def _zipkin_span(value: object) -> bool:
    # Zipkin v2 JSON: "traceId" and "id", timestamps in microseconds; v1 has "annotations" lists.
    return (
        isinstance(value, Mapping)
        and "traceId" in value
        and "id" in value
        and ("timestamp" in value or "localEndpoint" in value or "annotations" in value)
    )


def _otlp_span(value: object) -> bool:
    return isinstance(value, Mapping) and "spanId" in value and "startTimeUnixNano" in value


def _otlp_other_signal(value: object) -> bool:
    return isinstance(value, Mapping) and ("resourceMetrics" in value or "resourceProfiles" in value)


def _each(test: Callable[[object], bool]) -> Callable[[object], bool]:
    """The test for a JSON list whose first item passes ``test``."""
    return lambda value: isinstance(value, list) and bool(value) and test(value[0])


FOREIGN_FORMATS: tuple[ForeignFormat, ...] = (
    ForeignFormat("OpenTelemetry console exporter output (ConsoleSpanExporter)", _console_span),
    ForeignFormat("OpenTelemetry console exporter output (ConsoleSpanExporter), as a list", _each(_console_span)),
    ForeignFormat("OpenTelemetry console log exporter output (ConsoleLogRecordExporter)", _console_log),
    ForeignFormat("Zipkin JSON (a list of Zipkin spans)", _each(_zipkin_span)),
    ForeignFormat("a Zipkin span", _zipkin_span),
    ForeignFormat("a bare list of OTLP spans, without the resourceSpans and scopeSpans around them", _each(_otlp_span)),
    ForeignFormat("a bare OTLP span, without the resourceSpans and scopeSpans around it", _otlp_span),
    ForeignFormat("OTLP JSON of another signal (metrics or profiles), not traces", _otlp_other_signal),
    ForeignFormat("a list of Jaeger traces without Jaeger's 'data' around it", _each(lambda v: _has(v, "traceID"))),
)


def _has(value: object, key: str) -> bool:
    return isinstance(value, Mapping) and key in value


def foreign_format(value: object) -> str | None:
    """The name of the foreign format ``value`` (a parsed JSON value) is in, or None."""
    for entry in FOREIGN_FORMATS:
        try:
            if entry.test(value):
                return entry.name
        except Exception:  # naming a format is best effort; the caller's own error stands
            continue
    return None


def first_value(text: str) -> Any:
    """The first JSON value of ``text`` (console output is many pretty-printed objects in a row), or None."""
    try:
        value, _ = json.JSONDecoder().raw_decode(text.lstrip())
    except (ValueError, RecursionError):
        return None
    return value
