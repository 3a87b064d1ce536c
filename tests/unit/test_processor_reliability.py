"""The processor never hurts its host: hooks never raise, every span is forwarded once, bounds hold.

tests/conftest.py makes internal errors raise, so any bug these odd inputs trigger
inside a hook fails the test instead of being logged.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.trace.sampling import (
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

from latency_budget import LatencyBudgetProcessor, _guard, load_budgets
from latency_budget import _attributes as attr

from .helpers import TECHCORP_YAML, Pipeline, RecordingProcessor, at, in_forked_child, op, pipeline

# Every kind of rule that reads attributes: built-in GenAI rules (model_call, tool_calls),
# exact values of several types, `exists`, a profile, and custom first-token attributes.
ATTRIBUTE_RULES_YAML = """
version: 1
first_token_ms: 100
stages:
  model_call:
    budget_ms: 800
    first_token_ms: 100
    first_token:
      attributes: {llm.ttft: ms, llm.first_token_at: iso8601}
  retrieval:
    budget_ms: 100
    match:
      - attributes: {db.system: [qdrant, 1, true]}
      - {name: "search*", exists: vector.query}
  tool_calls: {budget_ms: 200}
profiles:
  - name: premium
    when: {attributes: {tier: premium}}
    stages: {model_call: {budget_ms: 2000}}
"""

WATCHED_KEYS = (
    "gen_ai.operation.name",
    "openinference.span.kind",
    "db.system",
    "vector.query",
    "tier",
    "gen_ai.response.time_to_first_chunk",
    "langfuse.observation.completion_start_time",
    "llm.ttft",
    "llm.first_token_at",
)

ODD_VALUES = [
    7,
    True,
    False,
    -3,
    0.25,
    float("nan"),
    float("inf"),
    float("-inf"),
    1e300,
    -1e308,
    10**30,
    "",
    "x" * 1_000_000,
    "2024-13-45T99:99:99Z",
    "9999-12-31T23:59:59.999999+14:00",
    b"chat",
    (),
    ("chat", "execute_tool"),
    (1, 2, 3),
    (True, False),
    (0.5, float("nan")),
]

SAMPLED = TraceFlags(TraceFlags.SAMPLED)


@pytest.fixture
def fresh_log_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget which messages were already logged once, so each test sees its own first time."""
    monkeypatch.setattr(_guard, "_seen", set())


def exported_ids(p: Pipeline) -> Counter[int]:
    return Counter(s.context.span_id for s in p.finished() if s.context is not None)


def span_ids(*spans: trace.Span) -> Counter[int]:
    return Counter(s.get_span_context().span_id for s in spans)


def budget_keys(span: ReadableSpan) -> set[str]:
    """The attributes this package adds at a span's end (``stage``/``budget_ms`` are set at start)."""
    return {k for k in span.attributes or {} if k.startswith("latency_budget.")} - {attr.STAGE, attr.STAGE_BUDGET_MS}


def hand_built(
    like: trace.Span | None,
    *,
    parent: trace.Span | None = None,
    attributes: Mapping[str, object] | None = None,
    start_time: int | None = None,
    end_time: int | None = None,
) -> ReadableSpan:
    """A ReadableSpan built by hand, carrying ``like``'s identity (so the processor tracks it)."""
    return ReadableSpan(
        name="hand-built",
        kind=getattr(like, "kind", trace.SpanKind.INTERNAL),  # a root stays the request it stands for
        context=like.get_span_context() if like is not None else None,
        parent=parent.get_span_context() if parent is not None else None,
        attributes=attributes,  # type: ignore[arg-type]
        start_time=start_time,
        end_time=end_time,
    )


# -- whatever spans contain ----------------------------------------------------------------


