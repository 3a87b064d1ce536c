"""The LiteLLM Python SDK (an LLM proxy client), offline, held against what really happened.

An application loop on ``litellm.completion`` / ``litellm.acompletion`` (``openai/`` models,
``api_base`` the fake OpenAI server), streamed, through three iterations: two
``get_weather`` calls at once (run in parallel threads, each under the application's own
``execute_tool`` span in the GenAI conventions' words), one more, then the streamed answer.

Three instrumentations, one at a time:

- ``litellm-otel``: LiteLLM's own OpenTelemetry callback (``litellm.integrations.opentelemetry``)
  on the budget pipeline's provider. With a span of the application open, LiteLLM by default
  writes no span of its own but copies each call's attributes onto that span (the request
  root); ``USE_OTEL_LITELLM_REQUEST_SPAN=true``, its documented switch, makes a
  ``litellm_request`` child (with ``raw_gen_ai_request`` under it) per call, which the tests
  use. Its success callback runs after the stream is consumed (a thread for ``completion``, a
  task for ``acompletion``), so the span can end after the request's root; a ``completion``
  callback thread has no context, so the parent is handed over as LiteLLM documents it
  (``metadata={"litellm_parent_otel_span": span}``).
- ``openinference``: OpenInference's LiteLLM instrumentation (LLM spans).
- ``openllmetry``: OpenLLMetry's LiteLLM instrumentation.

The yardstick: three model calls (the server's log), three tool runs (the tool records its
own), the first text chunk the server sent. None of these instrumentations times a stream's
first chunk on its span, so the request may have no first token; one it has must be the truth.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import litellm
import pytest
from litellm.integrations.opentelemetry import OpenTelemetry
from openinference.instrumentation.litellm import LiteLLMInstrumentor as OpenInferenceLiteLLM
from opentelemetry import trace
from opentelemetry.instrumentation.litellm import LiteLLMInstrumentor as OpenLLMetryLiteLLM
from opentelemetry.sdk.trace import ReadableSpan

from ...instrumentation.fake_openai import ANSWER_WORDS, MODEL, TOOL_NAME, FakeOpenAIServer, Turn, serve
from ...unit.helpers import Pipeline
from ..stacks import Outcome, WatchedExporter, budget_pipeline
from ..truth import (
    Runs,
    Truth,
    assert_counts_are_the_truth,
    assert_first_token_is_the_truth,
)

QUESTION = "What is the weather in Paris, London and Rome?"
ANSWER = "".join(ANSWER_WORDS)
SCRIPT = (
    Turn(tool_calls=((TOOL_NAME, '{"city": "Paris"}'), (TOOL_NAME, '{"city": "London"}'))),
    Turn(tool_calls=((TOOL_NAME, '{"city": "Rome"}'),)),
    Turn(),
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
REQUEST_SPAN_SWITCH = "USE_OTEL_LITELLM_REQUEST_SPAN"
RUNS = Runs()


def _litellm_otel(pipe: Pipeline) -> Callable[[], None]:
    previous = os.environ.get(REQUEST_SPAN_SWITCH)
    os.environ[REQUEST_SPAN_SWITCH] = "true"
    litellm.callbacks = [OpenTelemetry(tracer_provider=pipe.provider)]

    def undo() -> None:
        # LiteLLM copies a callback into its success and failure lists on the first call and
        # keeps one per class there: only a reset of every list lets the next stack's own in.
        litellm.logging_callback_manager._reset_all_callbacks()
        if previous is None:
            os.environ.pop(REQUEST_SPAN_SWITCH, None)
        else:
            os.environ[REQUEST_SPAN_SWITCH] = previous

    return undo


Switch = Callable[[Pipeline], Callable[[], None]]


def _instrumentor(kind: type[OpenInferenceLiteLLM] | type[OpenLLMetryLiteLLM]) -> Switch:
    def instrument(pipe: Pipeline) -> Callable[[], None]:
        instrumentor = kind()
        instrumentor.instrument(tracer_provider=pipe.provider)
        return instrumentor.uninstrument

    return instrument


# stack -> (switch it on for a pipeline, giving the undo; the instrumentation scope of its model spans)
STACKS: dict[str, tuple[Switch, str]] = {
    "litellm-otel": (_litellm_otel, "litellm"),
    "openinference": (_instrumentor(OpenInferenceLiteLLM), "openinference.instrumentation.litellm"),
    "openllmetry": (_instrumentor(OpenLLMetryLiteLLM), "opentelemetry.instrumentation.litellm"),
}
# LiteLLM's own callback writes a raw_gen_ai_request span under each litellm_request: not a call of its own.
NOT_A_CALL = "raw_gen_ai_request"


def _run_tool(tracer: trace.Tracer, call: Any) -> dict[str, str]:
    """Run one tool call under the application's own span, as the GenAI conventions name it."""
    name = call.function.name
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, "gen_ai.tool.call.id": call.id}
    with tracer.start_as_current_span(f"execute_tool {name}", attributes=attributes):
        RUNS.ran(name)
        return {"role": "tool", "tool_call_id": call.id, "content": "sunny"}


def _arguments(server: FakeOpenAIServer, messages: list[dict[str, Any]], stack: str) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "model": f"openai/{MODEL}",
        "api_base": server.base_url,
        "api_key": "dummy-key",
        "messages": messages,
        "tools": TOOLS,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if stack == "litellm-otel":
        arguments["metadata"] = {"litellm_parent_otel_span": trace.get_current_span()}
    return arguments


