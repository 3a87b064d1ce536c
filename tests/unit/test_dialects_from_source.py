"""Dialect rows read from source only: each framework's span shapes, as its tracer's source writes them.

Most of these frameworks are not run in tests/frameworks (Haystack and Strands Agents are,
there; their tests here keep the shapes the real runs showed). Each test rebuilds the spans their source
shows (names, kinds, scope and the attributes that matter), through a real pipeline with no
``match`` rules, and checks stages, counts, first token and which roots are judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta, timezone

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from latency_budget import _attributes as attr
from latency_budget._config.genai_defaults import DIALECTS
from latency_budget._core.calls import OPERATION_KEYS, operation_of
from latency_budget._core.first_token import answered_with_tool_calls_only

from .helpers import T0, Pipeline, at, pipeline

NO_MATCH_RULES = "version: 1\ntotal_ms: 60000\n"


def _span(
    p: Pipeline,
    scope: str,
    name: str,
    start: float,
    end: float,
    parent: trace.Span | None,
    attributes: Mapping[str, object],
    kind: SpanKind = SpanKind.INTERNAL,
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


def _counts(p: Pipeline, root: str) -> dict[str, int]:
    attributes = dict(p.span(root).attributes or {})
    return {
        stage: attributes[attr.stage_key(stage, "count")]
        for stage in ("retrieval", "model_call", "tool_calls")
        if attr.stage_key(stage, "count") in attributes
    }


def test_strands_agents_chat_and_tools_with_its_millisecond_first_token() -> None:
    """Strands, as tests/frameworks/strands runs it: invoke_agent > cycle > chat (first token in ms) > execute_tool.

    The planning call's `gen_ai.choice` event says `tool_use`: the request's first token is
    the answer's (360 + 90 ms), not the planning call's tool-call chunk (10 + 120 ms).
    """
    p = pipeline(NO_MATCH_RULES)
    scope = "strands.telemetry.tracer"
    agent = _span(p, scope, "invoke_agent weather", 0, -1, None, {"gen_ai.operation.name": "invoke_agent"})
    cycle = {"gen_ai.operation.name": "execute_event_loop_cycle", "gen_ai.system": "strands-agents"}
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "gen_ai.server.request.duration": 300}
    first = _span(p, scope, "execute_event_loop_cycle", 5, -1, agent, cycle)
    plan = _span(p, scope, "chat", 10, -1, first, {**chat, "gen_ai.server.time_to_first_token": 120})
    plan.add_event("gen_ai.choice", {"finish_reason": "tool_use", "message": "[]"}, timestamp=at(310))
    plan.end(end_time=at(310))
    _span(p, scope, "execute_tool get_weather", 310, 355, first, {"gen_ai.operation.name": "execute_tool"})
    first.end(end_time=at(356))
    second = _span(p, scope, "execute_event_loop_cycle", 357, -1, agent, cycle)
    answer = _span(p, scope, "chat", 360, -1, second, {**chat, "gen_ai.server.time_to_first_token": 90})
    answer.add_event("gen_ai.choice", {"finish_reason": "end_turn", "message": "[]"}, timestamp=at(700))
    answer.end(end_time=at(700))
    second.end(end_time=at(705))
    agent.end(end_time=at(710))
    assert _counts(p, "invoke_agent weather") == {"model_call": 2, "tool_calls": 1}
    assert all(attr.STAGE not in (s.attributes or {}) for s in p.finished() if s.name == "execute_event_loop_cycle")
    request = dict(p.span("invoke_agent weather").attributes or {})
    assert request[attr.stage_key("model_call", "worst_first_token_ms")] == 120.0
    assert request[attr.TOTAL_FIRST_TOKEN_MS] == 450.0


def test_google_adk_merged_tool_span_is_not_a_call() -> None:
    """ADK: two parallel execute_tool spans, then `execute_tool (merged)` with `(merged tools)`: two tool calls."""
    p = pipeline(NO_MATCH_RULES)
    scope = "gcp.vertex.agent"
    agent = _span(p, scope, "invoke_agent root", 0, -1, None, {"gen_ai.operation.name": "invoke_agent"})
    model = {"gen_ai.operation.name": "generate_content", "gen_ai.request.model": "gemini"}
    _span(p, scope, "generate_content gemini", 1, 200, agent, model)
    for n in range(2):
        tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": f"t{n}"}
        _span(p, scope, f"execute_tool t{n}", 200, 260 + n, agent, tool)
    merged = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "(merged tools)",
        "gen_ai.tool.call.id": "e1",
    }
    _span(p, scope, "execute_tool (merged)", 261, 261.2, agent, merged)
    _span(p, scope, "generate_content gemini", 262, 400, agent, model)
    agent.end(end_time=at(401))
    assert _counts(p, "invoke_agent root") == {"model_call": 2, "tool_calls": 2}
    assert attr.STAGE not in (p.span("execute_tool (merged)").attributes or {})


def test_semantic_kernel_operation_names_are_model_calls() -> None:
    """Older Semantic Kernel releases' dotted, plural operation names (streamed or not) are model calls."""
    p = pipeline(NO_MATCH_RULES)
    scope = "semantic_kernel.utils.telemetry.model_diagnostics.decorators"
    root = _span(p, "app", "POST /chat", 0, -1, None, {}, kind=SpanKind.SERVER)
    for n, operation in enumerate(("chat.completions", "chat.streaming_completions", "text.completions")):
        _span(p, scope, f"{operation} gpt", n * 100, n * 100 + 90, root, {"gen_ai.operation.name": operation})
    _span(p, scope, "execute_tool f", 300, 320, root, {"gen_ai.operation.name": "execute_tool"})
    root.end(end_time=at(400))
    assert _counts(p, "POST /chat") == {"model_call": 3, "tool_calls": 1}


