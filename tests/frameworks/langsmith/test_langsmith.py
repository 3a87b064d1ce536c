"""LangChain and LangGraph traced by LangSmith's own OpenTelemetry export, offline.

LangSmith is switched on as its documentation says (``LANGSMITH_TRACING``,
``LANGSMITH_OTEL_ENABLED``) and kept on this machine by ``LANGSMITH_OTEL_ONLY``: its client
then sends no run to LangSmith and writes each run as an OpenTelemetry span (scope
``langsmith``, the run type in ``langsmith.span.kind``). It writes them to the tracer
provider given as ``Client(otel_tracer_provider=...)``, or else to the global one when an SDK
provider is set; with neither it builds an OTLP provider of its own, to LangSmith's endpoint,
and makes it the global one. So the test's provider, with the budget processor, is set as the
global one before the first traced run.

LangSmith writes its spans from a background thread, in batches (after the runs), with the
runs' own start and end times. The request calls ``wait_for_all_tracers()`` before its span
ends, so the calls are in it when it is judged (set-up notes in the README).

One request, a LangGraph graph: a retriever node, an agent node (``prompt | model``) that asks
for ``get_weather``, LangGraph's ``ToolNode``, and the agent again, streamed. That is one
retrieval, two model calls and one tool call. LangChain records a streamed call's tokens as
events of its run; the export writes no events, so there is no first token to read.
"""

from __future__ import annotations

import os

# Before langsmith reads its settings (it caches them): trace, as OpenTelemetry spans only.
os.environ.update(LANGSMITH_TRACING="true", LANGSMITH_OTEL_ENABLED="true", LANGSMITH_OTEL_ONLY="true")

import socket
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, AnyMessage, HumanMessage, ToolMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.tools import tool
from langchain_core.tracers.context import tracing_v2_enabled
from langchain_core.tracers.langchain import wait_for_all_tracers
from langchain_core.vectorstores import InMemoryVectorStore
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langsmith import Client, traceable
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan

from latency_budget._config.genai_defaults import DEFAULT_FIRST_TOKEN

from ...unit.helpers import Pipeline
from ..stacks import Outcome, budget_pipeline

DOCUMENTS = ["Paris is in France.", "Berlin is in Germany."]
ANSWER = "It is sunny in Paris."


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]
    context: str


def _asks_for_weather() -> AIMessage:
    """A reply that only calls get_weather.

    Written as OpenAI-style ``additional_kwargs``: GenericFakeChatModel streams those (its
    stream drops ``tool_calls``), and langchain-core reads them back as the message's tool calls.
    """
    function = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    call = {"index": 0, "id": "c1", "type": "function", "function": function}
    return AIMessage(content="", additional_kwargs={"tool_calls": [call]})


@dataclass
class Run:
    """What the module's one run left: the pipeline, the start-up spans, the answer, the network attempts."""

    pipe: Pipeline
    startup: list[ReadableSpan]
    answer: str
    tool_results: list[str]
    network: list[str]

    @property
    def outcome(self) -> Outcome:
        return Outcome(self.pipe)


def _offline(patch: pytest.MonkeyPatch, attempts: list[str]) -> None:
    """Every connection and name look-up is refused and written down: no request may leave the machine."""

    def refuse(what: str) -> Any:
        def refused(*args: Any, **kwargs: Any) -> Any:
            attempts.append(f"{what}{args[1:] if what != 'getaddrinfo' else args[:2]}")
            raise OSError(f"the test is offline: {what}")

        return refused

    patch.setattr(socket.socket, "connect", refuse("connect"))
    patch.setattr(socket.socket, "connect_ex", refuse("connect_ex"))
    patch.setattr(socket, "getaddrinfo", refuse("getaddrinfo"))


