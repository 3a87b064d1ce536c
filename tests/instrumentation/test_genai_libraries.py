"""The built-in GenAI defaults against the spans real instrumentations produce.

The real ``openai`` client, instrumented by OpenTelemetry's ``openai-v2`` or by
OpenInference (with and without its GenAI-semconv option), talks to the fake server on
loopback. The budget file has no ``stages:``: every stage comes from the built-in
matchers. Tool executions are recorded the way each ecosystem records them: the
OpenTelemetry GenAI utils' ``execute_tool`` invocation, OpenInference's ``tool``
decorator.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import openai
import pytest
from openinference.instrumentation import OITracer, TraceConfig
from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInferenceInstrumentor
from opentelemetry import trace
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as OpenAIV2Instrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.util.genai.handler import TelemetryHandler

from ..unit.helpers import Pipeline, pipeline
from .fake_openai import MODEL, PAIRED_MODEL, TOOL_NAME, FakeOpenAIServer

BUDGETS = "version: 1\ntotal_ms: 60000\n"
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
FIRST_TOKEN_NAMES = {"gen_ai.first_token", "First Token Stream Event", "gen_ai.content.completion.chunk"}
US_IN_MS = 0.001  # the package writes ms rounded to the microsecond

ToolRunner = Callable[[str, str], str]  # (call id, JSON arguments) -> result, recorded as a span


@dataclass(frozen=True)
class Library:
    """One instrumentation as a test sees it: how to switch it on, how its ecosystem traces tools."""

    name: str
    instrument: Callable[[TracerProvider], Callable[[], None]]  # returns the undo
    tool_runner: Callable[[TracerProvider], ToolRunner]
    first_token_event: str | None  # the event it records on a streamed completion, if any


def get_weather(city: str) -> str:
    return f"sunny in {city}"


def _openai_v2(provider: TracerProvider) -> Callable[[], None]:
    instrumentor = OpenAIV2Instrumentor()
    instrumentor.instrument(tracer_provider=provider)
    return instrumentor.uninstrument


def _genai_util_tool(provider: TracerProvider) -> ToolRunner:
    handler = TelemetryHandler(tracer_provider=provider)

    def run(call_id: str, arguments: str) -> str:
        with handler.tool(TOOL_NAME, tool_type="function") as invocation:
            invocation.tool_call_id = call_id
            return get_weather(**json.loads(arguments))

    return run


def _openinference(config: TraceConfig) -> Callable[[TracerProvider], Callable[[], None]]:
    def instrument(provider: TracerProvider) -> Callable[[], None]:
        instrumentor = OpenInferenceInstrumentor()
        instrumentor.instrument(tracer_provider=provider, config=config)
        return instrumentor.uninstrument

    return instrument


def _openinference_tool(config: TraceConfig) -> Callable[[TracerProvider], ToolRunner]:
    def runner(provider: TracerProvider) -> ToolRunner:
        tracer = OITracer(provider.get_tracer("agent"), config=config)
        tool = tracer.tool(name=TOOL_NAME)(get_weather)

        def run(call_id: str, arguments: str) -> str:
            result: str = tool(**json.loads(arguments))
            return result

        return run

    return runner


_SEMCONV = TraceConfig(enable_genai_semconv=True)
LIBRARIES = [
    Library("openai-v2", _openai_v2, _genai_util_tool, None),
    Library(
        "openinference",
        _openinference(TraceConfig()),
        _openinference_tool(TraceConfig()),
        "First Token Stream Event",
    ),
    Library(
        "openinference-genai-semconv",
        _openinference(_SEMCONV),
        _openinference_tool(_SEMCONV),
        "First Token Stream Event",
    ),
]


@dataclass
class Setup:
    library: Library
    pipe: Pipeline
    client: openai.OpenAI
    async_client: openai.AsyncOpenAI

    def root_attributes(self, name: str = "request") -> dict[str, Any]:
        return dict(self.pipe.span(name).attributes or {})

    def model_spans(self) -> list[ReadableSpan]:
        return [s for s in self.pipe.finished() if (s.attributes or {}).get("latency_budget.stage") == "model_call"]


@pytest.fixture(params=LIBRARIES, ids=lambda library: library.name)
def setup(
    request: pytest.FixtureRequest, fake_openai: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Setup]:
    """A budget pipeline with no stages, one real instrumentation on, and clients of the fake server."""
    library: Library = request.param
    for name in ("NO_PROXY", "no_proxy"):  # loopback never goes through a proxy the machine may set
        monkeypatch.setenv(name, "127.0.0.1,localhost")
    pipe = pipeline(BUDGETS)
    undo = library.instrument(pipe.provider)
    client = openai.OpenAI(base_url=fake_openai.base_url, api_key="dummy-key", max_retries=0)
    async_client = openai.AsyncOpenAI(base_url=fake_openai.base_url, api_key="dummy-key", max_retries=0)
    try:
        yield Setup(library, pipe, client, async_client)
    finally:
        undo()
        client.close()


def chat(client: openai.OpenAI, *, stream: bool, model: str = MODEL) -> str:
    """One chat completion; a stream is read to its end, as applications do."""
    messages: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    if not stream:
        answer = client.chat.completions.create(model=model, messages=messages)
        return answer.choices[0].message.content or ""
    chunks = client.chat.completions.create(model=model, messages=messages, stream=True)
    return "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_chat_completions_are_model_calls_with_no_stages_configured(setup: Setup, stream: bool) -> None:
    """With only totals in the file, the library's chat span is the request's one model_call."""
    with setup.pipe.tracer.start_as_current_span("request"):
        assert chat(setup.client, stream=stream) == "It is sunny in Paris."
    [model] = setup.model_spans()
    root = setup.root_attributes()
    assert root["latency_budget.stages.model_call.count"] == 1
    assert root["latency_budget.stages.model_call.actual_ms"] == pytest.approx(
        ((model.end_time or 0) - (model.start_time or 0)) / 1e6, abs=US_IN_MS / 2
    )
    assert not any(
        key.startswith(("latency_budget.stages.retrieval", "latency_budget.stages.tool_calls")) for key in root
    )


def test_time_to_first_token_is_read_from_what_the_library_records(setup: Setup) -> None:
    """A streamed completion's first-token event sets the stage's and the request's TTFT; none is made up."""
    with setup.pipe.tracer.start_as_current_span("request"):
        chat(setup.client, stream=True)
    [model] = setup.model_spans()
    request = setup.pipe.span("request")
    root = dict(request.attributes or {})
    start, end = model.start_time or 0, model.end_time or 0
    if setup.library.first_token_event is None:
        # openai-v2 records neither gen_ai.response.time_to_first_chunk nor an event.
        assert "gen_ai.response.time_to_first_chunk" not in (model.attributes or {})
        assert not [event for event in model.events if event.name in FIRST_TOKEN_NAMES]
        assert "latency_budget.total.first_token_ms" not in root
        assert "latency_budget.stages.model_call.worst_first_token_ms" not in root
        return
    [event] = [e for e in model.events if e.name == setup.library.first_token_event]
    assert start <= event.timestamp <= end
    worst = root["latency_budget.stages.model_call.worst_first_token_ms"]
    assert worst == pytest.approx((event.timestamp - start) / 1e6, abs=US_IN_MS / 2)
    request_start = request.start_time or 0
    request_ttft = root["latency_budget.total.first_token_ms"]
    assert request_ttft == pytest.approx((event.timestamp - request_start) / 1e6, abs=US_IN_MS / 2)


