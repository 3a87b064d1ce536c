"""The user's first token is the first text the user sees: a call that answered with tool calls only gives none.

One row per vocabulary of ``TOOL_CALLS_ONLY``: a streamed planning call that asked for a
tool (its first chunk 50 ms after the request's start), then a streamed answer (its first
chunk at 700 ms). The request's first token is the answer's; model_call's worst first
token still counts both calls (each is the model's latency).
"""

from __future__ import annotations

import json

import pytest

from latency_budget import _attributes as attr
from latency_budget._config.genai_defaults import TOOL_CALLS_ONLY, ToolCallsOnly
from latency_budget._core.first_token import answered_with_tool_calls_only

from .helpers import at, op, pipeline

NO_MATCH_RULES = "version: 1\ntotal_ms: 60000\n"
TTFT = "gen_ai.client.operation.time_to_first_chunk"


def _asked_for_tools(row: ToolCallsOnly) -> dict[str, object]:
    """What a call that answered with tool calls only carries, in the row's vocabulary."""
    if row.messages_key is not None:  # as pydantic-ai writes it
        parts = [{"type": "tool_call", "id": "c1", "name": "weather", "arguments": "{}"}]
        return {row.messages_key: json.dumps([{"role": "assistant", "parts": parts}])}
    if row.finish_key is not None:
        return {row.finish_key: ("tool_calls",) if row.finish_key.endswith("s") else "tool_calls"}
    assert row.tool_call_key is not None
    return {row.tool_call_key: "get_weather"}


def _answered(row: ToolCallsOnly) -> dict[str, object]:
    """What a call that answered with text carries, in the row's vocabulary."""
    if row.messages_key is not None:
        return {row.messages_key: json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "Sunny."}]}])}
    if row.finish_key is not None:
        return {row.finish_key: ("stop",) if row.finish_key.endswith("s") else "stop"}
    assert row.text_key is not None
    return {row.text_key: "It is sunny in Paris."}


@pytest.mark.parametrize(
    "row", TOOL_CALLS_ONLY, ids=[r.finish_key or r.messages_key or r.tool_call_key or "" for r in TOOL_CALLS_ONLY]
)
def test_a_streamed_call_that_only_asked_for_tools_is_not_the_requests_first_token(row: ToolCallsOnly) -> None:
    """The planning call's first chunk (tool calls only) is passed over: the request's first token is the answer's."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    p.run("plan", 0, 400, parent=root, attributes={**op("chat"), TTFT: 0.05, **_asked_for_tools(row)})
    p.run("tool", 400, 500, parent=root, attributes=op("execute_tool"))
    p.run("answer", 500, 900, parent=root, attributes={**op("chat"), TTFT: 0.2, **_answered(row)})
    root.end(end_time=at(1000))
    request = dict(p.span("request").attributes or {})
    assert request["latency_budget.total.first_token_ms"] == pytest.approx(700.0)
    assert request[attr.stage_key("model_call", "worst_first_token_ms")] == pytest.approx(200.0)


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
