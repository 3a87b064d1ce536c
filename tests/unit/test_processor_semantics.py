"""What the processor reports, on hand-built traces with explicit timestamps."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

from latency_budget import LatencyBudgetTracker
from latency_budget import _attributes as attr

from .helpers import TECHCORP_YAML, Pipeline, at, op, pipeline, violation_events

PROFILES_YAML = """
version: 1
total_ms: 1500
stages:
  retrieval: {budget_ms: 100}
  model_call: {budget_ms: 800}
  tool_calls: {budget_ms: 200}
profiles:
  - name: batch
    when: {name: "POST /batch*"}
    stages:
      model_call: {budget_ms: 5000}
      tool_calls: {budget_ms: 1000}
  - name: free-tier
    when: {kind: server, attributes: {tier: free}}
    total_ms: 400
    stages:
      model_call: {budget_ms: 300}
"""

FIRST_TOKEN_YAML = """
version: 1
first_token_ms: 100
stages:
  retrieval: {budget_ms: 100}
  model_call:
    budget_ms: 5000
    first_token_ms: 200
  tool_calls: {budget_ms: 200}
"""

CUSTOM_FIRST_TOKEN_YAML = """
version: 1
stages:
  model_call:
    budget_ms: 5000
    first_token:
      attributes: {llm.ttft_ms: ms}
      events: [llm.first_token]
"""

LIMITS_YAML = """
version: 1
stages:
  retrieval: {budget_ms: 100, severity: warn}
  model_call: {budget_ms: 800}
  tool_calls: {budget_ms: 200, max_calls: 2}
