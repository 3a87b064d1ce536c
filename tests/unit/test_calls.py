"""One call is one call, and hints worth acting on: nested stage spans, kinds of call, the saving threshold."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.util.types import AttributeValue

from latency_budget import _attributes as attr
from latency_budget._core.calls import nested_calls, operation_of
from latency_budget._core.critical_path import RecordedSpan

from .helpers import at, op, pipeline, violation_events

CALLS_YAML = """
version: 1
stages:
  retrieval: {budget_ms: 1000, max_calls: 2}
  model_call: {budget_ms: 1000, max_calls: 3}
  tool_calls: {budget_ms: 1000, max_calls: 2}
"""


def figures(span: ReadableSpan, stage: str) -> tuple[object, ...]:
    attrs = dict(span.attributes or {})
    return tuple(attrs.get(attr.stage_key(stage, key)) for key in ("count", "busy_ms", "actual_ms"))


HINT_KEYS = (attr.HINT_KIND, attr.STAGE, attr.HINT_SPAN_COUNT, attr.HINT_SAVINGS_MS)


def hints_of(span: ReadableSpan) -> list[dict[str, object]]:
    """The hint events' kind, stage, call count and savings."""
    events = [dict(e.attributes or {}) for e in span.events if e.name == attr.HINT_EVENT]
    return [{key: event[key] for key in HINT_KEYS} for event in events]


def hinted_names(span: ReadableSpan) -> list[object]:
    return [dict(e.attributes or {})[attr.HINT_SPAN_NAMES] for e in span.events if e.name == attr.HINT_EVENT]


def hint(kind: str, stage: str, calls: int, savings_ms: float) -> dict[str, object]:
    """A hint event's attributes."""
    return {attr.HINT_KIND: kind, attr.STAGE: stage, attr.HINT_SPAN_COUNT: calls, attr.HINT_SAVINGS_MS: savings_ms}


def openinference(kind: str) -> dict[str, AttributeValue]:
    return {"openinference.span.kind": kind}


# -- one call is one call -------------------------------------------------------------


def test_llamaindex_nesting_counts_each_call_once() -> None:
    """predict > complete, and retrieve > _retrieve > get_query_embedding > _get_query_embedding: one call each."""
    p = pipeline(CALLS_YAML)
    root = p.start("query", 0)
    for n, (start, end) in enumerate([(0, 100), (300, 400), (400, 500)]):
        predict = p.start(f"MockLLM.predict {n}", start, parent=root, attributes=openinference("LLM"))
        p.run(f"MockLLM.complete {n}", start + 10, end - 10, parent=predict, attributes=openinference("LLM"))
        predict.end(end_time=at(end))
    for n, (start, end) in enumerate([(100, 200), (200, 300)]):
        retrieve = p.start(f"retrieve {n}", start, parent=root, attributes=openinference("RETRIEVER"))
        inner = p.start(f"_retrieve {n}", start + 5, parent=retrieve)
        embed = p.start(f"get_query_embedding {n}", start + 10, parent=inner, attributes=openinference("EMBEDDING"))
        p.run(f"_get_query_embedding {n}", start + 15, start + 40, parent=embed, attributes=openinference("EMBEDDING"))
        embed.end(end_time=at(start + 50))
        inner.end(end_time=at(end - 5))
        retrieve.end(end_time=at(end))
    root.end(end_time=at(500))
    exported = p.span("query")
    assert figures(exported, "model_call") == (3, 300.0, 300.0)
    assert figures(exported, "retrieval") == (2, 200.0, 200.0)
    assert violation_events(exported) == []  # 3 model calls, 2 retrievals: within max_calls
    # The two retrievals ran in turn: a hint over 2 calls, not over the 8 spans.
    assert hints_of(exported) == [hint("sequential_calls", "retrieval", 2, 100.0)]


def test_two_instrumentations_of_one_client_give_one_call() -> None:
    """generation > openai.chat (two instrumentations of one client call) counts one model call."""
    p = pipeline(CALLS_YAML)
    root = p.start("agent run", 0)
    for n in range(3):
        generation = p.start(f"generation {n}", n * 100, parent=root, attributes=op("chat"))
        p.run(f"openai.chat {n}", n * 100 + 2, n * 100 + 98, parent=generation, attributes=op("chat"))
        generation.end(end_time=at(n * 100 + 100))
    root.end(end_time=at(300))
    exported = p.span("agent run")
    assert figures(exported, "model_call") == (3, 300.0, 300.0)
    assert violation_events(exported) == []


