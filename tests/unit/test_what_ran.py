"""Count what really ran (issue 45, items 2, 5 and 6): one call with two spans counts once,
a root with tool calls or an agent is a request, a framework's stop signal or handoff is no tool call.

Spans carry the attribute shapes the named instrumentation writes, through a real pipeline with
no ``match`` rules (except where a test says so).
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.trace import SpanKind

from latency_budget import _attributes as attr

from .helpers import Pipeline, at, pipeline

NO_MATCH_RULES = "version: 1\ntotal_ms: 60000\n"


def _span(
    p: Pipeline,
    name: str,
    start: float,
    end: float,
    parent: trace.Span | None,
    attributes: Mapping[str, object],
    kind: SpanKind = SpanKind.INTERNAL,
    scope: str = "test",
) -> trace.Span:
    context = trace.set_span_in_context(parent) if parent is not None else None
    span = p.provider.get_tracer(scope).start_span(
        name,
        context=context,
        attributes=attributes,
        start_time=at(start),
        kind=kind,  # type: ignore[arg-type]
    )
    if end >= 0:
        span.end(end_time=at(end))
    return span


def _root_attributes(p: Pipeline, root: str = "request") -> dict[str, object]:
    return dict(p.span(root).attributes or {})


def _count(p: Pipeline, stage: str, root: str = "request") -> object:
    return _root_attributes(p, root).get(attr.stage_key(stage, "count"))


# -- item 2: one real operation, one call -----------------------------------------------------


OPENLLMETRY = "opentelemetry.instrumentation.anthropic"


def _sdk_chat(response_id: str, output_tokens: int) -> dict[str, object]:
    """The Anthropic SDK's own `chat {model}` span (GenAI conventions), as the issue's run recorded it."""
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-sonnet-4-5",
        "gen_ai.response.id": response_id,
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": output_tokens,
    }


def _openllmetry_chat(response_id: str, output_tokens: int) -> dict[str, object]:
    """opentelemetry-instrumentation-anthropic (OpenLLMetry 0.4x): `anthropic.chat`, llm.request.type chat."""
    return {
        "gen_ai.system": "Anthropic",
        "llm.request.type": "chat",
        "gen_ai.request.model": "claude-sonnet-4-5",
        "gen_ai.response.id": response_id,
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": output_tokens,
    }


def _openinference_chat(output_tokens: int) -> dict[str, object]:
    """openinference-instrumentation-anthropic: `Messages`, LLM, no response id; prompt tokens include the cache."""
    return {
        "openinference.span.kind": "LLM",
        "llm.model_name": "claude-sonnet-4-5",
        "llm.provider": "anthropic",
        "llm.token_count.prompt": 180,
        "llm.token_count.completion": output_tokens,
    }


def test_the_sdks_own_span_beside_openllmetrys_counts_each_call_once() -> None:
    """Five calls, each with the SDK's `chat` and OpenLLMetry's `anthropic.chat` beside it: five, no violation."""
    p = pipeline("version: 1\nstages:\n  model_call: {budget_ms: 60000, max_calls: 5}\n")
    root = p.start("request", 0)
    for i in range(5):
        start = 10 + 100 * i
        _span(
            p, f"chat {i}", start, start + 80, root, _sdk_chat(f"msg_{i}", 30 + i), SpanKind.CLIENT, scope="anthropic"
        )
        _span(
            p, "anthropic.chat", start + 0.2, start + 80.3, root, _openllmetry_chat(f"msg_{i}", 30 + i), SpanKind.CLIENT
        )
    root.end(end_time=at(600))
    attributes = _root_attributes(p)
    assert attributes[attr.stage_key("model_call", "count")] == 5
    assert attributes[attr.stage_key("model_call", "actual_ms")] == 5 * 80.3
    assert attributes[attr.VIOLATED] is False


def test_openinference_beside_the_sdk_counts_once_though_its_prompt_tokens_differ() -> None:
    """OpenInference's `Messages` beside the SDK's `chat`: same model and output, prompt tokens counted otherwise."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    _span(p, "chat claude-sonnet-4-5", 10, 90, root, _sdk_chat("msg_1", 41), SpanKind.CLIENT, scope="anthropic")
    _span(p, "Messages", 10.1, 90.2, root, _openinference_chat(41), scope="openinference.instrumentation.anthropic")
    root.end(end_time=at(100))
    assert _count(p, "model_call") == 1