"""

SAMPLED = TraceFlags(TraceFlags.SAMPLED)


def root_attributes(p: Pipeline, name: str = "request") -> dict[str, object]:
    return dict(p.span(name).attributes or {})


def remote_parent(trace_id: int, span_id: int) -> trace.Span:
    """A parent from another process, as a propagator would extract it."""
    return NonRecordingSpan(SpanContext(trace_id, span_id, is_remote=True, trace_flags=SAMPLED))


def iso(ns: int, *, zulu: bool) -> str:
    """An instant as the ISO-8601 text Langfuse records, with microsecond precision."""
    text = (datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=ns // 1_000)).isoformat()
    return text.replace("+00:00", "Z") if zulu else text


# -- accounting ------------------------------------------------------------------------------


def test_parallel_tools_count_wall_clock_once() -> None:
    """Tools at 0-150 ms and 50-180 ms give tool_calls actual 180 ms (union), busy 280 ms (sum), count 2."""
    p = pipeline()
    root = p.start("request", 0)
    p.run("tool-a", 0, 150, parent=root, attributes=op("execute_tool"))
    p.run("tool-b", 50, 180, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(200))

    attrs = root_attributes(p)
    assert attrs[attr.stage_key("tool_calls", "actual_ms")] == 180.0
    assert attrs[attr.stage_key("tool_calls", "busy_ms")] == 280.0
    assert attrs[attr.stage_key("tool_calls", "count")] == 2
    assert attrs[attr.OVER_BUDGET_STAGES] == ()
    report = p.reports[0].stage("tool_calls")
    assert (report.actual_ms, report.busy_ms, report.count) == (180.0, 280.0, 2)
    assert report.within_budget


def test_sequential_calls_over_their_union_budget_violate() -> None:
    """Two sequential tools of 120 ms each (union 240 ms) break a 200 ms budget each alone would keep."""
    p = pipeline()
    root = p.start("request", 0)
    p.run("tool-a", 0, 120, parent=root, attributes=op("execute_tool"))
    p.run("tool-b", 120, 240, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(250))

    attrs = root_attributes(p)
    assert attrs[attr.stage_key("tool_calls", "actual_ms")] == 240.0
    assert attrs[attr.OVER_BUDGET_STAGES] == ("tool_calls",)
    assert attr.VIOLATED not in (p.span("tool-a").attributes or {})


# -- profiles -------------------------------------------------------------------------------


def test_profile_chosen_by_root_name_judges_the_whole_trace() -> None:
    """A root named 'POST /batch/...' selects the batch profile; its stage budgets apply to every span."""
    p = pipeline(PROFILES_YAML)
    root = p.start("POST /batch/embeddings", 0)
    chat = p.start("chat", 0, parent=root, attributes=op("chat"))
    assert chat.attributes is not None
    assert chat.attributes[attr.STAGE_BUDGET_MS] == 5000.0  # the profile's budget, set at start
    chat.end(end_time=at(3_000))
    root.end(end_time=at(3_000))

    attrs = root_attributes(p, "POST /batch/embeddings")
    assert attrs[attr.PROFILE] == "batch"
    assert attrs[attr.stage_key("model_call", "budget_ms")] == 5000.0
    assert attrs[attr.TOTAL_BUDGET_MS] == 6100.0  # no total_ms: the sum of its stage budgets 100 + 5000 + 1000
    assert attrs[attr.VIOLATED] is False
    assert violation_events(p.span("POST /batch/embeddings")) == []
    assert attr.VIOLATED not in (p.span("chat").attributes or {})


def test_other_root_names_use_the_default_budgets() -> None:
    """The same spans under 'POST /chat' are judged by the default budgets and break them."""
    p = pipeline(PROFILES_YAML)
    root = p.start("POST /chat", 0)
    p.run("chat", 0, 3_000, parent=root, attributes=op("chat"))
    root.end(end_time=at(3_000))

    attrs = root_attributes(p, "POST /chat")
    assert attrs[attr.PROFILE] == "default"
    assert attrs[attr.TOTAL_BUDGET_MS] == 1500.0
    assert attrs[attr.OVER_BUDGET_STAGES] == ("model_call", "total")
    kinds = {(e[attr.STAGE], e[attr.KIND]) for e in violation_events(p.span("POST /chat"))}
    assert kinds == {("model_call", "duration"), ("total", "total")}
    assert p.span("chat").attributes is not None
    assert p.span("chat").attributes[attr.VIOLATED] is True


@pytest.mark.parametrize(
    ("kind", "attributes", "profile"),
    [
        (SpanKind.SERVER, {"tier": "free"}, "free-tier"),
        (SpanKind.INTERNAL, {"tier": "free"}, "default"),
        (SpanKind.SERVER, {"tier": "paid"}, "default"),
        (SpanKind.SERVER, {}, "default"),
    ],
)
def test_profile_chosen_by_root_kind_and_attributes(kind: SpanKind, attributes: dict[str, str], profile: str) -> None:
    """A profile whose `when` names a kind and an attribute applies only when both hold on the root."""
    p = pipeline(PROFILES_YAML)
    root = p.start("request", 0, attributes=attributes, kind=kind)
    p.run("chat", 0, 350, parent=root, attributes=op("chat"))
    root.end(end_time=at(350))

    attrs = root_attributes(p)
    assert attrs[attr.PROFILE] == profile
    if profile == "free-tier":
        assert attrs[attr.TOTAL_BUDGET_MS] == 400.0
        assert attrs[attr.OVER_BUDGET_STAGES] == ("model_call",)
    else:
        assert attrs[attr.TOTAL_BUDGET_MS] == 1500.0
        assert attrs[attr.OVER_BUDGET_STAGES] == ()


def test_profile_is_chosen_at_root_start() -> None:
    """An attribute set on the root after it started does not change its profile."""
    p = pipeline(PROFILES_YAML)
    root = p.start("request", 0, kind=SpanKind.SERVER)
    root.set_attribute("tier", "free")
    p.run("chat", 0, 350, parent=root, attributes=op("chat"))
    root.end(end_time=at(350))

    assert root_attributes(p)[attr.PROFILE] == "default"


# -- time to first token -----------------------------------------------------------------------


def test_first_token_from_semconv_seconds_attribute() -> None:
    """gen_ai.response.time_to_first_chunk (seconds) becomes the stage's first_token_ms and is judged."""
    p = pipeline(FIRST_TOKEN_YAML)
    root = p.start("request", 0)
    p.run("chat", 0, 1_000, parent=root, attributes={**op("chat"), "gen_ai.response.time_to_first_chunk": 0.25})
    root.end(end_time=at(1_000))

    attrs = root_attributes(p)
    assert attrs[attr.stage_key("model_call", "worst_first_token_ms")] == 250.0
    assert attrs[attr.TOTAL_FIRST_TOKEN_MS] == 250.0
    events = [e for e in violation_events(p.span("request")) if e[attr.KIND] == "first_token"]
    assert [(e[attr.STAGE], e[attr.BUDGET_MS], e[attr.ACTUAL_MS], e[attr.OVER_MS]) for e in events] == [
        ("model_call", 200.0, 250.0, 50.0),
        ("total", 100.0, 250.0, 150.0),
    ]
    assert attrs[attr.OVER_BUDGET_STAGES] == ("model_call", "total")


