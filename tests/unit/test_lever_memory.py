"""The recent-call memory is bounded in bytes: distinct huge names in every request keep it under WINDOW_BYTES."""

from __future__ import annotations

import gc
import tracemalloc

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

from latency_budget import LatencyBudgetProcessor, load_budgets
from latency_budget._core.recent import MAX_NAME_CHARS, WINDOW_BYTES

from .helpers import at

BUDGETS = "version: 1\nstages:\n  model_call: {budget_ms: 10000}\n"
NAMES = ("gen_ai.request.model", "gen_ai.response.model", "gen_ai.provider.name")


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    huge=st.sets(st.sampled_from(NAMES), min_size=1),
    requests=st.integers(70, 100),
    size=st.sampled_from([64 * 1024, 128 * 1024]),
)
def test_distinct_huge_names_keep_memory_within_the_stated_bound(huge: set[str], requests: int, size: int) -> None:
    """N requests whose model, response model or provider is a distinct huge string: the processor keeps
    at most WINDOW_BYTES after a collection, and counts the calls whose kept model name it cut."""
    processor = LatencyBudgetProcessor(load_budgets(text=BUDGETS), SpanProcessor(), late_span_grace_ms=0)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("memory")

    def request(n: int) -> None:
        attributes: dict[str, str] = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}
        for name in huge:
            attributes[name] = f"{n:08d}" + "x" * size  # distinct in every request
        root = tracer.start_span("request", start_time=at(n * 1000))
        inside = trace.set_span_in_context(root)
        child = tracer.start_span("chat", context=inside, attributes=attributes, start_time=at(n * 1000))
        child.end(end_time=at(n * 1000 + 100))
        root.end(end_time=at(n * 1000 + 200))

    request(0)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(1, requests + 1):
            request(n)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept <= WINDOW_BYTES, (kept, WINDOW_BYTES)
    # Only the model name is kept (a response model or provider never is): every request's cut is counted.
    if "gen_ai.request.model" in huge:
        assert processor._recent.cut >= requests
    else:
        assert processor._recent.cut == 0
    series = processor._recent._series
    assert all(len(model) <= MAX_NAME_CHARS for models in series.values() for model in models)
