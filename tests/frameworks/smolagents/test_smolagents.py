"""smolagents' ToolCallingAgent under OpenInference, offline, held against what really happened.

The agent runs on ``OpenAIServerModel`` (the real openai client) against the fake OpenAI
server, streaming (``stream_outputs``). The server is scripted through three iterations:
two ``get_weather`` calls at once (the agent runs them on a thread pool), one more, then
the ReAct loop's stop signal, the ``final_answer`` tool. OpenInference writes
``ToolCallingAgent.run`` (AGENT) > ``Step N`` (CHAIN) > ``OpenAIServerModel.generate_stream``
(LLM) and one TOOL span per ``Tool.__call__``, ``FinalAnswerTool`` included.

Two ways: OpenInference's smolagents instrumentation alone (``smolagents``), and with
OpenInference's openai instrumentation on the client too (``smolagents+openai``), which nests
a ``ChatCompletion`` (LLM) span in each ``generate_stream`` span (two spans, one call) and
marks each stream's first chunk with its ``First Token Stream Event``: here the first chunk
of a tool-call-only stream.

The yardstick: three model calls (the server's log), three tool runs (the tool records its
own), no text chunk sent at all (every answer is tool calls, the last one ``final_answer``),
so no first token. ``final_answer`` is bookkeeping, not a tool call (issue 45, class 6); the
first chunk of a tool-call-only stream is no token the user sees (class 4).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from openinference.instrumentation.openai import OpenAIInstrumentor
from openinference.instrumentation.smolagents import SmolagentsInstrumentor
from smolagents import OpenAIServerModel, ToolCallingAgent, tool
from smolagents.memory import FinalAnswerStep

from ...instrumentation.fake_openai import MODEL, TOOL_NAME, FakeOpenAIServer, Turn, serve
from ...unit.helpers import Pipeline
from ..stacks import Outcome, budget_pipeline
from ..truth import Runs, Truth, assert_counts_are_the_truth, assert_first_token_is_the_truth

QUESTION = "What is the weather in Paris, London and Rome?"
ANSWER = "Sunny in Paris, London and Rome."
SCRIPT = (
    Turn(tool_calls=((TOOL_NAME, '{"city": "Paris"}'), (TOOL_NAME, '{"city": "London"}'))),
    Turn(tool_calls=((TOOL_NAME, '{"city": "Rome"}'),)),
    Turn(tool_calls=(("final_answer", json.dumps({"answer": ANSWER})),)),
)
RUNS = Runs()
WAYS = {
    "smolagents": (SmolagentsInstrumentor,),
    "smolagents+openai": (SmolagentsInstrumentor, OpenAIInstrumentor),
}


@tool
def get_weather(city: str) -> str:
    """The weather in a city.

    Args:
        city: The city's name.
    """
    RUNS.ran(TOOL_NAME)
    return f"sunny in {city}"


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI server, on a free loopback port for the module, a few ms to each first chunk."""
    with serve() as server:
        server.first_chunk_delay_s = 0.005
        yield server


@pytest.fixture(params=list(WAYS))
def pipe(request: pytest.FixtureRequest) -> Iterator[Pipeline]:
    """A budget pipeline with one way's OpenInference instrumentations on, off again afterwards."""
    pipe = budget_pipeline(max_model_calls=len(SCRIPT))
    instrumentors = [kind() for kind in WAYS[request.param]]
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=pipe.provider)
    yield pipe
    for instrumentor in reversed(instrumentors):
        instrumentor.uninstrument()


def _agent(server: FakeOpenAIServer) -> ToolCallingAgent:
    model = OpenAIServerModel(
        model_id=MODEL, api_base=server.base_url, api_key="dummy-key", client_kwargs={"max_retries": 0}
    )
    return ToolCallingAgent(tools=[get_weather], model=model, stream_outputs=True, max_steps=5, verbosity_level=0)


def _run(server: FakeOpenAIServer) -> str:
    """One streamed run of the scripted agent (server log and tool runs emptied first); its final answer."""
    agent = _agent(server)
    server.clear()
    RUNS.clear()
    server.script.extend(SCRIPT)
    steps = list(agent.run(QUESTION, stream=True))
    assert server.script == []  # every scripted turn was asked for
    final = steps[-1]
    assert isinstance(final, FinalAnswerStep)
    return str(final.output)


@pytest.fixture
def outcome(pipe: Pipeline, fake_openai: FakeOpenAIServer) -> tuple[Outcome, Truth]:
    """One run under a ``request`` span, and what really happened in it."""
    with pipe.tracer.start_as_current_span("request"):
        assert _run(fake_openai) == ANSWER
    return Outcome(pipe), Truth.of(fake_openai, RUNS)


def test_the_truth_is_three_streamed_model_calls_three_tool_runs_and_no_text(
    outcome: tuple[Outcome, Truth],
) -> None:
    """The yardstick itself: three streamed requests, two tools at once then one, final_answer, no text sent."""
    _, truth = outcome
    assert [s.stream for s in truth.served] == [True, True, True]
    assert [s.tool_calls for s in truth.served] == [(TOOL_NAME, TOOL_NAME), (TOOL_NAME,), ("final_answer",)]
    assert truth.tools_ran == (TOOL_NAME,) * 3
    assert [s.first_text_ns for s in truth.served] == [None, None, None]


def test_counts_are_the_real_calls(outcome: tuple[Outcome, Truth]) -> None:
    """model_call is the three requests the server received; tool_calls the three get_weather runs, not final_answer."""
    found, truth = outcome
    assert_counts_are_the_truth(found, truth)
    assert found.violation_kinds() == []


def test_no_first_token_when_no_text_was_sent(outcome: tuple[Outcome, Truth]) -> None:
    """Every answer was tool calls only (final_answer's included): the request has no first token."""
    found, truth = outcome
    assert_first_token_is_the_truth(found, truth)


def test_every_span_is_in_the_request_and_exported_once(outcome: tuple[Outcome, Truth]) -> None:
    """The parallel tools' spans (run on a thread pool) stay in the request's trace; nothing lost or doubled."""
    found, _ = outcome
    found.assert_all_calls_in_the_request()
    found.assert_exported_once()


def test_the_agent_run_as_the_root_is_judged_as_the_truth(pipe: Pipeline, fake_openai: FakeOpenAIServer) -> None:
    """With no span around it, ``ToolCallingAgent.run`` (an AGENT) is the request root, judged like one."""
    assert _run(fake_openai) == ANSWER
    found, truth = Outcome(pipe, root_name="ToolCallingAgent.run"), Truth.of(fake_openai, RUNS)
    assert found.root.parent is None
    assert_counts_are_the_truth(found, truth)
    assert_first_token_is_the_truth(found, truth)
    found.assert_exported_once()
