"""The benchmark cases: span shapes, the baseline and candidate providers, and exporters.

Every case builds two providers with the same downstream processor (a
``BatchSpanProcessor`` whose exporter discards, or a counting exporter for the load
tests); the candidate adds ``LatencyBudgetProcessor`` in front of it. A case's ``run``
drives ``units`` traces (or requests) through a tracer and returns when they have ended.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanKind, TraceState
from opentelemetry.util.types import Attributes

from latency_budget import LatencyBudgetProcessor, load_budgets

BUDGETS = """
version: 1
total_ms: 3000
stages:
  retrieval: {budget_ms: 300}
  model_call: {budget_ms: 2000, first_token_ms: 500}
  tool_calls: {budget_ms: 500}
"""
# The same budgets for a service whose AI endpoints are the requests: its other routes
# (the web case's GET /orders/{id}) pass through unaccounted.
AI_ROUTES_ONLY = BUDGETS.replace("version: 1\n", 'version: 1\nrequests: {name: "POST /v1/*"}\n')

# The attributes real HTTP, DB and GenAI instrumentations set (5-10 per span).
HTTP_SERVER = {
    "http.request.method": "POST",
    "http.route": "/v1/answer",
    "url.path": "/v1/answer",
    "url.scheme": "https",
    "server.address": "api.example.com",
    "server.port": 443,
    "user_agent.original": "python-httpx/0.27",
    "http.response.status_code": 200,
}
HTTP_CLIENT = {
    "http.request.method": "GET",
    "url.full": "https://internal.example.com/profile/42",
    "server.address": "internal.example.com",
    "server.port": 443,
    "http.response.status_code": 200,
    "network.protocol.version": "1.1",
}
DB = {
    "db.system.name": "postgresql",
    "db.namespace": "support",
    "db.operation.name": "SELECT",
    "db.query.text": "SELECT * FROM tickets WHERE id = $1",
    "server.address": "db.internal",
}
CACHE = {
    "db.system.name": "redis",
    "db.operation.name": "GET",
    "db.namespace": "0",
    "server.address": "cache.internal",
    "server.port": 6379,
}
EMBED = {
    "gen_ai.operation.name": "embeddings",
    "gen_ai.provider.name": "openai",
    "gen_ai.request.model": "text-embedding-3-small",
    "gen_ai.usage.input_tokens": 42,
    "server.address": "api.openai.com",
}
CHAT = {
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": "openai",
    "gen_ai.request.model": "gpt-4o-mini",
    "gen_ai.request.temperature": 0.2,
    "gen_ai.request.max_tokens": 512,
    "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
    "gen_ai.usage.input_tokens": 812,
    "gen_ai.usage.output_tokens": 163,
    "gen_ai.response.time_to_first_chunk": 0.31,
    "server.address": "api.openai.com",
}
TOOL = {
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.tool.name": "lookup_order",
    "gen_ai.tool.call.id": "call_abc123",
    "gen_ai.tool.type": "function",
    "gen_ai.provider.name": "openai",
}
WEB_SERVER = {**HTTP_SERVER, "http.route": "/orders/{id}", "url.path": "/orders/42", "http.request.method": "GET"}
TEMPLATE = {"app.template": "order", "app.locale": "en", "app.cache_hit": False, "app.bytes": 5120, "app.user": "u42"}

# Large enough that a tight loop never fills it: a full queue logs a warning per dropped
# span, which would measure the logging module instead of the processors.
QUEUE_SIZE = 1 << 16


class DiscardExporter(SpanExporter):
    """Accepts and forgets every batch, so export cost does not colour the ratio."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