def test_parallel_children_of_a_stage_span_are_part_of_its_call() -> None:
    """A retrieval with two parallel inner retrievals (one outliving it) is one call; the union still sees all."""
    p = pipeline(CALLS_YAML)
    root = p.start("request", 0)
    outer = p.start("retrieve", 0, parent=root, attributes=op("retrieval"))
    p.run("shard a", 10, 60, parent=outer, attributes=op("retrieval"))
    late = p.start("shard b", 20, parent=outer, attributes=op("retrieval"))
    outer.end(end_time=at(100))
    late.end(end_time=at(120))
    root.end(end_time=at(150))
    assert figures(p.span("request"), "retrieval") == (1, 100.0, 120.0)


def test_a_different_stage_inside_a_call_is_a_call_of_its_own_stage() -> None:
    """tool > chat > tool: one tool call and one model call; the inner tool is part of the outer tool call."""
    p = pipeline(CALLS_YAML)
    root = p.start("request", 0)
    tool = p.start("execute_tool research", 0, parent=root, attributes=op("execute_tool"))
    chat = p.start("chat", 10, parent=tool, attributes=op("chat"))
    step = p.start("step", 20, parent=chat)  # a span of no stage between does not hide the ancestry
    p.run("execute_tool search", 25, 35, parent=step, attributes=op("execute_tool"))
    step.end(end_time=at(40))
    chat.end(end_time=at(50))
    tool.end(end_time=at(100))
    root.end(end_time=at(100))
    exported = p.span("request")
    assert figures(exported, "tool_calls") == (1, 100.0, 100.0)
    assert figures(exported, "model_call") == (1, 40.0, 40.0)
    attrs = dict(exported.attributes or {})
    assert attrs[attr.stage_key("model_call", "critical_ms")] == 30.0  # its time minus the inner tool's
    assert attrs[attr.stage_key("tool_calls", "critical_ms")] == 70.0


def test_a_stage_root_contains_every_span_of_its_stage() -> None:
    """A local root that is itself a model call: the chat spans under it are part of that one call."""
    p = pipeline(CALLS_YAML)
    root = p.start("chat completions", 0, attributes=op("chat"))
    for n in range(5):
        p.run(f"chat {n}", n * 10, n * 10 + 10, parent=root, attributes=op("chat"))
    root.end(end_time=at(50))
    exported = p.span("chat completions")
    assert figures(exported, "model_call") == (1, 50.0, 50.0)
    assert violation_events(exported) == []


def test_nested_spans_earn_no_sequential_hint_but_their_outer_calls_do() -> None:
    """Back-to-back inner tool spans of one tool call: no hint; two back-to-back outer calls: one hint of 2."""
    p = pipeline(CALLS_YAML)
    root = p.start("request", 0)
    for n, (start, end) in enumerate([(0, 100), (100, 160)]):
        tool = p.start(f"tool {n}", start, parent=root, attributes=op("execute_tool"))
        middle = start + (end - start) // 2
        p.run(f"tool {n} first half", start, middle, parent=tool, attributes=op("execute_tool"))
        p.run(f"tool {n} second half", middle, end, parent=tool, attributes=op("execute_tool"))
        tool.end(end_time=at(end))
    root.end(end_time=at(160))
    assert hints_of(p.span("request")) == [hint("sequential_calls", "tool_calls", 2, 60.0)]
    assert hinted_names(p.span("request")) == [("tool 0", "tool 1")]


def test_iterations_and_max_calls_count_outermost_calls() -> None:
    """Five model calls, each wrapped twice over, with max_calls 3: calls=5 and an iterations hint over 5."""
    p = pipeline(CALLS_YAML)
    root = p.start("agent", 0)
    for n in range(5):
        outer = p.start(f"generation {n}", n * 100, parent=root, attributes=op("chat"))
        inner = p.start(f"openai.chat {n}", n * 100 + 1, parent=outer, attributes=op("chat"))
        p.run(f"http {n}", n * 100 + 2, n * 100 + 90, parent=inner, attributes=op("chat"))
        inner.end(end_time=at(n * 100 + 95))
        outer.end(end_time=at(n * 100 + 100))
    root.end(end_time=at(500))
    exported = p.span("agent")
    calls = [v for v in violation_events(exported) if v[attr.KIND] == "calls"]
    assert [(v[attr.MAX_CALLS], v[attr.CALLS]) for v in calls] == [(3, 5)]
    assert hints_of(exported) == [hint("iterations", "model_call", 5, 200.0)]
    assert hinted_names(exported) == [("generation 3", "generation 4")]  # the calls beyond the limit


