"""Strands Agents' own OpenTelemetry tracer, offline: a real Agent on OpenAIModel, the real openai client.

One request: the model streams a ``get_weather`` tool call, the tool runs, the model streams
the answer. Strands writes ``invoke_agent {agent}`` > ``execute_event_loop_cycle`` (one per
turn) > ``chat`` and ``execute_tool {tool}``, under the scope ``strands.telemetry.tracer``,
with the conventions' ``gen_ai.operation.name``. Time to first token is
``gen_ai.server.time_to_first_token`` in whole milliseconds (its ``timeToFirstByteMs``; a 0
is not written, so the fake model takes a few milliseconds to its first chunk), and a call
that asked for tools says so only in its ``gen_ai.choice`` event (``finish_reason``
``tool_use``).

Strands' tracer writes to the global tracer provider (``strands.telemetry.tracer.get_tracer``
reads it; ``StrandsTelemetry(tracer_provider=...)`` does not reach it), which the SDK lets a
process set once: the module sets one budget pipeline as the global, and each test starts
from an empty exporter.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from strands import Agent, tool
from strands.models.openai import OpenAIModel

from latency_budget._core.first_token import answered_with_tool_calls_only

from ...instrumentation.fake_openai import MODEL, TOOL_NAME, FakeOpenAIServer, serve
from ...unit.helpers import Pipeline as BudgetPipeline
from ..stacks import Outcome, budget_pipeline

SCOPE = "strands.telemetry.tracer"
TTFT = "gen_ai.server.time_to_first_token"
ANSWER = "It is sunny in Paris."
QUESTION = "What is the weather in Paris?"
AGENT = "weather"
FIRST_CHUNK_DELAY_S = 0.005


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI server, on a free loopback port for the module, a few ms to each first chunk."""
    with serve() as server:
        server.first_chunk_delay_s = FIRST_CHUNK_DELAY_S
        yield server


@pytest.fixture(scope="module")
def global_pipe() -> BudgetPipeline:
    """The module's budget pipeline, set as the process's global tracer provider (settable once)."""
    pipe = budget_pipeline(max_model_calls=2)
    trace.set_tracer_provider(pipe.provider)
    assert trace.get_tracer_provider() is pipe.provider
    return pipe


@pytest.fixture
def pipe(global_pipe: BudgetPipeline) -> BudgetPipeline:
    """The global pipeline with nothing exported or handed yet, and no trace open."""
    global_pipe.exporter.clear()
    for kept in (global_pipe.handed.started, global_pipe.handed.ending, global_pipe.handed.ended):
        kept.clear()
    assert global_pipe.processor.stats().active_traces == 0
    return global_pipe


def _agent(server: FakeOpenAIServer) -> Agent:
    model = OpenAIModel(
        client_args={"base_url": server.base_url, "api_key": "dummy-key", "max_retries": 0}, model_id=MODEL
    )
    return Agent(name=AGENT, model=model, tools=[get_weather], callback_handler=None)


def _streamed(agent: Agent) -> str:
    """The answer's text as Strands streams it (its ``data`` events), the agent's result checked against it."""

    async def go() -> str:
        text: list[str] = []
        result: Any = None
        async for event in agent.stream_async(QUESTION):
            if "data" in event:
                text.append(str(event["data"]))
            result = event.get("result", result)
        assert str(result).strip() == "".join(text)
        return "".join(text)

    return asyncio.run(go())


@pytest.fixture
def outcome(pipe: BudgetPipeline, fake_openai: FakeOpenAIServer) -> Outcome:
    """One streamed agent request under a ``request`` span (the server's record of requests emptied first)."""
    agent = _agent(fake_openai)
    fake_openai.requests.clear()
    with pipe.tracer.start_as_current_span("request"):
        assert _streamed(agent) == ANSWER
    return Outcome(pipe)


