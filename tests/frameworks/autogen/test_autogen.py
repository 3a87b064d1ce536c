"""AutoGen, offline: autogen-agentchat's AssistantAgent on autogen-ext's OpenAIChatCompletionClient, real openai client.

One request: the model asks for ``get_weather``, the tool runs, the model answers (the agent
reflects on the tool's result): two model calls and one tool call. AutoGen's own tracer
(autogen-core) writes ``create_agent {agent}`` when an agent is built, ``invoke_agent {agent}``
around its run and ``execute_tool {tool}`` around each tool, all through the *global* tracer
provider (``trace.get_tracer("autogen-core")``), and the runtime's messages (``autogen publish
...``, ``autogen process ...``) through the provider given to SingleThreadedAgentRuntime. It
writes no model call: that comes from an instrumentation of the openai client, here the
official openai-v2 one or OpenInference's, given the same provider.

AutoGen's agent and tool spans use the global provider, so each test makes its budget
pipeline's provider the global one.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.messages import TextMessage
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import SingleThreadedAgentRuntime
from autogen_core.models import ModelFamily, ModelInfo
from autogen_ext.models.openai import OpenAIChatCompletionClient
from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInferenceOpenAI
from opentelemetry import trace
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as OpenAIV2
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.util._once import Once

from latency_budget._core.first_token import answered_with_tool_calls_only

from ...instrumentation.fake_openai import ANSWER_WORDS, MODEL, TOOL_NAME, FakeOpenAIServer, serve
from ...unit.helpers import Pipeline
from ..stacks import Outcome, budget_pipeline, event_offset_ns

ANSWER = "".join(ANSWER_WORDS)
QUESTION = "What is the weather in Paris?"
# The fake model is unknown to autogen-ext, which then needs to be told what it can do.
FAKE_MODEL_INFO = ModelInfo(
    vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False
)
OPENINFERENCE_FIRST_TOKEN = "First Token Stream Event"
AUTOGEN_SCOPE = "autogen-core"
RUNTIME_SCOPE = "autogen SingleThreadedAgentRuntime"


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@dataclass(frozen=True)
class Setup:
    """One model-call instrumentation beside AutoGen's own tracer."""

    instrumentor: Callable[[], OpenAIV2 | OpenInferenceOpenAI]
    model_span: str  # the name of its span for one chat completion
    first_token_event: str | None  # the event it records on a streamed completion, if any


SETUPS = {
    "openai-v2": Setup(OpenAIV2, f"chat {MODEL}", None),
    "openinference": Setup(OpenInferenceOpenAI, "ChatCompletion", OPENINFERENCE_FIRST_TOKEN),
}