def test_non_streamed_completion_has_no_time_to_first_token(setup: Setup) -> None:
    """A completion that arrives whole records no first token, and none is reported."""
    with setup.pipe.tracer.start_as_current_span("request"):
        chat(setup.client, stream=False)
    assert "latency_budget.stages.model_call.worst_first_token_ms" not in setup.root_attributes()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_tool_execution_between_two_completions_is_a_tool_call(setup: Setup, stream: bool) -> None:
    """An agent turn (completion asking for a tool, the tool, a completion with its result): 2 model, 1 tool call."""
    run_tool = setup.library.tool_runner(setup.pipe.provider)
    messages: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    with setup.pipe.tracer.start_as_current_span("request"):
        if stream:
            calls: dict[int, dict[str, str]] = {}
            chunks = setup.client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS, stream=True)
            for chunk in chunks:
                for delta in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
                    entry = calls.setdefault(delta.index, {"id": "", "arguments": ""})
                    entry["id"] = delta.id or entry["id"]
                    entry["arguments"] += (delta.function.arguments if delta.function else None) or ""
            [(call_id, arguments)] = [(c["id"], c["arguments"]) for c in calls.values()]
        else:
            asked = setup.client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
            [tool_call] = asked.choices[0].message.tool_calls or []
            assert tool_call.type == "function"
            call_id, arguments = tool_call.id, tool_call.function.arguments
        result = run_tool(call_id, arguments)
        messages.append(
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": TOOL_NAME, "arguments": arguments}}
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": result})
        answer = setup.client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
    assert answer.choices[0].message.content == "It is sunny in Paris."
    [tool] = [s for s in setup.pipe.finished() if (s.attributes or {}).get("latency_budget.stage") == "tool_calls"]
    shape = dict(tool.attributes or {})
    if setup.library.name == "openai-v2":  # the semconv execute_tool span of the GenAI utils
        assert tool.name == f"execute_tool {TOOL_NAME}"
        assert (shape["gen_ai.operation.name"], shape["gen_ai.tool.name"]) == ("execute_tool", TOOL_NAME)
        assert shape["gen_ai.tool.call.id"] == call_id
    else:
        assert shape["openinference.span.kind"] == "TOOL"
    root = setup.root_attributes()
    assert (root["latency_budget.stages.model_call.count"], root["latency_budget.stages.tool_calls.count"]) == (2, 1)


async def _paired_calls(client: openai.AsyncOpenAI) -> None:
    messages: list[Any] = [{"role": "user", "content": "hi"}]
    await asyncio.gather(
        client.chat.completions.create(model=PAIRED_MODEL, messages=messages),
        client.chat.completions.create(model=PAIRED_MODEL, messages=messages),
    )


def test_completions_gathered_in_one_request_are_parallel(setup: Setup) -> None:
    """Two async completions under asyncio.gather are children of the request and counted as overlapping."""
    tracer = setup.pipe.tracer

    async def handle() -> None:
        with tracer.start_as_current_span("request"):
            await _paired_calls(setup.async_client)

    asyncio.run(handle())
    request = setup.pipe.span("request")
    models = setup.model_spans()
    assert len(models) == 2
    assert {m.parent.span_id if m.parent else None for m in models} == {request.context.span_id}
    root = dict(request.attributes or {})
    assert root["latency_budget.stages.model_call.count"] == 2
    # Both were in flight at once (the server answers neither before it has both): union < sum.
    assert root["latency_budget.stages.model_call.actual_ms"] < root["latency_budget.stages.model_call.busy_ms"]


def test_interleaved_requests_on_one_event_loop_keep_their_own_spans(setup: Setup) -> None:
    """Two requests whose completions are in flight together on one loop each count only their own call."""
    tracer = setup.pipe.tracer
    messages: list[Any] = [{"role": "user", "content": "hi"}]

    async def handle(name: str) -> None:
        with tracer.start_as_current_span(name):
            await setup.async_client.chat.completions.create(model=PAIRED_MODEL, messages=messages)

    async def both() -> None:
        await asyncio.gather(handle("request A"), handle("request B"))

    asyncio.run(both())
    for name in ("request A", "request B"):
        request = setup.pipe.span(name)
        [model] = [m for m in setup.model_spans() if m.parent and m.parent.span_id == request.context.span_id]
        assert model.context.trace_id == request.context.trace_id
        assert dict(request.attributes or {})["latency_budget.stages.model_call.count"] == 1


def test_completions_in_a_thread_pool_with_the_context_passed_are_parallel(setup: Setup) -> None:
    """Completions run in a ThreadPoolExecutor with the caller's context are the request's, and overlap."""
    with setup.pipe.tracer.start_as_current_span("request"), ThreadPoolExecutor(max_workers=2) as pool:
        futures = [
            pool.submit(contextvars.copy_context().run, chat, setup.client, stream=False, model=PAIRED_MODEL)
            for _ in range(2)
        ]
        assert [future.result() for future in futures] == ["It is sunny in Paris."] * 2
    request = setup.pipe.span("request")
    assert {m.parent.span_id if m.parent else None for m in setup.model_spans()} == {request.context.span_id}
    root = dict(request.attributes or {})
    assert root["latency_budget.stages.model_call.count"] == 2
    assert root["latency_budget.stages.model_call.actual_ms"] < root["latency_budget.stages.model_call.busy_ms"]


def test_the_current_span_is_the_request_again_after_the_calls(setup: Setup) -> None:
    """The instrumentation leaves the request's context as it found it (so later spans are attributed right)."""
    with setup.pipe.tracer.start_as_current_span("request") as request:
        chat(setup.client, stream=True)
        assert trace.get_current_span() is request
