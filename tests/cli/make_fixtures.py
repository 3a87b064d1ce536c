"""Regenerate the trace fixtures in tests/cli/fixtures/ from a seeded demo run.

    python tests/cli/make_fixtures.py

The demo's spans go through the real OpenTelemetry SDK and LatencyBudgetProcessor; the
processor's report on every request is kept as the expected verdict. The spans are then
written in the two recorded forms the CLI reads:

* ``otlp/traces.jsonl``: OTLP/JSON lines, one ``ExportTraceServiceRequest`` per line, as
  the Collector's file exporter writes them: the SDK's own protobuf encoder, rendered with
  ``google.protobuf.json_format`` (hex ids, integer enums, int64 as strings). Lines hold
  batches of spans, so some traces span two lines, as in a real file.
* ``jaeger/search.json`` (every trace, as ``GET /api/traces?service=...`` answers) and
  ``jaeger/trace.json`` (one trace, as ``GET /api/traces/{id}`` answers), in Jaeger's
  query-API shape, converted the way Jaeger converts OTLP: microsecond times, the parent
  as a ``CHILD_OF`` reference, attributes as typed tags (arrays as JSON strings), events
  as logs with an ``event`` field, the kind and scope as ``span.kind`` and
  ``otel.scope.name`` tags, the resource as the process.

These are stand-ins until files captured from a real Collector and Jaeger replace them:
see fixtures/README.md.
The run is fully deterministic (seeded ids and latencies, a fixed end time), so running
this script twice gives identical files.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from latency_budget.demo import example_budgets
from latency_budget.demo.otlp_json import encode_otlp_json
from latency_budget.demo.run import run_demo
from latency_budget.report import TraceReport

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SEED = 19  # a seed whose 30 requests break every kind of budget at least once
REQUESTS = 30
END_TIME_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
SPANS_PER_LINE = 64
RESOURCE = Resource(
    {
        "service.name": "support-assistant",
        "service.version": "fixture",
        "telemetry.sdk.language": "python",
        "telemetry.sdk.name": "opentelemetry",
    }
)


def main() -> None:
    """Run the demo, then write the budgets, the expected reports and both trace formats."""
    exporter = InMemorySpanExporter()
    config = example_budgets()
    run = run_demo(
        config,
        requests=REQUESTS,
        concurrency=1,  # one emitting thread: spans reach the exporter in a fixed order
        seed=SEED,
        downstream=SimpleSpanProcessor(exporter),
        resource=RESOURCE,
        end_time_ns=END_TIME_NS,
    )
    spans = list(exporter.get_finished_spans())
    FIXTURES.mkdir(exist_ok=True)
    (FIXTURES / "otlp").mkdir(exist_ok=True)
    (FIXTURES / "jaeger").mkdir(exist_ok=True)
    shutil.copyfile(Path(__file__).resolve().parents[2] / "budgets.example.yaml", FIXTURES / "budgets.yaml")

    reports = [report for report in run.reports if report is not None]
    _write_json(FIXTURES / "expected-reports.json", {"seed": SEED, "reports": [_report(r) for r in reports]})

    with (FIXTURES / "otlp" / "traces.jsonl").open("w", encoding="utf-8") as handle:
        for start in range(0, len(spans), SPANS_PER_LINE):
            document = encode_otlp_json(spans[start : start + SPANS_PER_LINE])
            handle.write(json.dumps(document, separators=(",", ":")) + "\n")

    by_trace: dict[int, list[ReadableSpan]] = {}
    for span in spans:
        assert span.context is not None
        by_trace.setdefault(span.context.trace_id, []).append(span)
    traces = [_jaeger_trace(trace_spans) for trace_spans in by_trace.values()]
    _write_json(FIXTURES / "jaeger" / "search.json", _jaeger_response(traces), compact=True)
    slowest = max(reports, key=lambda r: r.total_actual_ms)
    assert slowest.trace_id is not None
    _write_json(
        FIXTURES / "jaeger" / "trace.json", _jaeger_response([_jaeger_trace(by_trace[slowest.trace_id])]), compact=True
    )
    print(f"wrote {len(spans)} spans of {len(reports)} requests to {FIXTURES}")


def _write_json(path: Path, data: object, *, compact: bool = False) -> None:
    """Pretty JSON for files people read; compact, as Jaeger's API answers, for responses."""
    text = json.dumps(data, separators=(",", ":")) if compact else json.dumps(data, indent=1)
    path.write_text(text + "\n", encoding="utf-8")


