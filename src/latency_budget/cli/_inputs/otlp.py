"""Read OTLP/JSON trace exports: the Collector's file exporter writes one per line.

The OTLP/JSON encoding is protobuf JSON with hex trace and span ids, integer enums
and 64-bit integers as strings. We also accept enum names, plain numbers and base64 ids,
which other protobuf JSON writers produce.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.trace import Event
from opentelemetry.trace import SpanKind

from latency_budget._config.errors import describe_value
from latency_budget._replay import SpanRecord

from ._errors import TraceInputError, show
from ._spans import ParsedSpan, parse_id

__all__ = ["LogEvent", "SharedStrings", "is_otlp", "is_otlp_logs", "log_events_from_otlp", "spans_from_otlp"]

# An event-named log record: (event name, attributes, trace id or None, span id or None).
LogEvent = tuple[str, dict[str, Any], "int | None", "int | None"]

_KINDS = {
    0: SpanKind.INTERNAL,  # SPAN_KIND_UNSPECIFIED
    1: SpanKind.INTERNAL,
    2: SpanKind.SERVER,
    3: SpanKind.CLIENT,
    4: SpanKind.PRODUCER,
    5: SpanKind.CONSUMER,
}
_KIND_NAMES = {
    "SPAN_KIND_UNSPECIFIED": 0,
    "SPAN_KIND_INTERNAL": 1,
    "SPAN_KIND_SERVER": 2,
    "SPAN_KIND_CLIENT": 3,
    "SPAN_KIND_PRODUCER": 4,
    "SPAN_KIND_CONSUMER": 5,
}
_DIGITS = re.compile(r"[0-9]{1,20}")
_SIGNED_DIGITS = re.compile(r"-?[0-9]{1,19}")
_FIXED64 = 1 << 64  # OTLP times are fixed64 nanoseconds
_INT64 = 1 << 63
_HAS_IS_REMOTE = 0x100  # SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_IS_REMOTE = 0x200  # SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK


def is_otlp(document: object) -> bool:
    """Whether ``document`` looks like an ``ExportTraceServiceRequest`` (or ``TracesData``)."""
    return isinstance(document, dict) and "resourceSpans" in document


class SharedStrings:
    """One copy of each short string the spans of a recording repeat, and one resource per process.

    A span's name, attribute keys and short values (a model name, ``chat``, a server
    address) are the same in thousands of spans; JSON parsing makes a new string for each.
    Sharing them roughly halves what a span holds. At most ``limit`` strings of at most
    ``longest`` characters are kept, so unique values (ids, prompts) cannot make it grow
    without bound: past the limit, new strings are simply not shared.
    """

    __slots__ = ("_resources", "_strings", "limit", "longest")

    def __init__(self, *, limit: int = 1 << 17, longest: int = 200) -> None:
        self.limit = limit
        self.longest = longest
        self._strings: dict[str, str] = {}
        self._resources: dict[str, dict[str, Any]] = {}

    def share(self, text: str) -> str:
        """The shared copy of ``text`` (``text`` itself when it is long or the table is full)."""
        strings = self._strings
        found = strings.get(text)
        if found is not None:
            return found
        if len(strings) < self.limit and len(text) <= self.longest:
            strings[text] = text
        return text

    def resource(self, process: str, attributes: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The shared identity and attributes of a resource (a process) seen before, else these."""
        found = self._resources.get(process)
        if found is not None:
            return self.share(process), found
        if len(self._resources) < self.limit:
            self._resources[process] = attributes
        return process, attributes


def spans_from_otlp(document: Mapping[str, Any], where: str, strings: SharedStrings | None = None) -> list[ParsedSpan]:
    """The spans of one OTLP/JSON document; ``where`` (``file:line``) prefixes every error.

    ``strings``, shared by the documents of one recording, gives them one copy of what they repeat.
    """
    reader = _Reader(where, strings or SharedStrings())
    found: list[ParsedSpan] = []
    for r, resource_spans in enumerate(reader.items(document, "resourceSpans", "")):
        rpath = f"resourceSpans[{r}]"
        resource = reader.mapping(resource_spans.get("resource", {}), f"{rpath}.resource")
        resource_attributes = reader.attributes(resource.get("attributes"), f"{rpath}.resource.attributes")
        process = json.dumps(resource_attributes, sort_keys=True, default=str)
        process, resource_attributes = reader.strings.resource(process, resource_attributes)
        scope_key = "scopeSpans" if "scopeSpans" in resource_spans else "instrumentationLibrarySpans"
        for s, scope_spans in enumerate(reader.items(resource_spans, scope_key, rpath)):
            spath = f"{rpath}.{scope_key}[{s}]"
            scope = scope_spans.get("scope", scope_spans.get("instrumentationLibrary", {}))
            scope_name = reader.mapping(scope, f"{spath}.scope").get("name", "")
            if not isinstance(scope_name, str):
                raise TraceInputError(f"{where}: {spath}.scope.name: expected a string, got {show(scope_name)}")
            scope_name = reader.strings.share(scope_name)
            for n, span in enumerate(reader.items(scope_spans, "spans", spath)):
                found.append(reader.span(span, f"{spath}.spans[{n}]", scope_name, process, resource_attributes))
    return found


