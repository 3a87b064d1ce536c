"""An instrumented AI request, as real SDK spans with explicit timestamps and GenAI attributes.

Shared by the end-to-end tests: each request has an HTTP server root, an embeddings call
and a vector search (stage ``retrieval``), a chat call (``model_call``), a tool call
(``tool_calls``) and a database query inside the tool that belongs to no stage.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind

from latency_budget import load_budgets

BUDGETS = load_budgets(
    text="""\
version: 1
total_ms: 1000
stages:
  retrieval: {budget_ms: 100}
  model_call: {budget_ms: 500}
  tool_calls: {budget_ms: 200}
""",
    source="e2e-budgets.yaml",
)
TOTAL_BUDGET_MS = 1000.0
MODEL_BUDGET_MS = 500.0
MS = 1_000_000

ROOT_NAME = "POST /v1/support/chat"
# Span name -> the stage the processor must put it in (None: no stage).
STAGE_OF: dict[str, str | None] = {
    ROOT_NAME: None,
    "embeddings text-embedding-3-small": "retrieval",
    "retrieval support-kb": "retrieval",
    "chat gpt-4o": "model_call",
    "execute_tool lookup_order": "tool_calls",
    "SELECT orders": None,
}
WITHIN_MODEL_MS = 400  # the chat call of a request within budget
OVER_MODEL_MS = 900  # ... and of one over budget: model_call +400 ms, the total +145 ms


@dataclass(frozen=True)
class EmittedRequest:
    """What was sent: ids in Jaeger's hex spelling and the root's duration."""

    trace_id: str
    root_span_id: str
    total_ms: float


def emit_request(tracer: trace.Tracer, *, model_ms: int, start_ns: int | None = None) -> EmittedRequest:
    """Emit one request whose chat call takes ``model_ms``; the other stages stay within budget."""
    base = start_ns if start_ns is not None else time.time_ns() - 5_000 * MS
    chat_end = 90 + model_ms
    tool_start, tool_end = chat_end + 5, chat_end + 115
    root_end = tool_end + 40
    root = tracer.start_span(
        ROOT_NAME,
        kind=SpanKind.SERVER,
        start_time=base,
        attributes={"http.request.method": "POST", "http.route": "/v1/support/chat", "url.scheme": "http"},
    )
    in_root = trace.set_span_in_context(root)
    _child(
        tracer,
        in_root,
        "embeddings text-embedding-3-small",
        base,
        (5, 35),
        SpanKind.CLIENT,
        {
            "gen_ai.operation.name": "embeddings",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "text-embedding-3-small",
            "gen_ai.usage.input_tokens": 9,
        },
    )
    _child(
        tracer,
        in_root,
        "retrieval support-kb",
        base,
        (35, 85),
        SpanKind.CLIENT,
        {"gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": "support-kb"},
    )
    _child(
        tracer,
        in_root,
        "chat gpt-4o",
        base,
        (90, chat_end),
        SpanKind.CLIENT,
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.model": "gpt-4o-2024-08-06",
            "gen_ai.usage.input_tokens": 812,
            "gen_ai.usage.output_tokens": 156,
            "gen_ai.response.finish_reasons": ("tool_calls",),
        },
    )
    tool = tracer.start_span(
        "execute_tool lookup_order",
        context=in_root,
        kind=SpanKind.INTERNAL,
        start_time=base + tool_start * MS,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "lookup_order",
            "gen_ai.tool.call.id": "call_1",
        },
    )
    _child(
        tracer,
        trace.set_span_in_context(tool),
        "SELECT orders",
        base,
        (tool_start + 10, tool_start + 60),
        SpanKind.CLIENT,
        {"db.system.name": "postgresql", "db.operation.name": "SELECT", "db.collection.name": "orders"},
    )
    tool.end(end_time=base + tool_end * MS)
    root.end(end_time=base + root_end * MS)
    context = root.get_span_context()
    return EmittedRequest(f"{context.trace_id:032x}", f"{context.span_id:016x}", float(root_end))


def _child(
    tracer: trace.Tracer,
    parent: Context,
    name: str,
    base: int,
    window_ms: tuple[int, int],
    kind: SpanKind,
    attributes: dict[str, str | int | tuple[str, ...]],
) -> None:
    span = tracer.start_span(
        name, context=parent, kind=kind, start_time=base + window_ms[0] * MS, attributes=attributes
    )
    span.end(end_time=base + window_ms[1] * MS)