def test_nested_calls_skips_spans_of_other_stages_and_survives_looping_parent_links() -> None:
    """Positions of nested spans only; parent links that loop (reused ids) end the walk instead of hanging."""
    spans: list[RecordedSpan] = [
        (2, 3, 0, 10, 0),  # 2 and 3 are each other's parent
        (3, 2, 0, 10, 0),
        (4, 2, 0, 5, 0),
        (5, 4, 0, 5, 1),
        (6, 6, 0, 5, 0),  # its own parent
        (1, None, 0, 10, -1),
    ]
    found = nested_calls(1, spans, {0})
    assert 2 in found  # 4 sits inside 2, a span of its stage
    assert 3 not in found  # 5 is of another stage than the ones asked about
    assert found <= {0, 1, 2, 4}


# -- the oracle: random nestings --------------------------------------------------------

STAGES = ("retrieval", "model_call", "tool_calls")
KIND_ATTRIBUTES: dict[str, dict[str, AttributeValue]] = {
    "retrieval": op("retrieval"),
    "model_call": op("chat"),
    "tool_calls": op("execute_tool"),
    "none": {},
}


@dataclass(frozen=True)
class Node:
    parent: int | None
    kind: str
    start: int  # ms
    end: int


@st.composite
def nestings(draw: st.DrawFn) -> tuple[Node, ...]:
    """A random tree whose spans nest inside their parents (children may run in parallel), every kind at every depth."""
    root_end = draw(st.integers(10, 400))
    nodes = [Node(None, draw(st.sampled_from([*STAGES, "none", "none"])), 0, root_end)]
    for _ in range(draw(st.integers(1, 16))):
        parent = draw(st.integers(0, len(nodes) - 1))
        outer = nodes[parent]
        start = draw(st.integers(outer.start, outer.end))
        end = draw(st.integers(start, outer.end))
        nodes.append(Node(parent, draw(st.sampled_from([*STAGES, "none"])), start, end))
    return tuple(nodes)


def outermost_calls(nodes: tuple[Node, ...], stage: str) -> list[int]:
    """Indexes of the spans of ``stage`` with no ancestor of ``stage``: each is one call."""

    def inside_own_stage(index: int) -> bool:
        parent = nodes[index].parent
        while parent is not None:
            if nodes[parent].kind == stage:
                return True
            parent = nodes[parent].parent
        return False

    return [i for i, node in enumerate(nodes) if node.kind == stage and not inside_own_stage(i)]


def covered(intervals: list[tuple[int, int]]) -> int:
    cells: set[int] = set()
    for start, end in intervals:
        cells.update(range(start, end))
    return len(cells)


@settings(max_examples=150, deadline=None, database=None)
@given(nodes=nestings(), order=st.randoms(use_true_random=False), max_calls=st.integers(1, 3))
def test_counts_busy_and_iterations_count_outermost_calls_of_random_nestings(
    nodes: tuple[Node, ...], order: object, max_calls: int
) -> None:
    """Count, busy, the calls verdict and the iterations hint follow the outermost calls; the union every span."""
    text = "version: 1\nhints: {min_saving_ms: 0}\nstages:\n" + "".join(
        f"  {stage}: {{budget_ms: 10000, max_calls: {max_calls}, parallelizable: false}}\n" for stage in STAGES
    )
    p = pipeline(text)
    spans: list[trace.Span] = []
    for index, node in enumerate(nodes):
        parent = spans[node.parent] if node.parent is not None else None
        spans.append(p.start(f"{node.kind} {index}", node.start, parent=parent, attributes=KIND_ATTRIBUTES[node.kind]))
    children = list(range(1, len(nodes)))
    order.shuffle(children)  # type: ignore[attr-defined]
    for index in [*children, 0]:
        spans[index].end(end_time=at(nodes[index].end))

    exported = p.span(f"{nodes[0].kind} 0")
    attrs = dict(exported.attributes or {})
    expected_calls = []
    expected_hints = []
    for stage in STAGES:
        members = [n for n in nodes if n.kind == stage]
        if not members:
            assert attr.stage_key(stage, "count") not in attrs
            continue
        calls = outermost_calls(nodes, stage)
        union = covered([(n.start, n.end) for n in members])
        busy = sum(nodes[i].end - nodes[i].start for i in calls)
        assert figures(exported, stage) == (len(calls), float(busy), float(union))
        if len(calls) > max_calls:
            expected_calls.append((stage, len(calls)))
            # Wall-clock: the calls' union less the union of the first max_calls, at most the critical time.
            ordered = sorted((nodes[i].start, nodes[i].end, i) for i in calls)
            kept = covered([(start, end) for start, end, _ in ordered[:max_calls]])
            saving = covered([(start, end) for start, end, _ in ordered]) - kept
            critical = next(s.critical_ms for s in p.reports[-1].stages if s.stage == stage)
            saving = min(float(saving), critical if critical is not None else float(saving))
            if saving > 0:
                expected_hints.append((stage, len(calls), float(saving)))
    found_calls = [(v[attr.STAGE], v[attr.CALLS]) for v in violation_events(exported) if v[attr.KIND] == "calls"]
    assert found_calls == expected_calls
    found_hints = sorted(
        (h[attr.STAGE], h[attr.HINT_SPAN_COUNT], h[attr.HINT_SAVINGS_MS])
        for h in hints_of(exported)
        if h[attr.HINT_KIND] == "iterations"
    )
    assert found_hints == sorted(expected_hints)


