"""Critical-path attribution and the hints that say where time can be won."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from latency_budget import _attributes as attr
from latency_budget import load_budgets
from latency_budget._core.critical_path import RecordedSpan, critical_path_ns
from latency_budget._replay import SpanRecord, evaluate_spans

from .helpers import TECHCORP_YAML, at, op, pipeline

HINT_YAML = """
version: 1
stages:
  retrieval: {budget_ms: 100}
  model_call: {budget_ms: 800, max_calls: 2}
  tool_calls: {budget_ms: 200}
"""


def hints_of(span: ReadableSpan) -> list[dict[str, object]]:
    return [dict(e.attributes or {}) for e in span.events if e.name == attr.HINT_EVENT]


def root_attrs(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


def hex_id(span: ReadableSpan) -> str:
    """The span id as Jaeger shows it: 16 hex digits."""
    assert span.context is not None
    return f"{span.context.span_id:016x}"


def test_back_to_back_stages_each_own_their_time_unlike_jaeger() -> None:
    """Stages back to back each own their duration: a sibling ending as the next starts is on the path.

    Jaeger's view takes only a sibling that ended strictly before the next one started, so
    there the model call (ending at 1295, as the tool starts) would be the root's own time.
    """
    p = pipeline()
    root = p.start("request", 0)
    p.run("retrieve", 0, 45, parent=root, attributes=op("retrieval"))
    p.run("chat", 45, 1295, parent=root, attributes=op("chat"))
    p.run("tool", 1295, 1445, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(1445))
    a = root_attrs(p.span("request"))
    assert a[attr.stage_key("retrieval", "critical_ms")] == 45.0
    assert a[attr.stage_key("model_call", "critical_ms")] == 1250.0
    assert a[attr.stage_key("tool_calls", "critical_ms")] == 150.0
    assert a[attr.UNATTRIBUTED_MS] == 0.0
    assert a[attr.CRITICAL_STAGE] == "model_call"


def test_overlapping_sibling_is_cut_at_the_cursor_where_jaeger_skips_it() -> None:
    """Two overlapping tool calls: the path follows the last to finish, then the other, cut at its start.

    Jaeger's view skips a sibling still running when the next one started, so there 0-50
    would be the root's own time (tool_calls 130, unattributed 70).
    """
    p = pipeline()
    root = p.start("request", 0)
    p.run("tool a", 0, 150, parent=root, attributes=op("execute_tool"))
    p.run("tool b", 50, 180, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(200))
    a = root_attrs(p.span("request"))
    # b (50-180) is critical; before it, a covers 0-50; 180-200 is the root's own time.
    assert a[attr.stage_key("tool_calls", "critical_ms")] == 180.0
    assert a[attr.UNATTRIBUTED_MS] == 20.0
    assert hints_of(p.span("request")) == []  # overlapping siblings: no sequential hint


def test_siblings_ending_together_the_earlier_start_wins_unlike_jaeger() -> None:
    """Of two siblings that end at the same instant, the one that started first is on the path.

    Jaeger's view keeps the order of the spans in the trace for equal ends; here the order
    in which they were recorded does not matter.
    """
    for late_first in (True, False):
        p = pipeline()
        root = p.start("request", 0)
        if late_first:
            p.run("tool", 50, 100, parent=root, attributes=op("execute_tool"))
        p.run("retrieve", 0, 100, parent=root, attributes=op("retrieval"))
        if not late_first:
            p.run("tool", 50, 100, parent=root, attributes=op("execute_tool"))
        root.end(end_time=at(100))
        a = root_attrs(p.span("request"))
        assert a[attr.stage_key("retrieval", "critical_ms")] == 100.0
        assert attr.stage_key("tool_calls", "critical_ms") not in a


def test_sequential_tools_get_a_hint_with_sum_minus_max_savings() -> None:
    """Three back-to-back tool calls produce one sequential_calls hint: savings = sum - max."""
    p = pipeline()
    root = p.start("request", 0)
    p.run("tool a", 0, 100, parent=root, attributes=op("execute_tool"))
    p.run("tool b", 100, 250, parent=root, attributes=op("execute_tool"))
    p.run("tool c", 260, 300, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(300))
    hints = hints_of(p.span("request"))
    assert hints == [
        {
            attr.HINT_KIND: "sequential_calls",
            attr.STAGE: "tool_calls",
            attr.HINT_SPAN_COUNT: 3,
            attr.HINT_SAVINGS_MS: 100.0 + 150.0 + 40.0 - 150.0,
            attr.HINT_SPAN_NAMES: ("tool a", "tool b", "tool c"),
            attr.HINT_SPAN_IDS: " ".join(hex_id(p.span(name)) for name in ("tool a", "tool b", "tool c")),
        }
    ]


def test_a_long_sequential_run_names_its_first_five_calls_and_counts_all() -> None:
    """Eight back-to-back tool calls: the hint names the first five, in start order, and counts eight."""
    p = pipeline()
    root = p.start("request", 0)
    for n in range(8):
        p.run(f"tool {n}", 10 * n, 10 * n + 10, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(80))
    (hint,) = hints_of(p.span("request"))
    first_five = [f"tool {n}" for n in range(5)]
    assert hint[attr.HINT_SPAN_COUNT] == 8
    assert hint[attr.HINT_SPAN_NAMES] == tuple(first_five)
    assert hint[attr.HINT_SPAN_IDS] == " ".join(hex_id(p.span(name)) for name in first_five)


def test_a_hint_cuts_long_span_names_to_a_bounded_length() -> None:
    """A span name of 500 characters appears in a hint as its first 119 characters and an ellipsis."""
    p = pipeline()
    root = p.start("request", 0)
    long_name = "tool " + "x" * 495
    p.run(long_name, 0, 100, parent=root, attributes=op("execute_tool"))
    p.run("tool b", 100, 200, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(200))
    (hint,) = hints_of(p.span("request"))
    assert hint[attr.HINT_SPAN_NAMES] == (long_name[:119] + "\u2026", "tool b")


def test_replayed_spans_give_hints_that_name_their_spans() -> None:
    """Judging recorded spans (the CLI's path) names a hint's spans as the live processor does."""
    config = load_budgets(text=TECHCORP_YAML)
    root = SpanRecord(1, 10, None, "request", at(0), at(300), kind=SpanKind.SERVER)
    tools = [
        SpanRecord(1, 11 + n, 10, f"tool {n}", at(100 * n), at(100 * n + 100), attributes=op("execute_tool"))
        for n in range(3)
    ]
    (report,) = evaluate_spans(config, [root, *tools])
    (hint,) = report.hints
    assert (hint.kind, hint.span_count, hint.span_ids, hint.span_names) == (
        "sequential_calls",
        3,
        (11, 12, 13),
        ("tool 0", "tool 1", "tool 2"),
    )


def test_model_call_between_tools_breaks_the_sequential_run() -> None:
    """Tool, model, tool (a dependent agent step) is not reported as parallelisable."""
    p = pipeline()
    root = p.start("request", 0)
    p.run("tool a", 0, 100, parent=root, attributes=op("execute_tool"))
    p.run("chat", 100, 300, parent=root, attributes=op("chat"))
    p.run("tool b", 300, 400, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(400))
    assert hints_of(p.span("request")) == []


def test_stage_not_parallelizable_gets_no_sequential_hint() -> None:
    """Sequential model calls are not flagged: model_call is not parallelizable by default."""
    p = pipeline()
    root = p.start("request", 0)
    p.run("chat 1", 0, 100, parent=root, attributes=op("chat"))
    p.run("chat 2", 100, 200, parent=root, attributes=op("chat"))
    root.end(end_time=at(200))
    assert hints_of(p.span("request")) == []


def test_parallelizable_can_be_set_in_the_budget_file() -> None:
    """`parallelizable: false` on tool_calls silences its sequential hint."""
    p = pipeline("version: 1\nstages:\n  tool_calls: {budget_ms: 200, parallelizable: false}\n")
    root = p.start("request", 0)
    p.run("tool a", 0, 100, parent=root, attributes=op("execute_tool"))
    p.run("tool b", 100, 200, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(200))
    assert hints_of(p.span("request")) == []


def test_iterations_hint_counts_the_calls_beyond_max_calls() -> None:
    """Four model calls with max_calls 2: an iterations hint saving the last two calls' time."""
    p = pipeline(HINT_YAML)
    root = p.start("agent", 0)
    for n, (start, end) in enumerate([(0, 100), (100, 250), (250, 300), (300, 420)]):
        p.run(f"chat {n}", start, end, parent=root, attributes=op("chat"))
    root.end(end_time=at(420))
    exported = p.span("agent")
    assert hints_of(exported) == [
        {
            attr.HINT_KIND: "iterations",
            attr.STAGE: "model_call",
            attr.HINT_SPAN_COUNT: 4,
            attr.HINT_SAVINGS_MS: 170.0,
            attr.HINT_SPAN_NAMES: ("chat 2", "chat 3"),  # the calls beyond max_calls
            attr.HINT_SPAN_IDS: f"{hex_id(p.span('chat 2'))} {hex_id(p.span('chat 3'))}",
        }
    ]
    assert root_attrs(exported)[attr.stage_key("model_call", "count")] == 4


def test_nested_tool_that_calls_the_model_attributes_inner_time_to_the_model() -> None:
    """A tool span containing a model call: the model's time is model_call, the rest tool_calls."""
    p = pipeline()
    root = p.start("request", 0)
    tool = p.start("tool", 0, parent=root, attributes=op("execute_tool"))
    p.run("chat inside tool", 20, 120, parent=tool, attributes=op("chat"))
    tool.end(end_time=at(150))
    root.end(end_time=at(150))
    a = root_attrs(p.span("request"))
    assert a[attr.stage_key("model_call", "critical_ms")] == 100.0
    assert a[attr.stage_key("tool_calls", "critical_ms")] == 50.0
    assert a[attr.UNATTRIBUTED_MS] == 0.0
    assert a[attr.CRITICAL_STAGE] == "model_call"


def test_gap_between_stages_counts_as_unattributed() -> None:
    """Time in the root (or unmatched spans) between stages is unattributed."""
    p = pipeline()
    root = p.start("request", 0)
    p.run("retrieve", 0, 50, parent=root, attributes=op("retrieval"))
    p.run("parse json", 60, 90, parent=root)  # unmatched child: still unattributed
    p.run("chat", 100, 300, parent=root, attributes=op("chat"))
    root.end(end_time=at(320))
    a = root_attrs(p.span("request"))
    assert a[attr.stage_key("retrieval", "critical_ms")] == 50.0
    assert a[attr.stage_key("model_call", "critical_ms")] == 200.0
    assert a[attr.UNATTRIBUTED_MS] == 70.0


def test_stage_under_unmatched_parent_still_owns_its_time() -> None:
    """An HTTP span wrapping a model span: the model's time is model_call, the wrapper's own is not."""
    p = pipeline()
    root = p.start("request", 0)
    http = p.start("POST /chat/completions", 0, parent=root)
    p.run("chat", 10, 90, parent=http, attributes=op("chat"))
    http.end(end_time=at(100))
    root.end(end_time=at(100))
    a = root_attrs(p.span("request"))
    assert a[attr.stage_key("model_call", "critical_ms")] == 80.0
    assert a[attr.UNATTRIBUTED_MS] == 20.0


def test_child_ending_after_its_parent_is_cut_at_the_parent_end() -> None:
    """A child that outlives its (non-root) parent counts only up to the parent's end."""
    p = pipeline()
    root = p.start("request", 0)
    step = p.start("step", 0, parent=root)
    tool = p.start("tool", 50, parent=step, attributes=op("execute_tool"))
    step.end(end_time=at(100))
    tool.end(end_time=at(180))
    root.end(end_time=at(200))
    a = root_attrs(p.span("request"))
    assert a[attr.stage_key("tool_calls", "critical_ms")] == 50.0
    assert a[attr.UNATTRIBUTED_MS] == 150.0


# -- properties -------------------------------------------------------------------------------


@st.composite
def random_trees(draw: st.DrawFn) -> tuple[list[RecordedSpan], int, int]:
    """A random tree of spans with arbitrary overlaps, children possibly outliving parents."""
    count = draw(st.integers(min_value=1, max_value=25))
    root_start, root_end = 0, draw(st.integers(min_value=0, max_value=1_000))
    spans: list[RecordedSpan] = [(1, None, root_start, root_end, draw(st.integers(-1, 2)))]
    for span_id in range(2, count + 1):
        parent = draw(st.integers(min_value=1, max_value=span_id - 1))
        start = draw(st.integers(min_value=-100, max_value=1_100))
        end = draw(st.integers(min_value=start, max_value=1_200))
        spans.append((span_id, parent, start, end, draw(st.integers(-1, 2))))
    return spans, root_start, root_end


@settings(max_examples=300, deadline=None)
@given(random_trees())
def test_critical_time_partitions_the_root_duration(tree: tuple[list[RecordedSpan], int, int]) -> None:
    """Stage critical times plus unattributed time add up exactly to the root's duration."""
    spans, start, end = tree
    per_stage, unattributed = critical_path_ns(1, start, end, spans, 3)
    assert all(value >= 0 for value in per_stage)
    assert unattributed >= 0
    assert sum(per_stage) + unattributed == end - start


def critical_path_oracle(
    root_id: int, root_start: int, root_end: int, spans: list[RecordedSpan], stage_count: int
) -> tuple[list[int], int]:
    """The module's rule written plainly: recursion, a full sort per span, every piece credited."""
    per_stage = [0] * stage_count
    unattributed = 0

    def credit(owner: int, length: int) -> None:
        nonlocal unattributed
        if owner >= 0:
            per_stage[owner] += length
        else:
            unattributed += length

    def walk(span_id: int, start: int, cursor: int, owner: int) -> None:
        kids = [s for s in spans if s[1] == span_id and s[0] != root_id]
        for child_id, _, child_start, child_end, stage in sorted(kids, key=lambda s: (-s[3], s[2], s[0])):
            end, begin = min(child_end, cursor), max(child_start, start)
            if cursor <= start or end <= begin:
                continue
            credit(owner, cursor - end)
            walk(child_id, begin, end, stage if stage >= 0 else owner)
            cursor = begin
        credit(owner, max(0, cursor - start))

    root_stage = next((s[4] for s in spans if s[0] == root_id), -1)
    walk(root_id, root_start, root_end, root_stage)
    return per_stage, unattributed


@st.composite
def trees_with_ties(draw: st.DrawFn) -> tuple[list[RecordedSpan], int, int]:
    """Random trees on a coarse time grid (so ends and starts tie), some spans orphaned."""
    count = draw(st.integers(min_value=1, max_value=16))
    root_end = draw(st.integers(min_value=-1, max_value=8)) * 10
    spans: list[RecordedSpan] = [(1, None, 0, root_end, draw(st.integers(-1, 2)))]
    for span_id in range(2, count + 1):
        # Mostly children of the root; a parent above span_id - 1 is never recorded before it.
        parent = draw(st.one_of(st.just(1), st.integers(min_value=1, max_value=span_id + 2)))
        start = draw(st.integers(min_value=-1, max_value=8))
        end = draw(st.integers(min_value=start, max_value=9))
        spans.append((span_id, parent, start * 10, end * 10, draw(st.integers(-1, 2))))
    draw(st.randoms(use_true_random=False)).shuffle(spans)
    return spans, 0, root_end


@settings(max_examples=500, deadline=None)
@given(st.one_of(random_trees(), trees_with_ties()))
def test_critical_path_equals_the_plain_rule(tree: tuple[list[RecordedSpan], int, int]) -> None:
    """The fast walk gives exactly what the rule, written plainly, gives: ties, cuts, orphans, any order."""
    spans, start, end = tree
    assert critical_path_ns(1, start, end, spans, 3) == critical_path_oracle(1, start, end, spans, 3)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(min_value=1, max_value=500), min_size=2, max_size=6),
    st.integers(min_value=0, max_value=100),
    st.randoms(use_true_random=False),
)
def test_no_hint_when_sibling_tools_overlap(durations: list[int], offset: int, rnd: random.Random) -> None:
    """Sibling tool calls that all share a common instant never produce a sequential hint."""
    p = pipeline()
    root = p.start("request", 0)
    common = 600.0
    for n, duration in enumerate(durations):
        start = common - rnd.uniform(0.001, duration)  # every call contains the instant `common`
        p.run(f"tool {n}", start + offset, start + offset + duration, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(2_000))
    assert [h for h in hints_of(p.span("request")) if h[attr.HINT_KIND] == "sequential_calls"] == []


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=5, max_value=500), min_size=2, max_size=6))
def test_back_to_back_tools_hint_sum_minus_max(durations: list[int]) -> None:
    """Sibling tool calls laid end to end (saving at least the default 5 ms) get one hint worth sum - max."""
    p = pipeline()
    root = p.start("request", 0)
    cursor = 0
    for n, duration in enumerate(durations):
        p.run(f"tool {n}", cursor, cursor + duration, parent=root, attributes=op("execute_tool"))
        cursor += duration
    root.end(end_time=at(cursor))
    hints = hints_of(p.span("request"))
    assert len(hints) == 1
    assert hints[0][attr.HINT_SPAN_COUNT] == len(durations)
    assert hints[0][attr.HINT_SAVINGS_MS] == float(sum(durations) - max(durations))
