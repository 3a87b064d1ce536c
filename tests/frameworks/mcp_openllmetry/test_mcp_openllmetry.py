"""An agent whose tools are MCP tools, under OpenLLMetry's MCP instrumentation, held against what really ran.

mcp 1.30 (the last 1.x; OpenLLMetry's opentelemetry-instrumentation-mcp 0.62.4 cannot
instrument mcp 2) writes no spans of its own. OpenLLMetry's instrumentation wraps the
client session's ``send_request``: a ``tools/call`` becomes a ``{tool}.tool`` span
(``traceloop.span.kind`` ``tool``), every other request a ``{method}.mcp`` span, and the
trace context travels in the request's ``_meta``. The server (``weather_server.py``, a real
FastMCP server over stdio in a subprocess) is instrumented too, through a budget pipeline of
its own whose spans the test reads back (OpenLLMetry writes only ``ResponseStreamWriter``
roots there). The instrumentation wraps ``send_request`` for good
(its ``uninstrument`` leaves it wrapped), so the module instruments once, on one pipeline,
and each test starts from an empty exporter.

One request, as in tests/frameworks/mcp: the user's async agent loop lists the server's
tools, streams three model calls from the fake OpenAI server (OpenLLMetry's OpenAI
instrumentation), and sends each round's two ``get_weather`` calls to the server together.
The yardstick is the truth: the requests the model server received, the tool runs the
server's tool recorded, the instant the answer's first text chunk was sent.
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
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from opentelemetry.instrumentation.mcp import McpInstrumentor
from opentelemetry.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.sdk.trace import ReadableSpan

from ...instrumentation.fake_openai import TOOL_NAME, FakeOpenAIServer, serve
from ...unit.helpers import Pipeline
from ..openai_loop import stream_async
from ..stacks import Outcome, budget_pipeline
from ..truth import Run, assert_first_token_is_the_first_text, overlapped

SERVER = "tests.frameworks.mcp_openllmetry.weather_server"
REPO = Path(__file__).resolve().parents[3]
QUESTION = "What is the weather in Paris and London?"
TOOL_ROUNDS = 2  # model calls that ask for tools before the answer
PARALLEL_TOOLS = 2  # tool calls each of them asks for at once
MODEL_CALLS = TOOL_ROUNDS + 1
SCOPE = "opentelemetry.instrumentation.mcp.instrumentation"


@pytest.fixture(scope="module")
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """The model: two rounds of two parallel tool calls, then the answer; a few ms to each first chunk."""
    with serve() as server:
        server.first_chunk_delay_s = 0.005
        server.tool_calls = PARALLEL_TOOLS
        server.tool_rounds = TOOL_ROUNDS
        yield server


@pytest.fixture(scope="module")
def module_pipe() -> Iterator[Pipeline]:
    """The module's budget pipeline, with OpenLLMetry's MCP and OpenAI instrumentations on it."""
    pipe = budget_pipeline(max_model_calls=MODEL_CALLS)
    instrumentors = (McpInstrumentor(), OpenAIInstrumentor())
    for instrumentor in instrumentors:
        instrumentor.instrument(tracer_provider=pipe.provider)
    yield pipe
    for instrumentor in reversed(instrumentors):
        instrumentor.uninstrument()


@pytest.fixture
def pipe(module_pipe: Pipeline) -> Pipeline:
    """The module's pipeline with nothing exported or handed yet, and no trace open."""
    module_pipe.exporter.clear()
    for kept in (module_pipe.handed.started, module_pipe.handed.ending, module_pipe.handed.ended):
        kept.clear()
    assert module_pipe.processor.stats().active_traces == 0
    return module_pipe


def _server(tmp_path: Path) -> StdioServerParameters:
    env = {
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "MCP_TOOL_RUNS": str(tmp_path / "runs.jsonl"),
        "MCP_SERVER_SPANS": str(tmp_path / "spans.jsonl"),
        "MCP_PARALLEL": str(PARALLEL_TOOLS),
    }
    return StdioServerParameters(command=sys.executable, args=["-m", SERVER], env=env, cwd=str(REPO))