# -- kinds of call ----------------------------------------------------------------------


def test_operation_is_the_first_operation_attribute_else_the_name() -> None:
    """Semconv first, then OpenInference, Traceloop, Langfuse; a non-string value is skipped; the name last."""
    assert operation_of("x", {"gen_ai.operation.name": "chat", "openinference.span.kind": "LLM"}) == "chat"
    assert operation_of("x", {"openinference.span.kind": "TOOL"}) == "TOOL"
    assert operation_of("x", {"gen_ai.operation.name": 3, "traceloop.span.kind": "tool"}) == "tool"
    assert operation_of("x", {"langfuse.observation.type": "retriever"}) == "retriever"
    assert operation_of("guardrail input", {"app.step": "guard"}) == "guardrail input"


def test_an_embedding_then_the_search_that_uses_it_earns_no_hint() -> None:
    """Embedding then vector search, both retrieval: a pipeline of two kinds, not calls that could run at once."""
    p = pipeline()
    root = p.start("request", 0)
    p.run("embeddings", 0, 50, parent=root, attributes=op("embeddings"))
    p.run("vector search", 50, 120, parent=root, attributes=op("retrieval"))
    root.end(end_time=at(120))
    assert hints_of(p.span("request")) == []


def test_two_retrievals_in_turn_earn_a_hint_and_a_step_of_another_kind_ends_the_run() -> None:
    """retrieval, retrieval, embeddings, retrieval: the first two are one run (saving 40 ms); the rest stand alone."""
    p = pipeline()
    root = p.start("request", 0)
    p.run("search docs", 0, 60, parent=root, attributes=op("retrieval"))
    p.run("search faq", 60, 100, parent=root, attributes=op("retrieval"))
    p.run("embed answer", 100, 150, parent=root, attributes=op("embeddings"))
    p.run("search again", 150, 200, parent=root, attributes=op("retrieval"))
    root.end(end_time=at(200))
    assert hints_of(p.span("request")) == [hint("sequential_calls", "retrieval", 2, 40.0)]


def test_different_tools_are_one_kind_of_call() -> None:
    """Two different tools called in turn are both execute_tool: one hint."""
    p = pipeline()
    root = p.start("request", 0)
    p.run("execute_tool lookup_order", 0, 30, parent=root, attributes=op("execute_tool"))
    p.run("execute_tool get_weather", 30, 50, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(50))
    [hint] = hints_of(p.span("request"))
    assert (hint[attr.HINT_SPAN_COUNT], hint[attr.HINT_SAVINGS_MS]) == (2, 20.0)


def test_spans_without_an_operation_are_of_one_kind_when_they_share_a_name() -> None:
    """A custom parallelizable stage: same-named spans in turn earn a hint, differently named ones do not."""
    text = "version: 1\nstages:\n  checks: {budget_ms: 500, parallelizable: true, match: {name: 'check *'}}\n"
    p = pipeline(text)
    root = p.start("request", 0)
    p.run("check pii", 0, 20, parent=root)
    p.run("check pii", 20, 40, parent=root)
    p.run("check toxicity", 40, 60, parent=root)
    root.end(end_time=at(60))
    assert [(h[attr.HINT_SPAN_COUNT], h[attr.HINT_SAVINGS_MS]) for h in hints_of(p.span("request"))] == [(2, 20.0)]


# -- the saving threshold ---------------------------------------------------------------


def test_sub_threshold_savings_earn_no_hint_by_default() -> None:
    """Two tool calls in turn saving 0.4 ms: below the default 5 ms, no hint; 5 ms exactly clears it."""
    p = pipeline()
    root = p.start("request", 0)
    p.run("tool a", 0, 0.5, parent=root, attributes=op("execute_tool"))
    p.run("tool b", 0.5, 0.9, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(1))
    assert hints_of(p.span("request")) == []

    p = pipeline()
    root = p.start("request", 0)
    p.run("tool a", 0, 5, parent=root, attributes=op("execute_tool"))
    p.run("tool b", 5, 10, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(10))
    assert [h[attr.HINT_SAVINGS_MS] for h in hints_of(p.span("request"))] == [5.0]