def _graph(store: InMemoryVectorStore) -> Any:
    retriever = store.as_retriever(search_kwargs={"k": 1})
    model = GenericFakeChatModel(messages=iter([_asks_for_weather(), AIMessage(content=ANSWER)]))
    prompt = ChatPromptTemplate.from_messages([("system", "Context: {context}"), MessagesPlaceholder("messages")])

    def retrieve(state: State) -> dict[str, str]:
        [doc] = retriever.invoke(str(state["messages"][-1].content))
        return {"context": doc.page_content}

    def agent(state: State) -> dict[str, list[AnyMessage]]:
        return {"messages": [(prompt | model).invoke(dict(state))]}

    graph = StateGraph(State)
    graph.add_node("retrieve", retrieve)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([get_weather]))
    graph.add_edge(START, "retrieve")
    graph.add_edge("retrieve", "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


@pytest.fixture(scope="module")
def offline() -> Iterator[list[str]]:
    """The module's network attempts (each refused), to be found empty."""
    attempts: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        _offline(patch, attempts)
        yield attempts


@pytest.fixture(scope="module")
def run(offline: list[str]) -> Run:
    """Start-up, then the request, once for the module (LangSmith's global provider is set once a process)."""
    pipe = budget_pipeline(max_model_calls=2)
    trace.set_tracer_provider(pipe.provider)

    # Start-up: the corpus embedded into the store, in a traced step of the app's own.
    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=8))

    @traceable(name="build index")
    def build_index(texts: list[str]) -> list[str]:
        return store.add_texts(texts)

    assert len(build_index(DOCUMENTS)) == len(DOCUMENTS)
    wait_for_all_tracers()
    startup = pipe.finished()

    graph = _graph(store)
    answer: list[str] = []
    tool_results: list[str] = []
    with pipe.tracer.start_as_current_span("request"):
        question = {"messages": [HumanMessage("What is the weather in Paris?")], "context": ""}
        for message, meta in graph.stream(question, stream_mode="messages"):
            if isinstance(message, AIMessageChunk) and meta["langgraph_node"] == "agent":
                answer.append(str(message.content))
            elif isinstance(message, ToolMessage):
                tool_results.append(str(message.content))
        wait_for_all_tracers()  # LangSmith's spans are written before the request ends
    return Run(pipe, startup, "".join(answer), tool_results, offline)


def test_the_request_runs_offline(run: Run) -> None:
    """The graph answered, streamed, after one real tool call; nothing tried to reach the network."""
    assert run.answer == ANSWER
    assert run.tool_results == ["sunny in Paris"]
    assert run.network == []


def test_retriever_chat_model_and_tool_runs_land_in_their_stages(run: Run) -> None:
    """Runs of type retriever, llm and tool are retrieval, model_call and tool_calls; counts are the real calls."""
    result = run.outcome
    assert result.stage_names() == {
        "retrieval": Counter({"VectorStoreRetriever": 1}),
        "model_call": Counter({"GenericFakeChatModel": 2}),
        "tool_calls": Counter({"get_weather": 1}),
    }
    assert result.counts() == {"retrieval": 1, "model_call": 2, "tool_calls": 1}
    result.assert_all_calls_in_the_request()
    assert result.violation_kinds() == []
    assert result.hints() == []
    result.assert_exported_once()


