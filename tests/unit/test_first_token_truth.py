"""The request's first token is the first chunk the user sees, read only on model (generation) calls.

Each trace is a request with a streamed planning call that asked for a tool (its first
chunk at 250 ms) and a streamed answer (its first chunk really sent at 531 ms), in the
shape the named instrumentation writes. The yardstick is the instant the answer's first
text chunk was sent (531 ms), not whatever first chunk a span reports.
"""

from __future__ import annotations

import json

from opentelemetry.trace import Span

from latency_budget import _attributes as attr

from .helpers import Pipeline, at, pipeline

TTFC = "gen_ai.response.time_to_first_chunk"  # the conventions' span attribute, in seconds


def _chat(p: Pipeline, name: str, start: float, end: float, parent: Span, attributes: dict[str, object]) -> None:
    """A chat span with explicit times."""
    p.run(name, start, end, parent=parent, attributes=attributes)  # type: ignore[arg-type]


def _first_token(p: Pipeline) -> object:
    """The request's first token on the exported root."""
    return (p.span("POST /ask").attributes or {}).get(attr.TOTAL_FIRST_TOKEN_MS)


def test_anthropic_stop_reason_tool_use_is_not_the_first_token() -> None:
    """Anthropic's own spans say tool use only in anthropic.message.stop_reason: that call's chunk is not the user's."""
    p = pipeline()
    root = p.start("POST /ask", 0)
    common = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "anthropic"}
    _chat(p, "chat plan", 0, 400, root, {**common, TTFC: 0.25, "anthropic.message.stop_reason": "tool_use"})
    _chat(p, "chat answer", 431, 900, root, {**common, TTFC: 0.1, "anthropic.message.stop_reason": "end_turn"})
    root.end(end_time=at(1000))
    assert _first_token(p) == 531


def test_gemini_function_call_with_finish_reason_stop_is_not_the_first_token() -> None:
    """Gemini ends a function-call turn with STOP: the output's parts (all tool calls) decide, not the finish reason."""
    p = pipeline()
    root = p.start("POST /ask", 0)
    # opentelemetry-instrumentation-google-genai (0.4b0) with content capture on.
    tool_call = [{"role": "assistant", "parts": [{"type": "tool_call", "name": "get_weather", "arguments": {}}]}]
    text = [{"role": "assistant", "parts": [{"type": "text", "content": "Sunny."}]}]
    common = {
        "gen_ai.operation.name": "generate_content",
        "gen_ai.provider.name": "gcp.gen_ai",
        "gen_ai.response.finish_reasons": ("stop",),
    }
    _chat(
        p,
        "generate_content plan",
        0,
        400,
        root,
        {**common, TTFC: 0.25, "gen_ai.output.messages": json.dumps(tool_call)},
    )
    _chat(
        p,
        "generate_content answer",
        431,
        900,
        root,
        {**common, TTFC: 0.1, "gen_ai.output.messages": json.dumps(text)},
    )
    root.end(end_time=at(1000))
    assert _first_token(p) == 531


def test_an_empty_text_part_before_tool_calls_is_no_text() -> None:
    """OpenLLMetry writes an empty (or blank) text part before a planning call's tool calls: still tool calls only."""
    p = pipeline()
    root = p.start("POST /ask", 0)
    # opentelemetry-instrumentation-openai 0.62.4, streamed: the finish reasons come after the
    # output messages in TOOL_CALLS_ONLY, so the messages alone must say "tool calls only".
    common = {"gen_ai.operation.name": "chat", "gen_ai.response.finish_reasons": ("tool_calls",)}
    for number, blank in enumerate(("", " \n")):
        plan = [
            {
                "role": "assistant",
                "parts": [
                    {"content": blank, "type": "text"},
                    {"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": "{}"},
                ],
            }
        ]
        start = number * 200
        _chat(
            p,
            f"openai.chat plan {number}",
            start,
            start + 150,
            root,
            {**common, TTFC: 0.05, "gen_ai.output.messages": json.dumps(plan)},
        )
    text = [{"role": "assistant", "parts": [{"content": "Sunny.", "type": "text"}]}]
    _chat(p, "openai.chat answer", 431, 900, root, {**common, TTFC: 0.1, "gen_ai.output.messages": json.dumps(text)})
    root.end(end_time=at(1000))
    assert _first_token(p) == 531


def test_openinference_blank_content_beside_a_tool_call_is_no_text() -> None:
    """OpenInference's first output message with a tool call and blank content answered with tool calls only."""
    p = pipeline()
    root = p.start("POST /ask", 0)
    plan = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "m",
        "llm.output_messages.0.message.content": "  ",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "get_weather",
        TTFC: 0.05,
    }
    _chat(p, "ChatCompletion plan", 0, 400, root, plan)
    answer = {
        "openinference.span.kind": "LLM",
        "llm.model_name": "m",
        "llm.output_messages.0.message.content": "Sunny.",
    }
    _chat(p, "ChatCompletion answer", 431, 900, root, {**answer, TTFC: 0.1})
    root.end(end_time=at(1000))
    assert _first_token(p) == 531


def test_a_first_token_attribute_on_an_embeddings_span_is_not_read() -> None:
    """OpenLIT writes its first-token attribute on embeddings spans too: only generation calls give first tokens."""
    p = pipeline()
    root = p.start("POST /ask", 0)
    # openlit 1.3x: gen_ai.server.time_to_first_token (seconds) on every span it writes.
    embed = {"gen_ai.operation.name": "embeddings", "gen_ai.server.time_to_first_token": 0.05}
    _chat(p, "embeddings text-embedding-3-small", 2, 60, root, embed)
    chat = {"gen_ai.operation.name": "chat", "gen_ai.server.time_to_first_token": 0.329, "gen_ai.request.model": "m"}
    _chat(p, "chat gpt-4o-mini", 100, 800, root, chat)
    root.end(end_time=at(1000))
    assert _first_token(p) == 429
    exported = p.span("POST /ask").attributes or {}
    assert attr.stage_key("retrieval", "worst_first_token_ms") not in exported


def test_a_tool_span_with_a_first_token_attribute_is_not_read() -> None:
    """A first-token attribute on a tool call (an execute_tool span) is no model's first token."""
    p = pipeline()
    root = p.start("POST /ask", 0)
    _chat(p, "execute_tool search", 0, 50, root, {"gen_ai.operation.name": "execute_tool", TTFC: 0.01})
    _chat(p, "chat", 100, 800, root, {"gen_ai.operation.name": "chat", TTFC: 0.2})
    root.end(end_time=at(1000))
    assert _first_token(p) == 300