def test_openllmetrys_span_ending_later_with_one_more_output_token_is_the_same_call() -> None:
    """As the lab recorded: OpenLLMetry ends ~9 ms after the SDK (72% overlap), one output token more: 3 calls."""
    p = pipeline("version: 1\nstages:\n  model_call: {budget_ms: 60000, max_calls: 3}\n")
    root = p.start("request", 0)
    for i in range(3):
        start = 10 + 100 * i
        sdk, openllmetry = _sdk_chat(f"msg_{i}", 18), _openllmetry_chat(f"msg_{i}", 19)
        _span(p, f"chat {i}", start, start + 23, root, sdk, SpanKind.CLIENT, scope="anthropic")
        _span(p, "anthropic.chat", start + 0.3, start + 32, root, openllmetry, SpanKind.CLIENT, scope=OPENLLMETRY)
    root.end(end_time=at(400))
    attributes = _root_attributes(p)
    assert attributes[attr.stage_key("model_call", "count")] == 3
    assert attributes[attr.VIOLATED] is False


def test_without_ids_output_tokens_one_apart_and_equal_input_tokens_are_the_same_call() -> None:
    """No response ids: output tokens 1 apart are no evidence against, the equal input tokens link the spans."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    sdk, openllmetry = _sdk_chat("x", 18), _openllmetry_chat("x", 19)
    del sdk["gen_ai.response.id"], openllmetry["gen_ai.response.id"]
    _span(p, "chat", 10, 33, root, sdk, SpanKind.CLIENT, scope="anthropic")
    _span(p, "anthropic.chat", 10.3, 42, root, openllmetry, SpanKind.CLIENT, scope=OPENLLMETRY)
    root.end(end_time=at(100))
    assert _count(p, "model_call") == 1


def test_two_calls_started_together_with_different_response_ids_stay_two() -> None:
    """Two parallel calls timed alike, agreeing on every token count, with two response ids: two calls."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    _span(p, "chat a", 10, 33, root, _sdk_chat("msg_a", 18), SpanKind.CLIENT, scope="anthropic")
    _span(p, "anthropic.chat b", 10.3, 42, root, _openllmetry_chat("msg_b", 18), SpanKind.CLIENT, scope=OPENLLMETRY)
    root.end(end_time=at(100))
    assert _count(p, "model_call") == 2


def test_a_call_started_well_after_another_is_another_call() -> None:
    """Same model and tokens, no ids, but started 15 ms after the other (past the start slack): two calls."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    sdk, openllmetry = _sdk_chat("x", 18), _openllmetry_chat("x", 18)
    del sdk["gen_ai.response.id"], openllmetry["gen_ai.response.id"]
    _span(p, "chat a", 10, 40, root, sdk, SpanKind.CLIENT, scope="anthropic")
    _span(p, "anthropic.chat b", 25, 45, root, openllmetry, SpanKind.CLIENT, scope=OPENLLMETRY)
    root.end(end_time=at(100))
    assert _count(p, "model_call") == 2


def test_one_instrumentations_identical_concurrent_calls_stay_calls() -> None:
    """Three identical tool calls at once from one instrumentation (one scope) are three: it never writes one twice."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup", "gen_ai.tool.call.arguments": "{}"}
    for i in range(3):
        _span(p, f"execute_tool lookup {i}", 10, 90, root, tool)
    root.end(end_time=at(100))
    assert _count(p, "tool_calls") == 3