def is_otlp_logs(document: object) -> bool:
    """Whether ``document`` looks like an ``ExportLogsServiceRequest`` (or ``LogsData``)."""
    return isinstance(document, dict) and "resourceLogs" in document


def log_events_from_otlp(
    document: Mapping[str, Any], where: str, events: frozenset[str], strings: SharedStrings | None = None
) -> list[LogEvent]:
    """The log records of one OTLP/JSON logs document whose event name is one of ``events``.

    The event name is the record's ``eventName`` (OTLP 1.5 and later), else its
    ``event.name`` attribute (the SDKs' older spelling). Other records are skipped
    unread beyond their name; ``where`` (``file:line``) prefixes every error.
    """
    reader = _Reader(where, strings or SharedStrings())
    found: list[LogEvent] = []
    for r, resource_logs in enumerate(reader.items(document, "resourceLogs", "")):
        rpath = f"resourceLogs[{r}]"
        scope_key = "scopeLogs" if "scopeLogs" in resource_logs else "instrumentationLibraryLogs"
        for s, scope_logs in enumerate(reader.items(resource_logs, scope_key, rpath)):
            spath = f"{rpath}.{scope_key}[{s}]"
            for n, record in enumerate(reader.items(scope_logs, "logRecords", spath)):
                path = f"{spath}.logRecords[{n}]"
                name = record.get("eventName")
                attributes: dict[str, Any] | None = None
                if not name:
                    attributes = reader.attributes(record.get("attributes"), f"{path}.attributes")
                    name = attributes.get("event.name")
                if not isinstance(name, str) or name not in events:
                    continue
                if attributes is None:
                    attributes = reader.attributes(record.get("attributes"), f"{path}.attributes")
                trace_raw, span_raw = record.get("traceId"), record.get("spanId")
                trace_id = parse_id(trace_raw, 16, where, f"{path}.traceId", exact=True) if trace_raw else None
                span_id = parse_id(span_raw, 8, where, f"{path}.spanId", exact=True) if span_raw else None
                found.append((name, attributes, trace_id, span_id))
    return found