class CountingExporter(SpanExporter):
    """Counts the spans it is given (thread-safe), and keeps none of them."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            self.count += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


class RecordOnlySampler(Sampler):
    """Records every span without sampling it (``Decision.RECORD_ONLY``).

    The SDK's built-in samplers only DROP (processors are never called) or
    RECORD_AND_SAMPLE; this is how a span that processors see but do not export looks,
    as with a sampler that records for local metrics and samples a fraction.
    """

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        return SamplingResult(Decision.RECORD_ONLY, None, trace_state)

    def get_description(self) -> str:
        return "RecordOnlySampler"


# -- span shapes ---------------------------------------------------------------------


def standard_trace(tracer: trace.Tracer) -> None:
    """1 root, 3 stage spans and 6 unmatched spans, each with 5-10 attributes."""
    with tracer.start_as_current_span("POST /v1/answer", kind=SpanKind.SERVER, attributes=HTTP_SERVER):
        with tracer.start_as_current_span("GET session", kind=SpanKind.CLIENT, attributes=CACHE):
            pass
        with tracer.start_as_current_span("GET profile", kind=SpanKind.CLIENT, attributes=HTTP_CLIENT):
            pass
        with tracer.start_as_current_span("SELECT tickets", kind=SpanKind.CLIENT, attributes=DB):
            pass
        with tracer.start_as_current_span("embeddings text-embedding-3-small", attributes=EMBED):
            pass
        with tracer.start_as_current_span("SELECT documents", kind=SpanKind.CLIENT, attributes=DB):
            pass
        with tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT, attributes=CHAT):
            pass
        with (
            tracer.start_as_current_span("execute_tool lookup_order", attributes=TOOL),
            tracer.start_as_current_span("GET order", kind=SpanKind.CLIENT, attributes=HTTP_CLIENT),
        ):
            pass
        with tracer.start_as_current_span("render answer", attributes={"app.template": "answer", "app.locale": "en"}):
            pass


def unmatched_trace(tracer: trace.Tracer) -> None:
    """A web request of 20 spans (HTTP, DB, cache, templates), none of which a stage rule matches."""
    with tracer.start_as_current_span("GET /orders/{id}", kind=SpanKind.SERVER, attributes=WEB_SERVER):
        with tracer.start_as_current_span("GET session", kind=SpanKind.CLIENT, attributes=CACHE):
            pass
        with tracer.start_as_current_span("GET auth", kind=SpanKind.CLIENT, attributes=HTTP_CLIENT):
            pass
        for _ in range(3):
            with tracer.start_as_current_span("load order", attributes=TEMPLATE):
                with tracer.start_as_current_span("GET order", kind=SpanKind.CLIENT, attributes=CACHE):
                    pass
                with tracer.start_as_current_span("SELECT orders", kind=SpanKind.CLIENT, attributes=DB):
                    pass
                with tracer.start_as_current_span("SELECT lines", kind=SpanKind.CLIENT, attributes=DB):
                    pass
                with tracer.start_as_current_span("GET stock", kind=SpanKind.CLIENT, attributes=HTTP_CLIENT):
                    pass
        with tracer.start_as_current_span("render order", attributes=TEMPLATE):
            pass
        with tracer.start_as_current_span("SET page", kind=SpanKind.CLIENT, attributes=CACHE):
            pass


# The children of the wide trace, in turn: a tool call (a stage span), an HTTP call, a query.
WIDE_SHAPES: tuple[tuple[str, SpanKind, dict[str, Any]], ...] = (
    ("execute_tool lookup_order", SpanKind.INTERNAL, TOOL),
    ("GET order", SpanKind.CLIENT, HTTP_CLIENT),
    ("SELECT tickets", SpanKind.CLIENT, DB),
)


def wide_trace(tracer: trace.Tracer, children: int) -> None:
    """One root with ``children`` sequential children (WIDE_SHAPES in turn)."""
    with tracer.start_as_current_span("POST /v1/batch", kind=SpanKind.SERVER, attributes=HTTP_SERVER):
        for i in range(children):
            name, kind, attributes = WIDE_SHAPES[i % 3]
            with tracer.start_as_current_span(name, kind=kind, attributes=attributes):
                pass


def threaded_traces(tracer: trace.Tracer, traces: int, threads: int) -> None:
    """``traces`` standard traces split over ``threads`` threads that start together."""
    if threads == 1:
        for _ in range(traces):
            standard_trace(tracer)
        return
    barrier = threading.Barrier(threads)
    share, extra = divmod(traces, threads)

    def worker(count: int) -> None:
        barrier.wait()
        for _ in range(count):
            standard_trace(tracer)

    workers = [threading.Thread(target=worker, args=(share + (i < extra),)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


async def _agent_request(tracer: trace.Tracer) -> None:
    """One request of an async agent: retrieval, a model call, three parallel tool calls, a model call."""
    with tracer.start_as_current_span("POST /v1/answer", kind=SpanKind.SERVER, attributes=HTTP_SERVER):
        with tracer.start_as_current_span("embeddings text-embedding-3-small", attributes=EMBED):
            await asyncio.sleep(0)
        with tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT, attributes=CHAT):
            await asyncio.sleep(0)
        await asyncio.gather(_tool_call(tracer), _tool_call(tracer), _tool_call(tracer))
        with tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT, attributes=CHAT):
            await asyncio.sleep(0)


async def _tool_call(tracer: trace.Tracer) -> None:
    with (
        tracer.start_as_current_span("execute_tool lookup_order", attributes=TOOL),
        tracer.start_as_current_span("GET order", kind=SpanKind.CLIENT, attributes=HTTP_CLIENT),
    ):
        await asyncio.sleep(0)


ASYNC_CONCURRENCY = 1_000


def async_requests(tracer: trace.Tracer, requests: int) -> None:
    """``requests`` agent requests on one event loop, up to 1,000 of them in flight at once."""

    async def main() -> None:
        left = requests
        while left > 0:
            batch = min(left, ASYNC_CONCURRENCY)
            await asyncio.gather(*(_agent_request(tracer) for _ in range(batch)))
            left -= batch

    asyncio.run(main())


# -- cases ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One benchmark case: how to drive ``units`` traces through a tracer, and how providers are built."""

    key: str
    title: str
    run: Callable[[trace.Tracer, int], None]
    spans_per_unit: int
    sampler: Callable[[], Sampler] | None = None
    processor_options: dict[str, Any] = field(default_factory=dict)
    budgets: str = BUDGETS
    # Traces per round relative to the standard case (which runs --traces of them), and a floor.
    scale: float = 1.0
    min_units: int = 1

    def units(self, traces: int) -> int:
        """How many units make a round when the standard case runs ``traces`` traces."""
        return max(self.min_units, round(traces * self.scale))