@pytest.mark.parametrize("zulu", [True, False], ids=["Z", "+00:00"])
def test_first_token_from_langfuse_completion_start_time(zulu: bool) -> None:
    """langfuse.observation.completion_start_time (an ISO instant) gives the time from the span's start."""
    p = pipeline(FIRST_TOKEN_YAML)
    root = p.start("request", 0)
    first = iso(at(250), zulu=zulu)
    p.run(
        "chat", 100, 1_000, parent=root, attributes={**op("chat"), "langfuse.observation.completion_start_time": first}
    )
    root.end(end_time=at(1_000))

    attrs = root_attributes(p)
    assert attrs[attr.stage_key("model_call", "worst_first_token_ms")] == 150.0
    assert attrs[attr.TOTAL_FIRST_TOKEN_MS] == 250.0  # from the root's start


@pytest.mark.parametrize("event", ["gen_ai.first_token", "First Token Stream Event", "gen_ai.content.completion.chunk"])
def test_first_token_from_events(event: str) -> None:
    """The first of a known first-token event marks the first token (later chunks do not move it)."""
    p = pipeline(FIRST_TOKEN_YAML)
    root = p.start("request", 0)
    chat = p.start("chat", 30, parent=root, attributes=op("chat"))
    chat.add_event(event, timestamp=at(150))
    chat.add_event(event, timestamp=at(400))
    chat.end(end_time=at(1_000))
    root.end(end_time=at(1_000))

    attrs = root_attributes(p)
    assert attrs[attr.stage_key("model_call", "worst_first_token_ms")] == 120.0
    assert attrs[attr.TOTAL_FIRST_TOKEN_MS] == 150.0


@pytest.mark.parametrize(
    ("attributes", "event_at", "expected"),
    [({"llm.ttft_ms": 42.5}, None, 42.5), ({}, 60, 60.0), ({"llm.ttft_ms": 10.0}, 60, 10.0)],
    ids=["attribute-ms", "event", "attribute-first"],
)
def test_first_token_from_custom_sources(attributes: dict[str, float], event_at: float | None, expected: float) -> None:
    """Sources declared under a stage's `first_token:` are read, in order, with their units."""
    p = pipeline(CUSTOM_FIRST_TOKEN_YAML)
    root = p.start("request", 0)
    chat = p.start("chat", 0, parent=root, attributes={**op("chat"), **attributes})
    if event_at is not None:
        chat.add_event("llm.first_token", timestamp=at(event_at))
    chat.end(end_time=at(1_000))
    root.end(end_time=at(1_000))

    assert root_attributes(p)[attr.stage_key("model_call", "worst_first_token_ms")] == expected


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("gen_ai.response.time_to_first_chunk", "fast"),
        ("gen_ai.response.time_to_first_chunk", -0.5),
        ("gen_ai.response.time_to_first_chunk", math.nan),
        ("gen_ai.response.time_to_first_chunk", math.inf),
        ("gen_ai.response.time_to_first_chunk", True),
        ("langfuse.observation.completion_start_time", "not a time"),
        ("langfuse.observation.completion_start_time", "2023-11-14T22:13:20"),  # no zone
        ("langfuse.observation.completion_start_time", "2000-01-01T00:00:00Z"),  # before the span
        ("langfuse.observation.completion_start_time", 0.25),
    ],
)
def test_unusable_first_token_values_are_ignored(key: str, value: object) -> None:
    """Non-numeric, negative, NaN, infinite, zoneless or earlier-than-start values give no first token."""
    p = pipeline(FIRST_TOKEN_YAML)
    root = p.start("request", 0)
    p.run("chat", 0, 1_000, parent=root, attributes={**op("chat"), key: value})  # type: ignore[dict-item]
    root.end(end_time=at(1_000))

    attrs = root_attributes(p)
    assert attrs[attr.stage_key("model_call", "count")] == 1
    assert attr.stage_key("model_call", "worst_first_token_ms") not in attrs
    assert attr.TOTAL_FIRST_TOKEN_MS not in attrs
    assert attrs[attr.VIOLATED] is False