@pytest.mark.parametrize("value", ODD_VALUES, ids=lambda v: type(v).__name__ + ":" + repr(v)[:24])
def test_odd_values_on_watched_attributes_never_raise(value: object) -> None:
    """Non-string values (ints, bools, floats, tuples, bytes, huge strings) on every watched attribute are harmless."""
    p = pipeline(ATTRIBUTE_RULES_YAML)
    odd = dict.fromkeys(WATCHED_KEYS, value)
    root = p.start("request", 0, attributes=odd)
    at_start = p.start("search docs", 0, parent=root, attributes=odd)
    later = p.start("chat", 10, parent=root)
    later.set_attributes(odd)
    at_start.end(end_time=at(50))
    later.end(end_time=at(900))
    root.end(end_time=at(1000))

    assert exported_ids(p) == span_ids(root, at_start, later)
    exported_root = p.span("request")
    assert exported_root.attributes is not None
    assert isinstance(exported_root.attributes[attr.VIOLATED], bool)
    assert exported_root.attributes[attr.TOTAL_ACTUAL_MS] == 1000.0
    assert len(p.reports) == 1


@pytest.mark.parametrize(
    "value",
    [["chat"], ("chat", ["nested"]), {"k": "v"}, {"chat"}, [[1], [2]], None, object()],
    ids=["list", "tuple-with-list", "dict", "set", "nested-lists", "none", "object"],
)
def test_unhashable_values_in_hand_built_spans_never_raise(value: object) -> None:
    """Lists, dicts, sets and arbitrary objects as attribute values (only possible by hand) are harmless."""
    p = pipeline(ATTRIBUTE_RULES_YAML)
    root = p.start("request", 0)
    child = p.start("search docs", 0, parent=root)
    odd = dict.fromkeys(WATCHED_KEYS, value)

    p.processor.on_end(hand_built(child, parent=root, attributes=odd, start_time=at(0), end_time=at(50)))
    p.processor.on_end(hand_built(root, attributes=odd, start_time=at(0), end_time=at(100)))

    assert exported_ids(p) == span_ids(root, child)
    assert len(p.reports) == 1
    assert p.reports[0].total_actual_ms == 100.0


def test_huge_first_token_values_are_ignored() -> None:
    """A time to first token too large to convert to nanoseconds is skipped, not an error."""
    p = pipeline()
    root = p.start("request", 0)
    p.run("chat", 0, 100, parent=root, attributes={**op("chat"), "gen_ai.response.time_to_first_chunk": 1e300})
    root.end(end_time=at(100))

    exported_root = p.span("request")
    assert exported_root.attributes is not None
    assert exported_root.attributes[attr.stage_key("model_call", "count")] == 1
    assert attr.stage_key("model_call", "worst_first_token_ms") not in exported_root.attributes
    assert attr.TOTAL_FIRST_TOKEN_MS not in exported_root.attributes


def test_missing_timestamps_count_as_zero_length() -> None:
    """Hand-built spans without timestamps are forwarded once and count as zero-length stage calls."""
    p = pipeline()
    root = p.start("request", 0)
    no_times = p.start("chat", 10, parent=root, attributes=op("chat"))
    start_only = p.start("tool", 20, parent=root, attributes=op("execute_tool"))

    p.processor.on_end(hand_built(no_times, parent=root, attributes=op("chat")))
    p.processor.on_end(hand_built(start_only, parent=root, attributes=op("execute_tool"), start_time=at(20)))
    root.end(end_time=at(100))

    assert exported_ids(p) == span_ids(root, no_times, start_only)
    exported_root = p.span("request")
    assert exported_root.attributes is not None
    assert exported_root.attributes[attr.stage_key("model_call", "count")] == 1
    assert exported_root.attributes[attr.stage_key("model_call", "actual_ms")] == 0.0
    assert exported_root.attributes[attr.stage_key("tool_calls", "count")] == 1
    assert exported_root.attributes[attr.stage_key("tool_calls", "busy_ms")] == 0.0
    assert exported_root.attributes[attr.TOTAL_ACTUAL_MS] == 100.0


