"""A budget pipeline for an MCP server's own process, whose spans a test reads back from a file.

The MCP stacks' servers run in a subprocess; this gives them a tracer provider with a
:class:`~latency_budget.LatencyBudgetProcessor` (no ``match`` rules) that writes each exported
span as one JSON object a line (name, ids, parent, kind, times, scope, attributes, events).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from latency_budget import LatencyBudgetProcessor, load_budgets

BUDGETS = """
version: 1
total_ms: 600000
stages:
  retrieval: {budget_ms: 600000}
  model_call: {budget_ms: 600000}
  tool_calls: {budget_ms: 600000}
"""


class JsonLines(SpanExporter):
    """Each exported span as one JSON line."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = []
        for span in spans:
            context = span.context
            record = {
                "name": span.name,
                "trace_id": f"{context.trace_id:032x}" if context else None,
                "span_id": f"{context.span_id:016x}" if context else None,
                "parent_span_id": f"{span.parent.span_id:016x}" if span.parent else None,
                "parent_is_remote": bool(span.parent and span.parent.is_remote),
                "kind": span.kind.name,
                "start_time": span.start_time,
                "end_time": span.end_time,
                "scope": span.instrumentation_scope.name if span.instrumentation_scope else None,
                "attributes": dict(span.attributes or {}),
                "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
            }
            lines.append(json.dumps(record, default=str))
        with self._lock, open(self._path, "a", encoding="utf-8") as out:
            out.write("".join(line + "\n" for line in lines))
        return SpanExportResult.SUCCESS


def budget_provider(path: str) -> TracerProvider:
    """A tracer provider whose spans go through a budget pipeline into the JSON lines file ``path``."""
    provider = TracerProvider()
    processor = LatencyBudgetProcessor(load_budgets(text=BUDGETS), SimpleSpanProcessor(JsonLines(path)))
    provider.add_span_processor(processor)
    return provider
