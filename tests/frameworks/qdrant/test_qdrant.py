"""A retrieval-augmented agent on a vector database, held against what really ran.

qdrant-client in local mode (``QdrantClient(":memory:")``, the real client and its local
engine) under OpenLLMetry's Qdrant instrumentation, whose spans carry only the database
conventions (``db.system`` ``qdrant``, ``db.vector.query.top_k``, the collection name): no
GenAI operation. The real ``openai`` client, under OpenLLMetry's OpenAI instrumentation,
streams from the fake OpenAI server. One request: a vector search (the retrieval step), then
an agent loop of three streamed model calls, the first two of which ask for two parallel
``get_weather`` calls; the user's loop runs the tools on threads, each in an
``execute_tool`` span it writes by the GenAI conventions.

The yardstick is the truth, not the spans: the searches and tool runs the code recorded as
it did them, the requests the model server received, the instant it sent the answer's
first text chunk. Filling the collection is start-up work, outside any request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import openai
import pytest
from opentelemetry.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.instrumentation.qdrant import QdrantInstrumentor
from qdrant_client import QdrantClient, models

from ...instrumentation.fake_openai import TOOL_NAME, FakeOpenAIServer, serve
from ...unit.helpers import Pipeline
from ..openai_loop import SEARCH, Agent
from ..stacks import Outcome, budget_pipeline
from ..truth import Runs, assert_first_token_is_the_first_text, overlapped

COLLECTION = "travel_notes"
TOP_K = 2
NOTES = {
    1: ("Paris is sunny in spring.", [1.0, 0.0, 0.0, 0.0]),
    2: ("Rome is warm in summer.", [0.0, 1.0, 0.0, 0.0]),
    3: ("London is rainy all year.", [0.0, 0.0, 1.0, 0.0]),
}
QUESTION = "What is the weather in Paris and London?"
QUESTION_VECTOR = [0.9, 0.1, 0.4, 0.0]
TOOL_ROUNDS = 2  # model calls that ask for tools before the answer
PARALLEL_TOOLS = 2  # tool calls each of them asks for at once
MODEL_CALLS = TOOL_ROUNDS + 1


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """The model: two rounds of two parallel tool calls, then the answer; a few ms to each first chunk."""
    with serve() as server:
        server.first_chunk_delay_s = 0.005
        server.tool_calls = PARALLEL_TOOLS
        server.tool_rounds = TOOL_ROUNDS
        yield server


@pytest.fixture
def pipe() -> Iterator[Pipeline]:
    """A budget pipeline with both OpenLLMetry instrumentations on, off again afterwards."""
    pipe = budget_pipeline(max_model_calls=MODEL_CALLS)
    instrumentors = (QdrantInstrumentor(), OpenAIInstrumentor())
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=pipe.provider)
    yield pipe
    for instrumentor in reversed(instrumentors):
        instrumentor.uninstrument()


@pytest.fixture
def notes(pipe: Pipeline) -> QdrantClient:
    """The vector database, filled before any request (its upsert is start-up work)."""
    client = QdrantClient(":memory:")
    client.create_collection(COLLECTION, vectors_config=models.VectorParams(size=4, distance=models.Distance.COSINE))
    points = [models.PointStruct(id=i, vector=v, payload={"text": t}) for i, (t, v) in NOTES.items()]
    client.upsert(COLLECTION, points=points)
    return client


def _searcher(notes: QdrantClient) -> Callable[[str], list[str]]:
    def search(question: str) -> list[str]:
        hits = notes.query_points(COLLECTION, query=QUESTION_VECTOR, limit=TOP_K).points
        return [str((hit.payload or {})["text"]) for hit in hits]

    return search


@pytest.fixture
def runs() -> Runs:
    """The searches and tool runs that really happened."""
    return Runs()


@pytest.fixture
def outcome(pipe: Pipeline, notes: QdrantClient, fake_openai: FakeOpenAIServer, runs: Runs) -> Outcome:
    """One request under a ``request`` span: a vector search, three streamed model calls, four tool runs."""
    model = openai.OpenAI(base_url=fake_openai.base_url, api_key="dummy-key", max_retries=0)
    agent = Agent(pipe.tracer, model, runs, parallel=PARALLEL_TOOLS, retrieve=_searcher(notes))
    fake_openai.requests.clear()
    fake_openai.served.clear()
    with pipe.tracer.start_as_current_span("request"):
        assert agent.answer(QUESTION) == "It is sunny in Paris."
    return Outcome(pipe)


def test_what_really_ran(outcome: Outcome, fake_openai: FakeOpenAIServer, runs: Runs) -> None:
    """The truth the other tests hold the processor to: 1 search, 3 streamed calls, 2 rounds of 2 parallel tools."""
    assert len(runs.named(SEARCH)) == 1
    assert [s.body.get("stream") for s in fake_openai.served] == [True] * MODEL_CALLS
    assert [s.first_text_ns is None for s in fake_openai.served] == [True] * TOOL_ROUNDS + [False]
    tools = runs.named(TOOL_NAME)
    assert len(tools) == TOOL_ROUNDS * PARALLEL_TOOLS
    for round_index in range(TOOL_ROUNDS):
        assert overlapped(tools[round_index * PARALLEL_TOOLS : (round_index + 1) * PARALLEL_TOOLS])
    outcome.assert_exported_once()


def test_the_vector_search_is_retrieval(outcome: Outcome, runs: Runs) -> None:
    """The Qdrant query (database conventions only) is the request's retrieval: one search ran, one is counted."""
    [search] = [s for s in outcome.request_spans if s.name == "qdrant.query_points"]
    assert (search.attributes or {}).get("latency_budget.stage") == "retrieval"
    assert outcome.counts().get("retrieval") == len(runs.named(SEARCH))


def test_counts_are_the_real_calls(outcome: Outcome, fake_openai: FakeOpenAIServer, runs: Runs) -> None:
    """Per stage, the request counts what really ran: the searches, the server's requests, the tool runs."""
    assert outcome.counts() == {
        "retrieval": len(runs.named(SEARCH)),
        "model_call": len(fake_openai.served),
        "tool_calls": len(runs.named(TOOL_NAME)),
    }
    assert outcome.violation_kinds() == []  # max_calls is the real number of model calls


def test_the_first_token_is_the_answers_first_text_chunk(outcome: Outcome, fake_openai: FakeOpenAIServer) -> None:
    """The request's first token is when the server sent the answer's first text, not a tool-call chunk before it."""
    [first_text] = [s.first_text_ns for s in fake_openai.served if s.first_text_ns is not None]
    assert_first_token_is_the_first_text(outcome, first_text)


def test_filling_the_collection_is_no_request_and_no_retrieval(outcome: Outcome) -> None:
    """The upsert before the request is start-up work: in no stage, not judged as a request."""
    [upsert] = [s for s in outcome.spans if s.name == "qdrant.upsert"]
    attributes = dict(upsert.attributes or {})
    assert upsert.parent is None
    assert "latency_budget.stage" not in attributes
    assert "latency_budget.verdict" not in attributes