def _each(shape: Callable[[trace.Tracer], None]) -> Callable[[trace.Tracer, int], None]:
    def run(tracer: trace.Tracer, units: int) -> None:
        for _ in range(units):
            shape(tracer)

    return run


def _wide(children: int) -> Callable[[trace.Tracer, int], None]:
    def run(tracer: trace.Tracer, units: int) -> None:
        for _ in range(units):
            wide_trace(tracer, children)

    return run


def _threads(count: int) -> Callable[[trace.Tracer, int], None]:
    def run(tracer: trace.Tracer, units: int) -> None:
        threaded_traces(tracer, units, count)

    return run


WIDE_CHILDREN = 10_000


def wide_case(children: int, *, full: bool) -> Case:
    """The wide trace with ``children`` children; ``full`` raises max_spans_per_trace so all are recorded."""
    suffix = "" if children == WIDE_CHILDREN else f"@{children}"
    limit = "max_spans_per_trace=20_000 (all recorded)" if full else "default max_spans_per_trace=1000 (truncated)"
    return Case(
        f"wide-full{suffix}" if full else f"wide{suffix}",
        f"one root with {children:,} children, {limit}",
        _wide(children),
        children + 1,
        processor_options={"max_spans_per_trace": max(20_000, children + 1)} if full else {},
        scale=10 / (children + 1),
    )


CASES: dict[str, Case] = {
    case.key: case
    for case in (
        Case("standard", "standard AI trace (1 root, 3 stage, 6 unmatched spans)", _each(standard_trace), 10),
        Case("unmatched", "web request, 20 spans, no stage matches", _each(unmatched_trace), 20, scale=0.5),
        Case(
            "unmatched-excluded",
            "web request, 20 spans, not a request under `requests: {name: POST /v1/*}`",
            _each(unmatched_trace),
            20,
            scale=0.5,
            budgets=AI_ROUTES_ONLY,
        ),
        Case(
            "standard-requests",
            "standard AI trace, a request under `requests: {name: POST /v1/*}`",
            _each(standard_trace),
            10,
            budgets=AI_ROUTES_ONLY,
        ),
        Case(
            "unsampled-drop",
            "standard trace, ParentBased(ratio 0): DROP, processors never called",
            _each(standard_trace),
            10,
            sampler=lambda: ParentBased(TraceIdRatioBased(0)),
        ),
        Case(
            "unsampled-record",
            "standard trace, RECORD_ONLY sampler: processors see unsampled spans",
            _each(standard_trace),
            10,
            sampler=RecordOnlySampler,
        ),
        *(
            Case(f"threads-{n}", f"standard traces on {n} thread{'s' if n > 1 else ''} at once", _threads(n), 10)
            for n in (1, 2, 4, 8)
        ),
        wide_case(WIDE_CHILDREN, full=False),
        wide_case(WIDE_CHILDREN, full=True),
        Case(
            "asyncio",
            "1,000 concurrent agent requests on one event loop, parallel tool calls (gather)",
            async_requests,
            10,
            min_units=ASYNC_CONCURRENCY,
        ),
    )
}


@dataclass
class Providers:
    """A baseline and a candidate provider for one case, and their tracers."""

    baseline: TracerProvider
    candidate: TracerProvider
    processor: LatencyBudgetProcessor

    def tracer(self, which: str) -> trace.Tracer:
        provider = self.candidate if which == "candidate" else self.baseline
        return provider.get_tracer("bench", "1.0")

    def shutdown(self) -> None:
        self.baseline.shutdown()
        self.candidate.shutdown()


def discarding_batch_processor() -> SpanProcessor:
    """The downstream both providers share the shape of: a BatchSpanProcessor that discards."""
    return BatchSpanProcessor(DiscardExporter(), max_queue_size=QUEUE_SIZE)


def provider(
    case: Case,
    *,
    candidate: bool,
    downstream: Callable[[], SpanProcessor] = discarding_batch_processor,
) -> tuple[TracerProvider, LatencyBudgetProcessor | None]:
    """One provider for ``case``: the downstream alone, or behind a LatencyBudgetProcessor."""
    sampler = case.sampler() if case.sampler is not None else None
    tracer_provider = TracerProvider(sampler=sampler, shutdown_on_exit=False)
    if not candidate:
        tracer_provider.add_span_processor(downstream())
        return tracer_provider, None
    processor = LatencyBudgetProcessor(load_budgets(text=case.budgets), downstream(), **case.processor_options)
    tracer_provider.add_span_processor(processor)
    return tracer_provider, processor


def providers(case: Case) -> Providers:
    """The baseline and candidate providers for ``case``."""
    baseline, _ = provider(case, candidate=False)
    candidate, processor = provider(case, candidate=True)
    assert processor is not None
    return Providers(baseline, candidate, processor)


def seed_ids(seed: int = 0) -> None:
    """Make the SDK's random trace and span ids repeatable (it draws them from ``random``)."""
    random.seed(seed)