def test_stage_first_token_is_the_worst_and_trace_first_token_the_earliest() -> None:
    """A stage's first token is its slowest span's; the trace's is root start to the earliest first-token instant."""
    p = pipeline(FIRST_TOKEN_YAML)
    root = p.start("request", 0)
    ttft = "gen_ai.response.time_to_first_chunk"
    p.run("chat-early", 50, 600, parent=root, attributes={**op("chat"), ttft: 0.1})  # first token at 150 ms
    p.run("chat-slow", 10, 700, parent=root, attributes={**op("chat"), ttft: 0.2})  # first token at 210 ms
    root.end(end_time=at(700))

    attrs = root_attributes(p)
    assert attrs[attr.stage_key("model_call", "worst_first_token_ms")] == 200.0
    assert attrs[attr.TOTAL_FIRST_TOKEN_MS] == 150.0
    total = [e for e in violation_events(p.span("request")) if e[attr.STAGE] == "total"]
    assert total == [
        {
            attr.STAGE: "total",
            attr.KIND: "first_token",
            attr.SEVERITY: "error",
            attr.BUDGET_MS: 100.0,
            attr.ACTUAL_MS: 150.0,
            attr.OVER_MS: 50.0,
        }
    ]
    assert attrs[attr.VIOLATED] is True
    assert attrs[attr.OVER_BUDGET_STAGES] == ("total",)  # model_call kept its own 200 ms budget; the request broke its


# -- limits and severities ------------------------------------------------------------------------


def test_max_calls_violation() -> None:
    """Three tool calls against max_calls 2 give a 'calls' violation carrying max_calls and calls."""
    p = pipeline(LIMITS_YAML)
    root = p.start("request", 0)
    for n in range(3):
        p.run(f"tool-{n}", 10 * n, 10 * n + 10, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(100))

    attrs = root_attributes(p)
    assert attrs[attr.OVER_BUDGET_STAGES] == ("tool_calls",)
    assert attrs[attr.VIOLATED] is True
    assert violation_events(p.span("request")) == [
        {attr.STAGE: "tool_calls", attr.KIND: "calls", attr.SEVERITY: "error", attr.MAX_CALLS: 2, attr.CALLS: 3}
    ]
    event = violation_events(p.span("request"))[0]
    assert (type(event[attr.MAX_CALLS]), type(event[attr.CALLS])) == (int, int)


def test_max_calls_reached_but_not_exceeded_is_fine() -> None:
    """Exactly max_calls calls is within budget."""
    p = pipeline(LIMITS_YAML)
    root = p.start("request", 0)
    for n in range(2):
        p.run(f"tool-{n}", 10 * n, 10 * n + 10, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(100))

    assert root_attributes(p)[attr.VIOLATED] is False
    assert violation_events(p.span("request")) == []


def test_warn_severity_is_reported_but_not_a_violation() -> None:
    """A warn stage over budget appears in events and warn_stages, not in over_budget_stages or violated."""
    p = pipeline(LIMITS_YAML)
    root = p.start("request", 0)
    p.run("retrieve", 0, 150, parent=root, attributes=op("retrieval"))
    root.end(end_time=at(200))

    attrs = root_attributes(p)
    assert attrs[attr.WARN_STAGES] == ("retrieval",)
    assert attrs[attr.OVER_BUDGET_STAGES] == ()
    assert attrs[attr.VIOLATED] is False
    assert [(e[attr.STAGE], e[attr.KIND], e[attr.SEVERITY]) for e in violation_events(p.span("request"))] == [
        ("retrieval", "duration", "warn")
    ]
    span = dict(p.span("retrieve").attributes or {})
    assert span[attr.WARNED] is True
    assert attr.VIOLATED not in span
    assert span[attr.ACTUAL_MS] == 150.0
    assert p.reports[0].warn_stages == ("retrieval",)
    assert not p.reports[0].violated


# -- stage spans ---------------------------------------------------------------------------------