def expected_stages(setup: Setup) -> dict[str, Counter[str]]:
    return {"model_call": Counter({setup.model_span: 2}), "tool_calls": Counter({f"execute_tool {TOOL_NAME}": 1})}


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI server, on a free loopback port for the module."""
    with serve() as server:
        yield server


@pytest.fixture
def pipe(monkeypatch: pytest.MonkeyPatch) -> Pipeline:
    """A budget pipeline whose provider is, for the test, the global one (AutoGen's agent spans use that).

    The API lets a process set its global provider once; the test resets that guard as
    OpenTelemetry's own test utilities do, then sets the provider the public way.
    """
    pipe = budget_pipeline(max_model_calls=2)
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    trace.set_tracer_provider(pipe.provider)
    assert trace.get_tracer_provider() is pipe.provider
    return pipe


@pytest.fixture(params=list(SETUPS))
def setup(request: pytest.FixtureRequest, pipe: Pipeline) -> Iterator[Setup]:
    """One model-call instrumentation on the openai client, writing to the test's pipeline."""
    chosen = SETUPS[str(request.param)]
    instrumentor = chosen.instrumentor()
    instrumentor.instrument(tracer_provider=pipe.provider)
    try:
        yield chosen
    finally:
        instrumentor.uninstrument()


def _agent(server: FakeOpenAIServer, stream: bool) -> tuple[AssistantAgent, OpenAIChatCompletionClient]:
    client = OpenAIChatCompletionClient(
        model=MODEL, base_url=server.base_url, api_key="sk-test", max_retries=0, model_info=FAKE_MODEL_INFO
    )
    agent = AssistantAgent(
        "assistant", model_client=client, tools=[get_weather], reflect_on_tool_use=True, model_client_stream=stream
    )
    return agent, client


def _final_text(messages: object) -> str:
    assert isinstance(messages, list)
    last = messages[-1]
    assert isinstance(last, TextMessage)
    return last.content


def run_agent(pipe: Pipeline, server: FakeOpenAIServer, stream: bool, *, request_span: bool = True) -> Outcome:
    """The agent built at start-up, outside any request; then run once, under a ``request`` span or none."""

    async def go() -> str:
        agent, client = _agent(server, stream)
        try:
            if not request_span:
                return _final_text((await agent.run(task=QUESTION)).messages)
            with pipe.tracer.start_as_current_span("request"):
                return _final_text((await agent.run(task=QUESTION)).messages)
        finally:
            await client.close()

    assert asyncio.run(go()) == ANSWER
    return Outcome(pipe, root_name="request" if request_span else "invoke_agent assistant")


def run_team(pipe: Pipeline, server: FakeOpenAIServer, *, start_in_request: bool) -> Outcome:
    """The agent in a one-agent team on a SingleThreadedAgentRuntime given the pipeline's provider.

    The runtime is started inside the request, or at start-up before it; it is stopped once idle.
    """

    async def go() -> str:
        agent, client = _agent(server, stream=False)
        runtime = SingleThreadedAgentRuntime(tracer_provider=pipe.provider)
        team = RoundRobinGroupChat([agent], termination_condition=MaxMessageTermination(2), runtime=runtime)
        try:
            if not start_in_request:
                runtime.start()
            with pipe.tracer.start_as_current_span("request"):
                if start_in_request:
                    runtime.start()
                answer = _final_text((await team.run(task=QUESTION)).messages)
                if start_in_request:
                    await runtime.stop_when_idle()
            if not start_in_request:
                await runtime.stop_when_idle()
            return answer
        finally:
            await client.close()

    assert asyncio.run(go()) == ANSWER
    return Outcome(pipe)


def _attributes(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


def _scope(span: ReadableSpan) -> str | None:
    return span.instrumentation_scope.name if span.instrumentation_scope else None


def _judged(span: ReadableSpan) -> bool:
    return "latency_budget.verdict" in _attributes(span)


def _roots(outcome: Outcome) -> list[ReadableSpan]:
    return [s for s in outcome.spans if s.parent is None]


def _assert_start_up_left_alone(outcome: Outcome) -> None:
    """The agent's `create_agent` root, written when it was built, passed through untouched."""
    [created] = [s for s in _roots(outcome) if s.name == "create_agent assistant"]
    assert _attributes(created)["gen_ai.operation.name"] == "create_agent"
    assert _scope(created) == AUTOGEN_SCOPE
    assert outcome.pipe.passed_untouched(created)
    assert not any(key.startswith("latency_budget.") for key in _attributes(created))


@pytest.mark.parametrize("stream", [False, True], ids=["run", "streamed"])
def test_model_calls_and_tools_land_in_their_stages(
    setup: Setup, pipe: Pipeline, fake_openai: FakeOpenAIServer, stream: bool
) -> None:
    """The client's chat spans are model_call, AutoGen's execute_tool tool_calls; invoke_agent is in no stage."""
    outcome = run_agent(pipe, fake_openai, stream)
    assert outcome.stage_names() == expected_stages(setup)
    [invoked] = [s for s in outcome.request_spans if s.name == "invoke_agent assistant"]
    assert invoked.parent is not None
    assert outcome.root.context is not None
    assert invoked.parent.span_id == outcome.root.context.span_id
    assert "latency_budget.stage" not in _attributes(invoked)
    [tool] = outcome.in_stage("tool_calls")
    assert _attributes(tool)["gen_ai.tool.name"] == TOOL_NAME
    assert _scope(tool) == AUTOGEN_SCOPE
    outcome.assert_all_calls_in_the_request()
    outcome.assert_exported_once()


@pytest.mark.parametrize("stream", [False, True], ids=["run", "streamed"])
def test_counts_are_the_real_calls_and_start_up_is_left_alone(
    setup: Setup, pipe: Pipeline, fake_openai: FakeOpenAIServer, stream: bool
) -> None:
    """Two model calls and one tool call; max_calls 2 is not broken, no hint invented; create_agent not judged."""
    outcome = run_agent(pipe, fake_openai, stream)
    assert outcome.counts() == {"model_call": 2, "tool_calls": 1}
    assert outcome.violation_kinds() == []
    assert outcome.hints() == []
    assert [s.name for s in _roots(outcome) if _judged(s)] == ["request"]
    _assert_start_up_left_alone(outcome)
    outcome.assert_exported_once()


@pytest.mark.parametrize("setup", ["openai-v2"], indirect=True)
def test_an_agent_run_with_no_span_around_it_is_judged_as_an_invocation(
    setup: Setup, pipe: Pipeline, fake_openai: FakeOpenAIServer
) -> None:
    """With no span of the app around it, `invoke_agent` (a client-kind root) is the request: an invocation."""
    outcome = run_agent(pipe, fake_openai, stream=False, request_span=False)
    assert outcome.root.parent is None
    assert outcome.root.kind is trace.SpanKind.CLIENT
    assert _attributes(outcome.root)["gen_ai.operation.name"] == "invoke_agent"
    assert outcome.counts() == {"model_call": 2, "tool_calls": 1}
    assert outcome.violation_kinds() == []
    assert [s.name for s in _roots(outcome) if _judged(s)] == ["invoke_agent assistant"]
    _assert_start_up_left_alone(outcome)
    outcome.assert_all_calls_in_the_request()
    outcome.assert_exported_once()


def test_first_token_is_read_where_the_instrumentation_records_one(
    setup: Setup, pipe: Pipeline, fake_openai: FakeOpenAIServer
) -> None:
    """OpenInference's first-token event is read; openai-v2 records none on spans, so none is invented.

    The first call streamed a tool call only: the request's first token is the answering
    call's first token, the first text the user sees.
    """
    outcome = run_agent(pipe, fake_openai, stream=True)
    stage_ms, request_ms = outcome.first_token_ms()
    if setup.first_token_event is None:
        assert not any(e.name == OPENINFERENCE_FIRST_TOKEN for s in outcome.spans for e in s.events)
        assert (stage_ms, request_ms) == (None, None)
        return
    calls = outcome.in_stage("model_call")
    offsets = {s.context.span_id: event_offset_ns(s, setup.first_token_event) for s in calls if s.context}
    assert len(offsets) == 2
    recorded = {span_id: ns for span_id, ns in offsets.items() if ns is not None}
    planning, answering = calls
    assert answered_with_tool_calls_only(_attributes(planning))
    assert not answered_with_tool_calls_only(_attributes(answering))
    assert answering.context is not None
    assert answering.context.span_id in recorded
    assert stage_ms == pytest.approx(max(recorded.values()) / 1e6, abs=1e-3)
    first = (answering.start_time or 0) + recorded[answering.context.span_id]
    assert request_ms == pytest.approx((first - (outcome.root.start_time or 0)) / 1e6, abs=1e-3)


@pytest.mark.parametrize("setup", ["openai-v2"], indirect=True)
def test_a_team_on_a_runtime_started_in_the_request(
    setup: Setup, pipe: Pipeline, fake_openai: FakeOpenAIServer
) -> None:
    """The runtime's message spans (its own provider) nest in the request, in no stage; the counts are the calls."""
    outcome = run_team(pipe, fake_openai, start_in_request=True)
    assert outcome.stage_names() == expected_stages(setup)
    assert outcome.counts() == {"model_call": 2, "tool_calls": 1}
    assert outcome.violation_kinds() == []
    assert outcome.hints() == []
    messages = [s for s in outcome.request_spans if _scope(s) == RUNTIME_SCOPE]
    assert {s.name.split(" ")[1] for s in messages} >= {"create", "send", "publish", "process", "ack"}
    assert all("latency_budget.stage" not in _attributes(s) for s in messages)
    assert [s.name for s in _roots(outcome) if _judged(s)] == ["request"]
    _assert_start_up_left_alone(outcome)
    outcome.assert_all_calls_in_the_request()
    outcome.assert_exported_once()


def _unquoted(name: str) -> str:
    """A runtime span's name without the team's ids (``assistant_<uuid>.(<uuid>)-T`` -> ``assistant-T``)."""
    return re.sub(r"_[0-9a-f-]{36}|\.\([0-9a-f-]{36}\)", "", name)


@pytest.mark.parametrize("setup", ["openai-v2"], indirect=True)
def test_a_runtime_started_at_start_up_carries_no_request_context(
    setup: Setup, pipe: Pipeline, fake_openai: FakeOpenAIServer
) -> None:
    """Started before the request, the runtime writes each message as a trace of its own (linked, not parented).

    The agent's calls are then judged under the runtime's ``autogen publish`` root that holds
    them (the counts still right), and the request holds none. The runtime's ``autogen ack``
    roots (consumer spans resolving a reply) are judged too, as requests with no call.
    """
    outcome = run_team(pipe, fake_openai, start_in_request=False)
    assert outcome.counts() == {}
    assert not _judged(outcome.root)
    [invoked] = [s for s in outcome.spans if s.name == "invoke_agent assistant"]
    assert invoked.context is not None
    holders = [s for s in _roots(outcome) if s.context and s.context.trace_id == invoked.context.trace_id]
    [holder] = holders
    assert _unquoted(holder.name) == "autogen publish assistant-T"
    assert holder.kind is trace.SpanKind.PRODUCER
    held = Outcome(pipe, root_name=holder.name)
    assert held.counts() == {"model_call": 2, "tool_calls": 1}
    assert held.violation_kinds() == []
    judged = Counter(_unquoted(s.name) for s in _roots(outcome) if _judged(s))
    assert set(judged) == {"autogen publish assistant-T", "autogen ack"}
    acks = [s for s in _roots(outcome) if s.name == "autogen ack"]
    assert acks
    assert all(s.kind is trace.SpanKind.CONSUMER for s in acks)
    assert all(not any(k.endswith(".count") for k in _attributes(s)) for s in acks)
    _assert_start_up_left_alone(outcome)
    outcome.assert_exported_once()
