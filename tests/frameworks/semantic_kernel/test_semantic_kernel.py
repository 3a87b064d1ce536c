"""Semantic Kernel's own OpenTelemetry tracing (its model diagnostics), offline: a real kernel, the real openai client.

Semantic Kernel traces through the global tracer provider (each module's tracer comes from
``trace.get_tracer``), which the SDK lets a process set once: this module sets one
provider, with the budget processor, for all its tests. Its model diagnostics are read
from ``SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS`` when semantic_kernel is
imported, so the variable is set before the import.

What it writes, checked here for real: each chat call is ``chat {model}`` with the
conventions' ``gen_ai.operation.name=chat``, streamed or not (older releases wrote
``chat.completions`` and ``chat.streaming_completions``); each kernel function run is
``execute_tool {plugin}-{function}``; the auto function calling loop is
``AutoFunctionInvocationLoop``, in no stage; an agent's run is the conventions'
``invoke_agent {name}``, an invocation. It records no first token. Only a run that a
model's tool call asked for carries ``gen_ai.tool.call.id``: the others (the prompt
function ``kernel.invoke_prompt`` runs, a function the app invokes) are no call.
"""

from __future__ import annotations

import os

# Read by semantic_kernel's model diagnostics settings when it is imported.
os.environ["SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS"] = "true"

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Annotated

import pytest
from openai import AsyncOpenAI
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from semantic_kernel import Kernel
from semantic_kernel.agents import ChatCompletionAgent
from semantic_kernel.connectors.ai.function_choice_behavior import FunctionChoiceBehavior
from semantic_kernel.connectors.ai.open_ai import OpenAIChatCompletion, OpenAIChatPromptExecutionSettings
from semantic_kernel.contents import ChatHistory
from semantic_kernel.functions import KernelArguments, kernel_function

from ...instrumentation.fake_openai import ANSWER_WORDS, MODEL, TOOL_CALL_ID, TOOL_CITIES, FakeOpenAIServer, serve
from ..stacks import Outcome, SettledPipeline, budget_pipeline

ANSWER = "".join(ANSWER_WORDS)
QUESTION = "What is the weather in Paris?"
MODEL_SPAN = f"chat {MODEL}"
TOOL_SPAN = "execute_tool weather-get_weather"
LOOP_SPAN = "AutoFunctionInvocationLoop"


class WeatherPlugin:
    """The kernel function the model calls as a tool (the fake server asks for ``get_weather``)."""

    def __init__(self) -> None:
        self.cities: list[str] = []

    @kernel_function(name="get_weather", description="The weather in a city.")
    def get_weather(self, city: Annotated[str, "the city"]) -> str:
        self.cities.append(city)
        return f"sunny in {city}"


@pytest.fixture(scope="module")
def global_pipe() -> SettledPipeline:
    """One budget pipeline for the module, its provider the process's global one (settable once)."""
    pipe = budget_pipeline(max_model_calls=2)
    trace.set_tracer_provider(pipe.provider)
    assert trace.get_tracer_provider() is pipe.provider, "another test set the global tracer provider first"
    return pipe