def test_stage_spans_are_labelled_at_start_and_only_spans_over_budget_copied() -> None:
    """Stage spans carry stage and budget_ms from their start; only those over their own budget are copied."""
    p = pipeline()
    root = p.start("request", 0)
    retrieve = p.start("retrieve", 0, parent=root, attributes=op("retrieval"))
    assert retrieve.attributes is not None
    assert retrieve.attributes[attr.STAGE] == "retrieval"  # on the live span, before it ends
    assert retrieve.attributes[attr.STAGE_BUDGET_MS] == 100.0
    retrieve.end(end_time=at(40))
    chat = p.run("chat", 40, 1_000, parent=root, attributes=op("chat"))
    other = p.run("parse", 1_000, 1_010, parent=root)
    root.end(end_time=at(1_010))

    within = p.span("retrieve")
    assert p.passed_untouched(within)
    assert dict(within.attributes or {}) == {**op("retrieval"), attr.STAGE: "retrieval", attr.STAGE_BUDGET_MS: 100.0}

    over = p.span("chat")
    assert not p.passed_untouched(over)
    assert over.attributes is not None
    assert over.attributes[attr.STAGE] == "model_call"
    assert over.attributes[attr.VIOLATED] is True
    assert over.attributes[attr.ACTUAL_MS] == 960.0
    assert attr.VIOLATED not in (chat.attributes or {})  # the original span is never modified
    assert over.context == chat.get_span_context()
    assert (over.start_time, over.end_time) == (at(40), at(1_000))

    unstaged = p.span("parse")
    assert p.passed_untouched(unstaged)
    assert attr.STAGE not in (other.attributes or {})
    assert not p.passed_untouched(p.span("request"))


def test_span_matching_only_through_later_attributes_is_classified_at_end() -> None:
    """A span that matches a stage only through attributes set after start is counted and its copy labelled."""
    p = pipeline()
    root = p.start("request", 0)
    llm = p.start("llm", 0, parent=root)
    assert attr.STAGE not in (llm.attributes or {})
    llm.set_attribute("gen_ai.operation.name", "chat")
    llm.end(end_time=at(500))
    root.end(end_time=at(500))

    exported = p.span("llm")
    assert not p.passed_untouched(exported)
    assert exported.attributes is not None
    assert exported.attributes[attr.STAGE] == "model_call"
    assert exported.attributes[attr.STAGE_BUDGET_MS] == 800.0
    assert attr.VIOLATED not in exported.attributes
    attrs = root_attributes(p)
    assert attrs[attr.stage_key("model_call", "count")] == 1
    assert attrs[attr.stage_key("model_call", "actual_ms")] == 500.0


# -- local roots ----------------------------------------------------------------------------------


def test_span_with_remote_parent_is_a_local_root() -> None:
    """A span whose parent came from another process is annotated as the root of its own accounting."""
    p = pipeline()
    server = p.start("server", 0, parent=remote_parent(0xABC, 0x1), kind=SpanKind.SERVER)
    p.run("chat", 0, 900, parent=server, attributes=op("chat"))
    server.end(end_time=at(1_000))

    attrs = root_attributes(p, "server")
    assert attrs[attr.OVER_BUDGET_STAGES] == ("model_call",)
    assert attrs[attr.TOTAL_ACTUAL_MS] == 1000.0
    assert len(p.reports) == 1
    assert p.reports[0].trace_id == 0xABC
    assert p.reports[0].span_id == server.get_span_context().span_id


def test_two_local_roots_of_one_trace_are_accounted_separately() -> None:
    """Two local roots in one trace each get a report and attributes for their own spans only."""
    p = pipeline()
    first = p.start("first", 0, parent=remote_parent(0xABC, 0x1))
    second = p.start("second", 0, parent=remote_parent(0xABC, 0x2))
    p.run("chat", 0, 900, parent=first, attributes=op("chat"))
    p.run("tool", 0, 50, parent=second, attributes=op("execute_tool"))
    first.end(end_time=at(1_000))
    second.end(end_time=at(100))

    first_attrs = root_attributes(p, "first")
    second_attrs = root_attributes(p, "second")
    assert first_attrs[attr.stage_key("model_call", "count")] == 1
    assert attr.stage_key("tool_calls", "count") not in first_attrs
    assert first_attrs[attr.VIOLATED] is True
    assert second_attrs[attr.stage_key("tool_calls", "count")] == 1
    assert attr.stage_key("model_call", "count") not in second_attrs
    assert second_attrs[attr.VIOLATED] is False
    assert second_attrs[attr.TOTAL_ACTUAL_MS] == 100.0
    assert [r.trace_id for r in p.reports] == [0xABC, 0xABC]
    assert {r.root_name for r in p.reports} == {"first", "second"}


# -- the attribute contract --------------------------------------------------------------------------