def _report(report: TraceReport) -> dict[str, Any]:
    return {
        "trace_id": f"{report.trace_id:032x}",
        "profile": report.profile,
        "violated": report.violated,
        "over_budget_stages": list(report.over_budget_stages),
        "warn_stages": list(report.warn_stages),
        "total_actual_ms": report.total_actual_ms,
        "first_token_ms": report.first_token_ms,
        "violations": sorted(f"{v.stage}:{v.kind}:{v.severity}" for v in report.violations),
        "stages": {
            s.stage: {"actual_ms": s.actual_ms, "count": s.count, "first_token_ms": s.first_token_ms}
            for s in report.stages
            if s.seen
        },
    }


# -- Jaeger's query-API JSON ------------------------------------------------------------------

_KIND = {
    SpanKind.INTERNAL: "internal",
    SpanKind.SERVER: "server",
    SpanKind.CLIENT: "client",
    SpanKind.PRODUCER: "producer",
    SpanKind.CONSUMER: "consumer",
}


def _tag(key: str, value: object) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "type": "bool", "value": value}
    if isinstance(value, int):
        return {"key": key, "type": "int64", "value": value}
    if isinstance(value, float):
        return {"key": key, "type": "float64", "value": value}
    if isinstance(value, (tuple, list)):  # arrays become JSON strings
        return {"key": key, "type": "string", "value": json.dumps(list(value), separators=(",", ":"))}
    return {"key": key, "type": "string", "value": str(value)}


def _jaeger_trace(spans: Sequence[ReadableSpan]) -> dict[str, Any]:
    processes: dict[str, dict[str, Any]] = {}
    keys: dict[str, str] = {}
    out = []
    for span in sorted(spans, key=lambda s: (s.start_time or 0, s.context.span_id if s.context else 0)):
        assert span.context is not None
        assert span.start_time is not None
        assert span.end_time is not None
        resource = dict(span.resource.attributes)
        process = {
            "serviceName": str(resource.pop("service.name", "unknown_service")),
            "tags": [_tag(k, v) for k, v in sorted(resource.items())],
        }
        key = json.dumps(process, sort_keys=True)
        if key not in keys:
            keys[key] = f"p{len(keys) + 1}"
            processes[keys[key]] = process
        trace_id = f"{span.context.trace_id:032x}"
        scope = span.instrumentation_scope
        tags = [_tag(k, v) for k, v in (span.attributes or {}).items()]
        if scope is not None:
            tags.append(_tag("otel.scope.name", scope.name))
            if scope.version:
                tags.append(_tag("otel.scope.version", scope.version))
        tags.append(_tag("span.kind", _KIND[span.kind]))
        tags.append(_tag("internal.span.format", "otlp"))
        logs = [
            {
                "timestamp": event.timestamp // 1_000,
                "fields": [_tag("event", event.name), *(_tag(k, v) for k, v in (event.attributes or {}).items())],
            }
            for event in span.events
        ]
        references = []
        if span.parent is not None:
            references.append({"refType": "CHILD_OF", "traceID": trace_id, "spanID": f"{span.parent.span_id:016x}"})
        out.append(
            {
                "traceID": trace_id,
                "spanID": f"{span.context.span_id:016x}",
                "operationName": span.name,
                "references": references,
                "startTime": span.start_time // 1_000,
                "duration": (span.end_time - span.start_time) // 1_000,
                "tags": tags,
                "logs": logs,
                "processID": keys[key],
                "warnings": None,
                "flags": 1,
            }
        )
    return {"traceID": out[0]["traceID"], "spans": out, "processes": processes, "warnings": None}


def _jaeger_response(traces: list[dict[str, Any]]) -> dict[str, Any]:
    return {"data": traces, "total": 0, "limit": 0, "offset": 0, "errors": None}


if __name__ == "__main__":
    main()