class _Reader:
    def __init__(self, where: str, strings: SharedStrings) -> None:
        self.where = where
        self.strings = strings

    def fail(self, path: str, message: str) -> TraceInputError:
        return TraceInputError(f"{self.where}: {path}: {message}")

    def mapping(self, value: object, path: str) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(path, f"expected an object, got {_describe_json(value)}")
        return value

    def items(self, parent: Mapping[str, Any], key: str, path: str) -> list[Mapping[str, Any]]:
        value = parent.get(key, [])
        full = f"{path}.{key}" if path else key
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail(full, f"expected a list, got {_describe_json(value)}")
        return [self.mapping(item, f"{full}[{i}]") for i, item in enumerate(value)]

    def nanos(self, span: Mapping[str, Any], key: str, path: str) -> int:
        value = span.get(key)
        if isinstance(value, str) and _DIGITS.fullmatch(value):  # ASCII digits only; int() takes any script's
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _FIXED64:
            return value
        if value is None:
            raise self.fail(f"{path}.{key}", "missing (a span needs its start and end time)")
        raise self.fail(f"{path}.{key}", f"expected nanoseconds since the epoch, got {show(value)}")

    def span(
        self, span: Mapping[str, Any], path: str, scope: str, process: str, resource: Mapping[str, Any]
    ) -> ParsedSpan:
        where = self.where
        trace_id = parse_id(span.get("traceId"), 16, where, f"{path}.traceId", exact=True)
        span_id = parse_id(span.get("spanId"), 8, where, f"{path}.spanId", exact=True)
        parent_raw = span.get("parentSpanId")
        parent_id = parse_id(parent_raw, 8, where, f"{path}.parentSpanId", exact=True) if parent_raw else None
        name = span.get("name", "")
        if not isinstance(name, str):
            raise self.fail(f"{path}.name", f"expected a string, got {_describe_json(name)}")
        kind_raw = span.get("kind", 0)
        kind_number = _KIND_NAMES.get(kind_raw, -1) if isinstance(kind_raw, str) else kind_raw
        kind = _KINDS.get(kind_number) if isinstance(kind_number, int) and not isinstance(kind_number, bool) else None
        if kind is None:
            raise self.fail(f"{path}.kind", f"not a span kind: {show(kind_raw)}")
        flags = span.get("flags", 0)
        flags = flags if isinstance(flags, int) and not isinstance(flags, bool) else 0
        events = tuple(
            Event(
                name=str(event.get("name", "")),
                attributes=self.attributes(event.get("attributes"), f"{path}.events[{i}].attributes"),
                timestamp=self.nanos(event, "timeUnixNano", f"{path}.events[{i}]"),
            )
            for i, event in enumerate(self.items(span, "events", path))
        )
        record = SpanRecord(
            trace_id=trace_id,
            span_id=span_id,
            parent_id=parent_id,
            name=self.strings.share(name),
            start_ns=self.nanos(span, "startTimeUnixNano", path),
            end_ns=self.nanos(span, "endTimeUnixNano", path),
            kind=kind,
            scope=scope,
            attributes=self.attributes(span.get("attributes"), f"{path}.attributes"),
            events=events,
            remote_parent=bool(flags & _HAS_IS_REMOTE and flags & _IS_REMOTE),
            resource=resource,
            error=_status_error(span.get("status")),
        )
        return ParsedSpan(record, process, remote_known=bool(flags & _HAS_IS_REMOTE), where=f"{where}: {path}")

    def attributes(self, value: object, path: str) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, list):
            raise self.fail(path, f"expected a list of key-value pairs, got {_describe_json(value)}")
        out: dict[str, Any] = {}
        share = self.strings.share
        for i, pair in enumerate(value):
            if not isinstance(pair, dict) or not isinstance(pair.get("key"), str):
                raise self.fail(f"{path}[{i}]", f"expected {{'key': ..., 'value': ...}}, got {_describe_json(pair)}")
            converted = _any_value(pair.get("value"))
            if converted is not None:
                out[share(pair["key"])] = share(converted) if converted.__class__ is str else converted
        return out


def _status_error(status: object) -> bool:
    """Whether an OTLP ``Status`` is ERROR (code 2, or its enum name)."""
    if not isinstance(status, dict):
        return False
    code = status.get("code")
    return code in {2, "STATUS_CODE_ERROR"}


def _any_value(value: object) -> Any:
    """An OTLP ``AnyValue`` as a Python attribute value; unusable values become ``None`` (dropped)."""
    if not isinstance(value, dict) or not value:
        return None
    if "stringValue" in value:
        return value["stringValue"] if isinstance(value["stringValue"], str) else None
    if "boolValue" in value:
        return value["boolValue"] if isinstance(value["boolValue"], bool) else None
    if "intValue" in value:
        raw = value["intValue"]
        if isinstance(raw, str) and _SIGNED_DIGITS.fullmatch(raw):
            raw = int(raw)
        if isinstance(raw, int) and not isinstance(raw, bool) and -_INT64 <= raw < _INT64:
            return raw
        return None  # not an int64: no attribute could hold it
    if "doubleValue" in value:
        raw = value["doubleValue"]
        if isinstance(raw, float):
            return raw
        if isinstance(raw, int) and not isinstance(raw, bool):
            return float(raw) if abs(raw) < 1 << 1000 else None  # beyond a double's range
        if raw in ("NaN", "Infinity", "-Infinity"):
            return float(raw.replace("Infinity", "inf")) if raw != "NaN" else math.nan
        return None
    if "arrayValue" in value:
        array = value["arrayValue"]
        items = array.get("values", []) if isinstance(array, dict) else []
        converted = tuple(_any_value(item) for item in items) if isinstance(items, list) else ()
        return tuple(item for item in converted if item is not None)
    return None  # kvlistValue and bytesValue are not attribute values the matchers can use


def _describe_json(value: object) -> str:
    return describe_value(value, mapping="an object", null="null")