SK_FUNCTION_SCOPE = "semantic_kernel.functions.kernel_function"
SK_CHAT_SCOPE = "semantic_kernel.utils.telemetry.model_diagnostics.decorators"


@pytest.mark.parametrize("tools", [1, 2])
def test_semantic_kernel_invoke_prompt_counts_the_tools_the_model_asked_for(tools: int) -> None:
    """`kernel.invoke_prompt`, as tests/frameworks/semantic_kernel runs it: the prompt function's span is no call.

    ``execute_tool {16 random letters}`` (no tool call id) > AutoFunctionInvocationLoop >
    chat, ``tools`` x ``execute_tool weather-get_weather`` (each with the model's tool call
    id), chat. The tools are counted one each, and the wrapper's time is no stage's.
    """
    p = pipeline(NO_MATCH_RULES)
    root = _span(p, "app", "POST /ask", 0, -1, None, {}, kind=SpanKind.SERVER)
    function = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "UbjhsExQkclqmnYh"}
    wrapper = _span(p, SK_FUNCTION_SCOPE, "execute_tool UbjhsExQkclqmnYh", 1, -1, root, function)
    loop = _span(
        p, "semantic_kernel.connectors.ai.chat_completion_client_base", "AutoFunctionInvocationLoop", 2, -1, wrapper, {}
    )
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt"}
    _span(p, SK_CHAT_SCOPE, "chat gpt", 3, 100, loop, chat)
    for n in range(tools):
        tool = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "weather-get_weather",
            "gen_ai.tool.call.id": f"call_{n}",
        }
        _span(p, SK_FUNCTION_SCOPE, "execute_tool weather-get_weather", 100 + n * 10, 110 + n * 10, loop, tool)
    _span(p, SK_CHAT_SCOPE, "chat gpt", 130, 200, loop, chat)
    loop.end(end_time=at(201))
    wrapper.end(end_time=at(202))
    root.end(end_time=at(210))
    assert _counts(p, "POST /ask") == {"model_call": 2, "tool_calls": tools}
    assert attr.STAGE not in (p.span("execute_tool UbjhsExQkclqmnYh").attributes or {})
    assert p.passed_untouched(p.span("execute_tool UbjhsExQkclqmnYh"))
    request = dict(p.span("POST /ask").attributes or {})
    assert request[attr.stage_key("tool_calls", "actual_ms")] == 10.0 * tools
    assert request[attr.stage_key("model_call", "actual_ms")] == 167.0


def test_semantic_kernel_function_the_app_invokes_is_no_tool_call_and_other_scopes_keep_theirs() -> None:
    """A kernel function the app runs itself (no tool call id) is in no stage; another scope's bare execute_tool is."""
    p = pipeline(NO_MATCH_RULES)
    root = _span(p, "app", "POST /ask", 0, -1, None, {}, kind=SpanKind.SERVER)
    own = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "weather-get_weather"}
    _span(p, SK_FUNCTION_SCOPE, "execute_tool weather-get_weather", 1, 10, root, own)
    _span(p, "gcp.vertex.agent", "execute_tool t", 10, 20, root, own)
    _span(p, SK_CHAT_SCOPE, "chat gpt", 20, 100, root, {"gen_ai.operation.name": "chat"})
    root.end(end_time=at(110))
    assert _counts(p, "POST /ask") == {"model_call": 1, "tool_calls": 1}
    assert attr.STAGE not in (p.span("execute_tool weather-get_weather").attributes or {})
    assert (p.span("execute_tool t").attributes or {})[attr.STAGE] == "tool_calls"


def test_langsmith_runs_are_staged_by_run_type_and_prompt_runs_are_not_calls() -> None:
    """LangSmith's export: llm, retriever, tool are calls; a prompt run (also marked `chat`) and chains are not."""
    p = pipeline(NO_MATCH_RULES)
    scope = "langsmith"

    def run(name: str, start: float, end: float, parent: trace.Span | None, kind: str, operation: str) -> trace.Span:
        return _span(
            p, scope, name, start, end, parent, {"langsmith.span.kind": kind, "gen_ai.operation.name": operation}
        )

    graph = run("LangGraph", 0, -1, None, "chain", "chain")
    run("retrieve", 1, 50, graph, "retriever", "embeddings")
    run("ChatPromptTemplate", 50, 51, graph, "prompt", "chat")
    run("ChatOpenAI", 51, 400, graph, "llm", "chat")
    run("search", 400, 450, graph, "tool", "execute_tool")
    run("StrOutputParser", 450, 451, graph, "parser", "parser")
    graph.end(end_time=at(460))
    assert _counts(p, "LangGraph") == {"retrieval": 1, "model_call": 1, "tool_calls": 1}
    assert attr.STAGE not in (p.span("ChatPromptTemplate").attributes or {})


