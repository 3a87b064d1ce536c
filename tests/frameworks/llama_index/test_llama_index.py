"""LlamaIndex, offline on MockLLM and MockEmbedding: OpenInference's and OpenLLMetry's instrumentations.

The index is built before the request (its spans are background work). One request retrieves
the best node (one retrieval: the query embedding is part of it) and answers with one
completion; the streamed query does the same; a FunctionTool call is one tool call.

OpenInference nests spans of one call: ``VectorIndexRetriever.retrieve`` > ``_retrieve`` >
``MockEmbedding.get_query_embedding`` > ``_get_query_embedding``, ``MockLLM.predict`` >
``MockLLM.complete``: one call each (one call is one call).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from llama_index.core import Document, Settings, VectorStoreIndex
from llama_index.core.embeddings.mock_embed_model import MockEmbedding
from llama_index.core.llms import ChatMessage
from llama_index.core.llms.mock import MockLLM
from llama_index.core.tools import FunctionTool
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor as OpenInferenceInstrumentor
from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor as OpenLLMetryInstrumentor

from ...unit.helpers import Pipeline
from ..stacks import Outcome, budget_pipeline, event_offset_ns


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


DOCUMENTS = ("Paris is in France.", "Berlin is in Germany.")


def build_index() -> VectorStoreIndex:
    Settings.llm = MockLLM(max_tokens=8)
    Settings.embed_model = MockEmbedding(embed_dim=8)
    return VectorStoreIndex.from_documents([Document(text=text) for text in DOCUMENTS])


@pytest.fixture
def index() -> VectorStoreIndex:
    """Two documents indexed with MockEmbedding (before any instrumentation); answers come from MockLLM."""
    return build_index()


def instrumented(
    instrumentor: OpenInferenceInstrumentor | OpenLLMetryInstrumentor, requests: str | None = None
) -> Iterator[Pipeline]:
    pipe = budget_pipeline(max_model_calls=1, requests=requests)
    instrumentor.instrument(tracer_provider=pipe.provider)
    try:
        yield pipe
    finally:
        instrumentor.uninstrument()


@pytest.fixture
def openinference() -> Iterator[Pipeline]:
    """A budget pipeline with OpenInference's LlamaIndex instrumentation on."""
    yield from instrumented(OpenInferenceInstrumentor())


@pytest.fixture
def openllmetry() -> Iterator[Pipeline]:
    """A budget pipeline with OpenLLMetry's LlamaIndex instrumentation on."""
    yield from instrumented(OpenLLMetryInstrumentor())


def query(pipe: Pipeline, index: VectorStoreIndex, *, stream: bool) -> Outcome:
    engine = index.as_query_engine(similarity_top_k=1, streaming=stream)
    with pipe.tracer.start_as_current_span("request"):
        response = engine.query("Where is Paris?")
        text = "".join(response.response_gen) if stream else str(response)  # type: ignore[union-attr]
        FunctionTool.from_defaults(weather).call(city="Paris")
    assert text  # MockLLM echoes the prompt
    return Outcome(pipe)


OPENINFERENCE_RETRIEVAL = Counter(
    {
        "VectorIndexRetriever.retrieve": 1,
        "VectorIndexRetriever._retrieve": 1,
        "MockEmbedding.get_query_embedding": 1,
        "MockEmbedding._get_query_embedding": 1,
    }
)
OPENINFERENCE_MODEL = {
    False: Counter({"MockLLM.predict": 1, "MockLLM.complete": 1}),
    True: Counter({"MockLLM.stream": 1, "MockLLM.stream_complete": 1}),
}


@pytest.mark.parametrize("stream", [False, True], ids=["query", "streamed"])
def test_openinference_spans_land_in_their_stages(
    index: VectorStoreIndex, openinference: Pipeline, stream: bool
) -> None:
    """Retriever and embedding spans are retrieval, MockLLM spans model_call, FunctionTool.call tool_calls."""
    outcome = query(openinference, index, stream=stream)
    assert outcome.stage_names() == {
        "retrieval": OPENINFERENCE_RETRIEVAL,
        "model_call": OPENINFERENCE_MODEL[stream],
        "tool_calls": Counter({"FunctionTool.call": 1}),
    }
    engine = [s for s in outcome.spans if s.name.startswith("RetrieverQueryEngine")]
    assert engine
    assert all("latency_budget.stage" not in (s.attributes or {}) for s in engine)  # CHAIN
    outcome.assert_all_calls_in_the_request()
    outcome.assert_exported_once()


@pytest.mark.parametrize("stream", [False, True], ids=["query", "streamed"])
def test_openinference_counts_are_the_real_calls(
    index: VectorStoreIndex, openinference: Pipeline, stream: bool
) -> None:
    """One retrieval, one completion, one tool call; max_calls 1 is not broken and no hint is invented."""
    outcome = query(openinference, index, stream=stream)
    assert outcome.counts() == {"retrieval": 1, "model_call": 1, "tool_calls": 1}
    assert outcome.violation_kinds() == []
    assert outcome.hints() == []


