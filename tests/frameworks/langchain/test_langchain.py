"""LangChain, offline: a fake chat model, an in-memory vector store and a tool, under each instrumentation.

One request: the retriever finds a document, the chat model asks for ``get_weather``, the
tool runs, and a prompt | model | parser chain streams the answer. That is one retrieval,
two model calls and one tool call. Instrumented by OpenInference or by OpenLLMetry
(``opentelemetry-instrumentation-langchain``, the one traceloop-sdk uses).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.tools import tool
from langchain_core.vectorstores import InMemoryVectorStore
from openinference.instrumentation.langchain import LangChainInstrumentor as OpenInferenceInstrumentor
from opentelemetry.instrumentation.langchain import LangchainInstrumentor as OpenLLMetryInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from latency_budget._config.genai_defaults import DEFAULT_FIRST_TOKEN

from ..stacks import Outcome, budget_pipeline

ANSWER = "It is sunny in Paris."


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def _openinference(provider: TracerProvider) -> Callable[[], None]:
    instrumentor = OpenInferenceInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    return instrumentor.uninstrument


def _openllmetry(provider: TracerProvider) -> Callable[[], None]:
    instrumentor = OpenLLMetryInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    return instrumentor.uninstrument


# name -> (switch it on, the spans it makes: stage -> span names)
INSTRUMENTATIONS: dict[str, tuple[Callable[[TracerProvider], Callable[[], None]], dict[str, Counter[str]]]] = {
    "openinference": (
        _openinference,
        {
            "retrieval": Counter({"VectorStoreRetriever": 1}),
            "model_call": Counter({"GenericFakeChatModel": 2}),
            "tool_calls": Counter({"get_weather": 1}),
        },
    ),
    "openllmetry": (
        _openllmetry,
        {
            "retrieval": Counter({"vector_db_retrieve VectorStoreRetriever": 1}),
            "model_call": Counter({"GenericFakeChatModel.chat": 2}),
            "tool_calls": Counter({"execute_tool get_weather": 1}),
        },
    ),
}


@pytest.fixture(scope="module", params=list(INSTRUMENTATIONS))
def outcome(request: pytest.FixtureRequest) -> Iterator[tuple[str, Outcome]]:
    """The request run once under one instrumentation, shared by the module's tests.

    Once: OpenLLMetry 0.62.4 instrumented a second time in one process makes no chain spans.
    """
    instrument, _ = INSTRUMENTATIONS[request.param]
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))
    store.add_texts(["Paris is in France.", "Berlin is in Germany."])  # indexing: before instrumentation
    pipe = budget_pipeline(max_model_calls=2)
    undo = instrument(pipe.provider)
    try:
        model = GenericFakeChatModel(
            messages=iter(
                [
                    AIMessage(content="", tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": "c1"}]),
                    AIMessage(content=ANSWER),
                ]
            )
        )
        prompt = ChatPromptTemplate.from_messages([("system", "Context: {context}"), ("human", "{question}")])
        with pipe.tracer.start_as_current_span("request"):
            [doc] = store.as_retriever(search_kwargs={"k": 1}).invoke("Where is Paris?")
            asked = model.invoke("What is the weather in Paris?")
            results = [get_weather.invoke(call) for call in asked.tool_calls]
            chain = prompt | model | StrOutputParser()
            streamed = "".join(chain.stream({"context": doc.page_content, "question": str(results)}))
        assert streamed == ANSWER
        yield request.param, Outcome(pipe)
    finally:
        undo()


def test_retriever_chat_model_and_tool_spans_land_in_their_stages(outcome: tuple[str, Outcome]) -> None:
    """Each instrumentation's retriever, chat model and tool spans are in retrieval, model_call, tool_calls."""
    name, result = outcome
    assert result.stage_names() == INSTRUMENTATIONS[name][1]
    assert result.counts() == {"retrieval": 1, "model_call": 2, "tool_calls": 1}
    result.assert_all_calls_in_the_request()
    assert result.violation_kinds() == []
    assert result.hints() == []
    result.assert_exported_once()


def test_chains_workflows_and_prompts_are_in_no_stage(outcome: tuple[str, Outcome]) -> None:
    """RunnableSequence, ChatPromptTemplate and StrOutputParser spans exist and are in no stage."""
    _, result = outcome
    containers = [s for s in result.spans if any(n in s.name for n in ("RunnableSequence", "Prompt", "OutputParser"))]
    assert len(containers) == 3
    assert all("latency_budget.stage" not in (s.attributes or {}) for s in containers)


def test_neither_instrumentation_records_a_first_token(outcome: tuple[str, Outcome]) -> None:
    """A streamed chain records no first token under either instrumentation, so none is reported."""
    _, result = outcome
    attributes = {s.attribute for s in DEFAULT_FIRST_TOKEN if s.attribute}
    events = {s.event for s in DEFAULT_FIRST_TOKEN if s.event}
    spans: list[Any] = result.in_stage("model_call")
    assert not any(attributes & set(s.attributes or {}) for s in spans)
    assert not any(e.name in events for s in spans for e in s.events)
    assert result.first_token_ms() == (None, None)