def test_mlflow_span_types_are_read_json_encoded() -> None:
    """MLflow writes attributes JSON-encoded: `"CHAT_MODEL"`, `"RETRIEVER"`, `"TOOL"`; an `"AGENT"` root is judged."""
    p = pipeline(NO_MATCH_RULES)
    scope = "mlflow.tracing"
    agent = _span(p, scope, "agent", 0, -1, None, {"mlflow.spanType": '"AGENT"'})
    _span(p, scope, "retrieve", 1, 50, agent, {"mlflow.spanType": '"RETRIEVER"'})
    _span(p, scope, "ChatOpenAI", 50, 300, agent, {"mlflow.spanType": '"CHAT_MODEL"'})
    _span(p, scope, "lookup", 300, 320, agent, {"mlflow.spanType": '"TOOL"'})
    _span(p, scope, "parse", 320, 321, agent, {"mlflow.spanType": '"PARSER"'})
    agent.end(end_time=at(330))
    assert _counts(p, "agent") == {"retrieval": 1, "model_call": 1, "tool_calls": 1}


def test_haystack_components_are_staged_by_type_and_the_pipeline_is_judged_for_its_model_call() -> None:
    """Haystack: component runs staged by class; the pipeline root contains a model call, so it is judged."""
    p = pipeline(NO_MATCH_RULES)
    scope = "haystack"
    root = _span(p, scope, "haystack.pipeline.run", 0, -1, None, {"haystack.pipeline.max_runs_per_component": 100})
    for start, end, component in (
        (1, 40, "InMemoryBM25Retriever"),
        (40, 41, "PromptBuilder"),
        (41, 300, "OpenAIChatGenerator"),
    ):
        attributes = {"haystack.component.type": component, "haystack.component.name": component.lower()}
        _span(p, scope, "haystack.component.run", start, end, root, attributes)
    root.end(end_time=at(301))
    assert _counts(p, "haystack.pipeline.run") == {"retrieval": 1, "model_call": 1}


def test_haystack_indexing_pipeline_is_start_up_work() -> None:
    """A Haystack indexing run (document embedder, writer; no model call, INTERNAL root) is left alone by default."""
    p = pipeline(NO_MATCH_RULES)
    root = _span(p, "haystack", "haystack.pipeline.run", 0, -1, None, {})
    for component in ("SentenceTransformersDocumentEmbedder", "DocumentWriter"):
        _span(p, "haystack", "haystack.component.run", 1, 900, root, {"haystack.component.type": component})
    root.end(end_time=at(901))
    assert p.reports == []
    assert p.passed_untouched(p.span("haystack.pipeline.run"))


def test_autogen_create_agent_is_start_up_and_invoke_agent_is_a_request() -> None:
    """AutoGen's `create_agent` root (start-up) is not judged; its `invoke_agent` root with a tool call is."""
    p = pipeline(NO_MATCH_RULES)
    scope = "autogen-core"
    client = SpanKind.CLIENT  # the kind autogen-core 0.7.5 gives both (tests/frameworks/autogen runs it)
    _span(p, scope, "create_agent assistant", 0, 1, None, {"gen_ai.operation.name": "create_agent"}, client)
    run = _span(p, scope, "invoke_agent assistant", 10, -1, None, {"gen_ai.operation.name": "invoke_agent"}, client)
    _span(p, scope, "execute_tool add", 11, 20, run, {"gen_ai.operation.name": "execute_tool"})
    run.end(end_time=at(30))
    assert [r.root_name for r in p.reports] == ["invoke_agent assistant"]


@pytest.mark.parametrize(
    "dialect", [d for d in DIALECTS if d.values], ids=[f"{d.source}:{d.key}" for d in DIALECTS if d.values]
)
def test_every_dialect_key_is_an_operation_key(dialect: object) -> None:
    """OPERATION_KEYS is derived from DIALECTS: a span with only a row's key is of that kind of call."""
    key = dialect.key  # type: ignore[attr-defined]
    value = next(iter(dialect.values))  # type: ignore[attr-defined]
    assert key in OPERATION_KEYS
    assert operation_of("some span", {key: value}) == value


def test_operation_keys_keep_the_dialect_order_without_repeats() -> None:
    """The first key a span carries decides its kind of call, in the table's order."""
    assert tuple(dict.fromkeys(d.key for d in DIALECTS if d.values)) == OPERATION_KEYS
    both = {"openinference.span.kind": "LLM", "gen_ai.operation.name": "chat"}
    assert operation_of("x", both) == "chat"


def _litellm_call(
    p: Pipeline,
    parent: trace.Span,
    start: float,
    end: float,
    call_type: str,
    *,
    message_logging: bool = True,
    finish_reasons: str | None = None,
) -> None:
    """One call as litellm.integrations.opentelemetry writes it: `litellm_request`, then `raw_gen_ai_request` in it.

    The call type goes to llm.request.type always and, with message logging on, to
    gen_ai.operation.name (`completion` written `chat`); finish reasons are a JSON array
    in a string. The raw span carries only the provider's payload, as `llm.<provider>.*`.
    """
    scope = "litellm"
    call: dict[str, object] = {
        "llm.request.type": call_type,
        "gen_ai.system": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "llm.is_streaming": "False",
    }
    if message_logging:
        call["gen_ai.operation.name"] = "chat" if call_type == "completion" else call_type
    if finish_reasons is not None:
        call["gen_ai.response.finish_reasons"] = finish_reasons
    request = _span(p, scope, "litellm_request", start, -1, parent, call)
    raw = {"llm.openai.model": "gpt-4o-mini", "llm.openai.messages": "[{'role': 'user'}]"}
    _span(p, scope, "raw_gen_ai_request", start, end, request, raw)
    request.end(end_time=at(end))