def _answer(chunks: list[Any], messages: list[dict[str, Any]]) -> Any:
    """The streamed answer's message, rebuilt from its chunks as LiteLLM documents it."""
    built = litellm.stream_chunk_builder(chunks, messages=messages)
    assert built is not None
    return built.choices[0].message


def _sync_loop(pipe: Pipeline, server: FakeOpenAIServer, stack: str) -> str:
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    while True:
        chunks = list(litellm.completion(**_arguments(server, messages, stack)))
        message = _answer(chunks, messages)
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return str(message.content)
        with ThreadPoolExecutor(max_workers=len(message.tool_calls)) as pool:
            futures = [
                pool.submit(contextvars.copy_context().run, _run_tool, pipe.tracer, call) for call in message.tool_calls
            ]
            messages.extend(future.result() for future in futures)


async def _async_loop(pipe: Pipeline, server: FakeOpenAIServer, stack: str) -> str:
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    while True:
        chunks = [chunk async for chunk in await litellm.acompletion(**_arguments(server, messages, stack))]
        message = _answer(chunks, messages)
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return str(message.content)
        results = await asyncio.gather(*(asyncio.to_thread(_run_tool, pipe.tracer, c) for c in message.tool_calls))
        messages.extend(results)


def _request(pipe: Pipeline, server: FakeOpenAIServer, stack: str, mode: str, settle: Callable[[], bool]) -> str:
    """One request under a ``request`` span, ended as soon as the answer is in; then ``settle()`` must hold.

    ``acompletion``'s event loop keeps running while ``settle`` waits, as a server's would:
    LiteLLM's callbacks are tasks on it.
    """
    if mode == "completion":
        with pipe.tracer.start_as_current_span("request"):
            answer = _sync_loop(pipe, server, stack)
        assert settle(), [(s.name, s.instrumentation_scope) for s in pipe.finished()]
        return answer

    async def under_a_root() -> str:
        with pipe.tracer.start_as_current_span("request"):
            answer = await _async_loop(pipe, server, stack)
        assert await asyncio.to_thread(settle), [(s.name, s.instrumentation_scope) for s in pipe.finished()]
        return answer

    return asyncio.run(under_a_root())


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """The fake OpenAI server, on a free loopback port for the module, a few ms to each first chunk."""
    with serve() as server:
        server.first_chunk_delay_s = 0.005
        yield server


@pytest.fixture(scope="module", params=[(s, m) for s in STACKS for m in ("completion", "acompletion")], ids=str)
def ran(request: pytest.FixtureRequest, fake_openai: FakeOpenAIServer) -> Iterator[tuple[Outcome, Truth]]:
    """One streamed request under one instrumentation, once all its model spans are exported and flushed; the truth."""
    stack, mode = request.param
    switch_on, scope = STACKS[stack]
    pipe = budget_pipeline(max_model_calls=len(SCRIPT))
    undo = switch_on(pipe)
    try:
        exporter = pipe.exporter
        assert isinstance(exporter, WatchedExporter)

        def model_spans(spans: list[ReadableSpan]) -> list[ReadableSpan]:
            return [s for s in spans if s.instrumentation_scope and s.instrumentation_scope.name == scope]

        def all_in(spans: list[ReadableSpan]) -> bool:
            return len([s for s in model_spans(spans) if s.name != NOT_A_CALL]) >= len(SCRIPT)

        fake_openai.clear()
        RUNS.clear()
        fake_openai.script.extend(SCRIPT)
        assert _request(pipe, fake_openai, stack, mode, lambda: exporter.wait_until(all_in)) == ANSWER
        assert fake_openai.script == []
        # Every call's span is in: a root still held for late spans is forwarded now, as at a flush.
        assert pipe.provider.force_flush()
        assert [s.name for s in pipe.finished()].count("request") == 1
        yield Outcome(pipe), Truth.of(fake_openai, RUNS)
    finally:
        undo()


def test_the_truth_is_three_streamed_calls_three_tool_runs_and_text_last(ran: tuple[Outcome, Truth]) -> None:
    """The yardstick itself: three streamed requests (two tools at once, one, the answer), three tool runs."""
    _, truth = ran
    assert [s.stream for s in truth.served] == [True, True, True]
    assert [s.tool_calls for s in truth.served] == [(TOOL_NAME, TOOL_NAME), (TOOL_NAME,), ()]
    assert truth.tools_ran == (TOOL_NAME,) * 3
    assert [s.first_text_ns is None for s in truth.served] == [True, True, False]


def test_counts_are_the_real_calls(ran: tuple[Outcome, Truth]) -> None:
    """model_call on the root is the three requests the server received, tool_calls the three runs."""
    found, truth = ran
    assert_counts_are_the_truth(found, truth)


def test_no_false_calls_violation(ran: tuple[Outcome, Truth]) -> None:
    """max_calls is the real number of calls: no violation, and no call counted twice."""
    found, _ = ran
    assert found.violation_kinds() == []


def test_a_first_token_on_the_root_is_the_first_text_chunk(ran: tuple[Outcome, Truth]) -> None:
    """None of these spans times its first chunk: the root may have no first token, but never a wrong one."""
    found, truth = ran
    assert_first_token_is_the_truth(found, truth, recorded=False)


def test_every_call_is_in_the_request_and_exported_once(ran: tuple[Outcome, Truth]) -> None:
    """Every model span is in the request's trace (none starts a trace of its own); every span exported once."""
    found, _ = ran
    found.assert_all_calls_in_the_request()
    found.assert_exported_once()
