"""An agent whose tools are MCP tools on a server in another process, held against what really ran.

The mcp SDK (2.x) traces itself: the client's ``Client`` writes one CLIENT span per request
it sends (``MCP send tools/call get_weather``, with ``mcp.method.name`` ``tools/call`` and
``jsonrpc.request.id``, the OpenTelemetry MCP conventions, and no GenAI key), and puts the
trace context into the request's ``_meta``; the server (``weather_server.py``, a real
``MCPServer`` over stdio in a subprocess) writes a SERVER span per request it handles,
parented on that context. The SDK's tracer is the global one, which the SDK lets a process
set once: the module sets one budget pipeline as the global, and each test starts from an
empty exporter.

One request: the user's async agent loop lists the server's tools, then streams three
model calls from the fake OpenAI server (the real openai client, under OpenLLMetry's OpenAI
instrumentation); the first two ask for two ``get_weather`` calls at once, which the loop
sends to the MCP server together. The yardstick is the truth: the requests the model server
received, the tool runs the server's tool recorded, the instant the answer's first text
chunk was sent.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from opentelemetry import trace
from opentelemetry.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.sdk.trace import ReadableSpan

from ...instrumentation.fake_openai import TOOL_NAME, FakeOpenAIServer, serve
from ...unit.helpers import Pipeline
from ..openai_loop import stream_async
from ..stacks import Outcome, budget_pipeline
from ..truth import Run, assert_first_token_is_the_first_text, overlapped

SERVER = "tests.frameworks.mcp.weather_server"
REPO = Path(__file__).resolve().parents[3]
QUESTION = "What is the weather in Paris and London?"
TOOL_ROUNDS = 2  # model calls that ask for tools before the answer
PARALLEL_TOOLS = 2  # tool calls each of them asks for at once
MODEL_CALLS = TOOL_ROUNDS + 1
SCOPE = "mcp-python-sdk"
CALL_SPAN = f"MCP send tools/call {TOOL_NAME}"


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """The model: two rounds of two parallel tool calls, then the answer; a few ms to each first chunk."""
    with serve() as server:
        server.first_chunk_delay_s = 0.005
        server.tool_calls = PARALLEL_TOOLS
        server.tool_rounds = TOOL_ROUNDS
        yield server


@pytest.fixture(scope="module")
def global_pipe() -> Iterator[Pipeline]:
    """The module's budget pipeline, the process's global tracer provider, OpenLLMetry's OpenAI instrumentation on."""
    pipe = budget_pipeline(max_model_calls=MODEL_CALLS)
    trace.set_tracer_provider(pipe.provider)
    assert trace.get_tracer_provider() is pipe.provider
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=pipe.provider)
    yield pipe
    instrumentor.uninstrument()


@pytest.fixture
def pipe(global_pipe: Pipeline) -> Pipeline:
    """The global pipeline with nothing exported or handed yet, and no trace open."""
    global_pipe.exporter.clear()
    for kept in (global_pipe.handed.started, global_pipe.handed.ending, global_pipe.handed.ended):
        kept.clear()
    assert global_pipe.processor.stats().active_traces == 0
    return global_pipe


def _server(tmp_path: Path) -> StdioServerParameters:
    env = {
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "MCP_TOOL_RUNS": str(tmp_path / "runs.jsonl"),
        "MCP_SERVER_SPANS": str(tmp_path / "spans.jsonl"),
        "MCP_PARALLEL": str(PARALLEL_TOOLS),
    }
    return StdioServerParameters(command=sys.executable, args=["-m", SERVER], env=env, cwd=REPO)


async def _agent(client: Client, model: openai.AsyncOpenAI, question: str) -> str:
    """The user's agent loop: the server's tools offered to the model, its tool calls sent to the server together."""
    listed = await client.list_tools()
    tools = [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description or "", "parameters": t.input_schema},
        }
        for t in listed.tools
    ]
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    while True:
        text, calls = await stream_async(model, messages, tools)
        if not calls:
            return text
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        results = await asyncio.gather(
            *(client.call_tool(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls)
        )
        for call, result in zip(calls, results, strict=True):
            content = " ".join(getattr(block, "text", "") for block in result.content)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})


