"""Lever hints on the trace: what the processor writes after recent requests, by hand-computed cases."""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.util.types import AttributeValue

try:
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
except ImportError:  # SDK < 1.39 (tests/constraints-sdk-min.txt) names it InMemoryLogExporter
    from opentelemetry.sdk._logs.export import InMemoryLogExporter as InMemoryLogRecordExporter

from latency_budget import TraceReport, load_budgets
from latency_budget import _attributes as attr
from latency_budget._core.recent import MIN_MODEL_CALLS_IN_PROCESS, WINDOW
from latency_budget._replay import evaluate_spans, record_of
from latency_budget.export import BudgetMetrics, HintLogEmitter

from .helpers import Pipeline, at, pipeline

BUDGETS = """
version: 1
stages:
  retrieval: {budget_ms: 1000}
  model_call: {budget_ms: 10000}
  tool_calls: {budget_ms: 1000}
"""
HINT_KEYS = {
    attr.HINT_KIND,
    attr.STAGE,
    attr.HINT_SPAN_COUNT,
    attr.HINT_SAVINGS_MS,
    attr.HINT_BASIS_COUNT,
    attr.HINT_BASIS,
}
NAMED = {attr.HINT_SPAN_NAMES, attr.HINT_SPAN_IDS}  # the spans a hint is about (at most five, names bounded)


def chat(
    model: str, *, stream: bool, ttft_s: float | None = None, **extra: AttributeValue
) -> dict[str, AttributeValue]:
    """A chat span's GenAI attributes."""
    attributes: dict[str, AttributeValue] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.request.stream": stream,
        "gen_ai.response.finish_reasons": ("stop",),
        **extra,
    }
    if ttft_s is not None:
        attributes["gen_ai.response.time_to_first_chunk"] = ttft_s
    return attributes


class Requests:
    """Requests one after another through one processor, each a root with the given child spans."""

    def __init__(self) -> None:
        self.p: Pipeline = pipeline(BUDGETS)
        self.now = 0.0
        self.children: list[trace.Span] = []  # the last request's

    def send(self, *children: tuple[str, float, Mapping[str, AttributeValue]]) -> ReadableSpan:
        """A request whose children (name, duration ms, attributes) run back to back; its exported root."""
        name = f"request {self.now:g}"
        root = self.p.start(name, self.now)
        cursor = self.now
        self.children = []
        for child, duration, attributes in children:
            self.children.append(self.p.run(child, cursor, cursor + duration, parent=root, attributes=attributes))
            cursor += duration
        root.end(end_time=at(cursor))
        self.now = cursor + 100
        return self.p.span(name)

    def named(self, *indexes: int) -> dict[str, object]:
        """The hint attributes naming the last request's children at ``indexes``."""
        spans = [self.children[i] for i in indexes]
        return {
            attr.HINT_SPAN_NAMES: tuple(str(getattr(span, "name", "")) for span in spans),
            attr.HINT_SPAN_IDS: " ".join(f"{span.get_span_context().span_id:016x}" for span in spans),
        }


def hints(span: ReadableSpan) -> dict[str, dict[str, object]]:
    """The span's hint events by kind (at most one each here)."""
    found = [dict(e.attributes or {}) for e in span.events if e.name == attr.HINT_EVENT]
    by_kind = {str(h[attr.HINT_KIND]): h for h in found}
    assert len(by_kind) == len(found)
    return by_kind


def test_streaming_estimated_from_earlier_streamed_calls_of_the_model() -> None:
    """After three streamed calls with their first chunk at 250 ms, a 1500 ms non-streamed answer: 1250 ms sooner."""
    r = Requests()
    first = r.send(("chat m", 1500, chat("m", stream=False)))
    assert hints(first) == {}  # no streamed call of m seen yet: no estimate, no hint
    for _ in range(3):
        r.send(("chat m", 1000, chat("m", stream=True, ttft_s=0.25)))
    found = hints(r.send(("chat m", 1500, chat("m", stream=False))))
    assert found["streaming"] == {
        attr.HINT_KIND: "streaming",
        attr.STAGE: "model_call",
        attr.HINT_SPAN_COUNT: 1,
        attr.HINT_SAVINGS_MS: 1250.0,
        attr.HINT_BASIS_COUNT: 3,
        **r.named(0),
    }