def test_root_without_timestamps_is_reported_as_zero_length() -> None:
    """A hand-built local root without timestamps still ends its trace, with a total of 0 ms."""
    p = pipeline()
    root = p.start("request", 0)
    chat = p.run("chat", 0, 50, parent=root, attributes=op("chat"))
    p.processor.on_end(hand_built(root))

    assert exported_ids(p) == span_ids(root, chat)
    hand = [s for s in p.finished() if s.name == "hand-built"]
    assert len(hand) == 1
    assert hand[0].attributes is not None
    assert hand[0].attributes[attr.TOTAL_ACTUAL_MS] == 0.0
    assert p.processor.stats().active_traces == 0


@pytest.mark.parametrize(
    "context",
    [
        None,
        SpanContext(0x1, 0x2, is_remote=False, trace_flags=TraceFlags(0)),
        SpanContext(0x1, 0x2, is_remote=False, trace_flags=SAMPLED),
    ],
    ids=["no-context", "unsampled", "unknown-sampled"],
)
def test_foreign_hand_built_spans_pass_through_untouched(context: SpanContext | None) -> None:
    """A span the processor never saw start is forwarded as the very same object."""
    downstream = RecordingProcessor()
    processor = LatencyBudgetProcessor(load_budgets(text=TECHCORP_YAML), downstream)
    span = ReadableSpan(name="chat", context=context, attributes=op("chat"))

    processor.on_end(span)

    assert downstream.ended == [span]
    assert downstream.ended[0] is span


def test_span_ending_after_its_root_is_forwarded_untouched() -> None:
    """A child ending after its local root is forwarded once, unannotated, and left out of the root's report."""
    p = pipeline()
    root = p.start("request", 0)
    chat = p.run("chat", 0, 100, parent=root, attributes=op("chat"))
    late = p.start("tool", 50, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(200))
    late.end(end_time=at(900))  # 850 ms: over tool_calls' own 200 ms budget

    assert exported_ids(p) == span_ids(root, chat, late)
    exported_late = p.span("tool")
    assert p.passed_untouched(exported_late)
    assert budget_keys(exported_late) == set()
    exported_root = p.span("request")
    assert exported_root.attributes is not None
    assert attr.stage_key("tool_calls", "count") not in exported_root.attributes
    assert len(p.reports) == 1
    assert p.reports[0].stage("tool_calls").count == 0


