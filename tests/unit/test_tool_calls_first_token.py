"""The user's first token is the first text the user sees: a call that answered with tool calls only gives none.

One row per vocabulary of ``TOOL_CALLS_ONLY``: a streamed planning call that asked for a
tool (its first chunk 50 ms after the request's start), then a streamed answer (its first
chunk at 700 ms). The request's first token is the answer's; model_call's worst first
token still counts both calls (each is the model's latency).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest
from opentelemetry import trace
from opentelemetry.trace import Span

from latency_budget import _attributes as attr
from latency_budget._config.genai_defaults import TOOL_CALLS_ONLY, ToolCallsOnly
from latency_budget._core.first_token import answered_with_tool_calls_only

from .helpers import Pipeline, at, op, pipeline

NO_MATCH_RULES = "version: 1\ntotal_ms: 60000\n"
TTFT = "gen_ai.client.operation.time_to_first_chunk"


def _asked_for_tools(row: ToolCallsOnly) -> dict[str, object]:
    """What a call that answered with tool calls only carries, in the row's vocabulary."""
    if row.messages_key is not None:  # as pydantic-ai writes it
        parts = [{"type": "tool_call", "id": "c1", "name": "weather", "arguments": "{}"}]
        return {row.messages_key: json.dumps([{"role": "assistant", "parts": parts}])}
    if row.finish_key is not None:
        if row.event is not None:  # as Strands writes it: one string
            return {row.finish_key: "tool_use"}
        return {row.finish_key: ("tool_calls",) if row.finish_key.endswith("s") else "tool_calls"}
    assert row.tool_call_key is not None
    return {row.tool_call_key: "get_weather"}


