"""The Anthropic SDK's own spans, alone or beside a second instrumentation, or HTTP spans only, against the truth.

The ``anthropic`` client (2.x) writes a CLIENT span of its own for each API call
(``anthropic.messages.create``, with the GenAI conventions' ``gen_ai.operation.name``
``chat`` and the stop reason under ``anthropic.message.stop_reason``) unless told not to. A
common set-up turns on OpenLLMetry's or OpenInference's Anthropic instrumentation as well,
so one call can be described by two spans. Here the SDK's spans go to the test's pipeline
(its ``open_telemetry`` option names the provider), alone, with OpenLLMetry's or with
OpenInference's instrumentation on the same provider. A fourth set-up calls the same API
with ``requests`` instead of the SDK, traced by opentelemetry-instrumentation-requests only:
a model call that no GenAI instrumentation covers, seen as an HTTP client span (``POST``,
``url.full`` ending ``/v1/messages``).

One request: the user's agent loop streams three model calls from the fake Anthropic
server (tests/instrumentation/fake_anthropic.py, the model on loopback); the first two
stream only ``tool_use`` blocks (two ``get_weather`` calls each, run on two threads in an
``execute_tool`` span the loop writes by the GenAI conventions), the third streams the
answer's text. The yardstick is the truth: the requests the server received, the tool runs
the tool recorded, the instant the server sent the answer's first text chunk.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from typing import Any

import anthropic
import pytest
import requests
from openinference.instrumentation.anthropic import AnthropicInstrumentor as OpenInferenceAnthropic
from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor as OpenLLMetryAnthropic
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Tracer

from ...instrumentation.fake_anthropic import ANSWER_WORDS, MODEL, TOOL_NAME, FakeAnthropicServer, serve
from ...unit.helpers import Pipeline
from ..stacks import Outcome, budget_pipeline
from ..truth import Runs, assert_first_token_is_the_first_text, first_token_instant_ns, overlapped

QUESTION = "What is the weather in Paris and Rome?"
TOOL_ROUNDS = 2  # model calls that stream only tool_use blocks, before the answer
PARALLEL_TOOLS = 2  # tool_use blocks in each of them
MODEL_CALLS = TOOL_ROUNDS + 1
TOOLS = [
    {
        "name": TOOL_NAME,
        "description": "The weather in a city.",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]


def _none() -> tuple[Any, ...]:
    return ()


def _openllmetry() -> tuple[Any, ...]:
    return (OpenLLMetryAnthropic(),)


def _openinference() -> tuple[Any, ...]:
    return (OpenInferenceAnthropic(),)


def _requests() -> tuple[Any, ...]:
    return (RequestsInstrumentor(),)


# One streamed call's events, as dictionaries, for the conversation so far.
Events = Callable[[list[dict[str, Any]]], Iterator[dict[str, Any]]]

# name -> (the instrumentors on, whether the Anthropic SDK makes the calls, with its own spans;
# without it the loop posts to the Messages API with requests, traced by HTTP client spans only)
SETUPS: dict[str, tuple[Callable[[], tuple[Any, ...]], bool]] = {
    "sdk-only": (_none, True),
    "sdk+openllmetry": (_openllmetry, True),
    "sdk+openinference": (_openinference, True),
    "http-only": (_requests, False),
}


@pytest.fixture(scope="module")
def fake_anthropic() -> Iterator[FakeAnthropicServer]:
    """The model: two rounds of two parallel tool_use blocks, then the answer; a few ms to each first event."""
    with serve() as server:
        server.first_chunk_delay_s = 0.005
        server.tool_calls = PARALLEL_TOOLS
        server.tool_rounds = TOOL_ROUNDS
        yield server


def _instrumented(provider: TracerProvider, name: str) -> Callable[[], None]:
    instrumentors = SETUPS[name][0]()
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=provider)

    def undo() -> None:
        for instrumentor in reversed(instrumentors):
            instrumentor.uninstrument()

    return undo


class Agent:
    """The user's own agent loop: stream a model call, run the tools it asks for in parallel, until it answers."""

    def __init__(self, tracer: Tracer, events: Events, runs: Runs) -> None:
        self.tracer, self.events, self.runs = tracer, events, runs
        self.together = threading.Barrier(PARALLEL_TOOLS, timeout=30)  # the tool calls are in flight together

    def get_weather(self, city: str) -> str:
        with self.runs.run(TOOL_NAME, city):
            self.together.wait()
            return f"sunny in {city}"

    def _tool(self, block: dict[str, Any]) -> dict[str, Any]:
        with self.tracer.start_as_current_span(
            f"execute_tool {block['name']}",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": block["name"],
                "gen_ai.tool.call.id": block["id"],
            },
        ):
            result = self.get_weather(**block["input"])
        return {"type": "tool_result", "tool_use_id": block["id"], "content": result}

    def _stream(self, messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]], str | None]:
        """One streamed call: its text, its tool_use blocks (inputs parsed), its stop reason."""
        text: list[str] = []
        blocks: dict[int, dict[str, Any]] = {}
        partial: dict[int, str] = {}
        stop: str | None = None
        for event in self.events(messages):
            kind, delta = event["type"], event.get("delta") or {}
            if kind == "content_block_start" and event["content_block"]["type"] == "tool_use":
                block = event["content_block"]
                blocks[event["index"]] = {"type": "tool_use", "id": block["id"], "name": block["name"]}
                partial[event["index"]] = ""
            elif kind == "content_block_delta" and delta["type"] == "text_delta":
                text.append(delta["text"])
            elif kind == "content_block_delta" and delta["type"] == "input_json_delta":
                partial[event["index"]] += delta["partial_json"]
            elif kind == "message_delta":
                stop = delta.get("stop_reason")
        for index, block in blocks.items():
            block["input"] = json.loads(partial[index] or "{}")
        return "".join(text), [blocks[i] for i in sorted(blocks)], stop

    def answer(self, question: str) -> str:
        messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
        with ThreadPoolExecutor(PARALLEL_TOOLS) as pool:
            while True:
                text, calls, stop = self._stream(messages)
                if stop != "tool_use":
                    return text
                messages.append({"role": "assistant", "content": calls})
                # Each tool runs on a thread of its own, in the context of the loop (so under the request).
                futures = [pool.submit(copy_context().run, self._tool, call) for call in calls]
                messages.append({"role": "user", "content": [future.result() for future in futures]})