def test_litellm_request_spans_are_calls_and_the_raw_request_span_under_each_is_not() -> None:
    """LiteLLM's callback: an async embedding and two async chats, each with its raw request span: 1 + 2 calls."""
    p = pipeline(NO_MATCH_RULES)
    root = _span(p, "app", "POST /ask", 0, -1, None, {}, kind=SpanKind.SERVER)
    _litellm_call(p, root, 1, 40, "aembedding")
    _litellm_call(p, root, 40, 300, "acompletion", finish_reasons='["tool_calls"]')
    _litellm_call(p, root, 320, 700, "acompletion", finish_reasons='["stop"]')
    root.end(end_time=at(710))
    assert _counts(p, "POST /ask") == {"retrieval": 1, "model_call": 2}
    raw = [span for span in p.finished() if span.name == "raw_gen_ai_request"]
    assert len(raw) == 3
    assert all(attr.STAGE not in (span.attributes or {}) for span in raw)
    # LiteLLM writes no time to first token on spans (a metric only): none is reported.
    assert attr.TOTAL_FIRST_TOKEN_MS not in (p.span("POST /ask").attributes or {})


@pytest.mark.parametrize(
    ("call_type", "message_logging", "stage"),
    [
        ("completion", True, "model_call"),  # written gen_ai.operation.name=chat
        ("completion", False, "model_call"),
        ("acompletion", False, "model_call"),  # llm.request.type alone
        ("atext_completion", True, "model_call"),
        ("aresponses", True, "model_call"),
        ("anthropic_messages", False, "model_call"),
        ("embedding", True, "retrieval"),
        ("aembedding", False, "retrieval"),
        ("arerank", True, "retrieval"),
    ],
)
def test_litellm_call_types_are_staged_with_message_logging_on_or_off(
    call_type: str, message_logging: bool, stage: str
) -> None:
    """Each call type lands in its stage from either key (message logging off writes only llm.request.type)."""
    p = pipeline(NO_MATCH_RULES)
    root = _span(p, "app", "POST /ask", 0, -1, None, {}, kind=SpanKind.SERVER)
    _litellm_call(p, root, 1, 90, call_type, message_logging=message_logging)
    root.end(end_time=at(100))
    assert _counts(p, "POST /ask") == {stage: 1}
    assert (p.span("litellm_request").attributes or {})[attr.STAGE] == stage


@pytest.mark.parametrize(
    ("reasons", "only"), [('["tool_calls"]', True), ('["stop"]', False), ('["tool_calls", "stop"]', False)]
)
def test_litellm_finish_reasons_json_array_says_tool_calls_only(reasons: str, only: bool) -> None:
    """LiteLLM writes gen_ai.response.finish_reasons as a JSON array in a string; it is read as the reasons."""
    attributes = {"llm.request.type": "acompletion", "gen_ai.response.finish_reasons": reasons}
    assert answered_with_tool_calls_only(attributes) is only


def test_litellm_proxy_request_is_judged_for_its_calls() -> None:
    """LiteLLM's proxy: the SERVER `Received Proxy Server Request` root, its calls under it, is a judged request."""
    p = pipeline(NO_MATCH_RULES)
    root = _span(p, "litellm", "Received Proxy Server Request", 0, -1, None, {}, kind=SpanKind.SERVER)
    _span(p, "litellm", "redis", 1, 2, root, {"call_type": "async_get_cache", "service": "redis"})
    _litellm_call(p, root, 2, 250, "acompletion")
    root.end(end_time=at(260))
    assert [r.root_name for r in p.reports] == ["Received Proxy Server Request"]
    assert _counts(p, "Received Proxy Server Request") == {"model_call": 1}


def test_mirascope_chat_spans_are_calls_and_its_trace_and_resume_spans_are_not() -> None:
    """Mirascope's ops: `@ops.trace` > `chat {model}`, then `Response.resume` > `chat {model}`: two model calls.

    The `@ops.trace` root (INTERNAL, ``mirascope.type=trace``) contains a model call, so it is judged.
    """
    p = pipeline(NO_MATCH_RULES)
    chat = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-4o-mini"}
    done = {"gen_ai.response.finish_reasons": ("stop",)}
    root = _span(p, "mirascope.ops", "recommend_book", 0, -1, None, {"mirascope.type": "trace"})
    _span(p, "mirascope.llm", "chat gpt-4o-mini", 1, 200, root, {**chat, **done}, kind=SpanKind.CLIENT)
    resume_attributes = {"mirascope.type": "response_resume", "mirascope.response.model_id": "gpt-4o-mini"}
    resume = _span(p, "mirascope.ops", "Response.resume gpt-4o-mini", 200, -1, root, resume_attributes)
    _span(p, "mirascope.llm", "chat gpt-4o-mini", 201, 400, resume, {**chat, **done}, kind=SpanKind.CLIENT)
    resume.end(end_time=at(401))
    root.end(end_time=at(402))
    assert [r.root_name for r in p.reports] == ["recommend_book"]
    assert _counts(p, "recommend_book") == {"model_call": 2}
    assert attr.STAGE not in (p.span("Response.resume gpt-4o-mini").attributes or {})