def test_openinference_streamed_first_token_is_the_first_token_stream_event(
    index: VectorStoreIndex, openinference: Pipeline
) -> None:
    """The streamed completion's `First Token Stream Event` is the request's first token."""
    outcome = query(openinference, index, stream=True)
    [inner] = [s for s in outcome.in_stage("model_call") if s.name == "MockLLM.stream_complete"]
    [outer] = [s for s in outcome.in_stage("model_call") if s.name == "MockLLM.stream"]
    offset = event_offset_ns(inner, "First Token Stream Event")
    assert offset is not None
    stage_ms, request_ms = outcome.first_token_ms()
    instant = (inner.start_time or 0) + offset
    assert request_ms == pytest.approx((instant - (outcome.root.start_time or 0)) / 1e6, abs=1e-3)
    # From the span that records it, or from the outermost span of the call: never more, never less.
    assert stage_ms is not None
    assert offset / 1e6 - 1e-3 <= stage_ms <= (instant - (outer.start_time or 0)) / 1e6 + 1e-3


def test_openinference_query_that_is_not_streamed_has_no_first_token(
    index: VectorStoreIndex, openinference: Pipeline
) -> None:
    """A completion that is not streamed records no first token, and none is reported."""
    assert query(openinference, index, stream=False).first_token_ms() == (None, None)


def test_openinference_indexing_outside_a_request_is_traces_of_its_own(openinference: Pipeline) -> None:
    """Building an index with no request around it makes local roots of its own: splitting and embedding."""
    build_index()
    outcome_spans = openinference.finished()
    roots = {s.name for s in outcome_spans if s.parent is None}
    assert {"SentenceSplitter.__call__", "MockEmbedding.get_text_embedding_batch"} <= roots
    embeddings = [s for s in outcome_spans if s.name == "MockEmbedding._get_text_embedding"]
    assert len(embeddings) == len(DOCUMENTS)
    ended = sorted(s.context.span_id for s in openinference.handed.ended if s.context)
    assert sorted(s.context.span_id for s in outcome_spans if s.context) == ended


def test_openinference_indexing_is_left_alone_by_default(openinference: Pipeline) -> None:
    """With no `requests` rule, indexing roots (no model call in them) are not judged; the query after is."""
    index = build_index()
    indexing = list(openinference.finished())
    roots = [s for s in indexing if s.parent is None]
    assert {"SentenceSplitter.__call__", "MockEmbedding.get_text_embedding_batch"} <= {s.name for s in roots}
    assert all(openinference.passed_untouched(s) for s in roots)
    assert not any(key.startswith("latency_budget.") for s in roots for key in s.attributes or {})
    outcome = query(openinference, index, stream=False)
    assert outcome.counts() == {"retrieval": 1, "model_call": 1, "tool_calls": 1}
    outcome.assert_exported_once()


def test_openinference_indexing_is_left_alone_under_a_requests_rule() -> None:
    """With `requests: {name: request}`, building an index judges and labels nothing; the query is judged as before."""
    for pipe in instrumented(OpenInferenceInstrumentor(), requests="{name: request}"):
        index = build_index()
        indexing = list(pipe.finished())
        assert {"SentenceSplitter.__call__", "MockEmbedding.get_text_embedding_batch"} <= {
            s.name for s in indexing if s.parent is None
        }
        assert all(pipe.passed_untouched(s) for s in indexing)
        assert not any(key.startswith("latency_budget.") for s in indexing for key in s.attributes or {})
        outcome = query(pipe, index, stream=False)
        assert outcome.counts() == {"retrieval": 1, "model_call": 1, "tool_calls": 1}
        outcome.assert_exported_once()


# Last in the module: OpenLLMetry 0.62.4's uninstrument leaves its LlamaIndex event handler in place,
# so spans made by the instrumentations after it become children of its (unexported) spans.
def test_openllmetry_chat_and_embedding_spans_land_in_their_stages(
    index: VectorStoreIndex, openllmetry: Pipeline
) -> None:
    """OpenLLMetry marks LLM chat spans `chat` and embedding spans `embeddings`: one model call, one retrieval.

    Its retriever, completion and tool spans are plain `task`/`workflow` spans (nothing says
    what they are), so they are in no stage: see the README's dialect table.
    """
    with openllmetry.tracer.start_as_current_span("request"):
        index.as_retriever(similarity_top_k=1).retrieve("Where is Paris?")
        reply = Settings.llm.chat([ChatMessage(role="user", content="Where is Paris?")])
        FunctionTool.from_defaults(weather).call(city="Paris")
    assert reply.message.content
    outcome = Outcome(openllmetry)
    assert outcome.stage_names() == {
        "retrieval": Counter({"MockEmbedding.task": 1}),
        "model_call": Counter({"MockLLM.workflow": 1}),
    }
    [chat] = outcome.in_stage("model_call")
    assert (chat.attributes or {})["traceloop.span.kind"] == "workflow"  # and gen_ai.operation.name=chat
    assert outcome.counts() == {"retrieval": 1, "model_call": 1}
    assert outcome.first_token_ms() == (None, None)  # OpenLLMetry records none for LlamaIndex
    assert outcome.violation_kinds() == []
    assert outcome.hints() == []
    outcome.assert_exported_once()