def test_two_parallel_calls_to_one_model_stay_two() -> None:
    """Two real calls at once, to the same model, differ in response id: two calls, each with its twin span."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    for i in range(2):
        _span(p, f"chat {i}", 10, 90, root, _sdk_chat(f"msg_{i}", 40), SpanKind.CLIENT, scope="anthropic")
        _span(
            p,
            f"anthropic.chat {i}",
            10,
            90,
            root,
            _openllmetry_chat(f"msg_{i}", 40),
            SpanKind.CLIENT,
            scope="opentelemetry.instrumentation.anthropic",
        )
    root.end(end_time=at(100))
    assert _count(p, "model_call") == 2


def test_an_http_span_beside_a_genai_span_is_covered_by_it() -> None:
    """LangSmith-style: the llm run's span and the client's `POST` (not its child) under the request: one call."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    run = {"langsmith.span.kind": "llm", "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o"}
    _span(p, "ChatOpenAI", 10, 95, root, run, scope="langsmith")
    post = {"http.method": "POST", "http.url": "https://api.openai.com/v1/chat/completions"}
    _span(p, "POST", 12, 94, root, post, SpanKind.CLIENT, scope="opentelemetry.instrumentation.requests")
    root.end(end_time=at(100))
    assert _count(p, "model_call") == 1


def test_two_http_calls_without_a_genai_span_are_two_calls() -> None:
    """Two POSTs to the provider that no GenAI span describes: the server received two requests, two calls."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    post = {"http.method": "POST", "http.url": "https://api.openai.com/v1/chat/completions"}
    _span(p, "POST", 10, 90, root, post, SpanKind.CLIENT)
    _span(p, "POST", 10, 90, root, post, SpanKind.CLIENT)
    root.end(end_time=at(100))
    assert _count(p, "model_call") == 2


# -- item 5: requests without model spans -----------------------------------------------------


def test_a_root_holding_agent_and_tool_spans_but_no_model_span_is_a_request() -> None:
    """CrewAI with only its OpenInference instrumentation: INTERNAL root, AGENT and TOOL spans, no LLM: judged."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("crew", 0, kind=SpanKind.INTERNAL)
    agent = _span(p, "Researcher._execute_core", 5, -1, root, {"openinference.span.kind": "AGENT"})
    _span(p, "search_web", 10, 40, agent, {"openinference.span.kind": "TOOL", "tool.name": "search_web"})
    agent.end(end_time=at(90))
    root.end(end_time=at(100))
    assert _count(p, "tool_calls", "crew") == 1


def test_a_root_holding_only_an_agent_invocation_is_a_request() -> None:
    """AutoGen's own tracer under an app span: `invoke_agent` (model client uninstrumented) makes it a request."""
    p = pipeline("version: 1\ntotal_ms: 50\n")
    root = p.start("handle", 0, kind=SpanKind.INTERNAL)
    _span(p, "invoke_agent assistant", 5, 95, root, {"gen_ai.operation.name": "invoke_agent"})
    root.end(end_time=at(100))
    assert _root_attributes(p, "handle")[attr.VIOLATED] is True


def test_start_up_work_stays_unjudged() -> None:
    """An indexing root (embeddings and vector writes, `create_agent`) holds no model call, tool call or invocation."""
    p = pipeline("version: 1\ntotal_ms: 50\n")
    root = p.start("build_index", 0, kind=SpanKind.INTERNAL)
    _span(p, "embeddings", 5, 40, root, {"gen_ai.operation.name": "embeddings"})
    _span(p, "qdrant.upsert", 40, 90, root, {"db.system": "Qdrant"}, SpanKind.CLIENT)
    _span(p, "create_agent a", 90, 95, root, {"gen_ai.operation.name": "create_agent"})
    root.end(end_time=at(100))
    assert attr.VIOLATED not in _root_attributes(p, "build_index")


# -- item 6: what ran, not what was called a tool ---------------------------------------------


