"""CrewAI under OpenInference's CrewAI instrumentation alone, offline, held against what really happened.

One crew, one agent with a ``get_weather`` tool, one task, on CrewAI's own OpenAI client
(``LLM("openai/...", base_url=..., stream=True)``, its native ``OpenAICompletion``) against the
fake OpenAI server, through three iterations: two ``get_weather`` calls at once, one more, then
the streamed answer. No model-call instrumentation is on.

Three ways OpenInference traces it:

- ``wrappers`` (its default): ``Crew_<id>.kickoff`` (CHAIN) > ``<role>._execute_core`` (AGENT)
  > ``get_weather.run`` (TOOL). No span for any model call: the request root holds an agent
  and tool spans, and the three model calls are invisible (issue 45, class 5).
- ``event-listener`` (``use_event_listener=True``): ``crew.kickoff`` (CHAIN) > ``<role>.<task>.execute``
  (AGENT) > ``<model>.llm_call`` (LLM) and ``get_weather.run`` (TOOL), from CrewAI's event bus.
- ``wrappers+openai``: the wrappers, and OpenInference's openai instrumentation on CrewAI's
  client: a ``ChatCompletion`` (LLM) span per call, whose ``First Token Stream Event`` marks
  its stream's first chunk (tool calls only, in the two planning calls).

The yardstick: three model calls (the server's log), three tool runs (the tool records its
own), the first text chunk the server sent. Where no span times a stream's first chunk, the
request may have no first token; one it has must be the truth. Where no span shows the model
calls, the root may leave model_call out, but a count it writes must be the real one.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from crewai import LLM, Agent, Crew, Task
from crewai.tools import tool
from openinference.instrumentation.crewai import CrewAIInstrumentor
from openinference.instrumentation.openai import OpenAIInstrumentor

from ...instrumentation.fake_openai import MODEL, TOOL_NAME, FakeOpenAIServer, Turn, serve
from ..stacks import Outcome, budget_pipeline
from ..truth import Runs, Truth, assert_counts_are_the_truth, assert_first_token_is_the_truth

QUESTION = "What is the weather in Paris, London and Rome?"
ANSWER = "Sunny in Paris, London and Rome."
SCRIPT = (
    Turn(tool_calls=((TOOL_NAME, '{"city": "Paris"}'), (TOOL_NAME, '{"city": "London"}'))),
    Turn(tool_calls=((TOOL_NAME, '{"city": "Rome"}'),)),
    Turn(text=ANSWER),
)
RUNS = Runs()
# way -> (OpenInference's event listener instead of its wrappers, its openai instrumentation too)
WAYS = {"wrappers": (False, False), "event-listener": (True, False), "wrappers+openai": (False, True)}


@tool(TOOL_NAME)
def get_weather(city: str) -> str:
    """The weather in a city."""
    RUNS.ran(TOOL_NAME)
    return f"sunny in {city}"


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI server, on a free loopback port for the module, a few ms to each first chunk."""
    with serve() as server:
        server.first_chunk_delay_s = 0.005
        yield server


def _crew(server: FakeOpenAIServer) -> Crew:
    llm = LLM(model=f"openai/{MODEL}", base_url=server.base_url, api_key="dummy-key", stream=True)
    agent = Agent(role="forecaster", goal="Tell the weather", backstory="A forecaster", tools=[get_weather], llm=llm)
    task = Task(description=QUESTION, expected_output="The weather in each city", agent=agent)
    return Crew(agents=[agent], tasks=[task])


@pytest.fixture(scope="module", params=list(WAYS))
def ran(request: pytest.FixtureRequest, fake_openai: FakeOpenAIServer) -> Iterator[tuple[Outcome, Truth, str]]:
    """One crew run under a ``request`` span, one way of tracing it; the truth; the way."""
    way = request.param
    listener, with_openai = WAYS[way]
    pipe = budget_pipeline(max_model_calls=len(SCRIPT))
    crewai = CrewAIInstrumentor()
    crewai.instrument(tracer_provider=pipe.provider, use_event_listener=listener)
    client = OpenAIInstrumentor()
    if with_openai:
        client.instrument(tracer_provider=pipe.provider)
    try:
        crew = _crew(fake_openai)
        fake_openai.clear()
        RUNS.clear()
        fake_openai.script.extend(SCRIPT)
        with pipe.tracer.start_as_current_span("request"):
            assert str(crew.kickoff()).strip() == ANSWER
        assert fake_openai.script == []
        yield Outcome(pipe), Truth.of(fake_openai, RUNS), way
    finally:
        if with_openai:
            client.uninstrument()
        crewai.uninstrument()


def test_the_truth_is_three_streamed_calls_three_tool_runs_and_text_last(ran: tuple[Outcome, Truth, str]) -> None:
    """The yardstick itself: three streamed requests (two tools at once, one, the answer), three tool runs."""
    _, truth, _ = ran
    assert [s.stream for s in truth.served] == [True, True, True]
    assert [s.tool_calls for s in truth.served] == [(TOOL_NAME, TOOL_NAME), (TOOL_NAME,), ()]
    assert truth.tools_ran == (TOOL_NAME,) * 3
    assert [s.first_text_ns is None for s in truth.served] == [True, True, False]


def test_the_request_is_judged(ran: tuple[Outcome, Truth, str]) -> None:
    """A root holding an agent and tool spans is a request: it gets a verdict, whether or not model spans show."""
    found, _, _ = ran
    assert "latency_budget.verdict" in found.root_attributes, sorted(found.root_attributes)


def test_counts_are_the_real_calls(ran: tuple[Outcome, Truth, str]) -> None:
    """tool_calls is the three runs; model_call the three requests the server saw (absent when no span shows them)."""
    found, truth, way = ran
    if way != "wrappers":  # the others show every model call
        assert_counts_are_the_truth(found, truth)
        return
    counts = found.counts()
    assert counts.get("tool_calls") == truth.counts["tool_calls"], counts
    assert counts.get("model_call") in (None, truth.counts["model_call"]), counts


def test_no_false_violation(ran: tuple[Outcome, Truth, str]) -> None:
    """max_calls is the real number of model calls: no violation of any kind."""
    found, _, _ = ran
    assert found.violation_kinds() == []


def test_the_first_token_on_the_root_is_the_first_text_chunk(ran: tuple[Outcome, Truth, str]) -> None:
    """The first token is the answer's first text chunk, not a planning call's tool-call chunk; written when timed."""
    found, truth, way = ran
    assert_first_token_is_the_truth(found, truth, recorded=way == "wrappers+openai")


def test_every_call_is_in_the_request_and_exported_once(ran: tuple[Outcome, Truth, str]) -> None:
    """Every staged span is in the request's trace (the parallel tools' threads included); exported once."""
    found, _, _ = ran
    found.assert_all_calls_in_the_request()
    found.assert_exported_once()