def test_identical_calls_within_and_across_requests_earn_a_cache_hint() -> None:
    """lookup_order(7) twice in a row saves the second's 100 ms; a query asked in an earlier request saves its 40 ms."""
    r = Requests()
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup_order"}
    same = {**tool, "gen_ai.tool.call.arguments": '{"id": 7}'}
    found = hints(r.send(("tool a", 100, same), ("tool b", 100, same), ("tool c", 50, {**same, "x": 1})))
    assert found["cache"] == {
        attr.HINT_KIND: "cache",
        attr.STAGE: "tool_calls",
        attr.HINT_SPAN_COUNT: 2,  # the third has the same arguments too (other attributes do not count)
        attr.HINT_SAVINGS_MS: 150.0,
        attr.HINT_BASIS_COUNT: 2,
        attr.HINT_BASIS: "results_not_recorded",  # identical results assumed
        **r.named(1, 2),
    }
    search = {"gen_ai.operation.name": "retrieval", "gen_ai.retrieval.query.text": "where is my order"}
    assert hints(r.send(("search", 40, search))) == {}
    assert hints(r.send(("search", 40, search)))["cache"][attr.HINT_SAVINGS_MS] == 40.0


def test_a_slower_model_is_compared_with_the_fastest_one_in_its_stage() -> None:
    """A window of calls of fast at 100 ms and of slow at 400 ms: a 400 ms slow call would take 100 ms.

    Not before each model has a full window (MIN_MODEL_CALLS_IN_PROCESS): young medians wander.
    """
    r = Requests()
    for _ in range(MIN_MODEL_CALLS_IN_PROCESS - 1):
        r.send(("chat fast", 100, chat("fast", stream=True, ttft_s=0.0625)))
        r.send(("chat slow", 400, chat("slow", stream=True, ttft_s=0.0625)))
    # 64 calls of slow (its own included), 63 of fast: not yet.
    assert "model_choice" not in hints(r.send(("chat slow", 400, chat("slow", stream=True, ttft_s=0.0625))))
    r.send(("chat fast", 100, chat("fast", stream=True, ttft_s=0.0625)))
    found = hints(r.send(("chat slow", 400, chat("slow", stream=True, ttft_s=0.0625))))
    assert found["model_choice"] == {
        attr.HINT_KIND: "model_choice",
        attr.STAGE: "model_call",
        attr.HINT_SPAN_COUNT: 1,
        attr.HINT_SAVINGS_MS: 300.0,
        attr.HINT_BASIS_COUNT: MIN_MODEL_CALLS_IN_PROCESS,
        attr.HINT_BASIS: "quality_not_recorded",  # no evaluations or guardrails here: the caveat
        **r.named(0),
    }


def test_a_large_context_is_trimmed_to_the_median_at_the_fitted_slope() -> None:
    """A window of calls of 100 ms + 0.05 ms per input token (1000..10000), the last 8000: 150 ms over the median."""
    r = Requests()
    for n in range(WINDOW - 1):  # the fit is tested once the window is full
        tokens = 1000 * (1 + n % 10)
        r.send(("chat m", 100 + 0.05 * tokens, chat("m", stream=False, **{"gen_ai.usage.input_tokens": tokens})))
    found = hints(r.send(("chat m", 500, chat("m", stream=False, **{"gen_ai.usage.input_tokens": 8000}))))
    assert found["context_size"] == {
        attr.HINT_KIND: "context_size",
        attr.STAGE: "model_call",
        attr.HINT_SPAN_COUNT: 1,
        attr.HINT_SAVINGS_MS: 150.0,
        attr.HINT_BASIS_COUNT: WINDOW,
        attr.HINT_BASIS: "duration",  # no output tokens recorded: nothing to hold fixed
        **r.named(0),
    }
    assert "streaming" not in found  # non-streamed, but no streamed call of m to estimate from


