"""Read what the services recorded: Jaeger's tags, the collector's OTLP JSON logs, Prometheus text."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def jaeger_tags(items: object) -> dict[str, Any]:
    """Jaeger ``tags`` (or a log's ``fields``) as a dict: key -> value as Jaeger typed it."""
    if not isinstance(items, list):
        return {}
    return {str(item["key"]): item.get("value") for item in items if isinstance(item, dict)}


def jaeger_spans(trace: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The spans of one trace of Jaeger's API."""
    return list(trace.get("spans") or [])


def jaeger_root(trace: Mapping[str, Any]) -> dict[str, Any]:
    """The one span of the trace without a parent reference."""
    (root,) = [span for span in jaeger_spans(trace) if not span.get("references")]
    return root


def jaeger_events(span: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    """The span's logs (OTLP events) named ``name``, each as a dict of its fields without ``event``."""
    events = []
    for log in span.get("logs") or []:
        fields = jaeger_tags(log.get("fields"))
        if fields.pop("event", None) == name:
            events.append(fields)
    return events


def otlp_attributes(items: object) -> dict[str, Any]:
    """OTLP/JSON ``attributes`` as a dict of plain values (arrays as lists)."""
    if not isinstance(items, list):
        return {}
    return {str(item["key"]): _any_value(item.get("value") or {}) for item in items if isinstance(item, dict)}


def _any_value(value: Mapping[str, Any]) -> Any:
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [_any_value(item) for item in (value["arrayValue"].get("values") or [])]
    return None


@dataclass(frozen=True)
class LogRecord:
    """One log record from the collector's file exporter, with its resource's attributes."""

    resource: dict[str, Any]
    record: dict[str, Any]
    attributes: dict[str, Any]


def collector_log_records(path: Path) -> list[LogRecord]:
    """Every log record in the collector's ``file/logs`` output (OTLP JSON lines); [] before it exists."""
    if not path.exists():
        return []
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        for resource_logs in json.loads(line).get("resourceLogs") or []:
            resource = otlp_attributes((resource_logs.get("resource") or {}).get("attributes"))
            for scope_logs in resource_logs.get("scopeLogs") or []:
                for record in scope_logs.get("logRecords") or []:
                    found.append(LogRecord(resource, record, otlp_attributes(record.get("attributes"))))
    return found


def collector_trace_ids(path: Path) -> set[str]:
    """Trace ids (hex) in the collector's ``file/traces`` output; empty before it exists."""
    if not path.exists():
        return set()
    ids: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        for resource_spans in json.loads(line).get("resourceSpans") or []:
            for scope_spans in resource_spans.get("scopeSpans") or []:
                ids.update(str(span["traceId"]) for span in scope_spans.get("spans") or [])
    return ids


@dataclass(frozen=True)
class Sample:
    """One sample line of the Prometheus text format."""

    name: str
    labels: dict[str, str]
    value: float


def prometheus_samples(text: str, **labels: str) -> list[Sample]:
    """Parse Prometheus exposition text; keep the samples carrying all the given labels."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, _, rest = head.partition("{")
        sample = Sample(name, _labels(rest.removesuffix("}")), _number(value))
        if all(sample.labels.get(key) == wanted for key, wanted in labels.items()):
            samples.append(sample)
    return samples


def _labels(text: str) -> dict[str, str]:
    """``a="x",b="y"`` -> {a: x, b: y}; values may contain escaped quotes and commas."""
    labels: dict[str, str] = {}
    i = 0
    while i < len(text):
        eq = text.index("=", i)
        key = text[i:eq].strip(", ")
        j = eq + 2  # past ="
        value = []
        while text[j] != '"':
            if text[j] == "\\":
                j += 1
                value.append({"n": "\n"}.get(text[j], text[j]))
            else:
                value.append(text[j])
            j += 1
        labels[key] = "".join(value)
        i = j + 1
    return labels


def _number(text: str) -> float:
    return {"+Inf": math.inf, "-Inf": -math.inf}.get(text) or float(text)


def total(samples: Iterable[Sample], name: str, **labels: str) -> float | None:
    """Sum of the samples called ``name`` with the given labels; None when there is none."""
    values = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    return sum(values) if values else None
