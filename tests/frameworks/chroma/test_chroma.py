"""A retrieval-augmented agent on Chroma, held against what really ran.

chromadb's in-process client (``EphemeralClient``, the real client and its local engine;
the test gives the embeddings, so no embedding model is loaded) under OpenLLMetry's Chroma
instrumentation, whose spans carry only the database conventions (``db.system``
``chroma``...): no GenAI operation. The real ``openai`` client, under OpenLLMetry's OpenAI
instrumentation, streams from the fake OpenAI server. One request: a vector query (the
retrieval step), then the user's agent loop (tests/frameworks/openai_loop.py): three
streamed model calls, the first two of which ask for two parallel ``get_weather`` calls.

The yardstick is the truth, not the spans: the searches and tool runs the code recorded as
it did them, the requests the model server received, the instant it sent the answer's
first text chunk. Filling the collection is start-up work, outside any request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import chromadb
import openai
import pytest
from chromadb.config import Settings
from opentelemetry.instrumentation.chromadb import ChromaInstrumentor
from opentelemetry.instrumentation.openai import OpenAIInstrumentor

from latency_budget._core.call_facts import call_of

from ...instrumentation.fake_openai import MODEL, PROMPT_TOKENS, TOOL_NAME, FakeOpenAIServer, serve
from ...unit.helpers import Pipeline
from ..openai_loop import SEARCH, Agent
from ..stacks import Outcome, budget_pipeline
from ..truth import Runs, assert_first_token_is_the_first_text, overlapped

COLLECTION = "travel_notes"
TOP_K = 2
NOTES = {
    "paris": ("Paris is sunny in spring.", [1.0, 0.0, 0.0, 0.0]),
    "rome": ("Rome is warm in summer.", [0.0, 1.0, 0.0, 0.0]),
    "london": ("London is rainy all year.", [0.0, 0.0, 1.0, 0.0]),
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
    instrumentors = (ChromaInstrumentor(), OpenAIInstrumentor())
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=pipe.provider)
    yield pipe
    for instrumentor in reversed(instrumentors):
        instrumentor.uninstrument()


@pytest.fixture
def notes(pipe: Pipeline) -> Any:
    """The vector database, filled before any request (its add is start-up work)."""
    client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    collection = client.get_or_create_collection(COLLECTION, embedding_function=None)
    ids = list(NOTES)
    collection.upsert(ids=ids, documents=[NOTES[i][0] for i in ids], embeddings=[NOTES[i][1] for i in ids])
    return collection


def _searcher(notes: Any) -> Callable[[str], list[str]]:
    def search(question: str) -> list[str]:
        found = notes.query(query_embeddings=[QUESTION_VECTOR], n_results=TOP_K)
        return [str(text) for text in found["documents"][0]]

    return search


@pytest.fixture
def runs() -> Runs:
    """The searches and tool runs that really happened."""
    return Runs()


@pytest.fixture
def outcome(pipe: Pipeline, notes: Any, fake_openai: FakeOpenAIServer, runs: Runs) -> Outcome:
    """One request under a ``request`` span: a vector query, three streamed model calls, four tool runs."""
    model = openai.OpenAI(base_url=fake_openai.base_url, api_key="dummy-key", max_retries=0)
    agent = Agent(pipe.tracer, model, runs, parallel=PARALLEL_TOOLS, retrieve=_searcher(notes))
    fake_openai.requests.clear()
    fake_openai.served.clear()
    with pipe.tracer.start_as_current_span("request"):
        assert agent.answer(QUESTION) == "It is sunny in Paris."
    return Outcome(pipe)


def _queries(outcome: Outcome) -> list[Any]:
    return [s for s in outcome.request_spans if s.name == QUERY_SPAN]


QUERY_SPAN = "chroma.query"


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


def test_the_vector_query_is_retrieval(outcome: Outcome, runs: Runs) -> None:
    """The Chroma query (database conventions only) is the request's retrieval: one search ran, one is counted."""
    [query] = _queries(outcome)
    assert (query.attributes or {}).get("latency_budget.stage") == "retrieval"
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
    """The writes before the request are start-up work: in no stage, not judged as a request."""
    before = [s for s in outcome.spans if s not in outcome.request_spans]
    assert before
    for span in before:
        attributes = dict(span.attributes or {})
        assert "latency_budget.stage" not in attributes, span.name
        assert "latency_budget.verdict" not in attributes, span.name


def test_cached_and_reasoning_tokens_reach_the_levers(pipe: Pipeline, fake_openai: FakeOpenAIServer) -> None:
    """OpenLLMetry's OpenAI instrumentation records the server's cached and reasoning tokens; the levers read them."""
    fake_openai.cached_tokens, fake_openai.reasoning_tokens = 8, 3
    model = openai.OpenAI(base_url=fake_openai.base_url, api_key="dummy-key", max_retries=0)
    fake_openai.served.clear()
    try:
        with pipe.tracer.start_as_current_span("request"):
            model.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": QUESTION}])
    finally:
        fake_openai.cached_tokens = fake_openai.reasoning_tokens = None
    assert [served.stream for served in fake_openai.served] == [False]  # the truth: one call, its usage as set
    (chat,) = [s for s in pipe.finished() if (s.attributes or {}).get("latency_budget.stage") == "model_call"]
    assert chat.start_time is not None
    assert chat.end_time is not None
    call = call_of(1, "model_call", chat.start_time, chat.end_time, None, chat.attributes or {})
    assert (call.input_tokens, call.cached_input_tokens, call.reasoning_tokens) == (PROMPT_TOKENS, 8, 3)