@pytest.fixture
def pipe(global_pipe: SettledPipeline) -> SettledPipeline:
    """The module's pipeline, emptied of an earlier test's spans (every one of them had ended)."""
    global_pipe.exporter.clear()
    global_pipe.handed.started.clear()
    global_pipe.handed.ended.clear()
    return global_pipe


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI server, on a free loopback port."""
    with serve() as server:
        yield server


def _kernel(server: FakeOpenAIServer) -> tuple[Kernel, OpenAIChatCompletion, WeatherPlugin]:
    """A kernel with the weather plugin and OpenAIChatCompletion on the real openai client, against the fake server."""
    kernel = Kernel()
    plugin = WeatherPlugin()
    kernel.add_plugin(plugin, plugin_name="weather")
    service = OpenAIChatCompletion(
        ai_model_id=MODEL, async_client=AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    )
    kernel.add_service(service)
    return kernel, service, plugin


def _auto() -> OpenAIChatPromptExecutionSettings:
    return OpenAIChatPromptExecutionSettings(function_choice_behavior=FunctionChoiceBehavior.Auto())


async def _chat(kernel: Kernel, service: OpenAIChatCompletion, *, stream: bool) -> str:
    """One chat turn through the chat service with auto function calling, as an application writes it."""
    history = ChatHistory()
    history.add_user_message(QUESTION)
    if stream:
        parts = [
            str(message)
            async for messages in service.get_streaming_chat_message_contents(history, _auto(), kernel=kernel)
            for message in messages
        ]
        return "".join(parts)
    [reply] = await service.get_chat_message_contents(history, _auto(), kernel=kernel)
    return str(reply.content)


def _attributes(outcome: Outcome, name: str) -> dict[str, object]:
    [span] = [s for s in outcome.request_spans if s.name == name]
    return dict(span.attributes or {})


@pytest.mark.parametrize("stream", [False, True], ids=["chat", "streamed"])
def test_auto_function_calling_is_two_model_calls_and_one_tool_call(
    pipe: SettledPipeline, fake_openai: FakeOpenAIServer, stream: bool
) -> None:
    """Both chat calls are model_call, the kernel function tool_calls, the loop no stage; counts 2 and 1."""
    kernel, service, plugin = _kernel(fake_openai)
    before = pipe.processor.stats()
    with pipe.tracer.start_as_current_span("request"):
        assert asyncio.run(_chat(kernel, service, stream=stream)) == ANSWER
    assert pipe.settle()  # the root is held for late spans, a grace after it ends
    after = pipe.processor.stats()
    assert (after.reports, after.unstaged_ai_spans) == (before.reports + 1, before.unstaged_ai_spans)
    assert plugin.cities == ["Paris"]
    assert [bool(body.get("stream")) for body in fake_openai.requests] == [stream, stream]  # the real calls
    outcome = Outcome(pipe)
    assert outcome.stage_names() == {
        "model_call": Counter({MODEL_SPAN: 2}),
        "tool_calls": Counter({TOOL_SPAN: 1}),
    }
    assert outcome.counts() == {"model_call": 2, "tool_calls": 1}
    # The conventions' operation names, streamed or not: the Semantic Kernel row's own names are older releases'.
    assert {str(s.attributes.get("gen_ai.operation.name")) for s in outcome.in_stage("model_call") if s.attributes} == {
        "chat"
    }
    tool = _attributes(outcome, TOOL_SPAN)
    assert (tool["gen_ai.operation.name"], tool["gen_ai.tool.call.id"]) == ("execute_tool", TOOL_CALL_ID)
    loop = _attributes(outcome, LOOP_SPAN)
    assert "latency_budget.stage" not in loop
    assert outcome.first_token_ms() == (None, None)  # Semantic Kernel records no first token
    assert outcome.violation_kinds() == []
    assert outcome.hints() == []
    outcome.assert_all_calls_in_the_request()
    outcome.assert_exported_once()


@pytest.mark.parametrize("stream", [False, True], ids=["get_response", "invoke_stream"])
def test_a_chat_completion_agent_run_is_a_request_of_its_own(
    pipe: SettledPipeline, fake_openai: FakeOpenAIServer, stream: bool
) -> None:
    """With no span around it, the agent's `invoke_agent` root is judged: two model calls, one tool call."""
    plugin = WeatherPlugin()
    service = OpenAIChatCompletion(
        ai_model_id=MODEL, async_client=AsyncOpenAI(base_url=fake_openai.base_url, api_key="sk-test", max_retries=0)
    )
    agent = ChatCompletionAgent(name="weather_agent", service=service, plugins=[plugin])
    assert pipe.finished() == []  # creating the agent makes no span

    async def run() -> str:
        if stream:
            return "".join([str(item.message) async for item in agent.invoke_stream(messages=QUESTION)])
        return str((await agent.get_response(messages=QUESTION)).message)

    assert asyncio.run(run()) == ANSWER
    assert plugin.cities == ["Paris"]
    assert [bool(body.get("stream")) for body in fake_openai.requests] == [stream, stream]
    outcome = Outcome(pipe, root_name="invoke_agent weather_agent")
    assert outcome.root.parent is None
    assert outcome.root_attributes["gen_ai.operation.name"] == "invoke_agent"
    assert outcome.stage_names() == {
        "model_call": Counter({MODEL_SPAN: 2}),
        "tool_calls": Counter({"execute_tool WeatherPlugin-get_weather": 1}),
    }
    assert outcome.counts() == {"model_call": 2, "tool_calls": 1}
    assert outcome.violation_kinds() == []
    assert outcome.hints() == []
    outcome.assert_all_calls_in_the_request()
    outcome.assert_exported_once()