def everything_over_budget() -> tuple[Pipeline, ReadableSpan]:
    """A trace (integer timings, integer budgets) breaking every kind of budget, and its exported root."""
    p = pipeline(
        """
version: 1
total_ms: 1000
first_token_ms: 100
stages:
  retrieval: {budget_ms: 100, severity: warn}
  model_call: {budget_ms: 800, first_token_ms: 200}
  tool_calls: {budget_ms: 200, max_calls: 1}
"""
    )
    root = p.start("request", 0)
    p.run("retrieve", 0, 150, parent=root, attributes=op("retrieval"))
    p.run("chat", 150, 1_250, parent=root, attributes={**op("chat"), "gen_ai.response.time_to_first_chunk": 1})
    for n in range(3):
        p.run(f"tool-{n}", 1_250 + 100 * n, 1_350 + 100 * n, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(1_600))
    return p, p.span("request")


def test_every_ms_attribute_is_a_float() -> None:
    """Every `_ms` attribute the package writes, on spans and events, is a float even for whole numbers."""
    p, root = everything_over_budget()
    kinds = {e[attr.KIND] for e in violation_events(root)}
    assert kinds == {"duration", "first_token", "calls", "total"}
    written: list[tuple[str, object]] = []
    for span in p.finished():
        written += [(k, v) for k, v in (span.attributes or {}).items() if k.startswith("latency_budget.")]
        for event in span.events:
            if event.name.startswith("latency_budget."):
                written += list((event.attributes or {}).items())
    ms_values = [(k, v) for k, v in written if k.endswith("_ms")]
    assert len(ms_values) > 20
    assert [(k, v) for k, v in ms_values if type(v) is not float] == []


def test_events_carry_the_root_end_time() -> None:
    """Every event the package adds to a root whose times are whole microseconds is stamped at its end."""
    _, root = everything_over_budget()
    added = [e for e in root.events if e.name.startswith("latency_budget.")]
    assert len(added) >= 4
    assert {e.timestamp for e in added} == {at(1_600)}
    assert root.end_time == at(1_600)


# -- the hand tracker ----------------------------------------------------------------------------


def test_tracker_prints_the_seed_example(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's tracker example prints its two lines exactly."""
    tracker = LatencyBudgetTracker({"retrieval": 100, "model_call": 800, "tool_calls": 200})
    tracker.record("retrieval", 45.2)
    tracker.record("model_call", 1250.0)
    tracker.record("tool_calls", 150.0)
    r = tracker.report()
    print(f"Total budget: {r['total_budget_ms']}ms, actual: {r['total_actual_ms']}ms")
    print(f"Stages over budget: {r['over_budget_stages']}")

    assert capsys.readouterr().out == "Total budget: 1100ms, actual: 1445.2ms\nStages over budget: ['model_call']\n"


def test_tracker_within_budget_per_stage() -> None:
    """tracker.budgets[stage].within_budget is False only for stages whose recorded time exceeds the budget."""
    tracker = LatencyBudgetTracker({"retrieval": 100, "model_call": 800, "tool_calls": 200})
    assert tracker.budgets["model_call"].within_budget  # nothing recorded yet
    tracker.record("retrieval", 45.2)
    tracker.record("model_call", 1250.0)
    tracker.record("tool_calls", 150.0)

    assert tracker.budgets["retrieval"].within_budget
    assert not tracker.budgets["model_call"].within_budget
    assert tracker.budgets["tool_calls"].within_budget
    assert tracker.budgets["model_call"].over_ms == 450.0


def test_tracker_matches_the_same_trace_as_spans() -> None:
    """The tracker and the processor give the same verdict for the seed scenario run sequentially."""
    tracker = LatencyBudgetTracker({"retrieval": 100, "model_call": 800, "tool_calls": 200})
    for stage, ms in (("retrieval", 45.2), ("model_call", 1250.0), ("tool_calls", 150.0)):
        tracker.record(stage, ms)
    p = pipeline(TECHCORP_YAML)
    root = p.start("request", 0)
    p.run("retrieve", 0, 45.2, parent=root, attributes=op("retrieval"))
    p.run("chat", 45.2, 1295.2, parent=root, attributes=op("chat"))
    p.run("tool", 1295.2, 1445.2, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(1445.2))

    assert list(p.reports[0].over_budget_stages) == tracker.report()["over_budget_stages"]
    assert p.reports[0].total_actual_ms == tracker.report()["total_actual_ms"]