def _sdk_events(model: anthropic.Anthropic) -> Events:
    """The streamed events of one call made with the Anthropic SDK, as dictionaries."""

    def events(messages: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        stream = model.messages.create(
            model=MODEL,
            max_tokens=256,
            messages=messages,  # type: ignore[arg-type]
            tools=TOOLS,  # type: ignore[arg-type]
            stream=True,
        )
        for event in stream:
            yield event.model_dump()

    return events


def _http_events(base_url: str) -> Events:
    """The streamed events of one call posted to the Messages API with requests (server-sent events)."""
    session = requests.Session()
    headers = {"x-api-key": "dummy-key", "anthropic-version": "2023-06-01"}

    def events(messages: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        body = {"model": MODEL, "max_tokens": 256, "messages": messages, "tools": TOOLS, "stream": True}
        with session.post(f"{base_url}/v1/messages", json=body, headers=headers, stream=True, timeout=30) as answer:
            answer.raise_for_status()
            for line in answer.iter_lines():
                if line.startswith(b"data: "):
                    yield json.loads(line[len(b"data: ") :])

    return events


@pytest.fixture
def runs() -> Runs:
    """The tool runs that really happened."""
    return Runs()


@pytest.fixture(params=list(SETUPS))
def outcome(request: pytest.FixtureRequest, fake_anthropic: FakeAnthropicServer, runs: Runs) -> Iterator[Outcome]:
    """One request under a ``request`` span, the SDK's spans alone or beside a second instrumentation's."""
    pipe: Pipeline = budget_pipeline(max_model_calls=MODEL_CALLS)
    undo = _instrumented(pipe.provider, request.param)
    try:
        if SETUPS[request.param][1]:
            model = anthropic.Anthropic(
                base_url=fake_anthropic.base_url,
                api_key="dummy-key",
                max_retries=0,
                open_telemetry={"tracer_provider": pipe.provider},
            )
            events = _sdk_events(model)
        else:
            events = _http_events(fake_anthropic.base_url)
        fake_anthropic.log.clear()
        with pipe.tracer.start_as_current_span("request"):
            assert Agent(pipe.tracer, events, runs).answer(QUESTION) == "".join(ANSWER_WORDS)
        yield Outcome(pipe)
    finally:
        undo()


def test_what_really_ran(outcome: Outcome, fake_anthropic: FakeAnthropicServer, runs: Runs) -> None:
    """The truth the other tests hold the processor to: 3 streamed calls (2 with tool_use only), 2 rounds of 2 tools."""
    assert [r.body.get("stream") for r in fake_anthropic.log] == [True] * MODEL_CALLS
    assert [r.wants_tools for r in fake_anthropic.log] == [True] * TOOL_ROUNDS + [False]
    tools = runs.named(TOOL_NAME)
    assert len(tools) == TOOL_ROUNDS * PARALLEL_TOOLS
    for round_index in range(TOOL_ROUNDS):
        assert overlapped(tools[round_index * PARALLEL_TOOLS : (round_index + 1) * PARALLEL_TOOLS])
    sdk = [s for s in outcome.request_spans if s.name == "anthropic.messages.create"]
    http = [s for s in outcome.request_spans if s.name == "POST"]
    assert len(sdk or http) == len(fake_anthropic.log)  # each call wrote its span: the SDK's own, or requests'
    outcome.assert_exported_once()


def test_counts_are_the_real_calls(outcome: Outcome, fake_anthropic: FakeAnthropicServer, runs: Runs) -> None:
    """One model call per request the server received, whoever else described it; one tool call per run."""
    assert outcome.counts() == {"model_call": len(fake_anthropic.log), "tool_calls": len(runs.named(TOOL_NAME))}


def test_max_calls_at_the_real_number_is_not_violated(outcome: Outcome) -> None:
    """`max_calls` is the real number of model calls: two spans of one call are no extra call to flag."""
    assert outcome.violation_kinds() == []


def test_the_first_token_is_the_answers_first_text_chunk(
    outcome: Outcome, fake_anthropic: FakeAnthropicServer, request: pytest.FixtureRequest
) -> None:
    """The request's first token is the answer's first text, not a planning call's tool_use chunk before it.

    HTTP client spans end with the response's headers and record no chunk: there, no first
    token is right, and any first token must still not come before the first text.
    """
    [first_text] = [r.first_text_ns for r in fake_anthropic.log if r.first_text_ns is not None]
    if not SETUPS[request.node.callspec.params["outcome"]][1] and first_token_instant_ns(outcome) is None:
        return
    assert_first_token_is_the_first_text(outcome, first_text)
