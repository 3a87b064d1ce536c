"""The OpenAI Agents SDK, offline: the real openai client against the fake OpenAI server on loopback.

One run: the model asks for ``get_weather``, the tool runs, the model answers: two model calls
and one tool call, under agent, workflow and turn spans that are in no stage. Traced by
OpenInference, by OpenLLMetry, and by OpenInference plus OpenLLMetry's openai instrumentation
on the same client, which nests each client span inside the agent's generation span (two
spans, one call).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator

import openai
import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_trace_processors
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor as OpenInferenceAgents
from opentelemetry.instrumentation.openai import OpenAIInstrumentor as OpenLLMetryOpenAI
from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor as OpenLLMetryAgents
from opentelemetry.sdk.trace import TracerProvider

from latency_budget._core.first_token import answered_with_tool_calls_only

from ...instrumentation.fake_openai import MODEL, TOOL_NAME, FakeOpenAIServer, serve
from ..stacks import Outcome, budget_pipeline, event_offset_ns

ANSWER = "It is sunny in Paris."
CHUNK_EVENT = "gen_ai.content.completion.chunk"


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


Instrumentor = OpenInferenceAgents | OpenLLMetryAgents | OpenLLMetryOpenAI
STACKS: dict[str, tuple[Callable[[], list[Instrumentor]], dict[str, Counter[str]]]] = {
    "openinference": (
        lambda: [OpenInferenceAgents()],
        {"model_call": Counter({"generation": 2}), "tool_calls": Counter({TOOL_NAME: 1})},
    ),
    "openllmetry": (
        lambda: [OpenLLMetryAgents()],
        {"model_call": Counter({"openai.response": 2}), "tool_calls": Counter({f"{TOOL_NAME}.tool": 1})},
    ),
    "openinference+openllmetry-openai": (
        lambda: [OpenInferenceAgents(), OpenLLMetryOpenAI()],
        {"model_call": Counter({"generation": 2, "openai.chat": 2}), "tool_calls": Counter({TOOL_NAME: 1})},
    ),
}


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI server, on a free loopback port for the module."""
    with serve() as server:
        yield server


def instrument(name: str, provider: TracerProvider) -> Callable[[], None]:
    set_trace_processors([])  # the SDK's own exporter would try its backend
    instrumentors = STACKS[name][0]()
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=provider)

    def undo() -> None:
        for instrumentor in reversed(instrumentors):
            instrumentor.uninstrument()
        set_trace_processors([])

    return undo


@pytest.fixture(params=list(STACKS))
def run(request: pytest.FixtureRequest, fake_openai: FakeOpenAIServer) -> Iterator[Callable[[bool], Outcome]]:
    """Run the agent once under a ``request`` span, streamed or not, with one stack's instrumentation on."""
    pipe = budget_pipeline(max_model_calls=2)
    undo = instrument(request.param, pipe.provider)
    client = openai.AsyncOpenAI(base_url=fake_openai.base_url, api_key="dummy-key", max_retries=0)
    agent = Agent(
        name="assistant",
        instructions="Answer with the weather.",
        tools=[get_weather],
        model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
    )

    async def go(stream: bool) -> str:
        with pipe.tracer.start_as_current_span("request"):
            if not stream:
                return str((await Runner.run(agent, "What is the weather in Paris?")).final_output)
            result = Runner.run_streamed(agent, "What is the weather in Paris?")
            async for _ in result.stream_events():
                pass
            return str(result.final_output)

    def once(stream: bool) -> Outcome:
        assert asyncio.run(go(stream)) == ANSWER
        return Outcome(pipe)

    try:
        yield once
    finally:
        undo()


def _stack(request: pytest.FixtureRequest) -> str:
    return str(request.node.callspec.params["run"])


@pytest.mark.parametrize("stream", [False, True], ids=["run", "streamed"])
def test_generations_are_model_calls_and_tools_are_tool_calls(
    run: Callable[[bool], Outcome], stream: bool, request: pytest.FixtureRequest
) -> None:
    """The stack's generation/chat spans are model_call, its tool span tool_calls; agent/turn spans are not."""
    outcome = run(stream)
    assert outcome.stage_names() == STACKS[_stack(request)][1]
    containers = [s for s in outcome.spans if s.name in {"Agent workflow", "Agent Workflow", "assistant", "turn"}]
    containers += [s for s in outcome.spans if s.name == "assistant.agent"]
    assert containers
    assert all("latency_budget.stage" not in (s.attributes or {}) for s in containers)
    outcome.assert_all_calls_in_the_request()
    outcome.assert_exported_once()


@pytest.mark.parametrize("stream", [False, True], ids=["run", "streamed"])
def test_counts_are_the_real_calls(
    run: Callable[[bool], Outcome], stream: bool, request: pytest.FixtureRequest
) -> None:
    """Two model calls and one tool call; max_calls 2 is not broken and no hint is invented."""
    outcome = run(stream)
    assert outcome.counts() == {"model_call": 2, "tool_calls": 1}
    assert outcome.violation_kinds() == []
    assert outcome.hints() == []


def test_first_token_comes_only_from_the_openai_client_instrumentation(
    run: Callable[[bool], Outcome], request: pytest.FixtureRequest
) -> None:
    """Neither agents instrumentation records a first token; OpenLLMetry's openai chunk events do.

    The first call streamed a tool call only (its span says so): the request's first token
    is the answering call's first chunk, the first text the user sees.
    """
    outcome = run(True)
    stage_ms, request_ms = outcome.first_token_ms()
    if _stack(request) != "openinference+openllmetry-openai":
        assert not any(e.name == CHUNK_EVENT for s in outcome.spans for e in s.events)
        assert (stage_ms, request_ms) == (None, None)
        return
    chats = [s for s in outcome.in_stage("model_call") if s.name == "openai.chat"]
    offsets = {s.context.span_id: event_offset_ns(s, CHUNK_EVENT) for s in chats if s.context}
    assert len(offsets) == 2
    assert all(v is not None for v in offsets.values())
    planning, answering = sorted(chats, key=lambda s: s.start_time or 0)
    assert answered_with_tool_calls_only(dict(planning.attributes or {}))
    assert not answered_with_tool_calls_only(dict(answering.attributes or {}))
    assert answering.context is not None
    first = (answering.start_time or 0) + (offsets[answering.context.span_id] or 0)
    assert request_ms == pytest.approx((first - (outcome.root.start_time or 0)) / 1e6, abs=1e-3)
    assert stage_ms is not None
