"""The MCP server of tests/frameworks/mcp_openllmetry: a real FastMCP server (mcp 1.x) over stdio, in a subprocess.

Its one tool, ``get_weather``, is the truth of what ran: each run appends one JSON line
(``city``, ``started_ns``, ``ended_ns``, ``time.time_ns()``) to the file named by
``MCP_TOOL_RUNS``. The calls of one round wait for each other (``MCP_PARALLEL`` of them), so
a round's calls were certainly in flight together. OpenLLMetry's MCP instrumentation traces
the server, through a budget pipeline whose spans are written, one JSON object a line, to
the file named by ``MCP_SERVER_SPANS``. Run as
``python -m tests.frameworks.mcp_openllmetry.weather_server`` from the repository's root.
"""

from __future__ import annotations

import asyncio
import json
import os
import time

from opentelemetry import trace
from opentelemetry.instrumentation.mcp import McpInstrumentor

from ..server_spans import budget_provider

RUNS = os.environ.get("MCP_TOOL_RUNS", os.devnull)
SPANS = os.environ.get("MCP_SERVER_SPANS", os.devnull)
PARALLEL = int(os.environ.get("MCP_PARALLEL", "1"))

provider = budget_provider(SPANS)
trace.set_tracer_provider(provider)
McpInstrumentor().instrument(tracer_provider=provider)

from mcp.server.fastmcp import FastMCP  # noqa: E402  (after the instrumentation, as its documentation sets it up)

server = FastMCP("weather")
_together: asyncio.Barrier | None = None


@server.tool()
async def get_weather(city: str) -> str:
    """The weather in a city."""
    global _together
    started = time.time_ns()
    if _together is None:
        _together = asyncio.Barrier(PARALLEL)
    await asyncio.wait_for(_together.wait(), timeout=30)
    ended = time.time_ns()
    with open(RUNS, "a", encoding="utf-8") as out:
        out.write(json.dumps({"city": city, "started_ns": started, "ended_ns": ended}) + "\n")
    return f"sunny in {city}"


if __name__ == "__main__":
    try:
        server.run("stdio")
    finally:
        provider.shutdown()
