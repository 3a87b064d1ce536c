"""The Langfuse SDK, offline: ``@observe(as_type=...)``, ``start_as_current_observation`` and ``langfuse.openai``.

Langfuse's spans carry no ``gen_ai.*`` keys: ``langfuse.observation.type`` says what each is.
The drop-in ``langfuse.openai`` client talks to the fake OpenAI server on loopback; a
streamed completion records ``langfuse.observation.completion_start_time``, a JSON-quoted
ISO-8601 instant. Langfuse's own export goes to an in-memory exporter, never to a host.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from langfuse import Langfuse, get_client, observe
from langfuse.openai import OpenAI
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ...instrumentation.fake_openai import MODEL, FakeOpenAIServer, serve
from ...unit.helpers import Pipeline
from ..stacks import Outcome, budget_pipeline

START = "langfuse.observation.completion_start_time"
MESSAGES: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]


@observe(as_type="embedding")
def embed(text: str) -> list[float]:
    return [0.1, 0.2]


@observe(as_type="retriever")
def retrieve(vector: list[float]) -> list[str]:
    return ["Paris is in France."]


@observe(as_type="tool")
def get_weather(city: str) -> str:
    return f"sunny in {city}"


@observe(as_type="guardrail")
def check(text: str) -> str:
    return text


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI server, on a free loopback port for the module."""
    with serve() as server:
        yield server


@pytest.fixture(scope="module")
def langfuse_pipe() -> Iterator[Pipeline]:
    """A budget pipeline whose provider Langfuse uses; Langfuse exports to memory.

    One per process: Langfuse keeps one client per public key, bound to the first provider.
    """
    pipe = budget_pipeline(max_model_calls=3)
    client = Langfuse(
        public_key="pk-lf-test",
        secret_key="sk-lf-test",
        base_url="http://127.0.0.1:9",  # never reached: spans go to span_exporter
        tracer_provider=pipe.provider,
        span_exporter=InMemorySpanExporter(),
    )
    try:
        yield pipe
    finally:
        client.flush()


@pytest.fixture
def pipe(langfuse_pipe: Pipeline) -> Pipeline:
    """The module's pipeline, with nothing exported yet."""
    langfuse_pipe.exporter.clear()
    langfuse_pipe.handed.ended.clear()
    return langfuse_pipe


def run_agent(pipe: Pipeline, fake_openai: FakeOpenAIServer) -> Outcome:
    client = OpenAI(base_url=fake_openai.base_url, api_key="dummy-key", max_retries=0)

    @observe(as_type="agent")
    def agent() -> str:
        found = retrieve(embed("Where is Paris?"))
        weather = get_weather("Paris")
        whole = client.chat.completions.create(model=MODEL, messages=MESSAGES)
        stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        with get_client().start_as_current_observation(as_type="generation", name="hand-made", model=MODEL) as gen:
            gen.update(completion_start_time=datetime.now(timezone.utc), output="ok")
        return check(f"{found} {weather} {whole.choices[0].message.content} {streamed}")

    with pipe.tracer.start_as_current_span("request"):
        assert "It is sunny in Paris." in agent()
    return Outcome(pipe)


def test_observation_types_land_in_their_stages(pipe: Pipeline, fake_openai: FakeOpenAIServer) -> None:
    """embedding and retriever are retrieval, generation model_call, tool tool_calls; agent and guardrail none."""
    outcome = run_agent(pipe, fake_openai)
    assert outcome.stage_names() == {
        "retrieval": Counter({"embed": 1, "retrieve": 1}),
        "model_call": Counter({"OpenAI-generation": 2, "hand-made": 1}),
        "tool_calls": Counter({"get_weather": 1}),
    }
    types = {s.name: (s.attributes or {}).get("langfuse.observation.type") for s in outcome.spans}
    assert (types["agent"], types["check"]) == ("agent", "guardrail")
    [agent] = [s for s in outcome.spans if s.name == "agent"]
    assert "latency_budget.stage" not in (agent.attributes or {})
    assert outcome.counts() == {"retrieval": 2, "model_call": 3, "tool_calls": 1}
    outcome.assert_all_calls_in_the_request()
    assert outcome.violation_kinds() == []
    outcome.assert_exported_once()


def _instant_ns(span: ReadableSpan) -> int | None:
    """The completion start Langfuse recorded on a span, read with the standard library, in ns."""
    value = (span.attributes or {}).get(START)
    if value is None:
        return None
    assert isinstance(value, str)
    assert value.startswith('"')  # JSON-encoded
    moment = datetime.fromisoformat(json.loads(value).replace("Z", "+00:00"))
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


def test_completion_start_time_is_the_first_token(pipe: Pipeline, fake_openai: FakeOpenAIServer) -> None:
    """The streamed and the hand-made generations' completion_start_time set the stage's and request's first token."""
    outcome = run_agent(pipe, fake_openai)
    instants = {s.context.span_id: _instant_ns(s) for s in outcome.in_stage("model_call") if s.context}
    recorded = {i: ns for i, ns in instants.items() if ns is not None}
    assert len(recorded) == 2  # the streamed call and the hand-made generation; not the whole completion
    spans = {s.context.span_id: s for s in outcome.in_stage("model_call") if s.context}
    offsets = {i: max(0, ns - (spans[i].start_time or 0)) for i, ns in recorded.items()}
    stage_ms, request_ms = outcome.first_token_ms()
    expected = outcome.expected_first_token_ms(offsets)
    # Langfuse's instant has microsecond precision; the span clock has nanoseconds.
    assert stage_ms == pytest.approx(expected[0], abs=2e-3)
    assert request_ms == pytest.approx(expected[1], abs=2e-3)