def test_every_run_is_a_langsmith_span_staged_by_its_run_type(run: Run) -> None:
    """The graph, its nodes, chains and prompts are in no stage; a prompt run, written `chat`, is not a call."""
    result = run.outcome
    written = Counter(
        (
            s.name,
            s.instrumentation_scope.name if s.instrumentation_scope else None,
            (s.attributes or {}).get("langsmith.span.kind"),
            (s.attributes or {}).get("gen_ai.operation.name"),
            (s.attributes or {}).get("latency_budget.stage"),
        )
        for s in result.request_spans
        if s is not result.root
    )
    assert written == Counter(
        {
            ("LangGraph", "langsmith", "chain", "chain", None): 1,
            ("retrieve", "langsmith", "chain", "chain", None): 1,
            ("VectorStoreRetriever", "langsmith", "retriever", "embeddings", "retrieval"): 1,
            ("agent", "langsmith", "chain", "chain", None): 2,
            ("RunnableSequence", "langsmith", "chain", "chain", None): 2,
            ("ChatPromptTemplate", "langsmith", "prompt", "chat", None): 2,
            ("GenericFakeChatModel", "langsmith", "llm", "chat", "model_call"): 2,
            ("tools_condition", "langsmith", "chain", "chain", None): 2,
            ("tools", "langsmith", "chain", "chain", None): 1,
            ("get_weather", "langsmith", "tool", "execute_tool", "tool_calls"): 1,
        }
    )
    [graph] = [s for s in result.request_spans if s.name == "LangGraph"]
    assert graph.parent is not None
    assert result.root.context is not None
    assert graph.parent.span_id == result.root.context.span_id  # the graph's run is a child of the request


def test_streamed_calls_record_no_first_token(run: Run) -> None:
    """LangSmith's export writes no token events nor a first-token attribute, so none is reported."""
    result = run.outcome
    attributes = {s.attribute for s in DEFAULT_FIRST_TOKEN if s.attribute}
    events = {s.event for s in DEFAULT_FIRST_TOKEN if s.event}
    model_calls = result.in_stage("model_call")
    assert len(model_calls) == 2
    assert not any(attributes & set(s.attributes or {}) for s in model_calls)
    assert not any(e.name in events for s in model_calls for e in s.events)
    assert result.first_token_ms() == (None, None)


def test_start_up_indexing_is_left_alone(run: Run) -> None:
    """Embedding the corpus at start-up writes one root (the app's traced step); no model call, so not judged."""
    [root] = run.startup
    assert root.name == "build index"
    assert root.parent is None
    assert (root.attributes or {}).get("langsmith.span.kind") == "chain"
    assert run.pipe.passed_untouched(root)
    assert not any(key.startswith("latency_budget.") for key in root.attributes or {})


def test_a_client_given_a_tracer_provider_writes_to_it(run: Run) -> None:
    """`Client(otel_tracer_provider=...)` writes there, not to the global one; a parser is no stage; no token events."""
    global_spans = len(run.pipe.finished())
    pipe = budget_pipeline(max_model_calls=1)
    client = Client(tracing_mode="otel", otel_tracer_provider=pipe.provider)
    model = GenericFakeChatModel(messages=iter([AIMessage(content=ANSWER)]))
    runs: list[Any] = []  # what LangChain's tracers record of the model's run
    listened = model.with_listeners(on_end=runs.append)
    chain = ChatPromptTemplate.from_messages([("human", "{question}")]) | listened | StrOutputParser()
    with tracing_v2_enabled(client=client), pipe.tracer.start_as_current_span("request"):
        assert "".join(chain.stream({"question": "Weather?"})) == ANSWER
        client.flush()
    result = Outcome(pipe)
    assert result.stage_names() == {"model_call": Counter({"GenericFakeChatModel": 1})}
    # The run records each token as an event; the OpenTelemetry export writes none of them.
    [model_run] = runs
    assert [e["name"] for e in model_run.events].count("new_token") == len(ANSWER.split(" ")) * 2 - 1
    [model_span] = result.in_stage("model_call")
    assert model_span.events == ()
    assert result.first_token_ms() == (None, None)
    assert result.counts() == {"model_call": 1}
    kinds = {s.name: (s.attributes or {}).get("langsmith.span.kind") for s in result.request_spans}
    assert kinds == {
        "request": None,
        "RunnableSequence": "chain",
        "ChatPromptTemplate": "prompt",
        "GenericFakeChatModel": "llm",
        "StrOutputParser": "parser",
    }
    assert result.violation_kinds() == []
    result.assert_exported_once()
    assert len(run.pipe.finished()) == global_spans
    assert run.network == []