def _answered(row: ToolCallsOnly) -> dict[str, object]:
    """What a call that answered with text carries, in the row's vocabulary."""
    if row.messages_key is not None:
        return {row.messages_key: json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Sunny."}]}])}
    if row.finish_key is not None:
        if row.event is not None:
            return {row.finish_key: "end_turn"}
        return {row.finish_key: ("stop",) if row.finish_key.endswith("s") else "stop"}
    assert row.text_key is not None
    return {row.text_key: "It is sunny in Paris."}


def _model_call(
    p: Pipeline,
    row: ToolCallsOnly,
    name: str,
    start: float,
    end: float,
    parent: Span,
    ttft_s: float,
    said: Mapping[str, object],
) -> None:
    """A chat span in the row's scope; ``said`` is on its attributes, or on its event when the row reads one."""
    attributes: dict[str, object] = {**op("chat"), TTFT: ttft_s}
    if row.event is None:
        attributes.update(said)
    span = p.provider.get_tracer(row.scope or "tests").start_span(
        name,
        context=trace.set_span_in_context(parent),
        attributes=attributes,
        start_time=at(start),  # type: ignore[arg-type]
    )
    if row.event is not None:
        span.add_event(row.event, attributes=said, timestamp=at(end))  # type: ignore[arg-type]
    span.end(end_time=at(end))


@pytest.mark.parametrize(
    "row",
    TOOL_CALLS_ONLY,
    ids=[(r.event or "") + (r.finish_key or r.messages_key or r.tool_call_key or "") for r in TOOL_CALLS_ONLY],
)
def test_a_streamed_call_that_only_asked_for_tools_is_not_the_requests_first_token(row: ToolCallsOnly) -> None:
    """The planning call's first chunk (tool calls only) is passed over: the request's first token is the answer's."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    _model_call(p, row, "plan", 0, 400, root, 0.05, _asked_for_tools(row))
    p.run("tool", 400, 500, parent=root, attributes=op("execute_tool"))
    _model_call(p, row, "answer", 500, 900, root, 0.2, _answered(row))
    root.end(end_time=at(1000))
    request = dict(p.span("request").attributes or {})
    assert request["latency_budget.total.first_token_ms"] == pytest.approx(700.0)
    assert request[attr.stage_key("model_call", "worst_first_token_ms")] == pytest.approx(200.0)


def test_a_finish_reason_in_an_event_is_read_only_on_its_scope() -> None:
    """Strands' `gen_ai.choice` event is read on Strands' spans; the same event on another scope's says nothing."""
    [row] = [r for r in TOOL_CALLS_ONLY if r.event is not None]
    assert row.scope == "strands.telemetry.tracer"
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    elsewhere = ToolCallsOnly("another scope", finish_key=row.finish_key, event=row.event, scope="other.scope")
    _model_call(p, elsewhere, "plan", 0, 400, root, 0.05, _asked_for_tools(row))
    _model_call(p, row, "answer", 500, 900, root, 0.2, _answered(row))
    root.end(end_time=at(1000))
    request = dict(p.span("request").attributes or {})
    assert request["latency_budget.total.first_token_ms"] == pytest.approx(50.0)  # the plan's: not read there
    plan = p.span("plan")
    assert not answered_with_tool_calls_only(dict(plan.attributes or {}), lambda s: s.events, plan, "other.scope")
    assert answered_with_tool_calls_only(dict(plan.attributes or {}), lambda s: s.events, plan, row.scope)
    assert not answered_with_tool_calls_only(dict(plan.attributes or {}), None, plan, row.scope)  # no events given


def test_a_request_whose_only_streamed_call_asked_for_tools_has_no_first_token() -> None:
    """When the only first chunk carried tool calls (the answer was not streamed), the request has no first token."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    p.run(
        "plan",
        0,
        400,
        parent=root,
        attributes={**op("chat"), TTFT: 0.05, "gen_ai.response.finish_reasons": ("tool_call",)},
    )
    p.run("answer", 500, 900, parent=root, attributes={**op("chat"), "gen_ai.response.finish_reasons": ("stop",)})
    root.end(end_time=at(1000))
    request = dict(p.span("request").attributes or {})
    assert "latency_budget.total.first_token_ms" not in request
    assert request[attr.stage_key("model_call", "worst_first_token_ms")] == pytest.approx(50.0)


@pytest.mark.parametrize(
    ("attributes", "tools_only"),
    [
        ({"gen_ai.response.finish_reasons": ("tool_call",)}, True),  # the conventions' value (pydantic-ai)
        ({"gen_ai.response.finish_reasons": ("tool_use",)}, True),  # Anthropic, Bedrock
        ({"gen_ai.response.finish_reasons": ("tool_calls", "tool_calls")}, True),  # several choices
        ({"gen_ai.response.finish_reasons": ("tool_calls", "stop")}, False),  # one choice answered
        ({"gen_ai.response.finish_reasons": ()}, False),
        ({"gen_ai.response.finish_reasons": 7}, False),
        ({"gen_ai.response.finish_reasons": '["tool_calls"]'}, True),  # an array as Jaeger and OTLP JSON keep it
        ({"gen_ai.response.finish_reasons": '["tool_calls", "stop"]'}, False),
        ({"gen_ai.response.finish_reasons": "[not json"}, False),
        ({"gen_ai.completion.0.finish_reason": "function_call"}, True),
        ({"llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "f"}, True),
        (
            {
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "f",
                "llm.output_messages.0.message.content": "Let me look.",
            },
            False,
        ),
        ({"gen_ai.output.messages": '[{"role":"assistant","parts":[{"type":"tool_call","name":"f"}]}]'}, True),
        (
            {
                "gen_ai.output.messages": '[{"role":"assistant","parts":[{"type":"text","content":"Let me look."},'
                '{"type":"tool_call","name":"f"}]}]'
            },
            False,
        ),
        ({"gen_ai.output.messages": "[]"}, False),
        ({"gen_ai.output.messages": "not json"}, False),
        ({}, False),  # says nothing: taken to have answered, as before
    ],
)
def test_tool_calls_only_is_read_from_each_vocabulary(attributes: dict[str, object], tools_only: bool) -> None:
    """Finish reasons all asking for tools, or OpenInference tool calls with no text, mean tool calls only."""
    assert answered_with_tool_calls_only(attributes) is tools_only