def test_dspy_react_finish_with_no_arguments_is_no_tool_call() -> None:
    """DSPy ReAct's `finish` (no arguments), a TOOL span of openinference-instrumentation-dspy: not counted."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    tool = {"openinference.span.kind": "TOOL", "tool.name": "search", "input.value": '{"query": "x"}'}
    _span(p, "Tool.search", 10, 40, root, tool)
    _span(
        p, "Tool.finish", 50, 51, root, {"openinference.span.kind": "TOOL", "tool.name": "finish", "input.value": "{}"}
    )
    root.end(end_time=at(60))
    assert _count(p, "tool_calls") == 1


def test_a_tool_of_yours_named_finish_with_arguments_still_counts() -> None:
    """A `finish` tool that takes arguments did work: it counts."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    finish = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "finish",
        "gen_ai.tool.call.arguments": '{"order": 7}',
    }
    _span(p, "execute_tool finish", 10, 40, root, finish)
    root.end(end_time=at(60))
    assert _count(p, "tool_calls") == 1


def test_handoffs_are_no_tool_calls() -> None:
    """The Agents SDK with OpenInference (`handoff to Billing`, TOOL), a LangGraph supervisor's `transfer_to_math`."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    _span(p, "handoff to Billing", 10, 10.5, root, {"openinference.span.kind": "TOOL"})
    transfer = {"openinference.span.kind": "TOOL", "tool.name": "transfer_to_math", "input.value": "{}"}
    _span(p, "transfer_to_math", 20, 21, root, transfer)
    _span(p, "add", 30, 31, root, {"openinference.span.kind": "TOOL", "tool.name": "add"})
    root.end(end_time=at(60))
    assert _count(p, "tool_calls") == 1


def test_a_delegated_agents_tools_count_once_each_under_the_delegation() -> None:
    """CrewAI's `Delegate work to coworker` runs the coworker, whose two tools ran: two tool calls, not one or three."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    delegate = {"openinference.span.kind": "TOOL", "tool.name": "Delegate work to coworker"}
    tool = _span(p, "Delegate work to coworker", 10, -1, root, delegate)
    agent = _span(p, "Writer._execute_core", 11, -1, tool, {"openinference.span.kind": "AGENT"})
    _span(p, "search_web", 12, 30, agent, {"openinference.span.kind": "TOOL", "tool.name": "search_web"})
    _span(p, "read_page", 31, 50, agent, {"openinference.span.kind": "TOOL", "tool.name": "read_page"})
    agent.end(end_time=at(55))
    tool.end(end_time=at(56))
    root.end(end_time=at(60))
    attributes = _root_attributes(p)
    assert attributes[attr.stage_key("tool_calls", "count")] == 2
    assert attributes[attr.stage_key("tool_calls", "actual_ms")] == 18 + 19


def test_team_members_tools_beside_the_delegation_count_once_each() -> None:
    """A member hanging off the team span, not the delegation tool: the member's tool counts, the delegation not."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    delegate = {"openinference.span.kind": "TOOL", "tool.name": "Delegate work to coworker"}
    _span(p, "Delegate work to coworker", 10, 50, root, delegate)
    member = _span(p, "Writer._execute_core", 11, -1, root, {"openinference.span.kind": "AGENT"})
    _span(p, "search_web", 12, 30, member, {"openinference.span.kind": "TOOL", "tool.name": "search_web"})
    member.end(end_time=at(49))
    root.end(end_time=at(60))
    assert _count(p, "tool_calls") == 1


def test_a_wide_fan_out_of_calls_to_one_model_keeps_every_call_and_its_twin() -> None:
    """300 calls to one model started together (µs apart), each twin right after its call: 300 (comparisons bounded)."""
    p = pipeline(NO_MATCH_RULES)
    root = p.start("request", 0)
    for i in range(300):
        start = 10 + i * 0.002
        _span(p, f"chat {i}", start, 90, root, _sdk_chat(f"msg_{i}", 40), SpanKind.CLIENT, scope="anthropic")
        _span(
            p,
            f"anthropic.chat {i}",
            start + 0.001,
            90,
            root,
            _openllmetry_chat(f"msg_{i}", 40),
            SpanKind.CLIENT,
            scope="opentelemetry.instrumentation.anthropic",
        )
    root.end(end_time=at(100))
    assert _count(p, "model_call") == 300