def test_litellm_writes_the_call_onto_the_active_span_which_then_counts_once() -> None:
    """Inside an active span (no USE_OTEL_LITELLM_REQUEST_SPAN), LiteLLM sets the call's attributes on it at the end.

    That span, with only the raw request span in it, is then the one model call.
    """
    p = pipeline(NO_MATCH_RULES)
    root = _span(p, "app", "POST /ask", 0, -1, None, {}, kind=SpanKind.SERVER)
    answer = _span(p, "app", "answer", 1, -1, root, {})
    raw = {"llm.openai.model": "gpt-4o-mini"}
    _span(p, "litellm", "raw_gen_ai_request", 2, 290, answer, raw)
    answer.set_attributes({"llm.request.type": "acompletion", "gen_ai.operation.name": "acompletion"})
    answer.end(end_time=at(300))
    root.end(end_time=at(310))
    assert _counts(p, "POST /ask") == {"model_call": 1}
    assert (p.span("answer").attributes or {})[attr.STAGE] == "model_call"


def _laminar_call(p: Pipeline, parent: trace.Span, name: str, start: float, end: float) -> None:
    """One call as Laminar's own OpenAI instrumentation writes it: `lmnr.span.type=LLM`, no operation name."""
    call = {"lmnr.span.type": "LLM", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4.1-mini"}
    _span(p, "lmnr.openai", name, start, end, parent, call)


def test_browser_use_traced_by_laminar_counts_its_model_calls() -> None:
    """browser-use under Laminar: `agent.run` > `agent.step` (DEFAULT) > `openai.chat` (LLM): two steps, two calls.

    Its spans carry lmnr.span.type and no key of another dialect. The `agent.run` root
    (INTERNAL, DEFAULT) contains a model call, so it is judged; the browser actions
    (`execute_action`, DEFAULT, written only in Laminar's debug mode) are in no stage.
    """
    p = pipeline(NO_MATCH_RULES)
    scope = "lmnr.sdk"
    run = _span(p, scope, "agent.run", 0, -1, None, {"lmnr.span.type": "DEFAULT"})
    for n in range(2):
        step = _span(p, scope, "agent.step", n * 500, -1, run, {"lmnr.span.type": "DEFAULT"})
        _laminar_call(p, step, "openai.chat", n * 500 + 1, n * 500 + 300)
        _span(p, scope, "execute_action", n * 500 + 300, n * 500 + 450, step, {"lmnr.span.type": "DEFAULT"})
        step.end(end_time=at(n * 500 + 460))
    run.end(end_time=at(1000))
    assert [r.root_name for r in p.reports] == ["agent.run"]
    assert _counts(p, "agent.run") == {"model_call": 2}
    actions = [span for span in p.finished() if span.name == "execute_action"]
    assert len(actions) == 2
    assert all(attr.STAGE not in (span.attributes or {}) for span in actions)


def test_browser_use_beta_agent_llm_and_tool_spans_under_laminar() -> None:
    """browser-use's beta agent: `rust_core.llm` around Laminar's `openai.chat` is one call; TOOL, a tool call."""
    p = pipeline(NO_MATCH_RULES)
    scope = "lmnr.sdk"
    run = _span(p, scope, "agent.run", 0, -1, None, {"lmnr.span.type": "DEFAULT"})
    llm = _span(p, scope, "rust_core.llm", 1, -1, run, {"lmnr.span.type": "LLM"})
    _laminar_call(p, llm, "openai.chat", 2, 290)
    llm.end(end_time=at(300))
    _span(p, scope, "rust_core.tool.click", 300, 420, run, {"lmnr.span.type": "TOOL"})
    run.end(end_time=at(430))
    assert _counts(p, "agent.run") == {"model_call": 1, "tool_calls": 1}
    # Laminar records no time to first token.
    assert attr.TOTAL_FIRST_TOKEN_MS not in (p.span("agent.run").attributes or {})


def test_laminar_responses_api_spans_carry_no_type_and_are_in_no_stage() -> None:
    """Laminar's `openai.response` spans (the Responses API, browser-use's Azure model) carry no lmnr.span.type.

    With only gen_ai.system and the model, they are in no stage; the processor counts them
    as AI-looking spans in no stage, which `doctor` reports.
    """
    p = pipeline(NO_MATCH_RULES)
    run = _span(p, "lmnr.sdk", "agent.run", 0, -1, None, {"lmnr.span.type": "DEFAULT"}, kind=SpanKind.SERVER)
    response = {"gen_ai.system": "openai", "gen_ai.request.model": "gpt-4.1-mini"}
    _span(p, "lmnr.openai", "openai.response", 1, 300, run, response, kind=SpanKind.CLIENT)
    run.end(end_time=at(310))
    assert _counts(p, "agent.run") == {}
    assert p.processor.stats().unstaged_ai_spans == 1


CLAUDE_CODE_RULES = """
version: 1
total_ms: 60000
stages:
  model_call: {match: {name: claude_code.llm_request}}
  tool_calls: {match: {name: claude_code.tool}}
"""


def test_claude_code_spans_staged_by_name_with_its_millisecond_first_token() -> None:
    """The Claude Agent SDK's CLI (Claude Code, beta traces): no dialect key on its spans, so rules by name stage them.

    `claude_code.interaction` > `claude_code.llm_request` (ttft_ms, milliseconds) >
    `claude_code.tool` > `claude_code.tool.execution`: the rules of the README row give two
    model calls and one tool call; `ttft_ms` is read by default. The CLI parents its
    spans under the caller's span (TRACEPARENT), here the app's server span.
    """
    p = pipeline(CLAUDE_CODE_RULES)
    scope = "com.anthropic.claude_code"
    root = _span(p, "app", "POST /agent", 0, -1, None, {}, kind=SpanKind.SERVER)
    turn = _span(p, scope, "claude_code.interaction", 5, -1, root, {"interaction.sequence": 1})
    request = {"model": "claude-sonnet", "gen_ai.system": "anthropic", "gen_ai.request.model": "claude-sonnet"}
    _span(p, scope, "claude_code.llm_request", 10, 400, turn, {**request, "ttft_ms": 180, "duration_ms": 390})
    tool = _span(p, scope, "claude_code.tool", 400, -1, turn, {"tool_name": "Bash"})
    _span(p, scope, "claude_code.tool.blocked_on_user", 401, 450, tool, {})
    _span(p, scope, "claude_code.tool.execution", 450, 600, tool, {})
    tool.end(end_time=at(601))
    _span(p, scope, "claude_code.llm_request", 601, 900, turn, {**request, "ttft_ms": 95.5, "duration_ms": 299})
    turn.end(end_time=at(901))
    root.end(end_time=at(910))
    assert _counts(p, "POST /agent") == {"model_call": 2, "tool_calls": 1}
    attributes = dict(p.span("POST /agent").attributes or {})
    assert attributes[attr.stage_key("model_call", "worst_first_token_ms")] == 180.0
    assert attributes[attr.TOTAL_FIRST_TOKEN_MS] == 190.0


def test_claude_code_spans_are_in_no_stage_by_default() -> None:
    """With no rules, Claude Code's spans (a model name, no dialect key) are in no stage: rules by name are needed."""
    p = pipeline(NO_MATCH_RULES)
    root = _span(p, "app", "POST /agent", 0, -1, None, {}, kind=SpanKind.SERVER)
    request = {"gen_ai.system": "anthropic", "gen_ai.request.model": "claude-sonnet", "ttft_ms": 180}
    _span(p, "com.anthropic.claude_code", "claude_code.llm_request", 10, 400, root, request)
    root.end(end_time=at(410))
    assert _counts(p, "POST /agent") == {}
    assert p.processor.stats().unstaged_ai_spans == 1


def test_deepeval_stamps_leave_the_frameworks_own_keys_in_charge() -> None:
    """DeepEval's OTel integrations stamp confident.span.type on the framework's spans, some by span name alone.

    A Strands `chat` span stamped `llm` is one model call by its own key; a span that
    DeepEval calls `llm` only because its name says `chat` (no dialect key) is no call.
    """
    p = pipeline(NO_MATCH_RULES)
    scope = "strands.telemetry.tracer"
    agent = {"gen_ai.operation.name": "invoke_agent", "confident.span.type": "agent"}
    root = _span(p, scope, "invoke_agent helper", 0, -1, None, agent)
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m", "confident.span.type": "llm"}
    _span(p, scope, "chat", 1, 300, root, chat)
    _span(p, "app", "format chat history", 300, 301, root, {"confident.span.type": "llm"})
    root.end(end_time=at(310))
    assert _counts(p, "invoke_agent helper") == {"model_call": 1}
    assert attr.STAGE not in (p.span("format chat history").attributes or {})


def _braintrust_span(trace_id: int) -> trace.NonRecordingSpan:
    """A Braintrust span as braintrust.otel.context puts it in the OTel context: its ids, local, never recorded."""
    sampled = trace.TraceFlags(trace.TraceFlags.SAMPLED)
    return trace.NonRecordingSpan(trace.SpanContext(trace_id, 0x5678, is_remote=False, trace_flags=sampled))


def test_braintrust_otel_compat_calls_under_its_span_alone_are_not_accounted() -> None:
    """BRAINTRUST_OTEL_COMPAT with no OTel span around: the calls' parent is local and in no pipeline, so no root.

    Braintrust's own span goes to its API; the OTel calls under it pass through untouched
    (no request is judged, nothing is lost).
    """
    p = pipeline(NO_MATCH_RULES)
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini"}
    parent = _braintrust_span(0x1234)
    for n in range(2):
        _span(p, "opentelemetry.instrumentation.openai", f"openai.chat {n}", n * 300, n * 300 + 250, parent, chat)
    assert p.reports == []
    calls = [span for span in p.finished() if span.name.startswith("openai.chat")]
    assert len(calls) == 2
    assert all(p.passed_untouched(span) for span in calls)


def test_braintrust_otel_compat_calls_count_in_the_otel_request_around_it() -> None:
    """With an OTel server span around the Braintrust span (same trace id), its calls count in that request."""
    p = pipeline(NO_MATCH_RULES)
    root = _span(p, "app", "POST /ask", 0, -1, None, {}, kind=SpanKind.SERVER)
    parent = _braintrust_span(root.get_span_context().trace_id)
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini"}
    for n in range(2):
        _span(p, "opentelemetry.instrumentation.openai", f"openai.chat {n}", n * 300, n * 300 + 250, parent, chat)
    root.end(end_time=at(700))
    assert [r.root_name for r in p.reports] == ["POST /ask"]
    assert _counts(p, "POST /ask") == {"model_call": 2}


def test_semantic_kernel_tool_runs_without_an_id_are_counted_by_the_readme_match_rule() -> None:
    """Ollama's tool calls carry no id, so neither do their runs: in no stage, unless the README's rule is added."""
    rule = '{match: {name: "execute_tool *-*", scope: semantic_kernel.functions.kernel_function}}'
    for text, tools in ((NO_MATCH_RULES, 0), (f"{NO_MATCH_RULES}stages:\n  tool_calls: {rule}\n", 2)):
        p = pipeline(text)
        root = _span(p, "app", "POST /ask", 0, -1, None, {}, kind=SpanKind.SERVER)
        prompt = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "UbjhsExQkclqmnYh"}
        wrapper = _span(p, SK_FUNCTION_SCOPE, "execute_tool UbjhsExQkclqmnYh", 1, -1, root, prompt)
        tool = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "weather-get_weather"}
        for n in range(2):
            _span(p, SK_FUNCTION_SCOPE, "execute_tool weather-get_weather", 10 + n * 10, 15 + n * 10, wrapper, tool)
        wrapper.end(end_time=at(50))
        root.end(end_time=at(60))
        assert _counts(p, "POST /ask").get("tool_calls", 0) == tools
        assert attr.STAGE not in (p.span("execute_tool UbjhsExQkclqmnYh").attributes or {})