def _union_ms(spans: list[ReadableSpan]) -> float:
    """The milliseconds that at least one of ``spans`` covers."""
    total, reach = 0, 0
    for start, end in sorted((s.start_time or 0, s.end_time or 0) for s in spans):
        total += max(0, end - max(start, reach))
        reach = max(reach, end)
    return total / 1e6


@pytest.mark.parametrize("tools", [1, 2], ids=["one_tool", "two_tools"])
@pytest.mark.parametrize("stream", [False, True], ids=["invoke", "streamed"])
def test_invoke_prompt_counts_each_tool_call_and_its_prompt_function_is_no_call(
    pipe: SettledPipeline, fake_openai: FakeOpenAIServer, stream: bool, tools: int
) -> None:
    """``kernel.invoke_prompt`` runs the prompt as a kernel function: its own ``execute_tool`` span is in no stage.

    That span (a generated name, no tool call id) holds the loop, both model calls and the
    tools; each tool the model asked for (with its call id) is one tool call, and the stage's
    time is the tools' own.
    """
    fake_openai.tool_calls = tools
    kernel, _, plugin = _kernel(fake_openai)
    arguments = KernelArguments(settings=_auto())

    async def invoke() -> str:
        if stream:
            parts = [
                str(message)
                async for messages in kernel.invoke_prompt_stream(QUESTION, arguments=arguments)
                for message in messages
            ]
            return "".join(parts)
        return str(await kernel.invoke_prompt(QUESTION, arguments=arguments))

    before = pipe.processor.stats()
    with pipe.tracer.start_as_current_span("request"):
        assert asyncio.run(invoke()) == ANSWER
    assert pipe.settle()  # the root is held for late spans, a grace after it ends
    after = pipe.processor.stats()
    assert (after.reports, after.unstaged_ai_spans) == (before.reports + 1, before.unstaged_ai_spans)
    assert plugin.cities == list(TOOL_CITIES[:tools])
    assert [bool(body.get("stream")) for body in fake_openai.requests] == [stream, stream]
    outcome = Outcome(pipe)
    [loop] = [s for s in outcome.request_spans if s.name == LOOP_SPAN]
    assert loop.parent is not None
    [wrapper] = [s for s in outcome.request_spans if s.context and s.context.span_id == loop.parent.span_id]
    attributes = dict(wrapper.attributes or {})
    assert wrapper.name.startswith("execute_tool ")
    assert wrapper.name != TOOL_SPAN
    assert wrapper.instrumentation_scope is not None
    assert wrapper.instrumentation_scope.name == "semantic_kernel.functions.kernel_function"
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert "gen_ai.tool.call.id" not in attributes
    assert "latency_budget.stage" not in attributes
    assert pipe.passed_untouched(wrapper)
    assert outcome.stage_names() == {
        "model_call": Counter({MODEL_SPAN: 2}),
        "tool_calls": Counter({TOOL_SPAN: tools}),
    }
    assert outcome.counts() == {"model_call": 2, "tool_calls": tools}
    call_ids = {(s.attributes or {}).get("gen_ai.tool.call.id") for s in outcome.in_stage("tool_calls")}
    assert call_ids == {TOOL_CALL_ID, *(f"call_weather_{n + 1}" for n in range(1, tools))}
    root = outcome.root_attributes
    for stage in ("model_call", "tool_calls"):
        assert root[f"latency_budget.stages.{stage}.actual_ms"] == pytest.approx(
            _union_ms(outcome.in_stage(stage)), abs=0.002
        )
    assert outcome.violation_kinds() == []
    assert outcome.hints() == []
    outcome.assert_all_calls_in_the_request()
    outcome.assert_exported_once()


