"""A small instrumented app for the install journey: records its traces with configure(traces_file=...).

Run with the installed package only: ``python app.py BUDGETS TRACES``. Each request is an
embeddings call, a retrieval of its own (``kb.lookup``, in no built-in stage), a chat call and
a tool call, with explicit times (request ``n`` grows slower with ``n``).
"""

from __future__ import annotations

import sys

from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Tracer, set_span_in_context

from latency_budget.export import configure

MS = 1_000_000
T0 = 1_700_000_000_000_000_000
REQUESTS = 20


def run(tracer: Tracer, context: Context, start: int, name: str, span_ms: tuple[int, int], **attributes: str) -> None:
    """One span under ``context`` from ``span_ms[0]`` to ``span_ms[1]`` after ``start``."""
    span = tracer.start_span(name, context=context, start_time=start + span_ms[0] * MS, attributes=attributes)
    span.end(end_time=start + span_ms[1] * MS)


def main(budgets: str, traces: str) -> None:
    """Record ``REQUESTS`` requests judged by ``budgets`` into ``traces``."""
    telemetry = configure(budgets, traces_file=traces, set_global=False, service_name="my-app")
    tracer = telemetry.tracer_provider.get_tracer("my-app")
    for n in range(REQUESTS):
        start = T0 + n * 10_000 * MS
        root = tracer.start_span("POST /ask", kind=SpanKind.SERVER, start_time=start)
        context = set_span_in_context(root)
        run(tracer, context, start, "embeddings e5", (1, 20 + n), **{"gen_ai.operation.name": "embeddings"})
        run(tracer, context, start, "kb.lookup", (30, 60 + n))
        chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}
        run(tracer, context, start, "chat m", (70, 400 + 10 * n), **chat)
        tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"}
        run(tracer, context, start, "execute_tool lookup", (500, 550), **tool)
        root.end(end_time=start + 600 * MS)
    telemetry.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