LIVEKIT = "livekit-agents"  # livekit.agents.telemetry.traces: trace.get_tracer("livekit-agents")
LIVEKIT_TOOL_RULES = """
version: 1
total_ms: 60000
stages:
  model_call: {budget_ms: 5000}
  tool_calls: {match: {name: function_tool, scope: livekit-agents}}
"""


def _instant(ms: float, quoted: bool) -> str:
    """What livekit writes as langfuse.observation.completion_start_time: UTC isoformat(), JSON-quoted or not."""
    text = (datetime.fromtimestamp(T0 // 1_000_000_000, tz=timezone.utc) + timedelta(milliseconds=ms)).isoformat()
    return f'"{text}"' if quoted else text


def _livekit_llm(p: Pipeline, parent: trace.Span, start: float, end: float, first_token_ms: float) -> None:
    """LLMStream: `llm_node` (model, no operation) > `llm_request` (chat) > `llm_request_run` (one attempt)."""
    model = {"gen_ai.request.model": "gpt-4o-mini", "gen_ai.provider.name": "openai"}
    node = _span(p, LIVEKIT, "llm_node", start, -1, parent, {**model, "lk.function_tools": ("lookup",)})
    chat = {**model, "gen_ai.operation.name": "chat"}
    request = _span(p, LIVEKIT, "llm_request", start + 1, -1, node, chat)
    _span(p, LIVEKIT, "llm_request_run", start + 1, end - 1, request, {"lk.retry_count": 0})
    request.set_attributes(
        {
            "lk.llm_metrics": '{"ttft": %s}' % (first_token_ms / 1000),
            "gen_ai.usage.input_tokens": 50,
            "gen_ai.usage.output_tokens": 7,
            "langfuse.observation.completion_start_time": _instant(start + 1 + first_token_ms, quoted=True),
        }
    )
    request.end(end_time=at(end))
    node.end(end_time=at(end + 1))


def _livekit_session(p: Pipeline) -> None:
    """A voice session, as livekit-agents 1.7.0 traces it: one user turn, one agent turn that calls a tool."""
    session = _span(p, LIVEKIT, "agent_session", 0, -1, None, {"lk.agent_name": "assistant"})
    user = _span(p, LIVEKIT, "user_turn", 10, -1, session, {})
    _span(p, LIVEKIT, "eou_detection", 90, 95, user, {"lk.eou.probability": 0.9})
    user.end(end_time=at(100))
    turn = _span(p, LIVEKIT, "agent_turn", 100, -1, session, {"lk.generation_id": "g1"})
    _livekit_llm(p, turn, 100, 400, first_token_ms=150)  # planning: its first chunk is a tool call
    tool = {"lk.function_tool.id": "call_1", "lk.function_tool.name": "lookup"}
    _span(p, LIVEKIT, "function_tool", 401, 450, turn, {**tool, "lk.function_tool.is_error": False})
    _livekit_llm(p, turn, 451, 700, first_token_ms=80)
    tts = _span(p, LIVEKIT, "tts_node", 530, -1, turn, {})
    request = _span(p, LIVEKIT, "tts_request", 531, -1, tts, {"lk.tts.streaming": True})
    _span(p, LIVEKIT, "tts_request_run", 531, 900, request, {"lk.retry_count": 0})
    request.end(end_time=at(900))
    tts.end(end_time=at(901))
    turn.end(end_time=at(902))
    session.end(end_time=at(1000))


def test_livekit_agents_llm_requests_are_calls_and_its_nodes_and_attempts_are_not() -> None:
    """livekit-agents: `llm_request` (the conventions' `chat`) is a model call; `llm_node` around it (a model,
    no operation) and `llm_request_run` (each attempt) are in no stage; its tools carry no dialect key.

    `agent_session` as the root (a session started outside a worker job) holds every turn: the session is
    the request, judged for its calls. The
    first token is read from `langfuse.observation.completion_start_time` (JSON-quoted ISO-8601,
    from the request span's start); its tool-call-only answers are not recognised (the
    `gen_ai.choice` event lists `tool_calls` and no `content`), so the planning call's first
    chunk (101 + 150 ms) is the request's first token.
    """
    p = pipeline(NO_MATCH_RULES)
    _livekit_session(p)
    assert _counts(p, "agent_session") == {"model_call": 2}
    staged = {s.name for s in p.finished() if attr.STAGE in (s.attributes or {})}
    assert staged == {"llm_request"}
    session = dict(p.span("agent_session").attributes or {})
    assert session[attr.stage_key("model_call", "worst_first_token_ms")] == 150.0
    assert session[attr.TOTAL_FIRST_TOKEN_MS] == 251.0
    assert p.processor.stats().unstaged_ai_spans == 2  # the two llm_node spans name a model


def test_livekit_agents_function_tools_are_counted_by_the_readme_match_rule() -> None:
    """The README row's rule (`function_tool` on scope livekit-agents) counts the tool call; model calls stay."""
    p = pipeline(LIVEKIT_TOOL_RULES)
    _livekit_session(p)
    assert _counts(p, "agent_session") == {"model_call": 2, "tool_calls": 1}
    assert attr.STAGE not in (p.span("tts_request").attributes or {})


def test_livekit_agents_fallback_adapter_nests_one_call() -> None:
    """FallbackAdapter: `llm_fallback_adapter` (chat) > `llm_request_run` > its LLM's `llm_request` (chat): one call."""
    p = pipeline(NO_MATCH_RULES)
    session = _span(p, LIVEKIT, "agent_session", 0, -1, None, {})
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "FallbackAdapter"}
    adapter = _span(p, LIVEKIT, "llm_fallback_adapter", 10, -1, session, chat)
    attempt = _span(p, LIVEKIT, "llm_request_run", 10, -1, adapter, {"lk.retry_count": 0})
    _livekit_llm(p, attempt, 11, 300, first_token_ms=120)
    attempt.end(end_time=at(302))
    adapter.end(end_time=at(303))
    session.end(end_time=at(400))
    assert _counts(p, "agent_session") == {"model_call": 1}


def test_livekit_agents_realtime_turn_is_the_call_and_a_late_metrics_span_is_part_of_it() -> None:
    """A realtime model: the `agent_turn` span itself is the `chat` call, its first token an unquoted ISO-8601 instant.

    When the model's metrics arrive after the turn ended, livekit writes them on a
    `realtime_metrics` child with the same attributes: nested in its turn's call, it is part
    of that call (two turns, two calls), and its first token, an instant before that span's
    own start, is not read (the turn's first token is lost).
    """
    p = pipeline(NO_MATCH_RULES)
    session = _span(p, LIVEKIT, "agent_session", 0, -1, None, {})
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-realtime", "gen_ai.provider.name": "openai"}
    metrics = {**chat, "lk.realtime_model_metrics": "{}", "gen_ai.usage.output_tokens": 9}
    first = {"langfuse.observation.completion_start_time": _instant(300, quoted=False)}
    _span(p, LIVEKIT, "agent_turn", 100, 800, session, {**metrics, **first, "lk.generation_id": "g1"})
    turn = _span(p, LIVEKIT, "agent_turn", 900, 1500, session, {**chat, "lk.generation_id": "g2"})
    late = {"langfuse.observation.completion_start_time": _instant(1300, quoted=False)}
    _span(p, LIVEKIT, "realtime_metrics", 1600, 1600, turn, {**metrics, **late})
    session.end(end_time=at(2000))
    assert _counts(p, "agent_session") == {"model_call": 2}
    attributes = dict(p.span("agent_session").attributes or {})
    assert attributes[attr.stage_key("model_call", "worst_first_token_ms")] == 200.0
    assert attributes[attr.TOTAL_FIRST_TOKEN_MS] == 300.0


@pytest.mark.parametrize("entrypoint_waits_for_close", [False, True])
def test_livekit_agents_job_entrypoint_is_the_root_and_must_outlive_the_session(
    entrypoint_waits_for_close: bool,
) -> None:
    """In a worker job `agent_session` is a child of `job_entrypoint`, the local root.

    An entrypoint that returns after `session.start(...)` (LiveKit's examples) ends the root
    before the first turn: it holds no call then, so it is start-up work, and the session's
    spans pass through uncounted, with no report. One that awaits the session's `close`
    event (emitted after `agent_session` ends) holds the whole session: one request, counted.
    """
    p = pipeline(NO_MATCH_RULES)
    job = _span(p, LIVEKIT, "job_entrypoint", 0, -1, None, {"lk.job_id": "AJ_1", "lk.agent_name": "assistant"})
    session = _span(p, LIVEKIT, "agent_session", 5, -1, job, {})
    if not entrypoint_waits_for_close:
        job.end(end_time=at(50))
    turn = _span(p, LIVEKIT, "agent_turn", 100, -1, session, {"lk.generation_id": "g1"})
    _livekit_llm(p, turn, 100, 400, first_token_ms=150)
    turn.end(end_time=at(500))
    session.end(end_time=at(1000))
    if entrypoint_waits_for_close:
        job.end(end_time=at(1001))
        assert _counts(p, "job_entrypoint") == {"model_call": 1}
        assert len(p.reports) == 1
    else:
        assert all(attr.STAGE not in (s.attributes or {}) for s in p.finished())
        assert p.reports == []