def _attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_chat_spans_are_model_calls_and_tool_spans_tool_calls(outcome: Outcome) -> None:
    """`chat` is model_call, `execute_tool get_weather` tool_calls; the agent and its cycles are in no stage."""
    assert outcome.stage_names() == {
        "model_call": Counter({"chat": 2}),
        "tool_calls": Counter({f"execute_tool {TOOL_NAME}": 1}),
    }
    assert {s.instrumentation_scope.name for s in outcome.in_stage("model_call") if s.instrumentation_scope} == {SCOPE}
    containers = [s for s in outcome.request_spans if s.name in {f"invoke_agent {AGENT}", "execute_event_loop_cycle"}]
    assert Counter(s.name for s in containers) == Counter({f"invoke_agent {AGENT}": 1, "execute_event_loop_cycle": 2})
    assert all("latency_budget.stage" not in _attributes(s) for s in containers)
    outcome.assert_all_calls_in_the_request()
    outcome.assert_exported_once()


def test_counts_are_the_real_calls(outcome: Outcome, fake_openai: FakeOpenAIServer) -> None:
    """Two model calls (the fake server saw two) and one tool call; max_calls 2 holds and no hint is invented."""
    planning, answering = fake_openai.requests
    assert [planning.get("stream"), answering.get("stream")] == [True, True]
    assert [m.get("role") for m in answering["messages"]].count("tool") == 1
    assert outcome.counts() == {"model_call": 2, "tool_calls": 1}
    assert outcome.violation_kinds() == []
    assert outcome.hints() == []
    assert outcome.pipe.processor.stats().unstaged_ai_spans == 0  # nothing that names a model was left out


def test_the_requests_first_token_is_the_answers_not_the_tool_call_chunk(outcome: Outcome) -> None:
    """Both calls carry their first byte in ms; the planning call asked for tools only, so the answer's is the user's.

    model_call's worst first token still counts both calls (each is the model's latency).
    """
    planning, answering = outcome.in_stage("model_call")
    for span in (planning, answering):
        written = _attributes(span).get(TTFT)
        assert isinstance(written, int), written
        assert written > 0
    [choice] = [e for e in planning.events if e.name == "gen_ai.choice"]
    assert dict(choice.attributes or {})["finish_reason"] == "tool_use"
    assert "gen_ai.response.finish_reasons" not in _attributes(planning)  # said in the event only

    def events(span: object) -> tuple[Any, ...]:
        return tuple(getattr(span, "events", ()))

    assert answered_with_tool_calls_only(_attributes(planning), events, planning, SCOPE)
    assert not answered_with_tool_calls_only(_attributes(answering), events, answering, SCOPE)
    stage_ms, request_ms = outcome.first_token_ms()
    planning_ms, answering_ms = _attributes(planning)[TTFT], _attributes(answering)[TTFT]
    assert stage_ms == pytest.approx(max(planning_ms, answering_ms))
    first = (answering.start_time or 0) + answering_ms * 1_000_000
    assert request_ms == pytest.approx((first - (outcome.root.start_time or 0)) / 1e6, abs=1e-3)


def test_the_agent_invocation_as_the_root_is_judged(pipe: BudgetPipeline, fake_openai: FakeOpenAIServer) -> None:
    """With no span around it, `invoke_agent weather` is the root: an invocation, judged as the request."""
    agent = _agent(fake_openai)
    assert str(agent(QUESTION)).strip() == ANSWER
    outcome = Outcome(pipe, root_name=f"invoke_agent {AGENT}")
    assert outcome.root.parent is None
    assert outcome.counts() == {"model_call": 2, "tool_calls": 1}
    assert outcome.violation_kinds() == []
    assert outcome.first_token_ms()[1] is not None
    outcome.assert_exported_once()


def test_creating_an_agent_is_start_up_work_that_writes_no_span(
    pipe: BudgetPipeline, fake_openai: FakeOpenAIServer
) -> None:
    """Building the model and the agent (its tool registry included) starts no span, so nothing is judged."""
    agent = _agent(fake_openai)
    assert agent.name == AGENT
    assert pipe.handed.started == []
    assert pipe.finished() == []
    assert pipe.processor.stats().active_traces == 0