async def _agent(session: ClientSession, model: openai.AsyncOpenAI, question: str) -> str:
    """The user's agent loop: the server's tools offered to the model, its tool calls sent to the server together."""
    listed = await session.list_tools()
    tools = [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description or "", "parameters": t.inputSchema},
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
            *(session.call_tool(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls)
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
        async with stdio_client(_server(tmp_path)) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            with pipe.tracer.start_as_current_span("request"):
                return await _agent(session, model, QUESTION)

    assert asyncio.run(go()) == "It is sunny in Paris."
    return Outcome(pipe)


def _tool_runs(tmp_path: Path) -> list[Run]:
    """The runs the MCP server's tool recorded."""
    lines = (tmp_path / "runs.jsonl").read_text(encoding="utf-8").splitlines()
    return [Run(TOOL_NAME, r["city"], r["started_ns"], r["ended_ns"]) for r in map(json.loads, lines)]


def _server_spans(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "spans.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] if path.exists() else []


def _attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _client_tool_calls(outcome: Outcome) -> list[ReadableSpan]:
    return [
        s
        for s in outcome.request_spans
        if s.instrumentation_scope
        and s.instrumentation_scope.name == SCOPE
        and _attributes(s).get("traceloop.span.kind") == "tool"
    ]


def test_what_really_ran(outcome: Outcome, fake_openai: FakeOpenAIServer, tmp_path: Path) -> None:
    """The truth the other tests hold the processor to: 3 streamed model calls, 2 rounds of 2 tool runs in parallel."""
    assert [s.body.get("stream") for s in fake_openai.served] == [True] * MODEL_CALLS
    assert [s.first_text_ns is None for s in fake_openai.served] == [True] * TOOL_ROUNDS + [False]
    runs = sorted(_tool_runs(tmp_path), key=lambda r: r.started_ns)
    assert len(runs) == TOOL_ROUNDS * PARALLEL_TOOLS
    for round_index in range(TOOL_ROUNDS):
        assert overlapped(runs[round_index * PARALLEL_TOOLS : (round_index + 1) * PARALLEL_TOOLS])
    assert len(_client_tool_calls(outcome)) == len(runs)  # one client span per tools/call sent
    outcome.assert_exported_once()


def test_the_mcp_tool_calls_are_tool_calls(outcome: Outcome, tmp_path: Path) -> None:
    """Each `{tool}.tool` span the client wrote is a tool call; its `tools/list.mcp` span is not."""
    assert {_attributes(s).get("latency_budget.stage") for s in _client_tool_calls(outcome)} == {"tool_calls"}
    others = [
        s
        for s in outcome.request_spans
        if s.instrumentation_scope and s.instrumentation_scope.name == SCOPE and s not in _client_tool_calls(outcome)
    ]
    assert [_attributes(s).get("latency_budget.stage") for s in others] == [None] * len(others)


def test_counts_are_the_real_calls(outcome: Outcome, fake_openai: FakeOpenAIServer, tmp_path: Path) -> None:
    """Per stage, the request counts what really ran: the server's requests, the MCP tool runs."""
    assert outcome.counts() == {"model_call": len(fake_openai.served), "tool_calls": len(_tool_runs(tmp_path))}
    assert outcome.violation_kinds() == []  # max_calls is the real number of model calls


def test_the_first_token_is_the_answers_first_text_chunk(outcome: Outcome, fake_openai: FakeOpenAIServer) -> None:
    """The request's first token is when the server sent the answer's first text, not a tool-call chunk before it."""
    [first_text] = [s.first_text_ns for s in fake_openai.served if s.first_text_ns is not None]
    assert_first_token_is_the_first_text(outcome, first_text)


def test_the_servers_own_spans_are_neither_calls_nor_requests(outcome: Outcome, tmp_path: Path) -> None:
    """The server writes only `ResponseStreamWriter` roots (no trace context, no tool name): none is staged or judged.

    OpenLLMetry's server-side tool spans wrap the standalone ``fastmcp`` package, not the
    SDK's ``mcp.server.fastmcp``: the truth of the server's tool runs is its tool's record.
    """
    served = _server_spans(tmp_path)
    assert {s["name"] for s in served} == {"ResponseStreamWriter"}
    assert len(served) >= len(_tool_runs(tmp_path))  # one per response at least: every tools/call answered
    for span in served:
        assert span["parent_span_id"] is None
        assert "latency_budget.stage" not in span["attributes"]
        assert "latency_budget.verdict" not in span["attributes"]