def test_spans_ending_on_other_threads_are_counted() -> None:
    """Children ended on other threads are accounted in the root ended on this one."""
    p = pipeline()
    root = p.start("request", 0)
    tools = [p.start(f"tool-{n}", 10 * n, parent=root, attributes=op("execute_tool")) for n in range(8)]
    threads = [threading.Thread(target=s.end, kwargs={"end_time": at(10 * n + 50)}) for n, s in enumerate(tools)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    root.end(end_time=at(200))

    exported_root = p.span("request")
    assert exported_root.attributes is not None
    assert exported_root.attributes[attr.stage_key("tool_calls", "count")] == 8
    assert exported_root.attributes[attr.stage_key("tool_calls", "actual_ms")] == 120.0
    assert exported_root.attributes[attr.stage_key("tool_calls", "busy_ms")] == 400.0
    assert exported_ids(p) == span_ids(root, *tools)


@pytest.fixture
def tiny_switch_interval() -> Iterator[None]:
    """Switch threads every microsecond, so races between hooks on several threads show up."""
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


def test_roots_starting_and_ending_on_many_threads_are_all_accounted(tiny_switch_interval: None) -> None:
    """Eight threads starting and ending traces at once: every trace reported, none lost to a race."""
    p = pipeline(idle_ttl_s=1.0, max_active_traces=4)  # small, so that sweeps and evictions run too
    per_thread = 300

    def requests(worker: int) -> None:
        for n in range(per_thread):
            root = p.start(f"request-{worker}-{n}", n)
            p.run(f"tool-{worker}-{n}", n, n + 1, parent=root, attributes=op("execute_tool"))
            root.end(end_time=at(n + 2))

    threads = [threading.Thread(target=requests, args=(worker,)) for worker in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    stats = p.processor.stats()
    assert stats.active_traces == 0
    assert stats.reports + stats.evicted_lru + stats.evicted_idle == 8 * per_thread
    assert len(p.exporter.get_finished_spans()) == 2 * 8 * per_thread


# -- callbacks -----------------------------------------------------------------------------


def test_raising_on_report_is_logged_once_and_the_root_still_forwarded(
    caplog: pytest.LogCaptureFixture, fresh_log_memory: None
) -> None:
    """An on_report callback that raises never reaches the host; it is logged once, the root is forwarded."""
    calls: list[object] = []

    def boom(report: object) -> None:
        calls.append(report)
        raise RuntimeError("callback bug")

    p = pipeline(on_report=boom)
    caplog.set_level(logging.ERROR, logger="latency_budget")
    for n in range(3):
        root = p.start(f"request-{n}", 0)
        p.run("chat", 0, 900, parent=root, attributes=op("chat"))
        root.end(end_time=at(1000))

    assert len(calls) == 3
    assert len(p.reports) == 3  # the callback registered before the raising one still ran
    roots = [s for s in p.finished() if s.name.startswith("request-")]
    assert len(roots) == 3
    assert all(s.attributes is not None and s.attributes[attr.VIOLATED] is True for s in roots)
    errors = [r for r in caplog.records if "on_report" in r.getMessage()]
    assert len(errors) == 1
    assert errors[0].levelno == logging.ERROR


# -- bounds --------------------------------------------------------------------------------


def test_lru_eviction_forwards_unannotated_counts_and_logs_once(
    caplog: pytest.LogCaptureFixture, fresh_log_memory: None
) -> None:
    """Past max_active_traces the oldest trace is dropped: forwarded unannotated, counted, logged once."""
    caplog.set_level(logging.WARNING, logger="latency_budget")
    p = pipeline(max_active_traces=1)
    first = p.start("first", 0)
    first_tool = p.start("first-tool", 0, parent=first, attributes=op("execute_tool"))
    roots = [p.start(f"later-{n}", 10 * n) for n in range(1, 5)]  # each evicts the one before
    first_tool.end(end_time=at(500))
    first.end(end_time=at(600))
    for root in roots:
        root.end(end_time=at(700))

    assert exported_ids(p) == span_ids(first, first_tool, *roots)
    assert budget_keys(p.span("first")) == set()
    assert p.passed_untouched(p.span("first-tool"))
    assert budget_keys(p.span("first-tool")) == set()
    newest = p.span("later-4")
    assert newest.attributes is not None
    assert newest.attributes[attr.VIOLATED] is False
    for n in range(1, 4):
        assert budget_keys(p.span(f"later-{n}")) == set()
    stats = p.processor.stats()
    assert stats.evicted_lru == 4
    assert stats.reports == 1
    assert stats.active_traces == 0
    evictions = [r for r in caplog.records if "active traces" in r.getMessage()]
    assert len(evictions) == 1


class RootsShareASpanId(IdGenerator):
    """Random trace ids; every span id 7 for spans with no parent, unique otherwise (a deterministic scheme)."""

    def __init__(self) -> None:
        self._random = RandomIdGenerator()
        self.next_is_root = True

    def generate_trace_id(self) -> int:
        self.next_is_root = True  # the SDK draws a trace id only for a span with no parent
        return self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        is_root, self.next_is_root = self.next_is_root, False
        return 7 if is_root else self._random.generate_span_id()


def test_traces_whose_roots_share_a_span_id_are_bounded_separately() -> None:
    """Two active traces whose local roots have the same span id each stay counted until their own root ends."""
    downstream = RecordingProcessor()
    processor = LatencyBudgetProcessor(
        load_budgets(text=TECHCORP_YAML), downstream, max_active_traces=10, late_span_grace_ms=0
    )
    provider = TracerProvider(id_generator=RootsShareASpanId(), shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests")
    first = tracer.start_span("first", start_time=at(0), kind=trace.SpanKind.SERVER)
    second = tracer.start_span("second", start_time=at(1), kind=trace.SpanKind.SERVER)
    assert first.get_span_context().span_id == second.get_span_context().span_id == 7
    assert processor.stats().active_traces == 2

    first.end(end_time=at(10))
    assert processor.stats().active_traces == 1
    tool = tracer.start_span("tool", trace.set_span_in_context(second), attributes=op("execute_tool"), start_time=at(2))
    tool.end(end_time=at(5))
    second.end(end_time=at(20))

    assert processor.stats().active_traces == 0
    assert processor.stats().reports == 2
    (exported,) = [s for s in downstream.ended if s.name == "second"]
    assert (exported.attributes or {})[attr.stage_key("tool_calls", "count")] == 1


def test_idle_traces_are_evicted_by_span_time(caplog: pytest.LogCaptureFixture, fresh_log_memory: None) -> None:
    """A trace with no span activity for idle_ttl_s (by span timestamps) is dropped when a new root arrives."""
    caplog.set_level(logging.WARNING, logger="latency_budget")
    p = pipeline(idle_ttl_s=1.0)
    idle = p.start("idle", 0)
    p.run("idle-tool", 0, 10, parent=idle, attributes=op("execute_tool"))
    active = p.start("active", 0)
    p.run("active-tool", 100, 1_500, parent=active, attributes=op("execute_tool"))  # activity at 1.5 s
    newcomer = p.start("newcomer", 2_000)  # idle: 1.99 s quiet; active: 0.5 s quiet
    for root in (idle, active, newcomer):
        root.end(end_time=at(2_100))
    another = p.start("another", 9_000)  # the newcomer has been idle too: dropped as well
    another.end(end_time=at(9_100))

    assert budget_keys(p.span("idle")) == set()
    for name in ("active", "newcomer", "another"):
        exported = p.span(name)
        assert exported.attributes is not None
        assert attr.VIOLATED in exported.attributes, name
    stats = p.processor.stats()
    assert stats.evicted_idle == 1
    assert stats.evicted_lru == 0
    assert stats.reports == 3
    idle_logs = [r for r in caplog.records if "idle" in r.getMessage()]
    assert len(idle_logs) == 1


def test_idle_trace_behind_an_active_one_is_evicted_within_a_few_roots() -> None:
    """An idle trace queued behind a long-lived active one is still found by the sweep, within eight new roots."""
    p = pipeline(idle_ttl_s=1.0)
    active = p.start("active", 0)
    p.start("idle", 0)
    p.run("active-tool", 0, 1_900, parent=active, attributes=op("execute_tool"))  # active until 1.9 s
    for n in range(8):
        p.start(f"request-{n}", 2_000 + n).end(end_time=at(2_000 + n))

    stats = p.processor.stats()
    assert stats.evicted_idle == 1
    assert stats.active_traces == 1  # the active trace, not the idle one
    active.end(end_time=at(2_100))
    assert p.span("active").attributes is not None
    assert attr.VIOLATED in p.span("active").attributes


def test_idle_eviction_logs_once_for_many_traces(caplog: pytest.LogCaptureFixture, fresh_log_memory: None) -> None:
    """Many idle evictions produce one log record, and each is counted."""
    caplog.set_level(logging.WARNING, logger="latency_budget")
    p = pipeline(idle_ttl_s=1.0)
    for n in range(5):
        p.start(f"abandoned-{n}", 5_000 * n)  # never ended; each new root finds the last one idle

    assert p.processor.stats().evicted_idle == 4
    assert p.processor.stats().active_traces == 1
    assert len([r for r in caplog.records if "idle" in r.getMessage()]) == 1


def test_too_many_ended_spans_truncate_the_trace() -> None:
    """Past max_spans_per_trace the root says latency_budget.truncated; counts stay exact."""
    p = pipeline(max_spans_per_trace=3)
    root = p.start("request", 0)
    tools = [p.run(f"tool-{n}", 10 * n, 10 * n + 10, parent=root, attributes=op("execute_tool")) for n in range(5)]
    root.end(end_time=at(100))

    exported_root = p.span("request")
    assert exported_root.attributes is not None
    assert exported_root.attributes[attr.TRUNCATED] is True
    assert exported_root.attributes[attr.stage_key("tool_calls", "count")] == 5
    assert exported_root.attributes[attr.stage_key("tool_calls", "busy_ms")] == 50.0
    assert exported_ids(p) == span_ids(root, *tools)
    assert p.processor.stats().truncated_traces == 1


def test_too_many_open_spans_truncate_the_trace() -> None:
    """Spans started while max_spans_per_trace are already open go uncounted, and the root says truncated."""
    p = pipeline(max_spans_per_trace=2)
    root = p.start("request", 0)
    tools = [p.start(f"tool-{n}", 0, parent=root, attributes=op("execute_tool")) for n in range(3)]
    for tool in tools:
        tool.end(end_time=at(10))
    root.end(end_time=at(20))

    exported_root = p.span("request")
    assert exported_root.attributes is not None
    assert exported_root.attributes[attr.TRUNCATED] is True
    assert exported_ids(p) == span_ids(root, *tools)
    assert p.processor.stats().truncated_traces == 1


def test_small_trace_is_not_truncated() -> None:
    """A trace within max_spans_per_trace carries no truncated attribute."""
    p = pipeline(max_spans_per_trace=3)
    root = p.start("request", 0)
    p.run("tool", 0, 10, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(20))

    exported_root = p.span("request")
    assert exported_root.attributes is not None
    assert attr.TRUNCATED not in exported_root.attributes
    assert p.processor.stats().truncated_traces == 0


@pytest.mark.parametrize("options", [{"max_active_traces": 0}, {"max_spans_per_trace": 0}, {"idle_ttl_s": 0}])
def test_non_positive_bounds_are_rejected(options: dict[str, float]) -> None:
    """Bounds must be positive; zero is a configuration error at construction."""
    with pytest.raises(ValueError, match="must be positive"):
        LatencyBudgetProcessor(load_budgets(text=TECHCORP_YAML), RecordingProcessor(), **options)  # type: ignore[arg-type]


# -- sampling ------------------------------------------------------------------------------


class RecordOnly(Sampler):
    """Records every span without sampling it (as some tail-sampling setups do)."""

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
        return SamplingResult(Decision.RECORD_ONLY, attributes)

    def get_description(self) -> str:
        return "RecordOnly"


def provider_with(
    sampler: Sampler,
) -> tuple[trace.Tracer, LatencyBudgetProcessor, RecordingProcessor, RecordingProcessor]:
    handed = RecordingProcessor()
    downstream = RecordingProcessor()
    processor = LatencyBudgetProcessor(load_budgets(text=TECHCORP_YAML), downstream)
    provider = TracerProvider(sampler=sampler, shutdown_on_exit=False)
    provider.add_span_processor(handed)
    provider.add_span_processor(processor)
    return provider.get_tracer("tests"), processor, handed, downstream


def test_recorded_but_unsampled_spans_pass_through_unannotated() -> None:
    """RECORD_ONLY spans reach downstream as the very same objects, with no latency_budget attributes."""
    tracer, processor, handed, downstream = provider_with(RecordOnly())
    root = tracer.start_span("request", start_time=at(0))
    chat = tracer.start_span("chat", trace.set_span_in_context(root), attributes=op("chat"), start_time=at(0))
    chat.end(end_time=at(1_000))
    root.end(end_time=at(1_000))

    assert len(downstream.ended) == 2
    assert all(out is given for out, given in zip(downstream.ended, handed.ended, strict=True))
    assert all(not any(k.startswith("latency_budget.") for k in s.attributes or {}) for s in downstream.ended)
    stats = processor.stats()
    assert stats.reports == 0
    assert stats.active_traces == 0


def test_unsampled_traces_never_reach_the_processor() -> None:
    """Under ParentBased(TraceIdRatioBased(0)) nothing is recorded, accounted or forwarded."""
    tracer, processor, _, downstream = provider_with(ParentBased(TraceIdRatioBased(0)))
    root = tracer.start_span("request", start_time=at(0))
    tracer.start_span("chat", trace.set_span_in_context(root), attributes=op("chat")).end(end_time=at(900))
    root.end(end_time=at(1_000))

    assert not root.is_recording()
    assert downstream.started == []
    assert downstream.ended == []
    assert processor.stats().reports == 0


# -- lifecycle -----------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(SpanProcessor, "_on_ending"), reason="this SDK has no _on_ending hook")
def test_on_ending_reaches_downstream_with_the_live_span() -> None:
    """The SDK's hook for a span that is ending reaches downstream, once per span, with the span itself."""
    downstream = RecordingProcessor()
    processor = LatencyBudgetProcessor(load_budgets(text=TECHCORP_YAML), downstream)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests")
    root = tracer.start_span("request", start_time=at(0))
    child = tracer.start_span("SELECT", trace.set_span_in_context(root), start_time=at(1))
    child.end(end_time=at(2))
    root.end(end_time=at(3))

    assert downstream.ending == [child, root]
    assert len(downstream.ended) == 2


def test_shutdown_passes_through_once() -> None:
    """shutdown() reaches downstream once, however often it is called (directly or by the provider)."""
    downstream = RecordingProcessor()
    processor = LatencyBudgetProcessor(load_budgets(text=TECHCORP_YAML), downstream)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)

    provider.shutdown()
    processor.shutdown()
    processor.shutdown()

    assert downstream.shutdowns == 1


def test_after_shutdown_spans_pass_through_untouched() -> None:
    """After shutdown() every span is forwarded as it came, unjudged, as the SDK's own processors let them."""
    downstream = RecordingProcessor()
    reports: list[object] = []
    processor = LatencyBudgetProcessor(load_budgets(text=TECHCORP_YAML), downstream, on_report=reports.append)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("tests")
    processor.shutdown()

    root = tracer.start_span("request", start_time=at(0))
    child = tracer.start_span("chat", trace.set_span_in_context(root), attributes=op("chat"), start_time=at(1))
    child.end(end_time=at(9_000))
    root.end(end_time=at(9_500))

    processor.on_end(b"not a span")  # type: ignore[arg-type]  # still total: logged, not forwarded

    assert downstream.started == [root, child]
    assert [span.context for span in downstream.ended] == [child.context, root.context]
    assert all(not any(key.startswith("latency_budget.") for key in span.attributes or {}) for span in downstream.ended)
    assert reports == []
    assert processor.stats().reports == 0


@pytest.mark.parametrize(
    ("hook", "call"),
    [
        ("on_start", lambda p: p.on_start(None)),
        ("on_start", lambda p: p.on_start("span", None)),
        ("on_end", lambda p: p.on_end(None)),
        ("on_end", lambda p: p.on_end(42)),
        ("force_flush", lambda p: p.force_flush("soon")),
        ("force_flush", lambda p: p.force_flush(None)),
    ],
)
def test_a_hook_given_the_wrong_type_logs_once_and_returns(
    hook: str, call: Callable[[LatencyBudgetProcessor], object], caplog: pytest.LogCaptureFixture
) -> None:
    """A hook given what it cannot take returns (False for a flush), logs once and forwards nothing."""
    downstream = RecordingProcessor()
    processor = LatencyBudgetProcessor(load_budgets(text=TECHCORP_YAML), downstream)

    with caplog.at_level(logging.ERROR, logger="latency_budget"):
        results = [call(processor), call(processor)]

    assert results[0] in (None, False)
    assert [r.getMessage().split(" was given")[0] for r in caplog.records] == [f"latency_budget: {hook}"]
    assert downstream.started == downstream.ended == []
    assert downstream.flushes == []


@pytest.mark.parametrize("result", [True, False])
def test_force_flush_passes_the_timeout_and_result_through(result: bool) -> None:
    """force_flush(timeout) hands downstream the same timeout, returns its answer, and may be repeated."""
    downstream = RecordingProcessor(flush_result=result)
    processor = LatencyBudgetProcessor(load_budgets(text=TECHCORP_YAML), downstream)

    assert processor.force_flush(250) is result
    assert processor.force_flush(timeout_millis=7) is result
    assert processor.force_flush() is result

    assert downstream.flushes == [250, 7, 30_000]


def test_provider_force_flush_reaches_downstream_within_its_timeout() -> None:
    """The provider's force_flush(timeout) reaches downstream with no more than that timeout."""
    downstream = RecordingProcessor()
    processor = LatencyBudgetProcessor(load_budgets(text=TECHCORP_YAML), downstream)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)

    assert provider.force_flush(timeout_millis=500) is True

    assert len(downstream.flushes) == 1
    assert 0 <= downstream.flushes[0] <= 500


# -- fork --------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_starts_with_no_traces_in_flight() -> None:
    """After fork the child has no open traces (the parent's end there unannotated) and accounts new ones."""
    p = pipeline()
    root = p.start("request", 0)
    chat = p.start("chat", 0, parent=root, attributes=op("chat"))
    assert p.processor.stats().active_traces == 1

    def child() -> dict[str, object]:
        result: dict[str, object] = {"active_after_fork": p.processor.stats().active_traces}
        chat.end(end_time=at(900))
        root.end(end_time=at(1_000))
        result["inherited_root_keys"] = sorted(budget_keys(p.span("request")))
        fresh = p.start("fresh", 0)
        p.run("fresh-chat", 0, 900, parent=fresh, attributes=op("chat"))
        fresh.end(end_time=at(1_000))
        fresh_attributes = p.span("fresh").attributes or {}
        result["fresh_violated"] = fresh_attributes.get(attr.VIOLATED)
        result["active_at_end"] = p.processor.stats().active_traces
        return result

    assert in_forked_child(child) == {
        "active_after_fork": 0,
        "inherited_root_keys": [],
        "fresh_violated": True,
        "active_at_end": 0,
    }

    # The parent's own state is untouched by the fork.
    chat.end(end_time=at(900))
    root.end(end_time=at(1_000))
    exported_root = p.span("request")
    assert exported_root.attributes is not None
    assert exported_root.attributes[attr.OVER_BUDGET_STAGES] == ("model_call",)


def test_truncated_trace_keeps_first_token_of_spans_past_the_limit() -> None:
    """Stage spans past max_spans_per_trace still give the stage's worst and the trace's earliest first token."""
    p = pipeline(max_spans_per_trace=1)
    root = p.start("request", 0)
    # Recorded: the first chat. Past the limit: the two others, one with the worst time
    # to first token, one with the earliest first token in the trace.
    p.run("chat-1", 100, 1_000, parent=root, attributes={**op("chat"), "gen_ai.response.time_to_first_chunk": 0.3})
    p.run("chat-2", 200, 1_100, parent=root, attributes={**op("chat"), "gen_ai.response.time_to_first_chunk": 0.5})
    p.run("chat-3", 10, 1_200, parent=root, attributes={**op("chat"), "gen_ai.response.time_to_first_chunk": 0.05})
    root.end(end_time=at(1_300))

    exported_root = p.span("request")
    assert exported_root.attributes is not None
    assert exported_root.attributes[attr.TRUNCATED] is True
    assert exported_root.attributes[attr.stage_key("model_call", "count")] == 3
    assert exported_root.attributes[attr.stage_key("model_call", "worst_first_token_ms")] == 500.0
    assert exported_root.attributes[attr.TOTAL_FIRST_TOKEN_MS] == 60.0