def test_a_kernel_function_the_app_invokes_itself_is_its_own_step_not_a_tool_call(
    pipe: SettledPipeline, fake_openai: FakeOpenAIServer
) -> None:
    """``kernel.invoke(plugin_function)`` by the app: no model asked for it (no tool call id), so no stage.

    The chat turn after it still counts its model calls and the tool the model asked for.
    """
    kernel, service, plugin = _kernel(fake_openai)
    before = pipe.processor.stats()
    with pipe.tracer.start_as_current_span("request"):
        own = asyncio.run(kernel.invoke(plugin_name="weather", function_name="get_weather", city="Rome"))
        assert str(own) == "sunny in Rome"
        assert asyncio.run(_chat(kernel, service, stream=False)) == ANSWER
    assert pipe.settle()  # the root is held for late spans, a grace after it ends
    after = pipe.processor.stats()
    assert (after.reports, after.unstaged_ai_spans) == (before.reports + 1, before.unstaged_ai_spans)
    assert plugin.cities == ["Rome", "Paris"]
    outcome = Outcome(pipe)
    tool_spans = sorted((s for s in outcome.request_spans if s.name == TOOL_SPAN), key=lambda s: s.start_time or 0)
    assert [(s.attributes or {}).get("gen_ai.tool.call.id") for s in tool_spans] == [None, TOOL_CALL_ID]
    assert "latency_budget.stage" not in (tool_spans[0].attributes or {})
    assert pipe.passed_untouched(tool_spans[0])
    assert outcome.stage_names() == {
        "model_call": Counter({MODEL_SPAN: 2}),
        "tool_calls": Counter({TOOL_SPAN: 1}),
    }
    assert outcome.counts() == {"model_call": 2, "tool_calls": 1}
    assert outcome.in_stage("tool_calls") == tool_spans[1:]
    assert outcome.violation_kinds() == []
    outcome.assert_exported_once()


def test_kernel_creation_and_a_function_run_at_start_up_are_left_alone(
    pipe: SettledPipeline, fake_openai: FakeOpenAIServer
) -> None:
    """Building the kernel makes no span; a kernel function run outside a request (no model call) is not judged.

    The function's ``execute_tool`` span (no tool call id: no model asked for it) is a local
    root in no stage with no model call in it: the default ``requests`` rule leaves it alone.
    """
    kernel, _, plugin = _kernel(fake_openai)
    assert pipe.finished() == []
    before = pipe.processor.stats()
    result = asyncio.run(kernel.invoke(plugin_name="weather", function_name="get_weather", city="Paris"))
    assert str(result) == "sunny in Paris"
    assert plugin.cities == ["Paris"]
    assert fake_openai.requests == []
    [root] = pipe.finished()
    assert (root.name, root.parent) == (TOOL_SPAN, None)
    assert pipe.passed_untouched(root)
    assert "gen_ai.tool.call.id" not in (root.attributes or {})
    # No stage label, verdict, report or counts.
    assert not any(key.startswith("latency_budget.") for key in root.attributes or {})
    assert pipe.settle()  # the root is held for late spans, a grace after it ends
    after = pipe.processor.stats()
    assert (after.reports, after.active_traces) == (before.reports, 0)