@pytest.fixture
def outcome(pipe: Pipeline, fake_openai: FakeOpenAIServer, tmp_path: Path) -> Outcome:
    """One request under a ``request`` span: three streamed model calls, two rounds of two MCP tool calls."""
    fake_openai.requests.clear()
    fake_openai.served.clear()

    async def go() -> str:
        model = openai.AsyncOpenAI(base_url=fake_openai.base_url, api_key="dummy-key", max_retries=0)
        async with Client(_server(tmp_path)) as client:
            with pipe.tracer.start_as_current_span("request"):
                return await _agent(client, model, QUESTION)

    assert asyncio.run(go()) == "It is sunny in Paris."
    return Outcome(pipe)


def _tool_runs(tmp_path: Path) -> list[Run]:
    """The runs the MCP server's tool recorded, in the order they ended."""
    lines = (tmp_path / "runs.jsonl").read_text(encoding="utf-8").splitlines()
    runs = [json.loads(line) for line in lines]
    return [Run(TOOL_NAME, r["city"], r["started_ns"], r["ended_ns"]) for r in runs]


def _server_spans(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "spans.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def _attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def test_what_really_ran(outcome: Outcome, fake_openai: FakeOpenAIServer, tmp_path: Path) -> None:
    """The truth the other tests hold the processor to: 3 streamed model calls, 2 rounds of 2 tool runs in parallel."""
    assert [s.body.get("stream") for s in fake_openai.served] == [True] * MODEL_CALLS
    assert [s.first_text_ns is None for s in fake_openai.served] == [True] * TOOL_ROUNDS + [False]
    runs = sorted(_tool_runs(tmp_path), key=lambda r: r.started_ns)
    assert len(runs) == TOOL_ROUNDS * PARALLEL_TOOLS
    for round_index in range(TOOL_ROUNDS):
        assert overlapped(runs[round_index * PARALLEL_TOOLS : (round_index + 1) * PARALLEL_TOOLS])
    outcome.assert_exported_once()


def test_each_tool_call_crossed_to_the_server_under_its_client_span(outcome: Outcome, tmp_path: Path) -> None:
    """The server's `tools/call` spans are children of the client's spans, by the span ids that reached the server."""
    clients = {f"{s.context.span_id:016x}" for s in outcome.request_spans if s.name == CALL_SPAN and s.context}
    served = [s for s in _server_spans(tmp_path) if s["attributes"].get("mcp.method.name") == "tools/call"]
    assert len(clients) == len(_tool_runs(tmp_path))
    assert {s["parent_span_id"] for s in served} == clients
    assert all(s["parent_is_remote"] and s["kind"] == "SERVER" for s in served)


def test_the_mcp_tool_calls_are_tool_calls(outcome: Outcome, tmp_path: Path) -> None:
    """Each `tools/call` the client sent (MCP conventions only) is a tool call; `tools/list` is not."""
    sent = [s for s in outcome.request_spans if (s.instrumentation_scope and s.instrumentation_scope.name) == SCOPE]
    calls = [s for s in sent if _attributes(s).get("mcp.method.name") == "tools/call"]
    assert len(calls) == len(_tool_runs(tmp_path))
    assert {_attributes(s).get("latency_budget.stage") for s in calls} == {"tool_calls"}
    others = [s for s in sent if _attributes(s).get("mcp.method.name") != "tools/call"]
    assert [_attributes(s).get("latency_budget.stage") for s in others] == [None] * len(others)


def test_counts_are_the_real_calls(outcome: Outcome, fake_openai: FakeOpenAIServer, tmp_path: Path) -> None:
    """Per stage, the request counts what really ran: the server's requests, the MCP tool runs."""
    assert outcome.counts() == {"model_call": len(fake_openai.served), "tool_calls": len(_tool_runs(tmp_path))}
    assert outcome.violation_kinds() == []  # max_calls is the real number of model calls


def test_the_first_token_is_the_answers_first_text_chunk(outcome: Outcome, fake_openai: FakeOpenAIServer) -> None:
    """The request's first token is when the server sent the answer's first text, not a tool-call chunk before it."""
    [first_text] = [s.first_text_ns for s in fake_openai.served if s.first_text_ns is not None]
    assert_first_token_is_the_first_text(outcome, first_text)


def test_the_servers_tool_spans_are_tool_calls_in_its_own_trace(outcome: Outcome, tmp_path: Path) -> None:
    """In the server's process, each `tools/call get_weather` SERVER span is a tool call of its budget pipeline."""
    served = [s for s in _server_spans(tmp_path) if s["attributes"].get("mcp.method.name") == "tools/call"]
    assert len(served) == len(_tool_runs(tmp_path))
    assert {s["attributes"].get("latency_budget.stage") for s in served} == {"tool_calls"}
