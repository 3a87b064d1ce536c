"""Logfire's ``instrument_openai`` on the real ``openai`` client, against the fake server on loopback.

A streamed call gives two spans with ``gen_ai.operation.name=chat``: the call's own span
and a zero-length log span (``logfire.span_type=log``, ``streaming response from ...``).
Only the first is a call.
"""

from __future__ import annotations

from collections.abc import Iterator

import logfire
import pytest
from openai import OpenAI

from latency_budget import load_budgets

from ...instrumentation.fake_openai import MODEL, FakeOpenAIServer, serve
from ...unit.helpers import Pipeline
from ..stacks import Outcome, budgets
from .test_logfire import logfire_pipeline

MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI server, on a free loopback port for the module."""
    with serve() as server:
        yield server


@pytest.fixture
def pipe() -> Iterator[Pipeline]:
    """Logfire with the budget processor (two model calls allowed)."""
    try:
        yield logfire_pipeline(max_model_calls=2)
    finally:
        logfire.force_flush()


def test_a_streamed_call_and_its_log_record_are_one_model_call(pipe: Pipeline, fake_openai: FakeOpenAIServer) -> None:
    """A whole and a streamed completion: two model calls, the streamed one's log span in no stage, each span once."""
    client = OpenAI(base_url=fake_openai.base_url, api_key="dummy-key", max_retries=0)
    logfire.instrument_openai(client)
    with logfire.span("request"):
        whole = client.chat.completions.create(model=MODEL, messages=MESSAGES)  # type: ignore[arg-type]
        stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)  # type: ignore[arg-type]
        streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert whole.choices[0].message.content == streamed == "It is sunny in Paris."
    outcome = Outcome(pipe)

    records = [s for s in outcome.request_spans if (s.attributes or {}).get("logfire.span_type") == "log"]
    assert len(records) == 1  # what Logfire writes: the streamed call's log span ...
    assert (records[0].attributes or {}).get("gen_ai.operation.name") == "chat"  # ... with the call's operation
    assert records[0].start_time == records[0].end_time
    assert "latency_budget.stage" not in (records[0].attributes or {})

    assert sum(outcome.stage_names()["model_call"].values()) == 2
    assert outcome.counts() == {"model_call": 2}
    assert outcome.violation_kinds() == []  # max_calls 2: no false violation
    outcome.assert_exported_once()


def test_the_log_record_alone_would_have_been_a_second_call(pipe: Pipeline, fake_openai: FakeOpenAIServer) -> None:
    """Without the veto the log span matches model_call: what the built-in rule's unless is for."""
    client = OpenAI(base_url=fake_openai.base_url, api_key="dummy-key", max_retries=0)
    logfire.instrument_openai(client)
    with logfire.span("request"):
        stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)  # type: ignore[arg-type]
        assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    outcome = Outcome(pipe)
    (record,) = [s for s in outcome.request_spans if (s.attributes or {}).get("logfire.span_type") == "log"]
    config = load_budgets(text=budgets(max_model_calls=2))
    attributes = dict(record.attributes or {})
    scope = record.instrumentation_scope.name if record.instrumentation_scope else ""
    assert config.classifier.classify(record.name, record.kind, scope, attributes) == -1
    del attributes["logfire.span_type"]
    stages = [s.name for s in config.default.stages]
    assert config.classifier.classify(record.name, record.kind, scope, attributes) == stages.index("model_call")
    assert outcome.counts() == {"model_call": 1}