def test_a_long_answer_is_cut_to_the_median_at_the_models_time_per_token() -> None:
    """Streamed calls take 10 ms per output token past a 250 ms first chunk; 500 tokens against a median of 300."""
    r = Requests()
    for n in range(WINDOW - 1):  # the rate's rank test is made once the window is full
        out = 100 * (1 + n % 5)
        r.send(("chat m", 250 + 10 * out, chat("m", stream=True, ttft_s=0.25, **{"gen_ai.usage.output_tokens": out})))
    found = hints(r.send(("chat m", 5250, chat("m", stream=True, ttft_s=0.25, **{"gen_ai.usage.output_tokens": 500}))))
    assert found["output_length"] == {
        attr.HINT_KIND: "output_length",
        attr.STAGE: "model_call",
        attr.HINT_SPAN_COUNT: 1,
        attr.HINT_SAVINGS_MS: 2000.0,  # 10 ms x (500 - 300)
        attr.HINT_BASIS_COUNT: WINDOW,
        **r.named(0),
    }


def test_a_call_wrapped_by_a_second_instrumentation_is_one_call_to_the_levers() -> None:
    """Streamed chat spans each inside a chat span (two instrumentations): the estimate rests on calls, not spans."""
    r = Requests()
    for n in range(3):
        start = 1000.0 * n
        root = r.p.start(f"request {n}", start)
        outer = r.p.start("chat m", start, parent=root, attributes=chat("m", stream=True, ttft_s=0.25))
        r.p.run("openai.chat", start + 1, start + 999, parent=outer, attributes=chat("m", stream=True, ttft_s=0.24))
        outer.end(end_time=at(start + 1000))
        root.end(end_time=at(start + 1000))
        exported = r.p.span(f"request {n}")
        assert exported.attributes is not None
        assert exported.attributes["latency_budget.stages.model_call.count"] == 1
    r.now = 3000
    found = hints(r.send(("chat m", 1500, chat("m", stream=False))))
    assert found["streaming"][attr.HINT_BASIS_COUNT] == 3  # three calls, not six spans
    assert found["streaming"][attr.HINT_SAVINGS_MS] == 1250.0  # the outer spans' first chunk: 250 ms
    # Replayed (check, report), each request has one call for the levers too.
    replayed = evaluate_spans(load_budgets(text=BUDGETS), [record_of(span) for span in r.p.finished()])
    assert [len(report.calls) for report in replayed] == [1, 1, 1, 1]


def test_hints_become_bounded_log_records_and_a_savings_histogram() -> None:
    """Each hint is an INFO log record named latency_budget.hint and a histogram point by stage and kind only."""
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    reader = InMemoryMetricReader()
    emitter, metrics = HintLogEmitter(logger_provider), BudgetMetrics(MeterProvider([reader]))

    def both(report: TraceReport) -> None:
        emitter(report)
        metrics(report)

    r = Requests()
    r.p = pipeline(BUDGETS, on_report=both)
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t", "gen_ai.tool.call.arguments": "{}"}
    root = r.send(("tool a", 100, tool), ("tool b", 100, tool))
    records = [item.log_record for item in logs.get_finished_logs()]
    by_kind = {str((rec.attributes or {})[attr.HINT_KIND]): rec for rec in records}
    assert set(by_kind) == {"cache", "sequential_calls"}
    cache = by_kind["cache"]
    assert cache.event_name == "latency_budget.hint"
    assert cache.severity_text == "INFO"
    assert root.context is not None
    assert cache.span_id == root.context.span_id
    assert cache.body == "tool_calls: 1 call repeated an identical earlier call; a cache would save about 100ms"
    assert by_kind["sequential_calls"].body == (
        "tool_calls: 2 calls ran one after another; run concurrently they would save 100ms"
    )
    for record in records:
        assert set(record.attributes or {}) <= {*HINT_KEYS, *NAMED, "event.name", attr.PROFILE}
    data = reader.get_metrics_data()
    assert data is not None
    points = [
        dict(point.attributes or {})
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "latency_budget.hint.potential_savings"
        for point in metric.data.data_points
    ]
    assert sorted(points, key=str) == [
        {attr.STAGE: "tool_calls", attr.HINT_KIND: "cache"},
        {attr.STAGE: "tool_calls", attr.HINT_KIND: "sequential_calls"},
    ]
