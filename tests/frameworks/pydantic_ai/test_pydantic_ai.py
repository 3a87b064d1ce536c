"""pydantic-ai, offline on its FunctionModel: its own instrumentation, and with OpenInference's span processor.

An agent run asks for the ``weather`` tool, runs it, and answers: two model calls and one tool
call under ``invoke_agent``, which is in no stage. Streamed runs record time to first token as
``gen_ai.client.operation.time_to_first_chunk`` (seconds) on each chat span.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator

import pytest
from openinference.instrumentation.pydantic_ai import OpenInferenceSpanProcessor
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.trace import SpanKind
from pydantic_ai import Agent, Embedder
from pydantic_ai.embeddings import TestEmbeddingModel
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

from ..stacks import Outcome, budget_pipeline

TTFT = "gen_ai.client.operation.time_to_first_chunk"
ANSWER = "It is sunny in Paris."


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """First turn: call the tool. Second turn (the tool's result is in): answer."""
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("weather", {"city": "Paris"})])
    return ModelResponse(parts=[TextPart(ANSWER)])


async def stream_answer(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    """The same turns, streamed chunk by chunk."""
    if len(messages) == 1:
        yield {0: DeltaToolCall(name="weather", json_args='{"city": "Paris"}')}
        return
    for word in ("It ", "is ", "sunny ", "in ", "Paris."):
        yield word


MODEL_NAME = "chat function:answer:stream_answer"


# name -> the stack's own processors, ahead of the exporting one (OpenInference's adds its keys at the end).
INSTRUMENTATIONS: dict[str, Callable[[], list[SpanProcessor]]] = {
    "pydantic-ai": list,
    "pydantic-ai+openinference": lambda: [OpenInferenceSpanProcessor()],
}


@pytest.fixture(params=list(INSTRUMENTATIONS))
def run(request: pytest.FixtureRequest) -> Iterator[Callable[[bool], Outcome]]:
    """Run the agent once under a ``request`` span (streamed or not) and return what was exported."""

    def go(stream: bool) -> Outcome:
        pipe = budget_pipeline(max_model_calls=2, before=INSTRUMENTATIONS[request.param]())
        agent = Agent(FunctionModel(answer, stream_function=stream_answer), tools=[weather])
        agent.instrument = InstrumentationSettings(tracer_provider=pipe.provider)

        async def streamed() -> str:
            async with agent.run_stream("What is the weather in Paris?") as result:
                return "".join([chunk async for chunk in result.stream_text(delta=True)])

        with pipe.tracer.start_as_current_span("request"):
            output = asyncio.run(streamed()) if stream else agent.run_sync("What is the weather in Paris?").output
        assert output == ANSWER
        return Outcome(pipe)

    return go


@pytest.mark.parametrize("stream", [False, True], ids=["run", "streamed"])
def test_an_agent_run_is_two_model_calls_and_one_tool_call(run: Callable[[bool], Outcome], stream: bool) -> None:
    """chat spans are model_call, execute_tool is tool_calls, invoke_agent is in no stage; counts 2 and 1."""
    outcome = run(stream)
    assert outcome.stage_names() == {
        "model_call": Counter({MODEL_NAME: 2}),
        "tool_calls": Counter({"execute_tool weather": 1}),
    }
    [agent] = [s for s in outcome.spans if s.name == "invoke_agent agent"]
    assert "latency_budget.stage" not in (agent.attributes or {})
    assert outcome.counts() == {"model_call": 2, "tool_calls": 1}
    assert outcome.violation_kinds() == []
    assert outcome.hints() == []
    outcome.assert_exported_once()


def test_a_streamed_run_reads_time_to_first_chunk(run: Callable[[bool], Outcome]) -> None:
    """model_call's worst first token comes from both chat spans; the request's from the one that answered in text.

    The first call streamed tool calls only (its gen_ai.output.messages holds one tool_call
    part): its first chunk is no text the user sees, so it is not the request's first token.
    """
    outcome = run(True)
    models = outcome.in_stage("model_call")
    seconds = {s.context.span_id: (s.attributes or {})[TTFT] for s in models if s.context is not None}
    assert len(seconds) == 2
    assert all(isinstance(v, float) and v >= 0 for v in seconds.values())
    planning, answering = (s for s in models if s.context is not None)
    assert '"tool_call"' in str((planning.attributes or {})["gen_ai.output.messages"])
    assert answering.context is not None
    worst, _ = outcome.expected_first_token_ms({i: round(v * 1e9) for i, v in seconds.items()})
    _, users = outcome.expected_first_token_ms(
        {answering.context.span_id: round(seconds[answering.context.span_id] * 1e9)}
    )
    assert outcome.first_token_ms() == pytest.approx((worst, users), abs=1e-3)


def test_a_run_that_is_not_streamed_has_no_first_token(run: Callable[[bool], Outcome]) -> None:
    """pydantic-ai records no first token for a whole response, and none is made up."""
    outcome = run(False)
    assert not any(TTFT in (s.attributes or {}) for s in outcome.spans)
    assert outcome.first_token_ms() == (None, None)


def test_embeddings_are_retrieval() -> None:
    """An instrumented Embedder's ``embeddings`` span is the request's one retrieval call.

    The request is a server span (a search endpoint): a plain root with embeddings only and no
    model call is start-up work (embedding a corpus) to the default `requests` rule.
    """
    pipe = budget_pipeline(max_model_calls=1)
    embedder = Embedder(TestEmbeddingModel(), instrument=InstrumentationSettings(tracer_provider=pipe.provider))
    with pipe.tracer.start_as_current_span("request", kind=SpanKind.SERVER):
        result = embedder.embed_query_sync("Where is Paris?")
    assert len(result.embeddings) == 1
    outcome = Outcome(pipe)
    [span] = outcome.in_stage("retrieval")
    assert (span.attributes or {})["gen_ai.operation.name"] == "embeddings"
    assert outcome.counts() == {"retrieval": 1}
    outcome.assert_exported_once()
