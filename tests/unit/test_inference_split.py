"""Inside a model call: network and client, queueing, prompt processing and generation, on the request's root.

The server side is vLLM's own `llm_request` span (vllm/tracing.py SpanAttributes, vLLM
0.11: ``gen_ai.latency.*`` in seconds), under the client's HTTP call by the propagated
trace context, so in another local root of the same trace. The client side is
opentelemetry-instrumentation-openai-v2's chat span and opentelemetry-instrumentation-httpx's
`POST` span under it. Explicit timestamps; the yardstick is what the server measured.
"""

from __future__ import annotations

from opentelemetry.trace import SpanKind

from latency_budget import _attributes as attr
from latency_budget import load_budgets
from latency_budget._core.annotate import root_attributes
from latency_budget._replay import SpanRecord, evaluate_spans

from .helpers import TECHCORP_YAML, at, pipeline

CONFIG = load_budgets(text=TECHCORP_YAML)
CHAT = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "Qwen/Qwen2.5-0.5B-Instruct"}


def _server(
    span_id: int, parent: int, start: float, end: float, *, queue: float, prefill: float, decode: float
) -> SpanRecord:
    """vLLM's `llm_request` span, a server span with a remote parent (the client's HTTP call)."""
    latency = {
        "gen_ai.latency.time_in_queue": queue,
        "gen_ai.latency.time_in_model_prefill": prefill,
        "gen_ai.latency.time_in_model_decode": decode,
        "gen_ai.latency.e2e": (end - start) / 1e3,
        "gen_ai.latency.time_to_first_token": queue + prefill,
        "gen_ai.usage.completion_tokens": 120,
        "gen_ai.usage.prompt_tokens": 900,
        "gen_ai.response.model": "Qwen/Qwen2.5-0.5B-Instruct",
    }
    return SpanRecord(
        0xAB,
        span_id,
        parent,
        "llm_request",
        at(start),
        at(end),
        SpanKind.SERVER,
        "vllm.entrypoints.openai.api_server",
        latency,
        remote_parent=True,
    )


def _request() -> list[SpanRecord]:
    """A request with two chats, each served by vLLM: 1000 ms and 500 ms at the client."""
    return [
        SpanRecord(0xAB, 1, None, "POST /ask", at(0), at(1600), SpanKind.SERVER),
        SpanRecord(0xAB, 2, 1, "chat Qwen", at(0), at(1000), SpanKind.CLIENT, attributes=CHAT),
        SpanRecord(0xAB, 3, 2, "POST", at(5), at(995), SpanKind.CLIENT, attributes={"http.request.method": "POST"}),
        _server(4, 3, 20, 970, queue=0.1, prefill=0.2, decode=0.6),
        SpanRecord(0xAB, 5, 1, "chat Qwen", at(1050), at(1550), SpanKind.CLIENT, attributes=CHAT),
        SpanRecord(0xAB, 6, 5, "POST", at(1055), at(1545), SpanKind.CLIENT, attributes={"http.request.method": "POST"}),
        _server(7, 6, 1070, 1520, queue=0.0, prefill=0.05, decode=0.35),
    ]


def test_model_calls_served_by_vllm_split_into_overhead_queue_prompt_and_generation() -> None:
    """Each chat less vLLM's end-to-end time is network and client; vLLM's queue, prefill and decode are summed."""
    reports = evaluate_spans(CONFIG, _request())
    (report,) = [r for r in reports if r.root_name == "POST /ask"]
    attributes = root_attributes(report)
    assert attributes[attr.INFERENCE_SERVER_CALLS] == 2
    assert attributes[attr.INFERENCE_OVERHEAD_MS] == 100.0  # (1000 - 950) + (500 - 450)
    assert attributes[attr.INFERENCE_QUEUE_MS] == 100.0
    assert attributes[attr.INFERENCE_PROMPT_MS] == 250.0
    assert attributes[attr.INFERENCE_GENERATION_MS] == 950.0
    assert attributes[attr.INFERENCE_OUTPUT_TOKENS_PER_S] == round(240 / 0.95, 3)
    assert attr.INFERENCE_CLIENT_CALLS not in attributes


def test_a_client_only_call_says_what_its_first_token_and_tokens_imply() -> None:
    """No server span: the time before the first token (not split) and the generation after it, with the output rate."""
    p = pipeline()
    root = p.start("POST /ask", 0)
    chat = {**CHAT, "gen_ai.response.time_to_first_chunk": 0.3, "gen_ai.usage.output_tokens": 140}
    p.run("chat Qwen", 100, 1100, parent=root, attributes=chat)
    root.end(end_time=at(1200))
    attributes = p.span("POST /ask").attributes or {}
    assert attributes[attr.INFERENCE_CLIENT_CALLS] == 1
    assert attributes[attr.INFERENCE_BEFORE_FIRST_TOKEN_MS] == 300.0
    assert attributes[attr.INFERENCE_GENERATION_MS] == 700.0
    assert attributes[attr.INFERENCE_OUTPUT_TOKENS_PER_S] == 200.0
    assert attr.INFERENCE_QUEUE_MS not in attributes


def test_a_model_call_inside_a_tool_gets_the_server_span_not_the_tool() -> None:
    """A tool that calls a model: vLLM's span belongs to that model call, the nearest model call above it."""
    spans = [
        SpanRecord(0xAB, 1, None, "POST /ask", at(0), at(1600), SpanKind.SERVER),
        SpanRecord(
            0xAB, 2, 1, "execute_tool summarise", at(0), at(1100), attributes={"gen_ai.operation.name": "execute_tool"}
        ),
        SpanRecord(0xAB, 3, 2, "chat Qwen", at(0), at(1000), SpanKind.CLIENT, attributes=CHAT),
        _server(4, 3, 20, 970, queue=0.1, prefill=0.2, decode=0.6),
    ]
    (report,) = [r for r in evaluate_spans(CONFIG, spans) if r.root_name == "POST /ask"]
    attributes = root_attributes(report)
    assert attributes[attr.INFERENCE_SERVER_CALLS] == 1
    assert attributes[attr.INFERENCE_OVERHEAD_MS] == 50.0


def test_a_request_with_no_model_call_has_no_inference_attributes() -> None:
    """Only tool calls: nothing under inference.* is written."""
    p = pipeline()
    root = p.start("POST /ask", 0)
    p.run("execute_tool t", 0, 50, parent=root, attributes={"gen_ai.operation.name": "execute_tool"})
    root.end(end_time=at(100))
    assert not any(key.startswith("latency_budget.inference.") for key in p.span("POST /ask").attributes or {})


def test_an_agent_count_that_disagrees_with_the_counted_calls_is_written() -> None:
    """A root carrying gen_ai.invoke_agent.inference_calls=3 with two model calls counted: the 3 is written beside."""
    p = pipeline()
    root = p.start(
        "invoke_agent copilot",
        0,
        attributes={
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.invoke_agent.inference_calls": 3,
            "gen_ai.invoke_agent.tool_calls": 1,
        },
    )
    p.run("chat 1", 0, 100, parent=root, attributes=CHAT)
    p.run("chat 2", 200, 300, parent=root, attributes=CHAT)
    p.run("execute_tool t", 100, 200, parent=root, attributes={"gen_ai.operation.name": "execute_tool"})
    root.end(end_time=at(400))
    attributes = p.span("invoke_agent copilot").attributes or {}
    assert attributes[attr.AGENT_INFERENCE_CALLS] == 3
    assert attr.AGENT_TOOL_CALLS not in attributes  # it agrees: one tool call
