"""The MCP server of tests/frameworks/mcp: a real ``MCPServer`` over stdio, run in a subprocess.

Its one tool, ``get_weather``, is the truth of what ran: each run appends one JSON line
(``city``, ``started_ns``, ``ended_ns``, ``time.time_ns()``) to the file named by
``MCP_TOOL_RUNS``. The calls of one round wait for each other (``MCP_PARALLEL`` of them), so
a round's calls were certainly in flight together.

The server traces itself as the mcp SDK does (its ``tools/call`` SERVER spans, parented on
the trace context the client sent in ``_meta``), through a budget pipeline of its own whose
spans are written, one JSON object a line, to the file named by ``MCP_SERVER_SPANS``.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from mcp.server.mcpserver import MCPServer
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from latency_budget import LatencyBudgetProcessor, load_budgets

RUNS = os.environ.get("MCP_TOOL_RUNS", os.devnull)
SPANS = os.environ.get("MCP_SERVER_SPANS", os.devnull)
PARALLEL = int(os.environ.get("MCP_PARALLEL", "1"))
BUDGETS = """
version: 1
total_ms: 600000
stages:
  retrieval: {budget_ms: 600000}
  model_call: {budget_ms: 600000}
  tool_calls: {budget_ms: 600000}
"""


class JsonLines(SpanExporter):
    """Each exported span as one JSON line: name, ids, parent, times, attributes, events."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = []
        for span in spans:
            context = span.context
            lines.append(
                json.dumps(
                    {
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
                    },
                    default=str,
                )
            )
        with self._lock, open(self._path, "a", encoding="utf-8") as out:
            out.write("".join(line + "\n" for line in lines))
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(LatencyBudgetProcessor(load_budgets(text=BUDGETS), SimpleSpanProcessor(JsonLines(SPANS))))
trace.set_tracer_provider(provider)

server = MCPServer("weather")
_together: asyncio.Barrier | None = None


@server.tool()
async def get_weather(city: str) -> str:
    """The weather in a city."""
    global _together
    started = time.time_ns()
    if _together is None:
        _together = asyncio.Barrier(PARALLEL)
    await asyncio.wait_for(_together.wait(), timeout=30)
    ended = time.time_ns()
    record: dict[str, Any] = {"city": city, "started_ns": started, "ended_ns": ended}
    with open(RUNS, "a", encoding="utf-8") as out:
        out.write(json.dumps(record) + "\n")
    return f"sunny in {city}"


if __name__ == "__main__":
    try:
        server.run("stdio")
    finally:
        provider.shutdown()
