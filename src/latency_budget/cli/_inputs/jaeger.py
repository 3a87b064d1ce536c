"""Read Jaeger's JSON: the responses of ``/api/traces`` (search) and ``/api/traces/{id}``.

The shape is ``{"data": [trace, ...]}``; each trace has ``spans`` (ids in hex, times in
microseconds, the parent as a ``CHILD_OF`` reference, attributes as typed ``tags``,
events as ``logs`` whose ``event`` field is the name) and ``processes`` (the resources).
Jaeger stores the span kind and instrumentation scope as the tags ``span.kind`` and
``otel.scope.name``; they are read back into the span's kind and scope.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.trace import Event
from opentelemetry.trace import SpanKind

from latency_budget._replay import SpanRecord

from ._errors import TraceInputError, show
from ._spans import ParsedSpan, parse_id

__all__ = ["is_jaeger", "spans_from_jaeger"]

_KINDS = {
    "internal": SpanKind.INTERNAL,
    "server": SpanKind.SERVER,
    "client": SpanKind.CLIENT,
    "producer": SpanKind.PRODUCER,
    "consumer": SpanKind.CONSUMER,
}
# Tags Jaeger derives from OTLP span fields rather than attributes.
_SCOPE_TAGS = ("otel.scope.name", "otel.library.name")
_DERIVED_TAGS = frozenset(
    {
        "span.kind",
        "otel.scope.name",
        "otel.scope.version",
        "otel.library.name",
        "otel.library.version",
        "internal.span.format",
    }
)
_US = 1_000
_MAX_US = (1 << 64) // _US  # times in nanoseconds stay within OTLP's fixed64
_INT64 = 1 << 63
_SIGNED_DIGITS = re.compile(r"-?[0-9]{1,19}")


def is_jaeger(document: object) -> bool:
    """Whether ``document`` is a Jaeger API response (``data``) or a single Jaeger trace."""
    return isinstance(document, dict) and ("data" in document or ("spans" in document and "traceID" in document))


def spans_from_jaeger(document: Mapping[str, Any], where: str) -> list[ParsedSpan]:
    """The spans of one Jaeger JSON document; ``where`` prefixes every error."""
    if "data" not in document:
        traces: object = [document]
    else:
        traces = document["data"]
        errors = document.get("errors")
        if errors:
            first = errors[0] if isinstance(errors, list) else errors
            message = first.get("msg", first) if isinstance(first, dict) else first
            raise TraceInputError(f"{where}: Jaeger reported an error: {_cut(str(message))}")
    if traces is None:
        return []
    if not isinstance(traces, list):
        raise TraceInputError(f"{where}: data: expected a list of traces, got {type(traces).__name__}")
    found: list[ParsedSpan] = []
    for t, trace in enumerate(traces):
        path = f"data[{t}]"
        if not isinstance(trace, dict):
            raise TraceInputError(f"{where}: {path}: expected a trace object")
        processes = trace.get("processes") or {}
        if not isinstance(processes, dict):
            raise TraceInputError(f"{where}: {path}.processes: expected an object")
        spans = trace.get("spans") or []
        if not isinstance(spans, list):
            raise TraceInputError(f"{where}: {path}.spans: expected a list")
        for n, span in enumerate(spans):
            found.append(_span(span, processes, where, f"{path}.spans[{n}]"))
    return found


def _resource(process: object, where: str, path: str) -> dict[str, Any]:
    """A Jaeger process as the resource it came from: its tags, and its service name as ``service.name``."""
    if not isinstance(process, dict):
        return {}
    resource = _tags(process.get("tags"), where, f"{path}.process.tags")
    service = process.get("serviceName")
    if isinstance(service, str):
        resource["service.name"] = service
    return resource


def _span(span: object, processes: Mapping[str, Any], where: str, path: str) -> ParsedSpan:
    if not isinstance(span, dict):
        raise TraceInputError(f"{where}: {path}: expected a span object")
    trace_id = parse_id(span.get("traceID"), 16, where, f"{path}.traceID", exact=False)
    span_id = parse_id(span.get("spanID"), 8, where, f"{path}.spanID", exact=False)
    parent_id = None
    references = span.get("references") or []
    if not isinstance(references, list):
        raise TraceInputError(f"{where}: {path}.references: expected a list")
    for r, reference in enumerate(references):
        if isinstance(reference, dict) and reference.get("refType") == "CHILD_OF":
            parent_id = parse_id(reference.get("spanID"), 8, where, f"{path}.references[{r}].spanID", exact=False)
            break
    if "parentSpanID" in span and parent_id is None and span["parentSpanID"] not in (None, "", "0"):
        parent_id = parse_id(span["parentSpanID"], 8, where, f"{path}.parentSpanID", exact=False)
    start = _micros(span, "startTime", where, path)
    duration = _micros(span, "duration", where, path)
    tags = _tags(span.get("tags"), where, f"{path}.tags")
    kind_tag = tags.get("span.kind", "internal")
    kind = _KINDS.get(kind_tag, SpanKind.INTERNAL) if isinstance(kind_tag, str) else SpanKind.INTERNAL
    scope = next((tags[key] for key in _SCOPE_TAGS if isinstance(tags.get(key), str)), "")
    events = []
    logs = span.get("logs") or []
    if not isinstance(logs, list):
        raise TraceInputError(f"{where}: {path}.logs: expected a list")
    for i, log in enumerate(logs):
        if not isinstance(log, dict):
            raise TraceInputError(f"{where}: {path}.logs[{i}]: expected an object")
        fields = _tags(log.get("fields"), where, f"{path}.logs[{i}].fields")
        name = fields.pop("event", "")
        events.append(
            Event(name=str(name), attributes=fields, timestamp=_micros(log, "timestamp", where, f"{path}.logs[{i}]"))
        )
    name = span.get("operationName", "")
    if not isinstance(name, str):
        raise TraceInputError(f"{where}: {path}.operationName: expected a string")
    process_id = span.get("processID")
    process = processes.get(process_id) if isinstance(process_id, str) else None
    record = SpanRecord(
        trace_id=trace_id,
        span_id=span_id,
        parent_id=parent_id,
        name=name,
        start_ns=start,
        end_ns=start + duration,
        kind=kind,
        scope=scope,
        attributes={key: value for key, value in tags.items() if key not in _DERIVED_TAGS},
        events=tuple(events),
        resource=_resource(process, where, path),
        # How Jaeger keeps an OTLP span's ERROR status (and OpenTracing's error tag).
        error=tags.get("otel.status_code") == "ERROR" or tags.get("error") is True,
    )
    return ParsedSpan(
        record, json.dumps(process, sort_keys=True, default=str), remote_known=False, where=f"{where}: {path}"
    )


def _micros(item: Mapping[str, Any], key: str, where: str, path: str) -> int:
    value = item.get(key)
    if isinstance(value, float) and value.is_integer() and 0 <= value < _MAX_US:
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _MAX_US:
        return value * _US
    if value is None:
        raise TraceInputError(f"{where}: {path}.{key}: missing")
    raise TraceInputError(f"{where}: {path}.{key}: expected microseconds, got {show(value)}")


def _tags(value: object, where: str, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, list):
        raise TraceInputError(f"{where}: {path}: expected a list of tags")
    out: dict[str, Any] = {}
    for i, tag in enumerate(value):
        if not isinstance(tag, dict) or not isinstance(tag.get("key"), str):
            raise TraceInputError(f"{where}: {path}[{i}]: expected {{'key', 'type', 'value'}}")
        converted = _tag_value(tag.get("type", "string"), tag.get("value"))
        if converted is not None:
            out[tag["key"]] = converted
    return out


def _tag_value(kind: object, value: object) -> Any:
    """A typed Jaeger tag value as an attribute value (arrays arrive as JSON strings and stay strings)."""
    if kind == "string":
        return value if isinstance(value, str) else None
    if kind == "bool":
        if isinstance(value, bool):
            return value
        return {"true": True, "false": False}.get(str(value).lower())
    if kind == "int64":
        if isinstance(value, str) and _SIGNED_DIGITS.fullmatch(value.strip()):
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and -_INT64 <= value < _INT64:
            return value
        return None
    if kind == "float64":
        try:
            return float(value) if not isinstance(value, bool) else None  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):
            return None
    return None  # binary


def _cut(text: str, width: int = 200) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."
