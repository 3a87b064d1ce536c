"""Haystack's own OpenTelemetry tracer, offline: a real pipeline, the real openai client against the fake server.

Haystack writes each component run as a ``haystack.component.run`` span whose only telling
key is ``haystack.component.type`` (the component's class), set after the span starts, and
the whole run as ``haystack.pipeline.run``. The dialect table's Haystack row (read from its
source) is checked here for real: the retriever is retrieval, the chat generator model_call,
the prompt builder and the pipeline no stage; an indexing pipeline is start-up work.
"""

from __future__ import annotations

import os

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # no product telemetry from the tests

from collections import Counter
from collections.abc import Iterator

import pytest
from haystack import Document, Pipeline, tracing
from haystack.components.builders import ChatPromptBuilder
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
from haystack.components.writers import DocumentWriter
from haystack.dataclasses import ChatMessage
from haystack.document_stores.in_memory import InMemoryDocumentStore
from haystack.utils import Secret
from haystack_integrations.tracing.opentelemetry import OpenTelemetryTracer

from ...instrumentation.fake_openai import MODEL, FakeOpenAIServer, serve
from ...unit.helpers import Pipeline as BudgetPipeline
from ..stacks import Outcome, budget_pipeline

DOCUMENTS = ("Paris is in France.", "Berlin is in Germany.")
TEMPLATE = [ChatMessage.from_user("{% for d in documents %}{{ d.content }} {% endfor %}Question: {{ question }}")]


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI server, on a free loopback port for the module."""
    with serve() as server:
        yield server


@pytest.fixture
def pipe() -> Iterator[BudgetPipeline]:
    """A budget pipeline with Haystack's OpenTelemetry tracer writing to it."""
    pipe = budget_pipeline(max_model_calls=1)
    tracing.enable_tracing(OpenTelemetryTracer(pipe.provider.get_tracer("haystack")))
    try:
        yield pipe
    finally:
        tracing.disable_tracing()


def _store() -> InMemoryDocumentStore:
    store = InMemoryDocumentStore()
    store.write_documents([Document(content=text) for text in DOCUMENTS])
    return store


def _rag(store: InMemoryDocumentStore, server: FakeOpenAIServer) -> Pipeline:
    rag = Pipeline()
    rag.add_component("retriever", InMemoryBM25Retriever(store, top_k=1))
    rag.add_component("prompt", ChatPromptBuilder(template=TEMPLATE, required_variables=["question"]))
    rag.add_component(
        "llm", OpenAIChatGenerator(api_key=Secret.from_token("sk-test"), model=MODEL, api_base_url=server.base_url)
    )
    rag.connect("retriever.documents", "prompt.documents")
    rag.connect("prompt.prompt", "llm.messages")
    return rag


def _ask(rag: Pipeline) -> str:
    question = "Where is Paris?"
    result = rag.run({"retriever": {"query": question}, "prompt": {"question": question}})
    [reply] = result["llm"]["replies"]
    return str(reply.text)


def test_components_land_in_their_stages_by_type(pipe: BudgetPipeline, fake_openai: FakeOpenAIServer) -> None:
    """The BM25 retriever is retrieval, OpenAIChatGenerator model_call; the prompt builder and pipeline no stage."""
    rag = _rag(_store(), fake_openai)
    with pipe.tracer.start_as_current_span("request"):
        assert _ask(rag)
    outcome = Outcome(pipe)
    assert outcome.stage_names() == {
        "retrieval": Counter({"haystack.component.run": 1}),
        "model_call": Counter({"haystack.component.run": 1}),
    }
    types = {
        str((s.attributes or {}).get("haystack.component.type")): (s.attributes or {}).get("latency_budget.stage")
        for s in outcome.request_spans
        if s.name == "haystack.component.run"
    }
    assert types == {
        "InMemoryBM25Retriever": "retrieval",
        "ChatPromptBuilder": None,
        "OpenAIChatGenerator": "model_call",
    }
    assert outcome.counts() == {"retrieval": 1, "model_call": 1}
    assert outcome.violation_kinds() == []
    outcome.assert_exported_once()


def test_the_pipeline_run_as_the_root_is_judged_for_its_model_call(
    pipe: BudgetPipeline, fake_openai: FakeOpenAIServer
) -> None:
    """With no span around it, `haystack.pipeline.run` is the root: it contains a model call, so it is a request."""
    rag = _rag(_store(), fake_openai)
    assert _ask(rag)
    outcome = Outcome(pipe, root_name="haystack.pipeline.run")
    assert outcome.counts() == {"retrieval": 1, "model_call": 1}
    outcome.assert_exported_once()


def test_an_indexing_pipeline_is_start_up_work(pipe: BudgetPipeline) -> None:
    """An indexing pipeline (a document writer, no model call) is left alone by the default requests rule."""
    store = InMemoryDocumentStore()
    indexing = Pipeline()
    indexing.add_component("writer", DocumentWriter(store))
    indexing.run({"writer": {"documents": [Document(content=text) for text in DOCUMENTS]}})
    assert store.count_documents() == len(DOCUMENTS)
    [root] = [s for s in pipe.finished() if s.parent is None]
    assert root.name == "haystack.pipeline.run"
    assert pipe.passed_untouched(root)
    assert not any(key.startswith("latency_budget.") for key in root.attributes or {})
